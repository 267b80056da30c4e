/* test_model.c - the whole decoder: config.json parsing, layout, and the
 * gradient of the loss with respect to every kind of parameter, checked by
 * finite differences on a tiny configuration (full fine-tuning, untied head
 * with q/k/v bias; and LoRA over a frozen bf16 and an NF4 base). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "test_ops_gradcheck.h"
#include "train/formats/checkpoint.h"
#include "train/model/model.h"
#include "train/formats/modelio.h"
#include "train/formats/safetensors.h"

static const char *tiny_json =
    "{\"model_type\":\"llama\",\"hidden_size\":16,\"intermediate_size\":24,"
    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
    "\"vocab_size\":23,\"rms_norm_eps\":1e-5,\"rope_theta\":10000.0,"
    "\"max_position_embeddings\":64,\"tie_word_embeddings\":false,"
    "\"attention_bias\":true,\"hidden_act\":\"silu\",\"eos_token_id\":[2,3]}";

static void config_parse(void **state)
{
    (void)state;
    struct model_config c;
    char err[200];
    assert_int_equal(model_config_parse(tiny_json, &c, err, sizeof err), 0);
    assert_int_equal(c.hidden, 16);
    assert_int_equal(c.head_dim, 4);
    assert_int_equal(c.n_kv_heads, 2);
    assert_int_equal(c.tied, 0);
    assert_int_equal(c.qkv_bias, 1);
    assert_int_equal(c.eos_id, 2);
    assert_int_equal(c.bos_id, -1);
    /* round trip through our own writer */
    char *j = model_config_to_json(&c);
    struct model_config c2;
    assert_int_equal(model_config_parse(j, &c2, err, sizeof err), 0);
    free(j);
    assert_memory_equal(&c, &c2, sizeof c);
    /* errors name the problem */
    assert_int_equal(model_config_parse("{\"hidden_size\":16}", &c, err, sizeof err), -1);
    assert_string_equal(err, "config.json: missing field \"intermediate_size\"");
    assert_int_equal(model_config_parse("{\"hidden_size\":16,\"intermediate_size\":8,"
                                        "\"num_hidden_layers\":1,\"num_attention_heads\":3,"
                                        "\"num_key_value_heads\":2,\"vocab_size\":9}",
                                        &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "num_key_value_heads"));
    assert_int_equal(model_config_parse("{\"hidden_act\":\"gelu\"}", &c, err, sizeof err), -1);
    assert_int_equal(model_config_parse("[", &c, err, sizeof err), -1);
    /* parameter count: embed+head 2*23*16, per layer q 16*16 k,v 8*16 o 16*16,
     * gate/up 24*16, down 16*24, norms 2*16, biases 16+8+8; final norm 16 */
    size_t per_layer = 256 + 128 + 128 + 256 + 3 * 384 + 32 + 32;
    assert_int_equal(model_config_params(&c2), 2 * 23 * 16 + 2 * per_layer + 16);
}

/* Qwen3-MoE's published keys (Qwen3-30B-A3B's layout at a small size):
 * the experts, which layers are sparse, the tensors they bring, total and
 * active parameters, the round trip and the refusals. */
static void qwen3_moe_config(void **state)
{
    (void)state;
    const char *json =
        "{\"model_type\":\"qwen3_moe\",\"hidden_size\":16,\"intermediate_size\":40,"
        "\"num_hidden_layers\":4,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
        "\"head_dim\":8,\"vocab_size\":23,\"num_experts\":6,\"num_experts_per_tok\":2,"
        "\"moe_intermediate_size\":12,\"norm_topk_prob\":true,"
        "\"router_aux_loss_coef\":0.001,\"decoder_sparse_step\":1,"
        "\"mlp_only_layers\":[2],\"tie_word_embeddings\":true}";
    struct model_config c;
    char err[300];
    assert_int_equal(model_config_parse(json, &c, err, sizeof err), 0);
    assert_int_equal(c.family, FAM_QWEN3_MOE);
    assert_int_equal(c.n_experts, 6);
    assert_int_equal(c.n_experts_used, 2);
    assert_int_equal(c.moe_intermediate, 12);
    assert_int_equal(c.norm_topk_prob, 1);
    assert_true(fabsf(c.router_aux_coef - 0.001f) < 1e-9f);
    /* per layer: attention q,o 32*16 each, k,v 16*16 each, norms 2*16,
     * Qwen3's q/k norms 2*8; the
     * dense layer 2 an MLP of 3*40*16; the sparse ones a router 6*16 and
     * 6 (or, active, 2) experts of 3*12*16 */
    size_t attn = 2 * 32 * 16 + 2 * 16 * 16 + 2 * 16 + 2 * 8, dense = 3 * 40 * 16;
    size_t outside = 23 * 16 + 16;
    assert_int_equal(model_config_params(&c),
                     outside + 4 * attn + dense + 3 * (6 * 16 + 6 * 3 * 12 * 16));
    assert_int_equal(model_config_active_params(&c),
                     outside + 4 * attn + dense + 3 * (6 * 16 + 2 * 3 * 12 * 16));
    char *j = model_config_to_json(&c);
    struct model_config c2;
    assert_int_equal(model_config_parse(j, &c2, err, sizeof err), 0);
    free(j);
    assert_memory_equal(&c, &c2, sizeof c);
    struct model_opts o = {.full = 1};
    struct model *m = model_create(&c, &o, err, sizeof err);
    assert_non_null(m);
    assert_true(model_tensor_find(m, "model.layers.0.mlp.gate.weight") >= 0);
    assert_true(model_tensor_find(m, "model.layers.3.mlp.experts.5.down_proj.weight") >= 0);
    assert_true(model_tensor_find(m, "model.layers.0.mlp.gate_proj.weight") < 0);
    assert_true(model_tensor_find(m, "model.layers.2.mlp.gate_proj.weight") >= 0);
    assert_true(model_tensor_find(m, "model.layers.2.mlp.gate.weight") < 0);
    assert_int_equal(m->n_train, model_config_params(&c));
    model_free(m);
    /* refusals name the keys */
    char bad[1200];
    snprintf(bad, sizeof bad, "%.*s,\"num_experts_per_tok\":7}", (int)strlen(json) - 1, json);
    assert_int_equal(model_config_parse(bad, &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "num_experts_per_tok"));
    snprintf(bad, sizeof bad, "%.*s,\"mlp_only_layers\":[\"x\"]}", (int)strlen(json) - 1, json);
    assert_int_equal(model_config_parse(bad, &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "mlp_only_layers"));
}

/* The named shapes the benches use: 124m and the Llama-3.2-1B-class 1b
 * have the parameter counts of their namesakes (tied heads). */
static void named_shapes(void **state)
{
    (void)state;
    struct model_config c;
    assert_int_equal(model_config_shape("124m", 0, &c), 0);
    assert_int_equal(c.vocab, 50257);
    assert_int_equal(model_config_shape("1b", 0, &c), 0);
    assert_int_equal(c.hidden, 2048);
    assert_int_equal(c.n_layers, 16);
    assert_int_equal(c.n_heads, 32);
    assert_int_equal(c.n_kv_heads, 8);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.intermediate, 8192);
    assert_int_equal(c.vocab, 128256);
    assert_true(c.tied);
    /* 128256 * 2048 + 16 * (q,o 2048^2 + k,v 512 * 2048 + 3 * 8192 * 2048
     * + 2 norms) + final norm */
    assert_int_equal(model_config_params(&c), 1235814400);
    assert_int_equal(model_config_shape("1b", 128257, &c), -1);
    assert_int_equal(model_config_shape("7b", 0, &c), -1);
    /* base is the built-in model's shape, which the start-up bench
     * measures: the same products as models/alallo-base/config.json */
    struct model_config shipped;
    char err[256];
    assert_int_equal(model_config_load(ALALLO_SOURCE_DIR "/models/alallo-base/config.json",
                                       &shipped, err, sizeof err),
                     0);
    assert_int_equal(model_config_shape("base", 4096, &c), 0);
    assert_int_equal(c.hidden, shipped.hidden);
    assert_int_equal(c.n_layers, shipped.n_layers);
    assert_int_equal(c.n_heads, shipped.n_heads);
    assert_int_equal(c.n_kv_heads, shipped.n_kv_heads);
    assert_int_equal(c.head_dim, shipped.head_dim);
    assert_int_equal(c.intermediate, shipped.intermediate);
    assert_int_equal(c.vocab, shipped.vocab);
    assert_int_equal(c.max_pos, shipped.max_pos);
    assert_int_equal(c.tied, shipped.tied);
    assert_int_equal(model_config_params(&c), model_config_params(&shipped));
}

enum { B = 2, T = 7 };
/* finite-difference step for adapters (Gemma 2 bends more: smaller) */
static float lora_step = 3e-3f;

struct mctx {
    struct model *m;
    struct model_acts *a;
    int32_t ids[B * T];
    uint8_t mask[B * T];
};

static double mloss(void *p)
{
    struct mctx *c = p;
    size_t nt;
    return model_forward_backward(c->m, c->a, c->ids, c->mask, B, T, 1.0f, 0, &nt);
}

static void make_batch(struct mctx *c, int vocab)
{
    struct rng r;
    rng_seed(&r, 77);
    for (int i = 0; i < B * T; i++) {
        c->ids[i] = (int32_t)rng_below(&r, (uint64_t)vocab);
        c->mask[i] = (i % T) >= 2; /* a prompt of two tokens, then targets */
    }
    c->mask[T - 1] = 0;            /* a padded end */
}

static void check_all(struct mctx *c, double atol)
{
    struct model *m = c->m;
    memset(m->grad, 0, m->n_train * sizeof(float));
    size_t nt;
    double l0 = model_forward_backward(m, c->a, c->ids, c->mask, B, T, 1.0f, 1, &nt);
    assert_int_equal(nt, model_count_targets(c->mask, B, T));
    assert_true(l0 > 0.0);
    /* the forward-only loss is the same number */
    assert_true(mloss(c) == l0);
    float *grad = malloc(m->n_train * sizeof(float));
    memcpy(grad, m->grad, m->n_train * sizeof(float));
    /* Check each tensor separately so that a failure names it. */
    int bad = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const struct model_tensor *t = &m->tensors[i];
        float *p = t->vec ? t->vec : t->lin->w;
        if (!m->opts.full)
            break;
        size_t off = (size_t)(p - m->train), n = (size_t)t->rows * t->cols;
        bad += gc_check(t->name, mloss, c, p, n, grad + off, 20, 1e-2, atol, 3e-2);
    }
    for (int l = 0; l < m->cfg.n_layers && !m->opts.full; l++) {
        for (int p = 0; p < PROJ_COUNT; p++) {
            struct linear *ln = &m->layers[l].proj[p];
            char name[64];
            snprintf(name, sizeof name, "layer %d %s A", l, model_proj_name(p));
            bad += gc_check(name, mloss, c, ln->la, (size_t)ln->r * ln->in,
                            grad + (ln->la - m->train), 10, lora_step, atol, 3e-2);
            snprintf(name, sizeof name, "layer %d %s B", l, model_proj_name(p));
            bad += gc_check(name, mloss, c, ln->lb, (size_t)ln->r * ln->out,
                            grad + (ln->lb - m->train), 10, lora_step, atol, 3e-2);
        }
    }
    free(grad);
    assert_int_equal(bad, 0);
}

/* Activations, a batch, every gradient checked; frees the model. */
static void check_model(struct mctx *c, int vocab)
{
    c->a = model_acts_create(c->m, B, T);
    assert_non_null(c->a);
    make_batch(c, vocab);
    check_all(c, 1e-3);
    model_acts_free(c->a);
    model_free(c->m);
}

static void full_model_gradients(void **state)
{
    (void)state;
    struct model_config cfg;
    char err[200];
    assert_int_equal(model_config_parse(tiny_json, &cfg, err, sizeof err), 0);
    struct model_opts o = {.full = 1};
    struct mctx c;
    c.m = model_create(&cfg, &o, err, sizeof err);
    assert_non_null(c.m);
    assert_int_equal(c.m->n_train, model_config_params(&cfg));
    assert_int_equal(model_init_random(c.m, 5), 0);
    /* matrices larger than the init (std 0.1) so that every path carries
     * signal; norm weights moved off one so that their gradient matters */
    for (size_t i = 0; i < c.m->n_decay; i++)
        c.m->train[i] *= 5.0f;
    struct rng r;
    rng_seed(&r, 9);
    for (size_t i = c.m->n_decay; i < c.m->n_train; i++)
        c.m->train[i] += 0.2f * rng_normal(&r);
    c.a = model_acts_create(c.m, B, T);
    assert_non_null(c.a);
    make_batch(&c, cfg.vocab);
    check_all(&c, 1e-3);
    model_acts_free(c.a);
    model_free(c.m);
}

/* model_grad_begin (fresh matrices written by their first product) gives
 * the very bits of zeroing the block first, tied and untied, with stale
 * values left in the block from an earlier step. */
static void fresh_gradients_match_zeroed(void **state)
{
    (void)state;
    for (int tied = 0; tied <= 1; tied++) {
        struct model_config cfg;
        char err[200];
        assert_int_equal(model_config_parse(tiny_json, &cfg, err, sizeof err), 0);
        cfg.tied = tied;
        struct model_opts o = {.full = 1};
        struct mctx c;
        c.m = model_create(&cfg, &o, err, sizeof err);
        assert_non_null(c.m);
        assert_int_equal(model_init_random(c.m, 5), 0);
        c.a = model_acts_create(c.m, B, T);
        assert_non_null(c.a);
        make_batch(&c, cfg.vocab);
        size_t n = c.m->n_train, nt;
        float *want = malloc(n * sizeof *want);
        assert_non_null(want);
        memset(c.m->grad, 0, n * sizeof(float));
        model_forward_backward(c.m, c.a, c.ids, c.mask, B, T, 0.25f, 1, &nt);
        memcpy(want, c.m->grad, n * sizeof(float));
        for (size_t i = 0; i < n; i++) /* stale values from a step before */
            c.m->grad[i] = 1.0f + (float)(i % 7);
        model_grad_begin(c.m);
        model_forward_backward(c.m, c.a, c.ids, c.mask, B, T, 0.25f, 1, &nt);
        assert_memory_equal(want, c.m->grad, n * sizeof(float));
        /* a pass with nothing to learn from settles every fresh matrix */
        for (size_t i = 0; i < n; i++)
            c.m->grad[i] = 3.0f;
        model_grad_begin(c.m);
        uint8_t none[B * T];
        memset(none, 0, sizeof none);
        model_forward_backward(c.m, c.a, c.ids, none, B, T, 0.25f, 1, &nt);
        assert_int_equal(nt, 0);
        for (size_t i = 0; i < n; i++)
            assert_true(c.m->grad[i] == 0.0f);
        free(want);
        model_acts_free(c.a);
        model_free(c.m);
    }
}

/* Random base and adapters, B non-zero so that gradients reach A. */
static void init_adapters(struct model *m)
{
    assert_int_equal(model_init_random(m, 6), 0);
    model_lora_init(m, 7);
    struct rng r;
    rng_seed(&r, 8);
    for (size_t i = 0; i < m->n_train; i++)
        m->train[i] += 0.1f * rng_normal(&r);
}

static void lora_model_gradients(enum wkind kind)
{
    struct model_config cfg;
    char err[200];
    assert_int_equal(model_config_parse(tiny_json, &cfg, err, sizeof err), 0);
    cfg.tied = 1;
    struct model_opts o = {.full = 0, .base_kind = kind, .lora_r = 2, .lora_alpha = 4.0f,
                           .lora_targets = MODEL_ALL_PROJ};
    struct mctx c;
    c.m = model_create(&cfg, &o, err, sizeof err);
    assert_non_null(c.m);
    assert_int_equal(c.m->n_train, 2 * (2 * 16 + 16 * 2) + 2 * 2 * (2 * 16 + 8 * 2) +
                                       2 * (2 * 16 + 16 * 2) + 2 * 2 * (2 * 16 + 24 * 2) +
                                       2 * (2 * 24 + 16 * 2));
    /* a larger init than training uses, so that the base carries signal */
    struct model_config big = cfg;
    (void)big;
    init_adapters(c.m);
    check_model(&c, cfg.vocab);
}

/* LoRA dropout through the whole model with its masks fixed (one seed):
 * every adapter's gradient by finite differences, the forward pass changed
 * by the masks, the same seed giving the same loss, and p = 0 giving
 * exactly the loss without dropout. */
static void lora_dropout_gradients(void **state)
{
    (void)state;
    struct model_config cfg;
    char err[200];
    assert_int_equal(model_config_parse(tiny_json, &cfg, err, sizeof err), 0);
    struct model_opts o = {.base_kind = WK_F32, .lora_r = 2, .lora_alpha = 4.0f,
                           .lora_targets = MODEL_ALL_PROJ};
    struct mctx c;
    c.m = model_create(&cfg, &o, err, sizeof err);
    assert_non_null(c.m);
    init_adapters(c.m);
    c.a = model_acts_create(c.m, B, T);
    assert_non_null(c.a);
    make_batch(&c, cfg.vocab);
    double plain = mloss(&c);
    assert_int_equal(model_acts_dropout(c.a, c.m, 0.0f, 42), 0);
    assert_true(mloss(&c) == plain);
    assert_int_equal(model_acts_dropout(c.a, c.m, 0.4f, 42), 0);
    double dropped = mloss(&c);
    assert_true(dropped != plain);
    assert_true(mloss(&c) == dropped);
    assert_int_equal(model_acts_dropout(c.a, c.m, 0.4f, 43), 0);
    assert_true(mloss(&c) != dropped); /* another step, other masks */
    assert_int_equal(model_acts_dropout(c.a, c.m, 1.0f, 43), -1);
    assert_int_equal(model_acts_dropout(c.a, c.m, 0.4f, 42), 0);
    check_all(&c, 1e-3);
    model_acts_free(c.a);
    model_free(c.m);
}

/* The families' switches on the tiny config (docs/models.md): every
 * parameter's gradient (full) and every adapter's (LoRA over an fp32 base)
 * by finite differences, with the switches' paths carrying signal: Llama
 * 3's frequency ramp across the three bands at T = 7, Gemma's GeGLU,
 * embedding scale and head_dim apart from hidden/heads, Gemma 2's post
 * norms, a score scale apart from head_dim and caps where tanh bends, and
 * Qwen3's per-head q/k norms with heads wider than hidden/heads. */
static void family_switches(struct model_config *cfg, int family)
{
    cfg->family = family;
    if (family == FAM_SMOLLM3) { /* the second layer without rotary positions */
        cfg->no_rope[1] = 1;
        return;
    }
    if (family == FAM_QWEN3) {
        cfg->qk_norm = 1;
        cfg->head_dim = 6;
        cfg->query_scalar = 6.0f;
        return;
    }
    if (family == FAM_LLAMA) {
        cfg->rope_factor = 8.0f, cfg->rope_low_freq = 1.0f, cfg->rope_high_freq = 4.0f;
        cfg->rope_orig_max = 8;
        return;
    }
    if (family == FAM_PHI3) { /* 6 of 8 dims of each head turn, longrope's scales */
        cfg->qkv_bias = 0;
        cfg->head_dim = 8;
        cfg->query_scalar = 8.0f;
        cfg->partial_rotary = 0.75f;
        cfg->longrope = 1;
        cfg->rope_orig_max = cfg->max_pos;
        cfg->max_pos_config = 16 * cfg->max_pos;
        model_config_longrope_factors(cfg);
        cfg->rope_short[1] = 3.0f;
        return;
    }
    cfg->gelu = cfg->norm_plus_one = cfg->embed_scale = 1;
    cfg->head_dim = 6;
    cfg->query_scalar = 6.0f;
    if (family == FAM_GEMMA2) {
        cfg->post_norms = 1;
        cfg->attn_softcap = 0.5f;
        cfg->final_softcap = 0.7f;
        cfg->query_scalar = 3.0f;
    }
    if (family == FAM_GEMMA3) { /* layer 0 local with a window of 3 (T = 7), layer 1 global */
        cfg->post_norms = cfg->qk_norm = 1;
        cfg->query_scalar = 3.0f;
        cfg->sliding_window = 3;
        cfg->swa[0] = 1;
        cfg->rope_local_theta = 10.0f;
        cfg->rope_factor = 4.0f;
        cfg->rope_linear = 1;
    }
}

static void family_gradients(int family, int full)
{
    struct model_config cfg;
    char err[200];
    assert_int_equal(model_config_parse(tiny_json, &cfg, err, sizeof err), 0);
    family_switches(&cfg, family);
    struct model_opts o = {.full = full, .base_kind = WK_F32, .lora_r = 2, .lora_alpha = 4.0f,
                           .lora_targets = MODEL_ALL_PROJ};
    struct mctx c;
    c.m = model_create(&cfg, &o, err, sizeof err);
    assert_non_null(c.m);
    assert_int_equal(model_init_random(c.m, 5), 0);
    struct rng r;
    rng_seed(&r, 9);
    if (full) {
        /* Gemma 2's norms after small blocks bend sharply: finite
         * differences need the smaller weights there */
        float grow = family == FAM_GEMMA2 ? 2.0f : 5.0f;
        for (size_t i = 0; i < c.m->n_decay; i++)
            c.m->train[i] *= grow;
        for (size_t i = c.m->n_decay; i < c.m->n_train; i++)
            c.m->train[i] += 0.2f * rng_normal(&r);
    } else {
        model_lora_init(c.m, 7);
        for (size_t i = 0; i < c.m->n_train; i++)
            c.m->train[i] += 0.1f * rng_normal(&r);
    }
    check_model(&c, cfg.vocab);
}

static void llama3_gradients(void **state)
{
    (void)state;
    family_gradients(FAM_LLAMA, 1);
    family_gradients(FAM_LLAMA, 0);
}

static void gemma_gradients(void **state)
{
    (void)state;
    family_gradients(FAM_GEMMA, 1);
    family_gradients(FAM_GEMMA, 0);
}

static void gemma2_gradients(void **state)
{
    (void)state;
    family_gradients(FAM_GEMMA2, 1);
    lora_step = 1e-3f;
    family_gradients(FAM_GEMMA2, 0);
    lora_step = 3e-3f;
}

static void gemma3_gradients(void **state)
{
    (void)state;
    family_gradients(FAM_GEMMA3, 1);
    lora_step = 1e-3f;
    family_gradients(FAM_GEMMA3, 0);
    lora_step = 3e-3f;
}

static void smollm3_gradients(void **state)
{
    (void)state;
    family_gradients(FAM_SMOLLM3, 1);
    family_gradients(FAM_SMOLLM3, 0);
}

static void phi3_gradients(void **state)
{
    (void)state;
    family_gradients(FAM_PHI3, 1);
    family_gradients(FAM_PHI3, 0);
}

/* Phi-3's config: the rotary share of each head, longrope's factors (the
 * short ones divide, the attention factor counts the whole context, the
 * context stops at original_max_position_embeddings); bad values refused
 * by name. */
static void phi3_config(void **state)
{
    (void)state;
    struct model_config c;
    char err[300], j[1200];
    const char *shape = "\"model_type\":\"phi3\",\"hidden_size\":16,\"intermediate_size\":24,"
                        "\"num_hidden_layers\":1,\"num_attention_heads\":2,"
                        "\"num_key_value_heads\":1,\"vocab_size\":23,"
                        "\"max_position_embeddings\":131072";
    snprintf(j, sizeof j, "{%s,\"partial_rotary_factor\":0.75,"
             "\"original_max_position_embeddings\":4096,\"rope_scaling\":{\"type\":\"longrope\","
             "\"long_factor\":[1,2,3],\"short_factor\":[1.5,2.5,4]}}", shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), 0);
    assert_true(c.family == FAM_PHI3 && model_rot_dim(&c) == 6 && c.longrope &&
                c.n_rope_factors == 3 && c.rope_orig_max == 4096 && c.max_pos == 4096 &&
                c.max_pos_config == 131072 && !c.qkv_bias);
    float div[4];
    model_rope_freq_div(&c, div);
    assert_true(div[0] == 1.5f && div[1] == 2.5f && div[2] == 4.0f);
    /* Phi-4-mini's: sqrt(1 + ln 32 / ln 4096) */
    assert_float_equal(model_rope_attn_factor(&c), sqrtf(1.0f + logf(32.0f) / logf(4096.0f)),
                       1e-6);
    snprintf(j, sizeof j, "{%s,\"partial_rotary_factor\":0.75,"
             "\"original_max_position_embeddings\":4096,\"rope_scaling\":{\"type\":\"longrope\","
             "\"long_factor\":[1,2,3],\"short_factor\":[1,1,1],\"attention_factor\":1.25}}", shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), 0);
    assert_true(model_rope_attn_factor(&c) == 1.25f);
    /* a fused checkpoint's tensors, one per projection group */
    struct model_opts o = {.full = 1};
    struct model *m = model_create(&c, &o, err, sizeof err);
    assert_non_null(m);
    assert_int_equal(m->n_tensors, 1 + 6 + 1 + 1); /* untied: lm_head too */
    int i = model_tensor_find(m, "model.layers.0.self_attn.qkv_proj.weight");
    assert_true(i > 0 && m->tensors[i].rows == 16 + 2 * 8 && m->tensors[i].n_parts == 3);
    assert_true(model_tensor_find(m, "model.layers.0.mlp.gate_up_proj.weight") > 0);
    assert_int_equal(model_tensor_find(m, "model.layers.0.self_attn.q_proj.weight"), -1);
    model_free(m);
    /* refusals name the key */
    snprintf(j, sizeof j, "{%s,\"partial_rotary_factor\":0.375}", shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), -1);
    assert_string_equal(err, "config.json: partial_rotary_factor 0.375 must be in (0, 1] and leave "
                             "an even number (at least 2) of rotary dims of head_dim 8");
    snprintf(j, sizeof j, "{%s,\"partial_rotary_factor\":1.5}", shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "partial_rotary_factor 1.5 must be in (0, 1]"));
    snprintf(j, sizeof j, "{%s,\"partial_rotary_factor\":0.75,\"rope_scaling\":"
             "{\"type\":\"longrope\",\"long_factor\":[1,2,3,4],\"short_factor\":[1,1,1]}}", shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), -1);
    assert_string_equal(err, "config.json: rope_scaling.long_factor must list 3 positive "
                             "numbers (rotary dims / 2)");
    snprintf(j, sizeof j, "{%s,\"partial_rotary_factor\":0.75,\"rope_scaling\":"
             "{\"type\":\"longrope\",\"long_factor\":[1,2,3],\"short_factor\":[1,0,1]}}", shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), -1);
    assert_string_equal(err, "config.json: rope_scaling.short_factor must list 3 positive "
                             "numbers (rotary dims / 2)");
    snprintf(j, sizeof j, "{%s,\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4}}", shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), -1);
    assert_string_equal(err, "config.json: rope_scaling.rope_type \"yarn\" is not supported for "
                             "phi3 (longrope only)");
    snprintf(j, sizeof j, "{%s,\"attention_bias\":true}", shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), -1);
    assert_string_equal(err, "config.json: attention_bias true is not supported for phi3");
}

/* The whole file at path (malloc'd), its size in *len; NULL if unreadable. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    *len = buf ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    return buf;
}

/* A fused checkpoint splits on load and fuses again on the way out: the
 * folder written back is the folder read, byte for byte; each part holds
 * its rows (q first, then k and v; gate, then up). */
static void phi3_fused_round_trip(void **state)
{
    (void)state;
    struct model_config cfg;
    char err[512], dir[128], dir2[160], a[256], b[256];
    assert_int_equal(model_config_family_tiny(FAM_PHI3, 40, &cfg), 0);
    struct model_opts o = {.full = 1};
    struct model *m = model_create(&cfg, &o, err, sizeof err);
    assert_non_null(m);
    assert_int_equal(model_init_random(m, 21), 0);
    snprintf(dir, sizeof dir, "/tmp/alallo-test-phi3-%ld", (long)getpid());
    snprintf(dir2, sizeof dir2, "%s-again", dir);
    assert_int_equal(modelio_save_merged(m, dir, NULL, err, sizeof err), 0);
    struct model *r = modelio_load(dir, &o, err, sizeof err);
    assert_non_null(r);
    int i = model_tensor_find(r, "model.layers.1.self_attn.qkv_proj.weight");
    assert_true(i > 0);
    size_t n = (size_t)r->tensors[i].rows * r->tensors[i].cols;
    float *v = malloc(n * sizeof(float));
    model_get_tensor(m, i, v);
    const struct model_layer *L = &r->layers[1];
    size_t qn = (size_t)L->proj[PROJ_Q].out * L->proj[PROJ_Q].in;
    size_t kn = (size_t)L->proj[PROJ_K].out * L->proj[PROJ_K].in;
    assert_memory_equal(L->proj[PROJ_Q].w, v, qn * sizeof(float));
    assert_memory_equal(L->proj[PROJ_K].w, v + qn, kn * sizeof(float));
    assert_memory_equal(L->proj[PROJ_V].w, v + qn + kn, kn * sizeof(float));
    free(v);
    i = model_tensor_find(r, "model.layers.1.mlp.gate_up_proj.weight");
    n = (size_t)r->tensors[i].rows * r->tensors[i].cols;
    v = malloc(n * sizeof(float));
    model_get_tensor(m, i, v);
    assert_memory_equal(L->proj[PROJ_GATE].w, v, n / 2 * sizeof(float));
    assert_memory_equal(L->proj[PROJ_UP].w, v + n / 2, n / 2 * sizeof(float));
    free(v);
    assert_int_equal(modelio_save_merged(r, dir2, NULL, err, sizeof err), 0);
    for (int k = 0; k < 2; k++) {
        const char *f = k ? "config.json" : "model.safetensors";
        snprintf(a, sizeof a, "%s/%s", dir, f);
        snprintf(b, sizeof b, "%s/%s", dir2, f);
        size_t la, lb;
        char *x = slurp(a, &la), *y = slurp(b, &lb);
        assert_non_null(x);
        assert_non_null(y);
        assert_int_equal(la, lb);
        assert_memory_equal(x, y, la);
        free(x);
        free(y);
    }
    model_free(r);
    model_free(m);
    fs_remove_tree(dir);
    fs_remove_tree(dir2);
}

/* A LoRA model held in bf16 saves merged onto its base folder's published
 * fp32 weights, not onto its bf16 copy: each tensor (fused ones too) is
 * the published tensor plus scale B A, as an fp32 model with the same
 * adapters merges it; a base folder missing a tensor is refused by name
 * before anything is written. */
static void lora_saves_merged_onto_published(void **state)
{
    (void)state;
    struct model_config cfg;
    char err[512], dir[128], out[160], bad[160], path[256];
    assert_int_equal(model_config_family_tiny(FAM_PHI3, 40, &cfg), 0);
    struct model_opts fo = {.full = 1};
    struct model *base = model_create(&cfg, &fo, err, sizeof err);
    assert_non_null(base);
    assert_int_equal(model_init_random(base, 31), 0);
    snprintf(dir, sizeof dir, "/tmp/alallo-test-onto-%ld", (long)getpid());
    snprintf(out, sizeof out, "%s-merged", dir);
    snprintf(bad, sizeof bad, "%s-bad", dir);
    assert_int_equal(modelio_save_merged(base, dir, NULL, err, sizeof err), 0);
    model_free(base);
    struct model_opts lo = {0, WK_BF16, 4, 8.0f, MODEL_ALL_PROJ};
    struct model *m = modelio_load(dir, &lo, err, sizeof err);
    assert_non_null(m);
    lo.base_kind = WK_F32;
    struct model *ref = modelio_load(dir, &lo, err, sizeof err);
    assert_non_null(ref);
    assert_int_equal(m->n_train, ref->n_train);
    for (size_t k = 0; k < m->n_train; k++)
        m->train[k] = ref->train[k] = 0.01f * (float)((int)(k % 17) - 8);
    assert_int_equal(modelio_save_merged_onto(m, dir, out, err, sizeof err), 0);
    struct model *got = modelio_load(out, &fo, err, sizeof err);
    assert_non_null(got);
    size_t rounded = 0; /* values where the bf16 copy's merge differs */
    for (int i = 0; i < m->n_tensors; i++) {
        size_t n = (size_t)m->tensors[i].rows * m->tensors[i].cols;
        float *want = malloc(n * sizeof(float)), *have = malloc(n * sizeof(float));
        float *held = malloc(n * sizeof(float));
        model_get_tensor(ref, i, want);
        model_get_tensor(got, i, have);
        model_get_tensor(m, i, held);
        for (size_t k = 0; k < n; k++) {
            assert_float_equal(have[k], want[k], 1e-6f * (1.0f + fabsf(want[k])));
            rounded += held[k] != want[k];
        }
        free(want);
        free(have);
        free(held);
    }
    assert_true(rounded > 0);
    /* a base folder without one of the model's tensors */
    struct model *one = modelio_load(dir, &fo, err, sizeof err);
    assert_non_null(one);
    int q = model_tensor_find(one, "model.layers.1.self_attn.qkv_proj.weight");
    assert_true(q > 0);
    snprintf(one->tensors[q].name, sizeof one->tensors[q].name, "model.layers.1.qkv.weight");
    assert_int_equal(modelio_save_merged(one, bad, NULL, err, sizeof err), 0);
    model_free(one);
    fs_remove_tree(out);
    assert_int_equal(modelio_save_merged_onto(m, bad, out, err, sizeof err), -1);
    snprintf(path, sizeof path, "%s: missing tensor model.layers.1.self_attn.qkv_proj.weight",
             bad);
    assert_string_equal(err, path);
    assert_int_equal(access(out, F_OK), -1);
    model_free(got);
    model_free(ref);
    model_free(m);
    fs_remove_tree(dir);
    fs_remove_tree(bad);
}

static void qwen3_gradients(void **state)
{
    (void)state;
    family_gradients(FAM_QWEN3, 1);
    family_gradients(FAM_QWEN3, 0);
}

/* What each family reads from config.json, and what is refused naming the
 * key (Llama 3.1's rope_scaling is read, not refused). */
static void family_configs(void **state)
{
    (void)state;
    struct model_config c, c2;
    char err[300], j[1200];
    const char *shape = "\"hidden_size\":16,\"intermediate_size\":24,\"num_hidden_layers\":1,"
                        "\"num_attention_heads\":4,\"vocab_size\":23,"
                        "\"max_position_embeddings\":8192";
    snprintf(j, sizeof j, "{%s,\"model_type\":\"llama\",\"rope_scaling\":{\"factor\":8.0,"
             "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
             "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"}}", shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), 0);
    assert_true(c.rope_factor == 8.0f && c.rope_orig_max == 8192);
    float div[128]; /* head_dim / 2 of the largest config below (Gemma 3 4B: 256) */
    model_rope_freq_div(&c, div); /* hd 4, theta 1e4: wavelengths 6.3 and 628 */
    assert_true(div[0] == 1.0f && div[1] == 1.0f);
    c.rope_orig_max = 200; /* 628 > 200: slowed by the factor; 6.3 < 50: kept */
    model_rope_freq_div(&c, div);
    assert_true(div[0] == 1.0f && div[1] == 8.0f);
    c.rope_orig_max = 1000; /* 250 < 628 < 1000: on the ramp */
    model_rope_freq_div(&c, div);
    assert_true(div[1] > 1.0f && div[1] < 8.0f);
    snprintf(j, sizeof j, "{%s,\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4}}", shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), -1);
    assert_string_equal(err, "config.json: rope_scaling.rope_type \"yarn\" is not supported "
                             "(llama3 only)");
    snprintf(j, sizeof j, "{%s,\"model_type\":\"phimoe\"}", shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "model_type \"phimoe\" is not supported"));
    snprintf(j, sizeof j, "{%s,\"mlp_bias\":true}", shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "mlp_bias"));
    /* Gemma: its activation key, (1 + w) norms, tied by default */
    snprintf(j, sizeof j, "{%s,\"model_type\":\"gemma\",\"head_dim\":8,"
             "\"hidden_activation\":\"gelu_pytorch_tanh\"}", shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), 0);
    assert_true(c.gelu && c.norm_plus_one && c.embed_scale && c.tied && c.head_dim == 8);
    assert_true(c.query_scalar == 8.0f && !c.post_norms);
    snprintf(j, sizeof j, "{%s,\"model_type\":\"gemma\",\"hidden_activation\":\"relu\"}",
             shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "hidden_activation \"relu\""));
    snprintf(j, sizeof j, "{%s,\"model_type\":\"gemma\",\"tie_word_embeddings\":false}",
             shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "tie_word_embeddings"));
    /* Gemma 2: caps, query scalar, and the window on the even layers, exact
     * (the context stays the config's) */
    snprintf(j, sizeof j, "{%s,\"model_type\":\"gemma2\",\"attn_logit_softcapping\":50.0,"
             "\"final_logit_softcapping\":30.0,\"query_pre_attn_scalar\":24,"
             "\"sliding_window\":4096}", shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), 0);
    assert_true(c.post_norms && c.attn_softcap == 50.0f && c.final_softcap == 30.0f);
    assert_true(c.query_scalar == 24.0f && c.max_pos == 8192 && c.max_pos_config == 8192);
    assert_true(c.swa[0] && model_layer_window(&c, 0) == 4096);
    /* Mistral's window on every layer still caps the context */
    snprintf(j, sizeof j, "{%s,\"model_type\":\"mistral\",\"sliding_window\":4096}", shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), 0);
    assert_true(c.max_pos == 4096 && !c.swa[0]);
    /* Gemma 3: nested in an image-and-text config, Gemma3TextConfig's
     * defaults for what it leaves out, every 6th layer global, two bases,
     * linear scaling */
    snprintf(j, sizeof j, "{\"model_type\":\"gemma3\",\"eos_token_id\":[1,106],"
             "\"vision_config\":{\"hidden_size\":1152},\"text_config\":{"
             "\"hidden_size\":2560,\"intermediate_size\":10240,\"model_type\":\"gemma3_text\","
             "\"num_hidden_layers\":34,\"num_key_value_heads\":4,"
             "\"rope_scaling\":{\"factor\":8.0,\"rope_type\":\"linear\"},"
             "\"sliding_window\":1024}}");
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), 0);
    assert_true(c.family == FAM_GEMMA3 && c.multimodal && c.vocab == 262208 &&
                c.head_dim == 256 && c.n_heads == 8 && c.qk_norm && c.post_norms && c.tied);
    assert_true(c.max_pos == 131072 && c.query_scalar == 256.0f && c.eos_id == 1);
    assert_true(c.rope_theta == 1e6f && c.rope_local_theta == 1e4f && c.rope_linear &&
                c.rope_factor == 8.0f && c.attn_softcap == 0.0f && c.final_softcap == 0.0f);
    assert_true(c.swa[0] && c.swa[4] && !c.swa[5] && c.swa[6] && !c.swa[11] &&
                model_layer_window(&c, 0) == 1024 && model_layer_window(&c, 5) == 0);
    model_rope_freq_div(&c, div);
    assert_true(div[0] == 8.0f && div[1] == 8.0f);
    /* layer_types rule over the pattern */
    const char *shape3 = "\"hidden_size\":16,\"intermediate_size\":24,\"num_hidden_layers\":3,"
                         "\"num_attention_heads\":4,\"vocab_size\":23,\"head_dim\":8";
    snprintf(j, sizeof j, "{%s,\"model_type\":\"gemma3_text\",\"sliding_window\":8,"
             "\"sliding_window_pattern\":2,\"layer_types\":[\"full_attention\","
             "\"sliding_attention\",\"full_attention\"]}", shape3);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), 0);
    assert_true(!c.swa[0] && c.swa[1] && !c.swa[2] && !c.multimodal);
    snprintf(j, sizeof j, "{%s,\"model_type\":\"gemma3_text\",\"layer_types\":[\"local\"]}",
             shape3);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), -1);
    assert_string_equal(err, "config.json: layer_types must list \"sliding_attention\" or "
                             "\"full_attention\" for each of the 3 layers");
    snprintf(j, sizeof j, "{%s,\"model_type\":\"gemma3_text\",\"rope_scaling\":"
             "{\"rope_type\":\"yarn\",\"factor\":2}}", shape3);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), -1);
    assert_string_equal(err, "config.json: rope_scaling.rope_type \"yarn\" is not supported "
                             "for gemma3 (linear only)");
    assert_int_equal(model_config_parse("{\"model_type\":\"gemma3\"}", &c, err, sizeof err),
                     -1);
    assert_string_equal(err, "config.json: model_type \"gemma3\" needs a text_config object");
    /* Qwen2: biases whatever attention_bias says; an unused window is ignored */
    snprintf(j, sizeof j, "{%s,\"model_type\":\"qwen2\",\"use_sliding_window\":false,"
             "\"sliding_window\":64}", shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), 0);
    assert_true(c.qkv_bias && c.max_pos == 8192 && c.sliding_window == 0);
    /* Qwen3: q/k norms, no biases, head_dim apart from hidden/heads */
    snprintf(j, sizeof j, "{%s,\"model_type\":\"qwen3\",\"head_dim\":8,\"attention_bias\":false,"
             "\"use_sliding_window\":false,\"sliding_window\":null}", shape);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), 0);
    assert_true(c.qk_norm && !c.qkv_bias && c.head_dim == 8 && c.max_pos == 8192);
    assert_int_equal(model_config_params(&c), 2 * 23 * 16 + 16 + (2 * 16 * 32 + 2 * 16 * 32 +
                                                               3 * 16 * 24 + 2 * 16 + 2 * 8));
    /* SmolLM3: the layers without rotary positions, listed or every Nth */
    const char *shape4 = "\"hidden_size\":16,\"intermediate_size\":24,\"num_hidden_layers\":4,"
                         "\"num_attention_heads\":4,\"vocab_size\":23";
    snprintf(j, sizeof j, "{%s,\"model_type\":\"smollm3\",\"no_rope_layers\":[1,0,1,1]}",
             shape4);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), 0);
    assert_true(!c.no_rope[0] && c.no_rope[1] && !c.no_rope[2] && !c.no_rope[3]);
    snprintf(j, sizeof j, "{%s,\"model_type\":\"smollm3\",\"no_rope_layer_interval\":2}",
             shape4);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), 0);
    assert_true(!c.no_rope[0] && c.no_rope[1] && !c.no_rope[2] && c.no_rope[3]);
    snprintf(j, sizeof j, "{%s,\"model_type\":\"smollm3\"}", shape4); /* every 4th */
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), 0);
    assert_true(!c.no_rope[0] && !c.no_rope[2] && c.no_rope[3]);
    snprintf(j, sizeof j, "{%s,\"model_type\":\"smollm3\",\"no_rope_layers\":[1,0]}", shape4);
    assert_int_equal(model_config_parse(j, &c, err, sizeof err), -1);
    assert_string_equal(err, "config.json: no_rope_layers must list 1 (rotary) or 0 (none) for "
                             "each of the 4 layers");
    /* every family's tiny config survives our own writer and reader */
    for (int f = 0; f < FAM_COUNT; f++) {
        assert_int_equal(model_config_family_tiny(f, 300, &c), 0);
        char *w = model_config_to_json(&c);
        assert_non_null(w);
        assert_int_equal(model_config_parse(w, &c2, err, sizeof err), 0);
        free(w);
        assert_memory_equal(&c, &c2, sizeof c);
    }
}

static void lora_bf16_gradients(void **state)
{
    (void)state;
    lora_model_gradients(WK_BF16);
}

static void lora_nf4_gradients(void **state)
{
    (void)state;
    lora_model_gradients(WK_NF4);
}

static void tensor_names_and_round_trip(void **state)
{
    (void)state;
    struct model_config cfg;
    char err[200];
    assert_int_equal(model_config_parse(tiny_json, &cfg, err, sizeof err), 0);
    struct model_opts o = {.full = 1};
    struct model *m = model_create(&cfg, &o, err, sizeof err);
    assert_non_null(m);
    assert_int_equal(m->n_tensors, 1 + 2 * 12 + 2);
    assert_string_equal(m->tensors[0].name, "model.embed_tokens.weight");
    assert_true(model_tensor_find(m, "model.layers.1.self_attn.k_proj.bias") > 0);
    assert_true(model_tensor_find(m, "model.layers.0.mlp.down_proj.weight") > 0);
    assert_true(model_tensor_find(m, "lm_head.weight") > 0);
    int i = model_tensor_find(m, "model.layers.1.mlp.down_proj.weight");
    assert_int_equal(m->tensors[i].rows, 16);
    assert_int_equal(m->tensors[i].cols, 24);
    float v[16 * 24], back[16 * 24];
    for (int k = 0; k < 16 * 24; k++)
        v[k] = (float)k;
    assert_int_equal(model_set_tensor(m, i, v), 0);
    model_get_tensor(m, i, back);
    assert_memory_equal(v, back, sizeof v);
    model_free(m);
}

/* A model saved as BF16 in two shards (as Hugging Face shards models) loads
 * to the bf16-rounded values; a missing tensor is named in the error. */
static void loads_bf16_shards(void **state)
{
    (void)state;
    struct model_config cfg;
    char err[512], dir[128], path[256];
    assert_int_equal(model_config_parse(tiny_json, &cfg, err, sizeof err), 0);
    struct model_opts o = {.full = 1};
    struct model *m = model_create(&cfg, &o, err, sizeof err);
    assert_non_null(m);
    assert_int_equal(model_init_random(m, 12), 0);
    snprintf(dir, sizeof dir, "/tmp/alallo-test-model-%ld", (long)getpid());
    fs_remove_tree(dir);
    assert_int_equal(modelio_save_merged(m, dir, NULL, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(unlink(path), 0);
    /* every tensor as BF16, alternating between two shard files */
    struct st_tensor *ts = calloc((size_t)m->n_tensors, sizeof *ts);
    uint16_t **bufs = calloc((size_t)m->n_tensors, sizeof *bufs);
    size_t counts[2] = {0, 0};
    struct st_tensor *shard[2] = {calloc((size_t)m->n_tensors, sizeof *ts),
                                  calloc((size_t)m->n_tensors, sizeof *ts)};
    for (int i = 0; i < m->n_tensors; i++) {
        const struct model_tensor *mt = &m->tensors[i];
        size_t n = (size_t)mt->rows * mt->cols;
        float *v = malloc(n * sizeof(float));
        model_get_tensor(m, i, v);
        bufs[i] = malloc(n * 2);
        for (size_t k = 0; k < n; k++)
            bufs[i][k] = linear_f32_to_bf16(v[k]);
        free(v);
        struct st_tensor *t = &shard[i % 2][counts[i % 2]++];
        snprintf(t->name, sizeof t->name, "%s", mt->name);
        t->dtype = ST_BF16;
        t->ndim = mt->is1d ? 1 : 2;
        t->shape[0] = mt->is1d ? mt->cols : mt->rows;
        t->shape[1] = mt->cols;
        t->data = bufs[i];
        t->nbytes = n * 2;
    }
    for (int s = 0; s < 2; s++) {
        snprintf(path, sizeof path, "%s/model-0000%d-of-00002.safetensors", dir, s + 1);
        assert_int_equal(st_write(path, shard[s], counts[s], NULL, err, sizeof err), 0);
    }
    struct model *b = modelio_load(dir, &o, err, sizeof err);
    assert_non_null(b);
    for (int i = 0; i < b->n_tensors; i++) {
        const struct model_tensor *mt = &b->tensors[i];
        size_t n = (size_t)mt->rows * mt->cols;
        float *v = malloc(n * sizeof(float));
        model_get_tensor(b, i, v);
        for (size_t k = 0; k < n; k++)
            assert_true(v[k] == linear_bf16_to_f32(bufs[i][k]));
        free(v);
    }
    model_free(b);
    /* drop one shard: the error names a tensor that is now missing */
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    assert_int_equal(unlink(path), 0);
    assert_null(modelio_load(dir, &o, err, sizeof err));
    assert_non_null(strstr(err, "missing tensor model.layers.0."));
    for (int i = 0; i < m->n_tensors; i++)
        free(bufs[i]);
    free(bufs);
    free(ts);
    free(shard[0]);
    free(shard[1]);
    model_free(m);
    fs_remove_tree(dir);
}

/* A vocabulary too large for the dequantization scratch makes the fused
 * head and loss work in vocabulary chunks (bf16 base); it must agree with
 * the unchunked fp32 path on the same (bf16-exact) weights. */
static void head_in_vocab_chunks(void **state)
{
    (void)state;
    struct model_config cfg;
    char err[256];
    assert_int_equal(model_config_shape("tiny", 150000, &cfg), 0);
    cfg.hidden = 16, cfg.n_heads = 2, cfg.n_kv_heads = 1, cfg.head_dim = 8;
    cfg.intermediate = 24, cfg.n_layers = 1;
    struct model *m[2];
    struct model_acts *a[2];
    double loss[2];
    enum { Bb = 2, Tt = 9 };
    int32_t ids[Bb * Tt];
    uint8_t mask[Bb * Tt];
    struct rng r;
    rng_seed(&r, 3);
    for (int i = 0; i < Bb * Tt; i++) {
        ids[i] = (int32_t)rng_below(&r, 150000);
        mask[i] = 1;
    }
    for (int k = 0; k < 2; k++) {
        struct model_opts o = {.full = 0, .base_kind = k ? WK_BF16 : WK_F32, .lora_r = 2,
                               .lora_alpha = 2.0f, .lora_targets = MODEL_ALL_PROJ};
        m[k] = model_create(&cfg, &o, err, sizeof err);
        assert_non_null(m[k]);
        assert_int_equal(model_init_random(m[k], 4), 0);
        model_lora_init(m[k], 5);
        for (size_t i = 0; i < m[k]->n_train; i++)
            m[k]->train[i] = 0.1f * (float)((i * 7) % 11) - 0.5f;
        a[k] = model_acts_create(m[k], Bb, Tt);
        assert_non_null(a[k]);
    }
    /* the fp32 base rounded to bf16, so both hold the same values */
    for (int i = 0; i < m[0]->n_tensors; i++) {
        const struct model_tensor *t = &m[0]->tensors[i];
        if (t->vec)
            continue;
        size_t n = (size_t)t->rows * t->cols;
        for (size_t j = 0; j < n; j++)
            t->lin->w[j] = linear_bf16_to_f32(linear_f32_to_bf16(t->lin->w[j]));
    }
    size_t nt;
    for (int k = 0; k < 2; k++) {
        memset(m[k]->grad, 0, m[k]->n_train * sizeof(float));
        loss[k] = model_forward_backward(m[k], a[k], ids, mask, Bb, Tt, 0.1f, 1, &nt);
    }
    assert_float_equal(loss[0], loss[1], 1e-5 * loss[0]);
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < m[0]->n_train; i++) {
        double d = (double)m[0]->grad[i] - m[1]->grad[i];
        num += d * d;
        den += (double)m[0]->grad[i] * m[0]->grad[i];
    }
    assert_true(den > 0.0);
    assert_true(sqrt(num / den) < 1e-5);
    for (int k = 0; k < 2; k++) {
        model_acts_free(a[k]);
        model_free(m[k]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(config_parse),
        cmocka_unit_test(named_shapes),
        cmocka_unit_test(qwen3_moe_config),
        cmocka_unit_test(tensor_names_and_round_trip),
        cmocka_unit_test(full_model_gradients),
        cmocka_unit_test(fresh_gradients_match_zeroed),
        cmocka_unit_test(lora_bf16_gradients),
        cmocka_unit_test(lora_nf4_gradients),
        cmocka_unit_test(lora_dropout_gradients),
        cmocka_unit_test(loads_bf16_shards),
        cmocka_unit_test(head_in_vocab_chunks),
        cmocka_unit_test(family_configs),
        cmocka_unit_test(llama3_gradients),
        cmocka_unit_test(gemma_gradients),
        cmocka_unit_test(gemma2_gradients),
        cmocka_unit_test(gemma3_gradients),
        cmocka_unit_test(qwen3_gradients),
        cmocka_unit_test(smollm3_gradients),
        cmocka_unit_test(phi3_gradients),
        cmocka_unit_test(phi3_config),
        cmocka_unit_test(phi3_fused_round_trip),
        cmocka_unit_test(lora_saves_merged_onto_published),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
