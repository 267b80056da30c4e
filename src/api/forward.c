/* forward.c - see forward.h. One libcurl call per forwarded request, on a
 * thread of its own (struct relay). */
#include "api/forward.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "control/leadership.h"
#include "core/growbuf.h"
#include "core/text.h"

/* An answer larger than this is refused (the API's largest answers are
 * lists of 100 rows). */
#define ANSWER_MAX (16 << 20)

bool forward_needed(struct api_server *srv, const char *method)
{
    return strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0 &&
           !control_leads(srv->ctl);
}

/* Bytes of a streamed answer held for a reader that has not taken them;
 * the leader's connection waits (TCP's flow control) beyond. */
#define RELAY_HELD_MAX (1 << 20)

/* One forwarded call: libcurl runs it on a thread of its own, so that an
 * event stream (a streamed chat answer) is passed on as it comes rather
 * than when it ends. Shared by that thread and the answer; freed by the
 * last of the two (refs). */
struct relay {
    pthread_mutex_t mu;
    pthread_cond_t changed;
    int refs;
    atomic_int *stopping; /* the server's: streams end on shutdown */
    CURL *curl;
    struct curl_slist *headers;
    bool head_done;   /* the status and headers are known */
    bool streaming;   /* text/event-stream: passed on as it comes */
    bool ended;       /* libcurl returned */
    bool reader_gone; /* the answer was freed: the thread stops */
    bool too_large;
    CURLcode rc;
    long status;
    char content_type[64];
    char header_name[32];
    char header_value[256];
    /* The whole answer (ANSWER_MAX checked in on_body), or a stream's bytes
     * not yet read from off on (at most RELAY_HELD_MAX held, and a chunk):
     * no cap of the buffer's own. */
    struct growbuf body;
    size_t off;
};

static void relay_release(struct relay *r)
{
    pthread_mutex_lock(&r->mu);
    bool last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (!last)
        return;
    curl_slist_free_all(r->headers);
    if (r->curl)
        curl_easy_cleanup(r->curl);
    pthread_cond_destroy(&r->changed);
    pthread_mutex_destroy(&r->mu);
    growbuf_free(&r->body);
    free(r);
}

/* Appends to the body under the lock: a whole answer up to ANSWER_MAX; a
 * stream's bytes waiting (up to RELAY_HELD_MAX held) for its reader. */
static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    struct relay *r = arg;
    size_t add = size * n;
    pthread_mutex_lock(&r->mu);
    while (r->streaming && !r->reader_gone && r->body.len - r->off > RELAY_HELD_MAX)
        pthread_cond_wait(&r->changed, &r->mu);
    size_t taken = 0;
    if (r->reader_gone) {
        taken = 0; /* stops the transfer */
    } else if (!r->streaming && r->body.len + add > ANSWER_MAX) {
        r->too_large = true;
    } else if (growbuf_append(&r->body, data, add) == GROWBUF_OK) { /* else out of memory */
        taken = add;
        pthread_cond_broadcast(&r->changed);
    }
    pthread_mutex_unlock(&r->mu);
    return taken;
}

/* Keeps Retry-After and Content-Disposition, the extra headers handlers
 * set (struct http_response has room for one); at the blank line that
 * ends a final (not 1xx) answer's headers, the head is known. */
static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
    struct relay *r = arg;
    size_t len = size * n;
    static const char *const keep[] = {"Retry-After", "Content-Disposition"};
    pthread_mutex_lock(&r->mu);
    for (size_t k = 0; k < sizeof keep / sizeof keep[0]; k++) {
        size_t kl = strlen(keep[k]);
        if (len > kl + 1 && strncasecmp(data, keep[k], kl) == 0 && data[kl] == ':') {
            const char *v = data + kl + 1;
            size_t vl = len - kl - 1;
            while (vl && (*v == ' ' || *v == '\t'))
                v++, vl--;
            while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
                vl--;
            if (vl < sizeof r->header_value) {
                text_copy(r->header_name, sizeof r->header_name, keep[k]);
                memcpy(r->header_value, v, vl);
                r->header_value[vl] = '\0';
            }
        }
    }
    long status = 0;
    char *ctype = NULL;
    if ((len == 2 && data[0] == '\r') || (len == 1 && data[0] == '\n')) {
        curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(r->curl, CURLINFO_CONTENT_TYPE, &ctype);
    }
    if (status >= 200) {
        r->status = status;
        text_copy(r->content_type, sizeof r->content_type, ctype ? ctype : "");
        r->streaming = strncasecmp(r->content_type, "text/event-stream", 17) == 0;
        r->head_done = true;
        pthread_cond_broadcast(&r->changed);
    }
    pthread_mutex_unlock(&r->mu);
    return len;
}

static void *relay_main(void *arg)
{
    struct relay *r = arg;
    CURLcode rc = curl_easy_perform(r->curl);
    pthread_mutex_lock(&r->mu);
    r->rc = rc;
    r->ended = true;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->mu);
    relay_release(r);
    return NULL;
}

/* http_stream_fn: a streamed answer's bytes as the leader sends them; -1
 * at its end (or the server's shutdown), -2 when it broke off. */
static ssize_t relay_read(void *ctx, char *buf, size_t max)
{
    struct relay *r = ctx;
    ssize_t n = -1;
    pthread_mutex_lock(&r->mu);
    while (r->off == r->body.len && !r->ended && !atomic_load(r->stopping)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&r->changed, &r->mu, &ts);
    }
    if (r->off < r->body.len) {
        size_t k = r->body.len - r->off < max ? r->body.len - r->off : max;
        memcpy(buf, r->body.p + r->off, k);
        r->off += k;
        if (r->off == r->body.len) {
            r->off = 0;
            growbuf_clear(&r->body);
        }
        pthread_cond_broadcast(&r->changed);
        n = (ssize_t)k;
    } else if (r->ended && r->rc != CURLE_OK) {
        n = -2;
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}

static void relay_close(void *ctx)
{
    struct relay *r = ctx;
    pthread_mutex_lock(&r->mu);
    r->reader_gone = true;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->mu);
    relay_release(r);
}

/* Appends s to url, percent-encoding what is not safe in a path or a
 * query value. False when it does not fit. */
static bool append_encoded(char *url, size_t cap, const char *s, bool in_path)
{
    size_t n = strlen(url);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                     (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~' ||
                     (in_path && c == '/');
        if (n + 4 > cap)
            return false;
        if (plain)
            url[n++] = (char)c;
        else
            n += (size_t)snprintf(url + n, 4, "%%%02X", c);
    }
    url[n] = '\0';
    return true;
}

static bool build_url(const char *leader, const struct http_request *req, char *url, size_t cap)
{
    if (!text_copy(url, cap, leader))
        return false;
    size_t n = strlen(url);
    if (n && url[n - 1] == '/')
        url[n - 1] = '\0';
    if (!append_encoded(url, cap, req->path, true))
        return false;
    for (int i = 0; i < req->n_query; i++) {
        size_t len = strlen(url);
        if (len + 2 > cap)
            return false;
        url[len] = i == 0 ? '?' : '&';
        url[len + 1] = '\0';
        if (!append_encoded(url, cap, req->query[i].key, false) || strlen(url) + 2 > cap)
            return false;
        strcat(url, "=");
        if (!append_encoded(url, cap, req->query[i].value, false))
            return false;
    }
    return true;
}

static void unavailable(struct http_response *res, const char *message)
{
    api_error(res, ERR_UNAVAILABLE, message, NULL);
    text_copy(res->header_name, sizeof res->header_name, "Retry-After");
    text_copy(res->header_value, sizeof res->header_value, "1");
}

/* Waits up to FORWARD_WAIT_MS for a leader: this process (false) or
 * another, whose URL goes into out (true). */
static bool await_leader(struct api_server *srv, char *out, size_t cap, bool *leads)
{
    for (int waited = 0;; waited += 50) {
        *leads = control_leads(srv->ctl);
        if (*leads)
            return false;
        if (leadership_leader_url(srv->ctl, out, cap))
            return true;
        if (waited >= FORWARD_WAIT_MS)
            return false;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

bool forward_to_leader(struct api_server *srv, const struct http_request *req,
                       struct http_response *res)
{
    char leader[256];
    if (req->forwarded) {
        unavailable(res, "This server is not the leader either; retry shortly.");
        return true;
    }
    bool leads;
    if (!await_leader(srv, leader, sizeof leader, &leads)) {
        if (leads)
            return false; /* this process leads now: the caller answers */
        unavailable(res, "No server leads right now (a take-over is under way); retry "
                         "shortly.");
        return true;
    }
    char url[4 * HTTP_PATH_MAX + 1024];
    if (!build_url(leader, req, url, sizeof url)) {
        api_error(res, ERR_INVALID, "The request line is too long.", NULL);
        return true;
    }
    struct relay *r = calloc(1, sizeof *r);
    if (!r || pthread_mutex_init(&r->mu, NULL) != 0) {
        free(r);
        api_error(res, ERR_NOMEM, NULL, NULL);
        return true;
    }
    pthread_cond_init(&r->changed, NULL);
    growbuf_init(&r->body, GROWBUF_UNBOUNDED);
    r->refs = 1;
    r->stopping = &srv->stopping;
    r->curl = curl_easy_init();
    bool ok = r->curl != NULL;
    const char *lines[5] = {NULL};
    int n_lines = 0;
    char auth[HTTP_VALUE_MAX + 32], ctype[HTTP_VALUE_MAX + 32];
    if (req->authorization[0]) {
        snprintf(auth, sizeof auth, "Authorization: %s", req->authorization);
        lines[n_lines++] = auth;
    }
    if (req->content_type[0]) {
        snprintf(ctype, sizeof ctype, "Content-Type: %s", req->content_type);
        lines[n_lines++] = ctype;
    }
    lines[n_lines++] = FORWARD_HEADER ": 1";
    lines[n_lines++] = "Expect:"; /* no "100-continue" wait on large uploads */
    for (int i = 0; ok && i < n_lines; i++) {
        struct curl_slist *t = curl_slist_append(r->headers, lines[i]);
        ok = t != NULL;
        r->headers = t ? t : r->headers;
    }
    if (!ok) {
        relay_release(r);
        api_error(res, ERR_NOMEM, NULL, NULL);
        return true;
    }
    CURL *c = r->curl;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, r->headers);
    /* The body is the caller's: it is sent before the leader answers, and
     * an answer that is not a stream is awaited whole below. */
    if (req->body_len || strcmp(req->method, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body ? req->body : "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 3L);
    /* Completions may take their whole time limit. */
    curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)srv->cfg.completion_timeout_s + 60L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    r->refs = 2; /* the thread's and the answer's */
    int started = pthread_create(&th, &attr, relay_main, r);
    pthread_attr_destroy(&attr);
    if (started != 0) {
        r->refs = 1;
        relay_release(r);
        api_error(res, ERR_NOMEM, NULL, NULL);
        return true;
    }

    pthread_mutex_lock(&r->mu);
    while (!r->ended && !(r->head_done && r->streaming))
        pthread_cond_wait(&r->changed, &r->mu);
    bool stream = r->head_done && r->streaming;
    bool failed = !stream && (r->rc != CURLE_OK || r->status < 100);
    long status = r->status;
    char ctype_got[sizeof r->content_type], hname[sizeof r->header_name],
        hvalue[sizeof r->header_value];
    text_copy(ctype_got, sizeof ctype_got, r->content_type);
    text_copy(hname, sizeof hname, r->header_name);
    text_copy(hvalue, sizeof hvalue, r->header_value);
    pthread_mutex_unlock(&r->mu); /* the body is the thread's no more unless a stream */
    if (failed) {
        log_line("warn", "forwarding %s %s to the leader %s: %s", req->method, req->path, leader,
                 r->too_large ? "its answer is too large" : curl_easy_strerror(r->rc));
        unavailable(res, "The leader does not answer (a take-over may be under way); retry "
                         "shortly.");
    } else if (!stream) {
        http_respond(res, (int)status, ctype_got, r->body.p ? r->body.p : "", r->body.len);
    } else {
        http_response_free(res);
        res->status = (int)status;
        text_copy(res->content_type, sizeof res->content_type, ctype_got);
        res->stream = relay_read;
        res->stream_ctx = r;
        res->stream_free = relay_close;
    }
    if (!failed && hname[0]) {
        text_copy(res->header_name, sizeof res->header_name, hname);
        text_copy(res->header_value, sizeof res->header_value, hvalue);
    }
    if (!stream)
        relay_release(r);
    return true;
}
