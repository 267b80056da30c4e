/* fuzz_gguf.c - libFuzzer driver for the GGUF writer and reader
 * (train/formats/gguf.h), used by `alallo export --format gguf`.
 *
 * Two kinds of input:
 *  - starting with "GGUF": a file image for gguf_parse. Property: no crash
 *    or bad access whatever the bytes; when it parses, every tensor lies in
 *    the buffer with nbytes = product(ne) x type size (whole blocks of each
 *    row for the quantized types), and every accessor
 *    (keys, scalars converted to int and float, array elements, tensor
 *    lookups) is safe to call on every index the file reports.
 *  - anything else: a recipe, read byte by byte, of key/value pairs and
 *    small tensors to give the writer (see run_recipe()). Properties: an add
 *    is refused exactly when its arguments break the header's contract, a
 *    refused add makes gguf_write fail with a reason, and a file that
 *    gguf_write accepts reads back (gguf_open and gguf_parse) with the same
 *    keys, types, values, tensor names, shapes and bytes, each tensor's data
 *    aligned (general.alignment, 32 by default) from the start of the file.
 *    The writer refuses a repeated tensor name and a general.alignment that
 *    is not a u32 power of two up to 65536 given once.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "train/formats/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_KV 24
#define MAX_T 12
#define MAX_ARR 16
#define MAX_STR 40

/* ---- reading arbitrary bytes -------------------------------------------- */

static size_t ttype_bytes(enum gguf_ttype t)
{
    return t == GGUF_T_F32 ? 4 : (t == GGUF_T_F16 || t == GGUF_T_BF16) ? 2 : 0;
}

/* ggml's block types: values and bytes per block (0 values: not one). */
static size_t block_values(enum gguf_ttype t, size_t *bytes)
{
    switch (t) {
    case GGUF_T_Q4_0: *bytes = 18; return 32;
    case GGUF_T_Q8_0: *bytes = 34; return 32;
    case GGUF_T_Q4_K: *bytes = 144; return 256;
    case GGUF_T_Q6_K: *bytes = 210; return 256;
    default: *bytes = 0; return 0;
    }
}

/* The bytes a parsed tensor must span: whole blocks of its rows. */
static bool nbytes_ok(const struct gguf_tensor_info *t, uint64_t count)
{
    size_t bytes, values = block_values(t->type, &bytes);
    if (values)
        return t->ne[0] % values == 0 && count / values * bytes == t->nbytes;
    return ttype_bytes(t->type) > 0 && count * ttype_bytes(t->type) == t->nbytes;
}

/* Calls every accessor on everything f reports; f parsed buf[0, len). */
static void walk(const struct gguf_file *f, const uint8_t *buf, size_t len)
{
    FUZZ_CHECK(gguf_version(f) == 2 || gguf_version(f) == 3);
    size_t nkv = gguf_kv_count(f);
    for (size_t i = 0; i < nkv; i++) {
        const char *key = gguf_kv_key(f, i);
        FUZZ_CHECK(key != NULL);
        long found = gguf_find(f, key);
        FUZZ_CHECK(found >= 0 && (size_t)found <= i);
        enum gguf_vtype t = gguf_kv_type(f, i);
        FUZZ_CHECK((unsigned)t < GGUF_VTYPE_COUNT);
        /* "Scalars of any integer, float or bool type, converted": the
         * conversions must be defined for every value a file can hold. */
        (void)gguf_kv_int(f, i);
        (void)gguf_kv_float(f, i);
        const char *s = gguf_kv_str(f, i);
        FUZZ_CHECK((s != NULL) == (t == GGUF_STRING));
        if (s)
            (void)strlen(s);
        size_t n = gguf_arr_len(f, i);
        FUZZ_CHECK(t == GGUF_ARRAY || n == 0);
        for (size_t k = 0; k < n && k < 64; k++) {
            if (gguf_arr_type(f, i) == GGUF_STRING) {
                const char *e = gguf_arr_str(f, i, k);
                FUZZ_CHECK(e != NULL);
                (void)strlen(e);
            } else {
                (void)gguf_arr_int(f, i, k);
                (void)gguf_arr_float(f, i, k);
            }
        }
        FUZZ_CHECK(gguf_arr_str(f, i, n) == NULL);
        FUZZ_CHECK(gguf_arr_int(f, i, n) == 0);
    }
    FUZZ_CHECK(gguf_kv_key(f, nkv) == NULL);
    size_t nt = gguf_tensor_count(f);
    for (size_t i = 0; i < nt; i++) {
        const struct gguf_tensor_info *t = gguf_tensor_at(f, i);
        FUZZ_CHECK(t != NULL && t->name != NULL);
        FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
        uint64_t count = 1;
        for (int d = 0; d < t->n_dims; d++)
            FUZZ_CHECK(!__builtin_mul_overflow(count, t->ne[d], &count));
        FUZZ_CHECK(nbytes_ok(t, count));
        const uint8_t *p = t->data;
        FUZZ_CHECK(p >= buf && p <= buf + len && t->nbytes <= (size_t)(buf + len - p));
        fuzz_touch(p, t->nbytes);
        FUZZ_CHECK(gguf_tensor_find(f, t->name) == t); /* names are unique */
    }
    FUZZ_CHECK(gguf_tensor_at(f, nt) == NULL);
}

static void fuzz_parse(const uint8_t *data, size_t size)
{
    /* A copy of its own size, so ASan sees reads past the end. */
    uint8_t *buf = malloc(size);
    FUZZ_CHECK(buf != NULL);
    memcpy(buf, data, size);
    char err[300] = "";
    struct gguf_file *f = gguf_parse(buf, size, err, sizeof err);
    if (f) {
        walk(f, buf, size);
        gguf_close(f);
    } else {
        /* A reason, as one line of valid UTF-8: export errors reach JSON. */
        FUZZ_CHECK(err[0] != '\0' && memchr(err, '\0', sizeof err) != NULL);
        FUZZ_CHECK(strchr(err, '\n') == NULL);
        if (!fuzz_utf8_valid((const uint8_t *)err, strlen(err))) {
            fprintf(stderr, "gguf_parse error is not valid UTF-8: %s\n", err);
            abort();
        }
    }
    free(buf);
}

/* ---- the write / read round trip ---------------------------------------- */

struct rd {
    const uint8_t *p;
    size_t n;
};

static uint8_t u8(struct rd *r)
{
    if (r->n == 0)
        return 0;
    r->n--;
    return *r->p++;
}

static uint32_t u32(struct rd *r)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)u8(r) << (8 * i);
    return v;
}

/* A string of up to `max` bytes from the input (NUL bytes become 'x': the
 * writer takes C strings); or, for keys, one of the names llama.cpp gives
 * meaning to. */
static void str(struct rd *r, char *out, size_t max, bool key)
{
    static const char *const known[] = {"general.architecture", "general.name",
                                        "llama.context_length", "tokenizer.ggml.tokens",
                                        "tokenizer.ggml.scores", "",
                                        "k", "general.alignment"};
    uint8_t b = u8(r);
    if (key && b < 0x40) {
        strcpy(out, known[b % 8]);
        return;
    }
    size_t len = b % (max + 1);
    for (size_t i = 0; i < len; i++) {
        char c = (char)u8(r);
        out[i] = c ? c : 'x';
    }
    out[len] = '\0';
}

struct ekv {
    char key[MAX_STR + 1];
    enum gguf_vtype type;
    int64_t i;
    float f;
    char s[MAX_STR + 1];
    enum gguf_vtype arr_type;
    size_t arr_len;
    int32_t ai[MAX_ARR];
    float af[MAX_ARR];
    char as[MAX_ARR][MAX_STR + 1];
};

struct et {
    char name[MAX_STR + 1];
    enum gguf_ttype type;
    int n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint32_t seed;
    bool fail; /* the fill callback reports failure */
    size_t nbytes;
};

struct recipe {
    struct ekv kv[MAX_KV];
    size_t n_kv;
    struct et t[MAX_T];
    size_t n_t;
    bool refused; /* an add was (rightly) refused */
    bool fill_fails;
    uint32_t alignment; /* general.alignment once accepted, else 0 */
};

static uint8_t pattern(uint32_t seed, size_t i)
{
    uint32_t x = seed ^ (uint32_t)(i * 2654435761u);
    x ^= x >> 15;
    x *= 0x2c1b3c6du;
    x ^= x >> 12;
    return (uint8_t)x;
}

static int fill(void *ctx, void *out, size_t nbytes)
{
    const struct et *t = ctx;
    FUZZ_CHECK(nbytes == t->nbytes); /* the writer asks for exactly the tensor */
    if (t->fail)
        return -1;
    uint8_t *o = out;
    for (size_t i = 0; i < nbytes; i++)
        o[i] = pattern(t->seed, i);
    return 0;
}

static bool floats_same(double got, float want)
{
    return isnan(want) ? isnan(got) : (float)got == want;
}

/* Applies one recipe step to the writer and to the expectation. */
static void step(struct rd *r, struct gguf_writer *w, struct recipe *e)
{
    uint8_t op = u8(r) % 10;
    if (op == 9) {
        if (e->n_t == MAX_T)
            return;
        struct et *t = &e->t[e->n_t];
        memset(t, 0, sizeof *t);
        str(r, t->name, MAX_STR, false);
        /* Q4_0 rows here (at most 5 values) are never whole blocks: refused */
        static const uint32_t types[] = {GGUF_T_F32, GGUF_T_F16, GGUF_T_BF16, GGUF_T_Q4_0};
        uint8_t tb = u8(r);
        t->type = (enum gguf_ttype)types[tb % 4];
        t->n_dims = u8(r) % 6; /* 0 and 5 are out of range */
        uint64_t ne[GGUF_MAX_DIMS + 1] = {0};
        bool ok = ttype_bytes(t->type) > 0 && t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS;
        size_t count = 1;
        for (int d = 0; d < t->n_dims && d < GGUF_MAX_DIMS; d++) {
            ne[d] = u8(r) % 6; /* 0 is refused */
            ok = ok && ne[d] > 0;
            count *= ne[d];
        }
        t->seed = u32(r);
        t->fail = (tb & 0xf0) == 0xf0;
        for (size_t i = 0; i < e->n_t; i++)
            ok = ok && strcmp(e->t[i].name, t->name) != 0; /* names are unique */
        int rc = gguf_add_tensor(w, t->name, t->type, t->n_dims, ne, fill, t);
        if (rc != (ok ? 0 : -1)) {
            fprintf(stderr, "gguf_add_tensor(\"%s\", type %d, %d dims) returned %d, want %d\n",
                    t->name, (int)t->type, t->n_dims, rc, ok ? 0 : -1);
            abort();
        }
        if (!ok) {
            e->refused = true;
            return;
        }
        memcpy(t->ne, ne, sizeof t->ne);
        t->nbytes = count * ttype_bytes(t->type);
        e->fill_fails |= t->fail;
        e->n_t++;
        return;
    }
    if (e->n_kv == MAX_KV)
        return;
    struct ekv *kv = &e->kv[e->n_kv];
    memset(kv, 0, sizeof *kv);
    str(r, kv->key, MAX_STR, true);
    /* general.alignment lays out the data: only a u32 power of two up to
     * 65536, given once, is taken. Every other add fails only when memory
     * runs out. */
    bool align_key = strcmp(kv->key, "general.alignment") == 0;
    bool ok = !align_key || (op == 0 && e->alignment == 0);
    int rc = 0;
    switch (op) {
    case 0:
        kv->type = GGUF_U32;
        kv->i = u32(r);
        if (align_key && (kv->i & 1)) /* mostly small powers of two, sometimes anything */
            kv->i = (int64_t)1 << (kv->i >> 1) % 18;
        if (align_key) {
            uint32_t v = (uint32_t)kv->i;
            ok = ok && v != 0 && (v & (v - 1)) == 0 && v <= 65536;
        }
        rc = gguf_set_u32(w, kv->key, (uint32_t)kv->i);
        break;
    case 1:
        kv->type = GGUF_I32;
        kv->i = (int32_t)u32(r);
        rc = gguf_set_i32(w, kv->key, (int32_t)kv->i);
        break;
    case 2: {
        kv->type = GGUF_F32;
        uint32_t bits = u32(r);
        memcpy(&kv->f, &bits, 4);
        rc = gguf_set_f32(w, kv->key, kv->f);
        break;
    }
    case 3:
        kv->type = GGUF_BOOL;
        kv->i = u8(r) & 1;
        rc = gguf_set_bool(w, kv->key, (int)kv->i);
        break;
    case 4:
    case 5:
        kv->type = GGUF_STRING;
        str(r, kv->s, MAX_STR, false);
        rc = gguf_set_str(w, kv->key, kv->s);
        break;
    case 6: {
        kv->type = GGUF_ARRAY;
        kv->arr_type = GGUF_STRING;
        kv->arr_len = u8(r) % (MAX_ARR + 1);
        const char *ptrs[MAX_ARR];
        for (size_t k = 0; k < kv->arr_len; k++) {
            str(r, kv->as[k], MAX_STR, false);
            ptrs[k] = kv->as[k];
        }
        rc = gguf_set_arr_str(w, kv->key, ptrs, kv->arr_len);
        break;
    }
    case 7:
        kv->type = GGUF_ARRAY;
        kv->arr_type = GGUF_I32;
        kv->arr_len = u8(r) % (MAX_ARR + 1);
        for (size_t k = 0; k < kv->arr_len; k++)
            kv->ai[k] = (int32_t)u32(r);
        rc = gguf_set_arr_i32(w, kv->key, kv->ai, kv->arr_len);
        break;
    default:
        kv->type = GGUF_ARRAY;
        kv->arr_type = GGUF_F32;
        kv->arr_len = u8(r) % (MAX_ARR + 1);
        for (size_t k = 0; k < kv->arr_len; k++) {
            uint32_t bits = u32(r);
            memcpy(&kv->af[k], &bits, 4);
        }
        rc = gguf_set_arr_f32(w, kv->key, kv->af, kv->arr_len);
        break;
    }
    if (rc != (ok ? 0 : -1)) {
        fprintf(stderr, "gguf_set (op %d) of \"%s\" returned %d, want %d\n", op, kv->key, rc,
                ok ? 0 : -1);
        abort();
    }
    if (!ok) {
        e->refused = true;
        return;
    }
    if (align_key)
        e->alignment = (uint32_t)kv->i;
    e->n_kv++;
}

/* Checks a file read back against the recipe. base: the file image when
 * parsed from memory (for alignment), or NULL. */
static void compare(const struct gguf_file *f, const struct recipe *e, const uint8_t *base)
{
    FUZZ_CHECK(gguf_version(f) == 3);
    FUZZ_CHECK(gguf_kv_count(f) == e->n_kv);
    for (size_t i = 0; i < e->n_kv; i++) {
        const struct ekv *kv = &e->kv[i];
        FUZZ_CHECK(strcmp(gguf_kv_key(f, i), kv->key) == 0);
        FUZZ_CHECK(gguf_kv_type(f, i) == kv->type);
        switch (kv->type) {
        case GGUF_U32:
        case GGUF_I32:
        case GGUF_BOOL:
            FUZZ_CHECK(gguf_kv_int(f, i) == kv->i);
            break;
        case GGUF_F32:
            FUZZ_CHECK(floats_same(gguf_kv_float(f, i), kv->f));
            break;
        case GGUF_STRING:
            FUZZ_CHECK(strcmp(gguf_kv_str(f, i), kv->s) == 0);
            break;
        default:
            FUZZ_CHECK(gguf_arr_type(f, i) == kv->arr_type);
            FUZZ_CHECK(gguf_arr_len(f, i) == kv->arr_len);
            for (size_t k = 0; k < kv->arr_len; k++) {
                if (kv->arr_type == GGUF_STRING)
                    FUZZ_CHECK(strcmp(gguf_arr_str(f, i, k), kv->as[k]) == 0);
                else if (kv->arr_type == GGUF_I32)
                    FUZZ_CHECK(gguf_arr_int(f, i, k) == kv->ai[k]);
                else
                    FUZZ_CHECK(floats_same(gguf_arr_float(f, i, k), kv->af[k]));
            }
        }
    }
    FUZZ_CHECK(gguf_tensor_count(f) == e->n_t);
    for (size_t i = 0; i < e->n_t; i++) {
        const struct et *t = &e->t[i];
        const struct gguf_tensor_info *g = gguf_tensor_at(f, i);
        FUZZ_CHECK(g != NULL && strcmp(g->name, t->name) == 0);
        FUZZ_CHECK(g->type == t->type && g->n_dims == t->n_dims && g->nbytes == t->nbytes);
        for (int d = 0; d < t->n_dims; d++)
            FUZZ_CHECK(g->ne[d] == t->ne[d]);
        const uint8_t *p = g->data;
        for (size_t b = 0; b < t->nbytes; b++)
            FUZZ_CHECK(p[b] == pattern(t->seed, b));
        size_t align = e->alignment ? e->alignment : GGUF_DEFAULT_ALIGNMENT;
        if (base)
            FUZZ_CHECK((size_t)(p - base) % align == 0);
    }
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    FUZZ_CHECK(fp != NULL);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    FUZZ_CHECK(n >= 0);
    uint8_t *b = malloc((size_t)n + 1);
    FUZZ_CHECK(b != NULL);
    FUZZ_CHECK(fread(b, 1, (size_t)n, fp) == (size_t)n);
    fclose(fp);
    *len = (size_t)n;
    return b;
}

/* The recipe: a sequence of steps, each an opcode byte then its operands
 * (see step()); the input running out ends it. */
static void run_recipe(const uint8_t *data, size_t size)
{
    static struct recipe e; /* large: keep it off the stack */
    memset(&e, 0, sizeof e);
    struct rd r = {data, size};
    struct gguf_writer *w = gguf_writer_new();
    FUZZ_CHECK(w != NULL);
    while (r.n > 0)
        step(&r, w, &e);
    char path[256], err[300] = "";
    fuzz_temp_path(path, sizeof path, "gguf");
    int rc = gguf_write(w, path, err, sizeof err);
    gguf_writer_free(w);
    if (e.refused || e.fill_fails) {
        if (rc != -1 || err[0] == '\0') {
            fprintf(stderr, "gguf_write after a refused add or failed fill: %d \"%s\"\n", rc,
                    err);
            abort();
        }
        FUZZ_CHECK(access(path, F_OK) != 0); /* nothing left behind */
        return;
    }
    if (rc != 0) {
        fprintf(stderr, "gguf_write failed: %s\n", err);
        abort();
    }
    struct gguf_file *f = gguf_open(path, err, sizeof err);
    if (!f) {
        fprintf(stderr, "gguf_open of what gguf_write wrote: %s\n", err);
        abort();
    }
    compare(f, &e, NULL);
    gguf_close(f);
    size_t len;
    uint8_t *img = slurp(path, &len);
    f = gguf_parse(img, len, err, sizeof err);
    if (!f) {
        fprintf(stderr, "gguf_parse of what gguf_write wrote: %s\n", err);
        abort();
    }
    compare(f, &e, img);
    walk(f, img, len);
    gguf_close(f);
    free(img);
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= 4 && memcmp(data, "GGUF", 4) == 0)
        fuzz_parse(data, size);
    else if (size <= 4096)
        run_recipe(data, size);
    return 0;
}
