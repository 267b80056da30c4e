/* test_catalog.c - catalog_read_dir: the shape the planner gets from a
 * model folder's config.json, with Gemma's head_dim and Gemma 2's extras. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control/catalog.h"

/* A model folder in a fresh temporary directory: config.json as given,
 * a one-byte safetensors file and an empty tokenizer.json. */
static void make_model(char *dir, size_t cap, const char *config)
{
    snprintf(dir, cap, "/tmp/alallo-catalog-XXXXXX");
    assert_non_null(mkdtemp(dir));
    const char *names[] = {"config.json", "model.safetensors", "tokenizer.json"};
    const char *texts[] = {config, "x", "{}"};
    for (int i = 0; i < 3; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(texts[i], f);
        fclose(f);
    }
}

static void remove_model(const char *dir)
{
    const char *names[] = {"config.json", "model.safetensors", "tokenizer.json"};
    for (int i = 0; i < 3; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* The catalog's reading of a model folder holding `config`. */
static struct catalog_model read_config(const char *config)
{
    char dir[64], err[256];
    make_model(dir, sizeof dir, config);
    struct catalog_model m;
    memset(&m, 0, sizeof m);
    if (catalog_read_dir(dir, &m, err, sizeof err) != 0)
        fail_msg("%s", err);
    remove_model(dir);
    return m;
}

static void reads_gemma2_shape(void **state)
{
    (void)state;
    struct catalog_model m = read_config(
        "{\"model_type\":\"gemma2\",\"hidden_size\":64,\"intermediate_size\":172,"
        "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
        "\"head_dim\":32,\"vocab_size\":4096,\"attn_logit_softcapping\":50.0,"
        "\"final_logit_softcapping\":null}");
    assert_int_equal(m.head_dim, 32);
    assert_true(m.tied);
    assert_true(m.post_norms);
    assert_true(m.attn_softcap);
    assert_false(m.final_softcap); /* null: not capped */
    assert_false(m.qk_norm);
    /* q, o: 64 x 128; k, v: 64 x 64; four norms a layer */
    assert_int_equal(m.params,
                     4096LL * 64 + 2 * (2 * 64 * 128 + 2 * 64 * 64 + 3 * 64 * 172 + 4 * 64) + 64);
}

/* Gemma 3 as the hub has it: the text model nested in text_config beside a
 * vision tower, with Gemma3TextConfig's defaults (head_dim 256) for what
 * it leaves out; Gemma 2's four norms and per-head q/k norms. */
static void reads_gemma3_nested(void **state)
{
    (void)state;
    struct catalog_model m = read_config(
        "{\"model_type\":\"gemma3\",\"vision_config\":{\"hidden_size\":1152},"
        "\"text_config\":{\"model_type\":\"gemma3_text\",\"hidden_size\":64,"
        "\"intermediate_size\":172,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
        "\"num_key_value_heads\":1,\"vocab_size\":4096,\"sliding_window\":512}}");
    assert_int_equal(m.head_dim, 256);
    assert_int_equal(m.max_positions, 131072);
    assert_true(m.tied && m.post_norms && m.qk_norm);
    assert_false(m.attn_softcap || m.final_softcap);
    /* q, o: 64 x 1024; k, v: 64 x 256; four norms and q/k norms a layer */
    assert_int_equal(m.params, 4096LL * 64 +
                                   2 * (2 * 64 * 1024 + 2 * 64 * 256 + 3 * 64 * 172 + 4 * 64 +
                                        2 * 256) +
                                   64);
}

/* Phi-4-mini's published config: Llama's count of parameters (its fused
 * qkv_proj and gate_up_proj hold q, k, v, gate and up), the context within
 * original_max_position_embeddings, where longrope's short factors apply. */
static void reads_phi3_longrope(void **state)
{
    (void)state;
    struct catalog_model m = read_config(
        "{\"model_type\":\"phi3\",\"hidden_size\":3072,\"intermediate_size\":8192,"
        "\"num_hidden_layers\":32,\"num_attention_heads\":24,\"num_key_value_heads\":8,"
        "\"vocab_size\":200064,\"tie_word_embeddings\":true,\"partial_rotary_factor\":0.75,"
        "\"max_position_embeddings\":131072,\"original_max_position_embeddings\":4096,"
        "\"rope_scaling\":{\"type\":\"longrope\",\"long_factor\":[1],\"short_factor\":[1]}}");
    assert_int_equal(m.head_dim, 128);
    assert_int_equal(m.max_positions, 4096);
    assert_false(m.qk_norm || m.post_norms);
    /* 3.84 B: q, o 3072 x 3072; k, v 3072 x 1024; gate, up, down 3072 x 8192 */
    assert_int_equal(m.params, 200064LL * 3072 +
                                   32LL * (2 * 3072 * 3072 + 2 * 3072 * 1024 +
                                           3LL * 3072 * 8192 + 2 * 3072) +
                                   3072);
}

static void reads_qwen3_shape(void **state)
{
    (void)state;
    struct catalog_model m = read_config(
        "{\"model_type\":\"qwen3\",\"hidden_size\":64,\"intermediate_size\":172,"
        "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
        "\"head_dim\":32,\"vocab_size\":4096,\"tie_word_embeddings\":true}");
    assert_int_equal(m.head_dim, 32);
    assert_true(m.qk_norm);
    assert_false(m.post_norms);
    /* as Gemma 2's shape, plus q_norm and k_norm (head_dim each) per layer */
    assert_int_equal(m.params, 4096LL * 64 +
                                   2 * (2 * 64 * 128 + 2 * 64 * 64 + 3 * 64 * 172 + 2 * 64 +
                                        2 * 32) +
                                   64);
}

static void reads_llama_shape(void **state)
{
    (void)state;
    struct catalog_model m = read_config(
        "{\"model_type\":\"llama\",\"hidden_size\":192,\"intermediate_size\":512,"
        "\"num_hidden_layers\":4,\"num_attention_heads\":6,\"num_key_value_heads\":3,"
        "\"vocab_size\":4096,\"attn_logit_softcapping\":50.0}");
    assert_int_equal(m.head_dim, 32); /* hidden / heads */
    assert_false(m.post_norms);
    assert_false(m.attn_softcap); /* only Gemma 2 caps */
    assert_false(m.final_softcap);
    assert_false(m.qk_norm);
}

/* Qwen3-MoE: layers 0 and 2 sparse (decoder_sparse_step 1, layer 1 in
 * mlp_only_layers), 6 experts of width 12, 2 per token; total and active
 * parameters. */
static void reads_qwen3_moe_experts(void **state)
{
    (void)state;
    char dir[64], err[256];
    make_model(dir, sizeof dir,
               "{\"model_type\":\"qwen3_moe\",\"hidden_size\":16,\"intermediate_size\":40,"
               "\"num_hidden_layers\":3,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
               "\"head_dim\":8,\"vocab_size\":23,\"tie_word_embeddings\":true,"
               "\"num_experts\":6,\"num_experts_per_tok\":2,\"moe_intermediate_size\":12,"
               "\"decoder_sparse_step\":1,\"mlp_only_layers\":[1]}");
    struct catalog_model m;
    memset(&m, 0, sizeof m);
    assert_int_equal(catalog_read_dir(dir, &m, err, sizeof err), 0);
    assert_int_equal(m.experts, 6);
    assert_int_equal(m.experts_used, 2);
    assert_int_equal(m.moe_intermediate, 12);
    assert_int_equal(m.sparse_layers, 2);
    /* per layer: attention, its two norms and Qwen3's q/k norms (2 * head_dim) */
    long long attn = 2 * 16 * 32 + 2 * 16 * 16 + 2 * 16 + 2 * 8, outside = 23 * 16 + 16;
    assert_int_equal(m.params, outside + 3 * attn + 3 * 16 * 40 + 2 * (6 * 16 + 6 * 3 * 16 * 12));
    assert_int_equal(m.active_params,
                     outside + 3 * attn + 3 * 16 * 40 + 2 * (6 * 16 + 2 * 3 * 16 * 12));
    remove_model(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_gemma2_shape),
        cmocka_unit_test(reads_gemma3_nested),
        cmocka_unit_test(reads_qwen3_shape),
        cmocka_unit_test(reads_phi3_longrope),
        cmocka_unit_test(reads_llama_shape),
        cmocka_unit_test(reads_qwen3_moe_experts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
