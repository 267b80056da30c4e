/* modelio.c - Hugging Face model folders in and out (see modelio.h). */
#include "train/formats/modelio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "train/formats/checkpoint.h"
#include "train/formats/safetensors.h"

#define MAX_SHARDS 256

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names of the *.safetensors files of dir, sorted; caller frees each and
 * the array. Returns the count, or -1. */
static int list_shards(const char *dir, char ***names)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    char **v = calloc(MAX_SHARDS, sizeof *v);
    int n = 0;
    struct dirent *e;
    while (v && (e = readdir(d)) && n < MAX_SHARDS) {
        size_t len = strlen(e->d_name);
        if (len > 12 && strcmp(e->d_name + len - 12, ".safetensors") == 0 &&
            strcmp(e->d_name, "adapter_model.safetensors") != 0)
            v[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (!v)
        return -1;
    qsort(v, (size_t)n, sizeof *v, cmp_str);
    *names = v;
    return n;
}

struct conv_ctx {
    const struct st_tensor *t;
};

static void fill_from_st(void *ctx, size_t start, size_t count, float *out)
{
    const struct st_tensor *t = ((struct conv_ctx *)ctx)->t;
    switch (t->dtype) {
    case ST_F32:
        memcpy(out, (const float *)t->data + start, count * sizeof(float));
        break;
    case ST_BF16: {
        const uint16_t *s = (const uint16_t *)t->data + start;
        for (size_t i = 0; i < count; i++)
            out[i] = linear_bf16_to_f32(s[i]);
        break;
    }
    default: {
        const uint16_t *s = (const uint16_t *)t->data + start;
        for (size_t i = 0; i < count; i++)
            out[i] = st_f16_to_f32(s[i]);
        break;
    }
    }
}

/* Tensor `name` in the shards; a Gemma 3 image-and-text checkpoint keeps
 * the text model under model.language_model. (or, written by older
 * libraries, language_model.model.). NULL when absent; *from gets the
 * shard after the one that holds it. */
static const struct st_tensor *find_tensor(struct st_file **files, int ns, const char *name,
                                           int multimodal, int *from)
{
    char alt[2][160];
    int nalt = 0;
    if (multimodal && strncmp(name, "model.", 6) == 0) {
        snprintf(alt[0], sizeof alt[0], "model.language_model.%s", name + 6);
        snprintf(alt[1], sizeof alt[1], "language_model.%s", name);
        nalt = 2;
    }
    for (int a = -1; a < nalt; a++)
        for (int i = 0; i < ns; i++) {
            const struct st_tensor *t = st_find(files[i], a < 0 ? name : alt[a]);
            if (t) {
                *from = i + 1;
                return t;
            }
        }
    return NULL;
}

static void close_shards(struct st_file **files, int ns);

/* Opens every shard of the folder `dir` into files; the count, or -1 with
 * a reason (what was opened is closed). */
static int open_shards(const char *dir, struct st_file **files, char *err, size_t errcap)
{
    char path[MODELIO_MAX_PATH + 300];
    char **names = NULL;
    int ns = list_shards(dir, &names);
    if (ns <= 0) {
        snprintf(err, errcap, "%s: no .safetensors file", dir);
        free(names);
        return -1;
    }
    int ok = 1;
    for (int i = 0; i < ns; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (ok && !(files[i] = st_open(path, err, errcap)))
            ok = 0;
        free(names[i]);
    }
    free(names);
    if (!ok) {
        close_shards(files, ns);
        return -1;
    }
    return ns;
}

static void close_shards(struct st_file **files, int ns)
{
    for (int i = 0; i < ns; i++) {
        st_close(files[i]);
        files[i] = NULL;
    }
}

/* The published tensor of the model's tensor mt in the shards, checked for
 * its shape and type; NULL with a reason. *from as find_tensor's. */
static const struct st_tensor *base_tensor(struct st_file **files, int ns, const char *dir,
                                           const struct model *m, const struct model_tensor *mt,
                                           int *from, char *err, size_t errcap)
{
    const struct st_tensor *t = find_tensor(files, ns, mt->name, m->cfg.multimodal, from);
    if (!t) {
        snprintf(err, errcap, "%s: missing tensor %s", dir, mt->name);
        return NULL;
    }
    int ok = mt->is1d ? t->ndim == 1 && t->shape[0] == mt->cols
                      : t->ndim == 2 && t->shape[0] == mt->rows && t->shape[1] == mt->cols;
    if (!ok) {
        snprintf(err, errcap, "%s: tensor %s has the wrong shape for config.json", dir, mt->name);
        return NULL;
    }
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16) {
        snprintf(err, errcap, "%s: tensor %s is %s (F32, BF16 or F16 only)", dir, mt->name,
                 st_dtype_name(t->dtype));
        return NULL;
    }
    return t;
}

struct model *modelio_load(const char *dir, const struct model_opts *opts, char *err,
                           size_t errcap)
{
    char path[MODELIO_MAX_PATH + 300];
    struct model_config cfg;
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (model_config_load(path, &cfg, err, errcap))
        return NULL;
    struct st_file *files[MAX_SHARDS] = {0};
    int ns = open_shards(dir, files, err, errcap);
    if (ns < 0)
        return NULL;
    struct model *m = model_create(&cfg, opts, err, errcap);
    if (!m)
        goto fail;
    if (cfg.multimodal) /* docs/models.md: the vision tower is left out */
        fprintf(stderr, "%s: a gemma3 image-and-text model: its vision tower is not loaded; "
                        "the text model (gemma3_text) trains and exports alone\n", dir);
    for (int i = 0; i < m->n_tensors; i++) {
        const struct model_tensor *mt = &m->tensors[i];
        int from = 0;
        const struct st_tensor *t = base_tensor(files, ns, dir, m, mt, &from, err, errcap);
        if (!t)
            goto fail;
        struct conv_ctx c = {t};
        if (model_fill_tensor(m, i, fill_from_st, &c)) {
            snprintf(err, errcap, "out of memory loading %s", mt->name);
            goto fail;
        }
        /* read once: its pages of the file need not stay resident (the
         * planner counts the weights as the model holds them, not twice) */
        st_release(files[from - 1], t);
    }
    close_shards(files, ns);
    return m;
fail:
    model_free(m);
    close_shards(files, ns);
    return NULL;
}

int modelio_write_text(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    size_t len = strlen(text), off = 0;
    int rc = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            rc = -1;
            break;
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0)
        rc = -1;
    if (close(fd) != 0)
        rc = -1;
    return rc;
}

/* Makes a fresh temporary folder beside out_dir. */
static int begin_folder(const char *out_dir, char *tmp, size_t cap, char *err, size_t errcap)
{
    if (strlen(out_dir) > MODELIO_MAX_PATH - 40) {
        snprintf(err, errcap, "output path too long");
        return -1;
    }
    snprintf(tmp, cap, "%s.tmp-%ld", out_dir, (long)getpid());
    fs_remove_tree(tmp);
    if (mkdir(tmp, 0755) != 0) {
        snprintf(err, errcap, "cannot create %s: %s", tmp, strerror(errno));
        return -1;
    }
    return 0;
}

/* Moves the finished temporary folder into place (replacing out_dir). */
static int finish_folder(const char *tmp, const char *out_dir, char *err, size_t errcap)
{
    char old[MODELIO_MAX_PATH + 64];
    snprintf(old, sizeof old, "%s.old-%ld", out_dir, (long)getpid());
    struct stat sb;
    int had = stat(out_dir, &sb) == 0;
    if ((had && rename(out_dir, old) != 0) || rename(tmp, out_dir) != 0) {
        snprintf(err, errcap, "cannot move %s into place: %s", out_dir, strerror(errno));
        fs_remove_tree(tmp);
        return -1;
    }
    if (had)
        fs_remove_tree(old);
    /* The parent folder's entry must reach the disk too. */
    char parent[MODELIO_MAX_PATH + 64];
    snprintf(parent, sizeof parent, "%s", out_dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent)
        *slash = '\0';
    else
        snprintf(parent, sizeof parent, "%s", slash ? "/" : ".");
    int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    return 0;
}

static const char *const tokenizer_files[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "generation_config.json", "chat_template.jinja", NULL,
};

/* The merged weights of one tensor at a time, for st_write_each: one
 * buffer the size of the largest merged tensor serves them all, so saving
 * never holds a second copy of the whole model. With base files (ns > 0)
 * each tensor is the published one read from them, plus the model's
 * adapters; else the model's own weights, merged. */
struct merged_fill {
    const struct model *m;
    float *buf;
    struct st_file **files;
    int ns;
    const char *base_dir;
};

static const void *fill_merged(void *ctx, size_t i)
{
    struct merged_fill *f = ctx;
    const struct model_tensor *mt = &f->m->tensors[i];
    if (!f->ns) {
        model_get_tensor(f->m, (int)i, f->buf);
        return f->buf;
    }
    int from = 0;
    char err[200];
    const struct st_tensor *t =
        base_tensor(f->files, f->ns, f->base_dir, f->m, mt, &from, err, sizeof err);
    if (!t) /* checked before the write began; the files are read-only maps */
        return NULL;
    struct conv_ctx c = {t};
    fill_from_st(&c, 0, (size_t)mt->rows * mt->cols, f->buf);
    st_release(f->files[from - 1], t);
    float *w = f->buf;
    for (int k = 0; k < mt->n_parts; k++) {
        linear_add_adapter(mt->part[k], w);
        w += (size_t)mt->part[k]->out * mt->part[k]->in;
    }
    return f->buf;
}

static int save_merged(const struct model *m, struct merged_fill *fill, const char *out_dir,
                       const char *tokenizer_dir, char *err, size_t errcap);

int modelio_save_merged(const struct model *m, const char *out_dir, const char *tokenizer_dir,
                        char *err, size_t errcap)
{
    struct merged_fill fill = {.m = m};
    return save_merged(m, &fill, out_dir, tokenizer_dir, err, errcap);
}

int modelio_save_merged_onto(const struct model *m, const char *base_dir, const char *out_dir,
                             char *err, size_t errcap)
{
    struct st_file *files[MAX_SHARDS] = {0};
    int ns = open_shards(base_dir, files, err, errcap);
    if (ns < 0)
        return -1;
    int rc = 0;
    for (int i = 0; !rc && i < m->n_tensors; i++) {
        int from = 0;
        if (!base_tensor(files, ns, base_dir, m, &m->tensors[i], &from, err, errcap))
            rc = -1;
    }
    struct merged_fill fill = {.m = m, .files = files, .ns = ns, .base_dir = base_dir};
    if (!rc)
        rc = save_merged(m, &fill, out_dir, base_dir, err, errcap);
    close_shards(files, ns);
    return rc;
}

static int save_merged(const struct model *m, struct merged_fill *fill, const char *out_dir,
                       const char *tokenizer_dir, char *err, size_t errcap)
{
    char tmp[MODELIO_MAX_PATH + 64], path[MODELIO_MAX_PATH + 300];
    if (begin_folder(out_dir, tmp, sizeof tmp, err, errcap))
        return -1;
    int rc = -1;
    struct st_tensor *ts = calloc((size_t)m->n_tensors, sizeof *ts);
    char *cfg = model_config_to_json(&m->cfg);
    if (!ts || !cfg) {
        snprintf(err, errcap, "out of memory saving the model");
        goto out;
    }
    size_t most = 0; /* floats of the largest tensor made by fill_merged */
    for (int i = 0; i < m->n_tensors; i++) {
        const struct model_tensor *mt = &m->tensors[i];
        size_t n = (size_t)mt->rows * mt->cols;
        struct st_tensor *t = &ts[i];
        snprintf(t->name, sizeof t->name, "%s", mt->name);
        t->dtype = ST_F32;
        t->ndim = mt->is1d ? 1 : 2;
        t->shape[0] = mt->is1d ? mt->cols : mt->rows;
        t->shape[1] = mt->cols;
        t->nbytes = n * sizeof(float);
        /* fp32 weights without an adapter are written straight from the
         * model; the rest are merged, one at a time, as they are written. */
        if (!fill->ns && mt->vec && mt->offset == 0.0f)
            t->data = mt->vec;
        else if (!fill->ns && mt->lin && mt->lin->kind == WK_F32 && mt->lin->r == 0)
            t->data = mt->lin->w;
        else if (n > most)
            most = n;
    }
    if (most && !(fill->buf = malloc(most * sizeof(float)))) {
        snprintf(err, errcap, "out of memory saving the model");
        goto out;
    }
    snprintf(path, sizeof path, "%s/config.json", tmp);
    if (modelio_write_text(path, cfg)) {
        snprintf(err, errcap, "cannot write %s: %s", path, strerror(errno));
        goto out;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    static const char *const meta[] = {"format", "pt", NULL};
    if (st_write_each(path, ts, (size_t)m->n_tensors, meta, fill_merged, fill, err, errcap))
        goto out;
    for (int i = 0; tokenizer_dir && tokenizer_files[i]; i++) {
        char from[MODELIO_MAX_PATH + 64];
        snprintf(from, sizeof from, "%s/%s", tokenizer_dir, tokenizer_files[i]);
        snprintf(path, sizeof path, "%s/%s", tmp, tokenizer_files[i]);
        if (access(from, R_OK) == 0 && fs_copy_file(from, path)) {
            snprintf(err, errcap, "cannot copy %s: %s", from, strerror(errno));
            goto out;
        }
    }
    rc = finish_folder(tmp, out_dir, err, errcap);
out:
    if (rc)
        fs_remove_tree(tmp);
    free(fill->buf);
    fill->buf = NULL;
    free(ts);
    free(cfg);
    return rc;
}

static const char *layer_part(int p)
{
    return p <= PROJ_O ? "self_attn" : "mlp";
}

int modelio_save_peft(const struct model *m, const char *out_dir, const char *base_name,
                      char *err, size_t errcap)
{
    char tmp[MODELIO_MAX_PATH + 64], path[MODELIO_MAX_PATH + 300];
    int L = m->cfg.n_layers, rc = -1;
    struct st_tensor *ts = calloc((size_t)L * PROJ_COUNT * 2 + 1, sizeof *ts);
    json_t *cfg = json_object(), *targets = json_array();
    char *text = NULL;
    if (!ts || !cfg || !targets) {
        snprintf(err, errcap, "out of memory saving the adapter");
        json_decref(targets);
        goto out;
    }
    size_t n = 0;
    for (int l = 0; l < L; l++) {
        for (int p = 0; p < PROJ_COUNT; p++) {
            const struct linear *ln = &m->layers[l].proj[p];
            if (ln->r == 0)
                continue;
            for (int ab = 0; ab < 2; ab++) {
                struct st_tensor *t = &ts[n++];
                snprintf(t->name, sizeof t->name,
                         "base_model.model.model.layers.%d.%s.%s.lora_%c.weight", l,
                         layer_part(p), model_proj_name(p), ab ? 'B' : 'A');
                t->dtype = ST_F32;
                t->ndim = 2;
                t->shape[0] = ab ? ln->out : ln->r;
                t->shape[1] = ab ? ln->r : ln->in;
                t->data = ab ? ln->lb : ln->la;
                t->nbytes = (size_t)ln->r * (ab ? ln->out : ln->in) * sizeof(float);
            }
        }
    }
    for (int p = 0; p < PROJ_COUNT; p++)
        if (m->opts.lora_targets & (1u << p))
            json_array_append_new(targets, json_string(model_proj_name(p)));
    json_object_set_new(cfg, "peft_type", json_string("LORA"));
    json_object_set_new(cfg, "task_type", json_string("CAUSAL_LM"));
    json_object_set_new(cfg, "r", json_integer(m->opts.lora_r));
    json_object_set_new(cfg, "lora_alpha", json_real(m->opts.lora_alpha));
    json_object_set_new(cfg, "lora_dropout", json_real(0.0));
    json_object_set_new(cfg, "target_modules", targets);
    json_object_set_new(cfg, "bias", json_string("none"));
    json_object_set_new(cfg, "fan_in_fan_out", json_false());
    json_object_set_new(cfg, "inference_mode", json_true());
    json_object_set_new(cfg, "base_model_name_or_path", json_string(base_name ? base_name : ""));
    text = json_dumps(cfg, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!text || n == 0) {
        snprintf(err, errcap, n ? "out of memory saving the adapter" : "the model has no adapter");
        goto out;
    }
    if (begin_folder(out_dir, tmp, sizeof tmp, err, errcap))
        goto out;
    snprintf(path, sizeof path, "%s/adapter_config.json", tmp);
    if (modelio_write_text(path, text)) {
        snprintf(err, errcap, "cannot write %s: %s", path, strerror(errno));
        fs_remove_tree(tmp);
        goto out;
    }
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", tmp);
    static const char *const meta[] = {"format", "pt", NULL};
    if (st_write(path, ts, n, meta, err, errcap)) {
        fs_remove_tree(tmp);
        goto out;
    }
    rc = finish_folder(tmp, out_dir, err, errcap);
out:
    free(text);
    json_decref(cfg);
    free(ts);
    return rc;
}

int modelio_peft_opts(const char *adapter_dir, struct model_opts *opts, char *err,
                      size_t errcap)
{
    char path[MODELIO_MAX_PATH + 64];
    snprintf(path, sizeof path, "%s/adapter_config.json", adapter_dir);
    json_error_t je;
    json_t *o = json_load_file(path, 0, &je);
    if (!o || !json_is_object(o)) {
        snprintf(err, errcap, "%s: cannot read adapter_config.json", adapter_dir);
        json_decref(o);
        return -1;
    }
    int rc = -1;
    const char *type = json_string_value(json_object_get(o, "peft_type"));
    json_t *r = json_object_get(o, "r"), *alpha = json_object_get(o, "lora_alpha");
    json_t *tm = json_object_get(o, "target_modules");
    if (!type || strcmp(type, "LORA") != 0 || !json_is_integer(r) || !json_is_number(alpha) ||
        !json_is_array(tm)) {
        snprintf(err, errcap, "%s: adapter_config.json is not a LoRA adapter", adapter_dir);
        goto out;
    }
    unsigned targets = 0;
    size_t i;
    json_t *v;
    json_array_foreach(tm, i, v)
    {
        int p = json_is_string(v) ? model_proj_parse(json_string_value(v)) : -1;
        if (p < 0) {
            snprintf(err, errcap, "%s: unsupported LoRA target module", adapter_dir);
            goto out;
        }
        targets |= 1u << p;
    }
    json_int_t rv = json_integer_value(r);
    if (rv < 1 || rv > 1024 || !targets) {
        snprintf(err, errcap, "%s: LoRA rank or targets out of range", adapter_dir);
        goto out;
    }
    opts->full = 0;
    opts->lora_r = (int)rv;
    opts->lora_alpha = (float)json_number_value(alpha);
    opts->lora_targets = targets;
    rc = 0;
out:
    json_decref(o);
    return rc;
}

int modelio_peft_fill(const char *adapter_dir, int n_layers,
                      struct linear *(*at)(void *ctx, int layer, int proj), void *ctx, char *err,
                      size_t errcap)
{
    char path[MODELIO_MAX_PATH + 64];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", adapter_dir);
    struct st_file *f = st_open(path, err, errcap);
    if (!f)
        return -1;
    int rc = 0;
    for (int l = 0; l < n_layers && !rc; l++) {
        for (int p = 0; p < PROJ_COUNT && !rc; p++) {
            struct linear *ln = at(ctx, l, p);
            if (ln->r == 0)
                continue;
            for (int ab = 0; ab < 2 && !rc; ab++) {
                char name[ST_MAX_NAME];
                snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.%s.lora_%c.weight",
                         l, layer_part(p), model_proj_name(p), ab ? 'B' : 'A');
                const struct st_tensor *t = st_find(f, name);
                int64_t rows = ab ? ln->out : ln->r, cols = ab ? ln->r : ln->in;
                if (!t || t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols ||
                    (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16)) {
                    snprintf(err, errcap, "%s: tensor %s missing or of the wrong shape",
                             adapter_dir, name);
                    rc = -1;
                    break;
                }
                struct conv_ctx c = {t};
                fill_from_st(&c, 0, (size_t)rows * cols, ab ? ln->lb : ln->la);
            }
        }
    }
    st_close(f);
    return rc;
}

static struct linear *model_proj_at(void *ctx, int layer, int proj)
{
    struct model *m = ctx;
    return &m->layers[layer].proj[proj];
}

int modelio_load_peft(struct model *m, const char *adapter_dir, char *err, size_t errcap)
{
    return modelio_peft_fill(adapter_dir, m->cfg.n_layers, model_proj_at, m, err, errcap);
}

void modelio_grad_tensors(const struct model *m, struct st_tensor *out)
{
    for (int i = 0; i < m->n_tensors; i++) {
        const struct model_tensor *mt = &m->tensors[i];
        struct st_tensor *t = &out[i];
        snprintf(t->name, sizeof t->name, "grad.%s", mt->name);
        t->dtype = ST_F32;
        t->ndim = mt->is1d ? 1 : 2;
        t->shape[0] = mt->is1d ? mt->cols : mt->rows;
        t->shape[1] = mt->cols;
        const float *p = mt->vec ? mt->vec : mt->lin->w;
        t->data = m->grad + (p - m->train);
        t->nbytes = (size_t)mt->rows * mt->cols * 4;
    }
}
