/* wapi.c - the worker's libcurl client: JSON POST, bounded answers. */
#include "worker/wapi.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/growbuf.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_start(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* The answer, up to WAPI_MAX_ANSWER bytes: past that curl fails the
 * transfer and the error says "answer too large". */
static size_t collect(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    size_t n = size * nmemb;
    return growbuf_append(userdata, ptr, n) ? 0 : n; /* 0 makes curl fail the transfer */
}

int wapi_init(struct wapi *a, const char *base_url, const char *token, long timeout_ms,
              char *err, size_t errcap)
{
    memset(a, 0, sizeof *a);
    pthread_once(&curl_once, curl_start);
    size_t n = base_url ? strlen(base_url) : 0;
    if (n == 0 || n >= sizeof a->base ||
        (strncmp(base_url, "http://", 7) != 0 && strncmp(base_url, "https://", 8) != 0)) {
        snprintf(err, errcap, "server URL must start with http:// or https://");
        return -1;
    }
    memcpy(a->base, base_url, n + 1);
    while (n > 0 && a->base[n - 1] == '/')
        a->base[--n] = '\0';
    if (!token || strlen(token) > 150 || strpbrk(token, "\r\n")) {
        snprintf(err, errcap, "bad worker token");
        return -1;
    }
    snprintf(a->auth, sizeof a->auth, "Authorization: Bearer %s", token);
    a->timeout_ms = timeout_ms > 0 ? timeout_ms : 10000;
    a->curl = curl_easy_init();
    if (!a->curl) {
        snprintf(err, errcap, "could not start libcurl");
        return -1;
    }
    return 0;
}

int wapi_post(struct wapi *a, const char *path, json_t *body, long *status, json_t **answer,
              char *err, size_t errcap)
{
    *status = 0;
    *answer = NULL;
    char url[512];
    if (snprintf(url, sizeof url, "%s%s", a->base, path) >= (int)sizeof url) {
        snprintf(err, errcap, "URL too long");
        return -1;
    }
    char *text = body ? json_dumps(body, JSON_COMPACT) : strdup("{}");
    if (!text) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    CURL *c = a->curl;
    struct growbuf buf;
    growbuf_init(&buf, WAPI_MAX_ANSWER + 1); /* the answer and its NUL */
    struct curl_slist *headers = NULL;
    headers = curl_slist_append(headers, a->auth);
    headers = curl_slist_append(headers, "Content-Type: application/json");
    headers = curl_slist_append(headers, "Expect:");
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(text));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &buf);
    /* Threads: no SIGALRM for DNS timeouts. */
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, a->timeout_ms < 3000 ? a->timeout_ms : 3000L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, a->timeout_ms);
    CURLcode rc = curl_easy_perform(c);
    int result = 0;
    if (rc != CURLE_OK) {
        snprintf(err, errcap, "%s: %s", url,
                 buf.err == GROWBUF_TOO_LARGE ? "answer too large" : curl_easy_strerror(rc));
        result = -1;
    } else {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
        if (buf.len > 0)
            *answer = json_loadb(buf.p, buf.len, 0, NULL);
    }
    curl_slist_free_all(headers);
    growbuf_free(&buf);
    free(text);
    return result;
}

const char *wapi_error_message(const json_t *answer, const char *fallback)
{
    const json_t *e = json_object_get(answer, "error");
    const char *m = json_string_value(json_object_get(e, "message"));
    if (!m)
        m = json_string_value(e);
    return m ? m : fallback;
}

void wapi_free(struct wapi *a)
{
    if (a && a->curl) {
        curl_easy_cleanup(a->curl);
        a->curl = NULL;
    }
}
