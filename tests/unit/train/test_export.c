/* test_export.c - model folder checks and the hf / peft / gguf exports of
 * train/formats/export.c, on a tiny Llama folder this test writes itself. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train/tokenizer/bpe_train.h"
#include "train/formats/export.h"
#include "train/formats/gguf.h"
#include "train/formats/safetensors.h"

static char root[64];

/* Tiny shape: hidden 8, 2 heads of 4, 1 key/value head, intermediate 12,
 * vocabulary 300 (the tokenizer below has fewer ids: padding). */
enum { C = 8, H = 2, KV = 1, HD = 4, I = 12, V = 300, L = 1 };

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static float value_of(int tensor, size_t i)
{
    return (float)((tensor * 131 + (int)i * 7) % 61 - 30) / 16.0f; /* exact in f16 */
}

/* Writes a model folder; `drop` names a tensor to leave out, `bad_shape`
 * one to give the wrong shape, `tied` whether lm_head is absent. */
static void make_model(const char *dir, const char *drop, const char *bad_shape, int tied)
{
    mkdir(dir, 0755);
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char cfg[600];
    snprintf(cfg, sizeof cfg,
             "{\"model_type\":\"llama\",\"hidden_size\":%d,\"intermediate_size\":%d,"
             "\"num_hidden_layers\":%d,\"num_attention_heads\":%d,\"num_key_value_heads\":%d,"
             "\"vocab_size\":%d,\"max_position_embeddings\":64,\"rms_norm_eps\":1e-5,"
             "\"rope_theta\":10000.0,\"tie_word_embeddings\":%s,\"hidden_act\":\"silu\"}",
             C, I, L, H, KV, V, tied ? "true" : "false");
    write_text(path, cfg);

    struct bpe_trainer *bt = bpe_train_new();
    char err[256];
    const char *text = "the cat sat on the mat and the dog sat on the log the end";
    struct bpe_train_result res;
    assert_int_equal(bpe_train_add_text(bt, text, strlen(text), err, sizeof err), 0);
    assert_int_equal(bpe_train_run(bt, 270, 2, &res, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    assert_int_equal(bpe_train_write(bt, path, err, sizeof err), 0);
    bpe_train_free(bt);

    struct {
        const char *name;
        int rows, cols;
    } spec[] = {
        {"model.embed_tokens.weight", V, C},
        {"model.layers.0.input_layernorm.weight", C, 0},
        {"model.layers.0.self_attn.q_proj.weight", H * HD, C},
        {"model.layers.0.self_attn.k_proj.weight", KV * HD, C},
        {"model.layers.0.self_attn.v_proj.weight", KV * HD, C},
        {"model.layers.0.self_attn.o_proj.weight", C, H * HD},
        {"model.layers.0.post_attention_layernorm.weight", C, 0},
        {"model.layers.0.mlp.gate_proj.weight", I, C},
        {"model.layers.0.mlp.up_proj.weight", I, C},
        {"model.layers.0.mlp.down_proj.weight", C, I},
        {"model.norm.weight", C, 0},
        {"lm_head.weight", V, C},
    };
    int n = tied ? 11 : 12;
    struct st_tensor t[12];
    float *bufs[12];
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (drop && strcmp(spec[i].name, drop) == 0)
            continue;
        int rows = spec[i].rows, cols = spec[i].cols;
        if (bad_shape && strcmp(spec[i].name, bad_shape) == 0)
            rows++;
        size_t count = (size_t)rows * (size_t)(cols ? cols : 1);
        bufs[k] = malloc(count * sizeof(float));
        for (size_t e = 0; e < count; e++)
            bufs[k][e] = value_of(i, e);
        memset(&t[k], 0, sizeof t[k]);
        snprintf(t[k].name, sizeof t[k].name, "%s", spec[i].name);
        t[k].dtype = ST_F32;
        t[k].ndim = cols ? 2 : 1;
        t[k].shape[0] = rows;
        t[k].shape[1] = cols;
        t[k].data = bufs[k];
        t[k].nbytes = count * sizeof(float);
        k++;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(st_write(path, t, (size_t)k, NULL, err, sizeof err), 0);
    for (int i = 0; i < k; i++)
        free(bufs[i]);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/alallo-export-XXXXXX");
    return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    return system(cmd);
}

static void permutation_matches_llama_cpp(void **state)
{
    (void)state;
    /* numpy: w.reshape(n_head, 2, hd/2, cols).swapaxes(1, 2).reshape(w.shape)
     * with n_head 2, hd 4: destination rows take source rows 0 2 1 3 4 6 5 7. */
    const size_t want[] = {0, 2, 1, 3, 4, 6, 5, 7};
    for (size_t r = 0; r < 8; r++)
        assert_int_equal(export_permuted_row(r, 8, 2), want[r]);
    /* hd 8 (half 4): 0 4 1 5 2 6 3 7. */
    const size_t want8[] = {0, 4, 1, 5, 2, 6, 3, 7};
    for (size_t r = 0; r < 8; r++)
        assert_int_equal(export_permuted_row(r, 8, 1), want8[r]);
}

static void check_hf_folders(void **state)
{
    (void)state;
    char dir[128], err[400];
    snprintf(dir, sizeof dir, "%s/good", root);
    make_model(dir, NULL, NULL, 1);
    assert_int_equal(export_check_hf(dir, err, sizeof err), 0);

    snprintf(dir, sizeof dir, "%s/missing", root);
    make_model(dir, "model.layers.0.mlp.up_proj.weight", NULL, 1);
    assert_int_equal(export_check_hf(dir, err, sizeof err), -1);
    assert_non_null(strstr(err, "missing tensor model.layers.0.mlp.up_proj.weight"));

    snprintf(dir, sizeof dir, "%s/shape", root);
    make_model(dir, NULL, "model.layers.0.self_attn.k_proj.weight", 1);
    assert_int_equal(export_check_hf(dir, err, sizeof err), -1);
    assert_non_null(strstr(err, "has shape [5, 8], config.json implies [4, 8]"));

    snprintf(dir, sizeof dir, "%s/untied-no-head", root);
    make_model(dir, "lm_head.weight", NULL, 0);
    assert_int_equal(export_check_hf(dir, err, sizeof err), -1);
    assert_non_null(strstr(err, "lm_head.weight"));

    assert_int_equal(export_check_hf("/nonexistent-dir", err, sizeof err), -1);
}

static void hf_copy(void **state)
{
    (void)state;
    char dir[128], out[128], path[200], err[400];
    snprintf(dir, sizeof dir, "%s/hfsrc", root);
    make_model(dir, NULL, NULL, 1);
    snprintf(path, sizeof path, "%s/junk.bin", dir);
    write_text(path, "not part of a model");
    snprintf(out, sizeof out, "%s/hfout", root);
    assert_int_equal(export_hf(dir, out, err, sizeof err), 0);
    assert_int_equal(export_check_hf(out, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/junk.bin", out);
    assert_int_not_equal(access(path, F_OK), 0);
    /* Never over an existing output. */
    assert_int_equal(export_hf(dir, out, err, sizeof err), -1);
    assert_non_null(strstr(err, "already exists"));
}

static void write_adapter(const char *dir, int r, int bad_rank)
{
    mkdir(dir, 0755);
    char path[200], err[256];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    char cfg[300];
    snprintf(cfg, sizeof cfg,
             "{\"peft_type\":\"LORA\",\"task_type\":\"CAUSAL_LM\",\"r\":%d,\"lora_alpha\":16,"
             "\"target_modules\":[\"q_proj\"],\"base_model_name_or_path\":\"tiny\"}",
             r);
    write_text(path, cfg);
    float a[4 * C] = {0}, b[H * HD * 4] = {0};
    struct st_tensor t[2] = {
        {.name = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", .dtype = ST_F32,
         .ndim = 2, .shape = {bad_rank ? 3 : 4, C}, .data = a, .nbytes = (size_t)(bad_rank ? 3 : 4) * C * 4},
        {.name = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", .dtype = ST_F32,
         .ndim = 2, .shape = {H * HD, 4}, .data = b, .nbytes = sizeof b},
    };
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    assert_int_equal(st_write(path, t, 2, NULL, err, sizeof err), 0);
}

static void peft(void **state)
{
    (void)state;
    char dir[128], out[128], err[400];
    snprintf(dir, sizeof dir, "%s/adapter", root);
    write_adapter(dir, 4, 0);
    assert_int_equal(export_check_peft(dir, err, sizeof err), 0);
    snprintf(out, sizeof out, "%s/adapter-out", root);
    assert_int_equal(export_peft(dir, out, err, sizeof err), 0);
    assert_int_equal(export_check_peft(out, err, sizeof err), 0);

    snprintf(dir, sizeof dir, "%s/adapter-bad", root);
    write_adapter(dir, 4, 1);
    assert_int_equal(export_check_peft(dir, err, sizeof err), -1);
    assert_non_null(strstr(err, "does not have rank 4"));
    snprintf(dir, sizeof dir, "%s/adapter-r0", root);
    write_adapter(dir, 0, 0);
    assert_int_equal(export_check_peft(dir, err, sizeof err), -1);
    assert_non_null(strstr(err, "peft_type"));
    assert_int_equal(export_check_peft(root, err, sizeof err), -1);
    assert_non_null(strstr(err, "no adapter_config.json"));
}

static long key(const struct gguf_file *f, const char *k)
{
    long i = gguf_find(f, k);
    if (i < 0)
        fail_msg("GGUF lacks %s", k);
    return i;
}

static void gguf_export(void **state)
{
    (void)state;
    char dir[128], out[128], err[400];
    snprintf(dir, sizeof dir, "%s/gsrc", root);
    make_model(dir, NULL, NULL, 0);
    snprintf(out, sizeof out, "%s/m.gguf", root);
    if (export_gguf(dir, out, EXPORT_F16, err, sizeof err) < 0)
        fail_msg("%s", err);
    assert_int_equal(export_gguf(dir, out, EXPORT_F16, err, sizeof err), -1); /* exists */

    struct gguf_file *f = gguf_open(out, err, sizeof err);
    assert_non_null(f);
    assert_string_equal(gguf_kv_str(f, (size_t)key(f, "general.architecture")), "llama");
    assert_int_equal(gguf_kv_int(f, (size_t)key(f, "general.file_type")), 1);
    assert_int_equal(gguf_kv_int(f, (size_t)key(f, "llama.context_length")), 64);
    assert_int_equal(gguf_kv_int(f, (size_t)key(f, "llama.embedding_length")), C);
    assert_int_equal(gguf_kv_int(f, (size_t)key(f, "llama.block_count")), L);
    assert_int_equal(gguf_kv_int(f, (size_t)key(f, "llama.feed_forward_length")), I);
    assert_int_equal(gguf_kv_int(f, (size_t)key(f, "llama.attention.head_count")), H);
    assert_int_equal(gguf_kv_int(f, (size_t)key(f, "llama.attention.head_count_kv")), KV);
    assert_int_equal(gguf_kv_int(f, (size_t)key(f, "llama.rope.dimension_count")), HD);
    assert_true(fabs(gguf_kv_float(f, (size_t)key(f, "llama.attention.layer_norm_rms_epsilon")) - 1e-5) < 1e-9);
    assert_true(gguf_kv_float(f, (size_t)key(f, "llama.rope.freq_base")) == 10000.0);
    assert_string_equal(gguf_kv_str(f, (size_t)key(f, "tokenizer.ggml.model")), "gpt2");
    assert_string_equal(gguf_kv_str(f, (size_t)key(f, "tokenizer.ggml.pre")), "gpt-2");
    long toks = key(f, "tokenizer.ggml.tokens");
    assert_int_equal(gguf_arr_len(f, (size_t)toks), V);
    assert_string_equal(gguf_arr_str(f, (size_t)toks, 'a'), "a");
    assert_string_equal(gguf_arr_str(f, (size_t)toks, ' '), "\xc4\xa0"); /* byte-level form */
    long types = key(f, "tokenizer.ggml.token_type");
    long eot = gguf_kv_int(f, (size_t)key(f, "tokenizer.ggml.eos_token_id"));
    assert_string_equal(gguf_arr_str(f, (size_t)toks, (size_t)eot), "<|endoftext|>");
    assert_int_equal(gguf_arr_int(f, (size_t)types, (size_t)eot), 3);      /* control */
    assert_int_equal(gguf_arr_int(f, (size_t)types, 'a'), 1);               /* normal */
    assert_int_equal(gguf_arr_int(f, (size_t)types, V - 1), 5);             /* padding: unused */
    assert_string_equal(gguf_arr_str(f, (size_t)toks, V - 1), "[PAD299]");
    assert_int_equal(gguf_kv_int(f, (size_t)key(f, "tokenizer.ggml.bos_token_id")), eot);
    assert_int_equal(gguf_kv_int(f, (size_t)key(f, "tokenizer.ggml.add_bos_token")), 1);
    assert_true(gguf_arr_len(f, (size_t)key(f, "tokenizer.ggml.merges")) > 0);

    /* Names, shapes (fastest first) and types. */
    assert_int_equal(gguf_tensor_count(f), 12);
    const struct gguf_tensor_info *t = gguf_tensor_find(f, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->type, GGUF_T_F16);
    assert_int_equal(t->ne[0], C);
    assert_int_equal(t->ne[1], V);
    const uint16_t *h = t->data;
    assert_true(st_f16_to_f32(h[5]) == value_of(0, 5));
    t = gguf_tensor_find(f, "blk.0.attn_norm.weight");
    assert_int_equal(t->type, GGUF_T_F32);
    assert_int_equal(t->n_dims, 1);
    assert_true(((const float *)t->data)[3] == value_of(1, 3));
    t = gguf_tensor_find(f, "output.weight");
    assert_non_null(t);
    assert_true(st_f16_to_f32(((const uint16_t *)t->data)[17]) == value_of(11, 17));
    /* q rows permuted with 2 heads, k rows with 1 key/value head; v not. */
    t = gguf_tensor_find(f, "blk.0.attn_q.weight");
    assert_int_equal(t->ne[0], C);
    assert_int_equal(t->ne[1], H * HD);
    h = t->data;
    const int qsrc[] = {0, 2, 1, 3, 4, 6, 5, 7};
    for (int r = 0; r < H * HD; r++)
        for (int c = 0; c < C; c++)
            assert_true(st_f16_to_f32(h[r * C + c]) == value_of(2, (size_t)(qsrc[r] * C + c)));
    t = gguf_tensor_find(f, "blk.0.attn_k.weight");
    h = t->data;
    const int ksrc[] = {0, 2, 1, 3};
    for (int r = 0; r < KV * HD; r++)
        assert_true(st_f16_to_f32(h[r * C + 1]) == value_of(3, (size_t)(ksrc[r] * C + 1)));
    t = gguf_tensor_find(f, "blk.0.attn_v.weight");
    h = t->data;
    for (int r = 0; r < KV * HD; r++)
        assert_true(st_f16_to_f32(h[r * C]) == value_of(4, (size_t)(r * C)));
    const char *names[] = {"blk.0.attn_output.weight", "blk.0.ffn_norm.weight", "blk.0.ffn_gate.weight",
                           "blk.0.ffn_up.weight", "blk.0.ffn_down.weight", "output_norm.weight"};
    for (int i = 0; i < 6; i++)
        assert_non_null(gguf_tensor_find(f, names[i]));
    t = gguf_tensor_find(f, "blk.0.ffn_down.weight");
    assert_int_equal(t->ne[0], I);
    assert_int_equal(t->ne[1], C);
    gguf_close(f);

    /* BF16, tied: no output.weight. */
    snprintf(dir, sizeof dir, "%s/gtied", root);
    make_model(dir, NULL, NULL, 1);
    snprintf(out, sizeof out, "%s/tied.gguf", root);
    assert_int_equal(export_gguf(dir, out, EXPORT_BF16, err, sizeof err), 0);
    f = gguf_open(out, err, sizeof err);
    assert_int_equal(gguf_kv_int(f, (size_t)key(f, "general.file_type")), 32);
    assert_null(gguf_tensor_find(f, "output.weight"));
    t = gguf_tensor_find(f, "token_embd.weight");
    assert_int_equal(t->type, GGUF_T_BF16);
    assert_true(st_bf16_to_f32(((const uint16_t *)t->data)[9]) == value_of(0, 9));
    gguf_close(f);
}

/* A SentencePiece-style tokenizer becomes tokenizer.ggml.model "llama". */
static void gguf_sentencepiece(void **state)
{
    (void)state;
    char dir[128], path[200], out[128], err[400];
    snprintf(dir, sizeof dir, "%s/spsrc", root);
    make_model(dir, NULL, NULL, 1);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *fp = fopen(path, "w");
    fputs("{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},"
          "{\"id\":1,\"content\":\"<s>\",\"special\":true},{\"id\":2,\"content\":\"</s>\",\"special\":true}],"
          "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\xe2\x96\x81\"},"
          "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xe2\x96\x81\"}]},"
          "\"pre_tokenizer\":null,\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\","
          "\"pattern\":{\"String\":\"\xe2\x96\x81\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},"
          "{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},"
          "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"byte_fallback\":true,\"fuse_unk\":true,"
          "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0x41>\":3,\"\xe2\x96\x81\":4,\"a\":5,\"\xe2\x96\x81""a\":6},"
          "\"merges\":[\"\xe2\x96\x81 a\"]}}",
          fp);
    fclose(fp);
    snprintf(out, sizeof out, "%s/sp.gguf", root);
    if (export_gguf(dir, out, EXPORT_F16, err, sizeof err) < 0)
        fail_msg("%s", err);
    struct gguf_file *f = gguf_open(out, err, sizeof err);
    assert_string_equal(gguf_kv_str(f, (size_t)key(f, "tokenizer.ggml.model")), "llama");
    long types = key(f, "tokenizer.ggml.token_type");
    assert_int_equal(gguf_arr_int(f, (size_t)types, 0), 2); /* unknown */
    assert_int_equal(gguf_arr_int(f, (size_t)types, 1), 3); /* control */
    assert_int_equal(gguf_arr_int(f, (size_t)types, 3), 6); /* byte */
    assert_int_equal(gguf_arr_int(f, (size_t)types, 6), 1); /* normal */
    long scores = key(f, "tokenizer.ggml.scores");
    assert_true(gguf_arr_float(f, (size_t)scores, 6) < gguf_arr_float(f, (size_t)scores, 5));
    assert_int_equal(gguf_kv_int(f, (size_t)key(f, "tokenizer.ggml.bos_token_id")), 1);
    assert_int_equal(gguf_kv_int(f, (size_t)key(f, "tokenizer.ggml.eos_token_id")), 2);
    assert_int_equal(gguf_kv_int(f, (size_t)key(f, "tokenizer.ggml.add_space_prefix")), 1);
    assert_int_equal(gguf_find(f, "tokenizer.ggml.merges"), -1);
    gguf_close(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(permutation_matches_llama_cpp),
        cmocka_unit_test(check_hf_folders),
        cmocka_unit_test(hf_copy),
        cmocka_unit_test(peft),
        cmocka_unit_test(gguf_export),
        cmocka_unit_test(gguf_sentencepiece),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
