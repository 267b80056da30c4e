/* growbuf.h - a byte buffer that grows as text is appended, up to a named
 * cap. Every buffer of alallo that grows with its input (an HTTP answer or
 * request body, JSON being written, a log, a COPY chunk, a rendered chat
 * template) is one of these, so that each has a hard limit and a failure
 * that says which limit it met.
 *
 *     struct growbuf b;
 *     growbuf_init(&b, ANSWER_MAX);   // at most ANSWER_MAX bytes, NUL included
 *     if (growbuf_append(&b, data, n)) ...   // GROWBUF_TOO_LARGE or _NO_MEMORY
 *     use b.p, b.len; growbuf_free(&b);
 *
 * The caller owns the struct; the buffer owns b.p until growbuf_free (or
 * until growbuf_take hands it over). b.p is NULL while nothing was
 * appended, and otherwise always NUL-terminated after b.len bytes, so text
 * may be read as a C string (binary data may hold NULs of its own).
 * A failure is sticky: once an append failed, b.err keeps the reason,
 * further appends do nothing and return it, and the bytes held are those
 * before the failed append. Pure (no I/O); not thread-safe (one owner).
 */
#ifndef ALALLO_CORE_GROWBUF_H
#define ALALLO_CORE_GROWBUF_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum growbuf_err {
    GROWBUF_OK = 0,
    GROWBUF_TOO_LARGE, /* the append would pass the cap: nothing appended  */
    GROWBUF_NO_MEMORY, /* the allocator refused to grow: nothing appended  */
};

struct growbuf {
    char *p;              /* the bytes, NUL-terminated; NULL while empty    */
    size_t len;           /* bytes held, the NUL not counted                */
    size_t cap;           /* bytes allocated (0 while p is NULL)            */
    size_t max;           /* the cap: cap, and so len + 1, never exceed it  */
    enum growbuf_err err; /* the first failure, sticky; GROWBUF_OK if none  */
};

/* The cap of a buffer whose size its input already bounds (decoded text
 * of given ids, a data set's converted copy, a COPY chunk of rows read):
 * it fails only when memory runs out. Each use says what bounds it. */
#define GROWBUF_UNBOUNDED SIZE_MAX

/* An initializer of an empty buffer that will hold at most max bytes, as
 * growbuf_init: struct growbuf b = GROWBUF_INIT(ANSWER_MAX); */
#define GROWBUF_INIT(max_bytes) {.p = NULL, .len = 0, .cap = 0, .max = (max_bytes), .err = GROWBUF_OK}

/* An empty buffer that will hold at most max bytes, its NUL included (so
 * at most max - 1 bytes of content). Allocates nothing. */
void growbuf_init(struct growbuf *b, size_t max);

/* Grows b so that n more bytes (and the NUL) fit; internal to the inline
 * append below. Returns GROWBUF_OK, or the (now sticky) failure. */
enum growbuf_err growbuf__grow(struct growbuf *b, size_t n);

/* Appends n bytes at s (s may be NULL when n is 0). Returns GROWBUF_OK;
 * GROWBUF_TOO_LARGE when len + n + 1 would pass max; GROWBUF_NO_MEMORY when
 * the allocator refused; or the earlier failure. Inline: the hot writers
 * (api/jsonw.c) call it for every token. */
static inline enum growbuf_err growbuf_append(struct growbuf *b, const void *s, size_t n)
{
    if (b->err)
        return b->err;
    if (n >= b->cap - b->len) { /* cap > len always once allocated; 0 - 0 while empty */
        enum growbuf_err e = growbuf__grow(b, n);
        if (e)
            return e;
    }
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
    return GROWBUF_OK;
}

/* Appends a NUL-terminated string. */
enum growbuf_err growbuf_puts(struct growbuf *b, const char *s);

/* Appends printf-formatted text; the same results as growbuf_append (a
 * format error of vsnprintf reads as GROWBUF_NO_MEMORY, nothing appended). */
enum growbuf_err growbuf_printf(struct growbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
enum growbuf_err growbuf_vprintf(struct growbuf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* What a failure means, for a message: "" for GROWBUF_OK, "larger than its
 * limit", "out of memory". Static strings. */
const char *growbuf_err_text(enum growbuf_err e);

/* Empties b for reuse, keeping its allocation (and a failure, if any). */
void growbuf_clear(struct growbuf *b);

/* Hands the bytes over: returns b.p (NULL if nothing was appended; the
 * caller frees it) and leaves b empty, with its cap and no failure. */
char *growbuf_take(struct growbuf *b);

/* Frees the bytes and leaves b empty, with its cap and no failure.
 * NULL does nothing. */
void growbuf_free(struct growbuf *b);

#endif
