/* safetensors.c - the safetensors reader (mmap + validation) and the atomic
 * writer behind safetensors.h.
 *
 * Reading never trusts the file: the header length, every dtype, shape and
 * offset pair is checked, and the tensors' byte ranges must not overlap,
 * before st_open/st_parse return. A caller may then use every st_tensor's
 * data/nbytes without further checks.
 */
#include "train/formats/safetensors.h"
#include "core/fs.h"
#include "core/text.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER (100u * 1024 * 1024) /* the format's own cap */
#define ST_MAX_TENSORS 1000000             /* far above any real model */
#define ST_MAX_META 4096                   /* metadata entries kept */

struct st_meta {
    char *key;
    char *value;
};

struct st_file {
    void *map; /* mmap'd file (st_open) or NULL (st_parse) */
    size_t map_len;
    struct st_tensor *t; /* sorted by data offset */
    size_t n;
    size_t *by_name; /* indices into t sorted by name, for st_find */
    struct st_meta *meta;
    size_t n_meta;
};

static const char *const dtype_names[ST_DTYPE_COUNT] = {"F32", "F16", "BF16", "I32",
                                                        "I64", "U8",  "I8"};
static const size_t dtype_sizes[ST_DTYPE_COUNT] = {4, 2, 2, 4, 8, 1, 1};

size_t st_dtype_size(enum st_dtype t)
{
    return (unsigned)t < ST_DTYPE_COUNT ? dtype_sizes[t] : 0;
}

const char *st_dtype_name(enum st_dtype t)
{
    return (unsigned)t < ST_DTYPE_COUNT ? dtype_names[t] : "?";
}

static int dtype_parse(const char *s, enum st_dtype *out)
{
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (strcmp(s, dtype_names[i]) == 0) {
            *out = (enum st_dtype)i;
            return 0;
        }
    return -1;
}

/* ---- conversions -------------------------------------------------------- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float st_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t st_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it a (quiet) NaN */
        return (uint16_t)((u >> 16) | 0x40);
    /* Round to nearest, ties to even: add 0x7fff plus the lowest kept bit. */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float st_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        if (man == 0)
            return bits_f32(sign);
        /* Subnormal: value = man * 2^-24, exact in f32. */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31)
        return bits_f32(sign | 0x7f800000u | (man << 13));
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t st_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t exp = (u >> 23) & 0xffu;
    uint32_t man = u & 0x7fffffu;
    if (exp == 255) /* inf or NaN */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u); /* overflow to inf */
    if (e <= 0) {
        /* Subnormal or zero in f16: shift the full mantissa into place and
         * round to nearest even on the bits shifted out. */
        if (e < -10)
            return sign;
        uint32_t m = man | 0x800000u;
        int shift = 14 - e; /* 14..24 */
        uint32_t half = 1u << (shift - 1);
        uint32_t rest = m & ((1u << shift) - 1);
        uint32_t q = m >> shift;
        if (rest > half || (rest == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t q = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (q & 1u)))
        q++; /* may carry into the exponent, which rounds up correctly, even to inf */
    return (uint16_t)(sign | q);
}

/* ---- reading ------------------------------------------------------------ */

static int cmp_offset(const void *a, const void *b)
{
    const struct st_tensor *x = a, *y = b;
    const char *px = x->data, *py = y->data;
    if (px != py)
        return px < py ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int cmp_name(const void *a, const void *b, void *ctx)
{
    const struct st_tensor *t = ctx;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    return strcmp(t[i].name, t[j].name);
}

static void file_free_tables(struct st_file *f)
{
    free(f->t);
    free(f->by_name);
    for (size_t i = 0; i < f->n_meta; i++) {
        free(f->meta[i].key);
        free(f->meta[i].value);
    }
    free(f->meta);
}

/* Reads one JSON integer that must be a non-negative int64. */
static int json_u64(json_t *v, uint64_t *out)
{
    if (!json_is_integer(v))
        return -1;
    json_int_t x = json_integer_value(v);
    if (x < 0)
        return -1;
    *out = (uint64_t)x;
    return 0;
}

static int parse_tensor(struct st_tensor *t, const char *name, json_t *v, const char *data,
                        uint64_t data_len, char *err, size_t cap)
{
    if (strlen(name) >= ST_MAX_NAME) {
        text_error(err, cap, "tensor name longer than %d bytes", ST_MAX_NAME - 1);
        return -1;
    }
    snprintf(t->name, sizeof t->name, "%s", name);
    if (!json_is_object(v)) {
        text_error(err, cap, "tensor \"%s\": header entry is not an object", name);
        return -1;
    }
    json_t *dt = json_object_get(v, "dtype");
    json_t *sh = json_object_get(v, "shape");
    json_t *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(sh) || !json_is_array(off)) {
        text_error(err, cap, "tensor \"%s\": needs dtype, shape and data_offsets", name);
        return -1;
    }
    if (dtype_parse(json_string_value(dt), &t->dtype) < 0) {
        text_error(err, cap, "tensor \"%s\": unsupported dtype \"%.*s\"", name,
               text_utf8_prefix(json_string_value(dt), 20), json_string_value(dt));
        return -1;
    }
    size_t nd = json_array_size(sh);
    if (nd > ST_MAX_DIMS) {
        text_error(err, cap, "tensor \"%s\": %zu dimensions (at most %d)", name, nd, ST_MAX_DIMS);
        return -1;
    }
    t->ndim = (int)nd;
    uint64_t count = 1;
    for (size_t i = 0; i < nd; i++) {
        uint64_t d;
        if (json_u64(json_array_get(sh, i), &d) < 0 || d > ((uint64_t)1 << 40)) {
            text_error(err, cap, "tensor \"%s\": bad dimension %zu", name, i);
            return -1;
        }
        t->shape[i] = (int64_t)d;
        if (__builtin_mul_overflow(count, d, &count)) {
            text_error(err, cap, "tensor \"%s\": shape too large", name);
            return -1;
        }
    }
    for (size_t i = nd; i < ST_MAX_DIMS; i++)
        t->shape[i] = 0;
    uint64_t b, e, want;
    if (json_array_size(off) != 2 || json_u64(json_array_get(off, 0), &b) < 0 ||
        json_u64(json_array_get(off, 1), &e) < 0 || b > e) {
        text_error(err, cap, "tensor \"%s\": data_offsets must be [begin, end] with begin <= end",
               name);
        return -1;
    }
    if (e > data_len) {
        text_error(err, cap, "tensor \"%s\": data_offsets end %llu is past the data (%llu bytes)",
               name, (unsigned long long)e, (unsigned long long)data_len);
        return -1;
    }
    if (__builtin_mul_overflow(count, (uint64_t)dtype_sizes[t->dtype], &want) ||
        want != e - b) {
        text_error(err, cap,
                   "tensor \"%s\": shape and dtype need %llu bytes but data_offsets span %llu",
                   name, (unsigned long long)(want), (unsigned long long)(e - b));
        return -1;
    }
    t->data = data + b;
    t->nbytes = (size_t)(e - b);
    return 0;
}

static int parse_metadata(struct st_file *f, json_t *m, char *err, size_t cap)
{
    if (!json_is_object(m)) {
        text_error(err, cap, "__metadata__ is not an object");
        return -1;
    }
    size_t n = json_object_size(m);
    if (n > ST_MAX_META) {
        text_error(err, cap, "__metadata__ has %zu entries (at most %d)", n, ST_MAX_META);
        return -1;
    }
    f->meta = calloc(n ? n : 1, sizeof *f->meta);
    if (!f->meta) {
        text_error(err, cap, "out of memory");
        return -1;
    }
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v)
    {
        if (!json_is_string(v)) {
            text_error(err, cap, "__metadata__ value of \"%.*s\" is not a string",
                       text_utf8_prefix(k, 64), k);
            return -1;
        }
        struct st_meta *e = &f->meta[f->n_meta];
        e->key = strdup(k);
        e->value = strdup(json_string_value(v));
        f->n_meta++;
        if (!e->key || !e->value) {
            text_error(err, cap, "out of memory");
            return -1;
        }
    }
    return 0;
}

/* Parses and validates; on success tensors point into buf. */
static int parse_into(struct st_file *f, const void *buf, size_t len, char *err, size_t cap)
{
    const unsigned char *p = buf;
    if (len < 8) {
        text_error(err, cap, "file is %zu bytes, too short for a safetensors header", len);
        return -1;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | p[i];
    if (hlen > ST_MAX_HEADER) {
        text_error(err, cap, "header length %llu is over the 100 MiB limit",
               (unsigned long long)hlen);
        return -1;
    }
    if (hlen < 2) {
        text_error(err, cap, "header length %llu is too small", (unsigned long long)hlen);
        return -1;
    }
    if (hlen > len - 8) {
        text_error(err, cap, "header length %llu does not fit in the %zu-byte file",
               (unsigned long long)hlen, len);
        return -1;
    }
    json_error_t jerr;
    json_t *root = json_loadb((const char *)p + 8, (size_t)hlen,
                              JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        text_error(err, cap, "header is not valid JSON: %s", jerr.text);
        return -1;
    }
    int rc = -1;
    if (!json_is_object(root)) {
        text_error(err, cap, "header is not a JSON object");
        goto out;
    }
    size_t n = json_object_size(root);
    json_t *meta = json_object_get(root, "__metadata__");
    if (meta)
        n--;
    if (n > ST_MAX_TENSORS) {
        text_error(err, cap, "header lists %zu tensors (at most %d)", n, ST_MAX_TENSORS);
        goto out;
    }
    if (meta && parse_metadata(f, meta, err, cap) < 0)
        goto out;
    f->t = calloc(n ? n : 1, sizeof *f->t);
    f->by_name = calloc(n ? n : 1, sizeof *f->by_name);
    if (!f->t || !f->by_name) {
        text_error(err, cap, "out of memory");
        goto out;
    }
    const char *data = (const char *)p + 8 + hlen;
    uint64_t data_len = len - 8 - hlen;
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v)
    {
        if (strcmp(k, "__metadata__") == 0)
            continue;
        if (parse_tensor(&f->t[f->n], k, v, data, data_len, err, cap) < 0)
            goto out;
        f->n++;
    }
    qsort(f->t, f->n, sizeof *f->t, cmp_offset);
    for (size_t i = 1; i < f->n; i++) {
        const char *prev_end = (const char *)f->t[i - 1].data + f->t[i - 1].nbytes;
        if ((const char *)f->t[i].data < prev_end) {
            text_error(err, cap, "tensors \"%s\" and \"%s\" overlap", f->t[i - 1].name,
                       f->t[i].name);
            goto out;
        }
    }
    for (size_t i = 0; i < f->n; i++)
        f->by_name[i] = i;
    qsort_r(f->by_name, f->n, sizeof *f->by_name, cmp_name, f->t);
    rc = 0;
out:
    json_decref(root);
    return rc;
}

struct st_file *st_parse(const void *buf, size_t len, char *err, size_t errcap)
{
    struct st_file *f = calloc(1, sizeof *f);
    if (!f) {
        text_error(err, errcap, "out of memory");
        return NULL;
    }
    if (parse_into(f, buf, len, err, errcap) < 0) {
        st_close(f);
        return NULL;
    }
    return f;
}

struct st_file *st_open(const char *path, char *err, size_t errcap)
{
    char why[300];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        text_error(err, errcap, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        text_error(err, errcap, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    size_t len = (size_t)sb.st_size;
    if (len < 8) {
        text_error(err, errcap, "%s: file is %zu bytes, too short for a safetensors header", path,
               len);
        close(fd);
        return NULL;
    }
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        text_error(err, errcap, "%s: mmap: %s", path, strerror(errno));
        return NULL;
    }
    struct st_file *f = calloc(1, sizeof *f);
    if (!f) {
        munmap(map, len);
        text_error(err, errcap, "%s: out of memory", path);
        return NULL;
    }
    f->map = map;
    f->map_len = len;
    if (parse_into(f, map, len, why, sizeof why) < 0) {
        text_error(err, errcap, "%s: %s", path, why);
        st_close(f);
        return NULL;
    }
    return f;
}

void st_close(struct st_file *f)
{
    if (!f)
        return;
    file_free_tables(f);
    if (f->map)
        munmap(f->map, f->map_len);
    free(f);
}

size_t st_count(const struct st_file *f)
{
    return f ? f->n : 0;
}

const struct st_tensor *st_at(const struct st_file *f, size_t i)
{
    return f && i < f->n ? &f->t[i] : NULL;
}

const struct st_tensor *st_find(const struct st_file *f, const char *name)
{
    if (!f || !name)
        return NULL;
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->t[f->by_name[mid]].name, name);
        if (c == 0)
            return &f->t[f->by_name[mid]];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const char *st_metadata(const struct st_file *f, const char *key)
{
    if (!f || !key)
        return NULL;
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[i].key, key) == 0)
            return f->meta[i].value;
    return NULL;
}

/* ---- writing ------------------------------------------------------------ */

/* Builds the header JSON (metadata first, then tensors in the given order,
 * packed back to back) padded with spaces so data starts 8-byte aligned. */
static char *build_header(const struct st_tensor *tensors, size_t n, const char *const *metadata,
                          size_t *out_len, char *err, size_t cap)
{
    json_t *root = json_object();
    if (!root)
        goto oom;
    if (metadata && metadata[0]) {
        json_t *m = json_object();
        if (!m || json_object_set_new(root, "__metadata__", m) < 0)
            goto oom_root;
        for (size_t i = 0; metadata[i]; i += 2) {
            if (!metadata[i + 1]) {
                text_error(err, cap, "metadata key \"%s\" has no value", metadata[i]);
                json_decref(root);
                return NULL;
            }
            if (json_object_set_new(m, metadata[i], json_string(metadata[i + 1])) < 0) {
                text_error(err, cap, "metadata \"%s\" is not valid UTF-8", metadata[i]);
                json_decref(root);
                return NULL;
            }
        }
    }
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const struct st_tensor *t = &tensors[i];
        json_t *e = json_object(), *shape = json_array();
        if (!e || !shape) {
            json_decref(e);
            json_decref(shape);
            goto oom_root;
        }
        json_object_set_new(e, "dtype", json_string(st_dtype_name(t->dtype)));
        for (int d = 0; d < t->ndim; d++)
            json_array_append_new(shape, json_integer(t->shape[d]));
        json_object_set_new(e, "shape", shape);
        json_t *offs = json_array();
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + t->nbytes)));
        json_object_set_new(e, "data_offsets", offs);
        if (json_object_set_new(root, t->name, e) < 0)
            goto oom_root;
        off += t->nbytes;
    }
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!s)
        goto oom;
    size_t len = strlen(s);
    size_t padded = (len + 8 + 7) / 8 * 8 - 8;
    char *h = realloc(s, padded + 1);
    if (!h) {
        free(s);
        goto oom;
    }
    memset(h + len, ' ', padded - len);
    h[padded] = '\0';
    *out_len = padded;
    return h;
oom_root:
    json_decref(root);
oom:
    text_error(err, cap, "out of memory");
    return NULL;
}

static int check_tensors(const struct st_tensor *tensors, size_t n, int filled, char *err,
                         size_t cap)
{
    for (size_t i = 0; i < n; i++) {
        const struct st_tensor *t = &tensors[i];
        if ((unsigned)t->dtype >= ST_DTYPE_COUNT || t->ndim < 0 || t->ndim > ST_MAX_DIMS ||
            t->name[0] == '\0' || strcmp(t->name, "__metadata__") == 0 ||
            memchr(t->name, '\0', ST_MAX_NAME) == NULL) {
            text_error(err, cap, "tensor %zu: bad name, dtype or rank", i);
            return -1;
        }
        uint64_t count = 1;
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0 || __builtin_mul_overflow(count, (uint64_t)t->shape[d], &count)) {
                text_error(err, cap, "tensor \"%s\": bad shape", t->name);
                return -1;
            }
        if (count * dtype_sizes[t->dtype] != t->nbytes || (t->nbytes && !t->data && !filled)) {
            text_error(err, cap, "tensor \"%s\": %zu bytes given, shape and dtype need %llu",
                   t->name, t->nbytes, (unsigned long long)(count * dtype_sizes[t->dtype]));
            return -1;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(tensors[j].name, t->name) == 0) {
                text_error(err, cap, "tensor \"%s\" appears twice", t->name);
                return -1;
            }
    }
    return 0;
}

int st_write(const char *path, const struct st_tensor *tensors, size_t n,
             const char *const *metadata, char *err, size_t errcap)
{
    return st_write_each(path, tensors, n, metadata, NULL, NULL, err, errcap);
}

int st_write_each(const char *path, const struct st_tensor *tensors, size_t n,
                  const char *const *metadata, st_fill_fn fill, void *ctx, char *err,
                  size_t errcap)
{
    if (check_tensors(tensors, n, fill != NULL, err, errcap) < 0)
        return -1;
    size_t hlen = 0;
    char *header = build_header(tensors, n, metadata, &hlen, err, errcap);
    if (!header)
        return -1;
    char tmp[4200];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
        free(header);
        text_error(err, errcap, "%s: path too long", path);
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        text_error(err, errcap, "%s: %s", tmp, strerror(errno));
        free(header);
        return -1;
    }
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    int rc = fs_write_all(fd, lenbuf, 8);
    if (rc == 0)
        rc = fs_write_all(fd, header, hlen);
    size_t failed = n; /* the tensor fill could not make, else n */
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (!tensors[i].nbytes)
            continue;
        const void *data = tensors[i].data;
        if (!data && !(data = fill(ctx, i))) {
            failed = i;
            rc = -1;
            break;
        }
        rc = fs_write_all(fd, data, tensors[i].nbytes);
    }
    free(header);
    if (rc == 0)
        rc = fsync(fd);
    if (rc != 0) {
        if (failed < n)
            text_error(err, errcap, "%s: out of memory making tensor \"%s\"", tmp,
                       tensors[failed].name);
        else
            text_error(err, errcap, "%s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return -1;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        text_error(err, errcap, "%s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    fs_sync_parent(path);
    return 0;
}

void st_release(const struct st_file *f, const struct st_tensor *t)
{
    if (!f || !f->map || !t->nbytes)
        return;
    uintptr_t lo = (uintptr_t)f->map, hi = lo + f->map_len;
    uintptr_t a = (uintptr_t)t->data, b = a + t->nbytes;
    if (a < lo || b > hi)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    a = (a + page - 1) / page * page; /* pages the tensor holds alone */
    b = b / page * page;
    if (b > a)
        madvise((void *)a, b - a, MADV_DONTNEED);
}
