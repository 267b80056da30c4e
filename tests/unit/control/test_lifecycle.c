/* test_lifecycle.c - the job lifecycle over the worker protocol, driven
 * through the router as a worker would: claim, trainer events, finish,
 * fencing, cancel, drain, lost workers, the failure messages, billing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <fcntl.h>
#include <pthread.h>
#include <time.h>

#include "control/checkpoint_models.h"
#include "control/deadlines.h"
#include "control/lifecycle.h"
#include "control/sched_link.h"
#include "core/fs.h"
#include "../api/api_harness.h"

static void register_worker_at(struct harness *h, const char *name, const char *mem,
                               double price, double flops)
{
    char body[300];
    snprintf(body, sizeof body,
             "{\"name\":\"%s\",\"cpus\":2,\"mem_bytes\":%s,\"accelerator\":\"cpu\","
             "\"price_per_hour\":%g,\"class\":\"on-demand\",\"speed\":{\"tokens_per_s\":1000,"
             "\"flops\":%g}}",
             name, mem, price, flops);
    struct reply r = h_call(h, "POST", "/internal/workers/register", NULL, h->srv.worker_token,
                            body);
    assert_int_equal(r.status, 200);
    assert_int_equal(json_integer_value(json_object_get(r.json, "heartbeat_s")), 2);
    reply_free(&r);
    fleet_invalidate(h->srv.ctl);
}

static void register_worker(struct harness *h, const char *name, const char *mem, double price)
{
    register_worker_at(h, name, mem, price, 1e9);
}

/* A job of `key` that trains `model`. */
static char *new_job_of(struct harness *h, const char *key, const char *model, const char *extra)
{
    struct reply r = h_upload(h, key, "train.jsonl", SAMPLE_JSONL);
    char body[1024];
    snprintf(body, sizeof body,
             "{\"model\":\"%s\",\"training_file\":\"%s\",\"hyperparameters\":{\"n_epochs\":10,"
             "\"batch_size\":1}%s}",
             model, h_str(r.json, "id"), extra ? extra : "");
    reply_free(&r);
    r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, key, body);
    assert_int_equal(r.status, 200);
    char *id = strdup(h_str(r.json, "id"));
    reply_free(&r);
    return id;
}

static char *new_job(struct harness *h, const char *key, const char *extra)
{
    return new_job_of(h, key, "tiny", extra);
}

struct claim {
    char attempt[64];
    char job[64];
    long long fence;
    long resume_step; /* the spec's; -1 when it names none */
    char checkpoint_dir[1024];
    char resume_from[1024]; /* the spec's; "" when null */
};

/* Claims work for `worker`; false on 204. */
static bool claim(struct harness *h, const char *worker, struct claim *c)
{
    char path[128];
    snprintf(path, sizeof path, "/internal/workers/%s/claim", worker);
    struct reply r = h_call(h, "POST", path, NULL, h->srv.worker_token, "{}");
    if (r.status == 204) {
        reply_free(&r);
        return false;
    }
    assert_int_equal(r.status, 200);
    snprintf(c->attempt, sizeof c->attempt, "%s", h_str(r.json, "attempt_id"));
    snprintf(c->job, sizeof c->job, "%s", h_str(r.json, "job_id"));
    c->fence = json_integer_value(json_object_get(r.json, "fence"));
    json_t *spec = json_object_get(r.json, "spec");
    assert_non_null(strstr(h_str(spec, "model_dir"), "/models/tiny"));
    assert_string_equal(h_str(spec, "train_file_name"), "train.jsonl");
    assert_non_null(strstr(h_str(spec, "checkpoint_dir"), c->job));
    assert_int_equal(json_integer_value(json_object_get(spec, "max_steps")), 30);
    assert_null(json_object_get(spec, "threads"));
    json_t *rs = json_object_get(spec, "resume_step");
    c->resume_step = json_is_integer(rs) ? (long)json_integer_value(rs) : -1;
    snprintf(c->checkpoint_dir, sizeof c->checkpoint_dir, "%s", h_str(spec, "checkpoint_dir"));
    const char *from = json_string_value(json_object_get(spec, "resume_from"));
    snprintf(c->resume_from, sizeof c->resume_from, "%s", from ? from : "");
    /* Each attempt writes its own folder: DATA/jobs/JOB/attempts/ATT/checkpoints. */
    char own[256];
    snprintf(own, sizeof own, "/jobs/%s/attempts/%s/checkpoints", c->job, c->attempt);
    const char *at = strstr(c->checkpoint_dir, own);
    assert_non_null(at);
    assert_string_equal(at, own);
    reply_free(&r);
    return true;
}

/* Posts trainer events; returns the HTTP status and the stop answer. */
static int events(struct harness *h, const struct claim *c, long long fence, const char *evs,
                  char *stop, size_t stop_cap)
{
    char path[128], body[4096];
    snprintf(path, sizeof path, "/internal/attempts/%s/events", c->attempt);
    snprintf(body, sizeof body, "{\"fence\":%lld,\"events\":[%s]}", fence, evs);
    struct reply r = h_call(h, "POST", path, NULL, h->srv.worker_token, body);
    int status = r.status;
    if (stop) {
        const char *s = h_str(r.json, "stop");
        snprintf(stop, stop_cap, "%s", s ? s : "");
    }
    reply_free(&r);
    return status;
}

static int finish(struct harness *h, const struct claim *c, long long fence, const char *rest)
{
    char path[128], body[1024];
    snprintf(path, sizeof path, "/internal/attempts/%s/finish", c->attempt);
    snprintf(body, sizeof body, "{\"fence\":%lld,%s}", fence, rest);
    struct reply r = h_call(h, "POST", path, NULL, h->srv.worker_token, body);
    int status = r.status;
    reply_free(&r);
    return status;
}

static json_t *job(struct harness *h, const char *key, const char *id)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s", id);
    struct reply r = h_call(h, "GET", path, NULL, key, NULL);
    assert_int_equal(r.status, 200);
    json_t *j = json_incref(r.json);
    reply_free(&r);
    return j;
}

static long progress(json_t *j, const char *field)
{
    return (long)json_integer_value(json_object_get(json_object_get(j, "progress"), field));
}

static const char *log_of(struct harness *h, const char *id, char *buf, size_t cap)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/log", id);
    struct reply r = h_call(h, "GET", path, NULL, h->key, NULL);
    snprintf(buf, cap, "%s", r.body);
    reply_free(&r);
    return buf;
}

#define STARTED "{\"event\":\"started\",\"t\":0.1,\"step\":0,\"max_steps\":30,\"resumed_from\":null}"

static void succeeds_with_log_checkpoints_and_price(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "w1", "8000000000", 3.6);
    char *id = new_job(h, h->key, NULL);
    json_t *j = job(h, h->key, id);
    assert_string_equal(h_str(j, "message"), "Starting");
    json_decref(j);
    struct claim c;
    assert_true(claim(h, "w1", &c));
    assert_string_equal(c.job, id);
    assert_int_equal(c.fence, 1);
    struct claim none;
    assert_false(claim(h, "w1", &none)); /* one attempt at a time */

    char stop[16];
    assert_int_equal(events(h, &c, c.fence, STARTED, stop, sizeof stop), 200);
    assert_string_equal(stop, "");
    j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "running");
    assert_true(json_is_null(json_object_get(j, "message")));
    assert_string_equal(h_str(json_object_get(j, "time_left"), "basis"), "estimate");
    json_decref(j);
    char buf[4096];
    assert_string_equal(log_of(h, id, buf, sizeof buf),
                        "No log yet. It appears once training starts.");

    assert_int_equal(
        events(h, &c, c.fence,
               "{\"event\":\"log\",\"line\":\"step 10/30: loss 2.3114\"},"
               "{\"event\":\"step\",\"t\":0.6,\"step\":10,\"loss\":2.3114,\"lr\":0.0002,"
               "\"tokens_per_s\":50},"
               "{\"event\":\"checkpoint\",\"t\":0.6,\"step\":10,\"path\":\"/x/step-00000010\","
               "\"train_loss\":2.3114},"
               "{\"event\":\"log\",\"line\":\"saved checkpoint at step 10\"},"
               "{\"event\":\"memory\",\"peak_rss_bytes\":300000000},"
               "{\"event\":\"memory\",\"peak_rss_bytes\":400000000,"
               "\"gpu_peak_bytes\":21500000000},"
               "{\"event\":\"future_event\",\"x\":1}",
               NULL, 0),
        200);
    j = job(h, h->key, id);
    assert_int_equal(progress(j, "steps_done"), 10);
    assert_int_equal(progress(j, "percent"), 33);
    assert_string_equal(h_str(json_object_get(j, "time_left"), "basis"), "pace");
    json_decref(j);
    assert_string_equal(log_of(h, id, buf, sizeof buf),
                        "step 10/30: loss 2.3114\nsaved checkpoint at step 10\n");

    assert_int_equal(events(h, &c, c.fence,
                            "{\"event\":\"log\",\"line\":\"training finished: 30 steps\"},"
                            "{\"event\":\"done\",\"step\":30,\"train_loss\":1.2,"
                            "\"model_dir\":\"/x/out/model\",\"adapter_dir\":null}",
                            NULL, 0),
                     200);
    assert_int_equal(finish(h, &c, c.fence, "\"exit_status\":0,\"signal\":null"), 200);
    j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "succeeded");
    assert_int_equal(progress(j, "percent"), 100);
    assert_int_equal(strncmp(h_str(j, "fine_tuned_model"), "ft:tiny:alallo:", 15), 0);
    assert_true(json_is_integer(json_object_get(j, "finished_at")));
    assert_true(json_is_null(json_object_get(j, "time_left")));
    json_t *att = json_array_get(json_object_get(j, "attempts"), 0);
    assert_string_equal(h_str(att, "worker"), "w1");
    assert_string_equal(h_str(att, "status"), "ended");
    assert_int_equal(json_integer_value(json_object_get(att, "end_step")), 30);
    char model[256];
    snprintf(model, sizeof model, "%s", h_str(j, "fine_tuned_model"));
    json_decref(j);

    char path[128];
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/checkpoints", id);
    struct reply r = h_call(h, "GET", path, NULL, h->key, NULL);
    json_t *ck = json_array_get(json_object_get(r.json, "data"), 0);
    assert_string_equal(h_str(ck, "object"), "fine_tuning.job.checkpoint");
    assert_int_equal(json_integer_value(json_object_get(ck, "step_number")), 10);
    assert_true(json_real_value(json_object_get(json_object_get(ck, "metrics"), "train_loss")) >
                2.3);
    assert_non_null(strstr(h_str(ck, "fine_tuned_model_checkpoint"), ":ckpt-step-10"));
    reply_free(&r);
    /* The fine-tuned model is listed for its account only. */
    r = h_call(h, "GET", "/v1/models", NULL, h->key, NULL);
    assert_non_null(strstr(r.body, model));
    reply_free(&r);
    r = h_call(h, "GET", "/v1/models", NULL, h->other_key, NULL);
    assert_null(strstr(r.body, model));
    reply_free(&r);
    /* Metrics events carry the loss. */
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/events", id);
    r = h_call(h, "GET", path, "limit=100", h->key, NULL);
    assert_non_null(strstr(r.body, "\"type\":\"metrics\""));
    assert_non_null(strstr(r.body, "The job has successfully completed"));
    /* Memory: the host's peak, and on a GPU the device's beside it. */
    assert_non_null(strstr(r.body, "\"Peak memory 300.0 MB\""));
    assert_non_null(strstr(r.body, "\"Peak memory 400.0 MB, GPU memory 21500.0 MB\""));
    assert_non_null(strstr(r.body, "\"gpu_peak_bytes\":21500000000"));
    /* Its loss went from 2.31 to 1.2: it learned, and nothing says otherwise. */
    assert_null(strstr(r.body, "The loss did not go down"));
    reply_free(&r);
    /* It ran at 3.6/h: some charge, within the estimate's upper end. */
    r = h_call(h, "GET", "/v1/billing/ledger", NULL, h->key, NULL);
    json_t *rows = json_object_get(r.json, "data");
    assert_true(json_array_size(rows) >= 1);
    reply_free(&r);
    free(id);
    h_free(h);
}

/* A new job claimed by worker w1 (of 8 GB, free), into *c; its id. */
static char *claimed_job(struct harness *h, struct claim *c)
{
    register_worker(h, "w1", "8000000000", 0);
    char *id = new_job(h, h->key, NULL);
    assert_true(claim(h, "w1", c));
    return id;
}

static void stale_fences_change_nothing(void **state)
{
    (void)state;
    struct harness *h = h_new();
    struct claim c;
    char *id = claimed_job(h, &c);
    assert_int_equal(events(h, &c, c.fence, STARTED, NULL, 0), 200);
    assert_int_equal(events(h, &c, c.fence + 5, "{\"event\":\"step\",\"step\":20,\"loss\":1}",
                            NULL, 0),
                     409);
    assert_int_equal(finish(h, &c, c.fence - 1, "\"exit_status\":0"), 409);
    json_t *j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "running");
    assert_int_equal(progress(j, "steps_done"), 0);
    json_decref(j);

    /* The worker is lost: its attempt ends, the job is moved, and the old
     * attempt's late reports are fenced. */
    assert_int_equal(store_worker_set_state(h->srv.ctl->store, "w1", "lost"), ERR_OK);
    assert_int_equal(lifecycle_worker_gone(h->srv.ctl, "w1", "worker lost"), ERR_OK);
    j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "re-scheduling");
    assert_string_equal(h_str(j, "message"), "Re-scheduling");
    json_t *att = json_array_get(json_object_get(j, "attempts"), 0);
    assert_string_equal(h_str(att, "reason"), "worker lost");
    json_decref(j);
    assert_int_equal(events(h, &c, c.fence, "{\"event\":\"step\",\"step\":20,\"loss\":1}", NULL,
                            0),
                     409);
    assert_int_equal(finish(h, &c, c.fence, "\"exit_status\":0"), 409);

    register_worker(h, "w2", "8000000000", 0);
    struct claim c2;
    assert_true(claim(h, "w2", &c2));
    assert_string_equal(c2.job, id);
    assert_int_equal(c2.fence, 2);
    assert_int_equal(events(h, &c2, c2.fence,
                            "{\"event\":\"started\",\"step\":0,\"resumed_from\":null}", NULL, 0),
                     200);
    j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "running");
    assert_int_equal(json_array_size(json_object_get(j, "attempts")), 2);
    json_decref(j);
    free(id);
    h_free(h);
}

static void failures_have_their_messages(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "w1", "8000000000", 1.0);
    char *a = new_job(h, h->key, NULL);
    struct claim c;
    assert_true(claim(h, "w1", &c));
    assert_int_equal(events(h, &c, c.fence,
                            STARTED ",{\"event\":\"error\",\"kind\":\"user\",\"line\":\"line 3 of "
                                    "train.jsonl: missing field \\\"completion\\\"\"}",
                            NULL, 0),
                     200);
    assert_int_equal(finish(h, &c, c.fence,
                            "\"exit_status\":3,\"error_kind\":\"user\",\"line\":\"line 3 of "
                            "train.jsonl: missing field \\\"completion\\\"\""),
                     200);
    json_t *j = job(h, h->key, a);
    assert_string_equal(h_str(j, "status"), "failed");
    assert_string_equal(h_str(j, "message"),
                        "Training failed: line 3 of train.jsonl: missing field \"completion\"");
    assert_string_equal(h_str(json_object_get(j, "error"), "code"), "training_failed");
    json_decref(j);
    char buf[1024];
    assert_non_null(strstr(log_of(h, a, buf, sizeof buf), "missing field"));

    char *b = new_job(h, h->key, NULL);
    assert_true(claim(h, "w1", &c));
    assert_int_equal(events(h, &c, c.fence, STARTED, NULL, 0), 200);
    assert_int_equal(finish(h, &c, c.fence, "\"exit_status\":null,\"signal\":11"), 200);
    j = job(h, h->key, b);
    assert_string_equal(h_str(j, "status"), "failed");
    assert_string_equal(h_str(j, "message"),
                        "Failed. We've been notified and are looking into it.");
    json_decref(j);
    assert_int_equal(atomic_load(&h->srv.ctl->metrics.internal_failures), 1);
    struct reply r = h_call(h, "GET", "/metrics", NULL, NULL, NULL);
    assert_non_null(strstr(r.body, "alallo_internal_failures_total 1\n"));
    assert_non_null(strstr(r.body, "alallo_jobs{status=\"failed\"} 2\n"));
    reply_free(&r);
    /* Failed jobs cost nothing. */
    r = h_call(h, "GET", "/v1/billing/ledger", NULL, h->key, NULL);
    assert_int_equal(json_array_size(json_object_get(r.json, "data")), 0);
    reply_free(&r);

    /* The time limit stops a job, with its message and no charge. */
    char *t = new_job(h, h->key, NULL);
    assert_true(claim(h, "w1", &c));
    assert_int_equal(events(h, &c, c.fence, STARTED, NULL, 0), 200);
    h->srv.ctl->cfg.time_limit_s = 0;
    lifecycle_check_limits(h->srv.ctl, clock_now_ms() + 5000);
    char stop[16];
    assert_int_equal(events(h, &c, c.fence, "{\"event\":\"step\",\"step\":1,\"loss\":1}", stop,
                            sizeof stop),
                     200);
    assert_string_equal(stop, "cancel");
    assert_int_equal(events(h, &c, c.fence,
                            "{\"event\":\"log\",\"line\":\"stopped at step 1 on request\"}",
                            NULL, 0),
                     200);
    assert_int_equal(finish(h, &c, c.fence, "\"exit_status\":4"), 200);
    j = job(h, h->key, t);
    assert_string_equal(h_str(j, "status"), "failed");
    assert_string_equal(h_str(j, "message"), "Stopped: the time limit was reached");
    json_decref(j);
    /* The training log says which stop it was, and where: the page's words,
     * not the trainer's "on request". */
    log_of(h, t, buf, sizeof buf);
    assert_non_null(strstr(buf, "Stopped: the time limit was reached at step 1"));
    assert_null(strstr(buf, "on request"));
    free(a);
    free(b);
    free(t);
    h_free(h);
}

static void cancel_and_drain_a_running_job(void **state)
{
    (void)state;
    struct harness *h = h_new();
    struct claim c;
    char *id = claimed_job(h, &c);
    assert_int_equal(events(h, &c, c.fence, STARTED, NULL, 0), 200);

    /* Drain: the worker is told to move the job; it checkpoints, exits 4,
     * and the job waits for another worker, keeping its progress. */
    struct reply r = h_call(h, "POST", "/v1/workers/w1/drain", NULL, h->key, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(h_str(r.json, "state"), "draining");
    reply_free(&r);
    json_t *moving = job(h, h->key, id);
    assert_string_equal(h_str(moving, "status"), "re-scheduling");
    assert_string_equal(h_str(moving, "message"), "Re-scheduling");
    json_decref(moving);
    r = h_call(h, "POST", "/internal/workers/w1/heartbeat", NULL, h->srv.worker_token,
               "{\"attempt_id\":null,\"fence\":null}");
    assert_string_equal(h_str(r.json, "state"), "draining");
    reply_free(&r);
    char stop[16];
    assert_int_equal(events(h, &c, c.fence,
                            "{\"event\":\"checkpoint\",\"step\":7,\"path\":\"/x\",\"train_loss\":1}",
                            stop, sizeof stop),
                     200);
    assert_string_equal(stop, "move");
    assert_int_equal(finish(h, &c, c.fence, "\"exit_status\":4"), 200);
    json_t *j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "re-scheduling");
    assert_int_equal(progress(j, "steps_done"), 7);
    json_decref(j);
    struct claim again;
    assert_false(claim(h, "w1", &again)); /* draining: no new work */

    register_worker(h, "w2", "8000000000", 0);
    assert_true(claim(h, "w2", &c));
    assert_int_equal(events(h, &c, c.fence,
                            "{\"event\":\"started\",\"step\":7,\"resumed_from\":7}", NULL, 0),
                     200);
    char path[128];
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/cancel", id);
    r = h_call(h, "POST", path, NULL, h->key, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(h_str(r.json, "status"), "cancelling");
    reply_free(&r);
    char hb[160];
    snprintf(hb, sizeof hb, "{\"attempt_id\":\"%s\",\"fence\":%lld}", c.attempt, c.fence);
    r = h_call(h, "POST", "/internal/workers/w2/heartbeat", NULL, h->srv.worker_token, hb);
    assert_string_equal(h_str(r.json, "stop"), "cancel");
    reply_free(&r);
    assert_int_equal(finish(h, &c, c.fence, "\"exit_status\":4"), 200);
    j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "cancelled");
    json_decref(j);
    free(id);
    h_free(h);
}

static void too_big_for_every_worker(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "small", "100000000", 0);
    struct reply r = h_upload(h, h->key, "train.jsonl", SAMPLE_JSONL);
    char body[256];
    /* Batch 3 (the whole set), which sets the memory the worker must have. */
    snprintf(body, sizeof body,
             "{\"model\":\"big\",\"training_file\":\"%s\","
             "\"hyperparameters\":{\"batch_size\":3}}",
             h_str(r.json, "id"));
    reply_free(&r);
    r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, h->key, body);
    assert_int_equal(r.status, 200);
    assert_string_equal(h_str(r.json, "status"), "failed");
    assert_string_equal(h_str(r.json, "message"), "Not available right now.");
    reply_free(&r);
    /* With a worker big enough for 4-bit but not 16-bit, the message says so. */
    register_worker(h, "mid", "20000000000", 0);
    r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, h->key, body);
    assert_string_equal(h_str(r.json, "message"),
                        "Not available right now. Choose a lower precision.");
    reply_free(&r);
    h_free(h);
}

/* The worker a queued 16-bit job fitted leaves; the one left fits it at
 * 4-bit only. While the lost worker may still come back (silent for less
 * than CAPACITY_RETURN_GRACE_S: a busy machine missing heartbeats), the job
 * waits; once it has been silent longer, the scheduling pass fails the
 * job with the same message job creation would give: "Choose a lower
 * precision." */
static void the_pass_fails_a_job_that_fits_only_at_lower_precision(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "huge", "200000000000", 0);
    register_worker(h, "mid", "20000000000", 0);
    struct reply r = h_upload(h, h->key, "train.jsonl", SAMPLE_JSONL);
    char body[256];
    snprintf(body, sizeof body,
             "{\"model\":\"big\",\"training_file\":\"%s\","
             "\"hyperparameters\":{\"batch_size\":3,\"max_seq_len\":256}}",
             h_str(r.json, "id"));
    reply_free(&r);
    r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, h->key, body);
    assert_int_equal(r.status, 200);
    assert_string_equal(h_str(r.json, "status"), "queued");
    char *id = strdup(h_str(r.json, "id"));
    reply_free(&r);
    /* lost a minute after its last heartbeat: it may come back */
    int64_t now = clock_now_ms();
    assert_int_equal(store_worker_heartbeat(h->srv.ctl->store, "huge", now - 60000), ERR_OK);
    assert_int_equal(store_worker_set_state(h->srv.ctl->store, "huge", "lost"), ERR_OK);
    assert_int_equal(lifecycle_worker_gone(h->srv.ctl, "huge", "worker lost"), ERR_OK);
    fleet_invalidate(h->srv.ctl);
    struct claim c;
    assert_false(claim(h, "mid", &c));
    json_t *j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "queued");
    json_decref(j);
    /* a job created now is accepted and waits too */
    r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, h->key, body);
    assert_int_equal(r.status, 200);
    assert_string_equal(h_str(r.json, "status"), "queued");
    char *second = strdup(h_str(r.json, "id"));
    reply_free(&r);
    /* silent past the grace: gone for good, both jobs fail with the reason */
    int64_t gone = now - (int64_t)(CAPACITY_RETURN_GRACE_S * 1000) - 1000;
    assert_int_equal(store_worker_heartbeat(h->srv.ctl->store, "huge", gone), ERR_OK);
    fleet_invalidate(h->srv.ctl);
    assert_false(claim(h, "mid", &c));
    for (int k = 0; k < 2; k++) {
        j = job(h, h->key, k ? second : id);
        assert_string_equal(h_str(j, "status"), "failed");
        assert_string_equal(h_str(j, "message"),
                            "Not available right now. Choose a lower precision.");
        json_decref(j);
    }
    free(second);
    free(id);
    h_free(h);
}

/* An estimate whose running time passes the server's time limit says so
 * before the job starts; one well inside it says nothing. */
static void the_estimate_warns_of_the_time_limit(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "w1", "8000000000", 1.0);
    struct reply u = h_upload(h, h->key, "train.jsonl", SAMPLE_JSONL);
    char body[256];
    snprintf(body, sizeof body, "{\"model\":\"tiny\",\"training_file\":\"%s\"}",
             h_str(u.json, "id"));
    reply_free(&u);
    struct reply r = h_call(h, "POST", "/v1/fine_tuning/estimates", NULL, h->key, body);
    assert_int_equal(r.status, 200);
    assert_true(json_is_null(json_object_get(r.json, "time_limit_message")));
    reply_free(&r);
    h->srv.ctl->cfg.time_limit_s = 1; /* below any running time */
    r = h_call(h, "POST", "/v1/fine_tuning/estimates", NULL, h->key, body);
    assert_int_equal(r.status, 200);
    const char *m = h_str(r.json, "time_limit_message");
    assert_non_null(m);
    assert_non_null(strstr(m, "reach the "));
    assert_non_null(strstr(m, "-hour time limit before it finishes; it would then stop, and "
                              "you pay nothing."));
    reply_free(&r);
    h_free(h);
}

/* Posts a batch with an explicit `first` index. */
static int batch(struct harness *h, const struct claim *c, long first, const char *evs)
{
    char path[128], body[4096];
    snprintf(path, sizeof path, "/internal/attempts/%s/events", c->attempt);
    snprintf(body, sizeof body, "{\"fence\":%lld,\"first\":%ld,\"events\":[%s]}", c->fence, first,
             evs);
    struct reply r = h_call(h, "POST", path, NULL, h->srv.worker_token, body);
    int status = r.status;
    reply_free(&r);
    return status;
}

/* The batch with `done` sent again (its answer lost), before and after
 * the finish: answered 200 with no change, not as a fence (the worker
 * would kill its exiting trainer and send no finish); another fence's
 * batch is still refused. */
static void a_batch_with_done_sent_again_is_no_fence(void **state)
{
    (void)state;
    struct harness *h = h_new();
    struct claim c;
    char *id = claimed_job(h, &c);
    const char *done = STARTED ",{\"event\":\"done\",\"step\":30,\"train_loss\":1.2,"
                       "\"model_dir\":\"/x/out/model\",\"adapter_dir\":null}";
    assert_int_equal(batch(h, &c, 0, done), 200);
    char stop[32];
    assert_int_equal(events(h, &c, c.fence, done, stop, sizeof stop), 200);
    assert_string_equal(stop, "");
    assert_int_equal(batch(h, &c, 0, done), 200);
    assert_int_equal(events(h, &c, c.fence + 1, done, NULL, 0), 409);
    assert_int_equal(finish(h, &c, c.fence, "\"exit_status\":0,\"signal\":null"), 200);
    assert_int_equal(batch(h, &c, 0, done), 200);
    json_t *j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "succeeded");
    assert_int_equal(json_array_size(json_object_get(j, "attempts")), 1);
    assert_int_equal(progress(j, "steps_done"), 30);
    json_decref(j);
    free(id);
    h_free(h);
}

static void resent_batches_and_finishes_are_idempotent(void **state)
{
    (void)state;
    struct harness *h = h_new();
    struct claim c;
    char *id = claimed_job(h, &c);
    const char *two = STARTED ",{\"event\":\"log\",\"line\":\"one\"}";
    assert_int_equal(batch(h, &c, 0, two), 200);
    assert_int_equal(batch(h, &c, 0, two), 200); /* sent again: skipped */
    assert_int_equal(batch(h, &c, 1, "{\"event\":\"log\",\"line\":\"one\"},"
                                      "{\"event\":\"log\",\"line\":\"two\"}"),
                     200); /* overlaps by one */
    char buf[1024];
    assert_string_equal(log_of(h, id, buf, sizeof buf), "one\ntwo\n");
    json_t *j = job(h, h->key, id);
    json_t *att = json_array_get(json_object_get(j, "attempts"), 0);
    assert_int_equal(json_integer_value(json_object_get(att, "start_step")), 0);
    json_decref(j);

    /* The worker shuts down: it acted on "move" and its trainer was killed
     * after the grace period; the job moves, it does not fail. */
    assert_int_equal(finish(h, &c, c.fence, "\"exit_status\":null,\"signal\":9,\"stop\":\"move\""),
                     200);
    j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "re-scheduling");
    json_decref(j);
    /* The same finish again is answered 200 and changes nothing. */
    assert_int_equal(finish(h, &c, c.fence, "\"exit_status\":null,\"signal\":9,\"stop\":\"move\""),
                     200);
    j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "re-scheduling");
    assert_int_equal(json_array_size(json_object_get(j, "attempts")), 1);
    json_decref(j);

    /* A trainer that could not start fails the job on alallo's side. */
    struct claim c2;
    assert_true(claim(h, "w1", &c2));
    assert_int_equal(finish(h, &c2, c2.fence,
                            "\"exit_status\":null,\"signal\":null,\"error_kind\":\"internal\","
                            "\"line\":\"cannot exec\""),
                     200);
    j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "failed");
    assert_string_equal(h_str(j, "message"), "Failed. We've been notified and are looking into it.");
    json_decref(j);
    /* Neither exit status, signal nor an internal error: a bad report. */
    assert_int_equal(finish(h, &c2, c2.fence, "\"exit_status\":null"), 400);
    free(id);
    h_free(h);
}

static void a_waiting_jobs_data_set_stays_or_the_job_fails(void **state)
{
    (void)state;
    struct harness *h = h_new();
    char *id = new_job(h, h->key, NULL);
    json_t *j = job(h, h->key, id);
    char file[64];
    snprintf(file, sizeof file, "%s", h_str(j, "training_file"));
    json_decref(j);
    /* While the job may still need it, the file stays. */
    char path[128];
    snprintf(path, sizeof path, "/v1/files/%s", file);
    struct reply r = h_call(h, "DELETE", path, NULL, h->key, NULL);
    assert_int_equal(r.status, 409);
    reply_free(&r);
    /* The store refuses too, in the delete's own transaction. */
    struct store_account a;
    assert_int_equal(store_account_by_name(h->srv.ctl->store, "default", &a), ERR_OK);
    assert_int_equal(store_file_delete(h->srv.ctl->store, a.id, file, NULL), ERR_CONFLICT);
    /* If it goes anyway (removed by hand, behind the store's back), the
     * claim fails the job as the user's and answers 204, not 500. */
    char db[600], sql[200];
    snprintf(db, sizeof db, "%s/alallo.db", h->srv.ctl->cfg.data_dir);
    snprintf(sql, sizeof sql, "DELETE FROM files WHERE id = '%s'", file);
    sqlite3 *raw;
    assert_int_equal(sqlite3_open(db, &raw), SQLITE_OK);
    assert_int_equal(sqlite3_exec(raw, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(raw);
    register_worker(h, "w1", "8000000000", 0);
    struct claim c;
    assert_false(claim(h, "w1", &c));
    j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "failed");
    char want[200];
    snprintf(want, sizeof want, "Training failed: the data set %s was deleted", file);
    assert_string_equal(h_str(j, "message"), want);
    json_decref(j);
    assert_int_equal(atomic_load(&h->srv.ctl->metrics.internal_failures), 0);
    /* Once the job has ended, the file may go. */
    struct reply up = h_upload(h, h->key, "x.jsonl", SAMPLE_JSONL);
    snprintf(path, sizeof path, "/v1/files/%s", h_str(up.json, "id"));
    reply_free(&up);
    r = h_call(h, "DELETE", path, NULL, h->key, NULL);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    free(id);
    h_free(h);
}

static void fair_between_accounts(void **state)
{
    (void)state;
    struct harness *h = h_new();
    char *a1 = new_job(h, h->key, NULL);
    char *a2 = new_job(h, h->key, NULL);
    char *b1 = new_job(h, h->other_key, NULL);
    register_worker(h, "w1", "8000000000", 0);
    register_worker(h, "w2", "8000000000", 0);
    register_worker(h, "w3", "8000000000", 0);
    struct claim c1, c2, c3;
    assert_true(claim(h, "w1", &c1));
    assert_true(claim(h, "w2", &c2));
    assert_true(claim(h, "w3", &c3));
    /* Oldest first, but the other account gets its turn before a2. */
    assert_string_equal(c1.job, a1);
    assert_string_equal(c2.job, b1);
    assert_string_equal(c3.job, a2);
    free(a1);
    free(a2);
    free(b1);
    h_free(h);
}

static void a_trainer_that_never_starts_is_tried_again_then_failed(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "w1", "8000000000", 1.0);
    char *id = new_job(h, h->key, NULL);
    h->srv.ctl->cfg.start_timeout_s = 1;
    h->srv.ctl->cfg.start_tries = 2;
    struct claim c;
    assert_true(claim(h, "w1", &c));
    /* Within the timeout nothing happens. */
    lifecycle_check_starts(h->srv.ctl, clock_now_ms());
    json_t *j = job(h, h->key, id);
    assert_string_equal(h_str(j, "message"), "Starting");
    json_decref(j);
    /* Past it the attempt ends, the job waits again, and the worker's
     * trainer is told to stop. */
    lifecycle_check_starts(h->srv.ctl, clock_now_ms() + 2000);
    j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "queued");
    assert_string_equal(h_str(j, "message"), "Waiting for capacity");
    json_t *att = json_array_get(json_object_get(j, "attempts"), 0);
    assert_string_equal(h_str(att, "reason"), "the trainer did not start in time");
    json_decref(j);
    char stop[16];
    assert_int_equal(events(h, &c, c.fence, STARTED, stop, sizeof stop), 409);
    /* The second try that never starts fails the job, free. */
    struct claim c2;
    assert_true(claim(h, "w1", &c2));
    assert_int_equal(c2.fence, 2);
    lifecycle_check_starts(h->srv.ctl, clock_now_ms() + 2000);
    j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "failed");
    assert_string_equal(h_str(j, "message"),
                        "Failed. We've been notified and are looking into it.");
    assert_true(json_real_value(json_object_get(json_object_get(j, "price"), "charged")) == 0);
    json_decref(j);
    assert_int_equal(atomic_load(&h->srv.ctl->metrics.internal_failures), 1);
    free(id);
    h_free(h);
}

static void spot_take_back_moves_the_job(void **state)
{
    (void)state;
    struct harness *h = h_new();
    /* On-demand dear enough that spot saves this small job more than a
     * cent: lowest_cost takes spot. */
    register_worker(h, "od", "8000000000", 1000.0);
    struct reply r = h_call(h, "POST", "/internal/workers/register", NULL, h->srv.worker_token,
                            "{\"name\":\"sp\",\"cpus\":2,\"mem_bytes\":8000000000,"
                            "\"accelerator\":\"cpu\",\"price_per_hour\":0.1,\"class\":\"spot\","
                            "\"speed\":{\"tokens_per_s\":1000,\"flops\":1e9}}");
    assert_int_equal(r.status, 200);
    reply_free(&r);
    fleet_invalidate(h->srv.ctl);
    char *id = new_job(h, h->key, NULL);
    struct claim c;
    assert_true(claim(h, "sp", &c)); /* the cheaper spot worker, for lowest_cost */
    assert_string_equal(c.job, id);
    assert_int_equal(events(h, &c, c.fence, STARTED, NULL, 0), 200);
    /* Only spot capacity can be taken back, and only by the operator. */
    r = h_call(h, "POST", "/v1/workers/od/reclaim", NULL, h->key, NULL);
    assert_int_equal(r.status, 409);
    reply_free(&r);
    r = h_call(h, "POST", "/v1/workers/sp/reclaim", NULL, h->other_key, NULL);
    assert_int_equal(r.status, 403);
    reply_free(&r);
    r = h_call(h, "POST", "/v1/workers/sp/reclaim", NULL, h->key, NULL);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    json_t *j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "re-scheduling");
    json_decref(j);
    char stop[16];
    assert_int_equal(events(h, &c, c.fence,
                            "{\"event\":\"checkpoint\",\"step\":5,\"path\":\"/x\",\"train_loss\":1}",
                            stop, sizeof stop),
                     200);
    assert_string_equal(stop, "move");
    assert_int_equal(finish(h, &c, c.fence, "\"exit_status\":4"), 200);
    struct claim c2;
    assert_true(claim(h, "od", &c2));
    assert_string_equal(c2.job, id);
    free(id);
    h_free(h);
}

/* Moves the job's "upper end of its estimated time" into the past. */
static enum alallo_err estimate_passed_cb(struct store_job *j, struct store_attempt *a,
                                          struct store_writes *w, void *ctx)
{
    (void)a;
    (void)w;
    (void)ctx;
    struct sched_state *st = calloc(1, sizeof *st);
    if (!st)
        return ERR_NOMEM;
    sched_state_of_job(j, st);
    st->ledger.time_high_s = 0.001;
    bool ok = sched_state_write(st, j->ledger_state, sizeof j->ledger_state);
    free(st);
    return ok ? ERR_OK : ERR_TOO_LARGE;
}

static void cancel_costs_the_steps_done_unless_past_the_estimate(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "w1", "8000000000", 3600.0); /* dear, so the charge shows */
    char *a = new_job(h, h->key, NULL);
    char *b = new_job(h, h->key, NULL);
    struct claim ca, cb;
    /* Trainer clocks: 10 steps in 2 s, checkpointed. */
    const char *run10 = "{\"event\":\"started\",\"t\":1,\"step\":0,\"max_steps\":30},"
                        "{\"event\":\"step\",\"t\":3,\"step\":10,\"loss\":2},"
                        "{\"event\":\"checkpoint\",\"t\":3,\"step\":10,\"path\":\"/x\","
                        "\"train_loss\":2}";
    assert_true(claim(h, "w1", &ca));
    assert_string_equal(ca.job, a);
    assert_int_equal(events(h, &ca, ca.fence, run10, NULL, 0), 200);
    json_t *j = job(h, h->key, a);
    /* 2 s at 3,600/h is 2.00; what cancelling now costs is that, or the
     * upper end of the estimated price when that is lower. */
    double now_cost = json_real_value(json_object_get(json_object_get(j, "price"), "cancel_now"));
    double cap = json_real_value(json_object_get(json_object_get(json_object_get(j, "estimate"),
                                                                 "price"),
                                                 "high"));
    assert_true(now_cost > 0);
    assert_true(fabs(now_cost - fmin(2.0, cap)) < 1e-3);
    json_decref(j);
    char path[128];
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/cancel", a);
    struct reply r = h_call(h, "POST", path, NULL, h->key, NULL);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    assert_int_equal(finish(h, &ca, ca.fence, "\"exit_status\":4"), 200);
    j = job(h, h->key, a);
    assert_string_equal(h_str(j, "status"), "cancelled");
    json_t *price = json_object_get(j, "price");
    assert_true(fabs(json_real_value(json_object_get(price, "charged")) -
                     json_real_value(json_object_get(price, "refunded")) - now_cost) < 1e-6);
    json_decref(j);

    /* The same work, but the job is past the upper end of its estimated
     * time: cancelling it is free. */
    assert_true(claim(h, "w1", &cb));
    assert_string_equal(cb.job, b);
    assert_int_equal(events(h, &cb, cb.fence, run10, NULL, 0), 200);
    assert_int_equal(store_job_update(h->srv.ctl->store, b, NULL, estimate_passed_cb, NULL),
                     ERR_OK);
    j = job(h, h->key, b);
    assert_true(json_real_value(json_object_get(json_object_get(j, "price"), "cancel_now")) == 0);
    json_decref(j);
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/cancel", b);
    r = h_call(h, "POST", path, NULL, h->key, NULL);
    reply_free(&r);
    assert_int_equal(finish(h, &cb, cb.fence, "\"exit_status\":4"), 200);
    j = job(h, h->key, b);
    assert_string_equal(h_str(j, "status"), "cancelled");
    price = json_object_get(j, "price");
    assert_true(fabs(json_real_value(json_object_get(price, "charged")) -
                     json_real_value(json_object_get(price, "refunded"))) < 1e-9);
    json_decref(j);
    free(a);
    free(b);
    h_free(h);
}

/* The estimate stored with job id of `key`: time.high_s, and its message. */
static double estimated_high_of(struct harness *h, const char *key, const char *id,
                                char *message, size_t cap)
{
    json_t *j = job(h, key, id);
    json_t *e = json_object_get(j, "estimate");
    double high = json_number_value(json_object_get(json_object_get(e, "time"), "high_s"));
    json_t *m = json_object_get(e, "message");
    snprintf(message, cap, "%s", json_is_string(m) ? json_string_value(m) : "");
    json_decref(j);
    return high;
}

static double estimated_high(struct harness *h, const char *id, char *message, size_t cap)
{
    return estimated_high_of(h, h->key, id, message, cap);
}

static void a_burst_of_jobs_sees_each_other_in_the_queue(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "w1", "8000000000", 1.0);
    /* Created within the estimates' snapshot second: each one must count
     * the ones before it in the queue of the only worker. */
    char *ids[3];
    double high[3];
    char msg[3][128];
    for (int i = 0; i < 3; i++) {
        ids[i] = new_job(h, h->key, ",\"max_steps\":20000");
        high[i] = estimated_high(h, ids[i], msg[i], sizeof msg[i]);
    }
    assert_string_equal(msg[0], "");
    assert_string_equal(msg[1], "No capacity is free right now; the job would wait in the queue.");
    assert_string_equal(msg[2], "No capacity is free right now; the job would wait in the queue.");
    assert_true(high[1] > 1.5 * high[0]);
    assert_true(high[2] > 1.2 * high[1]);
    /* Another account's job takes its turn after the first account's
     * first job, not after all three. */
    char other_msg[128];
    char *other = new_job(h, h->other_key, ",\"max_steps\":20000");
    double other_high = estimated_high_of(h, h->other_key, other, other_msg, sizeof other_msg);
    assert_true(other_high < 0.9 * high[2]);
    assert_true(other_high > 1.5 * high[0]);
    /* The first account's next jobs wait behind everything, one job more
     * each time. */
    char *more[2];
    double more_high[2];
    char more_msg[2][128];
    for (int i = 0; i < 2; i++) {
        more[i] = new_job(h, h->key, ",\"max_steps\":20000");
        more_high[i] = estimated_high(h, more[i], more_msg[i], sizeof more_msg[i]);
    }
    assert_true(more_high[0] > 1.1 * high[2]);
    assert_true(more_high[1] > 1.1 * more_high[0]);
    /* A claim runs a pass over the six waiting jobs; /metrics counts it. */
    struct reply m = h_call(h, "POST", "/internal/workers/w1/claim", NULL, h->srv.worker_token,
                            "{}");
    assert_int_equal(m.status, 200);
    reply_free(&m);
    m = h_call(h, "GET", "/metrics", NULL, NULL, NULL);
    assert_int_equal(m.status, 200);
    long passes = -1, jobs = -1;
    double cpu = -1;
    const char *p = strstr(m.body, "\nalallo_sched_passes_total ");
    assert_non_null(p);
    sscanf(p, "\nalallo_sched_passes_total %ld", &passes);
    p = strstr(m.body, "\nalallo_sched_pass_jobs ");
    assert_non_null(p);
    sscanf(p, "\nalallo_sched_pass_jobs %ld", &jobs);
    p = strstr(m.body, "\nalallo_sched_pass_cpu_seconds_total ");
    assert_non_null(p);
    sscanf(p, "\nalallo_sched_pass_cpu_seconds_total %lf", &cpu);
    assert_true(passes >= 1);
    assert_int_equal(jobs, 6);
    assert_true(cpu >= 0);
    reply_free(&m);
    free(other);
    for (int i = 0; i < 2; i++)
        free(more[i]);
    for (int i = 0; i < 3; i++)
        free(ids[i]);
    h_free(h);
}

/* Issue 35: a job placed on a worker that has not reported a step yet
 * reads, on its own page and for the job queued behind it, as its own
 * estimate less the time since it was created, never as its training and
 * loading alone (which hold neither its other fixed costs nor the margin
 * learnt for whole jobs). Seen before: a job promised 4 s to 19 s read as
 * 5.3 s busy when it began, and the job behind it was promised too short a
 * wait. */
static void a_placed_job_reads_as_its_estimate_until_its_pace(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "w1", "8000000000", 1.0);
    char msg[128];
    struct timespec t0, t1;
    clock_gettime(CLOCK_REALTIME, &t0);
    char *a = new_job(h, h->key, "");
    double a_high = estimated_high(h, a, msg, sizeof msg);
    assert_string_equal(msg, "");
    struct claim c;
    assert_true(claim(h, "w1", &c));
    assert_string_equal(c.job, a);
    json_t *j = job(h, h->key, a);
    json_t *tl = json_object_get(j, "time_left");
    assert_string_equal(h_str(tl, "basis"), "estimate");
    double tl_high = json_number_value(json_object_get(tl, "high_s"));
    json_decref(j);
    clock_gettime(CLOCK_REALTIME, &t1);
    double since = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    /* created a moment ago: its page reads its promise less that moment
     * (the estimate basis alone read far less: loading and training) */
    assert_true(tl_high >= a_high - since - 1.5);
    assert_true(tl_high <= a_high + 1);
    /* the job behind it waits for all of that, then runs its own course */
    char *b = new_job(h, h->key, "");
    double b_high = estimated_high(h, b, msg, sizeof msg);
    assert_string_equal(msg, "No capacity is free right now; the job would wait in the queue.");
    assert_true(b_high >= tl_high + 0.5 * a_high);
    free(b);
    free(a);
    h_free(h);
}

/* The calibration rows of kind `kind` (NULL: any) whose `waited` is
 * `waited` (-1: any) and whose model (key) is `model` (NULL: any). */
static int rows_matching(struct harness *h, const char *kind, int waited, const char *model)
{
    enum { CAP = 512 };
    struct store_calibration *rows = calloc(CAP, sizeof *rows);
    assert_non_null(rows);
    int n = 0, k = 0;
    assert_int_equal(store_calibration_list(h->srv.ctl->store, CAP, rows, &n), ERR_OK);
    for (int i = 0; i < n; i++)
        k += (!kind || strcmp(rows[i].kind, kind) == 0) &&
             (waited < 0 || rows[i].waited == waited) &&
             (!model || strcmp(rows[i].model, model) == 0);
    free(rows);
    return k;
}

/* The calibration rows of kind `kind` whose `waited` is `waited` (-1:
 * any). */
static int rows_where(struct harness *h, const char *kind, int waited)
{
    return rows_matching(h, kind, waited, NULL);
}

/* Calibration rows of `kind` in the store. */
static int rows_of_kind(struct harness *h, const char *kind)
{
    return rows_where(h, kind, -1);
}

/* Calibration rows whose model (key) is `model`. */
static int rows_of_model(struct harness *h, const char *model)
{
    return rows_matching(h, NULL, -1, model);
}

/* Sends claim c's last events `evs` (ending in "done"), finishes its
 * attempt with exit status 0, and checks that job id succeeded. */
static void succeed_with(struct harness *h, struct claim *c, const char *id, const char *evs)
{
    assert_int_equal(events(h, c, c->fence, evs, NULL, 0), 200);
    assert_int_equal(finish(h, c, c->fence, "\"exit_status\":0,\"signal\":null"), 200);
    json_t *j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "succeeded");
    json_decref(j);
}

/* Claims job id on w1 and runs its 30 steps to success, reporting each
 * (a tenth of a millisecond apart on the trainer's clock, so that time
 * left is on pace in every share-done cell), then a moment later done, on
 * the trainer's clock too: the attempt's training time is then the
 * trainer's 3 ms, and its fixed costs (the server's 50 ms and more less
 * that) are never 0. A done without `t` made the training time the
 * server's own, from `started` to done, and the fixed costs the server's
 * milliseconds between the claim and `started`: 0 or 1 by chance, so a
 * learnt shape's "start" row came and went. */
static void run_to_success(struct harness *h, const char *id)
{
    struct claim c;
    assert_true(claim(h, "w1", &c));
    assert_string_equal(c.job, id);
    assert_int_equal(events(h, &c, c.fence, STARTED, NULL, 0), 200);
    for (int from = 1; from <= 30; from += 10) {
        char evs[2048];
        size_t n = 0;
        for (int s = from; s < from + 10; s++)
            n += (size_t)snprintf(evs + n, sizeof evs - n,
                                  "%s{\"event\":\"step\",\"t\":%.4f,\"step\":%d,\"loss\":%.3f,"
                                  "\"lr\":0.0002,\"tokens_per_s\":50}",
                                  s > from ? "," : "", 0.1 + 0.0001 * s, s, 3.0 - 0.05 * s);
        assert_true(n < sizeof evs);
        assert_int_equal(events(h, &c, c.fence, evs, NULL, 0), 200);
    }
    struct timespec pause = {0, 50 * 1000 * 1000}; /* the truth left is then > 0 */
    nanosleep(&pause, NULL);
    succeed_with(h, &c, id,
                 "{\"event\":\"done\",\"t\":0.1031,\"step\":30,\"train_loss\":1.5,"
                 "\"model_dir\":\"/x/out/model\",\"adapter_dir\":null}");
}

/* A success writes its rows in one transaction: its last attempt's
 * (seven once its shape is learnt, its worker's own speed among them),
 * the job's, its time spread, its price's two and time left's. All are
 * kept: at most 8 were, and the time-left rows of a learnt shape's job
 * were dropped unsaid. */
static void a_success_keeps_every_calibration_row(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "w1", "8000000000", 3.6);
    char *a = new_job(h, h->key, NULL);
    run_to_success(h, a); /* its shape is learnt */
    int tl = rows_of_kind(h, "tl"), price = rows_of_kind(h, "price");
    int train = rows_of_kind(h, "train"), start = rows_of_kind(h, "start");
    /* a new service's shape is not predicted from anything: no offset;
     * its worker's factor is learnt (it was not while the worker was
     * looked up by the job's active attempt, cleared when it ended) */
    assert_int_equal(rows_of_model(h, SCHED_LINK_WORKER_SPEED_PREFIX "w1"), 0);
    assert_int_equal(rows_of_model(h, "worker:w1"), 1);
    char *b = new_job(h, h->key, NULL);
    run_to_success(h, b);
    /* its worker's offset against the band it was predicted with */
    assert_int_equal(rows_of_model(h, SCHED_LINK_WORKER_SPEED_PREFIX "w1"), 1);
    /* b's attempt measured a learnt shape's prediction and fixed costs */
    assert_int_equal(rows_of_kind(h, "train"), train + 1);
    assert_int_equal(rows_of_kind(h, "start"), start + 1);
    assert_true(rows_of_kind(h, "spread") >= 1);
    /* the price against each end of its range (`waited` 2 lower, 3 upper) */
    assert_int_equal(rows_of_kind(h, "price"), price + 2);
    assert_true(rows_where(h, "price", SCHED_LINK_PRICE_LOW) > 0);
    assert_int_equal(rows_where(h, "price", SCHED_LINK_PRICE_HIGH),
                     rows_where(h, "price", SCHED_LINK_PRICE_LOW));
    /* two ends a share-done cell, in each of the four */
    assert_int_equal(rows_of_kind(h, "tl"), tl + 2 * EST_TL_CELLS);
    free(a);
    free(b);
    h_free(h);
}

static long passes_run(struct harness *h)
{
    struct reply m = h_call(h, "GET", "/metrics", NULL, NULL, NULL);
    long passes = -1;
    const char *p = m.body ? strstr(m.body, "\nalallo_sched_passes_total ") : NULL;
    if (p)
        sscanf(p, "\nalallo_sched_passes_total %ld", &passes);
    reply_free(&m);
    return passes;
}

static void claims_right_after_a_pass_take_its_assignments(void **state)
{
    (void)state;
    struct harness *h = h_new();
    h->srv.ctl->cfg.pass_reuse_s = 60; /* however slow this machine's disk */
    char *ids[4];
    for (int i = 0; i < 3; i++)
        ids[i] = new_job(h, h->key, NULL);
    register_worker(h, "w1", "8000000000", 0);
    register_worker(h, "w2", "8000000000", 0);
    register_worker(h, "w3", "8000000000", 0);
    /* The first claim runs a pass that places all three jobs; the next two
     * claims take what it assigned them without a pass of their own. */
    long before = passes_run(h);
    struct claim c[3];
    assert_true(claim(h, "w1", &c[0]));
    long after_first = passes_run(h);
    assert_true(after_first > before);
    assert_true(claim(h, "w2", &c[1]));
    assert_true(claim(h, "w3", &c[2]));
    assert_int_equal(passes_run(h), after_first);
    /* Each job once, oldest first. */
    assert_string_equal(c[0].job, ids[0]);
    assert_string_equal(c[1].job, ids[1]);
    assert_string_equal(c[2].job, ids[2]);
    /* A job created since makes the next claim run a pass again. */
    register_worker(h, "w4", "8000000000", 0);
    ids[3] = new_job(h, h->key, NULL);
    struct claim c4;
    assert_true(claim(h, "w4", &c4));
    assert_string_equal(c4.job, ids[3]);
    assert_true(passes_run(h) > after_first);
    for (int i = 0; i < 4; i++)
        free(ids[i]);
    h_free(h);
}

static void an_explicit_max_steps_sets_the_work(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "w1", "8000000000", 1.0);
    /* The trainer runs exactly max_steps steps, so ten times the steps is
     * ten times the training, whatever n_epochs says. */
    double train[2];
    const char *extra[2] = {",\"max_steps\":3000", ",\"max_steps\":30000"};
    for (int i = 0; i < 2; i++) {
        char *id = new_job(h, h->key, extra[i]);
        json_t *j = job(h, h->key, id);
        json_t *t = json_object_get(json_object_get(j, "estimate"), "training");
        train[i] = json_number_value(json_object_get(t, "high_s"));
        json_decref(j);
        free(id);
    }
    assert_true(train[0] >= 10);
    assert_true(train[1] / train[0] > 9.0 && train[1] / train[0] < 11.0);
    h_free(h);
}

/* The steps the ledger rows of job `id` bill, net (charges less refunds). */
static long billed_steps(struct harness *h, const char *id)
{
    struct store_account a;
    assert_int_equal(store_account_by_name(h->srv.ctl->store, "default", &a), ERR_OK);
    struct store_ledger_row rows[STORE_LIST_MAX];
    int n;
    bool more;
    assert_int_equal(store_ledger_list(h->srv.ctl->store, a.id, 0, STORE_LIST_MAX, rows, &n,
                                       &more),
                     ERR_OK);
    long steps = 0;
    for (int i = 0; i < n; i++)
        if (strcmp(rows[i].job, id) == 0)
            steps += strcmp(rows[i].kind, "charge") == 0 ? rows[i].steps : -rows[i].steps;
    return steps;
}

static double net_charge(json_t *j)
{
    json_t *price = json_object_get(j, "price");
    return json_real_value(json_object_get(price, "charged")) -
           json_real_value(json_object_get(price, "refunded"));
}

/* A charged cancel leaves a partial model: fine_tuned_model names the
 * checkpoint at `step`, of which the steps up to `billed` are charged (the
 * steps completed after the cancel was accepted are in it, free). */
static void assert_partial_model_billed(struct harness *h, const char *id, long step,
                                        long billed)
{
    json_t *j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "cancelled");
    assert_true(net_charge(j) > 0);
    assert_int_equal(billed_steps(h, id), billed);
    const char *model = h_str(j, "fine_tuned_model");
    assert_non_null(model);
    char want[32];
    snprintf(want, sizeof want, ":ckpt-step-%ld", step);
    assert_int_equal(strncmp(model, "ft:tiny:alallo:", 15), 0);
    assert_string_equal(model + strlen(model) - strlen(want), want);
    json_decref(j);
}

/* A charged cancel whose partial model holds exactly the steps charged. */
static void assert_partial_model_of_charged_steps(struct harness *h, const char *id, long step)
{
    assert_partial_model_billed(h, id, step, step);
}

static int cancel_job(struct harness *h, const char *id)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/cancel", id);
    struct reply r = h_call(h, "POST", path, NULL, h->key, NULL);
    int status = r.status;
    reply_free(&r);
    return status;
}

/* Trainer clocks: 7 steps in 2 s, checkpointed. */
#define RUN7                                                                                       \
    "{\"event\":\"started\",\"t\":1,\"step\":0,\"max_steps\":30},"                                 \
    "{\"event\":\"step\",\"t\":3,\"step\":7,\"loss\":2},"                                          \
    "{\"event\":\"checkpoint\",\"t\":3,\"step\":7,\"path\":\"/x/7\",\"train_loss\":2}"

/* Cancelled while re-scheduling (its attempt ended by a move, no other
 * holding it yet): charged the steps the move kept, no more, and those
 * steps stay as its partial model. Also a cancel that comes while the
 * move's trainer still writes its checkpoint. */
static void a_cancel_while_re_scheduling_keeps_the_partial_model(void **state)
{
    (void)state;
    struct harness *h = h_new();
    /* The materializer stands in for itself: the checkpoints here are not
     * real ones, and which one is made into the model is what is tested. */
    snprintf(h->srv.ctl->alallo_bin, sizeof h->srv.ctl->alallo_bin, "/bin/true");
    register_worker(h, "w1", "8000000000", 3600.0);
    char *id = new_job(h, h->key, NULL);
    struct claim c;
    assert_true(claim(h, "w1", &c));
    assert_int_equal(events(h, &c, c.fence, RUN7, NULL, 0), 200);
    struct reply r = h_call(h, "POST", "/v1/workers/w1/drain", NULL, h->key, NULL);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    /* The trainer gets one step further, then stops without a newer
     * checkpoint: the job continues from step 7. */
    assert_int_equal(events(h, &c, c.fence, "{\"event\":\"step\",\"t\":3.3,\"step\":8,\"loss\":2}",
                            NULL, 0),
                     200);
    assert_int_equal(finish(h, &c, c.fence, "\"exit_status\":4"), 200);
    json_t *j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "re-scheduling");
    double before = net_charge(j);
    assert_true(before > 0);
    json_decref(j);
    long steps_before = billed_steps(h, id);
    assert_int_equal(steps_before, 7);

    assert_int_equal(cancel_job(h, id), 200);
    j = job(h, h->key, id);
    /* No step more than the move kept. */
    assert_true(fabs(net_charge(j) - before) < 1e-9);
    json_decref(j);
    assert_partial_model_of_charged_steps(h, id, 7);

    /* Cancelled while the move is under way, at step 7: the trainer, told
     * to cancel now, writes its checkpoint at step 9 and exits; it is the
     * partial model, and it is charged the 7 steps the cancel was priced
     * at (steps 8 and 9, completed while stopping, are free). */
    register_worker(h, "w2", "8000000000", 3600.0);
    char *id2 = new_job(h, h->key, NULL);
    assert_true(claim(h, "w2", &c));
    assert_string_equal(c.job, id2);
    assert_int_equal(events(h, &c, c.fence, RUN7, NULL, 0), 200);
    r = h_call(h, "POST", "/v1/workers/w2/drain", NULL, h->key, NULL);
    reply_free(&r);
    json_t *shown = job(h, h->key, id2);
    assert_int_equal(cancel_job(h, id2), 200);
    double shown_now = json_real_value(
        json_object_get(json_object_get(shown, "price"), "cancel_now"));
    json_decref(shown);
    char stop[16];
    assert_int_equal(events(h, &c, c.fence,
                            "{\"event\":\"step\",\"t\":3.5,\"step\":9,\"loss\":2},"
                            "{\"event\":\"checkpoint\",\"t\":3.5,\"step\":9,\"path\":\"/x/9\","
                            "\"train_loss\":2}",
                            stop, sizeof stop),
                     200);
    assert_string_equal(stop, "cancel");
    assert_int_equal(finish(h, &c, c.fence, "\"exit_status\":4"), 200);
    assert_partial_model_billed(h, id2, 9, 7);
    j = job(h, h->key, id2);
    assert_true(fabs(net_charge(j) - shown_now) < 1e-9); /* what it showed before */
    json_decref(j);
    free(id);
    free(id2);
    h_free(h);
}

/* The worker of a cancelling job is lost before its trainer reported the
 * end: the job is cancelled, charged its latest checkpoint, and keeps it
 * as its partial model. */
static void a_worker_lost_while_cancelling_leaves_the_partial_model(void **state)
{
    (void)state;
    struct harness *h = h_new();
    snprintf(h->srv.ctl->alallo_bin, sizeof h->srv.ctl->alallo_bin, "/bin/true");
    register_worker(h, "w1", "8000000000", 3600.0);
    char *id = new_job(h, h->key, NULL);
    struct claim c;
    assert_true(claim(h, "w1", &c));
    /* Step 12 done, the latest checkpoint at 7: the charge is 7 steps. */
    assert_int_equal(events(h, &c, c.fence,
                            RUN7 ",{\"event\":\"step\",\"t\":4,\"step\":12,\"loss\":2}", NULL, 0),
                     200);
    assert_int_equal(cancel_job(h, id), 200);
    json_t *j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "cancelling");
    json_decref(j);
    assert_int_equal(lifecycle_worker_gone(h->srv.ctl, "w1", "worker lost"), ERR_OK);
    assert_partial_model_of_charged_steps(h, id, 7);
    free(id);
    h_free(h);
}

/* Checks that the job's ledger charges each training step of (0, max]
 * once, net of lost-work refunds, and returns what those steps cost before
 * the estimate's cap (rate x the time the kept steps took). */
static double charged_once(struct harness *h, const char *id, long max)
{
    struct reply r = h_call(h, "GET", "/v1/billing/ledger", "limit=100", h->key, NULL);
    assert_int_equal(r.status, 200);
    json_t *rows = json_object_get(r.json, "data");
    long covered[64] = {0}; /* net charges per step (1..max) */
    double steps = 0;
    assert_true(max < 64);
    for (size_t i = 0; i < json_array_size(rows); i++) {
        json_t *row = json_array_get(rows, i);
        const char *why = h_str(row, "reason");
        if (strcmp(h_str(row, "job"), id) != 0 ||
            (strcmp(why, "training steps") != 0 &&
             strcmp(why, "lost work (repeated for free)") != 0))
            continue;
        bool charge = strcmp(h_str(row, "kind"), "charge") == 0;
        double amount = json_number_value(json_object_get(row, "amount"));
        steps += charge ? amount : -amount;
        long from = (long)json_integer_value(json_object_get(row, "from_step"));
        long to = (long)json_integer_value(json_object_get(row, "to_step"));
        assert_true(from >= 0 && to <= max);
        for (long s = from + 1; s <= to; s++)
            covered[s] += charge ? 1 : -1;
    }
    for (long s = 1; s <= max; s++)
        assert_int_equal(covered[s], 1);
    reply_free(&r);
    return steps;
}

/* A worker dies after its trainer wrote a checkpoint (step 20) but before
 * the report reached the server, which knows only step 10. The next
 * attempt is told to resume from step 10 and is billed from there. */
static void resumes_from_the_checkpoint_the_server_recorded(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "w1", "8000000000", 3.6);
    char *id = new_job(h, h->key, NULL);
    struct claim c;
    assert_true(claim(h, "w1", &c));
    assert_int_equal(c.resume_step, 0);
    assert_string_equal(c.resume_from, "");
    assert_int_equal(events(h, &c, c.fence, STARTED, NULL, 0), 200);
    /* The path as the trainer saw it (a node may mount the data folder
     * elsewhere): the server records its own path of the attempt's folder. */
    assert_int_equal(
        events(h, &c, c.fence,
               "{\"event\":\"step\",\"t\":10.1,\"step\":10,\"loss\":2},"
               "{\"event\":\"checkpoint\",\"t\":10.1,\"step\":10,\"path\":\"/x/step-00000010\","
               "\"train_loss\":2}",
               NULL, 0),
        200);
    /* the unreported checkpoint at step 20, on disk */
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/step-00000020", c.checkpoint_dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(store_worker_set_state(h->srv.ctl->store, "w1", "lost"), ERR_OK);
    assert_int_equal(lifecycle_worker_gone(h->srv.ctl, "w1", "worker lost"), ERR_OK);

    register_worker(h, "w2", "8000000000", 3.6);
    struct claim c2;
    assert_true(claim(h, "w2", &c2));
    assert_string_equal(c2.job, id);
    assert_int_equal(c2.resume_step, 10);
    /* It resumes from the first attempt's checkpoint the server recorded,
     * and writes its own folder: the unreported step 20 is not named. */
    char want[1200];
    snprintf(want, sizeof want, "%s/step-00000010", c.checkpoint_dir);
    assert_string_equal(c2.resume_from, want);
    assert_string_not_equal(c2.checkpoint_dir, c.checkpoint_dir);
    succeed_with(h, &c2, id,
                 "{\"event\":\"started\",\"t\":0.1,\"step\":10,\"resumed_from\":10},"
                 "{\"event\":\"step\",\"t\":20.1,\"step\":30,\"loss\":1},"
                 "{\"event\":\"done\",\"t\":20.1,\"step\":30,\"train_loss\":1,"
                 "\"model_dir\":\"/x/out/model\",\"adapter_dir\":null}");
    /* 30 steps in 30 s at 3.6/h: 0.03, each step once */
    assert_true(fabs(charged_once(h, id, 30) - 0.03) < 1e-9);
    free(id);
    h_free(h);
}

/* A trainer that resumes from a newer checkpoint than it was given (one
 * the server never heard of) ends its attempt as alallo's failure: the
 * job costs nothing. One that could only resume from an older one is
 * billed from there, each step once. */
static void a_resume_elsewhere_is_never_billed_wrong(void **state)
{
    (void)state;
    for (int older = 0; older < 2; older++) {
        struct harness *h = h_new();
        register_worker(h, "w1", "8000000000", 3.6);
        char *id = new_job(h, h->key, NULL);
        struct claim c;
        assert_true(claim(h, "w1", &c));
        assert_int_equal(events(h, &c, c.fence, STARTED, NULL, 0), 200);
        assert_int_equal(events(h, &c, c.fence,
                                "{\"event\":\"step\",\"t\":10.1,\"step\":10,\"loss\":2},"
                                "{\"event\":\"checkpoint\",\"t\":10.1,\"step\":10,"
                                "\"path\":\"/x/step-00000010\",\"train_loss\":2}",
                                NULL, 0),
                         200);
        assert_int_equal(store_worker_set_state(h->srv.ctl->store, "w1", "lost"), ERR_OK);
        assert_int_equal(lifecycle_worker_gone(h->srv.ctl, "w1", "worker lost"), ERR_OK);
        register_worker(h, "w2", "8000000000", 3.6);
        struct claim c2;
        assert_true(claim(h, "w2", &c2));
        char stop[16];
        if (!older) {
            assert_int_equal(
                events(h, &c2, c2.fence,
                       "{\"event\":\"started\",\"t\":0.1,\"step\":20,\"resumed_from\":20},"
                       "{\"event\":\"step\",\"t\":10.1,\"step\":30,\"loss\":1}",
                       stop, sizeof stop),
                200);
            assert_string_equal(stop, "cancel");
            json_t *j = job(h, h->key, id);
            assert_string_equal(h_str(j, "status"), "failed");
            assert_non_null(strstr(h_str(j, "message"), "We've been notified"));
            json_decref(j);
            assert_int_equal(finish(h, &c2, c2.fence, "\"exit_status\":4"), 200);
            struct reply r = h_call(h, "GET", "/v1/billing/ledger", "limit=100", h->key, NULL);
            double net = 0;
            json_t *rows = json_object_get(r.json, "data");
            for (size_t i = 0; i < json_array_size(rows); i++) {
                json_t *row = json_array_get(rows, i);
                double amount = json_number_value(json_object_get(row, "amount"));
                net += strcmp(h_str(row, "kind"), "charge") == 0 ? amount : -amount;
            }
            reply_free(&r);
            assert_true(fabs(net) < 1e-9);
        } else {
            /* step 10's checkpoint was damaged: the trainer starts over */
            assert_int_equal(
                events(h, &c2, c2.fence,
                       "{\"event\":\"started\",\"t\":0.1,\"step\":0,\"resumed_from\":null},"
                       "{\"event\":\"step\",\"t\":30.1,\"step\":30,\"loss\":1},"
                       "{\"event\":\"done\",\"t\":30.1,\"step\":30,\"train_loss\":1,"
                       "\"model_dir\":\"/x/out/model\",\"adapter_dir\":null}",
                       stop, sizeof stop),
                200);
            assert_int_equal(finish(h, &c2, c2.fence, "\"exit_status\":0"), 200);
            json_t *j = job(h, h->key, id);
            assert_string_equal(h_str(j, "status"), "succeeded");
            json_decref(j);
            assert_true(fabs(charged_once(h, id, 30) - 0.03) < 1e-9);
        }
        free(id);
        h_free(h);
    }
}

/* Reports the server cannot bill from change nothing: progress before
 * `started`, a checkpoint at or below the one recorded, steps going back. */
static void reports_out_of_order_are_ignored(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "w1", "8000000000", 3.6);
    char *id = new_job(h, h->key, NULL);
    struct claim c;
    assert_true(claim(h, "w1", &c));
    assert_int_equal(events(h, &c, c.fence,
                            "{\"event\":\"step\",\"t\":5,\"step\":20,\"loss\":2},"
                            "{\"event\":\"checkpoint\",\"t\":5,\"step\":20,"
                            "\"path\":\"/x/step-00000020\",\"train_loss\":2}",
                            NULL, 0),
                     200);
    json_t *j = job(h, h->key, id);
    assert_int_equal(progress(j, "steps_done"), 0);
    json_decref(j);
    assert_int_equal(events(h, &c, c.fence,
                            STARTED ",{\"event\":\"step\",\"t\":10.1,\"step\":10,\"loss\":2},"
                            "{\"event\":\"checkpoint\",\"t\":10.1,\"step\":10,"
                            "\"path\":\"/x/step-00000010\",\"train_loss\":2},"
                            "{\"event\":\"checkpoint\",\"t\":10.2,\"step\":5,"
                            "\"path\":\"/x/step-00000005\",\"train_loss\":2},"
                            "{\"event\":\"step\",\"t\":10.3,\"step\":4,\"loss\":2}",
                            NULL, 0),
                     200);
    j = job(h, h->key, id);
    assert_int_equal(progress(j, "steps_done"), 10);
    json_decref(j);
    char path[128];
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/checkpoints", id);
    struct reply r = h_call(h, "GET", path, NULL, h->key, NULL);
    json_t *data = json_object_get(r.json, "data");
    assert_int_equal(json_array_size(data), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(data, 0), "step_number")),
                     10);
    reply_free(&r);
    /* lost now: the next attempt resumes from 10, not 5 or 20 */
    assert_int_equal(store_worker_set_state(h->srv.ctl->store, "w1", "lost"), ERR_OK);
    assert_int_equal(lifecycle_worker_gone(h->srv.ctl, "w1", "worker lost"), ERR_OK);
    register_worker(h, "w2", "8000000000", 3.6);
    struct claim c2;
    assert_true(claim(h, "w2", &c2));
    assert_int_equal(c2.resume_step, 10);
    free(id);
    h_free(h);
}

/* A cancel that committed its charge but whose partial model was never
 * made (the server stopped in between; here the materializer fails) gets
 * its model when the control layer starts again. */
static void a_partial_model_lost_to_a_stop_is_made_at_start_up(void **state)
{
    (void)state;
    struct harness *h = h_new();
    snprintf(h->srv.ctl->alallo_bin, sizeof h->srv.ctl->alallo_bin, "/bin/false");
    register_worker(h, "w1", "8000000000", 3600.0);
    char *id = new_job(h, h->key, NULL);
    struct claim c;
    assert_true(claim(h, "w1", &c));
    assert_int_equal(events(h, &c, c.fence, RUN7, NULL, 0), 200);
    struct reply r = h_call(h, "POST", "/v1/workers/w1/drain", NULL, h->key, NULL);
    reply_free(&r);
    assert_int_equal(finish(h, &c, c.fence, "\"exit_status\":4"), 200);
    assert_int_equal(cancel_job(h, id), 200);
    json_t *j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "cancelled");
    assert_true(net_charge(j) > 0);
    assert_true(json_is_null(json_object_get(j, "fine_tuned_model")));
    json_decref(j);

    snprintf(h->srv.ctl->alallo_bin, sizeof h->srv.ctl->alallo_bin, "/bin/true");
    lifecycle_repair_partial_models(h->srv.ctl);
    assert_partial_model_of_charged_steps(h, id, 7);
    /* Once made, a second start-up leaves it alone. */
    lifecycle_repair_partial_models(h->srv.ctl);
    assert_partial_model_of_charged_steps(h, id, 7);
    free(id);
    h_free(h);
}

/* A job moved after 7 checkpointed steps, claimed again, then cancelled
 * while its new trainer never starts: the start timeout ends it as any
 * cancel of a job that trained (charged for its 7 steps, which become its
 * partial model), not as a cancel of a job that never ran. */
static void a_cancel_whose_next_trainer_never_starts_keeps_the_partial_model(void **state)
{
    (void)state;
    struct harness *h = h_new();
    snprintf(h->srv.ctl->alallo_bin, sizeof h->srv.ctl->alallo_bin, "/bin/true");
    h->srv.ctl->cfg.start_timeout_s = 1;
    register_worker(h, "w1", "8000000000", 3600.0);
    char *id = new_job(h, h->key, NULL);
    struct claim c;
    assert_true(claim(h, "w1", &c));
    assert_int_equal(events(h, &c, c.fence, RUN7, NULL, 0), 200);
    struct reply r = h_call(h, "POST", "/v1/workers/w1/drain", NULL, h->key, NULL);
    reply_free(&r);
    assert_int_equal(finish(h, &c, c.fence, "\"exit_status\":4"), 200);
    register_worker(h, "w2", "8000000000", 3600.0);
    struct claim c2;
    assert_true(claim(h, "w2", &c2));
    assert_string_equal(c2.job, id);
    assert_int_equal(cancel_job(h, id), 200);
    json_t *j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "cancelling");
    json_decref(j);
    lifecycle_check_starts(h->srv.ctl, clock_now_ms() + 2000);
    assert_partial_model_of_charged_steps(h, id, 7);
    free(id);
    h_free(h);
}

/* A job whose loss stays where it started succeeds, and its events and
 * training log say it learned nothing, with what to try. */
static void a_job_that_learned_nothing_says_so(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "w1", "8000000000", 3.6);
    char *id = new_job(h, h->key, NULL);
    struct claim c;
    assert_true(claim(h, "w1", &c));
    succeed_with(h, &c, id,
                 STARTED ",{\"event\":\"step\",\"t\":0.3,\"step\":5,\"loss\":4.1},"
                         "{\"event\":\"step\",\"t\":0.6,\"step\":20,\"loss\":3.9},"
                         "{\"event\":\"done\",\"step\":30,\"train_loss\":3.95,"
                         "\"model_dir\":\"/x/out/model\",\"adapter_dir\":null}");
    char path[128];
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/events", id);
    struct reply r = h_call(h, "GET", path, "limit=100", h->key, NULL);
    assert_non_null(strstr(r.body, "The loss did not go down: try more epochs or a higher "
                                   "learning rate (training loss 4.1000 at the first step, "
                                   "3.9500 at the end)."));
    reply_free(&r);
    char buf[4096];
    assert_non_null(strstr(log_of(h, id, buf, sizeof buf), "The loss did not go down"));
    free(id);
    h_free(h);
}

/* A reinforcement job's loss is the policy objective, which need not fall
 * as the reward rises: a flat loss is no "did not go down" warning. */
static void a_reinforcement_job_with_a_flat_loss_is_not_warned(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "w1", "8000000000", 3.6);
    struct reply r = h_upload(h, h->key, "train.jsonl",
                              "{\"messages\":[{\"role\":\"user\",\"content\":\"Q one?\"}],"
                              "\"reference\":\"K7\"}\n"
                              "{\"messages\":[{\"role\":\"user\",\"content\":\"Q two?\"}],"
                              "\"reference\":\"K8\"}\n");
    assert_int_equal(r.status, 200);
    char body[1024];
    snprintf(body, sizeof body,
             "{\"model\":\"tiny\",\"training_file\":\"%s\",\"method\":{\"type\":"
             "\"reinforcement\",\"reinforcement\":{\"grader\":{\"type\":\"string_check\","
             "\"name\":\"same\",\"input\":\"{{ sample.output_text }}\",\"reference\":"
             "\"{{ item.reference }}\",\"operation\":\"eq\"},\"hyperparameters\":{"
             "\"n_epochs\":15,\"batch_size\":1}}}}",
             h_str(r.json, "id"));
    reply_free(&r);
    r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, h->key, body);
    assert_int_equal(r.status, 200);
    char *id = strdup(h_str(r.json, "id"));
    reply_free(&r);
    struct claim c;
    assert_true(claim(h, "w1", &c));
    succeed_with(h, &c, id,
                 STARTED ",{\"event\":\"step\",\"t\":0.3,\"step\":1,\"loss\":0.01},"
                         "{\"event\":\"done\",\"step\":2,\"train_loss\":0.01,"
                         "\"model_dir\":\"/x/out/model\",\"adapter_dir\":null}");
    char path[128];
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/events", id);
    r = h_call(h, "GET", path, "limit=100", h->key, NULL);
    assert_null(strstr(r.body, "The loss did not go down"));
    reply_free(&r);
    free(id);
    h_free(h);
}

/* The sample event (type "message", data.sample) of a graded answer
 * (reinforcement fine-tuning) carries its score and a multi grader's
 * sub-scores, the message says the score; a supervised sample has none;
 * sub-scores that do not fit beside a long prompt and answer are left
 * out, the sample and its score kept. */
static json_t *sample_at(json_t *list, long step)
{
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        json_t *d = json_object_get(e, "data");
        if (json_is_true(json_object_get(d, "sample")) &&
            json_integer_value(json_object_get(d, "step")) == step)
            return e;
    }
    return NULL;
}

static void a_graded_sample_carries_its_scores(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "w1", "8000000000", 3.6);
    char *id = new_job(h, h->key, NULL);
    struct claim c;
    assert_true(claim(h, "w1", &c));
    char many[1200] = "", big[200];
    memset(big, 'x', 140);
    big[140] = '\0';
    for (int k = 0; k < 8; k++) { /* 8 sub-graders of 40-byte names: not all fit */
        size_t len = strlen(many);
        snprintf(many + len, sizeof many - len, "%s\"grader_%d_with_a_long_name_to_fill_it\":0.%d",
                 k ? "," : "", k, k + 1);
    }
    char evs[3000];
    snprintf(evs, sizeof evs,
             STARTED ",{\"event\":\"sample\",\"step\":0,\"base\":true,\"prompt\":\"Q?\","
                     "\"answer\":\"K7\",\"score\":0.75,\"scores\":{\"exact\":1,\"close\":0.5}},"
                     "{\"event\":\"sample\",\"step\":2,\"base\":false,\"prompt\":\"Q?\","
                     "\"answer\":\"K8\"},"
                     "{\"event\":\"sample\",\"step\":4,\"base\":false,\"prompt\":\"%s\","
                     "\"answer\":\"%s\",\"score\":0.25,\"scores\":{%s}}",
             big, big, many);
    assert_int_equal(events(h, &c, c.fence, evs, NULL, 0), 200);
    char path[128];
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/events", id);
    struct reply r = h_call(h, "GET", path, "limit=100", h->key, NULL);
    json_t *body = json_loads(r.body, 0, NULL);
    json_t *list = json_object_get(body, "data");
    json_t *graded = sample_at(list, 0), *plain = sample_at(list, 2), *full = sample_at(list, 4);
    assert_non_null(graded);
    assert_non_null(plain);
    assert_non_null(full);
    json_t *d = json_object_get(graded, "data");
    assert_string_equal(h_str(graded, "type"), "message");
    assert_float_equal(json_number_value(json_object_get(d, "score")), 0.75, 1e-9);
    json_t *subs = json_object_get(d, "scores");
    assert_int_equal(json_object_size(subs), 2);
    assert_float_equal(json_number_value(json_object_get(subs, "exact")), 1.0, 1e-9);
    assert_float_equal(json_number_value(json_object_get(subs, "close")), 0.5, 1e-9);
    assert_string_equal(h_str(graded, "message"),
                        "The base model's answer at step 0 (score 0.75): K7");
    d = json_object_get(plain, "data");
    assert_null(json_object_get(d, "score"));
    assert_null(json_object_get(d, "scores"));
    assert_string_equal(h_str(plain, "message"), "The model's answer at step 2: K8");
    d = json_object_get(full, "data");
    assert_string_equal(h_str(d, "answer"), big);
    assert_float_equal(json_number_value(json_object_get(d, "score")), 0.25, 1e-9);
    subs = json_object_get(d, "scores");
    assert_true(json_object_size(subs) >= 1 && json_object_size(subs) < 8);
    assert_float_equal(
        json_number_value(json_object_get(subs, "grader_0_with_a_long_name_to_fill_it")), 0.1,
        1e-9);
    json_decref(body);
    reply_free(&r);
    free(id);
    h_free(h);
}

/* A trainer's warning (a log line with "level": "warn", as a DPO run that
 * lowers both answers sends) is in the training log and is a warning event
 * of the job; a plain log line is no event. */
static void a_trainers_warning_is_a_job_event(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "w1", "8000000000", 3.6);
    char *id = new_job(h, h->key, NULL);
    struct claim c;
    assert_true(claim(h, "w1", &c));
    assert_int_equal(events(h, &c, c.fence,
                            STARTED ",{\"event\":\"log\",\"line\":\"plain line\"},"
                                    "{\"event\":\"log\",\"level\":\"warn\","
                                    "\"line\":\"DPO is lowering both answers\"}",
                            NULL, 0),
                     200);
    char path[128];
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/events", id);
    struct reply r = h_call(h, "GET", path, "limit=100", h->key, NULL);
    json_t *body = json_loads(r.body, 0, NULL);
    int warned = 0, plain = 0;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(body, "data"), i, e)
    {
        const char *m = json_string_value(json_object_get(e, "message"));
        const char *level = json_string_value(json_object_get(e, "level"));
        warned += m && level && strcmp(m, "DPO is lowering both answers") == 0 &&
                  strcmp(level, "warn") == 0;
        plain += m && strcmp(m, "plain line") == 0;
    }
    json_decref(body);
    reply_free(&r);
    assert_int_equal(warned, 1);
    assert_int_equal(plain, 0);
    char buf[4096];
    const char *log = log_of(h, id, buf, sizeof buf);
    assert_non_null(strstr(log, "plain line"));
    assert_non_null(strstr(log, "DPO is lowering both answers"));
    free(id);
    h_free(h);
}

/* Steps after the last checkpoint are lost with a worker: when the job
 * resumes, progress shows where training really is (it goes back), and
 * its events and log say which steps are repeated, at no charge. */
static void progress_after_a_lost_worker_says_what_is_repeated(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "w1", "8000000000", 3.6);
    char *id = new_job(h, h->key, NULL);
    struct claim c;
    assert_true(claim(h, "w1", &c));
    assert_int_equal(events(h, &c, c.fence, STARTED, NULL, 0), 200);
    assert_int_equal(
        events(h, &c, c.fence,
               "{\"event\":\"step\",\"t\":10.1,\"step\":10,\"loss\":2},"
               "{\"event\":\"checkpoint\",\"t\":10.1,\"step\":10,\"path\":\"/x/step-00000010\","
               "\"train_loss\":2},"
               "{\"event\":\"step\",\"t\":14.1,\"step\":14,\"loss\":1.9}",
               NULL, 0),
        200);
    assert_int_equal(store_worker_set_state(h->srv.ctl->store, "w1", "lost"), ERR_OK);
    assert_int_equal(lifecycle_worker_gone(h->srv.ctl, "w1", "worker lost"), ERR_OK);
    register_worker(h, "w2", "8000000000", 3.6);
    struct claim c2;
    assert_true(claim(h, "w2", &c2));
    assert_int_equal(events(h, &c2, c2.fence,
                            "{\"event\":\"started\",\"t\":0.1,\"step\":10,\"resumed_from\":10}",
                            NULL, 0),
                     200);
    json_t *j = job(h, h->key, id);
    assert_int_equal(progress(j, "steps_done"), 10);
    json_decref(j);
    const char *want = "Resumed from step 10 on worker w2; steps 10-14 are repeated at no charge";
    char path[128];
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/events", id);
    struct reply r = h_call(h, "GET", path, "limit=100", h->key, NULL);
    assert_non_null(strstr(r.body, want));
    reply_free(&r);
    char buf[4096];
    assert_non_null(strstr(log_of(h, id, buf, sizeof buf), want));
    free(id);
    h_free(h);
}

/* A running 16-bit job measures more memory than any worker has: it is
 * stopped, and when 4-bit would fit, its message says to choose a lower
 * precision, as at creation and in the pass. */
static void a_memory_report_keeps_the_lower_precision_message(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "huge", "200000000000", 0);
    struct reply r = h_upload(h, h->key, "train.jsonl", SAMPLE_JSONL);
    char body[256];
    snprintf(body, sizeof body,
             "{\"model\":\"big\",\"training_file\":\"%s\","
             "\"hyperparameters\":{\"batch_size\":3}}",
             h_str(r.json, "id"));
    reply_free(&r);
    r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, h->key, body);
    assert_int_equal(r.status, 200);
    char *id = strdup(h_str(r.json, "id"));
    reply_free(&r);
    /* Claimed by hand: this job is not the "tiny" one claim() expects. */
    struct claim c = {0};
    r = h_call(h, "POST", "/internal/workers/huge/claim", NULL, h->srv.worker_token, "{}");
    assert_int_equal(r.status, 200);
    snprintf(c.attempt, sizeof c.attempt, "%s", h_str(r.json, "attempt_id"));
    snprintf(c.job, sizeof c.job, "%s", h_str(r.json, "job_id"));
    c.fence = json_integer_value(json_object_get(r.json, "fence"));
    reply_free(&r);
    assert_string_equal(c.job, id);
    char stop[16];
    assert_int_equal(events(h, &c, c.fence,
                            STARTED ",{\"event\":\"memory\",\"peak_rss_bytes\":250000000000}",
                            stop, sizeof stop),
                     200);
    assert_string_equal(stop, "cancel");
    assert_int_equal(finish(h, &c, c.fence, "\"exit_status\":4"), 200);
    json_t *j = job(h, h->key, id);
    assert_string_equal(h_str(j, "status"), "failed");
    assert_string_equal(h_str(j, "message"),
                        "Not available right now. Choose a lower precision.");
    json_decref(j);
    free(id);
    h_free(h);
}

/* A stand-in for `alallo train --materialize CKPT --base B --out MODEL`:
 * counts its runs in DIR/runs and those running at its start in
 * DIR/at-once, takes a moment, and makes the model folder
 * (a copy of the base model);
 * when DIR/prune exists, the trainer has pruned the checkpoint meanwhile
 * (it is removed) and the run fails. */
static void fake_materializer(struct harness *h)
{
    char path[300];
    snprintf(path, sizeof path, "%s/materialize.sh", h->dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\nd=%s\necho run >> \"$d/runs\"\n"
               "mkdir -p \"$d/active/$$\"; ls \"$d/active\" | wc -l >> \"$d/at-once\"\n"
               "sleep 1\nrmdir \"$d/active/$$\"\n"
               "if [ -f \"$d/prune\" ]; then rm -rf \"$3\"; exit 1; fi\n"
               "mkdir -p \"$7\" && cp \"$d\"/models/tiny/* \"$7/\"\n",
            h->dir);
    fclose(f);
    chmod(path, 0755);
    snprintf(h->srv.ctl->alallo_bin, sizeof h->srv.ctl->alallo_bin, "%s", path);
}

/* A harness whose materializer is the stand-in, and a job running on
 * worker w1 (its id in *id, to free; its claim in *c). */
static struct harness *running_job_with_fake_materializer(char **id, struct claim *c)
{
    struct harness *h = h_new();
    fake_materializer(h);
    register_worker(h, "w1", "8000000000", 3600.0);
    *id = new_job(h, h->key, NULL);
    assert_true(claim(h, "w1", c));
    return h;
}

static int lines_in(const char *path)
{
    FILE *f = fopen(path, "r");
    int n = 0, c;
    while (f && (c = fgetc(f)) != EOF)
        n += c == '\n';
    if (f)
        fclose(f);
    return n;
}

/* Reports a checkpoint of step `step` in its folder of the attempt, and gives
 * its model name (the newest checkpoint's, as the API lists it). */
static void post_checkpoint(struct harness *h, const struct claim *c, const char *id, int step,
                            bool first, char name[300] /* OUT */)
{
    char ck[1100], ev[1000], path[160];
    snprintf(ck, sizeof ck, "%s/step-%d", c->checkpoint_dir, step);
    assert_int_equal(fs_mkdirs(ck, 0700), 0);
    snprintf(ev, sizeof ev,
             "%s{\"event\":\"checkpoint\",\"t\":%d.5,\"step\":%d,\"path\":\"step-%d\","
             "\"train_loss\":1}",
             first ? STARTED "," : "", step, step, step);
    assert_int_equal(events(h, c, c->fence, ev, NULL, 0), 200);
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/checkpoints", id);
    struct reply r = h_call(h, "GET", path, NULL, h->key, NULL);
    assert_int_equal(r.status, 200);
    json_t *newest = json_array_get(json_object_get(r.json, "data"), 0);
    assert_int_equal(json_integer_value(json_object_get(newest, "step_number")), step);
    snprintf(name, 300, "%s", h_str(newest, "fine_tuned_model_checkpoint"));
    reply_free(&r);
}

struct ckpt_use {
    struct harness *h;
    const char *account, *name;
    enum alallo_err e;
    pthread_t th;
};

static void *use_checkpoint(void *arg)
{
    struct ckpt_use *u = arg;
    char dir[1024], adapter[1024], why[300];
    u->e = control_checkpoint_model_dir(u->h->srv.ctl, u->account, u->name, dir, sizeof dir,
                                        adapter, sizeof adapter, NULL, why, sizeof why);
    return NULL;
}

/* Twelve first uses of one checkpoint at once make it into a model once
 * (the others wait for that build); a checkpoint the trainer prunes while
 * it is being made is 404, not an internal error. */
static void a_checkpoint_is_made_into_a_model_once_and_pruned_is_not_found(void **state)
{
    (void)state;
    struct claim c;
    char *id;
    struct harness *h = running_job_with_fake_materializer(&id, &c);
    char names[2][300];
    post_checkpoint(h, &c, id, 5, true, names[0]);
    struct store_account a;
    assert_int_equal(store_account_by_name(h->srv.ctl->store, "default", &a), ERR_OK);

    struct ckpt_use u[12];
    for (int i = 0; i < 12; i++) {
        u[i] = (struct ckpt_use){.h = h, .account = a.id, .name = names[0]};
        assert_int_equal(pthread_create(&u[i].th, NULL, use_checkpoint, &u[i]), 0);
    }
    for (int i = 0; i < 12; i++) {
        pthread_join(u[i].th, NULL);
        assert_int_equal(u[i].e, ERR_OK);
    }
    char runs[1100], prune[1100];
    snprintf(runs, sizeof runs, "%s/runs", h->dir);
    assert_int_equal(lines_in(runs), 1);

    post_checkpoint(h, &c, id, 6, false, names[1]);
    snprintf(prune, sizeof prune, "%s/prune", h->dir);
    FILE *f = fopen(prune, "w");
    assert_non_null(f);
    fclose(f);
    u[0] = (struct ckpt_use){.h = h, .account = a.id, .name = names[1]};
    use_checkpoint(&u[0]);
    assert_int_equal(u[0].e, ERR_NOT_FOUND);
    assert_int_equal(lines_in(runs), 2);
    free(id);
    h_free(h);
}

static bool build_kept(struct harness *h, const char *id, int step)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/jobs/%s/checkpoint-models/step-%d", h->srv.ctl->cfg.data_dir,
             id, step);
    struct stat st;
    return stat(path, &st) == 0;
}

static void age_build(struct harness *h, const char *id, int step, int seconds)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/jobs/%s/checkpoint-models/step-%d", h->srv.ctl->cfg.data_dir,
             id, step);
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= seconds;
    t[1] = t[0];
    assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

/* A job keeps at most four checkpoints made into models: a new one removes
 * the least recently used that has gone unused for minutes, never one a
 * job trains from, never one used just now. */
static void checkpoint_builds_beyond_four_are_removed_least_recently_used_first(void **state)
{
    (void)state;
    struct claim c;
    char *id;
    struct harness *h = running_job_with_fake_materializer(&id, &c);
    struct store_account a;
    assert_int_equal(store_account_by_name(h->srv.ctl->store, "default", &a), ERR_OK);
    char names[11][300];
    struct ckpt_use u = {.h = h, .account = a.id};
    for (int step = 5; step <= 8; step++) {
        post_checkpoint(h, &c, id, step, step == 5, names[step]);
        u.name = names[step];
        use_checkpoint(&u);
        assert_int_equal(u.e, ERR_OK);
    }
    /* A job trains from step 6's model. */
    char *from6 = new_job_of(h, h->key, names[6], NULL);
    age_build(h, id, 5, 3600);
    age_build(h, id, 6, 3500);
    age_build(h, id, 7, 3400);
    post_checkpoint(h, &c, id, 9, false, names[9]);
    u.name = names[9];
    use_checkpoint(&u);
    assert_int_equal(u.e, ERR_OK);
    assert_false(build_kept(h, id, 5)); /* the least recently used */
    for (int step = 6; step <= 9; step++)
        assert_true(build_kept(h, id, step));
    post_checkpoint(h, &c, id, 10, false, names[10]);
    u.name = names[10];
    use_checkpoint(&u);
    assert_int_equal(u.e, ERR_OK);
    assert_true(build_kept(h, id, 6)); /* a job's base */
    assert_false(build_kept(h, id, 7));
    assert_true(build_kept(h, id, 8)); /* used just now */
    assert_true(build_kept(h, id, 9));
    assert_true(build_kept(h, id, 10));
    free(from6);
    free(id);
    h_free(h);
}

/* Checkpoints of three jobs made into models at once: two builds run at a
 * time, the third waits its turn. */
static void at_most_two_checkpoint_builds_run_at_once(void **state)
{
    (void)state;
    struct harness *h = h_new();
    fake_materializer(h);
    struct store_account a;
    assert_int_equal(store_account_by_name(h->srv.ctl->store, "default", &a), ERR_OK);
    char names[3][300], *ids[3];
    struct ckpt_use u[3];
    for (int i = 0; i < 3; i++) {
        char worker[8];
        snprintf(worker, sizeof worker, "w%d", i + 1);
        register_worker(h, worker, "8000000000", 3600.0);
        ids[i] = new_job(h, h->key, NULL);
        struct claim c;
        assert_true(claim(h, worker, &c));
        post_checkpoint(h, &c, c.job, 5, true, names[i]);
    }
    for (int i = 0; i < 3; i++) {
        u[i] = (struct ckpt_use){.h = h, .account = a.id, .name = names[i]};
        assert_int_equal(pthread_create(&u[i].th, NULL, use_checkpoint, &u[i]), 0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(u[i].th, NULL);
        assert_int_equal(u[i].e, ERR_OK);
    }
    char path[300];
    snprintf(path, sizeof path, "%s/runs", h->dir);
    assert_int_equal(lines_in(path), 3);
    snprintf(path, sizeof path, "%s/at-once", h->dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    int n, most = 0;
    while (fscanf(f, "%d", &n) == 1)
        most = n > most ? n : most;
    fclose(f);
    /* Never three (each build lasts a second; all three start at once). */
    assert_true(most >= 1 && most <= 2);
    for (int i = 0; i < 3; i++)
        free(ids[i]);
    h_free(h);
}

/* Sets the deadline the scheduler keeps to (the plan's "by") of job j. */
static enum alallo_err deadline_cb(struct store_job *j, struct store_attempt *a,
                                   struct store_writes *w, void *ctx)
{
    (void)a;
    (void)w;
    char *by = strstr(j->plan, ",\"by\":");
    if (!by)
        return ERR_INTERNAL;
    snprintf(by, sizeof j->plan - (size_t)(by - j->plan), ",\"by\":%.17g}", *(double *)ctx);
    return ERR_OK;
}

/* The time's upper end, from now, of an estimate of the tiny job. */
static double estimate_high(struct harness *h, const char *goal)
{
    struct reply u = h_upload(h, h->key, "train.jsonl", SAMPLE_JSONL);
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\":\"tiny\",\"training_file\":\"%s\",\"hyperparameters\":"
             "{\"n_epochs\":10,\"batch_size\":1},\"goal\":\"%s\"}",
             h_str(u.json, "id"), goal);
    reply_free(&u);
    struct reply r = h_call(h, "POST", "/v1/fine_tuning/estimates", NULL, h->key, body);
    assert_int_equal(r.status, 200);
    double high = json_number_value(json_object_get(json_object_get(r.json, "time"), "high_s"));
    reply_free(&r);
    return high;
}

/* The nominal training (terms.training.s) of the estimate for `body`. */
static double training_s_of(struct harness *h, const char *body)
{
    struct reply r = h_call(h, "POST", "/v1/fine_tuning/estimates", NULL, h->key, body);
    assert_int_equal(r.status, 200);
    double s = json_number_value(
        json_object_get(json_object_get(json_object_get(r.json, "terms"), "training"), "s"));
    reply_free(&r);
    return s;
}

/* A validated job's attempt clock holds its validation between steps; the
 * speed it teaches is the steps' alone, so that the next estimate of the
 * same job counts the validation once: its nominal training is the time
 * the attempt took, not that time and the validation again (issue 35). */
static void a_validated_jobs_speed_leaves_its_validation_out(void **state)
{
    (void)state;
    struct harness *h = h_new();
    register_worker(h, "w1", "8000000000", 1.0);
    struct reply t = h_upload(h, h->key, "train.jsonl", SAMPLE_JSONL);
    struct reply v = h_upload(h, h->key, "valid.jsonl", SAMPLE_JSONL);
    char train[64], valid[64], body[512];
    snprintf(train, sizeof train, "%s", h_str(t.json, "id"));
    snprintf(valid, sizeof valid, "%s", h_str(v.json, "id"));
    reply_free(&t);
    reply_free(&v);
    snprintf(body, sizeof body,
             "{\"model\":\"tiny\",\"training_file\":\"%s\",\"validation_file\":\"%s\","
             "\"hyperparameters\":{\"n_epochs\":10,\"batch_size\":1}}",
             train, valid);
    struct reply r = h_call(h, "POST", "/v1/fine_tuning/jobs", NULL, h->key, body);
    assert_int_equal(r.status, 200);
    char id[64];
    snprintf(id, sizeof id, "%s", h_str(r.json, "id"));
    reply_free(&r);
    struct store_job *sj = calloc(1, sizeof *sj);
    assert_non_null(sj);
    assert_int_equal(store_job_get(h->srv.ctl->store, NULL, id, sj), ERR_OK);
    struct sched_plan p;
    assert_true(sched_plan_read(sj->plan, &p));
    free(sj);
    /* the validation is a real part of this job's time: the test would
     * see it counted twice */
    assert_true(p.between_share > 0.05);
    struct claim c;
    assert_true(claim(h, "w1", &c));
    assert_int_equal(events(h, &c, c.fence, STARTED, NULL, 0), 200);
    /* 30 steps and their validation in 60 s of the trainer's clock */
    succeed_with(h, &c, id,
                 "{\"event\":\"step\",\"t\":60.1,\"step\":30,\"loss\":1.2,"
                 "\"lr\":0.0002,\"tokens_per_s\":50},"
                 "{\"event\":\"done\",\"step\":30,\"train_loss\":1.2,"
                 "\"model_dir\":\"/x/out/model\",\"adapter_dir\":null}");
    double learnt = training_s_of(h, body);
    assert_true(fabs(learnt - 60.0) < 0.6);
    h_free(h);
}

/* Whether job id has an event whose message starts with `text`. */
static bool has_event(struct harness *h, const char *id, const char *text, int *count)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/fine_tuning/jobs/%s/events", id);
    struct reply r = h_call(h, "GET", path, "limit=100", h->key, NULL);
    int n = 0;
    json_t *e;
    size_t i;
    json_array_foreach(json_object_get(r.json, "data"), i, e)
        n += strncmp(h_str(e, "message"), text, strlen(text)) == 0;
    reply_free(&r);
    if (count)
        *count = n;
    return n > 0;
}

/* Goal finish_by: a job placed on the cheaper, slower worker whose pace
 * shows it would miss its deadline moves, from a checkpoint, to the free
 * faster worker that meets it (phase 1); when nothing can meet it, an
 * event and a log line say so once, and it goes on at the fastest
 * (phase 2). Speeds are low so that training, not loading, sets the
 * times: fast trains four times as fast as slow. */
static void a_finish_by_job_keeps_to_its_deadline(void **state)
{
    (void)state;
    for (int phase = 1; phase <= 2; phase++) {
        struct harness *h = h_new();
        register_worker_at(h, "slow", "8000000000", 0.1, 1e7);
        register_worker_at(h, "fast", "8000000000", 1000.0, 4e7);
        double fast_high = estimate_high(h, "fastest_finish");
        char extra[64];
        snprintf(extra, sizeof extra, ",\"finish_by\":%lld",
                 (long long)(clock_now_ms() / 1000 + 86400));
        char *id = new_job(h, h->key, extra);
        struct claim c, none;
        assert_false(claim(h, "fast", &none)); /* a day is time enough for slow */
        assert_true(claim(h, "slow", &c));
        assert_string_equal(c.job, id);
        /* Its pace: 3 of 30 steps in 3000 s, 27,000 s to go. */
        assert_int_equal(
            events(h, &c, c.fence,
                   STARTED ",{\"event\":\"step\",\"t\":3000,\"step\":3,\"loss\":2,"
                   "\"lr\":0.0002,\"tokens_per_s\":1}",
                   NULL, 0),
            200);
        /* A day: on time, nothing happens. */
        control_deadlines_check(h->srv.ctl, clock_now_ms());
        json_t *j = job(h, h->key, id);
        assert_string_equal(h_str(j, "status"), "running");
        assert_string_equal(h_str(j, "goal"), "finish_by");
        json_decref(j);
        /* Phase 1: a deadline fast meets (1.5 x its upper end) and slow
         * (four times its training) does not; phase 2: one nothing meets. */
        double by = (double)clock_now_ms() / 1000.0 + (phase == 1 ? 1.5 : 0.5) * fast_high;
        assert_int_equal(store_job_update(h->srv.ctl->store, id, NULL, deadline_cb, &by), ERR_OK);
        control_deadlines_check(h->srv.ctl, clock_now_ms());
        j = job(h, h->key, id);
        assert_string_equal(h_str(j, "status"), "re-scheduling");
        json_decref(j);
        int said = 0;
        if (phase == 1) {
            assert_true(has_event(h, id, "Moving from worker slow to worker fast", NULL));
            assert_false(has_event(h, id, "No capacity can finish", NULL));
        } else {
            assert_true(has_event(h, id, "Moving from worker slow to the faster worker fast",
                                  NULL));
            assert_true(has_event(h, id, "No capacity can finish this job by", &said));
            assert_int_equal(said, 1);
            char buf[4096];
            assert_non_null(strstr(log_of(h, id, buf, sizeof buf),
                                   "it goes on at the fastest capacity"));
        }
        char stop[16];
        assert_int_equal(events(h, &c, c.fence,
                                "{\"event\":\"checkpoint\",\"step\":3,\"path\":\"/x\","
                                "\"train_loss\":2}",
                                stop, sizeof stop),
                         200);
        assert_string_equal(stop, "move");
        assert_int_equal(finish(h, &c, c.fence, "\"exit_status\":4"), 200);
        /* The pass places it by its goal: on fast, from the checkpoint. */
        assert_false(claim(h, "slow", &none));
        struct claim c2;
        assert_true(claim(h, "fast", &c2));
        assert_string_equal(c2.job, id);
        assert_int_equal(c2.resume_step, 3);
        /* A new attempt is judged on its own pace only: none yet, nothing
         * said (phase 1). Once its pace shows it late again, the missed
         * deadline is not said twice (phase 2). */
        assert_int_equal(events(h, &c2, c2.fence,
                                "{\"event\":\"started\",\"t\":0.1,\"step\":3,\"resumed_from\":3}",
                                NULL, 0),
                         200);
        if (phase == 2)
            assert_int_equal(events(h, &c2, c2.fence,
                                    "{\"event\":\"step\",\"t\":3000,\"step\":6,\"loss\":2,"
                                    "\"lr\":0.0002,\"tokens_per_s\":1}",
                                    NULL, 0),
                             200);
        control_deadlines_check(h->srv.ctl, clock_now_ms());
        has_event(h, id, "No capacity can finish this job by", &said);
        assert_int_equal(said, phase == 1 ? 0 : 1);
        free(id);
        h_free(h);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(succeeds_with_log_checkpoints_and_price),
        cmocka_unit_test(stale_fences_change_nothing),
        cmocka_unit_test(failures_have_their_messages),
        cmocka_unit_test(cancel_and_drain_a_running_job),
        cmocka_unit_test(a_graded_sample_carries_its_scores),
        cmocka_unit_test(too_big_for_every_worker),
        cmocka_unit_test(the_estimate_warns_of_the_time_limit),
        cmocka_unit_test(the_pass_fails_a_job_that_fits_only_at_lower_precision),
        cmocka_unit_test(fair_between_accounts),
        cmocka_unit_test(resent_batches_and_finishes_are_idempotent),
        cmocka_unit_test(a_batch_with_done_sent_again_is_no_fence),
        cmocka_unit_test(a_waiting_jobs_data_set_stays_or_the_job_fails),
        cmocka_unit_test(a_trainer_that_never_starts_is_tried_again_then_failed),
        cmocka_unit_test(spot_take_back_moves_the_job),
        cmocka_unit_test(cancel_costs_the_steps_done_unless_past_the_estimate),
        cmocka_unit_test(a_burst_of_jobs_sees_each_other_in_the_queue),
        cmocka_unit_test(a_placed_job_reads_as_its_estimate_until_its_pace),
        cmocka_unit_test(a_success_keeps_every_calibration_row),
        cmocka_unit_test(an_explicit_max_steps_sets_the_work),
        cmocka_unit_test(claims_right_after_a_pass_take_its_assignments),
        cmocka_unit_test(a_cancel_while_re_scheduling_keeps_the_partial_model),
        cmocka_unit_test(a_worker_lost_while_cancelling_leaves_the_partial_model),
        cmocka_unit_test(a_partial_model_lost_to_a_stop_is_made_at_start_up),
        cmocka_unit_test(a_checkpoint_is_made_into_a_model_once_and_pruned_is_not_found),
        cmocka_unit_test(checkpoint_builds_beyond_four_are_removed_least_recently_used_first),
        cmocka_unit_test(at_most_two_checkpoint_builds_run_at_once),
        cmocka_unit_test(a_job_that_learned_nothing_says_so),
        cmocka_unit_test(a_reinforcement_job_with_a_flat_loss_is_not_warned),
        cmocka_unit_test(a_trainers_warning_is_a_job_event),
        cmocka_unit_test(a_finish_by_job_keeps_to_its_deadline),
        cmocka_unit_test(progress_after_a_lost_worker_says_what_is_repeated),
        cmocka_unit_test(a_memory_report_keeps_the_lower_precision_message),
        cmocka_unit_test(a_cancel_whose_next_trainer_never_starts_keeps_the_partial_model),
        cmocka_unit_test(resumes_from_the_checkpoint_the_server_recorded),
        cmocka_unit_test(a_resume_elsewhere_is_never_billed_wrong),
        cmocka_unit_test(reports_out_of_order_are_ignored),
        cmocka_unit_test(a_validated_jobs_speed_leaves_its_validation_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
