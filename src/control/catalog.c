/* catalog.c - scanning the models folder. */
#include "control/catalog.h"

#include <dirent.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/clock.h"
#include "core/ids.h"
#include "core/text.h"

struct catalog {
    char dir[1024];
    pthread_mutex_t mu;
    struct catalog_model models[CATALOG_MAX];
    int n;
    int64_t checked_ms;
};

static int int_field(const json_t *cfg, const char *key, int dflt)
{
    const json_t *v = json_object_get(cfg, key);
    return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

/* qwen3_moe's experts, and which layers are sparse (as the trainer reads
 * them, src/train/model/moe.c). */
static void read_experts(const json_t *cfg, struct catalog_model *m)
{
    m->experts = int_field(cfg, "num_experts", 0);
    m->experts_used = int_field(cfg, "num_experts_per_tok", 0);
    m->moe_intermediate = int_field(cfg, "moe_intermediate_size", 0);
    int step = int_field(cfg, "decoder_sparse_step", 1);
    if (m->experts <= 0 || m->experts_used <= 0 || m->moe_intermediate <= 0 || step <= 0) {
        m->experts = 0;
        return;
    }
    const json_t *only = json_object_get(cfg, "mlp_only_layers");
    for (int l = 0; l < m->layers; l++) {
        int dense = (l + 1) % step != 0;
        for (size_t i = 0; json_is_array(only) && i < json_array_size(only); i++)
            dense |= json_integer_value(json_array_get(only, i)) == l;
        m->sparse_layers += !dense;
    }
    if (m->sparse_layers == 0)
        m->experts = 0; /* every layer dense: a dense model */
}

/* Gemma3TextConfig's defaults for the keys published configs leave out
 * (as the trainer's config reader fills them). */
static void gemma3_defaults(json_t *cfg)
{
    static const struct {
        const char *key;
        int v;
    } def[] = {
        {"vocab_size", 262208},         {"hidden_size", 2304},      {"intermediate_size", 9216},
        {"num_hidden_layers", 26},      {"num_attention_heads", 8}, {"num_key_value_heads", 4},
        {"head_dim", 256},              {"max_position_embeddings", 131072},
    };
    for (size_t i = 0; i < sizeof def / sizeof def[0]; i++)
        if (!json_object_get(cfg, def[i].key))
            json_object_set_new(cfg, def[i].key, json_integer(def[i].v));
}

int catalog_read_dir(const char *dir, struct catalog_model *m, char *err, size_t errcap)
{
    memset(m, 0, sizeof *m);
    if (strlen(dir) >= sizeof m->dir) {
        snprintf(err, errcap, "the model folder's path is too long");
        return -1;
    }
    char path[1200];
    text_printf(path, sizeof path, "%s/config.json", dir);
    json_error_t jerr;
    json_t *cfg = json_load_file(path, 0, &jerr);
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        snprintf(err, errcap, "no readable config.json in the model folder");
        return -1;
    }
    /* Gemma 3's image-and-text folders nest the text model (docs/models.md) */
    const char *outer = json_string_value(json_object_get(cfg, "model_type"));
    bool gemma3 = outer && strncmp(outer, "gemma3", 6) == 0;
    if (outer && strcmp(outer, "gemma3") == 0 && json_is_object(json_object_get(cfg, "text_config"))) {
        json_t *text = json_incref(json_object_get(cfg, "text_config"));
        json_decref(cfg);
        cfg = text;
    }
    if (gemma3)
        gemma3_defaults(cfg);
    m->hidden = int_field(cfg, "hidden_size", 0);
    m->layers = int_field(cfg, "num_hidden_layers", 0);
    m->heads = int_field(cfg, "num_attention_heads", 0);
    m->kv_heads = int_field(cfg, "num_key_value_heads", m->heads);
    m->intermediate = int_field(cfg, "intermediate_size", 0);
    m->vocab = int_field(cfg, "vocab_size", 0);
    m->max_positions = int_field(cfg, "max_position_embeddings", 2048);
    m->tied = json_is_true(json_object_get(cfg, "tie_word_embeddings"));
    /* Gemma ties its head unless the config says otherwise, and may set a
     * head_dim apart from hidden / heads (docs/models.md) */
    const char *type = json_string_value(json_object_get(cfg, "model_type"));
    if (((type && strncmp(type, "gemma", 5) == 0) || gemma3) &&
        !json_is_false(json_object_get(cfg, "tie_word_embeddings")))
        m->tied = true;
    int head_dim = int_field(cfg, "head_dim", m->heads > 0 ? m->hidden / m->heads : 0);
    m->head_dim = head_dim;
    if ((type && strcmp(type, "gemma2") == 0) || gemma3) {
        m->post_norms = true;
        json_t *ac = json_object_get(cfg, "attn_logit_softcapping");
        json_t *fc = json_object_get(cfg, "final_logit_softcapping");
        m->attn_softcap = json_is_number(ac) && json_number_value(ac) > 0;
        m->final_softcap = json_is_number(fc) && json_number_value(fc) > 0;
    }
    /* Phi-3's longrope: alallo trains within original_max_position_embeddings,
     * where the short factors apply (docs/models.md) */
    json_t *rs = json_object_get(cfg, "rope_scaling");
    const char *rt = json_string_value(json_object_get(rs, "type"));
    if (!rt)
        rt = json_string_value(json_object_get(rs, "rope_type"));
    int orig = int_field(cfg, "original_max_position_embeddings", 0);
    if (type && strcmp(type, "phi3") == 0 && rt && strcmp(rt, "longrope") == 0 && orig > 0 &&
        orig < m->max_positions)
        m->max_positions = orig;
    /* Qwen3 and the families built on its attention normalize q and k per head */
    m->qk_norm = (type && strncmp(type, "qwen3", 5) == 0) || gemma3;
    if (type && strcmp(type, "qwen3_moe") == 0)
        read_experts(cfg, m);
    json_decref(cfg);
    if (m->hidden <= 0 || m->layers <= 0 || m->heads <= 0 || m->kv_heads <= 0 ||
        m->intermediate <= 0 || m->vocab <= 0 || head_dim <= 0) {
        snprintf(err, errcap, "config.json lacks a Llama shape (hidden_size, layers, heads...)");
        return -1;
    }
    int64_t h = m->hidden, q = (int64_t)m->heads * head_dim;
    int64_t kv = (int64_t)m->kv_heads * head_dim;
    int64_t per_layer = h * q * 2 + h * kv * 2 + 3 * h * m->intermediate +
                        (m->post_norms ? 4 : 2) * h + (m->qk_norm ? 2 * head_dim : 0);
    m->params = (int64_t)m->vocab * h * (m->tied ? 1 : 2) + per_layer * m->layers + h;
    m->active_params = m->params;
    if (m->experts > 0) { /* the sparse layers' router and experts in place of their MLP */
        int64_t expert = 3 * h * m->moe_intermediate, dense = 3 * h * m->intermediate;
        m->params += m->sparse_layers * (m->experts * h + m->experts * expert - dense);
        m->active_params += m->sparse_layers * (m->experts * h + m->experts_used * expert - dense);
    }
    text_copy(m->dir, sizeof m->dir, dir);

    DIR *d = opendir(dir);
    bool has_tokenizer = false;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t n = strlen(e->d_name);
            if (strcmp(e->d_name, "tokenizer.json") == 0)
                has_tokenizer = true;
            if (n > 12 && strcmp(e->d_name + n - 12, ".safetensors") == 0) {
                struct stat st;
                if (text_printf(path, sizeof path, "%s/%s", dir, e->d_name) &&
                    stat(path, &st) == 0)
                    m->bytes += st.st_size;
            }
        }
        closedir(d);
    }
    if (m->bytes == 0 || !has_tokenizer) {
        snprintf(err, errcap, "the model folder needs *.safetensors and tokenizer.json");
        return -1;
    }
    struct stat st;
    if (stat(dir, &st) == 0)
        m->created_ms = (int64_t)st.st_mtim.tv_sec * 1000;
    return 0;
}

static int by_id(const void *a, const void *b)
{
    return strcmp(((const struct catalog_model *)a)->id, ((const struct catalog_model *)b)->id);
}

/* Re-reads the folder if the last read is over a second old; mu held. */
static void refresh(struct catalog *c)
{
    int64_t now = clock_mono_ms();
    if (c->checked_ms && now - c->checked_ms < 1000)
        return;
    c->checked_ms = now;
    struct stat st;
    if (stat(c->dir, &st) != 0) {
        c->n = 0;
        return;
    }
    DIR *d = opendir(c->dir);
    if (!d)
        return;
    c->n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && c->n < CATALOG_MAX) {
        struct catalog_model *m = &c->models[c->n];
        if (!ids_valid_name(e->d_name, sizeof m->id))
            continue;
        char dir[1200], err[200];
        if (!text_printf(dir, sizeof dir, "%s/%s", c->dir, e->d_name))
            continue;
        if (catalog_read_dir(dir, m, err, sizeof err))
            continue;
        text_copy(m->id, sizeof m->id, e->d_name); /* fits: checked by ids_valid_name */
        c->n++;
    }
    closedir(d);
    qsort(c->models, (size_t)c->n, sizeof c->models[0], by_id);
}

struct catalog *catalog_new(const char *models_dir)
{
    struct catalog *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    if (!text_copy(c->dir, sizeof c->dir, models_dir)) {
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void catalog_free(struct catalog *c)
{
    if (!c)
        return;
    pthread_mutex_destroy(&c->mu);
    free(c);
}

int catalog_list(struct catalog *c, struct catalog_model *out, int cap)
{
    pthread_mutex_lock(&c->mu);
    refresh(c);
    int n = c->n < cap ? c->n : cap;
    memcpy(out, c->models, sizeof out[0] * (size_t)n);
    pthread_mutex_unlock(&c->mu);
    return n;
}

bool catalog_find(struct catalog *c, const char *id, struct catalog_model *out)
{
    bool found = false;
    pthread_mutex_lock(&c->mu);
    refresh(c);
    for (int i = 0; i < c->n && !found; i++) {
        if (strcmp(c->models[i].id, id) == 0) {
            *out = c->models[i];
            found = true;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return found;
}
