/* server.c - defaults and the answering helpers of server.h. */
#include "api/server.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void api_config_defaults(struct api_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->port = 8080;
    cfg->worker_timeout_s = 10;
    cfg->heartbeat_s = 2;
    cfg->time_limit_s = 12 * 3600;
    cfg->budget_multiple = 2.0;
    cfg->max_upload = 256LL << 20;
    cfg->max_body = 4LL << 20;
    cfg->completion_timeout_s = 120;
    cfg->max_completions = 2;
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
    char buf[1024];
    json_t *err = json_pack("{s:{s:s,s:s,s:o}}", "error", "code", err_code(e), "message",
                            message ? message : err_message(e), "param",
                            param ? json_string(param) : json_null());
    char *text = err ? json_dumps(err, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(err);
    int status = err_http_status(e);
    if (!text) {
        /* Out of memory: a fixed answer that needs no allocation to build. */
        int n = snprintf(buf, sizeof buf,
                         "{\"error\":{\"code\":\"server_error\",\"message\":\"out of "
                         "memory\",\"param\":null}}");
        http_respond(res, 500, "application/json", buf, (size_t)n);
        return;
    }
    http_respond(res, status, "application/json", text, strlen(text));
    free(text);
}

void api_store_error(struct http_response *res, enum alallo_err e)
{
    if (e == ERR_NOT_FOUND || e == ERR_CONFLICT || e == ERR_INVALID) {
        api_error(res, e, NULL, NULL);
        return;
    }
    api_log("error", "%s", store_last_error());
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

int64_t api_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void api_log(const char *level, const char *fmt, ...)
{
    char line[2048];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    int n = (int)strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%SZ ", &tm);
    n += snprintf(line + n, sizeof line - (size_t)n, "%s: ", level);
    va_list ap;
    va_start(ap, fmt);
    if (n < (int)sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
}
