/* res_health.c - /healthz (liveness) and /metrics (Prometheus text). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/fleet.h"
#include "control/inference.h"
#include "control/leadership.h"
#include "api/handlers.h"

static const int codes[METRIC_CODES] = {200, 204, 400, 401, 403, 404,
                                        405, 409, 413, 429, 500, 503};

int metrics_code_index(int code)
{
    for (int i = 0; i < METRIC_CODES; i++)
        if (codes[i] == code)
            return i;
    /* Anything else is counted with its class's first code. */
    if (code >= 500)
        return 10;
    if (code >= 400)
        return 2;
    return 0;
}

void health_get(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    (void)req;
    long counts[JOB_STATUS_COUNT];
    enum alallo_err e = store_job_count_by_status(srv->ctl->store, counts);
    if (e) {
        api_store_error(res, e);
        return;
    }
    /* "leader": whether this process leads its store (control/leadership.h). */
    api_json(res, 200, json_pack("{s:s,s:i,s:b}", "status", "ok", "schema_version",
                                 store_schema_version(srv->ctl->store), "leader",
                                 control_leads(srv->ctl)));
}

struct out {
    char *p;
    size_t len, cap;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct out *o, const char *fmt, ...)
{
    if (!o->p)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n < 0 || o->len + (size_t)n >= o->cap) {
        free(o->p); /* the page has a fixed cap; past it, answer 500 */
        o->p = NULL;
        return;
    }
    o->len += (size_t)n;
}

/* The inference engine's gauges and counters (docs/serving.md). */
static void inference_metrics(struct api_server *srv, struct out *o)
{
    struct inference *inf = srv->ctl->inference;
    if (!inf)
        return;
    json_t *st = NULL;
    bool up = inference_stats(inf, &st) == ERR_OK && !json_object_get(st, "error");
    long starts = inference_starts(inf);
    put(o, "# HELP alallo_inference_up 1 when the inference engine answers.\n"
           "# TYPE alallo_inference_up gauge\nalallo_inference_up %d\n"
           "# HELP alallo_inference_restarts_total Restarts of the inference engine.\n"
           "# TYPE alallo_inference_restarts_total counter\nalallo_inference_restarts_total %ld\n",
        up ? 1 : 0, starts > 0 ? starts - 1 : 0);
    static const char *const gauges[][2] = {
        {"models", "Models (bases, full fine-tunes, adapters) the engine keeps loaded."},
        {"model_bytes", "Bytes of the models the engine keeps loaded."},
        {"running", "Generations the engine is decoding."},
        {"waiting", "Generations waiting in the engine's queues."},
        {"tokens_in_flight", "Prompt plus max_tokens of the running generations."},
    };
    for (size_t i = 0; up && i < sizeof gauges / sizeof gauges[0]; i++)
        put(o, "# HELP alallo_inference_%s %s\n# TYPE alallo_inference_%s gauge\n"
               "alallo_inference_%s %lld\n",
            gauges[i][0], gauges[i][1], gauges[i][0], gauges[i][0],
            (long long)json_integer_value(json_object_get(st, gauges[i][0])));
    if (up)
        put(o, "# HELP alallo_inference_tokens_total Tokens the engine generated since it "
               "started.\n# TYPE alallo_inference_tokens_total counter\n"
               "alallo_inference_tokens_total %lld\n"
               "# HELP alallo_inference_steps_total Batch steps since the engine started.\n"
               "# TYPE alallo_inference_steps_total counter\nalallo_inference_steps_total %lld\n"
               "# HELP alallo_inference_cancelled_total Generations cancelled because their "
               "client went away.\n# TYPE alallo_inference_cancelled_total counter\n"
               "alallo_inference_cancelled_total %lld\n",
            (long long)json_integer_value(json_object_get(st, "tokens_generated")),
            (long long)json_integer_value(json_object_get(st, "steps")),
            (long long)json_integer_value(json_object_get(st, "cancelled")));
    json_decref(st);
}

void metrics_get(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    (void)req;
    struct out o = {.p = malloc(65536), .cap = 65536};
    long counts[JOB_STATUS_COUNT];
    if (store_job_count_by_status(srv->ctl->store, counts))
        memset(counts, 0, sizeof counts);
    put(&o, "# HELP alallo_http_requests_total HTTP requests answered, by status code.\n"
            "# TYPE alallo_http_requests_total counter\n");
    for (int i = 0; i < METRIC_CODES; i++)
        put(&o, "alallo_http_requests_total{code=\"%d\"} %ld\n", codes[i],
            atomic_load(&srv->metrics.requests[i]));
    put(&o, "# HELP alallo_jobs Jobs in each status.\n# TYPE alallo_jobs gauge\n");
    for (int s = 0; s < JOB_STATUS_COUNT; s++)
        put(&o, "alallo_jobs{status=\"%s\"} %ld\n", job_status_name((enum job_status)s),
            counts[s]);
    struct fleet *f = malloc(sizeof *f);
    long active = 0, draining = 0, busy = 0;
    if (f) {
        fleet_snapshot(srv->ctl, f);
        for (int i = 0; i < f->n; i++) {
            if (f->workers[i].state == WORKER_DRAINING)
                draining++;
            else
                active++;
            if (!f->idle[i] && f->workers[i].state == WORKER_ACTIVE)
                busy++;
        }
        free(f);
    }
    put(&o, "# HELP alallo_workers Workers that are not lost, by state.\n"
            "# TYPE alallo_workers gauge\n"
            "alallo_workers{state=\"active\"} %ld\nalallo_workers{state=\"draining\"} %ld\n"
            "# HELP alallo_workers_busy Active workers running an attempt.\n"
            "# TYPE alallo_workers_busy gauge\nalallo_workers_busy %ld\n",
            active, draining, busy);
    put(&o, "# HELP alallo_leader 1 when this process leads its store (runs the passes and "
            "the timers), 0 for a standby.\n# TYPE alallo_leader gauge\nalallo_leader %d\n",
        control_leads(srv->ctl) ? 1 : 0);
    put(&o, "# HELP alallo_internal_failures_total Jobs failed on alallo's side.\n"
            "# TYPE alallo_internal_failures_total counter\nalallo_internal_failures_total %ld\n",
        atomic_load(&srv->ctl->metrics.internal_failures));
    put(&o, "# HELP alallo_jobs_created_total Jobs created since the server started.\n"
            "# TYPE alallo_jobs_created_total counter\nalallo_jobs_created_total %ld\n",
        atomic_load(&srv->ctl->metrics.jobs_created));
    put(&o, "# HELP alallo_completions_total Completions served.\n"
            "# TYPE alallo_completions_total counter\nalallo_completions_total %ld\n",
        atomic_load(&srv->metrics.completions));
    put(&o,
        "# HELP alallo_sched_passes_total Scheduling passes run.\n"
        "# TYPE alallo_sched_passes_total counter\nalallo_sched_passes_total %ld\n"
        "# HELP alallo_sched_pass_seconds_total Wall time of all scheduling passes.\n"
        "# TYPE alallo_sched_pass_seconds_total counter\n"
        "alallo_sched_pass_seconds_total %.6f\n"
        "# HELP alallo_sched_pass_seconds Wall time of the latest scheduling pass.\n"
        "# TYPE alallo_sched_pass_seconds gauge\nalallo_sched_pass_seconds %.6f\n"
        "# HELP alallo_sched_pass_seconds_max Wall time of the longest scheduling pass.\n"
        "# TYPE alallo_sched_pass_seconds_max gauge\nalallo_sched_pass_seconds_max %.6f\n"
        "# HELP alallo_sched_pass_jobs Waiting jobs the latest scheduling pass placed.\n"
        "# TYPE alallo_sched_pass_jobs gauge\nalallo_sched_pass_jobs %ld\n"
        "# HELP alallo_sched_pass_cpu_seconds_total CPU time of all scheduling passes.\n"
        "# TYPE alallo_sched_pass_cpu_seconds_total counter\n"
        "alallo_sched_pass_cpu_seconds_total %.6f\n"
        "# HELP alallo_sched_pass_cpu_seconds CPU time of the latest scheduling pass.\n"
        "# TYPE alallo_sched_pass_cpu_seconds gauge\nalallo_sched_pass_cpu_seconds %.6f\n",
        atomic_load(&srv->ctl->metrics.passes), atomic_load(&srv->ctl->metrics.pass_us_sum) / 1e6,
        atomic_load(&srv->ctl->metrics.pass_us_last) / 1e6,
        atomic_load(&srv->ctl->metrics.pass_us_max) / 1e6,
        atomic_load(&srv->ctl->metrics.pass_jobs_last),
        atomic_load(&srv->ctl->metrics.pass_cpu_us_sum) / 1e6,
        atomic_load(&srv->ctl->metrics.pass_cpu_us_last) / 1e6);
    inference_metrics(srv, &o);
    if (!o.p) {
        api_error(res, ERR_INTERNAL, NULL, NULL);
        return;
    }
    http_respond(res, 200, "text/plain; version=0.0.4; charset=utf-8", o.p, o.len);
    free(o.p);
}
