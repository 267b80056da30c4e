/* server.h - the state one `alallo serve` holds, shared by every request
 * handler, and the helpers handlers use to answer.
 *
 * HTTP only: the store, the catalog and every change to jobs and workers
 * belong to the control layer (control/control.h), which the server reaches
 * through `ctl`. Handlers are called on the connection's own thread;
 * everything here is thread-safe.
 */
#ifndef ALALLO_API_SERVER_H
#define ALALLO_API_SERVER_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>

#include "api/http.h"
#include "core/err.h"
#include "control/control.h"
#include "store/store.h"

struct api_config {
    int port;
    int64_t max_upload;     /* largest POST /v1/files body, bytes */
    int64_t max_body;       /* largest other body, bytes */
    int completion_timeout_s;
    int max_completions; /* generations (streamed or not) running at once, shared fairly */
    int max_exports;     /* exports and checkpoint downloads at once (each a model copy) */
    int slot_wait_ms;    /* how long a call waits for its fair share of those (default 15 s) */
    int64_t export_floor_bps; /* a download read slower than this is cut (default 32 kB/s) */
    double rate_limit;   /* requests per second per API key; 0 = off (default 1000) */
    int header_timeout_s; /* a connection's time to send its request headers (default 15) */
};

/* Fills the defaults documented in docs/operations.md. */
void api_config_defaults(struct api_config *cfg /* OUT */);

#define METRIC_CODES 12

struct api_metrics {
    atomic_long requests[METRIC_CODES]; /* by status, see metrics_code_index() */
    atomic_long completions;
};

struct ratelimit;
struct fair_share;

struct api_server {
    struct api_config cfg;
    struct control *ctl; /* the service behind the API (control/control.h) */
    struct ratelimit *ratelimit; /* per-key limit on /v1 calls; NULL = none */
    struct api_metrics metrics;
    char worker_token[128];
    /* The server-wide slots, shared fairly between accounts (fair_share.h):
     * generations, and downloads holding a temporary model copy. */
    struct fair_share *generations;
    struct fair_share *exports;
    atomic_int stopping; /* set on shutdown: streams end */
};

/* Makes the slot pools of srv->cfg. 0, or -1 on out of memory. */
int api_server_pools_open(struct api_server *srv);

/* Frees them; no call may be running. */
void api_server_pools_close(struct api_server *srv);

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

#endif
