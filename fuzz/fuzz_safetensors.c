/* fuzz_safetensors.c - libFuzzer driver for st_parse (train/formats/safetensors.h).
 *
 * Input: a whole safetensors file. Property: parsing never crashes or
 * reads outside the buffer; a refusal is one line of valid UTF-8 (errors
 * reach JSON answers); and when it accepts a file its promise holds:
 * every tensor lies inside the data buffer with nbytes = product(shape) x
 * dtype size, tensors do not overlap, and st_find finds each by name.
 * An accepted file is then written back with st_write and read again with
 * st_open: the same tensors (name, dtype, shape, bytes) must come out.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "train/formats/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Aborts unless t is a tensor st_parse may hand out for buf[0, len). */
static void check_tensor(const struct st_tensor *t, const uint8_t *buf, size_t len)
{
    FUZZ_CHECK(memchr(t->name, '\0', ST_MAX_NAME) != NULL);
    FUZZ_CHECK((unsigned)t->dtype < ST_DTYPE_COUNT);
    FUZZ_CHECK(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS);
    uint64_t count = 1;
    for (int d = 0; d < t->ndim; d++) {
        FUZZ_CHECK(t->shape[d] >= 0);
        FUZZ_CHECK(!__builtin_mul_overflow(count, (uint64_t)t->shape[d], &count));
    }
    FUZZ_CHECK(count * st_dtype_size(t->dtype) == t->nbytes);
    const uint8_t *p = t->data;
    FUZZ_CHECK(p >= buf + 8 && p <= buf + len);
    FUZZ_CHECK(t->nbytes <= (size_t)(buf + len - p));
    fuzz_touch(p, t->nbytes);
}

/* Writes the parsed tensors with st_write and reads them back. */
static void round_trip(const struct st_file *f)
{
    size_t n = st_count(f);
    struct st_tensor *copy = calloc(n ? n : 1, sizeof *copy);
    FUZZ_CHECK(copy != NULL);
    for (size_t i = 0; i < n; i++)
        copy[i] = *st_at(f, i);
    const char *meta[] = {"format", "pt", NULL};
    char path[256], err[300];
    fuzz_temp_path(path, sizeof path, "st");
    if (st_write(path, copy, n, meta, err, sizeof err) != 0) {
        /* The writer may refuse what the reader accepts only for reasons it
         * names (e.g. a name it cannot write); it must say why. */
        FUZZ_CHECK(err[0] != '\0');
        free(copy);
        unlink(path);
        return;
    }
    struct st_file *g = st_open(path, err, sizeof err);
    if (!g) {
        fprintf(stderr, "st_open of what st_write wrote failed: %s\n", err);
        abort();
    }
    FUZZ_CHECK(st_count(g) == n);
    for (size_t i = 0; i < n; i++) {
        const struct st_tensor *a = &copy[i];
        const struct st_tensor *b = st_find(g, a->name);
        FUZZ_CHECK(b != NULL);
        FUZZ_CHECK(b->dtype == a->dtype && b->ndim == a->ndim && b->nbytes == a->nbytes);
        for (int d = 0; d < a->ndim; d++)
            FUZZ_CHECK(b->shape[d] == a->shape[d]);
        FUZZ_CHECK(a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0);
    }
    const char *fmt = st_metadata(g, "format");
    FUZZ_CHECK(fmt && strcmp(fmt, "pt") == 0);
    st_close(g);
    free(copy);
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[300] = "";
    struct st_file *f = st_parse(data, size, err, sizeof err);
    if (!f) {
        /* A reason, as one line of valid UTF-8: model errors reach JSON. */
        FUZZ_CHECK(err[0] != '\0');
        FUZZ_CHECK(memchr(err, '\0', sizeof err) != NULL);
        FUZZ_CHECK(strchr(err, '\n') == NULL);
        if (!fuzz_utf8_valid((const uint8_t *)err, strlen(err))) {
            fprintf(stderr, "st_parse error is not valid UTF-8: %s\n", err);
            abort();
        }
        return 0;
    }
    size_t n = st_count(f);
    const uint8_t *prev_end = NULL;
    for (size_t i = 0; i < n; i++) {
        const struct st_tensor *t = st_at(f, i);
        FUZZ_CHECK(t != NULL);
        check_tensor(t, data, size);
        /* st_at walks in data order: no overlap means each starts at or
         * after the previous one's end. */
        const uint8_t *p = t->data;
        FUZZ_CHECK(prev_end == NULL || p >= prev_end);
        prev_end = p + t->nbytes;
        const struct st_tensor *byname = st_find(f, t->name);
        FUZZ_CHECK(byname != NULL && strcmp(byname->name, t->name) == 0);
    }
    FUZZ_CHECK(st_at(f, n) == NULL || n == 0);
    FUZZ_CHECK(st_find(f, "\x01no such tensor") == NULL);
    (void)st_metadata(f, "format");
    round_trip(f);
    st_close(f);
    return 0;
}
