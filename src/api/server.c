/* server.c - defaults and the answering helpers of server.h. */
#include "api/server.h"

#include "api/fair_share.h"
#include "api/jsonw.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void api_config_defaults(struct api_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->port = 8080;
    cfg->max_upload = 256LL << 20;
    cfg->max_body = 4LL << 20;
    cfg->completion_timeout_s = 120;
    cfg->max_completions = 2;
    cfg->max_exports = 2;
    cfg->slot_wait_ms = 15000;
    cfg->export_floor_bps = 32 * 1024;
    cfg->rate_limit = 1000;
    cfg->header_timeout_s = 15;
}

/* Callers that may wait for a slot, per pool: at most this many times
 * the slots (one account at most as many as there are slots). */
#define POOL_WAITING_PER_SLOT 8

int api_server_pools_open(struct api_server *srv)
{
    srv->generations = fair_share_new(srv->cfg.max_completions,
                                      POOL_WAITING_PER_SLOT * srv->cfg.max_completions);
    srv->exports =
        fair_share_new(srv->cfg.max_exports, POOL_WAITING_PER_SLOT * srv->cfg.max_exports);
    if (srv->generations && srv->exports)
        return 0;
    api_server_pools_close(srv);
    return -1;
}

void api_server_pools_close(struct api_server *srv)
{
    fair_share_free(srv->generations);
    fair_share_free(srv->exports);
    srv->generations = srv->exports = NULL;
}

void api_json(struct http_response *res, int status, json_t *value)
{
    char *text = value ? json_dumps(value, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(value);
    if (!text) {
        api_error(res, ERR_NOMEM, NULL, NULL);
        return;
    }
    http_respond(res, status, "application/json", text, strlen(text));
    free(text);
}

void api_error(struct http_response *res, enum alallo_err e, const char *message,
               const char *param)
{
    /* Written with jsonw, which turns invalid UTF-8 into U+FFFD: messages
     * may quote what a caller sent (a path segment, a name), and an
     * answer must never fail because of what it quotes. */
    struct jsonw w = {0};
    jsonw_open(&w, '{');
    jsonw_key(&w, "error");
    jsonw_open(&w, '{');
    jsonw_key(&w, "code");
    jsonw_str(&w, err_code(e));
    jsonw_key(&w, "message");
    jsonw_str(&w, message ? message : err_message(e));
    jsonw_key(&w, "param");
    jsonw_str(&w, param);
    jsonw_close(&w, '}');
    jsonw_close(&w, '}');
    if (w.b.err) {
        static const char oom[] =
            "{\"error\":{\"code\":\"server_error\",\"message\":\"out of memory\",\"param\":null}}";
        http_respond(res, 500, "application/json", oom, sizeof oom - 1);
    } else {
        http_respond(res, err_http_status(e), "application/json", w.b.p, w.b.len);
    }
    jsonw_free(&w);
}

void api_store_error(struct http_response *res, enum alallo_err e)
{
    if (e == ERR_NOT_FOUND || e == ERR_CONFLICT || e == ERR_INVALID) {
        api_error(res, e, NULL, NULL);
        return;
    }
    const char *why = store_last_error();
    log_line("error", "%s", why[0] ? why : err_message(e));
    api_error(res, e, NULL, NULL);
}

json_t *api_body_object(const struct http_request *req, struct http_response *res)
{
    json_error_t jerr;
    if (!req->body || req->body_len == 0) {
        api_error(res, ERR_INVALID, "The request body must be a JSON object.", NULL);
        return NULL;
    }
    json_t *v = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!v) {
        char msg[300];
        snprintf(msg, sizeof msg, "The request body is not valid JSON: %s (line %d, column %d).",
                 jerr.text, jerr.line, jerr.column);
        api_error(res, ERR_INVALID, msg, NULL);
        return NULL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        api_error(res, ERR_INVALID, "The request body must be a JSON object.", NULL);
        return NULL;
    }
    return v;
}
