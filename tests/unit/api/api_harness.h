/* api_harness.h - a server struct over a temporary data folder, and calls
 * straight into api_dispatch(), for the API's unit tests. Header-only: each
 * test file is its own program. */
#ifndef ALALLO_TESTS_API_HARNESS_H
#define ALALLO_TESTS_API_HARNESS_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/auth.h"
#include "control/catalog.h"
#include "control/control.h"
#include "control/fleet.h"
#include "control/sched_link.h"
#include "control/service.h"
#include "api/router.h"
#include "api/server.h"
#include "control/setup.h"

struct harness {
    struct api_server srv;
    struct control ctl;
    char dir[256];
    char key[KEYS_MAX];       /* account default */
    char other_key[KEYS_MAX]; /* account other */
};

static inline void h_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        abort();
    fputs(text, f);
    fclose(f);
}

/* A model folder the catalog accepts: a Llama config, a tokenizer file and
 * some bytes of weights (never loaded by these tests). */
static inline void h_fake_model(const char *models, const char *name, int hidden, int layers, int vocab)
{
    char dir[600], path[700], cfg[512];
    snprintf(dir, sizeof dir, "%.500s/%.60s", models, name);
    mkdir(dir, 0700);
    snprintf(cfg, sizeof cfg,
             "{\"hidden_size\":%d,\"intermediate_size\":%d,\"num_hidden_layers\":%d,"
             "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"vocab_size\":%d,"
             "\"max_position_embeddings\":512,\"tie_word_embeddings\":true}",
             hidden, hidden * 3, layers, vocab);
    snprintf(path, sizeof path, "%s/config.json", dir);
    h_write(path, cfg);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    h_write(path, "{}");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    h_write(path, "not really weights");
}

static inline struct harness *h_new(void)
{
    struct harness *h = calloc(1, sizeof *h);
    snprintf(h->dir, sizeof h->dir, "/tmp/alallo-api-XXXXXX");
    if (!mkdtemp(h->dir))
        abort();
    struct api_server *s = &h->srv;
    struct control *c = &h->ctl;
    s->ctl = c;
    api_config_defaults(&s->cfg);
    control_config_defaults(&c->cfg);
    snprintf(c->cfg.data_dir, sizeof c->cfg.data_dir, "%s/data", h->dir);
    snprintf(c->cfg.models_dir, sizeof c->cfg.models_dir, "%s/models", h->dir);
    mkdir(c->cfg.models_dir, 0700);
    h_fake_model(c->cfg.models_dir, "tiny", 64, 2, 400);
    h_fake_model(c->cfg.models_dir, "big", 4096, 32, 32000);
    char err[256];
    bool created;
    char token[KEYS_MAX];
    struct store *store;
    if (setup_data_dir(c->cfg.data_dir, err, sizeof err) ||
        setup_open_store(c->cfg.data_dir, &store, err, sizeof err) ||
        setup_first_run(store, c->cfg.data_dir, h->key, token, &created, err, sizeof err) ||
        setup_create_account(store, "other", h->other_key)) {
        fprintf(stderr, "harness: %s\n", err);
        abort();
    }
    snprintf(s->worker_token, sizeof s->worker_token, "%s", token);
    snprintf(c->alallo_bin, sizeof c->alallo_bin, "%s", ALALLO_BINARY);
    if (control_open(c, store, err, sizeof err) || api_server_pools_open(s) != 0) {
        fprintf(stderr, "harness: %s\n", err);
        abort();
    }
    return h;
}

static inline void h_free(struct harness *h)
{
    api_server_pools_close(&h->srv);
    control_close(&h->ctl);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", h->dir);
    if (system(cmd) != 0)
        abort();
    free(h);
}

struct reply {
    int status;
    char content_type[64];
    char *body;
    size_t len;
    json_t *json; /* parsed when the body is JSON */
};

static inline void reply_free(struct reply *r)
{
    free(r->body);
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

/* One request. `auth` is a bearer token or NULL; `query` is "a=1&b=2" or
 * NULL; body may be NULL. */
static inline struct reply h_call_ct(struct harness *h, const char *method, const char *path,
                              const char *query, const char *auth, const char *content_type,
                              const char *body, size_t body_len)
{
    struct http_request *req = calloc(1, sizeof *req);
    snprintf(req->method, sizeof req->method, "%s", method);
    snprintf(req->path, sizeof req->path, "%s", path);
    if (auth)
        snprintf(req->authorization, sizeof req->authorization, "Bearer %s", auth);
    if (content_type)
        snprintf(req->content_type, sizeof req->content_type, "%s", content_type);
    if (query) {
        char q[512];
        snprintf(q, sizeof q, "%s", query);
        char *save = NULL;
        for (char *kv = strtok_r(q, "&", &save); kv; kv = strtok_r(NULL, "&", &save)) {
            char *eq = strchr(kv, '=');
            if (eq)
                *eq = '\0';
            http_query_add(req, kv, eq ? eq + 1 : "");
        }
    }
    req->body = body;
    req->body_len = body ? body_len : 0;
    struct http_response res = {0};
    api_dispatch(&h->srv, req, &res);
    struct reply r = {.status = res.status};
    snprintf(r.content_type, sizeof r.content_type, "%s", res.content_type);
    if (res.stream) {
        /* Drain a stream (it must end by itself in these tests). */
        size_t cap = 1 << 16;
        r.body = malloc(cap);
        for (;;) {
            if (r.len + 4096 + 1 > cap)
                r.body = realloc(r.body, cap *= 2);
            ssize_t n = res.stream(res.stream_ctx, r.body + r.len, 4096);
            if (n < 0)
                break;
            r.len += (size_t)n;
        }
        r.body[r.len] = '\0';
    } else {
        r.body = malloc(res.len + 1);
        memcpy(r.body, res.body ? res.body : "", res.len);
        r.body[res.len] = '\0';
        r.len = res.len;
    }
    if (strncmp(r.content_type, "application/json", 16) == 0)
        r.json = json_loadb(r.body, r.len, 0, NULL);
    http_response_free(&res);
    free(req);
    return r;
}

static inline struct reply h_call(struct harness *h, const char *method, const char *path,
                           const char *query, const char *auth, const char *json_body)
{
    return h_call_ct(h, method, path, query, auth, json_body ? "application/json" : NULL,
                     json_body, json_body ? strlen(json_body) : 0);
}

/* Uploads `content` as NAME through POST /v1/files. */
static inline struct reply h_upload(struct harness *h, const char *auth, const char *name,
                             const char *content)
{
    size_t cap = strlen(content) + 1024;
    char *body = malloc(cap);
    int n = snprintf(body, cap,
                     "--XyZ\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n"
                     "fine-tune\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; "
                     "filename=\"%s\"\r\nContent-Type: application/jsonl\r\n\r\n%s\r\n--XyZ--\r\n",
                     name, content);
    struct reply r = h_call_ct(h, "POST", "/v1/files", NULL, auth,
                               "multipart/form-data; boundary=XyZ", body, (size_t)n);
    free(body);
    return r;
}

static inline const char *h_str(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* The error code of an error reply ("" when none). */
static inline const char *h_err_param(struct reply *r)
{
    const char *p = json_string_value(json_object_get(json_object_get(r->json, "error"), "param"));
    return p ? p : "";
}

static inline const char *h_err_message(struct reply *r)
{
    const char *m =
        json_string_value(json_object_get(json_object_get(r->json, "error"), "message"));
    return m ? m : "";
}

#define SAMPLE_JSONL                                                                               \
    "{\"prompt\":\"I loved it\",\"completion\":\" positive\"}\n"                                  \
    "{\"prompt\":\"Awful\",\"completion\":\" negative\"}\n"                                       \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"Fine?\"},"                                   \
    "{\"role\":\"assistant\",\"content\":\"yes\"}]}\n"

#endif
