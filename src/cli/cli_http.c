/* cli_http.c - libcurl calls of the command-line client. */
#include "cli/cli_http.h"

#include <ctype.h>
#include <stdbool.h>
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#include "core/growbuf.h"

struct sink {
    struct cli_answer *a;
    struct growbuf body; /* the answer, up to CLI_MAX_ANSWER bytes; then a->body */
    FILE *out;          /* when set, a 2xx body goes here */
    CURL *curl;
    int too_large;
    int write_failed;
};

static size_t on_data(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct sink *s = userdata;
    size_t n = size * nmemb;
    if (s->out) {
        long status = 0;
        curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
        if (status >= 200 && status < 300) {
            if (fwrite(ptr, 1, n, s->out) != n) {
                s->write_failed = 1;
                return 0;
            }
            fflush(s->out); /* a followed log is read as it comes */
            return n;
        }
    }
    enum growbuf_err e = growbuf_append(&s->body, ptr, n);
    if (e == GROWBUF_TOO_LARGE)
        s->too_large = 1;
    return e ? 0 : n;
}

int cli_conn_from_env(struct cli_conn *c, char *err, size_t errcap)
{
    memset(c, 0, sizeof *c);
    const char *url = getenv("ALALLO_URL");
    c->from_env = url && *url;
    if (!c->from_env)
        url = CLI_DEFAULT_URL;
    size_t n = strlen(url);
    if (n >= sizeof c->base ||
        (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)) {
        snprintf(err, errcap, "ALALLO_URL must be an http:// or https:// address");
        return -1;
    }
    memcpy(c->base, url, n + 1);
    while (n > 0 && c->base[n - 1] == '/')
        c->base[--n] = '\0';
    /* Paths carry /v1 themselves; an SDK-style base URL ending in /v1 (what
     * the README gives OpenAI's SDKs) is taken as the server's address. */
    if (n >= 3 && strcmp(c->base + n - 3, "/v1") == 0) {
        n -= 3;
        c->base[n] = '\0';
        while (n > 0 && c->base[n - 1] == '/')
            c->base[--n] = '\0';
    }
    const char *key = getenv("ALALLO_API_KEY");
    if (key && *key) {
        if (strlen(key) > 500 || strpbrk(key, "\r\n")) {
            snprintf(err, errcap, "ALALLO_API_KEY is not a valid key");
            return -1;
        }
        snprintf(c->auth, sizeof c->auth, "Authorization: Bearer %s", key);
    }
    c->timeout_s = 120;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    return 0;
}

/* Runs a prepared handle and fills the answer. */
static int perform(const struct cli_conn *c, CURL *curl, struct sink *s, const char *url,
                   char *err, size_t errcap)
{
    struct cli_answer *a = s->a;
    a->body = calloc(1, 1);
    if (!a->body) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, 10L);
    growbuf_init(&s->body, (size_t)CLI_MAX_ANSWER + 1); /* the answer and its NUL */
    CURLcode rc = curl_easy_perform(curl);
    if (s->body.p) {
        free(a->body);
        a->len = s->body.len;
        a->body = growbuf_take(&s->body);
    }
    if (rc != CURLE_OK) {
        if (s->too_large)
            snprintf(err, errcap, "the answer from %s is too large", url);
        else if (s->write_failed)
            snprintf(err, errcap, "cannot write the download");
        else if (c->from_env)
            snprintf(err, errcap,
                     "cannot reach %s: %s (ALALLO_URL is %s; is `alallo serve` running there?)",
                     url, curl_easy_strerror(rc), c->base);
        else
            snprintf(err, errcap,
                     "cannot reach %s: %s (ALALLO_URL is not set, so %s; start `alallo serve` "
                     "or set ALALLO_URL)",
                     url, curl_easy_strerror(rc), CLI_DEFAULT_URL);
        return -1;
    }
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &a->status);
    char *ct = NULL;
    curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &ct);
    snprintf(a->content_type, sizeof a->content_type, "%s", ct ? ct : "");
    if (a->len > 0)
        a->json = json_loadb(a->body, a->len, 0, NULL);
    return 0;
}

static CURL *start(const struct cli_conn *c, const char *path, char *url, size_t urlcap,
                   struct curl_slist **headers, char *err, size_t errcap)
{
    if (snprintf(url, urlcap, "%s%s", c->base, path) >= (int)urlcap) {
        snprintf(err, errcap, "address too long");
        return NULL;
    }
    CURL *curl = curl_easy_init();
    if (!curl) {
        snprintf(err, errcap, "could not start libcurl");
        return NULL;
    }
    curl_easy_setopt(curl, CURLOPT_URL, url);
    if (c->auth[0])
        *headers = curl_slist_append(*headers, c->auth);
    *headers = curl_slist_append(*headers, "Expect:");
    return curl;
}

int cli_call(const struct cli_conn *c, const char *method, const char *path, json_t *body,
             struct cli_answer *a, char *err, size_t errcap)
{
    memset(a, 0, sizeof *a);
    char url[1200];
    struct curl_slist *headers = NULL;
    CURL *curl = start(c, path, url, sizeof url, &headers, err, errcap);
    if (!curl)
        return -1;
    char *text = NULL;
    if (body) {
        text = json_dumps(body, JSON_COMPACT);
        if (!text) {
            snprintf(err, errcap, "out of memory");
            curl_easy_cleanup(curl);
            curl_slist_free_all(headers);
            return -1;
        }
        headers = curl_slist_append(headers, "Content-Type: application/json");
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, text);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)strlen(text));
    } else if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, 0L);
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0)
        curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, c->timeout_s);
    struct sink s = {.a = a, .curl = curl};
    int rc = perform(c, curl, &s, url, err, errcap);
    curl_easy_cleanup(curl);
    curl_slist_free_all(headers);
    free(text);
    return rc;
}

int cli_upload(const struct cli_conn *c, const char *file_path, const char *purpose,
               struct cli_answer *a, char *err, size_t errcap)
{
    memset(a, 0, sizeof *a);
    FILE *probe = fopen(file_path, "rb");
    if (!probe) {
        snprintf(err, errcap, "cannot open %s", file_path);
        return -1;
    }
    fclose(probe);
    char url[1200];
    struct curl_slist *headers = NULL;
    CURL *curl = start(c, "/v1/files", url, sizeof url, &headers, err, errcap);
    if (!curl)
        return -1;
    curl_mime *mime = curl_mime_init(curl);
    curl_mimepart *part = curl_mime_addpart(mime);
    curl_mime_name(part, "purpose");
    curl_mime_data(part, purpose, CURL_ZERO_TERMINATED);
    part = curl_mime_addpart(mime);
    curl_mime_name(part, "file");
    curl_mime_filedata(part, file_path); /* also sets the file name */
    curl_mime_type(part, "application/jsonl");
    curl_easy_setopt(curl, CURLOPT_MIMEPOST, mime);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, c->timeout_s * 10);
    struct sink s = {.a = a, .curl = curl};
    int rc = perform(c, curl, &s, url, err, errcap);
    curl_easy_cleanup(curl);
    curl_mime_free(mime);
    curl_slist_free_all(headers);
    return rc;
}

int cli_get_to_file(const struct cli_conn *c, const char *path, FILE *out, struct cli_answer *a,
                    char *err, size_t errcap)
{
    memset(a, 0, sizeof *a);
    char url[1200];
    struct curl_slist *headers = NULL;
    CURL *curl = start(c, path, url, sizeof url, &headers, err, errcap);
    if (!curl)
        return -1;
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    struct sink s = {.a = a, .out = out, .curl = curl};
    int rc = perform(c, curl, &s, url, err, errcap);
    curl_easy_cleanup(curl);
    curl_slist_free_all(headers);
    return rc;
}

const char *cli_answer_error(const struct cli_answer *a, char *buf, size_t cap)
{
    const json_t *e = json_object_get(a->json, "error");
    const char *m = json_string_value(json_object_get(e, "message"));
    if (!m)
        m = json_string_value(e);
    if (m && *m) {
        snprintf(buf, cap, "%s", m);
        return buf;
    }
    if (a->body && a->body[0] && !a->json) {
        size_t n = strcspn(a->body, "\r\n");
        snprintf(buf, cap, "%.*s", (int)(n < 300 ? n : 300), a->body);
        return buf;
    }
    snprintf(buf, cap, "the server answered HTTP %ld", a->status);
    return buf;
}

void cli_answer_free(struct cli_answer *a)
{
    if (!a)
        return;
    free(a->body);
    json_decref(a->json);
    a->body = NULL;
    a->json = NULL;
    a->len = 0;
}

int cli_url_escape(char *buf, size_t cap, const char *text)
{
    size_t n = strlen(buf);
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        bool plain = isalnum(*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~';
        size_t need = plain ? 1 : 3;
        if (n + need + 1 > cap)
            return -1;
        if (plain) {
            buf[n++] = (char)*p;
        } else {
            buf[n++] = '%';
            buf[n++] = hex[*p >> 4];
            buf[n++] = hex[*p & 15];
        }
    }
    buf[n] = '\0';
    return 0;
}
