/* res_models.c - /v1/models: the base models of the catalog (what they
 * are, and which precisions the present capacity can train), the account's
 * fine-tuned models, and their export (a download of `alallo export`). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control/catalog.h"
#include "control/checkpoint_models.h"
#include "control/fleet.h"
#include "control/sched_link.h"
#include "api/fair_share.h"
#include "api/handlers.h"
#include "api/job_request.h"
#include "control/lifecycle.h"
#include "control/models.h"
#include "core/fs.h"
#include "core/ids.h"
#include "core/text.h"


static json_t *base_model(struct api_server *srv, const struct catalog_model *m)
{
    struct control_method cm[CONTROL_METHODS];
    control_model_methods(srv->ctl, m, cm);
    json_t *methods = json_array();
    for (int i = 0; i < CONTROL_METHODS && methods; i++)
        json_array_append_new(
            methods, json_pack("{s:s,s:s,s:s,s:I,s:b}", "method", "supervised", "precision",
                               cm[i].precision, "adapter", cm[i].adapter, "memory_bytes",
                               (json_int_t)cm[i].memory_bytes, "available", cm[i].available));
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:{s:I,s:I},s:{s:i,s:i,s:i,s:i,s:i,s:i},s:o}", "id",
                     m->id, "object", "model", "created", (json_int_t)(m->created_ms / 1000),
                     "owned_by", "alallo", "kind", "base", "size", "parameters",
                     (json_int_t)m->params, "bytes", (json_int_t)m->bytes, "shape", "hidden_size",
                     m->hidden, "layers", m->layers, "heads", m->heads, "kv_heads", m->kv_heads,
                     "intermediate_size", m->intermediate, "vocab_size", m->vocab, "methods",
                     methods);
    if (o && m->experts > 0) { /* a mixture of experts: what one token goes through */
        json_object_set_new(json_object_get(o, "size"), "active_parameters",
                            json_integer((json_int_t)m->active_params));
        json_t *shape = json_object_get(o, "shape");
        json_object_set_new(shape, "experts", json_integer(m->experts));
        json_object_set_new(shape, "experts_per_token", json_integer(m->experts_used));
        json_object_set_new(shape, "moe_intermediate_size", json_integer(m->moe_intermediate));
    }
    return o;
}

static json_t *tuned_model(const struct store_job *j, const char *owner)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:s,s:s}", "id", j->fine_tuned_model, "object", "model",
                     "created", (json_int_t)(j->finished_ms / 1000), "owned_by", owner, "kind",
                     "fine-tuned", "base_model", j->model, "job", j->id);
}

void models_list(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    struct catalog_model *models = calloc(CATALOG_MAX, sizeof *models);
    struct store_job *jobs = calloc(STORE_LIST_MAX, sizeof *jobs);
    json_t *data = json_array();
    if (!models || !jobs || !data) {
        api_error(res, ERR_NOMEM, NULL, NULL);
        goto out;
    }
    int n = catalog_list(srv->ctl->catalog, models, CATALOG_MAX);
    for (int i = 0; i < n; i++)
        json_array_append_new(data, base_model(srv, &models[i]));
    int nj;
    enum alallo_err e =
        store_job_list_models(srv->ctl->store, req->account.id, STORE_LIST_MAX, jobs, &nj);
    if (e) {
        api_store_error(res, e);
        goto out;
    }
    for (int i = 0; i < nj; i++)
        json_array_append_new(data, tuned_model(&jobs[i], req->account.name));
    api_json(res, 200, json_pack("{s:s,s:O}", "object", "list", "data", data));
out:
    json_decref(data);
    free(models);
    free(jobs);
}

/* The model named in the path: a base model (base), one of the caller's
 * fine-tuned models, also named by its job's id (job), or one of their
 * listed checkpoints (job, and the folders it was made into). */
struct found_model {
    struct catalog_model base;
    struct store_job job;
    bool tuned;
    char name[256];
    char ckpt_dir[1024], ckpt_adapter[1024]; /* "" unless a checkpoint */
};

/* Fills f; answers 404 when there is no such model, naming the models
 * there are. */
static bool find_model(struct api_server *srv, struct http_request *req, struct http_response *res,
                       struct found_model *f)
{
    memset(f, 0, sizeof *f);
    char msg[1024], job_id[IDS_MAX];
    long step;
    if (!control_model_name(srv->ctl, req->account.id, req->params[0], f->name, sizeof f->name,
                            msg, sizeof msg)) {
        api_error(res, ERR_NOT_FOUND, msg, "model");
        return false;
    }
    if (catalog_find(srv->ctl->catalog, f->name, &f->base))
        return true;
    f->tuned = true;
    if (store_job_by_model(srv->ctl->store, req->account.id, f->name, &f->job) == ERR_OK)
        return true;
    if (control_checkpoint_name_parse(f->name, job_id, sizeof job_id, &step)) {
        enum alallo_err e = control_checkpoint_model_dir(
            srv->ctl, req->account.id, f->name, f->ckpt_dir, sizeof f->ckpt_dir, f->ckpt_adapter,
            sizeof f->ckpt_adapter, &f->job, msg, sizeof msg);
        if (e)
            api_error(res, e, msg[0] ? msg : NULL, e == ERR_NOT_FOUND ? "model" : NULL);
        return e == ERR_OK;
    }
    control_no_such_model(srv->ctl, req->account.id, req->params[0], msg, sizeof msg);
    api_error(res, ERR_NOT_FOUND, msg, "model");
    return false;
}

void models_get(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    struct found_model *f = malloc(sizeof *f);
    if (!f) {
        api_error(res, ERR_NOMEM, NULL, NULL);
        return;
    }
    if (find_model(srv, req, res, f)) {
        json_t *o = f->tuned ? tuned_model(&f->job, req->account.name) : base_model(srv, &f->base);
        if (o && f->ckpt_dir[0])
            json_object_set_new(o, "id", json_string(f->name)); /* the checkpoint's name */
        api_json(res, 200, o);
    }
    free(f);
}

/* ---- export: stream a file, or a folder as a tar archive -------------- */

struct export_stream {
    struct control_artifact art; /* what was made; removed at the end */
    struct fair_share *pool;     /* the pool whose slot this one holds, or NULL */
    char account[IDS_MAX];       /* whose slot it is */
    DIR *dir;
    FILE *cur; /* the file being sent */
    size_t cur_left;
    char head[512];
    size_t head_len, head_sent;
    size_t pad;       /* zero bytes after the current file's data */
    int trailer_left; /* bytes of the two closing zero blocks */
    bool started;
};

static void export_free(void *vctx)
{
    struct export_stream *x = vctx;
    if (x->cur)
        fclose(x->cur);
    if (x->dir)
        closedir(x->dir);
    control_artifact_free(&x->art);
    if (x->pool)
        fair_share_give(x->pool, x->account);
    free(x);
}

/* A new download's stream, holding one of cfg.max_exports places from now
 * until export_free (its temporary copy of the model lives as long); the
 * places are shared fairly between accounts, and a call waits up to
 * cfg.slot_wait_ms for its turn. NULL after answering 429 (no place in
 * time) or 500 (no memory). */
static struct export_stream *export_begin(struct api_server *srv, const struct http_request *req,
                                          struct http_response *res)
{
    struct export_stream *x = calloc(1, sizeof *x);
    if (!x) {
        api_error(res, ERR_NOMEM, NULL, NULL);
        return NULL;
    }
    if (!fair_share_take(srv->exports, req->account.id, srv->cfg.slot_wait_ms)) {
        free(x);
        api_error(res, ERR_RATE_LIMITED, "Too many exports are being made; try again shortly.",
                  NULL);
        return NULL;
    }
    x->pool = srv->exports;
    text_copy(x->account, sizeof x->account, req->account.id);
    return x;
}

/* A ustar header for a regular file `name` of `size` bytes. */
static void tar_header(char h[512], const char *name, size_t size)
{
    memset(h, 0, 512);
    text_copy(h, 100, name);
    memcpy(h + 100, "0000644", 7);
    memcpy(h + 108, "0000000", 7);
    memcpy(h + 116, "0000000", 7);
    snprintf(h + 124, 12, "%011llo", (unsigned long long)size);
    snprintf(h + 136, 12, "%011llo", 0ULL);
    h[156] = '0';
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++)
        sum += (unsigned char)h[i];
    snprintf(h + 148, 8, "%06o", sum);
    h[155] = ' ';
}

/* Opens the next regular file of the folder; false at the end. */
static bool next_entry(struct export_stream *x)
{
    struct dirent *e;
    while ((e = readdir(x->dir))) {
        char p[1200];
        struct stat st;
        if (strlen(e->d_name) >= 100 ||
            !text_printf(p, sizeof p, "%s/%s", x->art.path, e->d_name) || stat(p, &st) != 0 ||
            !S_ISREG(st.st_mode))
            continue;
        x->cur = fopen(p, "rb");
        if (!x->cur)
            continue;
        x->cur_left = (size_t)st.st_size;
        tar_header(x->head, e->d_name, x->cur_left);
        x->head_len = 512;
        x->head_sent = 0;
        x->pad = (512 - x->cur_left % 512) % 512;
        return true;
    }
    return false;
}

static ssize_t export_read(void *vctx, char *buf, size_t max)
{
    struct export_stream *x = vctx;
    if (!x->art.is_dir) {
        if (!x->cur)
            return -1;
        size_t n = fread(buf, 1, max, x->cur);
        return n ? (ssize_t)n : -1;
    }
    if (!x->started) {
        x->started = true;
        x->trailer_left = 1024;
        if (!next_entry(x))
            x->cur = NULL;
    }
    if (x->head_sent < x->head_len) {
        size_t n = x->head_len - x->head_sent < max ? x->head_len - x->head_sent : max;
        memcpy(buf, x->head + x->head_sent, n);
        x->head_sent += n;
        return (ssize_t)n;
    }
    if (x->cur && x->cur_left) {
        size_t n = fread(buf, 1, x->cur_left < max ? x->cur_left : max, x->cur);
        if (n == 0)
            return -2; /* the file shrank: abort the download */
        x->cur_left -= n;
        return (ssize_t)n;
    }
    if (x->cur && x->pad) {
        size_t n = x->pad < max ? x->pad : max;
        memset(buf, 0, n);
        x->pad -= n;
        return (ssize_t)n;
    }
    if (x->cur) {
        fclose(x->cur);
        x->cur = NULL;
        if (next_entry(x))
            return export_read(vctx, buf, max);
    }
    if (x->trailer_left > 0) {
        size_t n = (size_t)x->trailer_left < max ? (size_t)x->trailer_left : max;
        memset(buf, 0, n);
        x->trailer_left -= (int)n;
        return (ssize_t)n;
    }
    return -1;
}

void models_export(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    struct found_model *f = malloc(sizeof *f);
    if (!f) {
        api_error(res, ERR_NOMEM, NULL, NULL);
        return;
    }
    if (!find_model(srv, req, res, f)) {
        free(f);
        return;
    }
    const char *format = http_query(req, "format");
    if (!format || (strcmp(format, "hf") != 0 && strcmp(format, "peft") != 0 &&
                    strcmp(format, "gguf") != 0 && strcmp(format, "ollama") != 0)) {
        free(f);
        api_error(res, ERR_INVALID, "format must be hf, peft, gguf or ollama.", "format");
        return;
    }
    const char *dtype = http_query(req, "dtype");
    if (dtype && !control_export_dtype_valid(dtype)) {
        free(f);
        api_error(res, ERR_INVALID, "dtype must be f16, bf16, f32, q8_0, q4_0 or q4_k_m.", "dtype");
        return;
    }
    struct export_stream *x = export_begin(srv, req, res);
    if (!x) {
        free(f);
        return;
    }
    char why[300];
    enum alallo_err e =
        control_export(srv->ctl,
                       f->ckpt_dir[0] ? f->ckpt_dir
                       : f->tuned     ? NULL
                                      : f->base.dir,
                       f->ckpt_adapter, f->tuned ? &f->job : NULL, format, dtype, &x->art, why,
                       sizeof why);
    free(f);
    if (e) {
        export_free(x);
        api_error(res, e, why[0] ? why : NULL, e == ERR_INVALID ? "format" : NULL);
        return;
    }
    if (x->art.is_dir)
        x->dir = opendir(x->art.path);
    else
        x->cur = fopen(x->art.path, "rb");
    if (!x->dir && !x->cur) {
        export_free(x);
        api_error(res, ERR_IO, NULL, NULL);
        return;
    }
    http_response_free(res);
    res->status = 200;
    text_copy(res->content_type, sizeof res->content_type,
              x->art.is_dir ? "application/x-tar" : "application/octet-stream");
    text_copy(res->header_name, sizeof res->header_name, "Content-Disposition");
    text_printf(res->header_value, sizeof res->header_value, "attachment; filename=\"%s\"",
                x->art.is_dir ? (strcmp(format, "hf") == 0     ? "model-hf.tar"
                                 : strcmp(format, "ollama") == 0 ? "model-ollama.tar"
                                                                 : "adapter-peft.tar")
                          : "model.gguf");
    res->stream = export_read;
    res->stream_ctx = x;
    res->stream_free = export_free;
    res->floor_bps = srv->cfg.export_floor_bps;
}

/* ---- a checkpoint as a model folder ------------------------------------ */

void jobs_checkpoint_content(struct api_server *srv, struct http_request *req,
                             struct http_response *res)
{
    struct store_job *j = malloc(sizeof *j);
    struct store_checkpoint *ck = calloc(STORE_LIST_MAX, sizeof *ck);
    struct export_stream *x = NULL;
    char msg[300];
    int n = 0;
    if (!j || !ck) {
        api_error(res, ERR_NOMEM, NULL, NULL);
        goto fail;
    }
    char *end;
    long step = strtol(req->params[1], &end, 10);
    if (!ids_valid(req->params[0]) ||
        store_job_get(srv->ctl->store, req->account.id, req->params[0], j) != ERR_OK) {
        api_error(res, ERR_NOT_FOUND, "No such job.", "id");
        goto fail;
    }
    if (*end || end == req->params[1] || step <= 0 ||
        store_checkpoint_list(srv->ctl->store, j->id, ck, STORE_LIST_MAX, &n) != ERR_OK) {
        api_error(res, ERR_NOT_FOUND, "No such checkpoint.", "step");
        goto fail;
    }
    const struct store_checkpoint *c = NULL;
    for (int i = 0; i < n; i++)
        if (ck[i].step == step)
            c = &ck[i];
    struct stat st;
    if (!c || stat(c->path, &st) != 0) {
        api_error(res, ERR_NOT_FOUND, "No such checkpoint, or it is no longer kept.", "step");
        goto fail;
    }
    x = export_begin(srv, req, res);
    if (!x)
        goto fail;
    enum alallo_err e = control_checkpoint_model(srv->ctl, j, c->path, &x->art, msg, sizeof msg);
    if (e == ERR_NOT_FOUND) {
        api_error(res, ERR_NOT_FOUND, msg, "model");
        goto fail;
    }
    if (e) {
        api_error(res, e, msg[0] ? msg : NULL, NULL);
        goto fail;
    }
    x->dir = opendir(x->art.path);
    if (!x->dir) {
        export_free(x);
        x = NULL;
        api_error(res, ERR_IO, NULL, NULL);
        goto fail;
    }
    http_response_free(res);
    res->status = 200;
    text_copy(res->content_type, sizeof res->content_type, "application/x-tar");
    text_copy(res->header_name, sizeof res->header_name, "Content-Disposition");
    text_printf(res->header_value, sizeof res->header_value,
                "attachment; filename=\"%s-step-%ld.tar\"", j->id, step);
    res->stream = export_read;
    res->stream_ctx = x;
    res->stream_free = export_free;
    res->floor_bps = srv->cfg.export_floor_bps;
    free(j);
    free(ck);
    return;
fail:
    free(j);
    free(ck);
    if (x)
        export_free(x);
}
