/* export.c - validation and export of model folders (export.h).
 *
 * The tensor list a Llama config implies is written down once (want_list)
 * and used three ways: to check a Hugging Face folder, to name tensors in
 * GGUF, and to decide which rows llama.cpp expects permuted.
 */
#include "train/formats/export.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "train/formats/gguf.h"
#include "train/formats/gguf_moe.h"
#include "train/model/model.h"
#include "train/model/moe.h"
#include "train/formats/quant.h"
#include "train/formats/safetensors.h"
#include "train/tokenizer/tokenizer.h"
#include "core/text.h"

#define MAX_SHARDS 256
#define PATH_CAP 4096
#define MAX_TOKENIZER_JSON ((size_t)256 << 20)

/* llama.cpp's token types (tokenizer.ggml.token_type). */
enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* The pre-tokenizer regexes llama.cpp knows by name. */
static const char llama3_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char qwen2_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static int join(char *out, const char *dir, const char *name)
{
    return (size_t)snprintf(out, PATH_CAP, "%s/%s", dir, name) < PATH_CAP ? 0 : -1;
}

static int exists(const char *path)
{
    struct stat sb;
    return lstat(path, &sb) == 0;
}

static int is_file(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

size_t export_permuted_row(size_t r, size_t rows, int n_head)
{
    size_t hd = rows / (size_t)n_head, half = hd / 2;
    size_t h = r / hd, k = r % hd;
    size_t i = k / 2, j = k % 2;
    return h * hd + j * half + i;
}

/* ---- safetensors shards --------------------------------------------------- */

struct shards {
    struct st_file *f[MAX_SHARDS];
    int n;
};

static void shards_close(struct shards *s)
{
    for (int i = 0; i < s->n; i++)
        st_close(s->f[i]);
    s->n = 0;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names of the *.safetensors files in dir, sorted; NULL-terminated, malloc'd. */
static char **list_safetensors(const char *dir, char *err, size_t cap)
{
    DIR *d = opendir(dir);
    if (!d) {
        text_error(err, cap, "%s: %s", dir, strerror(errno));
        return NULL;
    }
    char **names = calloc(MAX_SHARDS + 1, sizeof *names);
    int n = 0;
    struct dirent *e;
    while (names && (e = readdir(d))) {
        if (!ends_with(e->d_name, ".safetensors") || e->d_name[0] == '.')
            continue;
        if (n == MAX_SHARDS) {
            text_error(err, cap, "%s: more than %d safetensors files", dir, MAX_SHARDS);
            goto fail;
        }
        if (!(names[n++] = strdup(e->d_name)))
            goto fail;
    }
    closedir(d);
    if (!names) {
        text_error(err, cap, "out of memory");
        return NULL;
    }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    return names;
fail:
    closedir(d);
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return NULL;
}

static void free_names(char **names)
{
    if (!names)
        return;
    for (char **p = names; *p; p++)
        free(*p);
    free(names);
}

static int shards_open(const char *dir, struct shards *s, char *err, size_t cap)
{
    s->n = 0;
    char **names = list_safetensors(dir, err, cap);
    if (!names)
        return -1;
    int rc = 0;
    for (char **p = names; *p && rc == 0; p++) {
        char path[PATH_CAP];
        if (join(path, dir, *p) < 0 || !(s->f[s->n] = st_open(path, err, cap)))
            rc = -1;
        else
            s->n++;
    }
    free_names(names);
    if (rc == 0 && s->n == 0) {
        text_error(err, cap, "%s: no .safetensors files", dir);
        rc = -1;
    }
    if (rc < 0)
        shards_close(s);
    return rc;
}

static const struct st_tensor *shards_find(const struct shards *s, const char *name)
{
    for (int i = 0; i < s->n; i++) {
        const struct st_tensor *t = st_find(s->f[i], name);
        if (t)
            return t;
    }
    return NULL;
}

/* ---- the tensors a config implies ---------------------------------------- */

struct want {
    char hf[128];       /* empty: made by alallo (rope_freqs), not read from the folder */
    char gguf[64];
    int64_t rows, cols; /* cols 0 for a vector */
    int permute_heads;  /* > 0: llama.cpp's q/k row order with this many heads */
    float add, mul;     /* written value = stored * mul + add (Gemma norms: + 1) */
    int stack;          /* > 0: this many experts' tensors stacked (gguf_moe.h): hf is the
                         * layer's "model.layers.L.mlp.experts", proj the projection, rows
                         * each expert's */
    int proj;
    const float *mem;   /* made by alallo: its values (NULL: the rotary divisors) */
};

/* llama.cpp's architecture for a family: Mistral is Llama to it. */
static const char *gguf_arch(const struct model_config *c)
{
    switch (c->family) {
    case FAM_QWEN2: return "qwen2";
    case FAM_GEMMA: return "gemma";
    case FAM_GEMMA2: return "gemma2";
    case FAM_QWEN3: return "qwen3";
    case FAM_QWEN3_MOE: return GGUF_MOE_ARCH;
    case FAM_SMOLLM3: return "smollm3";
    case FAM_GEMMA3: return "gemma3";
    case FAM_PHI3: return "phi3";
    default: return "llama";
    }
}

/* llama.cpp scales Gemma 2 and 3 scores by 1/sqrt(head_dim) (by
 * 1/sqrt(hidden/heads) for the 27Bs: Gemma 2's 46 layers, Gemma 3's 62);
 * the ratio to query_pre_attn_scalar's scale, for the query. */
static float gemma_q_ratio(const struct model_config *c)
{
    int big = c->family == FAM_GEMMA2 ? 46 : c->family == FAM_GEMMA3 ? 62 : -1;
    if (big < 0)
        return 1.0f;
    double den = c->n_layers == big ? (double)c->hidden / c->n_heads : (double)c->head_dim;
    return (float)sqrt(den / (double)c->query_scalar);
}

/* Gemma 2 folds the ratio into the query rows, which rotary positions leave
 * linear; Gemma 3 normalizes q after its projection, so into q_norm. */
static float gemma2_q_mul(const struct model_config *c)
{
    return c->family == FAM_GEMMA2 ? gemma_q_ratio(c) : 1.0f;
}

/* The Hugging Face name of expert e's tensor of a stacked want. */
static void stack_name(const struct want *w, int e, char *out, size_t cap)
{
    if ((size_t)snprintf(out, cap, "%s.%d.%s.weight", w->hf, e,
                         model_proj_name(PROJ_GATE + w->proj)) >= cap)
        out[0] = '\0'; /* no tensor has an empty name: reported missing */
}

/* Fills *out (malloc'd) with the tensors of cfg, in GGUF's usual order. */
static int want_list(const struct model_config *c, struct want **out, size_t *n)
{
    size_t cap = 4 + (size_t)c->n_layers * (16 + 1 + MOE_PROJ_COUNT), k = 0;
    struct want *w = calloc(cap, sizeof *w);
    if (!w)
        return -1;
    int64_t C = c->hidden, I = c->intermediate, V = c->vocab;
    int64_t q = (int64_t)c->n_heads * c->head_dim, kv = (int64_t)c->n_kv_heads * c->head_dim;
    float na = c->norm_plus_one ? 1.0f : 0.0f;
    /* llama.cpp's Llama (and SmolLM3, converted as Llama) reorders q/k rows;
     * its Qwen2, Qwen3 and Gemma do not */
    int perm = strcmp(gguf_arch(c), "llama") == 0 || c->family == FAM_SMOLLM3;
#define WANT(HF, GG, R, COLS, PERM, ADD, MUL)                                                  \
    do {                                                                                       \
        snprintf(w[k].hf, sizeof w[k].hf, "%s", HF);                                            \
        snprintf(w[k].gguf, sizeof w[k].gguf, "%s", GG);                                        \
        w[k].rows = (R);                                                                       \
        w[k].cols = (COLS);                                                                    \
        w[k].permute_heads = (PERM);                                                           \
        w[k].add = (ADD);                                                                      \
        w[k].mul = (MUL);                                                                      \
        k++;                                                                                   \
    } while (0)
    WANT("model.embed_tokens.weight", "token_embd.weight", V, C, 0, 0.0f, 1.0f);
    if (c->rope_factor > 0.0f && !c->rope_linear) /* linear: rope.scaling.factor */
        WANT("", "rope_freqs.weight", c->head_dim / 2, 0, 0, 0.0f, 1.0f);
    if (c->longrope) { /* Phi-3: llama.cpp picks one by the context's length */
        WANT("", "rope_factors_long.weight", c->n_rope_factors, 0, 0, 0.0f, 1.0f);
        w[k - 1].mem = c->rope_long;
        WANT("", "rope_factors_short.weight", c->n_rope_factors, 0, 0, 0.0f, 1.0f);
        w[k - 1].mem = c->rope_short;
    }
    int fused = c->family == FAM_PHI3; /* qkv_proj and gate_up_proj as llama.cpp takes them */
    for (int l = 0; l < c->n_layers; l++) {
        char hf[128], gg[64];
        struct {
            const char *hf, *gg;
            int64_t rows, cols;
            int perm;
            float add, mul;
        } parts[16];
        int np = 0;
#define PART(H, G, R, CO, P, A, M) parts[np++] = (__typeof__(parts[0])){H, G, R, CO, P, A, M}
        PART("input_layernorm.weight", "attn_norm.weight", C, 0, 0, na, 1.0f);
        if (fused) {
            PART("self_attn.qkv_proj.weight", "attn_qkv.weight", q + 2 * kv, C, 0, 0.0f, 1.0f);
        } else {
            PART("self_attn.q_proj.weight", "attn_q.weight", q, C, perm ? c->n_heads : 0, 0.0f,
                 gemma2_q_mul(c));
            PART("self_attn.k_proj.weight", "attn_k.weight", kv, C, perm ? c->n_kv_heads : 0,
                 0.0f, 1.0f);
            PART("self_attn.v_proj.weight", "attn_v.weight", kv, C, 0, 0.0f, 1.0f);
        }
        if (c->qk_norm) {
            float qr = c->family == FAM_GEMMA3 ? gemma_q_ratio(c) : 1.0f;
            PART("self_attn.q_norm.weight", "attn_q_norm.weight", c->head_dim, 0, 0, na * qr,
                 qr);
            PART("self_attn.k_norm.weight", "attn_k_norm.weight", c->head_dim, 0, 0, na, 1.0f);
        }
        PART("self_attn.o_proj.weight", "attn_output.weight", C, q, 0, 0.0f, 1.0f);
        if (c->post_norms) {
            PART("post_attention_layernorm.weight", "post_attention_norm.weight", C, 0, 0, na,
                 1.0f);
            PART("pre_feedforward_layernorm.weight", "ffn_norm.weight", C, 0, 0, na, 1.0f);
        } else {
            PART("post_attention_layernorm.weight", "ffn_norm.weight", C, 0, 0, na, 1.0f);
        }
        int sparse = moe_layer_sparse(c, l); /* the experts below, in place of the MLP */
        if (fused) { /* llama.cpp's ffn_up holds gate's rows, then up's */
            PART("mlp.gate_up_proj.weight", "ffn_up.weight", 2 * I, C, 0, 0.0f, 1.0f);
            PART("mlp.down_proj.weight", "ffn_down.weight", C, I, 0, 0.0f, 1.0f);
        } else if (!sparse) {
            PART("mlp.gate_proj.weight", "ffn_gate.weight", I, C, 0, 0.0f, 1.0f);
            PART("mlp.up_proj.weight", "ffn_up.weight", I, C, 0, 0.0f, 1.0f);
            PART("mlp.down_proj.weight", "ffn_down.weight", C, I, 0, 0.0f, 1.0f);
        }
        if (c->post_norms)
            PART("post_feedforward_layernorm.weight", "post_ffw_norm.weight", C, 0, 0, na, 1.0f);
        if (c->qkv_bias) {
            PART("self_attn.q_proj.bias", "attn_q.bias", q, 0, perm ? c->n_heads : 0, 0.0f,
                 gemma2_q_mul(c));
            PART("self_attn.k_proj.bias", "attn_k.bias", kv, 0, perm ? c->n_kv_heads : 0, 0.0f,
                 1.0f);
            PART("self_attn.v_proj.bias", "attn_v.bias", kv, 0, 0, 0.0f, 1.0f);
        }
#undef PART
        for (int p = 0; p < np; p++) {
            snprintf(hf, sizeof hf, "model.layers.%d.%s", l, parts[p].hf);
            snprintf(gg, sizeof gg, "blk.%d.%s", l, parts[p].gg);
            WANT(hf, gg, parts[p].rows, parts[p].cols, parts[p].perm, parts[p].add,
                 parts[p].mul);
        }
        /* a sparse layer's router and its experts, each projection stacked */
        if (sparse) {
            snprintf(hf, sizeof hf, "model.layers.%d.mlp.gate.weight", l);
            snprintf(gg, sizeof gg, "blk.%d.ffn_gate_inp.weight", l);
            WANT(hf, gg, c->n_experts, C, 0, 0.0f, 1.0f);
        }
        for (int p = 0; sparse && p < MOE_PROJ_COUNT; p++) {
            int64_t M = c->moe_intermediate, down = p == MOE_DOWN;
            snprintf(hf, sizeof hf, "model.layers.%d.mlp.experts", l);
            snprintf(gg, sizeof gg, "blk.%d.%s.weight", l, gguf_moe_stack_name(p));
            WANT(hf, gg, down ? C : M, down ? M : C, 0, 0.0f, 1.0f);
            w[k - 1].stack = c->n_experts;
            w[k - 1].proj = p;
        }
    }
    WANT("model.norm.weight", "output_norm.weight", C, 0, 0, na, 1.0f);
    if (!c->tied)
        WANT("lm_head.weight", "output.weight", V, C, 0, 0.0f, 1.0f);
#undef WANT
    *out = w;
    *n = k;
    return 0;
}

static int check_tensor(const struct st_tensor *t, const struct want *w, char *err, size_t cap)
{
    if (!t) {
        text_error(err, cap, "missing tensor %s", w->hf);
        return -1;
    }
    if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16) {
        text_error(err, cap, "tensor %s is %s (F32, F16 or BF16 expected)", w->hf,
               st_dtype_name(t->dtype));
        return -1;
    }
    int ok = w->cols ? (t->ndim == 2 && t->shape[0] == w->rows && t->shape[1] == w->cols)
                     : (t->ndim == 1 && t->shape[0] == w->rows);
    if (!ok) {
        text_error(err, cap, "tensor %s has shape [%lld%s%lld], config.json implies [%lld%s%lld]",
                   w->hf, (long long)t->shape[0], t->ndim > 1 ? ", " : "",
                   t->ndim > 1 ? (long long)t->shape[1] : 0LL, (long long)w->rows,
                   w->cols ? ", " : "", (long long)w->cols);
        return -1;
    }
    return 0;
}

/* Everything a model folder check opens, kept for the GGUF conversion. */
struct hf_model {
    struct model_config cfg;
    struct tokenizer *tok;
    struct shards sh;
    struct want *want;
    size_t n_want;
};

static void hf_close(struct hf_model *m)
{
    tokenizer_free(m->tok);
    shards_close(&m->sh);
    free(m->want);
    memset(m, 0, sizeof *m);
}

static int hf_open(const char *dir, struct hf_model *m, char *err, size_t cap)
{
    memset(m, 0, sizeof *m);
    char path[PATH_CAP], why[400];
    if (join(path, dir, "config.json") < 0 || model_config_load(path, &m->cfg, why, sizeof why) < 0) {
        text_error(err, cap, "%s: %s", dir, why);
        return -1;
    }
    if (join(path, dir, "tokenizer.json") < 0 || !(m->tok = tokenizer_load(path, why, sizeof why))) {
        text_error(err, cap, "%s: %s", dir, why);
        goto fail;
    }
    if (tokenizer_vocab_size(m->tok) > m->cfg.vocab) {
        text_error(err, cap, "%s: tokenizer.json has %d ids but config.json's vocab_size is %d",
                   dir, tokenizer_vocab_size(m->tok), m->cfg.vocab);
        goto fail;
    }
    if (shards_open(dir, &m->sh, err, cap) < 0)
        goto fail;
    if (want_list(&m->cfg, &m->want, &m->n_want) < 0) {
        text_error(err, cap, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < m->n_want; i++)
        for (int e = 0; m->want[i].hf[0] && e < (m->want[i].stack ? m->want[i].stack : 1); e++) {
            struct want one = m->want[i];
            if (one.stack)
                stack_name(&m->want[i], e, one.hf, sizeof one.hf);
            if (check_tensor(shards_find(&m->sh, one.hf), &one, why, sizeof why) < 0) {
                text_error(err, cap, "%s: %s", dir, why);
                goto fail;
            }
        }
    return 0;
fail:
    hf_close(m);
    return -1;
}

int export_check_hf(const char *model_dir, char *err, size_t errcap)
{
    struct hf_model m;
    if (hf_open(model_dir, &m, err, errcap) < 0)
        return -1;
    hf_close(&m);
    return 0;
}

/* ---- PEFT ----------------------------------------------------------------- */

int export_check_peft(const char *dir, char *err, size_t cap)
{
    char path[PATH_CAP];
    json_error_t je;
    if (join(path, dir, "adapter_config.json") < 0 || !is_file(path)) {
        text_error(err, cap, "%s: no adapter_config.json (not a PEFT adapter folder)", dir);
        return -1;
    }
    json_t *cfg = json_load_file(path, 0, &je);
    if (!cfg) {
        text_error(err, cap, "%s/adapter_config.json: not valid JSON (line %d: %s)", dir, je.line,
                   je.text);
        return -1;
    }
    int rc = -1;
    struct st_file *f = NULL;
    const char *type = json_string_value(json_object_get(cfg, "peft_type"));
    json_int_t r = json_integer_value(json_object_get(cfg, "r"));
    json_t *alpha = json_object_get(cfg, "lora_alpha");
    json_t *targets = json_object_get(cfg, "target_modules");
    if (!type || strcmp(type, "LORA") != 0 || r < 1 || !json_is_number(alpha) ||
        !(json_is_array(targets) || json_is_string(targets))) {
        text_error(
            err, cap,
            "%s/adapter_config.json: needs peft_type \"LORA\", r, lora_alpha and target_modules",
            dir);
        goto out;
    }
    char why[400];
    if (join(path, dir, "adapter_model.safetensors") < 0 || !(f = st_open(path, why, sizeof why))) {
        text_error(err, cap, "%s: adapter_model.safetensors: %s", dir, why);
        goto out;
    }
    size_t n = st_count(f);
    if (n == 0 || n % 2) {
        text_error(err, cap, "%s: adapter_model.safetensors has %zu tensors (A/B pairs expected)",
                   dir, n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const struct st_tensor *t = st_at(f, i);
        int layer, end = 0;
        char part[32], proj[32], ab;
        if (sscanf(t->name, "base_model.model.model.layers.%d.%31[a-z_].%31[a-z_].lora_%c.weight%n",
                   &layer, part, proj, &ab, &end) != 4 ||
            t->name[end] != '\0' || (ab != 'A' && ab != 'B') || t->ndim != 2) {
            text_error(err, cap, "%s: unexpected adapter tensor %s", dir, t->name);
            goto out;
        }
        if ((ab == 'A' && t->shape[0] != r) || (ab == 'B' && t->shape[1] != r)) {
            text_error(err, cap, "%s: tensor %s does not have rank %lld", dir, t->name,
                       (long long)r);
            goto out;
        }
        char other[ST_MAX_NAME];
        snprintf(other, sizeof other, "%.*s%c.weight", end - 8, t->name, ab == 'A' ? 'B' : 'A');
        if (!st_find(f, other)) {
            text_error(err, cap, "%s: %s has no matching %s", dir, t->name, other);
            goto out;
        }
    }
    rc = 0;
out:
    st_close(f);
    json_decref(cfg);
    return rc;
}

/* ---- copying folders ------------------------------------------------------ */

static int parent_of(const char *path, char *out)
{
    if ((size_t)snprintf(out, PATH_CAP, "%s", path) >= PATH_CAP)
        return -1;
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/')
        out[--n] = '\0';
    char *slash = strrchr(out, '/');
    if (!slash)
        snprintf(out, PATH_CAP, ".");
    else if (slash == out)
        out[1] = '\0';
    else
        *slash = '\0';
    return 0;
}

/* Copies the files of src named by keep() into a new folder dst. */
static int copy_folder(const char *src, const char *dst, int (*keep)(const char *name), char *err,
                       size_t cap)
{
    if (exists(dst)) {
        text_error(err, cap, "%s already exists", dst);
        return -1;
    }
    char tmp[PATH_CAP];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", dst) >= sizeof tmp || !mkdtemp(tmp)) {
        text_error(err, cap, "%s: cannot create a folder beside it (%s)", dst, strerror(errno));
        return -1;
    }
    DIR *d = opendir(src);
    if (!d) {
        text_error(err, cap, "%s: %s", src, strerror(errno));
        rmdir(tmp);
        return -1;
    }
    int rc = 0, copied = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        char from[PATH_CAP], to[PATH_CAP];
        if (e->d_name[0] == '.' || !keep(e->d_name))
            continue;
        if (join(from, src, e->d_name) < 0 || join(to, tmp, e->d_name) < 0 || !is_file(from))
            continue;
        if (fs_copy_file(from, to) < 0) {
            text_error(err, cap, "copying %s: %s", from, strerror(errno));
            rc = -1;
        }
        copied++;
    }
    closedir(d);
    if (rc == 0) {
        fs_sync_dir(tmp);
        if (rename(tmp, dst) < 0) {
            text_error(err, cap, "%s: %s", dst, strerror(errno));
            rc = -1;
        }
    }
    if (rc < 0) {
        fs_remove_tree(tmp);
        return -1;
    }
    char parent[PATH_CAP];
    if (parent_of(dst, parent) == 0)
        fs_sync_dir(parent);
    return copied > 0 ? 0 : -1;
}

static int keep_hf(const char *name)
{
    static const char *const files[] = {"config.json", "generation_config.json", "tokenizer.json",
                                        "tokenizer_config.json", "special_tokens_map.json",
                                        "model.safetensors.index.json", "README.md", NULL};
    for (int i = 0; files[i]; i++)
        if (strcmp(name, files[i]) == 0)
            return 1;
    return ends_with(name, ".safetensors");
}

static int keep_peft(const char *name)
{
    return strcmp(name, "adapter_config.json") == 0 ||
           strcmp(name, "adapter_model.safetensors") == 0 || strcmp(name, "README.md") == 0;
}

int export_hf(const char *model_dir, const char *out_dir, char *err, size_t errcap)
{
    if (export_check_hf(model_dir, err, errcap) < 0)
        return -1;
    return copy_folder(model_dir, out_dir, keep_hf, err, errcap);
}

int export_peft(const char *adapter_dir, const char *out_dir, char *err, size_t errcap)
{
    if (export_check_peft(adapter_dir, err, errcap) < 0)
        return -1;
    return copy_folder(adapter_dir, out_dir, keep_peft, err, errcap);
}

/* ---- GGUF ----------------------------------------------------------------- */

struct conv {
    const struct st_tensor *src; /* NULL: the values are `mem` */
    const struct st_tensor **stack; /* n_stack > 0: rows split evenly among these sources */
    int n_stack;
    const float *mem;
    enum gguf_ttype to;
    size_t rows, cols; /* cols 1 for a vector */
    int permute_heads;
    float add, mul;
};

static float load_elem(const struct st_tensor *t, size_t i)
{
    const unsigned char *p = (const unsigned char *)t->data;
    if (t->dtype == ST_F32) {
        float f;
        memcpy(&f, p + i * 4, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + i * 2, 2);
    return t->dtype == ST_BF16 ? st_bf16_to_f32(h) : st_f16_to_f32(h);
}

/* One row of the written tensor (destination row r) as fp32. */
static void conv_row(const struct conv *c, size_t r, float *row)
{
    size_t sr = c->permute_heads ? export_permuted_row(r, c->rows, c->permute_heads) : r;
    const struct st_tensor *t = c->src;
    if (c->n_stack > 0) {
        size_t per = c->rows / (size_t)c->n_stack;
        t = c->stack[sr / per];
        sr %= per;
    }
    for (size_t k = 0; k < c->cols; k++) {
        size_t i = sr * c->cols + k;
        row[k] = (t ? load_elem(t, i) : c->mem[i]) * c->mul + c->add;
    }
}

static int fill_conv(void *ctx, void *out, size_t nbytes)
{
    const struct conv *c = ctx;
    unsigned char *o = out;
    int plain = c->to == GGUF_T_F32 || c->to == GGUF_T_F16 || c->to == GGUF_T_BF16;
    size_t es = c->to == GGUF_T_F32 ? 4 : 2;
    size_t row_bytes = plain ? c->cols * es : quant_row_bytes((enum quant_type)c->to, c->cols);
    float *row = malloc(c->cols * sizeof *row);
    if (!row || row_bytes == 0 || nbytes != c->rows * row_bytes) {
        free(row);
        return -1;
    }
    for (size_t r = 0; r < c->rows; r++) {
        conv_row(c, r, row);
        unsigned char *at = o + r * row_bytes;
        if (!plain) {
            quant_row((enum quant_type)c->to, row, c->cols, at);
            continue;
        }
        for (size_t k = 0; k < c->cols; k++) {
            if (c->to == GGUF_T_F32) {
                memcpy(at + k * 4, &row[k], 4);
            } else {
                uint16_t h = c->to == GGUF_T_F16 ? st_f32_to_f16(row[k]) : st_f32_to_bf16(row[k]);
                memcpy(at + k * 2, &h, 2);
            }
        }
    }
    free(row);
    return 0;
}

static char *read_text(const char *path, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && (size_t)n <= cap && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
            if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
            } else {
                buf[n] = '\0';
            }
        }
    }
    fclose(f);
    return buf;
}

/* llama.cpp's name for the pre-tokenizer of a byte-level tokenizer.json, or
 * NULL when it has none. */
static const char *gguf_pre_name(json_t *pre)
{
    const char *type = json_string_value(json_object_get(pre, "type"));
    if (!type)
        return NULL;
    if (strcmp(type, "ByteLevel") == 0)
        return json_is_false(json_object_get(pre, "use_regex")) ? NULL : "gpt-2";
    if (strcmp(type, "Sequence") != 0)
        return NULL;
    json_t *list = json_object_get(pre, "pretokenizers");
    if (json_array_size(list) != 2)
        return NULL;
    json_t *split = json_array_get(list, 0), *bl = json_array_get(list, 1);
    const char *re = json_string_value(json_object_get(json_object_get(split, "pattern"), "Regex"));
    const char *bl_type = json_string_value(json_object_get(bl, "type"));
    if (!re || !bl_type || strcmp(bl_type, "ByteLevel") != 0 ||
        !json_is_false(json_object_get(bl, "use_regex")))
        return NULL;
    if (strcmp(re, llama3_regex) == 0)
        return "llama-bpe";
    if (strcmp(re, qwen2_regex) == 0)
        return "qwen2";
    return NULL;
}

/* Whether a SentencePiece-style tokenizer.json marks the start of text. */
static int sp_prefix_space(json_t *root)
{
    char *n = json_dumps(json_object_get(root, "normalizer"), JSON_ENCODE_ANY);
    char *p = json_dumps(json_object_get(root, "pre_tokenizer"), JSON_ENCODE_ANY);
    int yes = (n && strstr(n, "\"Prepend\"")) ||
              (p && strstr(p, "\"Metaspace\"") && !strstr(p, "\"never\""));
    free(n);
    free(p);
    return yes;
}

static int set_tokenizer(struct gguf_writer *w, const struct hf_model *m, const char *dir,
                         char *err, size_t cap)
{
    char path[PATH_CAP];
    join(path, dir, "tokenizer.json");
    char *text = read_text(path, MAX_TOKENIZER_JSON);
    json_t *root = text ? json_loads(text, 0, NULL) : NULL;
    free(text);
    if (!root) {
        text_error(err, cap, "%s: cannot read tokenizer.json", dir);
        return -1;
    }
    int rc = -1;
    int V = m->cfg.vocab, byte_level = tokenizer_is_byte_level(m->tok);
    char **tokens = calloc((size_t)V, sizeof *tokens);
    int32_t *types = calloc((size_t)V, sizeof *types);
    float *scores = byte_level ? NULL : calloc((size_t)V, sizeof *scores);
    char **merges = NULL;
    size_t n_merges = 0;
    if (!tokens || !types || (!byte_level && !scores))
        goto oom;
    for (int id = 0; id < V; id++) {
        const char *s = tokenizer_token_text(m->tok, id);
        int kind = tokenizer_token_kind(m->tok, id);
        char pad[32];
        if (!s) {
            snprintf(pad, sizeof pad, "[PAD%d]", id);
            s = pad;
        }
        if (!(tokens[id] = strdup(s)))
            goto oom;
        if (kind < 0)
            types[id] = TT_UNUSED;
        else if (kind == 2)
            types[id] = TT_CONTROL;
        else if (kind == 1)
            types[id] = TT_USER_DEFINED;
        else if (!byte_level && strlen(s) == 6 && strncmp(s, "<0x", 3) == 0 && s[5] == '>')
            types[id] = TT_BYTE;
        else
            types[id] = TT_NORMAL;
        if (scores)
            scores[id] = -(float)id; /* earlier pieces merge first, as ranks do */
    }
    json_t *model = json_object_get(root, "model");
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    int unk_id = unk ? tokenizer_token_id(m->tok, unk) : -1;
    if (unk_id >= 0 && unk_id < V)
        types[unk_id] = TT_UNKNOWN;
    if (byte_level) {
        const char *pre = gguf_pre_name(json_object_get(root, "pre_tokenizer"));
        if (!pre) {
            text_error(err, cap, "%s: tokenizer.json's pre-tokenizer has no llama.cpp equivalent "
                             "(GPT-2 byte-level, Llama 3 and Qwen2 splits are supported)", dir);
            goto out;
        }
        json_t *ml = json_object_get(model, "merges");
        n_merges = json_array_size(ml);
        merges = calloc(n_merges ? n_merges : 1, sizeof *merges);
        if (!merges)
            goto oom;
        for (size_t i = 0; i < n_merges; i++) {
            json_t *e = json_array_get(ml, i);
            if (json_is_string(e)) {
                merges[i] = strdup(json_string_value(e));
            } else {
                const char *a = json_string_value(json_array_get(e, 0));
                const char *b = json_string_value(json_array_get(e, 1));
                if (!a || !b)
                    goto oom;
                merges[i] = malloc(strlen(a) + strlen(b) + 2);
                if (merges[i])
                    sprintf(merges[i], "%s %s", a, b);
            }
            if (!merges[i])
                goto oom;
        }
        if (gguf_set_str(w, "tokenizer.ggml.model", "gpt2") || gguf_set_str(w, "tokenizer.ggml.pre", pre))
            goto oom;
    } else if (gguf_set_str(w, "tokenizer.ggml.model", "llama") ||
               gguf_set_str(w, "tokenizer.ggml.pre", "default")) {
        goto oom;
    }
    if (gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tokens, (size_t)V) ||
        (scores && gguf_set_arr_f32(w, "tokenizer.ggml.scores", scores, (size_t)V)) ||
        gguf_set_arr_i32(w, "tokenizer.ggml.token_type", types, (size_t)V) ||
        (merges && gguf_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges, n_merges)))
        goto oom;
    int bos = tokenizer_bos_id(m->tok), eos = tokenizer_eos_id(m->tok);
    if (bos < 0)
        bos = m->cfg.bos_id;
    if (eos < 0)
        eos = m->cfg.eos_id;
    if ((bos >= 0 && gguf_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos)) ||
        (eos >= 0 && gguf_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos)) ||
        (unk_id >= 0 && gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)unk_id)) ||
        gguf_set_bool(w, "tokenizer.ggml.add_bos_token", bos >= 0) ||
        gguf_set_bool(w, "tokenizer.ggml.add_eos_token", 0) ||
        (!byte_level && gguf_set_bool(w, "tokenizer.ggml.add_space_prefix", sp_prefix_space(root))))
        goto oom;
    rc = 0;
    goto out;
oom:
    text_error(err, cap, "out of memory while writing the tokenizer");
out:
    if (tokens)
        for (int id = 0; id < V; id++)
            free(tokens[id]);
    free(tokens);
    free(types);
    free(scores);
    if (merges)
        for (size_t i = 0; i < n_merges; i++)
            free(merges[i]);
    free(merges);
    json_decref(root);
    return rc;
}

/* "ARCH.key" */
static int set_u32k(struct gguf_writer *w, const char *arch, const char *key, uint32_t v)
{
    char k[96];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return gguf_set_u32(w, k, v);
}

static int set_f32k(struct gguf_writer *w, const char *arch, const char *key, float v)
{
    char k[96];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return gguf_set_f32(w, k, v);
}

/* The period P of llama.cpp's sliding-window pattern that gives c's local
 * layers (layer l local when l % P < P - 1; P 0: every layer local), or -1
 * when none does. Only called with some layer local. */
static int swa_period(const struct model_config *c)
{
    for (int p = 0; p <= c->n_layers; p++) {
        if (p == 1)
            continue; /* no layer local */
        int l = 0;
        while (l < c->n_layers && c->swa[l] == (p == 0 || l % p < p - 1))
            l++;
        if (l == c->n_layers)
            return p;
    }
    return -1;
}

static int any_swa(const struct model_config *c)
{
    for (int l = 0; l < c->n_layers; l++)
        if (c->swa[l])
            return 1;
    return 0;
}

/* Gemma 3's keys: its window and pattern, the local layers' rotary base,
 * the global layers' linear scaling, the final cap. */
static int set_gemma3(struct gguf_writer *w, const struct model_config *c)
{
    const char *a = "gemma3";
    int bad = 0;
    if (any_swa(c))
        bad = set_u32k(w, a, "attention.sliding_window", (uint32_t)c->sliding_window) ||
              set_u32k(w, a, "attention.sliding_window_pattern", (uint32_t)swa_period(c)) ||
              set_f32k(w, a, "rope.freq_base_swa", c->rope_local_theta);
    if (!bad && c->rope_linear)
        bad = gguf_set_str(w, "gemma3.rope.scaling.type", "linear") ||
              set_f32k(w, a, "rope.scaling.factor", c->rope_factor);
    if (!bad && c->final_softcap > 0.0f)
        bad = set_f32k(w, a, "final_logit_softcapping", c->final_softcap);
    return bad;
}

/* Phi-3's keys: no window (alallo's context stays inside any the config
 * states, see model.h), and longrope's original context, below which
 * llama.cpp takes the short factors as alallo does, and attention factor. */
static int set_phi3(struct gguf_writer *w, const struct model_config *c)
{
    int bad = set_u32k(w, "phi3", "attention.sliding_window", 0);
    if (!bad && c->longrope)
        bad = set_u32k(w, "phi3", "rope.scaling.original_context_length",
                       (uint32_t)c->rope_orig_max) ||
              set_f32k(w, "phi3", "rope.scaling.attn_factor", model_rope_attn_factor(c));
    return bad;
}

/* The architecture's hyper-parameters under llama.cpp's keys. */
static int set_hparams(struct gguf_writer *w, const struct model_config *c)
{
    const char *a = gguf_arch(c);
    int bad = set_u32k(w, a, "vocab_size", (uint32_t)c->vocab) ||
              set_u32k(w, a, "context_length",
                       (uint32_t)(c->longrope ? c->max_pos_config : c->max_pos)) ||
              set_u32k(w, a, "embedding_length", (uint32_t)c->hidden) ||
              set_u32k(w, a, "block_count", (uint32_t)c->n_layers) ||
              set_u32k(w, a, "feed_forward_length", (uint32_t)c->intermediate) ||
              set_u32k(w, a, "rope.dimension_count", (uint32_t)model_rot_dim(c)) ||
              set_u32k(w, a, "attention.head_count", (uint32_t)c->n_heads) ||
              set_u32k(w, a, "attention.head_count_kv", (uint32_t)c->n_kv_heads) ||
              set_u32k(w, a, "attention.key_length", (uint32_t)c->head_dim) ||
              set_u32k(w, a, "attention.value_length", (uint32_t)c->head_dim) ||
              set_f32k(w, a, "attention.layer_norm_rms_epsilon", c->rms_eps) ||
              set_f32k(w, a, "rope.freq_base", c->rope_theta);
    if (!bad && c->family == FAM_GEMMA3)
        bad = set_gemma3(w, c);
    if (!bad && c->family == FAM_PHI3)
        bad = set_phi3(w, c);
    if (!bad && c->family == FAM_GEMMA2) {
        bad = set_u32k(w, a, "attention.sliding_window",
                       (uint32_t)(c->sliding_window > 0 ? c->sliding_window : c->max_pos));
        if (!bad && c->attn_softcap > 0.0f)
            bad = set_f32k(w, a, "attn_logit_softcapping", c->attn_softcap);
        if (!bad && c->final_softcap > 0.0f)
            bad = set_f32k(w, a, "final_logit_softcapping", c->final_softcap);
    }
    return bad;
}

/* llama.cpp marks Phi-3's special tokens by general.name: a name holding
 * "phi3" or "phi-3" (any case) makes it look up </s>, <unk>, <s> and
 * <|endoftext|>, and it fails to load a vocabulary without all four (a
 * Phi-4-mini's has only the last). Such a name is written "phi 3" instead
 * (docs/models.md); with the four tokens, or another family, it stays. */
static void phi3_name(const struct hf_model *m, char *name /* 256 bytes */)
{
    static const char *const need[] = {"</s>", "<unk>", "<s>", "<|endoftext|>"};
    int all = 1;
    for (int i = 0; i < 4; i++)
        all &= tokenizer_token_id(m->tok, need[i]) >= 0;
    if (m->cfg.family != FAM_PHI3 || all)
        return;
    char out[256];
    size_t k = 0;
    for (const char *p = name; *p && k + 1 < sizeof out;) {
        size_t n = strncasecmp(p, "phi3", 4) == 0 ? 4 : strncasecmp(p, "phi-3", 5) == 0 ? 5 : 0;
        if (!n) {
            out[k++] = *p++;
            continue;
        }
        if (k + 5 >= sizeof out)
            break;
        memcpy(out + k, p, 3); /* "phi" as written, then " 3" */
        out[k + 3] = ' ';
        out[k + 4] = '3';
        k += 5;
        p += n;
    }
    out[k] = '\0';
    memcpy(name, out, k + 1);
}

static void model_name(const char *dir, char *out, size_t cap)
{
    char buf[PATH_CAP];
    snprintf(buf, sizeof buf, "%s", dir);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    char *base = strrchr(buf, '/');
    base = base ? base + 1 : buf;
    if (strcmp(base, "model") == 0 && base > buf + 1) {
        /* a trainer's out_dir/model: the out_dir names it better */
        base[-1] = '\0';
        char *up = strrchr(buf, '/');
        base = up ? up + 1 : buf;
    }
    /* A name longer than cap - 1 bytes is cut there, as snprintf would;
     * copied by hand because gcc 12 at -Os and -O1 warns on that intended
     * cut (-Wformat-truncation). */
    if (cap == 0)
        return;
    size_t len = strlen(base);
    if (len >= cap)
        len = cap - 1;
    memcpy(out, base, len);
    out[len] = '\0';
}

/* llama.cpp's general.file_type of an export. */
static uint32_t file_type(enum export_dtype d)
{
    switch (d) {
    case EXPORT_BF16: return 32;
    case EXPORT_F32: return 0;
    case EXPORT_F16: return 1;
    case EXPORT_Q8_0: return quant_scheme_file_type(QSCHEME_Q8_0);
    case EXPORT_Q4_0: return quant_scheme_file_type(QSCHEME_Q4_0);
    default: return quant_scheme_file_type(QSCHEME_Q4_K_M);
    }
}

/* The storage of one matrix in an export of `d`. */
static enum gguf_ttype matrix_type(enum export_dtype d, const struct want *w, int tied)
{
    char hf[sizeof w->hf + 32]; /* a stack's role is its experts' */
    snprintf(hf, sizeof hf, "%s", w->hf);
    if (w->stack)
        stack_name(w, 0, hf, sizeof hf);
    enum quant_role role = quant_role_of(hf, tied);
    if (role == QROLE_ROUTER) /* a router stays F32 in every export (quant.h) */
        return GGUF_T_F32;
    switch (d) {
    case EXPORT_BF16: return GGUF_T_BF16;
    case EXPORT_F32: return GGUF_T_F32;
    case EXPORT_F16: return GGUF_T_F16;
    default: break;
    }
    enum quant_scheme s = d == EXPORT_Q8_0 ? QSCHEME_Q8_0 : d == EXPORT_Q4_0 ? QSCHEME_Q4_0 : QSCHEME_Q4_K_M;
    return (enum gguf_ttype)quant_pick(s, role, (size_t)w->cols);
}

int export_gguf(const char *model_dir, const char *out_path, enum export_dtype dtype, char *err,
                size_t errcap)
{
    if (exists(out_path)) {
        text_error(err, errcap, "%s already exists", out_path);
        return -1;
    }
    struct hf_model m;
    if (hf_open(model_dir, &m, err, errcap) < 0)
        return -1;
    const struct model_config *c = &m.cfg;
    for (int l = 0; c->family == FAM_SMOLLM3 && l < c->n_layers; l++)
        if (c->no_rope[l] != ((l + 1) % 4 == 0)) {
            text_error(err, errcap,
                       "%s: llama.cpp's smollm3 leaves the rotary positions out of every 4th "
                       "layer; this model's no_rope_layers differ (layer %d), so its GGUF would "
                       "not compute as it does",
                       model_dir, l);
            hf_close(&m);
            return -1;
        }
    const char *no = NULL; /* what llama.cpp's gemma3 would not compute as alallo does */
    if (c->family == FAM_GEMMA3 && c->attn_softcap > 0.0f)
        no = "soft-caps no attention scores; this model's attn_logit_softcapping is set";
    else if (c->family == FAM_GEMMA3 && any_swa(c) && swa_period(c) < 0)
        no = "makes every N-th layer global and the rest local; this model's layer_types "
             "follow no such period";
    if (no) {
        text_error(err, errcap, "%s: llama.cpp's gemma3 %s, so its GGUF would not compute as "
                                "it does", model_dir, no);
        hf_close(&m);
        return -1;
    }
    int rc = -1;
    char why[400];
    if (c->n_experts > 0 && gguf_moe_refusal(c, why, sizeof why) < 0) {
        text_error(err, errcap, "%s: %s", model_dir, why);
        hf_close(&m);
        return -1;
    }
    size_t n_stacked = 0, at = 0; /* the experts' sources of every stack, in one block */
    for (size_t i = 0; i < m.n_want; i++)
        n_stacked += (size_t)m.want[i].stack;
    struct gguf_writer *w = gguf_writer_new();
    struct conv *cv = calloc(m.n_want, sizeof *cv);
    const struct st_tensor **stacked = calloc(n_stacked + 1, sizeof *stacked);
    float rope_div[512];
    if (!w || !cv || !stacked) {
        text_error(err, errcap, "out of memory");
        goto out;
    }
    char name[256];
    model_name(model_dir, name, sizeof name);
    phi3_name(&m, name);
    int bad = gguf_set_str(w, "general.architecture", gguf_arch(c)) ||
              gguf_set_str(w, "general.name", name) ||
              gguf_set_u32(w, "general.file_type", file_type(dtype)) ||
              set_hparams(w, c) ||
              (c->n_experts > 0 && gguf_moe_set_keys(w, gguf_arch(c), c));
    if (bad) {
        text_error(err, errcap, "out of memory");
        goto out;
    }
    model_rope_freq_div(c, rope_div);
    if (set_tokenizer(w, &m, model_dir, err, errcap) < 0)
        goto out;
    for (size_t i = 0; i < m.n_want; i++) {
        const struct want *wt = &m.want[i];
        cv[i] = (struct conv){.src = wt->hf[0] ? shards_find(&m.sh, wt->hf) : NULL,
                              .mem = wt->mem ? wt->mem : rope_div,
                              .to = wt->cols ? matrix_type(dtype, wt, c->tied) : GGUF_T_F32,
                              .rows = (size_t)wt->rows,
                              .cols = wt->cols ? (size_t)wt->cols : 1,
                              .permute_heads = wt->permute_heads,
                              .add = wt->add,
                              .mul = wt->mul};
        uint64_t ne[3] = {cv[i].cols, cv[i].rows, (uint64_t)wt->stack};
        int nd = wt->stack ? 3 : wt->cols ? 2 : 1;
        if (!wt->cols)
            ne[0] = cv[i].rows;
        if (wt->stack) {
            cv[i].stack = stacked + at;
            cv[i].n_stack = wt->stack;
            cv[i].rows *= (size_t)wt->stack;
            for (int e = 0; e < wt->stack; e++) {
                char hf[sizeof wt->hf + 32];
                stack_name(wt, e, hf, sizeof hf);
                stacked[at++] = shards_find(&m.sh, hf);
            }
        }
        if (gguf_add_tensor(w, wt->gguf, cv[i].to, nd, ne, fill_conv, &cv[i]) < 0) {
            text_error(err, errcap, "tensor %s cannot be added", wt->gguf);
            goto out;
        }
    }
    rc = gguf_write(w, out_path, err, errcap);
out:
    gguf_writer_free(w);
    free(cv);
    free(stacked);
    hf_close(&m);
    return rc;
}
