/* forward.c - see forward.h. One libcurl call per forwarded request. */
#include "api/forward.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "control/leadership.h"
#include "core/text.h"

/* An answer larger than this is refused (the API's largest answers are
 * lists of 100 rows). */
#define ANSWER_MAX (16 << 20)

bool forward_needed(struct api_server *srv, const char *method)
{
    return strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0 &&
           !control_leads(srv->ctl);
}

struct answer {
    char *body;
    size_t len, cap;
    bool too_large;
    char header_name[32];
    char header_value[256];
};

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    struct answer *a = arg;
    size_t add = size * n;
    if (a->len + add > ANSWER_MAX) {
        a->too_large = true;
        return 0;
    }
    if (a->len + add > a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 4096;
        while (cap < a->len + add)
            cap *= 2;
        char *p = realloc(a->body, cap);
        if (!p)
            return 0;
        a->body = p;
        a->cap = cap;
    }
    memcpy(a->body + a->len, data, add);
    a->len += add;
    return add;
}

/* Keeps Retry-After and Content-Disposition, the extra headers handlers
 * set (struct http_response has room for one). */
static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
    struct answer *a = arg;
    size_t len = size * n;
    static const char *const keep[] = {"Retry-After", "Content-Disposition"};
    for (size_t k = 0; k < sizeof keep / sizeof keep[0]; k++) {
        size_t kl = strlen(keep[k]);
        if (len > kl + 1 && strncasecmp(data, keep[k], kl) == 0 && data[kl] == ':') {
            const char *v = data + kl + 1;
            size_t vl = len - kl - 1;
            while (vl && (*v == ' ' || *v == '\t'))
                v++, vl--;
            while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
                vl--;
            if (vl < sizeof a->header_value) {
                text_copy(a->header_name, sizeof a->header_name, keep[k]);
                memcpy(a->header_value, v, vl);
                a->header_value[vl] = '\0';
            }
        }
    }
    return len;
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
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    char line[HTTP_VALUE_MAX + 32];
    bool ok = c != NULL;
    if (ok && req->authorization[0]) {
        snprintf(line, sizeof line, "Authorization: %s", req->authorization);
        ok = (h = curl_slist_append(h, line)) != NULL;
    }
    if (ok && req->content_type[0]) {
        snprintf(line, sizeof line, "Content-Type: %s", req->content_type);
        struct curl_slist *t = curl_slist_append(h, line);
        ok = t != NULL;
        h = t ? t : h;
    }
    if (ok) {
        struct curl_slist *t = curl_slist_append(h, FORWARD_HEADER ": 1");
        ok = t != NULL;
        h = t ? t : h;
    }
    /* No "Expect: 100-continue" wait on large uploads. */
    if (ok) {
        struct curl_slist *t = curl_slist_append(h, "Expect:");
        ok = t != NULL;
        h = t ? t : h;
    }
    if (!ok) {
        curl_slist_free_all(h);
        if (c)
            curl_easy_cleanup(c);
        api_error(res, ERR_NOMEM, NULL, NULL);
        return true;
    }
    struct answer a = {0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, req->method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    if (req->body_len || strcmp(req->method, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body ? req->body : "");
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &a);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &a);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 3L);
    /* Completions may take their whole time limit. */
    curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)srv->cfg.completion_timeout_s + 60L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    char *ctype = NULL;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ctype);
    if (rc != CURLE_OK || status < 100) {
        log_line("warn", "forwarding %s %s to the leader %s: %s", req->method, req->path, leader,
                 a.too_large ? "its answer is too large" : curl_easy_strerror(rc));
        unavailable(res, "The leader does not answer (a take-over may be under way); retry "
                         "shortly.");
    } else {
        http_respond(res, (int)status, ctype ? ctype : "", a.body ? a.body : "", a.len);
        if (a.header_name[0]) {
            text_copy(res->header_name, sizeof res->header_name, a.header_name);
            text_copy(res->header_value, sizeof res->header_value, a.header_value);
        }
    }
    free(a.body);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return true;
}
