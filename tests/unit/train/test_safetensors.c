/* test_safetensors.c - round trips, header validation and the 16-bit
 * conversions of train/formats/safetensors.c. */
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

#include "train/formats/safetensors.h"

static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/alallo-st-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd);
}

static void round_trip(void **state)
{
    (void)state;
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[3] = {st_f32_to_bf16(1.5f), st_f32_to_bf16(-2.0f), st_f32_to_bf16(0.25f)};
    int64_t c = 42;
    struct st_tensor t[3] = {
        {.name = "w", .dtype = ST_F32, .ndim = 2, .shape = {2, 3}, .data = a, .nbytes = sizeof a},
        {.name = "b", .dtype = ST_BF16, .ndim = 1, .shape = {3}, .data = b, .nbytes = sizeof b},
        {.name = "scalar", .dtype = ST_I64, .ndim = 0, .data = &c, .nbytes = 8},
    };
    const char *meta[] = {"format", "pt", "note", "a \"quoted\" value", NULL};
    char path[300], err[256];
    snprintf(path, sizeof path, "%s/m.safetensors", tmpdir);
    assert_int_equal(st_write(path, t, 3, meta, err, sizeof err), 0);

    char tmp[320];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_not_equal(access(tmp, F_OK), 0); /* the temporary name is gone */

    /* The data must start 8-byte aligned and the padding be spaces. */
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    unsigned char lb[8];
    assert_int_equal(fread(lb, 1, 8, fp), 8);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | lb[i];
    assert_int_equal((8 + hlen) % 8, 0);
    char *hdr = malloc(hlen + 1);
    assert_int_equal(fread(hdr, 1, hlen, fp), hlen);
    hdr[hlen] = 0;
    fclose(fp);
    assert_true(hdr[hlen - 1] == '}' || hdr[hlen - 1] == ' ');
    assert_non_null(strstr(hdr, "\"__metadata__\""));
    free(hdr);

    struct st_file *f = st_open(path, err, sizeof err);
    assert_non_null(f);
    assert_int_equal(st_count(f), 3);
    assert_string_equal(st_metadata(f, "format"), "pt");
    assert_string_equal(st_metadata(f, "note"), "a \"quoted\" value");
    assert_null(st_metadata(f, "missing"));
    const struct st_tensor *w = st_find(f, "w");
    assert_non_null(w);
    assert_int_equal(w->dtype, ST_F32);
    assert_int_equal(w->ndim, 2);
    assert_int_equal(w->shape[0], 2);
    assert_int_equal(w->shape[1], 3);
    assert_memory_equal(w->data, a, sizeof a);
    const struct st_tensor *bt = st_find(f, "b");
    assert_non_null(bt);
    uint16_t b1;
    memcpy(&b1, (const char *)bt->data + 2, 2);
    assert_true(st_bf16_to_f32(b1) == -2.0f);
    const struct st_tensor *s = st_find(f, "scalar");
    assert_non_null(s);
    assert_int_equal(s->ndim, 0);
    int64_t got;
    memcpy(&got, s->data, 8); /* packed after a 6-byte tensor: not aligned */
    assert_int_equal(got, 42);
    assert_null(st_find(f, "nope"));
    /* st_at walks tensors in file order: w, b, scalar. */
    assert_string_equal(st_at(f, 0)->name, "w");
    assert_string_equal(st_at(f, 2)->name, "scalar");
    assert_null(st_at(f, 3));
    st_close(f);
    st_close(NULL);
}

static void write_rejects_bad_tensors(void **state)
{
    (void)state;
    float a[4] = {0};
    char path[300], err[256];
    snprintf(path, sizeof path, "%s/bad.safetensors", tmpdir);
    struct st_tensor t = {.name = "x", .dtype = ST_F32, .ndim = 1, .shape = {5}, .data = a,
                          .nbytes = sizeof a};
    assert_int_equal(st_write(path, &t, 1, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "\"x\""));
    struct st_tensor two[2] = {
        {.name = "x", .dtype = ST_F32, .ndim = 1, .shape = {4}, .data = a, .nbytes = sizeof a},
        {.name = "x", .dtype = ST_F32, .ndim = 1, .shape = {4}, .data = a, .nbytes = sizeof a},
    };
    assert_int_equal(st_write(path, two, 2, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "twice"));
    assert_int_not_equal(access(path, F_OK), 0);
}

/* st_write_each: tensors without data are made by fill as they are written,
 * one at a time into one buffer the caller owns; a fill that fails leaves
 * no file. */
struct fill_log {
    float buf[4];
    int calls;
    size_t fail_at; /* the tensor whose fill fails, else a large number */
};

static const void *fill_count(void *ctx, size_t i)
{
    struct fill_log *f = ctx;
    if (i == f->fail_at)
        return NULL;
    f->calls++;
    for (int k = 0; k < 4; k++)
        f->buf[k] = (float)(10 * i + (size_t)k);
    return f->buf;
}

static void write_each_fills_one_at_a_time(void **state)
{
    (void)state;
    float given[4] = {7, 7, 7, 7};
    struct st_tensor t[3] = {
        {.name = "a", .dtype = ST_F32, .ndim = 1, .shape = {4}, .nbytes = sizeof given},
        {.name = "given", .dtype = ST_F32, .ndim = 1, .shape = {4}, .data = given,
         .nbytes = sizeof given},
        {.name = "c", .dtype = ST_F32, .ndim = 2, .shape = {2, 2}, .nbytes = sizeof given},
    };
    char path[300], err[256];
    snprintf(path, sizeof path, "%s/each.safetensors", tmpdir);
    assert_int_equal(st_write(path, t, 3, NULL, err, sizeof err), -1); /* no data, no fill */
    struct fill_log log = {.fail_at = 99};
    assert_int_equal(st_write_each(path, t, 3, NULL, fill_count, &log, err, sizeof err), 0);
    assert_int_equal(log.calls, 2);
    struct st_file *f = st_open(path, err, sizeof err);
    assert_non_null(f);
    const float want_a[4] = {0, 1, 2, 3}, want_c[4] = {20, 21, 22, 23};
    assert_memory_equal(st_find(f, "a")->data, want_a, sizeof want_a);
    assert_memory_equal(st_find(f, "given")->data, given, sizeof given);
    assert_memory_equal(st_find(f, "c")->data, want_c, sizeof want_c);
    st_close(f);

    char other[300];
    snprintf(other, sizeof other, "%s/fails.safetensors", tmpdir);
    log = (struct fill_log){.fail_at = 2};
    assert_int_equal(st_write_each(other, t, 3, NULL, fill_count, &log, err, sizeof err), -1);
    assert_non_null(strstr(err, "\"c\""));
    assert_int_not_equal(access(other, F_OK), 0);
    char tmp[320];
    snprintf(tmp, sizeof tmp, "%s.tmp", other);
    assert_int_not_equal(access(tmp, F_OK), 0);
}

/* Builds a file image: 8-byte length, the header text, then `data_len` bytes. */
static unsigned char *image(const char *header, size_t data_len, size_t *len)
{
    size_t h = strlen(header);
    *len = 8 + h + data_len;
    unsigned char *b = calloc(1, *len);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, header, h);
    return b;
}

static void expect_reject(const char *header, size_t data_len, const char *why)
{
    size_t len;
    unsigned char *b = image(header, data_len, &len);
    char err[256] = "";
    struct st_file *f = st_parse(b, len, err, sizeof err);
    if (f)
        fail_msg("accepted: %s", header);
    if (!strstr(err, why))
        fail_msg("header %s: error \"%s\" lacks \"%s\"", header, err, why);
    free(b);
}

static void malformed_headers(void **state)
{
    (void)state;
    expect_reject("{\"a\"", 0, "not valid JSON");
    expect_reject("{", 0, "too small");
    expect_reject("[1,2]", 0, "not a JSON object");
    expect_reject("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "past the data");
    expect_reject("{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "need 12 bytes");
    expect_reject("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "begin <= end");
    expect_reject("{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "bad dimension");
    expect_reject("{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,2],\"data_offsets\":[0,8]}}", 8,
                  "dimensions");
    expect_reject("{\"x\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "unsupported dtype");
    expect_reject("{\"x\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "needs dtype");
    expect_reject("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "data_offsets");
    expect_reject("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                  12, "overlap");
    expect_reject("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                  8, "not valid JSON");
    expect_reject("{\"__metadata__\":{\"a\":1}}", 0, "not a string");
    expect_reject("{\"x\":{\"dtype\":\"U8\",\"shape\":[1099511627777],\"data_offsets\":[0,0]}}",
                  0, "bad dimension");
    expect_reject("{\"x\":{\"dtype\":\"U8\",\"shape\":[1099511627776,1099511627776],"
                  "\"data_offsets\":[0,0]}}",
                  0, "shape too large");
    expect_reject("{\"x\":5}", 0, "not an object");
    /* A name with a newline is reported on one line. */
    expect_reject("{\"a\\nb\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1,
                  "tensor \"a?b\": shape and dtype need 2 bytes");

    /* Length fields that lie. */
    char err[256];
    unsigned char small[4] = {0};
    assert_null(st_parse(small, sizeof small, err, sizeof err));
    assert_non_null(strstr(err, "too short"));
    unsigned char big[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'};
    assert_null(st_parse(big, sizeof big, err, sizeof err));
    assert_non_null(strstr(err, "100 MiB"));
    unsigned char past[16] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    assert_null(st_parse(past, sizeof past, err, sizeof err));
    assert_non_null(strstr(err, "does not fit"));

    /* A valid minimal one, and an empty-tensor file, are accepted. */
    size_t len;
    unsigned char *b = image("{\"x\":{\"dtype\":\"I8\",\"shape\":[0],\"data_offsets\":[0,0]}}  ", 0, &len);
    struct st_file *f = st_parse(b, len, err, sizeof err);
    assert_non_null(f);
    assert_int_equal(st_find(f, "x")->nbytes, 0);
    st_close(f);
    free(b);
}

static void open_reports_path(void **state)
{
    (void)state;
    char path[300], err[256];
    snprintf(path, sizeof path, "%s/trunc.safetensors", tmpdir);
    FILE *fp = fopen(path, "wb");
    fputs("\x40\0\0\0\0\0\0\0{", fp);
    fclose(fp);
    assert_null(st_open(path, err, sizeof err));
    assert_non_null(strstr(err, path));
    snprintf(path, sizeof path, "%s/missing.safetensors", tmpdir);
    assert_null(st_open(path, err, sizeof err));
    assert_non_null(strstr(err, "No such file"));
}

/* Resident bytes of this process (/proc/self/statm). */
static long resident_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    assert_non_null(f);
    assert_int_equal(fscanf(f, "%ld %ld", &size, &res), 2);
    fclose(f);
    return res * sysconf(_SC_PAGESIZE);
}

/* A tensor read once is given back: its pages of the mapping leave the
 * process's resident memory, and its values stay readable. */
static void release_gives_pages_back(void **state)
{
    (void)state;
    size_t n = (size_t)8 << 20; /* 32 MiB of F32 */
    float *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(i % 1000);
    struct st_tensor t = {.name = "big", .dtype = ST_F32, .ndim = 1, .shape = {(int64_t)n},
                          .data = v, .nbytes = n * sizeof *v};
    char path[300], err[256];
    snprintf(path, sizeof path, "%s/big.safetensors", tmpdir);
    assert_int_equal(st_write(path, &t, 1, NULL, err, sizeof err), 0);
    free(v);
    struct st_file *f = st_open(path, err, sizeof err);
    assert_non_null(f);
    const struct st_tensor *big = st_find(f, "big");
    assert_non_null(big);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += ((const float *)big->data)[i];
    long held = resident_bytes();
    st_release(f, big);
    long after = resident_bytes();
    if (held - after < 24L << 20)
        fail_msg("resident %ld bytes before the release and %ld after", held, after);
    double again = 0.0;
    for (size_t i = 0; i < n; i++)
        again += ((const float *)big->data)[i];
    assert_true(again == sum);
    st_close(f);
}

static void bf16_conversions(void **state)
{
    (void)state;
    assert_int_equal(st_f32_to_bf16(1.0f), 0x3f80);
    assert_true(st_bf16_to_f32(0x3f80) == 1.0f);
    assert_true(st_bf16_to_f32(0xc000) == -2.0f);
    /* 1 + 2^-8 is exactly half way between bf16 1.0 and 1.0078125: ties to even (1.0). */
    assert_int_equal(st_f32_to_bf16(1.00390625f), 0x3f80);
    /* 1 + 3*2^-8 is half way between 1.0078125 (odd) and 1.015625: rounds up to even. */
    assert_int_equal(st_f32_to_bf16(1.01171875f), 0x3f82);
    assert_int_equal(st_f32_to_bf16(1.0f + 1.0f / 256 + 1.0f / 65536), 0x3f81);
    assert_true(isnan(st_bf16_to_f32(st_f32_to_bf16(NAN))));
    assert_true(isinf(st_bf16_to_f32(st_f32_to_bf16(INFINITY))));
    /* Every bf16 value survives f32 and back. */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = st_bf16_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        assert_int_equal(st_f32_to_bf16(f), h);
    }
}

static void f16_conversions(void **state)
{
    (void)state;
    assert_int_equal(st_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(st_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(st_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(st_f32_to_f16(65520.0f), 0x7c00); /* rounds to inf */
    assert_int_equal(st_f32_to_f16(1e-8f), 0);          /* underflow */
    assert_true(st_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    assert_int_equal(st_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
    assert_int_equal(st_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);        /* tie to even: 0 */
    assert_int_equal(st_f32_to_f16(ldexpf(3.0f, -25)), 0x0002);        /* tie to even: 2 */
    assert_int_equal(st_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00); /* tie to even */
    assert_int_equal(st_f32_to_f16(1.0f + ldexpf(3.0f, -11)), 0x3c02);
    assert_true(isnan(st_f16_to_f32(st_f32_to_f16(NAN))));
    for (uint32_t h = 0; h < 65536; h++) {
        float f = st_f16_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        assert_int_equal(st_f32_to_f16(f), h);
    }
    assert_int_equal(st_dtype_size(ST_BF16), 2);
    assert_string_equal(st_dtype_name(ST_I64), "I64");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),          cmocka_unit_test(write_rejects_bad_tensors),
        cmocka_unit_test(malformed_headers),   cmocka_unit_test(open_reports_path),
        cmocka_unit_test(bf16_conversions),    cmocka_unit_test(f16_conversions),
        cmocka_unit_test(release_gives_pages_back),
        cmocka_unit_test(write_each_fills_one_at_a_time),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
