/* gguf.c - GGUF v3 writer and reader (gguf.h).
 *
 * The writer serializes key/value pairs into a byte buffer as they are
 * added (so it owns no per-type tables) and keeps only each tensor's info
 * and fill callback. The reader walks the file with a bounds-checked cursor.
 */
#include "train/formats/gguf.h"
#include "core/fs.h"
#include "core/growbuf.h"
#include "core/text.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_VERSION 3
#define MAX_KV 1000000
#define MAX_TENSORS 1000000 /* checks below are O(n log n) */
#define MAX_STRING ((uint64_t)64 << 20)  /* one string, e.g. a chat template */
#define MAX_ARRAY ((uint64_t)1 << 28)    /* elements in one array */
#define MAX_NAME 256                     /* tensor names (llama.cpp uses 64) */

/* Values per block and bytes per block of a tensor type (ggml's block
 * formats, quant.h); 0 for a type alallo does not handle. */
static size_t ttype_block(enum gguf_ttype t, size_t *bytes)
{
    switch (t) {
    case GGUF_T_F32: *bytes = 4; return 1;
    case GGUF_T_F16:
    case GGUF_T_BF16: *bytes = 2; return 1;
    case GGUF_T_Q4_0: *bytes = 18; return 32;
    case GGUF_T_Q8_0: *bytes = 34; return 32;
    case GGUF_T_Q4_K: *bytes = 144; return 256;
    case GGUF_T_Q6_K: *bytes = 210; return 256;
    }
    *bytes = 0;
    return 0;
}

/* Bytes of a tensor of `count` values whose rows hold ne0; -1 for an
 * unknown type, rows that are no whole number of blocks, or overflow. */
static int tensor_nbytes(enum gguf_ttype t, uint64_t ne0, uint64_t count, uint64_t *out)
{
    size_t bytes, values = ttype_block(t, &bytes);
    if (values == 0 || ne0 % values != 0)
        return -1;
    return __builtin_mul_overflow(count / values, (uint64_t)bytes, out) ? -1 : 0;
}

static size_t vtype_size(enum gguf_vtype t)
{
    static const size_t sizes[GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return (unsigned)t < GGUF_VTYPE_COUNT ? sizes[t] : 0;
}

/* ---- writer ------------------------------------------------------------- */

struct wtensor {
    char *name;
    enum gguf_ttype type;
    int n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes;
    gguf_fill_fn fill;
    void *ctx;
};

struct gguf_writer {
    struct growbuf kv; /* serialized pairs; its size is the keys' added (GROWBUF_UNBOUNDED) */
    uint64_t n_kv;
    struct wtensor *t;
    size_t n_t, t_cap;
    uint32_t alignment; /* general.alignment, when set; else the default */
    int failed;         /* an add failed: gguf_write refuses */
};

struct gguf_writer *gguf_writer_new(void)
{
    struct gguf_writer *w = calloc(1, sizeof *w);
    if (w)
        growbuf_init(&w->kv, GROWBUF_UNBOUNDED);
    return w;
}

void gguf_writer_free(struct gguf_writer *w)
{
    if (!w)
        return;
    growbuf_free(&w->kv);
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->t);
    free(w);
}

static int put(struct gguf_writer *w, const void *p, size_t n)
{
    if (n == 0)
        return 0;
    if (growbuf_append(&w->kv, p, n)) {
        w->failed = 1;
        return -1;
    }
    return 0;
}

/* Little-endian integers, whatever the host. */
static int put_u32(struct gguf_writer *w, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    return put(w, b, 4);
}

static int put_u64(struct gguf_writer *w, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return put(w, b, 8);
}

static int put_str(struct gguf_writer *w, const char *s)
{
    size_t n = strlen(s);
    return put_u64(w, n) || put(w, s, n) ? -1 : 0;
}

#define ALIGNMENT_KEY "general.alignment"
#define MAX_ALIGNMENT 65536u

static int put_key(struct gguf_writer *w, const char *key, enum gguf_vtype t)
{
    /* The data layout follows general.alignment, so the key must be a u32
     * power of two, given once (gguf_set_u32 records it). */
    if (strcmp(key, ALIGNMENT_KEY) == 0 && (t != GGUF_U32 || w->alignment)) {
        w->failed = 1;
        return -1;
    }
    if (put_str(w, key) || put_u32(w, (uint32_t)t))
        return -1;
    w->n_kv++;
    return 0;
}

int gguf_set_u32(struct gguf_writer *w, const char *key, uint32_t v)
{
    if (strcmp(key, ALIGNMENT_KEY) == 0) {
        if (v == 0 || (v & (v - 1)) != 0 || v > MAX_ALIGNMENT) {
            w->failed = 1;
            return -1;
        }
        if (put_key(w, key, GGUF_U32) || put_u32(w, v))
            return -1;
        w->alignment = v;
        return 0;
    }
    return put_key(w, key, GGUF_U32) || put_u32(w, v) ? -1 : 0;
}

int gguf_set_i32(struct gguf_writer *w, const char *key, int32_t v)
{
    return put_key(w, key, GGUF_I32) || put_u32(w, (uint32_t)v) ? -1 : 0;
}

int gguf_set_f32(struct gguf_writer *w, const char *key, float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return put_key(w, key, GGUF_F32) || put_u32(w, u) ? -1 : 0;
}

int gguf_set_bool(struct gguf_writer *w, const char *key, int v)
{
    unsigned char b = v ? 1 : 0;
    return put_key(w, key, GGUF_BOOL) || put(w, &b, 1) ? -1 : 0;
}

int gguf_set_str(struct gguf_writer *w, const char *key, const char *v)
{
    return put_key(w, key, GGUF_STRING) || put_str(w, v) ? -1 : 0;
}

static int put_arr_head(struct gguf_writer *w, const char *key, enum gguf_vtype et, size_t n)
{
    return put_key(w, key, GGUF_ARRAY) || put_u32(w, (uint32_t)et) || put_u64(w, n) ? -1 : 0;
}

int gguf_set_arr_str(struct gguf_writer *w, const char *key, const char *const *v, size_t n)
{
    if (put_arr_head(w, key, GGUF_STRING, n))
        return -1;
    for (size_t i = 0; i < n; i++)
        if (put_str(w, v[i]))
            return -1;
    return 0;
}

int gguf_set_arr_i32(struct gguf_writer *w, const char *key, const int32_t *v, size_t n)
{
    if (put_arr_head(w, key, GGUF_I32, n))
        return -1;
    for (size_t i = 0; i < n; i++)
        if (put_u32(w, (uint32_t)v[i]))
            return -1;
    return 0;
}

int gguf_set_arr_f32(struct gguf_writer *w, const char *key, const float *v, size_t n)
{
    if (put_arr_head(w, key, GGUF_F32, n))
        return -1;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        if (put_u32(w, u))
            return -1;
    }
    return 0;
}

int gguf_add_tensor(struct gguf_writer *w, const char *name, enum gguf_ttype type, int n_dims,
                    const uint64_t *ne, gguf_fill_fn fill, void *ctx)
{
    uint64_t nbytes;
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS || !name ||
        strlen(name) >= MAX_NAME || !fill)
        goto bad;
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            goto bad; /* readers (ours, llama.cpp's) refuse a repeated name */
    uint64_t count = 1;
    for (int d = 0; d < n_dims; d++)
        if (ne[d] == 0 || __builtin_mul_overflow(count, ne[d], &count))
            goto bad;
    if (tensor_nbytes(type, ne[0], count, &nbytes) < 0)
        goto bad;
    if (w->n_t == w->t_cap) {
        size_t cap = w->t_cap ? w->t_cap * 2 : 64;
        struct wtensor *t = realloc(w->t, cap * sizeof *t);
        if (!t)
            goto bad;
        w->t = t;
        w->t_cap = cap;
    }
    struct wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name)
        goto bad;
    t->type = type;
    t->n_dims = n_dims;
    memcpy(t->ne, ne, (size_t)n_dims * sizeof *ne);
    t->nbytes = nbytes;
    t->fill = fill;
    t->ctx = ctx;
    w->n_t++;
    return 0;
bad:
    w->failed = 1;
    return -1;
}

static uint64_t align_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

int gguf_write(struct gguf_writer *w, const char *path, char *err, size_t errcap)
{
    if (w->failed) {
        text_error(err, errcap, "%s: a key or tensor could not be added (memory or bad shape)",
                   path);
        return -1;
    }
    /* The head: header, pairs, tensor infos; built in a second writer's
     * buffer to reuse the little-endian helpers. */
    struct gguf_writer h = {.kv = GROWBUF_INIT(GROWBUF_UNBOUNDED)};
    int rc = put(&h, GGUF_MAGIC, 4) || put_u32(&h, GGUF_VERSION) || put_u64(&h, w->n_t) ||
             put_u64(&h, w->n_kv) || put(&h, w->kv.p, w->kv.len);
    uint64_t align = w->alignment ? w->alignment : GGUF_DEFAULT_ALIGNMENT;
    unsigned char *zeros = calloc(align, 1);
    if (!zeros) {
        growbuf_free(&h.kv);
        text_error(err, errcap, "%s: out of memory", path);
        return -1;
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t && !rc; i++) {
        const struct wtensor *t = &w->t[i];
        rc = put_str(&h, t->name) || put_u32(&h, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims && !rc; d++)
            rc = put_u64(&h, t->ne[d]);
        rc = rc || put_u32(&h, (uint32_t)t->type) || put_u64(&h, off);
        off = align_up(off + t->nbytes, align);
    }
    size_t pad = (size_t)(align_up(h.kv.len, align) - h.kv.len);
    rc = rc || put(&h, zeros, pad);
    if (rc) {
        growbuf_free(&h.kv);
        free(zeros);
        text_error(err, errcap, "%s: out of memory", path);
        return -1;
    }
    char tmp[4200];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
        growbuf_free(&h.kv);
        free(zeros);
        text_error(err, errcap, "%s: path too long", path);
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        growbuf_free(&h.kv);
        free(zeros);
        text_error(err, errcap, "%s: %s", tmp, strerror(errno));
        return -1;
    }
    rc = fs_write_all(fd, h.kv.p, h.kv.len);
    growbuf_free(&h.kv);
    const char *why = rc ? strerror(errno) : NULL;
    void *buf = NULL;
    for (size_t i = 0; i < w->n_t && !rc; i++) {
        const struct wtensor *t = &w->t[i];
        free(buf);
        buf = malloc(t->nbytes ? t->nbytes : 1);
        if (!buf) {
            rc = -1;
            why = "out of memory";
            break;
        }
        if (t->fill(t->ctx, buf, t->nbytes) < 0) {
            rc = -1;
            why = "a tensor's data could not be produced";
            break;
        }
        size_t tpad = (size_t)(align_up(t->nbytes, align) - t->nbytes);
        if (fs_write_all(fd, buf, t->nbytes) < 0 || fs_write_all(fd, zeros, tpad) < 0) {
            rc = -1;
            why = strerror(errno);
        }
    }
    free(buf);
    free(zeros);
    if (!rc && fsync(fd) < 0) {
        rc = -1;
        why = strerror(errno);
    }
    if (close(fd) < 0 && !rc) {
        rc = -1;
        why = strerror(errno);
    }
    if (!rc && rename(tmp, path) < 0) {
        rc = -1;
        why = strerror(errno);
    }
    if (rc) {
        unlink(tmp);
        text_error(err, errcap, "%s: %s", path, why ? why : "write failed");
        return -1;
    }
    return 0;
}

/* ---- reader --------------------------------------------------------------- */

struct rkv {
    char *key;
    enum gguf_vtype type;
    union {
        int64_t i;
        double f;
    } v;
    char *str;              /* GGUF_STRING */
    enum gguf_vtype arr_type;
    uint64_t arr_len;
    const unsigned char *arr; /* numeric array elements, in the mapping */
    char **arr_str;         /* string array elements */
};

struct gguf_file {
    void *map;
    size_t map_len;
    uint32_t version;
    struct rkv *kv;
    size_t n_kv;
    struct gguf_tensor_info *t;
    size_t n_t;
};

/* Keys and names in a GGUF file are arbitrary bytes; error lines must be
 * plain text (they end up in JSON): anything outside printable ASCII
 * becomes '?', and long texts are cut. */
static const char *printable(const char *s, char *buf, size_t cap)
{
    size_t i = 0;
    for (; s[i] && i + 1 < cap; i++)
        buf[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
    buf[i] = '\0';
    return buf;
}

struct cursor {
    const unsigned char *p;
    size_t len, pos;
    char *err;
    size_t errcap;
};

static int need(struct cursor *c, uint64_t n, const char *what)
{
    if (n > c->len - c->pos) {
        text_error(c->err, c->errcap, "truncated file: %s at byte %zu", what, c->pos);
        return -1;
    }
    return 0;
}

static int get_u32(struct cursor *c, uint32_t *v, const char *what)
{
    if (need(c, 4, what))
        return -1;
    const unsigned char *p = c->p + c->pos;
    *v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    c->pos += 4;
    return 0;
}

static int get_u64(struct cursor *c, uint64_t *v, const char *what)
{
    if (need(c, 8, what))
        return -1;
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--)
        x = x << 8 | c->p[c->pos + (size_t)i];
    *v = x;
    c->pos += 8;
    return 0;
}

static char *get_str(struct cursor *c, uint64_t max, const char *what)
{
    uint64_t n;
    if (get_u64(c, &n, what))
        return NULL;
    if (n > max) {
        text_error(c->err, c->errcap, "%s of %llu bytes is over the limit", what,
                   (unsigned long long)n);
        return NULL;
    }
    if (need(c, n, what))
        return NULL;
    char *s = malloc(n + 1);
    if (!s) {
        text_error(c->err, c->errcap, "out of memory");
        return NULL;
    }
    memcpy(s, c->p + c->pos, n);
    s[n] = '\0';
    c->pos += n;
    return s;
}

/* A float as an integer: truncated, saturated at the int64 range, NaN as 0
 * (a plain cast is undefined for values that do not fit). */
static int64_t float_to_int(double d)
{
    if (isnan(d))
        return 0;
    if (d >= ldexp(1.0, 63))
        return INT64_MAX;
    if (d < -ldexp(1.0, 63))
        return INT64_MIN;
    return (int64_t)d;
}

static int64_t read_int(const unsigned char *p, enum gguf_vtype t)
{
    uint64_t u = 0;
    size_t n = vtype_size(t);
    for (size_t i = n; i-- > 0;)
        u = u << 8 | p[i];
    switch (t) {
    case GGUF_I8:
        return (int8_t)u;
    case GGUF_I16:
        return (int16_t)u;
    case GGUF_I32:
        return (int32_t)u;
    case GGUF_I64:
        return (int64_t)u;
    default:
        return (int64_t)u;
    }
}

static double read_float(const unsigned char *p, enum gguf_vtype t)
{
    if (t == GGUF_F32) {
        uint32_t u = (uint32_t)read_int(p, GGUF_U32);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    if (t == GGUF_F64) {
        uint64_t u = (uint64_t)read_int(p, GGUF_U64);
        double d;
        memcpy(&d, &u, 8);
        return d;
    }
    return (double)read_int(p, t);
}

static int parse_value(struct cursor *c, struct rkv *kv)
{
    if ((unsigned)kv->type >= GGUF_VTYPE_COUNT) {
        char shown[72];
        text_error(c->err, c->errcap, "key \"%s\": unknown value type %u",
               printable(kv->key, shown, sizeof shown), kv->type);
        return -1;
    }
    if (kv->type == GGUF_STRING) {
        kv->str = get_str(c, MAX_STRING, "string value");
        return kv->str ? 0 : -1;
    }
    if (kv->type != GGUF_ARRAY) {
        size_t n = vtype_size(kv->type);
        if (need(c, n, "value"))
            return -1;
        const unsigned char *p = c->p + c->pos;
        if (kv->type == GGUF_F32 || kv->type == GGUF_F64)
            kv->v.f = read_float(p, kv->type);
        else
            kv->v.i = read_int(p, kv->type);
        c->pos += n;
        return 0;
    }
    uint32_t et;
    if (get_u32(c, &et, "array type") || get_u64(c, &kv->arr_len, "array length"))
        return -1;
    kv->arr_type = (enum gguf_vtype)et;
    if (et >= GGUF_VTYPE_COUNT || et == GGUF_ARRAY || kv->arr_len > MAX_ARRAY) {
        char shown[72];
        text_error(c->err, c->errcap, "key \"%s\": unsupported array (type %u, %llu elements)",
               printable(kv->key, shown, sizeof shown), et, (unsigned long long)kv->arr_len);
        return -1;
    }
    if (et != GGUF_STRING) {
        uint64_t n = kv->arr_len * vtype_size(kv->arr_type);
        if (need(c, n, "array"))
            return -1;
        kv->arr = c->p + c->pos;
        c->pos += n;
        return 0;
    }
    /* Each string takes at least its 8-byte length: check before allocating. */
    if (need(c, kv->arr_len * 8, "string array"))
        return -1;
    kv->arr_str = calloc(kv->arr_len ? kv->arr_len : 1, sizeof *kv->arr_str);
    if (!kv->arr_str) {
        text_error(c->err, c->errcap, "out of memory");
        return -1;
    }
    for (uint64_t i = 0; i < kv->arr_len; i++)
        if (!(kv->arr_str[i] = get_str(c, MAX_STRING, "array string")))
            return -1;
    return 0;
}

struct span {
    uint64_t begin, end, idx;
};

static int cmp_span(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int cmp_span_name(const void *a, const void *b, void *ctx)
{
    const struct gguf_tensor_info *t = ctx;
    return strcmp(t[((const struct span *)a)->idx].name, t[((const struct span *)b)->idx].name);
}

static int parse_file(struct gguf_file *f, const unsigned char *buf, size_t len, char *err,
                      size_t errcap)
{
    struct cursor c = {.p = buf, .len = len, .err = err, .errcap = errcap};
    char shown[80], shown2[80];
    uint64_t n_t, n_kv;
    if (need(&c, 4, "magic") || memcmp(buf, GGUF_MAGIC, 4) != 0) {
        text_error(err, errcap, "not a GGUF file (no GGUF magic)");
        return -1;
    }
    c.pos = 4;
    if (get_u32(&c, &f->version, "version") || get_u64(&c, &n_t, "tensor count") ||
        get_u64(&c, &n_kv, "key count"))
        return -1;
    if (f->version != 2 && f->version != 3) {
        text_error(err, errcap, "GGUF version %u (only 2 and 3 are read)", f->version);
        return -1;
    }
    if (n_kv > MAX_KV || n_t > MAX_TENSORS) {
        text_error(err, errcap, "%llu keys and %llu tensors is over the limits",
               (unsigned long long)n_kv, (unsigned long long)n_t);
        return -1;
    }
    f->kv = calloc(n_kv ? n_kv : 1, sizeof *f->kv);
    f->t = calloc(n_t ? n_t : 1, sizeof *f->t);
    if (!f->kv || !f->t) {
        text_error(err, errcap, "out of memory");
        return -1;
    }
    uint64_t alignment = GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < n_kv; i++) {
        struct rkv *kv = &f->kv[i];
        uint32_t t;
        f->n_kv++;
        if (!(kv->key = get_str(&c, 65536, "key")) || get_u32(&c, &t, "value type"))
            return -1;
        kv->type = (enum gguf_vtype)t;
        if (parse_value(&c, kv))
            return -1;
        if (strcmp(kv->key, "general.alignment") == 0) {
            if (kv->type != GGUF_U32 || kv->v.i == 0 || (kv->v.i & (kv->v.i - 1)) != 0) {
                text_error(err, errcap, "general.alignment must be a power of two (u32)");
                return -1;
            }
            alignment = (uint64_t)kv->v.i;
        }
    }
    uint64_t *offs = calloc(n_t ? n_t : 1, sizeof *offs);
    if (!offs) {
        text_error(err, errcap, "out of memory");
        return -1;
    }
    int rc = -1;
    struct span *order = NULL;
    for (uint64_t i = 0; i < n_t; i++) {
        struct gguf_tensor_info *t = &f->t[i];
        uint32_t nd, type;
        f->n_t++;
        if (!(t->name = get_str(&c, MAX_NAME, "tensor name")) || get_u32(&c, &nd, "n_dims"))
            goto out;
        if (nd < 1 || nd > GGUF_MAX_DIMS) {
            text_error(err, errcap, "tensor \"%s\": %u dimensions",
                       printable(t->name, shown, sizeof shown), nd);
            goto out;
        }
        t->n_dims = (int)nd;
        uint64_t count = 1;
        for (uint32_t d = 0; d < nd; d++) {
            if (get_u64(&c, &t->ne[d], "dimension"))
                goto out;
            if (__builtin_mul_overflow(count, t->ne[d], &count)) {
                text_error(err, errcap, "tensor \"%s\": shape too large",
                           printable(t->name, shown, sizeof shown));
                goto out;
            }
        }
        if (get_u32(&c, &type, "tensor type") || get_u64(&c, &offs[i], "tensor offset"))
            goto out;
        t->type = (enum gguf_ttype)type;
        size_t unused;
        if (ttype_block(t->type, &unused) == 0) {
            text_error(err, errcap,
                       "tensor \"%s\": ggml type %u is not F32, F16, BF16, Q8_0, Q4_0, Q4_K or Q6_K",
                       printable(t->name, shown, sizeof shown), type);
            goto out;
        }
        uint64_t nbytes;
        if (tensor_nbytes(t->type, t->ne[0], count, &nbytes) < 0) {
            text_error(err, errcap, "tensor \"%s\": shape too large or rows not whole blocks",
                       printable(t->name, shown, sizeof shown));
            goto out;
        }
        t->nbytes = (size_t)nbytes;
    }
    uint64_t data = align_up(c.pos, alignment);
    if (data > len) {
        text_error(err, errcap, "truncated file: no data section");
        goto out;
    }
    for (uint64_t i = 0; i < n_t; i++) {
        struct gguf_tensor_info *t = &f->t[i];
        if (offs[i] % alignment != 0 || offs[i] > len - data || t->nbytes > len - data - offs[i]) {
            text_error(
                err, errcap, "tensor \"%s\": data at offset %llu (%zu bytes) is outside the file",
                printable(t->name, shown, sizeof shown), (unsigned long long)offs[i], t->nbytes);
            goto out;
        }
        t->data = buf + data + offs[i];
    }
    /* Overlaps: in offset order, each tensor must end before the next starts. */
    order = malloc((n_t ? n_t : 1) * sizeof *order);
    if (!order) {
        text_error(err, errcap, "out of memory");
        goto out;
    }
    for (uint64_t i = 0; i < n_t; i++)
        order[i] = (struct span){offs[i], offs[i] + f->t[i].nbytes, i};
    qsort_r(order, n_t, sizeof *order, cmp_span_name, f->t);
    for (uint64_t i = 1; i < n_t; i++)
        if (strcmp(f->t[order[i].idx].name, f->t[order[i - 1].idx].name) == 0) {
            text_error(err, errcap, "tensor \"%s\" appears twice",
                   printable(f->t[order[i].idx].name, shown, sizeof shown));
            goto out;
        }
    qsort(order, n_t, sizeof *order, cmp_span);
    for (uint64_t i = 1; i < n_t; i++)
        if (order[i].begin < order[i - 1].end) {
            text_error(err, errcap, "tensors \"%s\" and \"%s\" overlap",
                   printable(f->t[order[i - 1].idx].name, shown, sizeof shown),
                   printable(f->t[order[i].idx].name, shown2, sizeof shown2));
            goto out;
        }
    rc = 0;
out:
    free(order);
    free(offs);
    return rc;
}

struct gguf_file *gguf_parse(const void *buf, size_t len, char *err, size_t errcap)
{
    struct gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        text_error(err, errcap, "out of memory");
        return NULL;
    }
    if (parse_file(f, buf, len, err, errcap) < 0) {
        gguf_close(f);
        return NULL;
    }
    return f;
}

struct gguf_file *gguf_open(const char *path, char *err, size_t errcap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        text_error(err, errcap, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size < 24) {
        text_error(err, errcap, "%s: not a GGUF file", path);
        close(fd);
        return NULL;
    }
    size_t len = (size_t)sb.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        text_error(err, errcap, "%s: mmap: %s", path, strerror(errno));
        return NULL;
    }
    char why[300];
    struct gguf_file *f = gguf_parse(map, len, why, sizeof why);
    if (!f) {
        munmap(map, len);
        text_error(err, errcap, "%s: %s", path, why);
        return NULL;
    }
    f->map = map;
    f->map_len = len;
    return f;
}

void gguf_close(struct gguf_file *f)
{
    if (!f)
        return;
    for (size_t i = 0; i < f->n_kv; i++) {
        struct rkv *kv = &f->kv[i];
        free(kv->key);
        free(kv->str);
        if (kv->arr_str)
            for (uint64_t k = 0; k < kv->arr_len; k++)
                free(kv->arr_str[k]);
        free(kv->arr_str);
    }
    free(f->kv);
    for (size_t i = 0; i < f->n_t; i++)
        free(f->t[i].name);
    free(f->t);
    if (f->map)
        munmap(f->map, f->map_len);
    free(f);
}

uint32_t gguf_version(const struct gguf_file *f)
{
    return f->version;
}

size_t gguf_kv_count(const struct gguf_file *f)
{
    return f->n_kv;
}

const char *gguf_kv_key(const struct gguf_file *f, size_t i)
{
    return i < f->n_kv ? f->kv[i].key : NULL;
}

long gguf_find(const struct gguf_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_kv; i++)
        if (strcmp(f->kv[i].key, key) == 0)
            return (long)i;
    return -1;
}

enum gguf_vtype gguf_kv_type(const struct gguf_file *f, size_t i)
{
    return i < f->n_kv ? f->kv[i].type : GGUF_VTYPE_COUNT;
}

int64_t gguf_kv_int(const struct gguf_file *f, size_t i)
{
    if (i >= f->n_kv)
        return 0;
    const struct rkv *kv = &f->kv[i];
    if (kv->type == GGUF_F32 || kv->type == GGUF_F64)
        return float_to_int(kv->v.f);
    return kv->type == GGUF_STRING || kv->type == GGUF_ARRAY ? 0 : kv->v.i;
}

double gguf_kv_float(const struct gguf_file *f, size_t i)
{
    if (i >= f->n_kv)
        return 0;
    const struct rkv *kv = &f->kv[i];
    if (kv->type == GGUF_F32 || kv->type == GGUF_F64)
        return kv->v.f;
    return kv->type == GGUF_STRING || kv->type == GGUF_ARRAY ? 0 : (double)kv->v.i;
}

const char *gguf_kv_str(const struct gguf_file *f, size_t i)
{
    return i < f->n_kv ? f->kv[i].str : NULL;
}

enum gguf_vtype gguf_arr_type(const struct gguf_file *f, size_t i)
{
    return i < f->n_kv && f->kv[i].type == GGUF_ARRAY ? f->kv[i].arr_type : GGUF_VTYPE_COUNT;
}

size_t gguf_arr_len(const struct gguf_file *f, size_t i)
{
    return i < f->n_kv && f->kv[i].type == GGUF_ARRAY ? (size_t)f->kv[i].arr_len : 0;
}

int64_t gguf_arr_int(const struct gguf_file *f, size_t i, size_t k)
{
    if (gguf_arr_len(f, i) <= k || !f->kv[i].arr)
        return 0;
    const struct rkv *kv = &f->kv[i];
    const unsigned char *p = kv->arr + k * vtype_size(kv->arr_type);
    if (kv->arr_type == GGUF_F32 || kv->arr_type == GGUF_F64)
        return float_to_int(read_float(p, kv->arr_type));
    return read_int(p, kv->arr_type);
}

double gguf_arr_float(const struct gguf_file *f, size_t i, size_t k)
{
    if (gguf_arr_len(f, i) <= k || !f->kv[i].arr)
        return 0;
    const struct rkv *kv = &f->kv[i];
    return read_float(kv->arr + k * vtype_size(kv->arr_type), kv->arr_type);
}

const char *gguf_arr_str(const struct gguf_file *f, size_t i, size_t k)
{
    if (gguf_arr_len(f, i) <= k || !f->kv[i].arr_str)
        return NULL;
    return f->kv[i].arr_str[k];
}

size_t gguf_tensor_count(const struct gguf_file *f)
{
    return f->n_t;
}

const struct gguf_tensor_info *gguf_tensor_at(const struct gguf_file *f, size_t i)
{
    return i < f->n_t ? &f->t[i] : NULL;
}

const struct gguf_tensor_info *gguf_tensor_find(const struct gguf_file *f, const char *name)
{
    for (size_t i = 0; i < f->n_t; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}
