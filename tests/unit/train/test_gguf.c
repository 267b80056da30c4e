/* test_gguf.c - GGUF v3 write/read round trip, the byte layout llama.cpp
 * expects (magic, version, 32-byte aligned data), and rejection of
 * malformed files. */
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

#include "train/formats/gguf.h"

static char path[128];

static int setup(void **state)
{
    (void)state;
    char dir[] = "/tmp/alallo-gguf-XXXXXX";
    if (!mkdtemp(dir))
        return -1;
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %.*s", (int)(strrchr(path, '/') - path), path);
    return system(cmd);
}

struct blob {
    const void *p;
    size_t n;
};

static int fill_blob(void *ctx, void *out, size_t nbytes)
{
    struct blob *b = ctx;
    if (b->n != nbytes)
        return -1;
    memcpy(out, b->p, nbytes);
    return 0;
}

static unsigned char *slurp(size_t *len)
{
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*len);
    assert_int_equal(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

static float w32[6] = {1, -2, 3.5f, 4, 5, 6};
static uint16_t w16[3] = {0x3c00, 0xc000, 0x3800}; /* 1, -2, 0.5 in f16 */
static uint16_t wbf[5] = {0x3f80, 0x4000, 0, 0x8000, 0x7f80};

static struct gguf_writer *sample(struct blob *b)
{
    struct gguf_writer *w = gguf_writer_new();
    assert_int_equal(gguf_set_str(w, "general.architecture", "llama"), 0);
    assert_int_equal(gguf_set_u32(w, "llama.block_count", 2), 0);
    assert_int_equal(gguf_set_i32(w, "neg", -5), 0);
    assert_int_equal(gguf_set_f32(w, "llama.rope.freq_base", 10000.0f), 0);
    assert_int_equal(gguf_set_bool(w, "tokenizer.ggml.add_bos_token", 1), 0);
    const char *toks[] = {"a", "\xc4\xa0the", ""};
    assert_int_equal(gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3), 0);
    int32_t types[] = {1, 3, 6};
    assert_int_equal(gguf_set_arr_i32(w, "tokenizer.ggml.token_type", types, 3), 0);
    float scores[] = {-1.5f, 0, 2};
    assert_int_equal(gguf_set_arr_f32(w, "tokenizer.ggml.scores", scores, 3), 0);
    b[0] = (struct blob){w32, sizeof w32};
    b[1] = (struct blob){w16, sizeof w16};
    b[2] = (struct blob){wbf, sizeof wbf};
    assert_int_equal(gguf_add_tensor(w, "blk.0.attn_q.weight", GGUF_T_F32, 2, (uint64_t[]){3, 2},
                                     fill_blob, &b[0]), 0);
    assert_int_equal(gguf_add_tensor(w, "output_norm.weight", GGUF_T_F16, 1, (uint64_t[]){3},
                                     fill_blob, &b[1]), 0);
    assert_int_equal(gguf_add_tensor(w, "x", GGUF_T_BF16, 1, (uint64_t[]){5}, fill_blob, &b[2]), 0);
    return w;
}

static void round_trip(void **state)
{
    (void)state;
    struct blob b[3];
    struct gguf_writer *w = sample(b);
    char err[256];
    assert_int_equal(gguf_write(w, path, err, sizeof err), 0);
    gguf_writer_free(w);
    gguf_writer_free(NULL);

    size_t len;
    unsigned char *raw = slurp(&len);
    assert_memory_equal(raw, "GGUF\x03\0\0\0", 8);
    assert_int_equal(raw[8], 3); /* tensor count, u64 LE */
    assert_int_equal(raw[16], 8); /* key count */
    free(raw);

    struct gguf_file *f = gguf_open(path, err, sizeof err);
    if (!f)
        fail_msg("%s", err);
    assert_int_equal(gguf_version(f), 3);
    assert_int_equal(gguf_kv_count(f), 8);
    assert_string_equal(gguf_kv_key(f, 0), "general.architecture");
    assert_string_equal(gguf_kv_str(f, (size_t)gguf_find(f, "general.architecture")), "llama");
    long k = gguf_find(f, "llama.block_count");
    assert_int_equal(gguf_kv_type(f, (size_t)k), GGUF_U32);
    assert_int_equal(gguf_kv_int(f, (size_t)k), 2);
    assert_int_equal(gguf_kv_int(f, (size_t)gguf_find(f, "neg")), -5);
    assert_true(gguf_kv_float(f, (size_t)gguf_find(f, "llama.rope.freq_base")) == 10000.0);
    assert_int_equal(gguf_kv_int(f, (size_t)gguf_find(f, "tokenizer.ggml.add_bos_token")), 1);
    k = gguf_find(f, "tokenizer.ggml.tokens");
    assert_int_equal(gguf_arr_type(f, (size_t)k), GGUF_STRING);
    assert_int_equal(gguf_arr_len(f, (size_t)k), 3);
    assert_string_equal(gguf_arr_str(f, (size_t)k, 1), "\xc4\xa0the");
    assert_string_equal(gguf_arr_str(f, (size_t)k, 2), "");
    assert_null(gguf_arr_str(f, (size_t)k, 3));
    k = gguf_find(f, "tokenizer.ggml.token_type");
    assert_int_equal(gguf_arr_int(f, (size_t)k, 2), 6);
    k = gguf_find(f, "tokenizer.ggml.scores");
    assert_true(gguf_arr_float(f, (size_t)k, 0) == -1.5);
    assert_int_equal(gguf_find(f, "missing"), -1);

    assert_int_equal(gguf_tensor_count(f), 3);
    const struct gguf_tensor_info *t = gguf_tensor_find(f, "blk.0.attn_q.weight");
    assert_non_null(t);
    assert_int_equal(t->type, GGUF_T_F32);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 3);
    assert_int_equal(t->ne[1], 2);
    assert_memory_equal(t->data, w32, sizeof w32);
    const struct gguf_tensor_info *t2 = gguf_tensor_at(f, 1);
    assert_string_equal(t2->name, "output_norm.weight");
    assert_memory_equal(t2->data, w16, sizeof w16);
    /* Each tensor's data starts 32-byte aligned from the data section,
     * which itself is 32-byte aligned in the file. */
    const struct gguf_tensor_info *t3 = gguf_tensor_find(f, "x");
    assert_int_equal(((const unsigned char *)t2->data - (const unsigned char *)t->data) % 32, 0);
    assert_int_equal(((const unsigned char *)t3->data - (const unsigned char *)t->data), 64);
    assert_memory_equal(t3->data, wbf, sizeof wbf);
    assert_null(gguf_tensor_find(f, "nope"));
    gguf_close(f);
    gguf_close(NULL);
}

static void expect_bad(unsigned char *buf, size_t len, const char *why)
{
    char err[256] = "";
    struct gguf_file *f = gguf_parse(buf, len, err, sizeof err);
    if (f)
        fail_msg("accepted a bad file (want \"%s\")", why);
    if (!strstr(err, why))
        fail_msg("error \"%s\" lacks \"%s\"", err, why);
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void malformed(void **state)
{
    (void)state;
    struct blob b[3];
    struct gguf_writer *w = sample(b);
    char err[256];
    assert_int_equal(gguf_write(w, path, err, sizeof err), 0);
    gguf_writer_free(w);
    size_t len;
    unsigned char *good = slurp(&len);
    unsigned char *buf = malloc(len);

    memcpy(buf, good, len);
    buf[0] = 'X';
    expect_bad(buf, len, "not a GGUF file");
    memcpy(buf, good, len);
    buf[4] = 9;
    expect_bad(buf, len, "version 9");
    memcpy(buf, good, len);
    put64(buf + 8, 1u << 30);
    expect_bad(buf, len, "over the limits");
    memcpy(buf, good, len);
    put64(buf + 16, 9); /* one key more than there is */
    expect_bad(buf, len, "");
    /* Truncations anywhere before the last tensor's data ends (only its
     * padding, 22 bytes, may go) fail cleanly and never crash. */
    for (size_t cut = 0; cut < len - 22; cut += 3) {
        char e[256];
        struct gguf_file *f = gguf_parse(good, cut, e, sizeof e);
        if (f)
            fail_msg("accepted a file cut at %zu", cut);
    }
    /* The first key's length field: absurdly long. */
    memcpy(buf, good, len);
    put64(buf + 24, (uint64_t)1 << 40);
    expect_bad(buf, len, "over the limit");
    /* Find the last tensor info's offset field and point it past the end. */
    memcpy(buf, good, len);
    unsigned char *name = memmem(buf, len, "\x01\0\0\0\0\0\0\0x", 9);
    assert_non_null(name);
    unsigned char *off = name + 9 + 4 + 8 + 4; /* name, n_dims, ne0, type */
    put64(off, 1 << 20);
    expect_bad(buf, len, "outside the file");
    put64(off, 33);
    expect_bad(buf, len, "outside the file"); /* misaligned */
    put64(off, 0);
    expect_bad(buf, len, "overlap");
    /* Unknown tensor type; a block type whose rows are no whole blocks. */
    memcpy(buf, good, len);
    off[-4] = 3; /* Q4_1 */
    expect_bad(buf, len, "not F32, F16, BF16, Q8_0, Q4_0, Q4_K or Q6_K");
    off[-4] = 2; /* Q4_0 */
    expect_bad(buf, len, "rows not whole blocks");
    /* Bad value type for a key. */
    memcpy(buf, good, len);
    unsigned char *key = memmem(buf, len, "general.architecture", 20);
    key[20] = 99;
    expect_bad(buf, len, "unknown value type");
    free(buf);
    free(good);

    /* The writer refuses bad tensors and then refuses to write. */
    w = gguf_writer_new();
    assert_int_equal(gguf_add_tensor(w, "q", (enum gguf_ttype)2, 1, (uint64_t[]){4}, fill_blob, NULL), -1);
    assert_int_equal(gguf_add_tensor(w, "z", GGUF_T_F32, 1, (uint64_t[]){0}, fill_blob, NULL), -1);
    assert_int_equal(gguf_add_tensor(w, "r", GGUF_T_F32, 5, (uint64_t[]){1, 1, 1, 1, 1}, fill_blob,
                                     NULL), -1);
    assert_int_equal(gguf_write(w, path, err, sizeof err), -1);
    gguf_writer_free(w);
    assert_null(gguf_open("/nonexistent.gguf", err, sizeof err));
}

static int fail_fill(void *ctx, void *out, size_t n)
{
    (void)ctx;
    (void)out;
    (void)n;
    return -1;
}

static void failed_fill_leaves_nothing(void **state)
{
    (void)state;
    unlink(path);
    struct gguf_writer *w = gguf_writer_new();
    assert_int_equal(gguf_add_tensor(w, "t", GGUF_T_F32, 1, (uint64_t[]){4}, fail_fill, NULL), 0);
    char err[256];
    assert_int_equal(gguf_write(w, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "could not be produced"));
    assert_int_not_equal(access(path, F_OK), 0);
    char tmp[160];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_not_equal(access(tmp, F_OK), 0);
    gguf_writer_free(w);
}

/* Floats asked for as integers saturate (a plain cast of 1e30 is undefined). */
static void float_values_as_integers(void **state)
{
    (void)state;
    struct gguf_writer *w = gguf_writer_new();
    gguf_set_f32(w, "big", 1e30f);
    gguf_set_f32(w, "small", -1e30f);
    gguf_set_f32(w, "nan", NAN);
    gguf_set_f32(w, "plain", -2.75f);
    float arr[] = {1e30f, NAN, 3.5f};
    gguf_set_arr_f32(w, "arr", arr, 3);
    char err[256];
    assert_int_equal(gguf_write(w, path, err, sizeof err), 0);
    gguf_writer_free(w);
    struct gguf_file *f = gguf_open(path, err, sizeof err);
    assert_non_null(f);
    assert_true(gguf_kv_int(f, (size_t)gguf_find(f, "big")) == INT64_MAX);
    assert_true(gguf_kv_int(f, (size_t)gguf_find(f, "small")) == INT64_MIN);
    assert_int_equal(gguf_kv_int(f, (size_t)gguf_find(f, "nan")), 0);
    assert_int_equal(gguf_kv_int(f, (size_t)gguf_find(f, "plain")), -2);
    long a = gguf_find(f, "arr");
    assert_true(gguf_arr_int(f, (size_t)a, 0) == INT64_MAX);
    assert_int_equal(gguf_arr_int(f, (size_t)a, 1), 0);
    assert_int_equal(gguf_arr_int(f, (size_t)a, 2), 3);
    gguf_close(f);
}

/* general.alignment lays the data out; a value that cannot be honoured is
 * refused when it is set. Repeated tensor names are refused when added. */
static void alignment_and_names(void **state)
{
    (void)state;
    struct blob b[3];
    struct gguf_writer *w = sample(b);
    assert_int_equal(gguf_set_u32(w, "general.alignment", 64), 0);
    char err[256];
    assert_int_equal(gguf_write(w, path, err, sizeof err), 0);
    gguf_writer_free(w);
    struct gguf_file *f = gguf_open(path, err, sizeof err);
    if (!f)
        fail_msg("%s", err);
    const unsigned char *first = gguf_tensor_at(f, 0)->data;
    for (size_t i = 1; i < gguf_tensor_count(f); i++)
        assert_int_equal(((const unsigned char *)gguf_tensor_at(f, i)->data - first) % 64, 0);
    assert_memory_equal(gguf_tensor_find(f, "x")->data, wbf, sizeof wbf);
    gguf_close(f);
    size_t len;
    unsigned char *raw = slurp(&len);
    assert_int_equal(((const unsigned char *)memmem(raw, len, w32, sizeof w32) - raw) % 64, 0);
    free(raw);

    w = gguf_writer_new();
    assert_int_equal(gguf_set_u32(w, "general.alignment", 0), -1);
    gguf_writer_free(w);
    w = gguf_writer_new();
    assert_int_equal(gguf_set_u32(w, "general.alignment", 48), -1);
    assert_int_equal(gguf_write(w, path, err, sizeof err), -1);
    gguf_writer_free(w);
    w = gguf_writer_new();
    assert_int_equal(gguf_set_str(w, "general.alignment", "32"), -1);
    gguf_writer_free(w);
    w = gguf_writer_new();
    assert_int_equal(gguf_set_u32(w, "general.alignment", 32), 0);
    assert_int_equal(gguf_set_u32(w, "general.alignment", 32), -1); /* once */
    gguf_writer_free(w);

    w = gguf_writer_new();
    assert_int_equal(gguf_add_tensor(w, "t", GGUF_T_F32, 1, (uint64_t[]){2}, fill_blob, b), 0);
    assert_int_equal(gguf_add_tensor(w, "t", GGUF_T_F32, 1, (uint64_t[]){2}, fill_blob, b), -1);
    assert_int_equal(gguf_write(w, path, err, sizeof err), -1);
    gguf_writer_free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),
        cmocka_unit_test(malformed),
        cmocka_unit_test(failed_fill_leaves_nothing),
        cmocka_unit_test(float_values_as_integers),
        cmocka_unit_test(alignment_and_names),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
