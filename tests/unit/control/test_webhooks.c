/* test_webhooks.c - the events a job change raises (webhook_events_hook)
 * in OpenAI's shape, and the sender's back-off (webhook_next_try_ms). The
 * delivery itself is proven end to end in tests/integration/webhooks.test.mjs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "control/webhook_delivery.h"
#include "control/webhook_events.h"
#include "store/store_writes.h"

static json_t *body(const struct store_writes *w, int i)
{
    json_t *o = json_loads(w->webhook_events[i].body, 0, NULL);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "id")),
                        w->webhook_events[i].event_id);
    assert_int_equal(strncmp(w->webhook_events[i].event_id, "evt_", 4), 0);
    assert_string_equal(json_string_value(json_object_get(o, "object")), "event");
    assert_string_equal(json_string_value(json_object_get(o, "type")), w->webhook_events[i].type);
    assert_true(json_integer_value(json_object_get(o, "created_at")) > 1700000000);
    assert_string_equal(json_string_value(json_object_get(json_object_get(o, "data"), "id")),
                        "ftjob-abc");
    return o;
}

static void a_status_change_and_the_end(void **state)
{
    (void)state;
    struct store_writes w = {0};
    struct store_job j = {0};
    strcpy(j.id, "ftjob-abc");
    j.status = JOB_RUNNING;
    assert_int_equal(webhook_events_hook(JOB_RUNNING, &j, &w, NULL), ERR_OK);
    assert_int_equal(w.n_webhook_events, 0); /* no change, no event */

    j.status = JOB_SUCCEEDED;
    assert_int_equal(webhook_events_hook(JOB_RUNNING, &j, &w, NULL), ERR_OK);
    assert_int_equal(w.n_webhook_events, 2);
    assert_string_equal(w.webhook_events[0].type, "alallo.fine_tuning.job.status");
    json_t *o = body(&w, 0);
    json_t *data = json_object_get(o, "data");
    assert_string_equal(json_string_value(json_object_get(data, "status")), "succeeded");
    assert_string_equal(json_string_value(json_object_get(data, "previous_status")), "running");
    json_decref(o);
    assert_string_equal(w.webhook_events[1].type, "fine_tuning.job.succeeded");
    o = body(&w, 1);
    assert_int_equal(json_object_size(json_object_get(o, "data")), 1);
    json_decref(o);
    assert_string_not_equal(w.webhook_events[0].event_id, w.webhook_events[1].event_id);

    store_writes_reset(&w);
    j.status = JOB_FAILED;
    assert_int_equal(webhook_events_hook(JOB_RUNNING, &j, &w, NULL), ERR_OK);
    assert_string_equal(w.webhook_events[1].type, "fine_tuning.job.failed");
    store_writes_reset(&w);
    j.status = JOB_CANCELLED;
    assert_int_equal(webhook_events_hook(JOB_CANCELLING, &j, &w, NULL), ERR_OK);
    assert_string_equal(w.webhook_events[1].type, "fine_tuning.job.cancelled");
    store_writes_free(&w);
}

static void a_checkpoint(void **state)
{
    (void)state;
    struct store_writes w = {0};
    struct store_job j = {0};
    strcpy(j.id, "ftjob-abc");
    j.status = JOB_RUNNING;
    struct store_checkpoint k = {.step = 20, .train_loss = 0.75};
    assert_int_equal(store_writes_checkpoint(&w, &k), ERR_OK);
    assert_int_equal(webhook_events_hook(JOB_RUNNING, &j, &w, NULL), ERR_OK);
    assert_int_equal(w.n_webhook_events, 1);
    assert_string_equal(w.webhook_events[0].type, "alallo.fine_tuning.job.checkpoint");
    json_t *o = body(&w, 0);
    json_t *data = json_object_get(o, "data");
    assert_int_equal(json_integer_value(json_object_get(data, "step")), 20);
    assert_true(json_number_value(json_object_get(data, "train_loss")) == 0.75);
    json_decref(o);
    assert_true(webhook_event_type_known("fine_tuning.job.failed"));
    assert_false(webhook_event_type_known("fine_tuning.job"));
    store_writes_free(&w);
}

static void back_off_doubles_to_an_hour_and_gives_up_after_a_day(void **state)
{
    (void)state;
    int64_t t0 = 1000000;
    assert_int_equal(webhook_next_try_ms(1, t0, t0), t0 + WEBHOOK_RETRY_BASE_MS);
    assert_int_equal(webhook_next_try_ms(2, t0, t0), t0 + 2 * WEBHOOK_RETRY_BASE_MS);
    assert_int_equal(webhook_next_try_ms(5, t0, t0), t0 + 16 * WEBHOOK_RETRY_BASE_MS);
    assert_int_equal(webhook_next_try_ms(40, t0, t0), t0 + WEBHOOK_RETRY_MAX_MS);
    int64_t late = t0 + WEBHOOK_GIVE_UP_MS - 1;
    assert_int_equal(webhook_next_try_ms(30, t0, late), t0 + WEBHOOK_GIVE_UP_MS);
    assert_int_equal(webhook_next_try_ms(31, t0, t0 + WEBHOOK_GIVE_UP_MS), -1);
}

static struct store_delivery delivery(int64_t seq, const char *account, const char *webhook)
{
    struct store_delivery d = {.seq = seq};
    strcpy(d.account, account);
    strcpy(d.webhook, webhook);
    return d;
}

/* The noisy neighbour: acct-a has 40 due deliveries over 20 endpoints
 * before acct-b's one; acct-a gets WEBHOOK_PER_ACCOUNT tries, acct-b its
 * own at once. */
static void an_account_gets_its_share_and_no_more(void **state)
{
    (void)state;
    struct store_delivery due[41];
    char wh[IDS_MAX];
    for (int i = 0; i < 40; i++) {
        snprintf(wh, sizeof wh, "wh-a%d", i % 20);
        due[i] = delivery(i + 1, "acct-a", wh);
    }
    due[40] = delivery(41, "acct-b", "wh-b");
    int pick[41];
    int n = webhook_pick(due, 41, NULL, 0, pick);
    assert_int_equal(n, WEBHOOK_PER_ACCOUNT + 1);
    for (int i = 0; i < WEBHOOK_PER_ACCOUNT; i++)
        assert_int_equal(pick[i], i);
    assert_int_equal(pick[WEBHOOK_PER_ACCOUNT], 40);

    /* with acct-a's share in flight, only acct-b's is started */
    const struct store_delivery *flying[WEBHOOK_PER_ACCOUNT];
    for (int i = 0; i < WEBHOOK_PER_ACCOUNT; i++)
        flying[i] = &due[i];
    n = webhook_pick(due, 41, flying, WEBHOOK_PER_ACCOUNT, pick);
    assert_int_equal(n, 1);
    assert_int_equal(pick[0], 40);
}

static void an_endpoint_and_the_server_have_bounds_too(void **state)
{
    (void)state;
    /* one endpoint's backlog: WEBHOOK_PER_ENDPOINT of it, then the next endpoint */
    struct store_delivery due[64];
    for (int i = 0; i < 5; i++)
        due[i] = delivery(i + 1, "acct-a", "wh-1");
    due[5] = delivery(6, "acct-a", "wh-2");
    int pick[64];
    int n = webhook_pick(due, 6, NULL, 0, pick);
    assert_int_equal(n, WEBHOOK_PER_ENDPOINT + 1);
    assert_int_equal(pick[0], 0);
    assert_int_equal(pick[1], 1);
    assert_int_equal(pick[2], 5);

    /* a delivery in flight is not started twice */
    const struct store_delivery *flying[1] = {&due[0]};
    n = webhook_pick(due, 6, flying, 1, pick);
    assert_int_equal(n, 2);
    assert_int_equal(pick[0], 1);
    assert_int_equal(pick[1], 5);

    /* 64 accounts due at once: WEBHOOK_IN_FLIGHT_MAX start, in order */
    char acct[IDS_MAX];
    for (int i = 0; i < 64; i++) {
        snprintf(acct, sizeof acct, "acct-%d", i);
        due[i] = delivery(i + 1, acct, acct);
    }
    n = webhook_pick(due, 64, NULL, 0, pick);
    assert_int_equal(n, WEBHOOK_IN_FLIGHT_MAX);
    assert_int_equal(pick[WEBHOOK_IN_FLIGHT_MAX - 1], WEBHOOK_IN_FLIGHT_MAX - 1);
    n = webhook_pick(due, 64, flying, 1, pick);
    assert_int_equal(n, WEBHOOK_IN_FLIGHT_MAX - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_status_change_and_the_end),
        cmocka_unit_test(a_checkpoint),
        cmocka_unit_test(back_off_doubles_to_an_hour_and_gives_up_after_a_day),
        cmocka_unit_test(an_account_gets_its_share_and_no_more),
        cmocka_unit_test(an_endpoint_and_the_server_have_bounds_too),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
