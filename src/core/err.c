/* err.c - tables behind err.h. */
#include "core/err.h"

struct err_row {
    enum alallo_err err;
    int http;
    const char *code;
    const char *message;
};

static const struct err_row rows[] = {
    {ERR_OK, 200, "ok", "OK"},
    {ERR_INVALID, 400, "invalid_request_error", "The request is not valid."},
    {ERR_UNAUTHORIZED, 401, "invalid_api_key", "Missing or invalid credentials."},
    {ERR_FORBIDDEN, 403, "forbidden", "This account may not do that."},
    {ERR_NOT_FOUND, 404, "not_found", "No such object."},
    {ERR_CONFLICT, 409, "conflict", "The object's state does not allow this."},
    {ERR_TOO_LARGE, 413, "too_large", "The request is too large."},
    {ERR_RATE_LIMITED, 429, "rate_limit_exceeded", "Too many requests; slow down."},
    {ERR_NOMEM, 500, "server_error", "The server ran out of memory."},
    {ERR_IO, 500, "server_error", "The server could not read or write its data."},
    {ERR_INTERNAL, 500, "server_error", "Internal error."},
    {ERR_UNAVAILABLE, 503, "unavailable", "Temporarily unavailable; try again."},
    {ERR_FENCED, 409, "fenced", "This attempt no longer owns the job."},
};

static const struct err_row *find(enum alallo_err e)
{
    for (unsigned i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i].err == e)
            return &rows[i];
    return &rows[10]; /* ERR_INTERNAL */
}

int err_http_status(enum alallo_err e) { return find(e)->http; }
const char *err_code(enum alallo_err e) { return find(e)->code; }
const char *err_message(enum alallo_err e) { return find(e)->message; }
