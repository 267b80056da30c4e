/* http_mhd.c - libmicrohttpd in, plain http_request/http_response out. */
#include "api/http_mhd.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

#include "api/conn_guard.h"
#include "api/forward.h"
#include "api/handlers.h"
#include "api/router.h"
#include "core/clock.h"
#include "core/growbuf.h"
#include "core/text.h"

struct http_server {
    struct MHD_Daemon *daemon;
    struct api_server *srv;
    int port;
    struct conn_guard *guard;
    char keep_alive[32]; /* the Keep-Alive hint every answer carries */
    pthread_t reaper;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    int reaper_running, reaper_stop;
};

/* What one request collects between libmicrohttpd's calls. */
struct conn_state {
    struct http_request *req; /* built when the headers arrive */
    struct growbuf body; /* at most limit bytes and the NUL */
    int64_t limit;
    int too_large;
    size_t drained; /* bytes dropped past the cap */
    int answered;
    /* Refused at its headers while its body was already on the way: the
     * body is dropped and then this is the answer (the connection stays
     * among the waiting ones the guard may cut meanwhile). */
    int refused;
    struct http_response refusal;
};

/* A body over its cap is read and dropped up to this much more, so that
 * the client is still reading when the 413 comes (a connection closed on
 * a client mid-upload often hides the answer from it). */
#define DRAIN_MAX (64LL << 20)
#define TOO_LARGE_MESSAGE "The request body is larger than this endpoint accepts."


static struct conn_guard_entry *guard_entry(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

struct stream_box {
    http_stream_fn fn;
    void *ctx;
    void (*free_fn)(void *ctx);
    /* With a floor rate: the guard that counts what is sent, and the
     * connection's entry (read only while the connection is open). */
    struct conn_guard *guard;
    struct conn_guard_entry *entry;
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
    if (b->entry)
        conn_guard_sent(b->guard, b->entry, n);
    return n;
}

static void stream_free(void *cls)
{
    struct stream_box *b = cls;
    if (b->free_fn)
        b->free_fn(b->ctx);
    free(b);
}

/* Hands res to libmicrohttpd (taking what it owns) and queues it; with
 * `close`, the connection closes after it (its request's body was not
 * read, so what follows on the socket is not a request). */
static enum MHD_Result send_response(struct http_server *h, struct MHD_Connection *conn,
                                     struct http_response *res, bool close)
{
    struct MHD_Response *r;
    if (res->stream) {
        struct stream_box *b = malloc(sizeof *b);
        if (!b)
            return MHD_NO;
        *b = (struct stream_box){res->stream, res->stream_ctx, res->stream_free, NULL, NULL};
        if (res->floor_bps > 0) {
            b->entry = guard_entry(conn);
            b->guard = h->guard;
            if (b->entry)
                conn_guard_floor(h->guard, b->entry, res->floor_bps, clock_mono_ms());
        }
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
    if (close)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    else
        MHD_add_response_header(r, "Keep-Alive", h->keep_alive);
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

/* Answers res now (counted) and frees what it owns. */
static enum MHD_Result answer(struct http_server *h, struct MHD_Connection *conn,
                              struct http_response *res, bool close)
{
    atomic_fetch_add(&h->srv->metrics.requests[metrics_code_index(res->status)], 1);
    enum MHD_Result ok = send_response(h, conn, res, close);
    http_response_free(res);
    return ok;
}

static void set_error(struct http_response *res, enum alallo_err e, const char *msg, int status)
{
    api_error(res, e, msg, NULL);
    if (status)
        res->status = status;
}

static enum MHD_Result answer_error(struct http_server *h, struct MHD_Connection *conn,
                                    enum alallo_err e, const char *msg, int status)
{
    struct http_response res = {0};
    set_error(&res, e, msg, status);
    return answer(h, conn, &res, false);
}

/* How a request's body is framed, from its headers. */
enum framing {
    BODY_NONE,
    BODY_LENGTH,  /* one Content-Length (repeats of the same value are one) */
    BODY_CHUNKED, /* Transfer-Encoding and no Content-Length */
    BODY_AMBIGUOUS, /* Content-Lengths that differ, or one with Transfer-Encoding */
};

struct framing_scan {
    int lengths, encodings;
    bool differ;
    const char *first;
};

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    (void)kind;
    struct framing_scan *f = cls;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
        if (f->lengths++ == 0)
            f->first = value;
        else if (strcmp(f->first, value) != 0)
            f->differ = true;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        f->encodings++;
    }
    return MHD_YES;
}

/* The body's framing and its declared length (0 unless BODY_LENGTH). Two
 * framings that disagree are refused rather than one of them believed:
 * a proxy in front that believed the other would see a different request
 * (request smuggling). */
static enum framing body_framing(struct MHD_Connection *conn, long long *declared /* OUT */)
{
    struct framing_scan f = {0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, scan_header, &f);
    *declared = 0;
    if (f.differ || (f.lengths && f.encodings))
        return BODY_AMBIGUOUS;
    if (f.encodings)
        return BODY_CHUNKED;
    if (!f.lengths)
        return BODY_NONE;
    *declared = strtoll(f.first, NULL, 10);
    return *declared > 0 ? BODY_LENGTH : BODY_NONE;
}

/* Whether the client waits for "100 Continue" before sending its body. */
static bool expects_continue(struct MHD_Connection *conn)
{
    const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
    return v && strcasecmp(v, "100-continue") == 0;
}

/* Builds cs->req from the request line and headers. Returns false with
 * res answered when they cannot be served (414, a NUL, bad query). */
static bool read_request(struct conn_state *cs, struct MHD_Connection *conn, const char *url,
                         const char *method, struct http_response *res)
{
    struct http_request *req = calloc(1, sizeof *req);
    if (!req) {
        set_error(res, ERR_INTERNAL, NULL, 0);
        return false;
    }
    cs->req = req;
    if (!text_copy(req->method, sizeof req->method, method) ||
        !text_copy(req->path, sizeof req->path, url)) {
        set_error(res, ERR_INVALID, "The request line is too long.", 414);
        return false;
    }
    if (strstr(req->path, "%00")) { /* kept encoded by unescape() */
        set_error(res, ERR_INVALID, "The path holds a NUL byte (%00).", 0);
        return false;
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
    req->forwarded = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, FORWARD_HEADER) != NULL;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    req->client_fd = ci && ci->connect_fd > 0 ? ci->connect_fd : 0;
    struct query_collect q = {.req = req};
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, add_query, &q);
    if (q.overflow) {
        set_error(res, ERR_INVALID,
                  "A query parameter is too long, or there are too many of them.", 0);
        return false;
    }
    return true;
}

/* The first call for a request: its line and headers have arrived, its
 * body (if any) has not been read. Everything that can be decided without
 * the body is decided here, so that a refused request neither gets a
 * "100 Continue" nor holds a connection busy while its body trickles. */
static enum MHD_Result on_headers(struct http_server *h, struct MHD_Connection *conn,
                                  struct conn_state *cs, const char *url, const char *method)
{
    struct http_response res = {0};
    long long declared;
    enum framing fr = body_framing(conn, &declared);
    bool has_body = fr != BODY_NONE;
    bool expect = expects_continue(conn);
    cs->limit = router_body_cap(h->srv, method, url);
    growbuf_init(&cs->body, (size_t)cs->limit + 1);
    if (fr == BODY_AMBIGUOUS) {
        cs->answered = 1;
        set_error(&res, ERR_INVALID,
                  "The request's length is ambiguous: send one Content-Length, or "
                  "Transfer-Encoding alone.",
                  0);
        return answer(h, conn, &res, true);
    }
    bool ok = read_request(cs, conn, url, method, &res);
    if (ok && has_body)
        ok = api_admit_body(h->srv, cs->req, &res);
    if (!ok) {
        if (has_body && !expect && declared <= cs->limit + DRAIN_MAX) {
            /* Its body is on the way: drop it, then answer, so that the
             * client hears why. The connection stays waiting meanwhile. */
            cs->refused = 1;
            cs->refusal = res;
            return MHD_YES;
        }
        cs->answered = 1;
        return answer(h, conn, &res, has_body);
    }
    struct conn_guard_entry *ge = guard_entry(conn);
    if (ge && !conn_guard_busy(h->guard, ge))
        return MHD_NO; /* cut while its headers were read */
    if (declared > cs->limit) {
        if (expect || declared > cs->limit + DRAIN_MAX) {
            /* Refused before any of it is sent (no "100 Continue"). */
            cs->answered = 1;
            set_error(&res, ERR_TOO_LARGE, TOO_LARGE_MESSAGE, 0);
            return answer(h, conn, &res, true);
        }
        cs->too_large = 1; /* read and drop it, then answer 413 */
    }
    return MHD_YES;
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
        return on_headers(h, conn, cs, url, method);
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (cs->answered)
            return MHD_YES;
        if (cs->refused || cs->too_large || (int64_t)(cs->body.len + n) > cs->limit) {
            /* Past the cap (or refused) nothing is kept; past the drain
             * cap too, the answer goes now. */
            if (!cs->refused)
                cs->too_large = 1;
            cs->drained += n;
            if ((int64_t)cs->drained > DRAIN_MAX) {
                cs->answered = 1;
                if (cs->refused)
                    return answer(h, conn, &cs->refusal, true);
                return answer_error(h, conn, ERR_TOO_LARGE, TOO_LARGE_MESSAGE, 0);
            }
            return MHD_YES;
        }
        if (growbuf_append(&cs->body, upload_data, n))
            return MHD_NO; /* out of memory: the limit was checked above */
        return MHD_YES;
    }
    if (cs->answered)
        return MHD_YES;
    cs->answered = 1;
    if (cs->refused)
        return answer(h, conn, &cs->refusal, false);
    if (cs->too_large)
        return answer_error(h, conn, ERR_TOO_LARGE, TOO_LARGE_MESSAGE, 0);

    struct http_request *req = cs->req;
    req->body = cs->body.p;
    req->body_len = cs->body.len;
    struct http_response res = {0};
    api_dispatch(h->srv, req, &res);
    enum MHD_Result ok = send_response(h, conn, &res, false);
    http_response_free(&res);
    return ok;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    struct http_server *h = cls;
    struct conn_state *cs = *con_cls;
    if (cs) {
        growbuf_free(&cs->body);
        free(cs->req);
        http_response_free(&cs->refusal);
        free(cs);
        *con_cls = NULL;
    }
    /* The connection waits for its next request from now. */
    struct conn_guard_entry *ge = guard_entry(conn);
    if (ge)
        conn_guard_wait(h->guard, ge, clock_mono_ms());
}

/* Connections opening and closing, for the guard. A connection the guard
 * cannot track (out of memory) is cut at once. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct http_server *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? conn_guard_open(h->guard, ci->connect_fd, clock_mono_ms()) : NULL;
        if (!*socket_context && ci)
            shutdown(ci->connect_fd, SHUT_RDWR);
        pthread_mutex_lock(&h->mu);
        pthread_cond_signal(&h->wake); /* a new deadline to watch */
        pthread_mutex_unlock(&h->mu);
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_guard_close(h->guard, *socket_context);
        *socket_context = NULL;
    }
}

/* Cuts waiting connections at their deadline: sleeps until the oldest
 * one's is due, or a second when none waits. */
static void *reaper_main(void *arg)
{
    struct http_server *h = arg;
    pthread_mutex_lock(&h->mu);
    while (!h->reaper_stop) {
        int64_t now = clock_mono_ms();
        conn_guard_expire(h->guard, now);
        int64_t due = conn_guard_next_due(h->guard, now);
        if (due < 0 || due > 1000)
            due = 1000;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = ts.tv_nsec + (due + 5) * 1000000LL;
        ts.tv_sec += ns / 1000000000LL;
        ts.tv_nsec = ns % 1000000000LL;
        pthread_cond_timedwait(&h->wake, &h->mu, &ts);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

static void on_mhd_error(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    log_line("warn", "http: %s", line);
}

/* Descriptors kept for everything but connections: the store, logs,
 * trainers' pipes, the listening socket. */
#define FDS_SPARE 256

/* Raises the soft descriptor limit so that `want` connections fit, as far
 * as the hard limit allows. Returns how many connections fit. */
static unsigned fit_connections(unsigned want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return want;
    rlim_t need = (rlim_t)want + FDS_SPARE;
    if (rl.rlim_cur < need) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur >= need)
        return want;
    unsigned fit = rl.rlim_cur > FDS_SPARE + 16 ? (unsigned)(rl.rlim_cur - FDS_SPARE) : 16;
    log_line("warn", "http: the descriptor limit (%llu) allows %u connections, not %u",
             (unsigned long long)rl.rlim_cur, fit, want);
    return fit;
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
    unsigned limit = fit_connections(HTTP_CONNECTIONS_MAX);
    unsigned waiting = limit / 4 * 3; /* the rest is the reserve for checked callers */
    int header_s = srv->cfg.header_timeout_s > 0 ? srv->cfg.header_timeout_s : 15;
    /* Clients that honour the hint close an idle connection before the
     * guard would cut it, so a reused connection is rarely cut under them. */
    snprintf(h->keep_alive, sizeof h->keep_alive, "timeout=%d",
             header_s > 2 ? header_s * 2 / 3 : 1);
    h->guard = conn_guard_new((int)waiting, (int64_t)header_s * 1000, NULL);
    if (!h->guard || pthread_mutex_init(&h->mu, NULL) != 0) {
        conn_guard_free(h->guard);
        free(h);
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    pthread_cond_init(&h->wake, NULL);
    h->daemon = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
            MHD_USE_ERROR_LOG,
        (uint16_t)port, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_error,
        NULL, MHD_OPTION_SOCK_ADDR, &addr, MHD_OPTION_CONNECTION_LIMIT, limit,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_TIMEOUT_S,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_NOTIFY_CONNECTION,
        on_connection, h, MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1 << 20),
        MHD_OPTION_LISTENING_ADDRESS_REUSE, 1U, MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
        MHD_OPTION_END);
    if (!h->daemon) {
        snprintf(err, errcap, "cannot listen on %s:%d (in use, or not allowed)", host, port);
        goto fail;
    }
    if (pthread_create(&h->reaper, NULL, reaper_main, h) != 0) {
        snprintf(err, errcap, "cannot start a thread");
        MHD_stop_daemon(h->daemon);
        goto fail;
    }
    h->reaper_running = 1;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info && info->port ? info->port : port;
    *out = h;
    return 0;
fail:
    conn_guard_free(h->guard);
    pthread_cond_destroy(&h->wake);
    pthread_mutex_destroy(&h->mu);
    free(h);
    return -1;
}

int http_server_port(const struct http_server *h) { return h->port; }

void http_server_stop(struct http_server *h)
{
    if (!h)
        return;
    atomic_store(&h->srv->stopping, 1);
    if (h->reaper_running) {
        pthread_mutex_lock(&h->mu);
        h->reaper_stop = 1;
        pthread_cond_signal(&h->wake);
        pthread_mutex_unlock(&h->mu);
        pthread_join(h->reaper, NULL);
    }
    MHD_stop_daemon(h->daemon);
    conn_guard_free(h->guard);
    pthread_cond_destroy(&h->wake);
    pthread_mutex_destroy(&h->mu);
    free(h);
}
