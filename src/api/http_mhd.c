/* http_mhd.c - libmicrohttpd in, plain http_request/http_response out. */
#include "api/http_mhd.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/handlers.h"
#include "api/router.h"
#include "core/text.h"

struct http_server {
    struct MHD_Daemon *daemon;
    struct api_server *srv;
    int port;
};

/* What one request collects between libmicrohttpd's calls. */
struct conn_state {
    char *body;
    size_t len, cap;
    int64_t limit;
    int too_large;
    size_t drained; /* bytes dropped past the cap */
    int answered;
};

/* A body over its cap is read and dropped up to this much more, so that
 * the client is still reading when the 413 comes (a connection closed on
 * a client mid-upload often hides the answer from it). */
#define DRAIN_MAX (64LL << 20)
#define TOO_LARGE_MESSAGE "The request body is larger than this endpoint accepts."


struct stream_box {
    http_stream_fn fn;
    void *ctx;
    void (*free_fn)(void *ctx);
};

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct stream_box *b = cls;
    ssize_t n = b->fn(b->ctx, buf, max);
    if (n == -1)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (n < 0)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    return n;
}

static void stream_free(void *cls)
{
    struct stream_box *b = cls;
    if (b->free_fn)
        b->free_fn(b->ctx);
    free(b);
}

/* Hands res to libmicrohttpd (taking what it owns) and queues it. */
static enum MHD_Result send_response(struct MHD_Connection *conn, struct http_response *res)
{
    struct MHD_Response *r;
    if (res->stream) {
        struct stream_box *b = malloc(sizeof *b);
        if (!b)
            return MHD_NO;
        *b = (struct stream_box){res->stream, res->stream_ctx, res->stream_free};
        res->stream = NULL;
        res->stream_ctx = NULL;
        res->stream_free = NULL;
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024, stream_read, b,
                                              stream_free);
        if (!r) {
            stream_free(b);
            return MHD_NO;
        }
    } else {
        r = MHD_create_response_from_buffer(res->len, res->body ? res->body : (char *)"",
                                            res->body ? MHD_RESPMEM_MUST_FREE
                                                      : MHD_RESPMEM_PERSISTENT);
        if (!r)
            return MHD_NO;
        res->body = NULL;
    }
    if (res->content_type[0] && res->status != 204)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, res->content_type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (res->header_name[0])
        MHD_add_response_header(r, res->header_name, res->header_value);
    enum MHD_Result ok = MHD_queue_response(conn, (unsigned)res->status, r);
    MHD_destroy_response(r);
    return ok;
}

/* The query as collected: a parameter that does not fit (too many, or one
 * too long) makes the whole request a 400 rather than being dropped, so a
 * cursor or a limit is never silently replaced by its default. */
struct query_collect {
    struct http_request *req;
    bool overflow;
};

static enum MHD_Result add_query(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    (void)kind;
    struct query_collect *q = cls;
    if (!http_query_add(q->req, key, value))
        q->overflow = true;
    return MHD_YES;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The contract is in http_mhd.h; fuzz/fuzz_router_json.c calls it. */
size_t http_percent_decode(char *s)
{
    char *w = s;
    for (const char *r = s; *r;) {
        int hi, lo;
        if (r[0] == '%' && (hi = hex_value(r[1])) >= 0 && (lo = hex_value(r[2])) >= 0 &&
            (hi | lo) != 0) {
            *w++ = (char)(hi * 16 + lo);
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return (size_t)(w - s);
}

/* libmicrohttpd's MHD_OPTION_UNESCAPE_CALLBACK: the path, and each query
 * key and value after it turned their '+' into spaces. */
static size_t unescape(void *cls, struct MHD_Connection *conn, char *s)
{
    (void)cls;
    (void)conn;
    return http_percent_decode(s);
}

static enum MHD_Result answer_error(struct api_server *srv, struct MHD_Connection *conn,
                                    enum alallo_err e, const char *msg, int status)
{
    struct http_response res = {0};
    api_error(&res, e, msg, NULL);
    if (status)
        res.status = status;
    atomic_fetch_add(&srv->metrics.requests[metrics_code_index(res.status)], 1);
    enum MHD_Result ok = send_response(conn, &res);
    http_response_free(&res);
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    struct http_server *h = cls;
    struct conn_state *cs = *con_cls;
    if (!cs) {
        cs = calloc(1, sizeof *cs);
        if (!cs)
            return MHD_NO;
        *con_cls = cs;
        cs->limit = router_body_cap(h->srv, method, url);
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        long long declared = cl ? strtoll(cl, NULL, 10) : 0;
        if (declared > cs->limit + DRAIN_MAX) {
            /* Refuse at once; the client may see the connection close. */
            cs->answered = 1;
            return answer_error(h->srv, conn, ERR_TOO_LARGE, TOO_LARGE_MESSAGE, 0);
        }
        if (declared > cs->limit)
            cs->too_large = 1; /* read and drop it, then answer 413 */
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (cs->answered)
            return MHD_YES;
        if (cs->too_large || (int64_t)(cs->len + n) > cs->limit) {
            /* Past the cap nothing is kept; past the drain cap too, the
             * answer goes now. */
            cs->too_large = 1;
            cs->drained += n;
            if ((int64_t)cs->drained > DRAIN_MAX) {
                cs->answered = 1;
                return answer_error(h->srv, conn, ERR_TOO_LARGE, TOO_LARGE_MESSAGE, 0);
            }
            return MHD_YES;
        }
        if (cs->len + n > cs->cap) {
            size_t cap = cs->cap ? cs->cap : 16384;
            while (cap < cs->len + n)
                cap *= 2;
            char *p = realloc(cs->body, cap);
            if (!p)
                return MHD_NO;
            cs->body = p;
            cs->cap = cap;
        }
        memcpy(cs->body + cs->len, upload_data, n);
        cs->len += n;
        return MHD_YES;
    }
    if (cs->answered)
        return MHD_YES;
    cs->answered = 1;
    if (cs->too_large)
        return answer_error(h->srv, conn, ERR_TOO_LARGE, TOO_LARGE_MESSAGE, 0);

    struct http_request *req = calloc(1, sizeof *req);
    if (!req)
        return MHD_NO;
    if (!text_copy(req->method, sizeof req->method, method) ||
        !text_copy(req->path, sizeof req->path, url)) {
        free(req);
        return answer_error(h->srv, conn, ERR_INVALID, "The request line is too long.", 414);
    }
    if (strstr(req->path, "%00")) { /* kept encoded by unescape() */
        free(req);
        return answer_error(h->srv, conn, ERR_INVALID, "The path holds a NUL byte (%00).", 0);
    }
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                   MHD_HTTP_HEADER_AUTHORIZATION);
    const char *ctype = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                    MHD_HTTP_HEADER_CONTENT_TYPE);
    /* A header longer than its field reads as missing: a key or a
     * content type never legitimately needs more. */
    if (auth && !text_copy(req->authorization, sizeof req->authorization, auth))
        req->authorization[0] = '\0';
    if (ctype && !text_copy(req->content_type, sizeof req->content_type, ctype))
        req->content_type[0] = '\0';
    struct query_collect q = {.req = req};
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, add_query, &q);
    if (q.overflow) {
        free(req);
        return answer_error(h->srv, conn, ERR_INVALID,
                            "A query parameter is too long, or there are too many of them.", 0);
    }
    req->body = cs->body;
    req->body_len = cs->len;
    struct http_response res = {0};
    api_dispatch(h->srv, req, &res);
    enum MHD_Result ok = send_response(conn, &res);
    http_response_free(&res);
    free(req);
    return ok;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    struct conn_state *cs = *con_cls;
    if (cs) {
        free(cs->body);
        free(cs);
        *con_cls = NULL;
    }
}

static void on_mhd_error(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    log_line("warn", "http: %s", line);
}

int http_server_start(struct api_server *srv, const char *host, int port, struct http_server **out,
                      char *err, size_t errcap)
{
    *out = NULL;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        snprintf(err, errcap, "--host must be an IPv4 address, not %s", host);
        return -1;
    }
    struct http_server *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    h->srv = srv;
    h->daemon = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
            MHD_USE_ERROR_LOG,
        (uint16_t)port, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_error,
        NULL, MHD_OPTION_SOCK_ADDR, &addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_CONNECTIONS_MAX,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_TIMEOUT_S,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1 << 20),
        MHD_OPTION_LISTENING_ADDRESS_REUSE, 1U, MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
        MHD_OPTION_END);
    if (!h->daemon) {
        snprintf(err, errcap, "cannot listen on %s:%d (in use, or not allowed)", host, port);
        free(h);
        return -1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info && info->port ? info->port : port;
    *out = h;
    return 0;
}

int http_server_port(const struct http_server *h) { return h->port; }

void http_server_stop(struct http_server *h)
{
    if (!h)
        return;
    atomic_store(&h->srv->stopping, 1);
    MHD_stop_daemon(h->daemon);
    free(h);
}
