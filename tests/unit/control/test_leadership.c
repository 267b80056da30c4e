/* test_leadership.c - control/leadership.h over one data folder: a control
 * opened as a standby runs no pass and no timer; taking the lock makes it
 * the leader, with a fresh grace period for the workers the store knows;
 * another standby then learns the leader's URL and stays a standby. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../api/api_harness.h"
#include "control/leadership.h"
#include "control/service.h"
#include "control/tick.h"
#include "control/workers.h"

/* A second control on the harness's data folder, opened as a standby. */
static struct control *standby_of(struct harness *h)
{
    struct control *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->cfg = h->ctl.cfg;
    c->cfg.standby = true;
    struct store *s;
    char err[256];
    assert_int_equal(setup_open_store(c->cfg.data_dir, &s, err, sizeof err), 0);
    assert_int_equal(control_open(c, s, err, sizeof err), 0);
    return c;
}

static void close_control(struct control *c)
{
    leadership_close(c);
    control_close(c);
    free(c);
}

static const char *state_now(struct control *c, const char *name, int64_t *heartbeat_ms)
{
    static struct store_worker w;
    assert_int_equal(store_worker_get(c->store, name, &w), ERR_OK);
    if (heartbeat_ms)
        *heartbeat_ms = w.last_heartbeat_ms;
    return w.state;
}

static void standby_then_leader(void **state)
{
    (void)state;
    struct harness *h = h_new(); /* h->ctl: alone on its store, it leads */
    assert_true(control_leads(&h->ctl));
    struct store_worker w = {.cpus = 2, .mem_bytes = 1 << 30, .price_per_hour = 0.4};
    strcpy(w.name, "w1");
    strcpy(w.class_, "on-demand");
    assert_int_equal(control_worker_register(&h->ctl, &w), ERR_OK);

    char err[256];
    struct control *b = standby_of(h);
    assert_false(control_leads(b));
    /* No pass and no timer in a standby. */
    char job[IDS_MAX];
    assert_int_equal(sched_link_pass(b, "w1", job), ERR_UNAVAILABLE);
    assert_int_equal(atomic_load(&b->metrics.passes), 0);
    int64_t far = clock_now_ms() + 3600 * 1000;
    for (long t = 1; t <= 5; t++)
        control_tick(b, far, t);
    assert_string_equal(state_now(b, "w1", NULL), "active");
    assert_int_equal(atomic_load(&b->metrics.passes), 0);

    /* It takes the lock of the data folder: it leads, and the worker's
     * grace period starts again. */
    int64_t before;
    state_now(b, "w1", &before);
    assert_int_equal(leadership_open(b, b->cfg.data_dir, "http://b:1", err, sizeof err), 0);
    int64_t t0 = clock_now_ms();
    assert_int_equal(control_leadership_step(b), LEADERSHIP_TAKEN);
    assert_true(control_leads(b));
    int64_t after;
    state_now(b, "w1", &after);
    assert_true(after >= t0 && after >= before);
    assert_int_equal(control_leadership_step(b), LEADERSHIP_SAME);
    char url[256];
    assert_false(leadership_leader_url(b, url, sizeof url)); /* it is the leader */

    /* A third serve stands by and knows where the leader is. */
    struct control *c = standby_of(h);
    assert_int_equal(leadership_open(c, c->cfg.data_dir, "http://c:2", err, sizeof err), 0);
    assert_int_equal(control_leadership_step(c), LEADERSHIP_SAME);
    assert_false(control_leads(c));
    assert_true(leadership_leader_url(c, url, sizeof url));
    assert_string_equal(url, "http://b:1");

    /* The leader's timers run: the silent worker is lost. */
    control_tick(b, far, 1);
    assert_string_equal(state_now(b, "w1", NULL), "lost");

    /* The leader goes: the standby takes over. */
    close_control(b);
    assert_int_equal(control_leadership_step(c), LEADERSHIP_TAKEN);
    assert_true(control_leads(c));
    close_control(c);
    h_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(standby_then_leader),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
