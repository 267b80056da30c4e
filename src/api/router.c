/* router.c - the route table, matching and authentication. */
#include "api/router.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "api/auth.h"
#include "api/forward.h"
#include "api/handlers.h"
#include "api/ratelimit.h"
#include "control/engine.h"
#include "core/text.h"

enum access {
    OPEN,     /* anyone: health, metrics, the dashboard */
    KEY,      /* an account's API key */
    OPERATOR, /* the API key of the account `default` */
    WORKER,   /* the worker token */
    ATTEMPT,  /* the worker token, or the token of the attempt the path names */
    SERVING,  /* the token of the serving engine the path names */
};

struct route {
    const char *method;
    const char *pattern;
    enum access access;
    api_handler handler;
};

static const struct route routes[] = {
    {"GET", "/healthz", OPEN, health_get},
    {"GET", "/metrics", OPEN, metrics_get},
    {"POST", "/v1/files", KEY, files_create},
    {"GET", "/v1/files", KEY, files_list},
    {"GET", "/v1/files/{}", KEY, files_get},
    {"DELETE", "/v1/files/{}", KEY, files_delete},
    {"GET", "/v1/files/{}/content", KEY, files_content},
    {"GET", "/v1/models", KEY, models_list},
    {"GET", "/v1/models/{}", KEY, models_get},
    {"GET", "/v1/models/{}/export", KEY, models_export},
    {"POST", "/v1/fine_tuning/estimates", KEY, estimates_create},
    {"GET", "/v1/estimates/calibration", KEY, estimates_calibration},
    {"POST", "/v1/fine_tuning/jobs", KEY, jobs_create},
    {"GET", "/v1/fine_tuning/jobs", KEY, jobs_list},
    {"GET", "/v1/fine_tuning/jobs/{}", KEY, jobs_get},
    {"POST", "/v1/fine_tuning/jobs/{}/cancel", KEY, jobs_cancel},
    {"GET", "/v1/fine_tuning/jobs/{}/events", KEY, jobs_events},
    {"GET", "/v1/fine_tuning/jobs/{}/checkpoints", KEY, jobs_checkpoints},
    {"GET", "/v1/fine_tuning/jobs/{}/checkpoints/{}/content", KEY, jobs_checkpoint_content},
    {"GET", "/v1/fine_tuning/jobs/{}/log", KEY, jobs_log},
    {"POST", "/v1/completions", KEY, completions_create},
    {"POST", "/v1/chat/completions", KEY, chat_completions_create},
    {"POST", "/v1/fine_tuning/alpha/graders/validate", KEY, graders_validate},
    {"POST", "/v1/fine_tuning/alpha/graders/run", KEY, graders_run},
    {"GET", "/v1/workers", KEY, workers_list},
    {"POST", "/v1/workers/{}/drain", OPERATOR, workers_drain},
    {"POST", "/v1/workers/{}/reclaim", OPERATOR, workers_reclaim},
    {"GET", "/v1/billing/ledger", KEY, billing_ledger},
    {"POST", "/v1/organization/integrations/wandb", KEY, integrations_wandb_set},
    {"GET", "/v1/organization/integrations/wandb", KEY, integrations_wandb_get},
    {"DELETE", "/v1/organization/integrations/wandb", KEY, integrations_wandb_delete},
    {"POST", "/v1/webhooks", KEY, webhooks_create},
    {"GET", "/v1/webhooks", KEY, webhooks_list},
    {"DELETE", "/v1/webhooks/{}", KEY, webhooks_delete},
    {"GET", "/v1/webhooks/{}/deliveries", KEY, webhooks_deliveries},
    {"POST", "/internal/workers/register", WORKER, internal_register},
    {"POST", "/internal/workers/{}/heartbeat", WORKER, internal_heartbeat},
    {"POST", "/internal/workers/{}/claim", WORKER, internal_claim},
    {"POST", "/internal/attempts/{}/start", ATTEMPT, internal_attempt_start},
    {"POST", "/internal/attempts/{}/heartbeat", ATTEMPT, internal_attempt_heartbeat},
    {"POST", "/internal/attempts/{}/events", ATTEMPT, internal_events},
    {"POST", "/internal/attempts/{}/finish", ATTEMPT, internal_finish},
    {"POST", "/internal/serving/{}/heartbeat", SERVING, internal_serving_heartbeat},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])

bool router_match(const char *pattern, const char *path,
                  char params[HTTP_PARAMS_MAX][HTTP_VALUE_MAX], int *n)
{
    *n = 0;
    const char *p = pattern, *s = path;
    while (*p && *s) {
        if (p[0] == '{' && p[1] == '}') {
            size_t len = strcspn(s, "/");
            if (len == 0 || len >= HTTP_VALUE_MAX || *n >= HTTP_PARAMS_MAX)
                return false;
            memcpy(params[*n], s, len);
            params[*n][len] = '\0';
            (*n)++;
            s += len;
            p += 2;
            continue;
        }
        if (*p != *s)
            return false;
        p++;
        s++;
    }
    /* A single trailing slash on the path is forgiven. */
    if (*p == '\0' && s[0] == '/' && s[1] == '\0')
        return true;
    return *p == '\0' && *s == '\0';
}

int64_t router_body_cap(const struct api_server *srv, const char *method, const char *path)
{
    if (strcmp(method, "POST") == 0 &&
        (strcmp(path, "/v1/files") == 0 || strcmp(path, "/v1/files/") == 0))
        return srv->cfg.max_upload;
    return srv->cfg.max_body;
}

/* The per-key rate limit (docs/security.md): only calls made with an API
 * key count; health, metrics, the dashboard and workers are never limited.
 * Returns true when the call was answered 429 with Retry-After. */
static bool rate_limited(struct api_server *srv, enum access access,
                         const struct http_request *req, struct http_response *res)
{
    if (!srv->ratelimit || (access != KEY && access != OPERATOR))
        return false;
    double retry = 0;
    if (ratelimit_take(srv->ratelimit, req->account.id, ratelimit_now(), &retry))
        return false;
    api_error(res, ERR_RATE_LIMITED,
              "Too many requests for this API key; retry after Retry-After seconds.", NULL);
    text_copy(res->header_name, sizeof res->header_name, "Retry-After");
    snprintf(res->header_value, sizeof res->header_value, "%d",
             retry < 1 ? 1 : (int)ceil(retry));
    return true;
}

static void count(struct api_server *srv, int status)
{
    atomic_fetch_add(&srv->metrics.requests[metrics_code_index(status)], 1);
}

/* Checks the caller of a /v1 route; fills req->account. */
static enum alallo_err authenticate_key(struct api_server *srv, struct http_request *req)
{
    char key[KEYS_MAX], hash[KEYS_HASH_HEX];
    if (!auth_bearer(req->authorization, key, sizeof key))
        return ERR_UNAUTHORIZED;
    if (keys_hash(key, hash))
        return ERR_INTERNAL;
    enum alallo_err e = store_account_by_key_hash(srv->ctl->store, hash, &req->account);
    if (e == ERR_NOT_FOUND)
        return ERR_UNAUTHORIZED;
    return e;
}

static enum alallo_err authenticate_worker(struct api_server *srv, struct http_request *req)
{
    char token[KEYS_MAX];
    if (!auth_bearer(req->authorization, token, sizeof token))
        return ERR_UNAUTHORIZED;
    return keys_equal(token, srv->worker_token) ? ERR_OK : ERR_UNAUTHORIZED;
}

/* The worker token, or the attempt's own token (an engine's attempt: good
 * for that attempt's calls only). */
static enum alallo_err authenticate_attempt(struct api_server *srv, struct http_request *req)
{
    char token[KEYS_MAX];
    if (!auth_bearer(req->authorization, token, sizeof token))
        return ERR_UNAUTHORIZED;
    if (keys_equal(token, srv->worker_token))
        return ERR_OK;
    return req->n_params > 0 && engine_attempt_token_ok(srv->ctl, req->params[0], token)
               ? ERR_OK
               : ERR_UNAUTHORIZED;
}

/* The serving engine's own token (engine.h: good for its heartbeats only). */
static enum alallo_err authenticate_serving(struct api_server *srv, struct http_request *req)
{
    char token[KEYS_MAX];
    if (!auth_bearer(req->authorization, token, sizeof token))
        return ERR_UNAUTHORIZED;
    bool ok = req->n_params > 0 && engine_serving_token_ok(srv->ctl, req->params[0], token);
    memset(token, 0, sizeof token);
    return ok ? ERR_OK : ERR_UNAUTHORIZED;
}

/* Finds req's route and checks its caller. Returns the route when its
 * handler may run; else NULL with res answered: 404 or 405 for an unknown
 * route, the dashboard's file for a GET outside the API (when `serve_static`),
 * 401 or 403 for a caller who may not. */
static const struct route *route_and_check(struct api_server *srv, struct http_request *req,
                                           struct http_response *res, bool serve_static)
{
    const struct route *found = NULL;
    bool path_known = false;
    for (size_t i = 0; i < N_ROUTES && !found; i++) {
        if (!router_match(routes[i].pattern, req->path, req->params, &req->n_params))
            continue;
        path_known = true;
        if (strcmp(routes[i].method, req->method) == 0)
            found = &routes[i];
    }
    if (!found) {
        bool api_path = strncmp(req->path, "/v1/", 4) == 0 || strcmp(req->path, "/v1") == 0 ||
                        strncmp(req->path, "/internal/", 10) == 0;
        bool get = strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0;
        if (path_known) {
            api_error(res, ERR_INVALID, "This method is not allowed on this path.", NULL);
            res->status = 405;
        } else if (!api_path && get && serve_static)
            static_get(srv, req, res);
        else if (!api_path && get)
            api_error(res, ERR_INVALID, "This endpoint takes no request body.", NULL);
        else
            api_error(res, ERR_NOT_FOUND, "No such endpoint.", NULL);
        return NULL;
    }
    enum alallo_err e = ERR_OK;
    switch (found->access) {
    case OPEN:
        break;
    case KEY:
        e = authenticate_key(srv, req);
        break;
    case OPERATOR:
        e = authenticate_key(srv, req);
        if (!e && strcmp(req->account.name, "default") != 0)
            e = ERR_FORBIDDEN;
        break;
    case WORKER:
        e = authenticate_worker(srv, req);
        break;
    case ATTEMPT:
        e = authenticate_attempt(srv, req);
        break;
    case SERVING:
        e = authenticate_serving(srv, req);
        break;
    }
    if (e == ERR_UNAUTHORIZED)
        api_error(res, e,
                  found->access == WORKER || found->access == ATTEMPT ||
                          found->access == SERVING
                      ? "Missing or invalid worker token (Authorization: Bearer <token>)."
                      : "Missing or invalid API key (Authorization: Bearer <key>).",
                  NULL);
    else if (e == ERR_FORBIDDEN)
        api_error(res, e, "Only the operator's account (default) may do this.", NULL);
    else if (e)
        api_store_error(res, e);
    return e ? NULL : found;
}

bool api_admit_body(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    const struct route *found = route_and_check(srv, req, res, false);
    if (found && found->access == OPEN) {
        api_error(res, ERR_INVALID, "This endpoint takes no request body.", NULL);
        found = NULL;
    }
    return found != NULL;
}

void api_dispatch(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    const struct route *found = route_and_check(srv, req, res, true);
    /* A standby sends writes on to the leader, which also applies the
     * rate limit (api/forward.h). */
    bool forwarded = found && forward_needed(srv, found->method) &&
                     forward_to_leader(srv, req, res);
    if (found && !forwarded && !rate_limited(srv, found->access, req, res))
        found->handler(srv, req, res);
    count(srv, res->status);
}
