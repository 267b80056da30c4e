/* test_wandb_batch.c - what one W&B post of a job carries (wandb_batch.h):
 * metrics lines after the cursor, oldest first; events past the job's own
 * count as read are left for the next read (else a job's end seen in the
 * events but not yet in the job would leave its run never complete). The
 * posting itself is proven in tests/integration/wandb.test.mjs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "control/wandb_batch.h"
#include "core/job.h"

#define N_EVENTS 8

/* Events 1..n of a job, newest first: odd ones are metrics of step seq,
 * even ones messages; the last is the end's message. */
static int events(struct store_event *ev, int n)
{
    memset(ev, 0, sizeof *ev * (size_t)n);
    for (int i = 0; i < n; i++) {
        struct store_event *e = &ev[n - 1 - i];
        e->seq = i + 1;
        e->created_ms = 1800000000000LL + i;
        if (e->seq % 2) {
            strcpy(e->type, "metrics");
            snprintf(e->data, sizeof e->data, "{\"step\":%d,\"train_loss\":%d.5}", i + 1, i);
        } else {
            strcpy(e->type, "message");
            strcpy(e->message, "a message");
        }
    }
    return n;
}

static int64_t step_of(const struct wandb_batch *b, size_t i)
{
    json_t *line = json_loads(json_string_value(json_array_get(b->lines, i)), 0, NULL);
    assert_non_null(line);
    int64_t step = json_integer_value(json_object_get(line, "_step"));
    assert_true(json_real_value(json_object_get(line, "_timestamp")) > 1.7e9);
    assert_non_null(json_object_get(line, "train_loss"));
    json_decref(line);
    return step;
}

static void lines_after_the_cursor_oldest_first(void **state)
{
    (void)state;
    struct store_event ev[N_EVENTS];
    int n = events(ev, N_EVENTS);
    struct store_job j = {0};
    j.status = JOB_RUNNING;
    j.event_seq = N_EVENTS;
    struct wandb_batch b;
    assert_true(wandb_batch_plan(&j, 2, ev, n, &b));
    assert_int_equal(json_array_size(b.lines), 3); /* steps 3, 5, 7 */
    assert_int_equal(step_of(&b, 0), 3);
    assert_int_equal(step_of(&b, 2), 7);
    assert_int_equal(b.last_seq, N_EVENTS);
    assert_false(b.complete); /* still running */
    json_decref(b.lines);

    j.status = JOB_SUCCEEDED;
    assert_true(wandb_batch_plan(&j, N_EVENTS, ev, n, &b));
    assert_int_equal(json_array_size(b.lines), 0);
    assert_true(b.complete); /* ended, nothing new: the last post */
    json_decref(b.lines);
}

static void events_past_the_job_as_read_wait(void **state)
{
    (void)state;
    struct store_event ev[N_EVENTS];
    int n = events(ev, N_EVENTS);
    /* the job was read running with 5 events; by the events' read it had
     * ended with 8: the cursor stops at 5 and the run is not complete */
    struct store_job j = {0};
    j.status = JOB_RUNNING;
    j.event_seq = 5;
    struct wandb_batch b;
    assert_true(wandb_batch_plan(&j, 0, ev, n, &b));
    assert_int_equal(json_array_size(b.lines), 3); /* steps 1, 3, 5 */
    assert_int_equal(b.last_seq, 5);
    assert_false(b.complete);
    json_decref(b.lines);

    /* the next read shows the end: the rest goes, marked complete */
    j.status = JOB_FAILED;
    j.event_seq = N_EVENTS;
    assert_true(wandb_batch_plan(&j, 5, ev, n, &b));
    assert_int_equal(json_array_size(b.lines), 1); /* step 7 */
    assert_int_equal(step_of(&b, 0), 7);
    assert_int_equal(b.last_seq, N_EVENTS);
    assert_true(b.complete);
    json_decref(b.lines);
}

static void an_ended_job_is_complete_only_at_its_last_event(void **state)
{
    (void)state;
    struct store_event ev[N_EVENTS];
    /* only the first 4 events fit the read (a post carries a bounded
     * number); the job has ended with 8 */
    events(ev, N_EVENTS);
    struct store_job j = {0};
    j.status = JOB_SUCCEEDED;
    j.event_seq = N_EVENTS;
    struct wandb_batch b;
    assert_true(wandb_batch_plan(&j, 0, ev + (N_EVENTS - 4), 4, &b));
    assert_int_equal(b.last_seq, 4);
    assert_false(b.complete);
    json_decref(b.lines);
}

static void lines_without_a_step_are_skipped(void **state)
{
    (void)state;
    struct store_event e = {0};
    e.seq = 1;
    strcpy(e.type, "metrics");
    strcpy(e.data, "{\"peak_memory_bytes\":123}");
    assert_null(wandb_history_line(&e));
    strcpy(e.data, "{\"step\":4,\"train_loss\":1.25,\"phase\":\"x\"}");
    json_t *s = wandb_history_line(&e);
    assert_non_null(s);
    json_t *line = json_loads(json_string_value(s), 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(line, "_step")), 4);
    assert_null(json_object_get(line, "phase")); /* numbers only */
    assert_null(json_object_get(line, "step"));
    json_decref(line);
    json_decref(s);
    strcpy(e.type, "message");
    assert_null(wandb_history_line(&e));
}

/* Each segment of the file_stream URL is percent-encoded, so that no name
 * (an entity the server answered, a job stored before the name rule) can
 * leave its segment; "." and ".." alone are refused. */
static void stream_url_encodes_every_segment(void **state)
{
    (void)state;
    char url[256];
    assert_true(wandb_stream_url("http://127.0.0.1:9", "my-team", "p_1.x", "ftjob-abc", url,
                                 sizeof url));
    assert_string_equal(url, "http://127.0.0.1:9/files/my-team/p_1.x/ftjob-abc/file_stream");
    assert_true(wandb_stream_url("http://h", "a/b", "../../../graphql?x=", "r#1 \n%", url,
                                 sizeof url));
    assert_string_equal(url, "http://h/files/a%2Fb/..%2F..%2F..%2Fgraphql%3Fx%3D/r%231%20%0A%25/"
                             "file_stream");
    assert_false(wandb_stream_url("http://h", "..", "p", "r", url, sizeof url));
    assert_false(wandb_stream_url("http://h", "e", ".", "r", url, sizeof url));
    assert_false(wandb_stream_url("http://h", "e", "p", "", url, sizeof url));
    char small[32];
    assert_false(wandb_stream_url("http://h", "e", "pppppppppppppppp", "r", small, sizeof small));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lines_after_the_cursor_oldest_first),
        cmocka_unit_test(events_past_the_job_as_read_wait),
        cmocka_unit_test(an_ended_job_is_complete_only_at_its_last_event),
        cmocka_unit_test(lines_without_a_step_are_skipped),
        cmocka_unit_test(stream_url_encodes_every_segment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
