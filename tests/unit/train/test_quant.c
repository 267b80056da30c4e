/* test_quant.c - ggml block formats: byte layouts decoded by hand, round-trip
 * error bounds, the schemes' per-tensor choice and fallbacks, quantized
 * tensors through the GGUF writer and reader, and the Modelfile read off a
 * chat template. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/rng.h"
#include "train/tokenizer/bpe_train.h"
#include "train/formats/gguf.h"
#include "train/formats/modelfile.h"
#include "train/formats/quant.h"
#include "train/formats/safetensors.h"

static float f16_at(const unsigned char *p)
{
    return st_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

static void sizes_and_choice(void **state)
{
    (void)state;
    assert_int_equal(quant_row_bytes(QUANT_Q8_0, 64), 68);
    assert_int_equal(quant_row_bytes(QUANT_Q4_0, 64), 36);
    assert_int_equal(quant_row_bytes(QUANT_Q4_K, 512), 288);
    assert_int_equal(quant_row_bytes(QUANT_Q6_K, 256), 210);
    assert_int_equal(quant_row_bytes(QUANT_Q4_K, 192), 0);
    enum quant_scheme s;
    assert_int_equal(quant_scheme_parse("q4_k_m", &s), 0);
    assert_int_equal(s, QSCHEME_Q4_K_M);
    assert_int_equal(quant_scheme_parse("q5_k", &s), -1);
    assert_int_equal(quant_scheme_file_type(QSCHEME_Q8_0), 7);
    assert_int_equal(quant_scheme_file_type(QSCHEME_Q4_0), 2);
    assert_int_equal(quant_scheme_file_type(QSCHEME_Q4_K_M), 15);
    /* Q4_K_M: sensitive tensors in Q6_K, the rest Q4_K; short rows fall back */
    assert_int_equal(quant_pick(QSCHEME_Q4_K_M, QROLE_OTHER, 256), QUANT_Q4_K);
    assert_int_equal(quant_pick(QSCHEME_Q4_K_M, QROLE_ATTN_V, 512), QUANT_Q6_K);
    assert_int_equal(quant_pick(QSCHEME_Q4_K_M, QROLE_OTHER, 192), QUANT_Q4_0);
    assert_int_equal(quant_pick(QSCHEME_Q4_K_M, QROLE_OUTPUT, 192), QUANT_Q8_0);
    assert_int_equal(quant_pick(QSCHEME_Q8_0, QROLE_OUTPUT, 48), QUANT_F16);
    assert_int_equal(quant_role_of("lm_head.weight", 0), QROLE_OUTPUT);
    assert_int_equal(quant_role_of("model.embed_tokens.weight", 1), QROLE_OUTPUT);
    assert_int_equal(quant_role_of("model.embed_tokens.weight", 0), QROLE_OTHER);
    assert_int_equal(quant_role_of("model.layers.3.self_attn.v_proj.weight", 0), QROLE_ATTN_V);
    assert_int_equal(quant_role_of("model.layers.0.mlp.down_proj.weight", 0), QROLE_FFN_DOWN);
    assert_int_equal(quant_role_of("model.layers.0.mlp.up_proj.weight", 0), QROLE_OTHER);
    /* a mixture of experts: the router kept out of every scheme, the
     * experts' down projections as the dense one's */
    assert_int_equal(quant_role_of("model.layers.2.mlp.gate.weight", 0), QROLE_ROUTER);
    assert_int_equal(quant_role_of("model.layers.2.mlp.gate_proj.weight", 0), QROLE_OTHER);
    assert_int_equal(quant_role_of("model.layers.2.mlp.experts.7.down_proj.weight", 0),
                     QROLE_FFN_DOWN);
    assert_int_equal(quant_pick(QSCHEME_Q4_K_M, QROLE_ROUTER, 256), QUANT_Q4_K);
}

static void q8_0_and_q4_0_layout(void **state)
{
    (void)state;
    float x[32], y[32];
    unsigned char b[34];
    for (int j = 0; j < 32; j++)
        x[j] = (float)(j - 16); /* -16 .. 15 */
    quant_row(QUANT_Q4_0, x, 32, b);
    /* the largest magnitude (-16) maps to level 0: d = -16 / -8 = 2 */
    assert_float_equal(f16_at(b), 2.0f, 0);
    assert_int_equal(b[2] & 0xF, 0);          /* x[0] = -16 -> 0 */
    assert_int_equal(b[2] >> 4, 8);           /* x[16] = 0 -> 8, high nibble */
    assert_int_equal(b[2 + 15] >> 4, 15);     /* x[31] = 15 -> 15 (clamped) */
    quant_dequant_row(QUANT_Q4_0, b, 32, y);
    for (int j = 0; j < 32; j++) {
        long q = lrintf(x[j] / 2.0f) + 8;
        assert_float_equal(y[j], 2.0f * (float)((q > 15 ? 15 : q) - 8), 0);
    }
    quant_row(QUANT_Q8_0, x, 32, b);
    assert_float_equal(f16_at(b), st_f16_to_f32(st_f32_to_f16(16.0f / 127.0f)), 0);
    assert_int_equal((int8_t)b[2], -127);
    quant_dequant_row(QUANT_Q8_0, b, 32, y);
    for (int j = 0; j < 32; j++)
        assert_float_equal(y[j], x[j], 16.0f / 127.0f * 0.51f);
}

/* Values on a level of their block decode to within the f16 rounding of
 * the block scales (a misplaced bit would be off by whole levels). */
static void k_quants_exact(void **state)
{
    (void)state;
    float x[256], y[256];
    unsigned char b[210];
    /* Q4_K: sub-block s holds 0..15 in steps of 1, offset by -8 */
    for (int i = 0; i < 256; i++)
        x[i] = (float)((i * 7) % 16) - 8.0f;
    quant_row(QUANT_Q4_K, x, 256, b);
    quant_dequant_row(QUANT_Q4_K, b, 256, y);
    for (int i = 0; i < 256; i++)
        assert_float_equal(y[i], x[i], 0.01);
    /* value 33 is the second of sub-block 1: the high nibble of qs[1] */
    assert_int_equal(b[16 + 1] >> 4, ((33 * 7) % 16));
    /* Q6_K: integers -31..31 with a shared scale */
    for (int i = 0; i < 256; i++)
        x[i] = (float)((i * 13) % 63 - 31);
    x[0] = 31.0f; /* every group of 16 has the same amax */
    for (int g = 0; g < 16; g++)
        x[16 * g] = 31.0f;
    quant_row(QUANT_Q6_K, x, 256, b);
    quant_dequant_row(QUANT_Q6_K, b, 256, y);
    for (int i = 0; i < 256; i++)
        assert_float_equal(y[i], x[i], 0.01);
    /* value 70 (half 0, k = 2, l = 6) keeps its low bits in ql[6]'s high nibble */
    int q70 = (int)x[70] + 32;
    assert_int_equal(b[6] >> 4, q70 & 0xF);
    assert_int_equal((b[128 + 6] >> 4) & 3, q70 >> 4);
}

static void random_error_bounds(void **state)
{
    (void)state;
    enum { n = 4096 };
    static float x[n], y[n];
    static unsigned char b[n * 2];
    struct rng r;
    rng_seed(&r, 5);
    for (int i = 0; i < n; i++)
        x[i] = (float)rng_normal(&r) * (i < n / 2 ? 0.02f : 1.5f);
    struct {
        enum quant_type t;
        float bound; /* relative RMS error */
    } cases[] = {{QUANT_Q8_0, 0.01f}, {QUANT_Q6_K, 0.04f}, {QUANT_Q4_K, 0.15f}, {QUANT_Q4_0, 0.15f}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        quant_row(cases[c].t, x, n, b);
        quant_dequant_row(cases[c].t, b, n, y);
        double e = 0, s = 0;
        for (int i = 0; i < n; i++) {
            e += (double)(y[i] - x[i]) * (y[i] - x[i]);
            s += (double)x[i] * x[i];
        }
        double rel = sqrt(e / s);
        if (rel > cases[c].bound)
            fail_msg("type %d: relative error %g above %g", cases[c].t, rel, cases[c].bound);
    }
}

static int fill_q(void *ctx, void *out, size_t nbytes)
{
    const float *x = ctx;
    if (nbytes != 2 * quant_row_bytes(QUANT_Q4_K, 256))
        return -1;
    quant_row(QUANT_Q4_K, x, 256, out);
    quant_row(QUANT_Q4_K, x + 256, 256, (unsigned char *)out + 144);
    return 0;
}

static void gguf_holds_quantized_tensors(void **state)
{
    (void)state;
    static float x[512], y[512];
    for (int i = 0; i < 512; i++)
        x[i] = sinf((float)i);
    char path[] = "/tmp/alallo-quant-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    unlink(path);
    struct gguf_writer *w = gguf_writer_new();
    assert_int_equal(gguf_add_tensor(w, "m", GGUF_T_Q4_K, 2, (uint64_t[]){256, 2}, fill_q, x), 0);
    /* rows that are no whole number of blocks are refused */
    assert_int_equal(gguf_add_tensor(w, "bad", GGUF_T_Q8_0, 2, (uint64_t[]){48, 2}, fill_q, x), -1);
    gguf_writer_free(w);
    w = gguf_writer_new();
    assert_int_equal(gguf_add_tensor(w, "m", GGUF_T_Q4_K, 2, (uint64_t[]){256, 2}, fill_q, x), 0);
    char err[300];
    assert_int_equal(gguf_write(w, path, err, sizeof err), 0);
    gguf_writer_free(w);
    struct gguf_file *f = gguf_open(path, err, sizeof err);
    assert_non_null(f);
    const struct gguf_tensor_info *t = gguf_tensor_find(f, "m");
    assert_non_null(t);
    assert_int_equal(t->type, GGUF_T_Q4_K);
    assert_int_equal(t->nbytes, 288);
    quant_dequant_row(QUANT_Q4_K, t->data, 512, y);
    for (int i = 0; i < 512; i++)
        assert_float_equal(y[i], x[i], 0.1);
    gguf_close(f);
    unlink(path);
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void modelfile_from_chat_template(void **state)
{
    (void)state;
    char dir[] = "/tmp/alallo-modelfile-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char err[400] = "", path[512];
    struct bpe_trainer *bt = bpe_train_new();
    const char *text = "the cat sat on the mat and the dog sat on the log the end";
    struct bpe_train_result res;
    assert_int_equal(bpe_train_add_text(bt, text, strlen(text), err, sizeof err), 0);
    assert_int_equal(bpe_train_run(bt, 270, 2, &res, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    assert_int_equal(bpe_train_write(bt, path, err, sizeof err), 0);
    bpe_train_free(bt);
    /* no template: alallo's plain layout, EOS closing assistant turns */
    char *plain = modelfile_text(dir, "model.gguf", err, sizeof err);
    if (!plain)
        fail_msg("%s", err);
    assert_non_null(strstr(plain, "FROM ./model.gguf\n"));
    assert_non_null(strstr(plain, "User:\n{{ else if eq .Role \"assistant\" }}Assistant:\n"));
    assert_non_null(strstr(plain, "{{ .Content }}{{ if eq .Role \"assistant\" }}<|endoftext|>"));
    assert_non_null(strstr(plain, "PARAMETER stop \"<|endoftext|>\"\n"));
    free(plain);
    write_file(dir, "tokenizer_config.json",
               "{\"eos_token\":\"<|endoftext|>\",\"chat_template\":\"{% for m in messages %}"
               "{{ '<|im_start|>' + m['role'] + '\\\\n' + m['content'] + '<|im_end|>\\\\n' }}"
               "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\\\n' }}"
               "{% endif %}\"}");
    char *t = modelfile_text(dir, "x.gguf", err, sizeof err);
    if (!t)
        fail_msg("%s", err);
    const char *want =
        "TEMPLATE \"\"\"{{ range .Messages }}{{ if eq .Role \"system\" }}<|im_start|>system\n"
        "{{ .Content }}<|im_end|>\n{{ else if eq .Role \"user\" }}<|im_start|>user\n"
        "{{ .Content }}{{ else if eq .Role \"assistant\" }}<|im_end|>\n<|im_start|>assistant\n"
        "{{ .Content }}<|im_end|>\n{{ end }}{{ end }}<|im_end|>\n<|im_start|>assistant\n\"\"\"\n";
    if (!strstr(t, want))
        fail_msg("Modelfile:\n%s", t);
    free(t);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sizes_and_choice),
        cmocka_unit_test(q8_0_and_q4_0_layout),
        cmocka_unit_test(k_quants_exact),
        cmocka_unit_test(random_error_bounds),
        cmocka_unit_test(gguf_holds_quantized_tensors),
        cmocka_unit_test(modelfile_from_chat_template),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
