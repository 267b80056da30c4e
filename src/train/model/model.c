/* model.c - the Llama-style decoder as data: its config (parse, check,
 * JSON), the layout of weights, LoRA adapters and gradients in one buffer,
 * the tensor table, filling and initialisation. The forward and backward
 * pass are in model_pass.c; the contract of both is model.h. */
#include "train/model/model.h"

#include <assert.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "train/kernels/bigmem.h"
#include "train/model/moe.h"
#include "train/model/ops.h"

/* ---------------------------------------------------------------- config */

static const char *const proj_names[PROJ_COUNT] = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
};

const char *model_proj_name(enum model_proj p)
{
    return (unsigned)p < PROJ_COUNT ? proj_names[p] : NULL;
}

int model_proj_parse(const char *name)
{
    for (int p = 0; p < PROJ_COUNT; p++)
        if (strcmp(name, proj_names[p]) == 0)
            return p;
    return -1;
}

/* An integer field; `def` when absent (or -2 to make it required). */
static int get_int(json_t *o, const char *key, long def, long *out, char *err, size_t errcap)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (def == -2) {
            snprintf(err, errcap, "config.json: missing field \"%s\"", key);
            return -1;
        }
        *out = def;
        return 0;
    }
    if (json_is_array(v) && json_array_size(v) > 0)
        v = json_array_get(v, 0); /* e.g. eos_token_id: [a, b] takes the first */
    if (!json_is_integer(v)) {
        snprintf(err, errcap, "config.json: field \"%s\" must be an integer", key);
        return -1;
    }
    *out = (long)json_integer_value(v);
    return 0;
}

static int get_num(json_t *o, const char *key, double def, double *out, char *err,
                   size_t errcap)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_number(v)) {
        snprintf(err, errcap, "config.json: field \"%s\" must be a number", key);
        return -1;
    }
    *out = json_number_value(v);
    return 0;
}

int model_config_check(const struct model_config *c, char *err, size_t errcap)
{
    if (c->hidden < 1 || c->hidden > MODEL_MAX_HIDDEN || c->intermediate < 1 ||
        c->intermediate > 8 * MODEL_MAX_HIDDEN || c->n_layers < 1 ||
        c->n_layers > MODEL_MAX_LAYERS || c->vocab < 2 || c->vocab > MODEL_MAX_VOCAB) {
        snprintf(err, errcap, "config.json: model size out of range");
        return -1;
    }
    if (c->n_heads < 1 || c->n_kv_heads < 1 || c->n_heads % c->n_kv_heads != 0) {
        snprintf(err, errcap,
                 "config.json: num_attention_heads must be a multiple of num_key_value_heads");
        return -1;
    }
    if (c->head_dim < 2 || c->head_dim % 2 != 0 || c->head_dim > 1024 ||
        (long)c->head_dim * c->n_heads > 8L * MODEL_MAX_HIDDEN) {
        snprintf(err, errcap, "config.json: head dimension must be even and at most 1024");
        return -1;
    }
    int rot = model_rot_dim(c);
    if (!(c->partial_rotary >= 0.0f && c->partial_rotary <= 1.0f) || rot < 2 || rot % 2 != 0) {
        snprintf(err, errcap, "config.json: partial_rotary_factor must be in (0, 1] and leave "
                              "an even number (at least 2) of rotary dims of head_dim %d",
                 c->head_dim);
        return -1;
    }
    if (c->longrope && (c->n_rope_factors != rot / 2 || c->rope_orig_max < 1 ||
                        !(c->rope_attn >= 0.0f))) {
        snprintf(err, errcap, "config.json: rope_scaling longrope needs long_factor and "
                              "short_factor of %d values (rotary dims / 2) and a positive "
                              "original_max_position_embeddings", rot / 2);
        return -1;
    }
    if (c->longrope && c->max_pos > c->rope_orig_max) {
        snprintf(err, errcap, "config.json: a longrope context past "
                              "original_max_position_embeddings (%d) is not supported",
                 c->rope_orig_max);
        return -1;
    }
    if (!(c->rms_eps > 0.0f) || !(c->rope_theta > 0.0f) || c->max_pos < 1 ||
        !(c->query_scalar > 0.0f)) {
        snprintf(err, errcap, "config.json: rms_norm_eps, rope_theta and "
                              "max_position_embeddings (and query_pre_attn_scalar) must be "
                              "positive");
        return -1;
    }
    if (c->bos_id >= c->vocab || c->eos_id >= c->vocab) {
        snprintf(err, errcap, "config.json: bos/eos token id outside the vocabulary");
        return -1;
    }
    return moe_config_check(c, err, errcap);
}

/* Each family as data: Hugging Face's model_type and architecture class,
 * and the switches its published definition fixes whatever config.json
 * says (Qwen2's q/k/v biases, Qwen3's q/k norms). A family that shares
 * another's attention (a mixture of experts over Qwen3's) sets its row
 * alike; the keys a config does state are read by model_config_parse. */
static const struct family_desc {
    const char *type, *arch;
    int qkv_bias, qk_norm;
    int no_rope_keys; /* reads no_rope_layers / no_rope_layer_interval */
    int fused;        /* checkpoints hold qkv_proj and gate_up_proj (Phi-3) */
} families[FAM_COUNT] = {
    [FAM_LLAMA] = {"llama", "LlamaForCausalLM", 0, 0},
    [FAM_MISTRAL] = {"mistral", "MistralForCausalLM", 0, 0},
    [FAM_QWEN2] = {"qwen2", "Qwen2ForCausalLM", 1, 0},
    [FAM_GEMMA] = {"gemma", "GemmaForCausalLM", 0, 0},
    [FAM_GEMMA2] = {"gemma2", "Gemma2ForCausalLM", 0, 0},
    [FAM_QWEN3_MOE] = {"qwen3_moe", "Qwen3MoeForCausalLM", 0, 1, 0},
    [FAM_QWEN3] = {"qwen3", "Qwen3ForCausalLM", 0, 1},
    [FAM_SMOLLM3] = {"smollm3", "SmolLM3ForCausalLM", 0, 0, 1},
    [FAM_GEMMA3] = {"gemma3_text", "Gemma3ForCausalLM", 0, 1},
    [FAM_PHI3] = {"phi3", "Phi3ForCausalLM", 0, 0, 0, 1},
};

static int family_gemma(int family)
{
    return family == FAM_GEMMA || family == FAM_GEMMA2 || family == FAM_GEMMA3;
}

const char *model_family_name(int family)
{
    return family >= 0 && family < FAM_COUNT ? families[family].type : NULL;
}

int model_family_parse(const char *name)
{
    for (int f = 0; f < FAM_COUNT; f++)
        if (strcmp(name, families[f].type) == 0)
            return f;
    return -1;
}

/* rope_scaling: null, "default", or Llama 3's; anything else is refused. */
static int parse_rope_scaling(json_t *o, struct model_config *c, char *err, size_t errcap)
{
    json_t *rs = json_object_get(o, "rope_scaling");
    if (!rs || json_is_null(rs))
        return 0;
    if (!json_is_object(rs)) {
        snprintf(err, errcap, "config.json: rope_scaling must be an object or null");
        return -1;
    }
    const char *type = json_string_value(json_object_get(rs, "rope_type"));
    if (!type)
        type = json_string_value(json_object_get(rs, "type"));
    if (type && strcmp(type, "default") == 0)
        return 0;
    if (c->family == FAM_PHI3) /* longrope needs the head's size: parse_phi3 */
        return 0;
    if (c->family == FAM_GEMMA3) { /* Gemma 3: linear, on the global layers */
        double factor;
        if (!type || strcmp(type, "linear") != 0) {
            snprintf(err, errcap, "config.json: rope_scaling.rope_type \"%.40s\" is not "
                                  "supported for gemma3 (linear only)", type ? type : "(missing)");
            return -1;
        }
        if (get_num(rs, "factor", 0.0, &factor, err, errcap))
            return -1;
        if (!(factor >= 1.0 && factor <= 1024.0)) {
            snprintf(err, errcap, "config.json: rope_scaling.factor must be in [1, 1024]");
            return -1;
        }
        c->rope_factor = (float)factor;
        c->rope_linear = 1;
        return 0;
    }
    if (!type || strcmp(type, "llama3") != 0) {
        snprintf(err, errcap,
                 "config.json: rope_scaling.rope_type \"%.40s\" is not supported (llama3 only)",
                 type ? type : "(missing)");
        return -1;
    }
    double factor, low, high;
    long orig;
    if (get_num(rs, "factor", 0.0, &factor, err, errcap) ||
        get_num(rs, "low_freq_factor", 1.0, &low, err, errcap) ||
        get_num(rs, "high_freq_factor", 4.0, &high, err, errcap) ||
        get_int(rs, "original_max_position_embeddings", 8192, &orig, err, errcap))
        return -1;
    if (!(factor >= 1.0 && factor <= 1024.0) || !(low > 0.0) || !(high > low) || orig < 1 ||
        orig > (1L << 24)) {
        snprintf(err, errcap, "config.json: rope_scaling needs factor in [1, 1024], "
                              "0 < low_freq_factor < high_freq_factor and a positive "
                              "original_max_position_embeddings");
        return -1;
    }
    c->rope_factor = (float)factor;
    c->rope_low_freq = (float)low;
    c->rope_high_freq = (float)high;
    c->rope_orig_max = (int)orig;
    return 0;
}

/* The MLP activation each family computes; the key that names it. */
static int parse_activation(json_t *o, struct model_config *c, char *err, size_t errcap)
{
    int gemma = family_gemma(c->family);
    const char *key = "hidden_act";
    const char *act = json_string_value(json_object_get(o, key));
    if (gemma && json_string_value(json_object_get(o, "hidden_activation"))) {
        key = "hidden_activation";
        act = json_string_value(json_object_get(o, key));
    }
    if (!gemma) {
        if (act && strcmp(act, "silu") != 0) {
            snprintf(err, errcap,
                     "config.json: %s \"%.40s\" is not supported for %s (silu only)", key, act,
                     families[c->family].type);
            return -1;
        }
        return 0;
    }
    /* Hugging Face runs Gemma's "gelu" as the tanh approximation too. */
    if (act && strcmp(act, "gelu_pytorch_tanh") != 0 && strcmp(act, "gelu") != 0) {
        snprintf(err, errcap,
                 "config.json: %s \"%.40s\" is not supported for %s (gelu_pytorch_tanh only)",
                 key, act, families[c->family].type);
        return -1;
    }
    c->gelu = 1;
    return 0;
}

/* A per-layer switch from an interval key (default def): out[l] is 1 on
 * every key-th layer (the (key-1)-th from 0), or on all others when
 * `others`. 0, or -1 when the key is not a positive integer. */
static int every_nth(json_t *o, const char *key, long def, int n, int others, uint8_t *out,
                     char *err, size_t errcap)
{
    long every;
    if (get_int(o, key, def, &every, err, errcap))
        return -1;
    if (every < 1) {
        snprintf(err, errcap, "config.json: %s must be positive", key);
        return -1;
    }
    for (int l = 0; l < n; l++)
        out[l] = ((l + 1) % every == 0) != (others != 0);
    return 0;
}

/* Gemma 3's local layers: layer_types ("sliding_attention" or
 * "full_attention", one per layer) when present, else every
 * sliding_window_pattern-th layer (default 6) global and the rest local;
 * their rotary base rope_local_base_freq (default 10000). */
static int parse_gemma3(json_t *o, struct model_config *c, char *err, size_t errcap)
{
    double local;
    if (get_num(o, "rope_local_base_freq", 10000.0, &local, err, errcap))
        return -1;
    if (!(local > 0.0)) {
        snprintf(err, errcap, "config.json: rope_local_base_freq must be positive");
        return -1;
    }
    c->rope_local_theta = (float)local;
    json_t *types = json_object_get(o, "layer_types");
    if (types && !json_is_null(types)) {
        if (!json_is_array(types) || json_array_size(types) != (size_t)c->n_layers)
            goto bad_types;
        for (int l = 0; l < c->n_layers; l++) {
            const char *t = json_string_value(json_array_get(types, (size_t)l));
            if (!t || (strcmp(t, "sliding_attention") != 0 && strcmp(t, "full_attention") != 0))
                goto bad_types;
            c->swa[l] = strcmp(t, "sliding_attention") == 0;
        }
    } else if (every_nth(o, "sliding_window_pattern", 6, c->n_layers, 1, c->swa, err, errcap)) {
        return -1;
    }
    for (int l = 0; l < c->n_layers; l++)
        if (c->swa[l] && c->sliding_window < 1) {
            snprintf(err, errcap, "config.json: gemma3 has sliding-window layers and needs a "
                                  "positive sliding_window");
            return -1;
        }
    return 0;
bad_types:
    snprintf(err, errcap,
             "config.json: layer_types must list \"sliding_attention\" or \"full_attention\" "
             "for each of the %d layers", c->n_layers);
    return -1;
}

/* Gemma's switches, and Gemma 2's and 3's soft-capping and query scalar. */
static int parse_gemma(json_t *o, struct model_config *c, char *err, size_t errcap)
{
    json_t *tie = json_object_get(o, "tie_word_embeddings");
    if (json_is_false(tie)) {
        snprintf(err, errcap, "config.json: tie_word_embeddings false is not supported for %s "
                              "(its head is the embedding)", families[c->family].type);
        return -1;
    }
    c->tied = 1;
    c->norm_plus_one = 1;
    c->embed_scale = 1;
    if (c->family == FAM_GEMMA)
        return 0;
    double acap, fcap, qs;
    if (get_num(o, "attn_logit_softcapping", 0.0, &acap, err, errcap) ||
        get_num(o, "final_logit_softcapping", 0.0, &fcap, err, errcap) ||
        get_num(o, "query_pre_attn_scalar", c->head_dim, &qs, err, errcap))
        return -1;
    if (acap < 0.0 || fcap < 0.0 || !(qs > 0.0)) {
        snprintf(err, errcap, "config.json: attn_logit_softcapping and final_logit_softcapping "
                              "must be positive or null, query_pre_attn_scalar positive");
        return -1;
    }
    c->post_norms = 1;
    c->attn_softcap = (float)acap;
    c->final_softcap = (float)fcap;
    c->query_scalar = (float)qs;
    if (c->family == FAM_GEMMA2) /* every other layer, the first local */
        for (int l = 0; c->sliding_window > 0 && l < c->n_layers; l++)
            c->swa[l] = l % 2 == 0;
    return c->family == FAM_GEMMA3 ? parse_gemma3(o, c, err, errcap) : 0;
}

/* SmolLM3's layers without rotary positions: no_rope_layers lists 1 (rotary)
 * or 0 (none) for each layer; without it every no_rope_layer_interval-th
 * layer (default 4) has none, as the family's config class derives it. */
static int parse_no_rope(json_t *o, struct model_config *c, char *err, size_t errcap)
{
    json_t *list = json_object_get(o, "no_rope_layers");
    if (list && !json_is_null(list)) {
        if (!json_is_array(list) || json_array_size(list) != (size_t)c->n_layers)
            goto bad_list;
        for (int l = 0; l < c->n_layers; l++) {
            json_t *v = json_array_get(list, (size_t)l);
            if (!json_is_integer(v) || (json_integer_value(v) != 0 && json_integer_value(v) != 1))
                goto bad_list;
            c->no_rope[l] = json_integer_value(v) == 0;
        }
        return 0;
    }
    return every_nth(o, "no_rope_layer_interval", 4, c->n_layers, 0, c->no_rope, err, errcap);
bad_list:
    snprintf(err, errcap,
             "config.json: no_rope_layers must list 1 (rotary) or 0 (none) for each of the %d "
             "layers", c->n_layers);
    return -1;
}

/* A JSON array of n positive numbers into out; 0, or -1 when it is not. */
static int get_factors(json_t *rs, const char *key, int n, float *out)
{
    json_t *a = json_object_get(rs, key);
    if (!json_is_array(a) || json_array_size(a) != (size_t)n)
        return -1;
    for (int i = 0; i < n; i++) {
        json_t *v = json_array_get(a, (size_t)i);
        if (!json_is_number(v) || !(json_number_value(v) > 0.0) ||
            !(json_number_value(v) < 1e9))
            return -1;
        out[i] = (float)json_number_value(v);
    }
    return 0;
}

/* Phi-3's rotary positions: partial_rotary_factor (default 1), and
 * rope_scaling null or "longrope" (also as "su", its first name) with
 * long_factor and short_factor of rot_dim/2 values each. The context is
 * capped at original_max_position_embeddings, so the short factors are
 * the ones that apply (docs/models.md); the attention factor still counts
 * the whole max_position_embeddings, as the published definition does. */
static int parse_phi3(json_t *o, struct model_config *c, char *err, size_t errcap)
{
    double prf, attn;
    if (json_is_true(json_object_get(o, "attention_bias"))) {
        snprintf(err, errcap, "config.json: attention_bias true is not supported for phi3");
        return -1;
    }
    if (get_num(o, "partial_rotary_factor", 1.0, &prf, err, errcap))
        return -1;
    c->partial_rotary = (float)prf;
    int rot = (int)(c->head_dim * prf);
    if (!(prf > 0.0 && prf <= 1.0) || rot < 2 || rot % 2 != 0) {
        snprintf(err, errcap, "config.json: partial_rotary_factor %g must be in (0, 1] and "
                              "leave an even number (at least 2) of rotary dims of head_dim %d",
                 prf, c->head_dim);
        return -1;
    }
    json_t *rs = json_object_get(o, "rope_scaling");
    if (!rs || json_is_null(rs))
        return 0;
    const char *type = json_string_value(json_object_get(rs, "rope_type"));
    if (!type)
        type = json_string_value(json_object_get(rs, "type"));
    if (type && strcmp(type, "default") == 0)
        return 0;
    if (!type || (strcmp(type, "longrope") != 0 && strcmp(type, "su") != 0)) {
        snprintf(err, errcap, "config.json: rope_scaling.rope_type \"%.40s\" is not supported "
                              "for phi3 (longrope only)", type ? type : "(missing)");
        return -1;
    }
    int n = rot / 2;
    if (n > MODEL_MAX_ROPE_FACTORS || get_factors(rs, "long_factor", n, c->rope_long)) {
        snprintf(err, errcap, "config.json: rope_scaling.long_factor must list %d positive "
                              "numbers (rotary dims / 2)", n);
        return -1;
    }
    if (get_factors(rs, "short_factor", n, c->rope_short)) {
        snprintf(err, errcap, "config.json: rope_scaling.short_factor must list %d positive "
                              "numbers (rotary dims / 2)", n);
        return -1;
    }
    long orig;
    if (get_int(rs, "original_max_position_embeddings", c->max_pos_config, &orig, err,
                errcap) ||
        get_int(o, "original_max_position_embeddings", orig, &orig, err, errcap) ||
        get_num(rs, "attention_factor", 0.0, &attn, err, errcap))
        return -1;
    if (orig < 1 || orig > (1L << 24) || attn < 0.0 || attn > 1e6) {
        snprintf(err, errcap, "config.json: original_max_position_embeddings must be positive "
                              "and rope_scaling.attention_factor non-negative");
        return -1;
    }
    c->longrope = 1;
    c->n_rope_factors = n;
    c->rope_orig_max = (int)orig;
    c->rope_attn = (float)attn;
    if (c->max_pos > orig) /* past it the long factors would apply: not trained here */
        c->max_pos = (int)orig;
    return 0;
}

/* sliding_window: kept, and the context capped to it (docs/models.md). */
static int parse_window(json_t *o, struct model_config *c, char *err, size_t errcap)
{
    long win;
    if (json_is_false(json_object_get(o, "use_sliding_window")))
        return 0; /* Qwen2 states a window it does not use */
    if (get_int(o, "sliding_window", 0, &win, err, errcap))
        return -1;
    if (win < 0 || win > (1L << 24)) {
        snprintf(err, errcap, "config.json: sliding_window out of range");
        return -1;
    }
    c->sliding_window = (int)win;
    /* Gemma 2 and 3 apply the window exactly on their local layers
     * (model_layer_window); the others' windows cap the context */
    if (win > 0 && win < c->max_pos && c->family != FAM_GEMMA2 && c->family != FAM_GEMMA3)
        c->max_pos = (int)win;
    return 0;
}

/* Gemma3TextConfig's defaults, which published configs leave out (the
 * 4B's text_config states neither vocab_size nor head_dim). */
static void gemma3_defaults(json_t *o)
{
    static const struct {
        const char *key;
        double v;
    } def[] = {
        {"vocab_size", 262208},       {"hidden_size", 2304},
        {"intermediate_size", 9216},  {"num_hidden_layers", 26},
        {"num_attention_heads", 8},   {"num_key_value_heads", 4},
        {"head_dim", 256},            {"max_position_embeddings", 131072},
        {"rope_theta", 1000000.0},    {"query_pre_attn_scalar", 256},
        {"sliding_window", 4096},     {"rms_norm_eps", 1e-6},
    };
    for (size_t i = 0; i < sizeof def / sizeof def[0]; i++)
        if (!json_object_get(o, def[i].key))
            json_object_set_new(o, def[i].key,
                                def[i].v == (double)(long)def[i].v && def[i].v >= 1.0 &&
                                        strcmp(def[i].key, "rope_theta") != 0
                                    ? json_integer((json_int_t)def[i].v)
                                    : json_real(def[i].v));
}

/* A "gemma3" (image and text) config: its text model, text_config, read
 * as gemma3_text (the start and end tokens from the outer config where
 * text_config has none). A new reference, or NULL with a reason. */
static json_t *gemma3_text_config(json_t *o, char *err, size_t errcap)
{
    json_t *t = json_object_get(o, "text_config");
    if (!json_is_object(t)) {
        snprintf(err, errcap, "config.json: model_type \"gemma3\" needs a text_config object");
        return NULL;
    }
    t = json_deep_copy(t);
    if (!t) {
        snprintf(err, errcap, "out of memory");
        return NULL;
    }
    static const char *const outer[] = {"bos_token_id", "eos_token_id", "tie_word_embeddings"};
    for (size_t i = 0; i < 3; i++)
        if (!json_object_get(t, outer[i]) && json_object_get(o, outer[i]))
            json_object_set(t, outer[i], json_object_get(o, outer[i]));
    json_object_set_new(t, "model_type", json_string("gemma3_text"));
    return t;
}

int model_config_parse(const char *text, struct model_config *c, char *err, size_t errcap)
{
    json_error_t je;
    json_t *o = json_loads(text, 0, &je);
    if (!o || !json_is_object(o)) {
        snprintf(err, errcap, "config.json: not a JSON object (line %d: %s)", je.line,
                 je.text);
        json_decref(o);
        return -1;
    }
    int rc = -1;
    long hidden, inter, layers, heads, kv, vocab, hd, maxpos, bos, eos;
    double eps, theta;
    memset(c, 0, sizeof *c);
    const char *type = json_string_value(json_object_get(o, "model_type"));
    if (type && strcmp(type, "gemma3") == 0) {
        json_t *t = gemma3_text_config(o, err, errcap);
        json_decref(o);
        if (!t)
            return -1;
        o = t;
        c->multimodal = 1;
        type = "gemma3_text";
    }
    c->family = type ? model_family_parse(type) : FAM_LLAMA;
    if (c->family < 0) {
        snprintf(err, errcap,
                 "config.json: model_type \"%.40s\" is not supported (llama, mistral, qwen2, "
                 "gemma, gemma2, gemma3, gemma3_text, qwen3, qwen3_moe, smollm3, phi3)",
                 type);
        goto out;
    }
    if (c->family == FAM_GEMMA3)
        gemma3_defaults(o);
    if (json_is_true(json_object_get(o, "mlp_bias"))) {
        snprintf(err, errcap, "config.json: mlp_bias true is not supported");
        goto out;
    }
    if (parse_activation(o, c, err, errcap) || parse_rope_scaling(o, c, err, errcap))
        goto out;
    if (get_int(o, "hidden_size", -2, &hidden, err, errcap) ||
        get_int(o, "intermediate_size", -2, &inter, err, errcap) ||
        get_int(o, "num_hidden_layers", -2, &layers, err, errcap) ||
        get_int(o, "num_attention_heads", -2, &heads, err, errcap) ||
        get_int(o, "vocab_size", -2, &vocab, err, errcap) ||
        get_int(o, "max_position_embeddings", 2048, &maxpos, err, errcap) ||
        get_int(o, "bos_token_id", -1, &bos, err, errcap) ||
        get_int(o, "eos_token_id", -1, &eos, err, errcap) ||
        get_num(o, "rms_norm_eps", 1e-6, &eps, err, errcap) ||
        get_num(o, "rope_theta", 10000.0, &theta, err, errcap))
        goto out;
    if (get_int(o, "num_key_value_heads", heads, &kv, err, errcap) ||
        get_int(o, "head_dim", heads > 0 ? hidden / heads : 0, &hd, err, errcap))
        goto out;
    if (hidden < 1 || hidden > MODEL_MAX_HIDDEN || heads < 1 || heads > 1024 || kv < 1 ||
        kv > 1024 || inter < 1 || inter > 8L * MODEL_MAX_HIDDEN || layers < 1 ||
        layers > MODEL_MAX_LAYERS || vocab < 2 || vocab > MODEL_MAX_VOCAB || hd < 1 ||
        hd > 1024 || maxpos < 1 || maxpos > (1L << 24)) {
        snprintf(err, errcap, "config.json: model size out of range");
        goto out;
    }
    c->hidden = (int)hidden;
    c->intermediate = (int)inter;
    c->n_layers = (int)layers;
    c->n_heads = (int)heads;
    c->n_kv_heads = (int)kv;
    c->head_dim = (int)hd;
    c->vocab = (int)vocab;
    c->max_pos = c->max_pos_config = (int)maxpos;
    c->rms_eps = (float)eps;
    c->rope_theta = (float)theta;
    c->query_scalar = (float)hd;
    c->bos_id = bos >= 0 && bos < vocab ? (int)bos : -1;
    c->eos_id = eos >= 0 && eos < vocab ? (int)eos : -1;
    /* Hugging Face's Llama default is untied; most small models tie. */
    c->tied = json_is_true(json_object_get(o, "tie_word_embeddings"));
    c->qkv_bias = json_is_true(json_object_get(o, "attention_bias")) ||
                  families[c->family].qkv_bias;
    c->qk_norm = families[c->family].qk_norm;
    if (parse_window(o, c, err, errcap) ||
        (families[c->family].no_rope_keys && parse_no_rope(o, c, err, errcap)))
        goto out;
    if (family_gemma(c->family) && parse_gemma(o, c, err, errcap))
        goto out;
    if (c->family == FAM_QWEN3_MOE && moe_config_parse(o, c, err, errcap))
        goto out;
    if (c->family == FAM_PHI3 && parse_phi3(o, c, err, errcap))
        goto out;
    rc = model_config_check(c, err, errcap);
out:
    json_decref(o);
    return rc;
}

int model_config_load(const char *path, struct model_config *c, char *err, size_t errcap)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errcap, "config.json: cannot open %s", path);
        return -1;
    }
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    int big = buf && n == (1 << 20) - 1;
    fclose(f);
    if (!buf || big) {
        free(buf);
        snprintf(err, errcap, "config.json: %s", buf ? "larger than 1 MiB" : "out of memory");
        return -1;
    }
    buf[n] = '\0';
    int rc = model_config_parse(buf, c, err, errcap);
    free(buf);
    return rc;
}

/* The shortest decimal that reads back as the same float, as a double, so
 * that 1e-5f is written 1e-05 and not 9.99999975e-06. */
static double float_short(float f)
{
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if (strtof(buf, NULL) == f)
            break;
    }
    return strtod(buf, NULL);
}

static json_t *factors_json(const float *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        json_array_append_new(a, json_real(float_short(v[i])));
    return a;
}

/* Phi-3's keys: partial_rotary_factor, and longrope's factors as the
 * published configs write them. */
static void phi3_to_json(const struct model_config *c, json_t *o)
{
    json_object_set_new(o, "partial_rotary_factor",
                        json_real(float_short(c->partial_rotary > 0.0f ? c->partial_rotary
                                                                        : 1.0f)));
    if (!c->longrope) {
        json_object_set_new(o, "rope_scaling", json_null());
        return;
    }
    json_object_set_new(o, "original_max_position_embeddings", json_integer(c->rope_orig_max));
    json_t *rs = json_object();
    json_object_set_new(rs, "type", json_string("longrope"));
    json_object_set_new(rs, "long_factor", factors_json(c->rope_long, c->n_rope_factors));
    json_object_set_new(rs, "short_factor", factors_json(c->rope_short, c->n_rope_factors));
    if (c->rope_attn > 0.0f)
        json_object_set_new(rs, "attention_factor", json_real(float_short(c->rope_attn)));
    json_object_set_new(o, "rope_scaling", rs);
}

char *model_config_to_json(const struct model_config *c)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int gemma = family_gemma(c->family);
    const char *act = c->gelu ? "gelu_pytorch_tanh" : "silu";
    json_object_set_new(o, "architectures", json_pack("[s]", families[c->family].arch));
    json_object_set_new(o, "model_type", json_string(families[c->family].type));
    json_object_set_new(o, "hidden_size", json_integer(c->hidden));
    json_object_set_new(o, "intermediate_size", json_integer(c->intermediate));
    json_object_set_new(o, "num_hidden_layers", json_integer(c->n_layers));
    json_object_set_new(o, "num_attention_heads", json_integer(c->n_heads));
    json_object_set_new(o, "num_key_value_heads", json_integer(c->n_kv_heads));
    json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    json_object_set_new(o, "vocab_size", json_integer(c->vocab));
    json_object_set_new(o, "max_position_embeddings",
                        json_integer((c->sliding_window > 0 || c->longrope) &&
                                             c->max_pos_config > c->max_pos
                                         ? c->max_pos_config
                                         : c->max_pos));
    json_object_set_new(o, "rms_norm_eps", json_real(float_short(c->rms_eps)));
    json_object_set_new(o, "rope_theta", json_real(float_short(c->rope_theta)));
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tied));
    json_object_set_new(o, "attention_bias", json_boolean(c->qkv_bias));
    json_object_set_new(o, "mlp_bias", json_false());
    json_object_set_new(o, "hidden_act", json_string(act));
    if (gemma)
        json_object_set_new(o, "hidden_activation", json_string(act));
    if (c->family == FAM_PHI3)
        phi3_to_json(c, o);
    else if (c->rope_linear)
        json_object_set_new(o, "rope_scaling",
                            json_pack("{s:s, s:f}", "rope_type", "linear", "factor",
                                      float_short(c->rope_factor)));
    else if (c->rope_factor > 0.0f)
        json_object_set_new(
            o, "rope_scaling",
            json_pack("{s:s, s:f, s:f, s:f, s:i}", "rope_type", "llama3", "factor",
                      float_short(c->rope_factor), "low_freq_factor",
                      float_short(c->rope_low_freq), "high_freq_factor",
                      float_short(c->rope_high_freq), "original_max_position_embeddings",
                      c->rope_orig_max));
    else
        json_object_set_new(o, "rope_scaling", json_null());
    if (c->sliding_window > 0)
        json_object_set_new(o, "sliding_window", json_integer(c->sliding_window));
    if (families[c->family].no_rope_keys) {
        json_t *nr = json_array();
        for (int l = 0; l < c->n_layers; l++)
            json_array_append_new(nr, json_integer(!c->no_rope[l]));
        json_object_set_new(o, "no_rope_layers", nr);
    }
    if (c->family == FAM_GEMMA3) {
        json_t *lt = json_array();
        for (int l = 0; l < c->n_layers; l++)
            json_array_append_new(lt, json_string(c->swa[l] ? "sliding_attention"
                                                            : "full_attention"));
        json_object_set_new(o, "layer_types", lt);
        json_object_set_new(o, "rope_local_base_freq",
                            json_real(float_short(c->rope_local_theta)));
    }
    if (c->family == FAM_GEMMA2 || c->family == FAM_GEMMA3) {
        json_object_set_new(o, "query_pre_attn_scalar", json_real(float_short(c->query_scalar)));
        json_object_set_new(o, "attn_logit_softcapping",
                            c->attn_softcap > 0.0f ? json_real(float_short(c->attn_softcap))
                                                   : json_null());
        json_object_set_new(o, "final_logit_softcapping",
                            c->final_softcap > 0.0f ? json_real(float_short(c->final_softcap))
                                                    : json_null());
    }
    if (c->n_experts > 0)
        moe_config_to_json(c, o);
    json_object_set_new(o, "torch_dtype", json_string("float32"));
    json_object_set_new(o, "bos_token_id", c->bos_id >= 0 ? json_integer(c->bos_id) : json_null());
    json_object_set_new(o, "eos_token_id", c->eos_id >= 0 ? json_integer(c->eos_id) : json_null());
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    json_decref(o);
    return s;
}

int model_config_shape(const char *name, int vocab, struct model_config *c)
{
    memset(c, 0, sizeof *c);
    c->family = FAM_LLAMA;
    c->rms_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->tied = 1;
    c->bos_id = c->eos_id = -1;
    if (strcmp(name, "tiny") == 0) {
        c->hidden = 64, c->n_layers = 2, c->n_heads = 4, c->n_kv_heads = 2;
        c->intermediate = 172, c->max_pos = 512;
    } else if (strcmp(name, "base") == 0) {
        /* models/alallo-base's (docs/base-model.md): the shape the
         * start-up bench measures (core/bench_speed.h) */
        c->hidden = 192, c->n_layers = 4, c->n_heads = 6, c->n_kv_heads = 3;
        c->intermediate = 512, c->max_pos = 256;
    } else if (strcmp(name, "small") == 0) {
        c->hidden = 256, c->n_layers = 6, c->n_heads = 4, c->n_kv_heads = 4;
        c->intermediate = 768, c->max_pos = 1024;
    } else if (strcmp(name, "124m") == 0) {
        if (vocab > 50257)
            return -1;
        c->hidden = 768, c->n_layers = 12, c->n_heads = 12, c->n_kv_heads = 12;
        c->intermediate = 2048, c->max_pos = 1024;
        vocab = 50257;
    } else if (strcmp(name, "1b") == 0) {
        /* Llama-3.2-1B-class, for the GPU bench: 1.24B parameters */
        if (vocab > 128256)
            return -1;
        c->hidden = 2048, c->n_layers = 16, c->n_heads = 32, c->n_kv_heads = 8;
        c->intermediate = 8192, c->max_pos = 8192;
        c->rope_theta = 500000.0f;
        vocab = 128256;
    } else {
        return -1;
    }
    c->vocab = vocab;
    c->head_dim = c->hidden / c->n_heads;
    c->query_scalar = (float)c->head_dim;
    c->max_pos_config = c->max_pos;
    return 0;
}

int model_config_family_tiny(int family, int vocab, struct model_config *c)
{
    if (family < 0 || family >= FAM_COUNT || model_config_shape("tiny", vocab, c))
        return -1;
    c->family = family;
    switch (family) {
    case FAM_LLAMA: /* Llama 3.2: tied, theta 5e5, the llama3 ramp (scaled to the tiny context) */
        c->rope_theta = 500000.0f;
        c->rope_factor = 8.0f, c->rope_low_freq = 1.0f, c->rope_high_freq = 4.0f;
        c->rope_orig_max = 64;
        break;
    case FAM_MISTRAL: /* untied, a window longer than the context */
        c->tied = 0;
        c->sliding_window = 4096;
        break;
    case FAM_QWEN2: /* q/k/v biases, theta 1e6 */
        c->qkv_bias = 1;
        c->rope_theta = 1000000.0f;
        c->rms_eps = 1e-6f;
        break;
    case FAM_SMOLLM3: /* 4 layers: the last has no rotary positions, as every 4th of 3B's */
        c->n_layers = 4;
        c->no_rope[3] = 1;
        c->rope_theta = 5000000.0f;
        c->rms_eps = 1e-6f;
        break;
    case FAM_QWEN3: /* q/k norms, no biases, heads wider than hidden/heads (as 0.6B's) */
        c->qk_norm = 1;
        c->head_dim = 32;
        c->rope_theta = 1000000.0f;
        c->rms_eps = 1e-6f;
        break;
    case FAM_QWEN3_MOE: /* below */
        break;
    case FAM_PHI3: /* Phi-4-mini's layout scaled down: 3/4 of each head rotates, longrope
                    * with a context of 512 of 4096 (its 4096 of 131072) */
        c->partial_rotary = 0.75f;
        c->longrope = 1;
        c->rope_orig_max = 512;
        c->max_pos_config = 4096;
        model_config_longrope_factors(c);
        break;
    default: /* Gemma: head_dim apart from hidden/heads, GeGLU, (1 + w) norms */
        c->gelu = c->norm_plus_one = c->embed_scale = 1;
        c->head_dim = 32;
        c->n_kv_heads = family == FAM_GEMMA2 ? 2 : 1;
        c->rms_eps = 1e-6f;
        break;
    }
    if (family == FAM_QWEN3_MOE) { /* Qwen3-30B-A3B's layout, scaled down */
        c->qk_norm = 1; /* Qwen3's attention */
        c->head_dim = 32;
        c->rope_theta = 1000000.0f;
        c->rms_eps = 1e-6f;
        c->n_experts = 8, c->n_experts_used = 2, c->moe_intermediate = 48;
        c->norm_topk_prob = 1;
        c->router_aux_coef = 0.001f;
        c->sparse_step = 1;
    }
    if (family == FAM_GEMMA2) {
        c->post_norms = 1;
        c->attn_softcap = 50.0f;
        c->final_softcap = 30.0f;
        c->sliding_window = 4096;
        for (int l = 0; l < c->n_layers; l++)
            c->swa[l] = l % 2 == 0;
    }
    if (family == FAM_GEMMA3) { /* 1B's layout scaled down: a window shorter than the
                                 * tests' sequences, every 3rd layer global, 4B's scaling */
        c->post_norms = c->qk_norm = 1;
        c->n_layers = 3;
        c->sliding_window = 16;
        for (int l = 0; l < c->n_layers; l++)
            c->swa[l] = (l + 1) % 3 != 0;
        c->rope_theta = 1000000.0f;
        c->rope_local_theta = 10000.0f;
        c->rope_factor = 8.0f;
        c->rope_linear = 1;
    }
    c->query_scalar = (float)c->head_dim;
    return 0;
}

void model_config_longrope_factors(struct model_config *c)
{
    c->n_rope_factors = model_rot_dim(c) / 2;
    for (int i = 0; i < MODEL_MAX_ROPE_FACTORS; i++) {
        int on = i < c->n_rope_factors;
        c->rope_short[i] = on ? 1.0f + 0.125f * (float)(i % 8) : 0.0f;
        c->rope_long[i] = on ? 1.0f + 1.5f * (float)(i % 16) : 0.0f;
    }
}

int model_rot_dim(const struct model_config *c)
{
    return c->partial_rotary > 0.0f ? (int)(c->head_dim * (double)c->partial_rotary)
                                    : c->head_dim;
}

float model_rope_attn_factor(const struct model_config *c)
{
    if (!c->longrope)
        return 1.0f;
    if (c->rope_attn > 0.0f)
        return c->rope_attn;
    double s = (double)c->max_pos_config / (double)c->rope_orig_max;
    return s > 1.0 ? (float)sqrt(1.0 + log(s) / log((double)c->rope_orig_max)) : 1.0f;
}

void model_rope_freq_div(const struct model_config *c, float *div)
{
    int half = model_rot_dim(c) / 2;
    for (int i = 0; i < half; i++) {
        div[i] = c->rope_linear ? c->rope_factor : 1.0f;
        if (c->longrope) {
            div[i] = c->rope_short[i];
            continue;
        }
        if (!(c->rope_factor > 0.0f) || c->rope_linear)
            continue;
        /* Llama 3: long wavelengths slow down by `factor`, short ones stay,
         * and the band between ramps smoothly (in the inverse frequency). */
        double inv = pow((double)c->rope_theta, -2.0 * i / (double)(2 * half));
        double wavelen = 2.0 * M_PI / inv;
        double lo_wl = c->rope_orig_max / (double)c->rope_low_freq;
        double hi_wl = c->rope_orig_max / (double)c->rope_high_freq;
        if (wavelen < hi_wl)
            continue;
        if (wavelen > lo_wl) {
            div[i] = c->rope_factor;
            continue;
        }
        double smooth = (c->rope_orig_max / wavelen - c->rope_low_freq) /
                        (double)(c->rope_high_freq - c->rope_low_freq);
        double scaled = (1.0 - smooth) / c->rope_factor + smooth; /* times inv */
        div[i] = (float)(1.0 / scaled);
    }
}

static void proj_shape(const struct model_config *c, int p, int *out, int *in)
{
    int qd = c->n_heads * c->head_dim, kd = c->n_kv_heads * c->head_dim;
    switch (p) {
    case PROJ_Q: *out = qd; *in = c->hidden; break;
    case PROJ_K:
    case PROJ_V: *out = kd; *in = c->hidden; break;
    case PROJ_O: *out = c->hidden; *in = qd; break;
    case PROJ_GATE:
    case PROJ_UP: *out = c->intermediate; *in = c->hidden; break;
    default: *out = c->hidden; *in = c->intermediate; break;
    }
}

/* The parameters: every expert's (active 0) or those of the k a token
 * goes through (active 1). */
static size_t config_params(const struct model_config *c, int active)
{
    size_t n = (size_t)c->vocab * c->hidden * (c->tied ? 1 : 2) + c->hidden;
    for (int l = 0; l < c->n_layers; l++) {
        int sparse = moe_layer_sparse(c, l);
        for (int p = 0; p < PROJ_COUNT; p++) {
            int o, i;
            proj_shape(c, p, &o, &i);
            if (!sparse || p <= PROJ_O)
                n += (size_t)o * i;
        }
        if (sparse)
            n += moe_layer_params(c, active);
    }
    n += (size_t)c->n_layers * (c->post_norms ? 4 : 2) * c->hidden;
    if (c->qkv_bias)
        n += (size_t)c->n_layers * (size_t)(c->n_heads + 2 * c->n_kv_heads) * c->head_dim;
    if (c->qk_norm)
        n += (size_t)c->n_layers * 2 * c->head_dim;
    return n;
}

size_t model_config_params(const struct model_config *c)
{
    return config_params(c, 0);
}

size_t model_config_active_params(const struct model_config *c)
{
    return config_params(c, 1);
}

/* ---------------------------------------------------------------- layout */

/* Offsets into the storage blocks, counted in a first pass (base pointers
 * NULL) and turned into pointers in the second. */
struct layout {
    float *train, *grad, *fixed;
    uint16_t *bf;
    size_t ntrain, nfixed, nbf;
    int pass; /* 0 count, 1 assign */
};

static float *take_train(struct layout *y, size_t n, float **grad)
{
    size_t off = y->ntrain;
    y->ntrain += n;
    if (!y->pass) {
        *grad = NULL;
        return NULL;
    }
    *grad = y->grad + off;
    return y->train + off;
}

static float *take_fixed(struct layout *y, size_t n)
{
    size_t off = y->nfixed;
    y->nfixed += n;
    return y->pass ? y->fixed + off : NULL;
}

/* Places a matrix weight (rows,cols) by the model's mode. */
static void place_matrix(struct model *m, struct layout *y, struct linear *l, int rows,
                         int cols)
{
    size_t n = (size_t)rows * cols;
    l->out = rows;
    l->in = cols;
    if (m->opts.full) {
        l->kind = WK_F32;
        l->w = take_train(y, n, &l->dw);
        return;
    }
    l->kind = m->opts.base_kind;
    l->dw = NULL;
    if (l->kind == WK_F32) {
        l->w = take_fixed(y, n);
    } else if (l->kind == WK_BF16) {
        size_t off = y->nbf;
        y->nbf += n;
        l->wb = y->pass ? y->bf + off : NULL;
    }
}

static void place_vector(struct model *m, struct layout *y, float **v, float **dv, size_t n)
{
    if (m->opts.full) {
        *v = take_train(y, n, dv);
    } else {
        *v = take_fixed(y, n);
        *dv = NULL;
    }
}

static void layout(struct model *m, struct layout *y)
{
    const struct model_config *c = &m->cfg;
    /* Matrices first (weight decay covers them), then vectors. */
    place_matrix(m, y, &m->embed, c->vocab, c->hidden);
    for (int l = 0; l < c->n_layers; l++) {
        struct moe_layer *x = m->layers[l].moe;
        for (int p = 0; p < PROJ_COUNT; p++) {
            int o, i;
            proj_shape(c, p, &o, &i);
            if (!x || p <= PROJ_O)
                place_matrix(m, y, &m->layers[l].proj[p], o, i);
        }
        if (x) { /* the router, then each expert's gate, up and down */
            place_matrix(m, y, &x->router, c->n_experts, c->hidden);
            for (int e = 0; e < c->n_experts; e++)
                for (int p = 0; p < MOE_PROJ_COUNT; p++)
                    place_matrix(m, y, &x->experts[e * MOE_PROJ_COUNT + p],
                                 p == MOE_DOWN ? c->hidden : c->moe_intermediate,
                                 p == MOE_DOWN ? c->moe_intermediate : c->hidden);
        }
    }
    if (!c->tied)
        place_matrix(m, y, &m->head, c->vocab, c->hidden);
    if (!m->opts.full && m->opts.lora_r > 0) {
        int r = m->opts.lora_r;
        for (int l = 0; l < c->n_layers; l++) {
            for (int p = 0; p < PROJ_COUNT; p++) {
                struct linear *ln = &m->layers[l].proj[p];
                if (!(m->opts.lora_targets & (1u << p)) || ln->out == 0)
                    continue; /* not a target, or a sparse layer's empty MLP */
                ln->r = r;
                ln->scale = m->opts.lora_alpha / (float)r;
                ln->la = take_train(y, (size_t)r * ln->in, &ln->dla);
                ln->lb = take_train(y, (size_t)ln->out * r, &ln->dlb);
            }
        }
    }
    if (y->pass)
        m->n_decay = y->ntrain;
    for (int l = 0; l < c->n_layers; l++) {
        struct model_layer *L = &m->layers[l];
        place_vector(m, y, &L->ln1, &L->dln1, (size_t)c->hidden);
        place_vector(m, y, &L->ln2, &L->dln2, (size_t)c->hidden);
        if (c->post_norms) {
            place_vector(m, y, &L->ln3, &L->dln3, (size_t)c->hidden);
            place_vector(m, y, &L->ln4, &L->dln4, (size_t)c->hidden);
        }
        if (c->qkv_bias)
            for (int p = PROJ_Q; p <= PROJ_V; p++)
                place_vector(m, y, &L->proj[p].bias, &L->proj[p].dbias,
                             (size_t)L->proj[p].out);
        if (c->qk_norm) {
            place_vector(m, y, &L->qn, &L->dqn, (size_t)c->head_dim);
            place_vector(m, y, &L->kn, &L->dkn, (size_t)c->head_dim);
        }
    }
    place_vector(m, y, &m->norm_f, &m->dnorm_f, (size_t)c->hidden);
}

static void free_nf4(struct linear *l, void *ctx)
{
    (void)ctx;
    nf4_free(l->wq);
}

static void add_nf4_bytes(struct linear *l, void *ctx)
{
    if (l->wq)
        *(size_t *)ctx += nf4_bytes(l->wq);
}

static void add_tensor(struct model *m, const char *name, int rows, int cols, int is1d,
                       struct linear *lin, float *vec)
{
    struct model_tensor *t = &m->tensors[m->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows;
    t->cols = cols;
    t->is1d = is1d;
    t->lin = lin;
    t->part[0] = lin;
    t->n_parts = lin ? 1 : 0;
    t->vec = vec;
    t->offset = vec && m->cfg.norm_plus_one && strstr(name, "norm") ? 1.0f : 0.0f;
}

/* Phi-3's fused tensors: qkv_proj (rows of q, k, v) at PROJ_Q, gate_up_proj
 * (rows of gate, up) at PROJ_GATE. */
static void add_fused(struct model *m, int l, int p)
{
    struct model_layer *L = &m->layers[l];
    char name[96];
    int n = p == PROJ_Q ? 3 : 2, rows = 0;
    snprintf(name, sizeof name, "model.layers.%d.%s.weight", l,
             p == PROJ_Q ? "self_attn.qkv_proj" : "mlp.gate_up_proj");
    for (int k = 0; k < n; k++)
        rows += L->proj[p + k].out;
    add_tensor(m, name, rows, L->proj[p].in, 0, &L->proj[p], NULL);
    struct model_tensor *t = &m->tensors[m->n_tensors - 1];
    for (int k = 0; k < n; k++)
        t->part[k] = &L->proj[p + k];
    t->n_parts = n;
}

static int build_tensor_table(struct model *m)
{
    const struct model_config *c = &m->cfg;
    int cap = 3 + c->n_layers * (16 + 1 + MOE_PROJ_COUNT * c->n_experts);
    m->tensors = calloc((size_t)cap, sizeof *m->tensors);
    if (!m->tensors)
        return -1;
    char name[96];
    add_tensor(m, "model.embed_tokens.weight", c->vocab, c->hidden, 0, &m->embed, NULL);
    for (int l = 0; l < c->n_layers; l++) {
        struct model_layer *L = &m->layers[l];
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
        add_tensor(m, name, 1, c->hidden, 1, NULL, L->ln1);
        for (int p = 0; p < PROJ_COUNT; p++) {
            const char *part = p <= PROJ_O ? "self_attn" : "mlp";
            struct linear *ln = &L->proj[p];
            if (ln->out == 0)
                continue; /* a sparse layer's MLP: its experts, below */
            if (families[c->family].fused && (p == PROJ_Q || p == PROJ_GATE)) {
                add_fused(m, l, p);
                continue;
            }
            if (families[c->family].fused && (p == PROJ_K || p == PROJ_V || p == PROJ_UP))
                continue; /* in the fused tensor */
            snprintf(name, sizeof name, "model.layers.%d.%s.%s.weight", l, part, proj_names[p]);
            add_tensor(m, name, ln->out, ln->in, 0, ln, NULL);
            if (ln->bias) {
                snprintf(name, sizeof name, "model.layers.%d.%s.%s.bias", l, part,
                         proj_names[p]);
                add_tensor(m, name, 1, ln->out, 1, NULL, ln->bias);
            }
            if (p == PROJ_K && L->qn) {
                snprintf(name, sizeof name, "model.layers.%d.self_attn.q_norm.weight", l);
                add_tensor(m, name, 1, c->head_dim, 1, NULL, L->qn);
                snprintf(name, sizeof name, "model.layers.%d.self_attn.k_norm.weight", l);
                add_tensor(m, name, 1, c->head_dim, 1, NULL, L->kn);
            }
            if (p == PROJ_O && c->post_norms) {
                /* Gemma 2 names its norm after attention as Llama names the
                 * one before the MLP */
                snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight",
                         l);
                add_tensor(m, name, 1, c->hidden, 1, NULL, L->ln3);
                snprintf(name, sizeof name, "model.layers.%d.pre_feedforward_layernorm.weight",
                         l);
                add_tensor(m, name, 1, c->hidden, 1, NULL, L->ln2);
            } else if (p == PROJ_O) {
                snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight",
                         l);
                add_tensor(m, name, 1, c->hidden, 1, NULL, L->ln2);
            }
        }
        if (c->post_norms) {
            snprintf(name, sizeof name, "model.layers.%d.post_feedforward_layernorm.weight", l);
            add_tensor(m, name, 1, c->hidden, 1, NULL, L->ln4);
        }
        if (L->moe) {
            snprintf(name, sizeof name, "model.layers.%d.mlp.gate.weight", l);
            add_tensor(m, name, c->n_experts, c->hidden, 0, &L->moe->router, NULL);
            for (int e = 0; e < c->n_experts; e++)
                for (int p = 0; p < MOE_PROJ_COUNT; p++) {
                    struct linear *ln = &L->moe->experts[e * MOE_PROJ_COUNT + p];
                    snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%d.%s.weight", l,
                             e, proj_names[PROJ_GATE + p]);
                    add_tensor(m, name, ln->out, ln->in, 0, ln, NULL);
                }
        }
    }
    add_tensor(m, "model.norm.weight", 1, c->hidden, 1, NULL, m->norm_f);
    if (!c->tied)
        add_tensor(m, "lm_head.weight", c->vocab, c->hidden, 0, &m->head, NULL);
    return 0;
}

int model_rope_ensure(struct model *m, int len)
{
    if (len <= m->rope_len)
        return 0;
    int rot = model_rot_dim(&m->cfg);
    size_t n = (size_t)len * (rot / 2);
    float *cs = malloc(n * sizeof(float)), *sn = malloc(n * sizeof(float));
    float *div = malloc(sizeof(float) * (size_t)(rot / 2));
    if (!cs || !sn || !div) {
        free(cs);
        free(sn);
        free(div);
        return -1;
    }
    model_rope_freq_div(&m->cfg, div);
    ops_rope_tables(cs, sn, len, rot, m->cfg.rope_theta, div);
    free(div);
    float attn = model_rope_attn_factor(&m->cfg);
    for (size_t i = 0; attn != 1.0f && i < n; i++) {
        cs[i] *= attn;
        sn[i] *= attn;
    }
    if (m->cfg.rope_local_theta > 0.0f) { /* the local layers': their base, unscaled */
        float *lc = malloc(n * sizeof(float)), *ls = malloc(n * sizeof(float));
        if (!lc || !ls) {
            free(lc);
            free(ls);
            free(cs);
            free(sn);
            return -1;
        }
        ops_rope_tables(lc, ls, len, rot, m->cfg.rope_local_theta, NULL);
        free(m->rope_cos_local);
        free(m->rope_sin_local);
        m->rope_cos_local = lc;
        m->rope_sin_local = ls;
    }
    free(m->rope_cos);
    free(m->rope_sin);
    m->rope_cos = cs;
    m->rope_sin = sn;
    m->rope_len = len;
    return 0;
}

void model_layer_rope(const struct model *m, int l, const float **cos_t, const float **sin_t)
{
    int local = m->rope_cos_local && m->cfg.swa[l];
    *cos_t = local ? m->rope_cos_local : m->rope_cos;
    *sin_t = local ? m->rope_sin_local : m->rope_sin;
}

int model_layer_window(const struct model_config *c, int l)
{
    return c->swa[l] ? c->sliding_window : 0;
}

struct model *model_create(const struct model_config *cfg, const struct model_opts *opts,
                           char *err, size_t errcap)
{
    if (model_config_check(cfg, err, errcap))
        return NULL;
    if (!opts->full && opts->lora_r > 0 &&
        (opts->lora_r > 1024 || !(opts->lora_alpha > 0.0f) || !opts->lora_targets)) {
        snprintf(err, errcap, "lora: rank must be 1..1024, alpha positive, targets not empty");
        return NULL;
    }
    struct model *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errcap, "out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    m->opts = *opts;
    m->layers = calloc((size_t)cfg->n_layers, sizeof *m->layers);
    if (!m->layers)
        goto oom;
    for (int l = 0; l < cfg->n_layers; l++) {
        if (!moe_layer_sparse(cfg, l))
            continue;
        struct moe_layer *x = calloc(1, sizeof *x);
        m->layers[l].moe = x;
        if (!x || !(x->experts = calloc((size_t)cfg->n_experts * MOE_PROJ_COUNT,
                                        sizeof *x->experts)))
            goto oom;
    }
    struct layout y = {0};
    layout(m, &y);
    m->n_train = y.ntrain;
    m->n_fixed = y.nfixed;
    m->n_bf = y.nbf;
    /* calloc: zero pages stay untouched until written, and gradients must
     * start at zero anyway; on huge pages where the kernel allows. */
    if (m->n_train) {
        m->train = bigmem_calloc(m->n_train, sizeof(float));
        m->grad = bigmem_calloc(m->n_train, sizeof(float));
        if (!m->train || !m->grad)
            goto oom;
    }
    if (m->n_fixed && !(m->fixed = bigmem_calloc(m->n_fixed, sizeof(float))))
        goto oom;
    if (m->n_bf && !(m->bf = bigmem_calloc(m->n_bf, sizeof(uint16_t))))
        goto oom;
    struct layout y2 = {m->train, m->grad, m->fixed, m->bf, 0, 0, 0, 1};
    layout(m, &y2);
    if (cfg->tied)
        m->head = m->embed;
    if (build_tensor_table(m))
        goto oom;
    for (int l = 0; l < cfg->n_layers; l++) {
        struct model_layer *L = &m->layers[l];
        for (int c = 0; c < cfg->hidden; c++) {
            L->ln1[c] = L->ln2[c] = 1.0f;
            if (L->ln3)
                L->ln3[c] = L->ln4[c] = 1.0f;
        }
        for (int d = 0; L->qn && d < cfg->head_dim; d++)
            L->qn[d] = L->kn[d] = 1.0f;
    }
    for (int c = 0; c < cfg->hidden; c++)
        m->norm_f[c] = 1.0f;
    if (model_rope_ensure(m, cfg->max_pos < 4096 ? cfg->max_pos : 4096))
        goto oom;
    return m;
oom:
    snprintf(err, errcap, "out of memory laying out the model");
    model_free(m);
    return NULL;
}

void model_free(struct model *m)
{
    if (!m)
        return;
    if (m->layers)
        for (int l = 0; l < m->cfg.n_layers; l++)
            for (int p = 0; p < PROJ_COUNT; p++)
                nf4_free(m->layers[l].proj[p].wq);
    nf4_free(m->embed.wq);
    if (!m->cfg.tied)
        nf4_free(m->head.wq);
    moe_each_linear(m, free_nf4, NULL);
    for (int l = 0; m->layers && l < m->cfg.n_layers; l++)
        if (m->layers[l].moe) {
            free(m->layers[l].moe->experts);
            free(m->layers[l].moe);
        }
    free(m->layers);
    free(m->train);
    free(m->grad);
    free(m->fixed);
    free(m->bf);
    free(m->tensors);
    free(m->rope_cos);
    free(m->rope_sin);
    free(m->rope_cos_local);
    free(m->rope_sin_local);
    free(m);
}

int model_tensor_find(const struct model *m, const char *name)
{
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0)
            return i;
    return -1;
}

/* Values per fill chunk: whole NF4 groups, bounded scratch. */
#define FILL_CHUNK (64 * NF4_GROUP_VALUES)

/* A part of a fused tensor reads the tensor's values from its first row. */
struct part_fill {
    model_fill_fn fn;
    void *ctx;
    size_t base;
};

static void fill_part(void *ctx, size_t start, size_t count, float *out)
{
    struct part_fill *p = ctx;
    p->fn(p->ctx, p->base + start, count, out);
}

static int fill_linear(struct model *m, struct linear *l, model_fill_fn fn, void *ctx);

int model_fill_tensor(struct model *m, int i, model_fill_fn fn, void *ctx)
{
    struct model_tensor *t = &m->tensors[i];
    size_t n = (size_t)t->rows * t->cols;
    if (t->vec) {
        fn(ctx, 0, n, t->vec);
        for (size_t j = 0; t->offset != 0.0f && j < n; j++)
            t->vec[j] += t->offset;
        return 0;
    }
    if (t->n_parts == 1)
        return fill_linear(m, t->lin, fn, ctx);
    struct part_fill pf = {fn, ctx, 0};
    for (int k = 0; k < t->n_parts; k++) {
        if (fill_linear(m, t->part[k], fill_part, &pf))
            return -1;
        pf.base += (size_t)t->part[k]->out * t->part[k]->in;
    }
    return 0;
}

/* Fills one linear's weight (out x in values from fn) in its storage kind. */
static int fill_linear(struct model *m, struct linear *l, model_fill_fn fn, void *ctx)
{
    size_t n = (size_t)l->out * l->in;
    if (l->kind == WK_F32) {
        fn(ctx, 0, n, l->w);
        return 0;
    }
    if (l->kind == WK_NF4) {
        nf4_free(l->wq);
        l->wq = nf4_create(n);
        if (!l->wq)
            return -1;
        if (m->cfg.tied && l == &m->embed)
            m->head.wq = l->wq;
    }
    float *buf = malloc(sizeof(float) * (n < FILL_CHUNK ? n : FILL_CHUNK));
    if (!buf)
        return -1;
    for (size_t s = 0; s < n; s += FILL_CHUNK) {
        size_t k = n - s < FILL_CHUNK ? n - s : FILL_CHUNK;
        fn(ctx, s, k, buf);
        if (l->kind == WK_BF16) {
#pragma omp parallel for schedule(static)
            for (size_t j = 0; j < k; j++)
                l->wb[s + j] = linear_f32_to_bf16(buf[j]);
        } else {
            nf4_encode(l->wq, s, buf, k);
        }
    }
    free(buf);
    return 0;
}

static void fill_copy(void *ctx, size_t start, size_t count, float *out)
{
    memcpy(out, (const float *)ctx + start, count * sizeof(float));
}

int model_set_tensor(struct model *m, int i, const float *values)
{
    return model_fill_tensor(m, i, fill_copy, (void *)values);
}

void model_get_tensor(const struct model *m, int i, float *out)
{
    const struct model_tensor *t = &m->tensors[i];
    if (t->vec) {
        for (int j = 0; j < t->cols; j++)
            out[j] = t->vec[j] - t->offset;
        return;
    }
    for (int k = 0; k < t->n_parts; k++) {
        linear_merged_weight(t->part[k], out);
        out += (size_t)t->part[k]->out * t->part[k]->in;
    }
}

struct init_ctx {
    uint64_t seed;
    float std;
};

/* Values per random stream: each block of the tensor draws from its own
 * stream, so blocks fill in parallel and the values do not depend on the
 * thread count or the fill chunking. */
#define INIT_BLOCK 65536

static void fill_normal(void *ctx, size_t start, size_t count, float *out)
{
    const struct init_ctx *c = ctx;
    size_t b0 = start / INIT_BLOCK, b1 = (start + count + INIT_BLOCK - 1) / INIT_BLOCK;
#pragma omp parallel for schedule(static)
    for (size_t b = b0; b < b1; b++) {
        struct rng r;
        rng_seed(&r, rng_derive(c->seed, b));
        size_t s = b * INIT_BLOCK, e = s + INIT_BLOCK;
        /* Values come in pairs from the block's stream; a fill range that
         * starts or ends inside a block (never, in practice: fill chunks
         * are multiples of INIT_BLOCK) draws and drops the rest. */
        for (size_t i = s; i < e && i < start + count; i += 2) {
            float v[2];
            rng_normal2(&r, v);
            for (int k = 0; k < 2; k++)
                if (i + k >= start && i + k < start + count && i + k < e)
                    out[i + k - start] = c->std * v[k];
        }
    }
}

static void fill_const(void *ctx, size_t start, size_t count, float *out)
{
    (void)start;
    for (size_t j = 0; j < count; j++)
        out[j] = ((struct init_ctx *)ctx)->std;
}

int model_init_random(struct model *m, uint64_t seed)
{
    return model_init_random_std(m, seed, 0.02f, 0.0f);
}

/* fill_normal's values around a centre: the norm scales' jitter. */
struct jitter_ctx {
    struct init_ctx normal;
    float centre;
};

static void fill_jitter(void *ctx, size_t start, size_t count, float *out)
{
    struct jitter_ctx *j = ctx;
    fill_normal(&j->normal, start, count, out);
    for (size_t i = 0; i < count; i++)
        out[i] += j->centre;
}

int model_init_random_std(struct model *m, uint64_t seed, float std, float norm_std)
{
    float resid = std / sqrtf(2.0f * (float)m->cfg.n_layers);
    for (int i = 0; i < m->n_tensors; i++) {
        struct model_tensor *t = &m->tensors[i];
        struct init_ctx c = {rng_derive(seed, (uint64_t)i), 0.0f};
        int rc;
        if (t->vec) {
            /* Norm scales one (a Gemma norm's stored weight zero), biases zero;
             * norm scales jittered by norm_std where asked. */
            int norm = strstr(t->name, "norm") != NULL;
            c.std = norm ? 1.0f - t->offset : 0.0f;
            struct jitter_ctx j = {{c.seed, norm_std}, c.std};
            if (norm && norm_std > 0.0f)
                rc = model_fill_tensor(m, i, fill_jitter, &j);
            else
                rc = model_fill_tensor(m, i, fill_const, &c);
        } else {
            c.std = strstr(t->name, "o_proj") || strstr(t->name, "down_proj") ? resid : std;
            rc = model_fill_tensor(m, i, fill_normal, &c);
        }
        if (rc)
            return -1;
    }
    return 0;
}

void model_lora_init(struct model *m, uint64_t seed)
{
    for (int l = 0; l < m->cfg.n_layers; l++) {
        for (int p = 0; p < PROJ_COUNT; p++) {
            struct linear *ln = &m->layers[l].proj[p];
            if (ln->r == 0)
                continue;
            struct rng r;
            rng_seed(&r, rng_derive(seed, 1000003ULL * (uint64_t)l + (uint64_t)p));
            float bound = 1.0f / sqrtf((float)ln->in);
            for (size_t j = 0; j < (size_t)ln->r * ln->in; j++)
                ln->la[j] = (2.0f * rng_uniform(&r) - 1.0f) * bound;
            memset(ln->lb, 0, sizeof(float) * (size_t)ln->out * ln->r);
        }
    }
}

size_t model_param_bytes(const struct model *m)
{
    size_t b = (m->n_train * 2 + m->n_fixed) * sizeof(float) + m->n_bf * sizeof(uint16_t);
    if (m->embed.wq)
        b += nf4_bytes(m->embed.wq);
    if (!m->cfg.tied && m->head.wq)
        b += nf4_bytes(m->head.wq);
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int p = 0; p < PROJ_COUNT; p++)
            if (m->layers[l].proj[p].wq)
                b += nf4_bytes(m->layers[l].proj[p].wq);
    moe_each_linear((struct model *)m, add_nf4_bytes, &b);
    return b;
}

struct dw_call {
    void (*fn)(struct linear *, void *);
    void *ctx;
};

static void each_dw_one(struct linear *l, void *ctx)
{
    struct dw_call *c = ctx;
    if (l->dw)
        c->fn(l, c->ctx);
}

/* Calls fn on every linear of the model that has a weight gradient. */
static void each_dw(struct model *m, void (*fn)(struct linear *, void *), void *ctx)
{
    if (m->embed.dw)
        fn(&m->embed, ctx);
    if (!m->cfg.tied && m->head.dw) /* a tied head is a copy of embed */
        fn(&m->head, ctx);
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int p = 0; p < PROJ_COUNT; p++)
            if (m->layers[l].proj[p].dw)
                fn(&m->layers[l].proj[p], ctx);
    struct dw_call call = {fn, ctx};
    moe_each_linear(m, each_dw_one, &call);
}

/* Marks a matrix gradient fresh and counts the floats it covers. */
static void mark_fresh(struct linear *l, void *ctx)
{
    size_t *covered = ctx;
    l->dw_fresh = 1;
    *covered += (size_t)l->out * l->in;
}

static void touch(struct linear *l, void *ctx)
{
    (void)ctx;
    linear_grad_touch(l);
}

void model_grad_begin(struct model *m)
{
    size_t covered = 0;
    each_dw(m, mark_fresh, &covered);
    /* In full fine-tuning the weight matrices are exactly [0, n_decay) of
     * the block (the layout puts matrices first), so only the vectors after
     * them need zeros now. */
    assert(covered == 0 || covered == m->n_decay);
    if (covered != m->n_decay) {
        model_grad_settle(m);
        ops_zero(m->grad, m->n_train);
        return;
    }
    ops_zero(m->grad + m->n_decay, m->n_train - m->n_decay);
}

void model_grad_settle(struct model *m)
{
    each_dw(m, touch, NULL);
}
