/* http.c - helpers for the plain request and response structs. */
#include "api/http.h"

#include <stdlib.h>
#include <string.h>

const char *http_query(const struct http_request *req, const char *key)
{
    for (int i = 0; i < req->n_query; i++)
        if (strcmp(req->query[i].key, key) == 0)
            return req->query[i].value;
    return NULL;
}

bool http_query_add(struct http_request *req, const char *key, const char *value)
{
    if (req->n_query >= HTTP_QUERY_MAX || !key)
        return false;
    struct http_kv *kv = &req->query[req->n_query];
    size_t kn = strlen(key), vn = value ? strlen(value) : 0;
    if (kn >= sizeof kv->key || vn >= sizeof kv->value)
        return false;
    memcpy(kv->key, key, kn + 1);
    if (value)
        memcpy(kv->value, value, vn + 1);
    else
        kv->value[0] = '\0';
    req->n_query++;
    return true;
}

void http_respond(struct http_response *res, int status, const char *content_type,
                  const char *body, size_t len)
{
    http_response_free(res);
    res->status = status;
    size_t n = strlen(content_type);
    if (n >= sizeof res->content_type)
        n = sizeof res->content_type - 1;
    memcpy(res->content_type, content_type, n);
    res->content_type[n] = '\0';
    res->body = malloc(len + 1);
    if (!res->body) {
        res->status = 500;
        res->len = 0;
        return;
    }
    if (len)
        memcpy(res->body, body, len);
    res->body[len] = '\0';
    res->len = len;
}

void http_response_free(struct http_response *res)
{
    free(res->body);
    if (res->stream_free && res->stream_ctx)
        res->stream_free(res->stream_ctx);
    memset(res, 0, sizeof *res);
}

const char *http_content_type_for(const char *path)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".mjs", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".json", "application/json"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
        {".ico", "image/x-icon"},
        {".txt", "text/plain; charset=utf-8"},
        {".woff2", "font/woff2"},
    };
    const char *dot = strrchr(path, '.');
    if (dot && !strchr(dot, '/'))
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
            if (strcmp(dot, types[i].ext) == 0)
                return types[i].type;
    return "application/octet-stream";
}
