/* server.h - the state one `alallo serve` holds, shared by every request
 * handler, and the helpers handlers use to answer.
 *
 * The server owns the store and the catalog of base models. Handlers are
 * called on the connection's own thread; everything here is thread-safe.
 */
#ifndef ALALLO_API_SERVER_H
#define ALALLO_API_SERVER_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>

#include "api/http.h"
#include "core/err.h"
#include "store/store.h"

struct api_config {
    int port;
    char data_dir[512];   /* absolute */
    char models_dir[512]; /* absolute; base models, one folder each */
    int worker_timeout_s; /* a worker silent this long is lost (default 10) */
    int heartbeat_s;      /* what workers are told to use (default 2) */
    int64_t time_limit_s; /* running time per job across attempts (default 12 h) */
    double budget_multiple; /* stop past this × the upper estimated time (default 2) */
    char webhook[512];      /* "" for none */
    int start_timeout_s;    /* an attempt not `started` this long is ended (default 300) */
    int start_tries;        /* attempts that never start before the job fails (default 3) */
    double plan_scale;      /* memory plan x this (tests; default 1) */
    int64_t max_upload;     /* largest POST /v1/files body, bytes */
    int64_t max_body;       /* largest other body, bytes */
    int completion_timeout_s;
    int max_completions; /* generations running at once */
    double rate_limit;   /* requests per second per API key; 0 = off (default 1000) */
    double pass_reuse_s; /* a claim this soon after a pass takes what that pass
                            assigned it (default 0.5; sched_link.h) */
};

/* Fills the defaults documented in docs/operations.md. */
void api_config_defaults(struct api_config *cfg /* OUT */);

#define METRIC_CODES 12

struct api_metrics {
    atomic_long requests[METRIC_CODES]; /* by status, see metrics_code_index() */
    atomic_long internal_failures;
    atomic_long jobs_created;
    atomic_long completions;
    /* scheduling passes: how many, and their wall time in microseconds
     * (the sum, the latest and the longest); the jobs the latest read */
    atomic_long passes;
    atomic_long pass_us_sum;
    atomic_long pass_us_last;
    atomic_long pass_us_max;
    atomic_long pass_jobs_last;
    atomic_long pass_cpu_us_sum; /* CPU time of the passes' threads */
    atomic_long pass_cpu_us_last;
};

struct catalog;
struct fleet_cache;
struct sched_link;
struct ratelimit;

struct api_server {
    struct api_config cfg;
    struct store *store;
    struct catalog *catalog;
    struct fleet_cache *fleet;
    struct sched_link *sched; /* calibration history and the pass (sched_link.h) */
    struct ratelimit *ratelimit; /* per-key limit on /v1 calls; NULL = none */
    struct api_metrics metrics;
    char worker_token[128];
    char alallo_bin[512]; /* this binary, for child processes */
    atomic_int completions_running;
    atomic_int stopping; /* set on shutdown: streams end */
};

/* Answers with a JSON value (stolen: the caller's reference is consumed).
 * A NULL value is an out-of-memory 500. */
void api_json(struct http_response *res, int status, json_t *value);

/* Answers {"error":{"code","message","param"}} with the HTTP status of
 * `e`; message NULL uses err_message(e); param may be NULL. */
void api_error(struct http_response *res, enum alallo_err e, const char *message,
               const char *param);

/* Answers a store failure: its own status, with the store's reason logged
 * (not shown: it may name paths) and a generic message for the caller. */
void api_store_error(struct http_response *res, enum alallo_err e);

/* Parses the request body as a JSON object. On failure answers 400 and
 * returns NULL. */
json_t *api_body_object(const struct http_request *req, struct http_response *res);

/* Milliseconds since the Unix epoch. */
int64_t api_now_ms(void);

/* Logs one line to stderr with a level ("info", "warn", "error"). */
void api_log(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
