/* growbuf.c - a byte buffer grown up to a named cap (growbuf.h). */
#include "core/growbuf.h"

#include <stdio.h>
#include <stdlib.h>

/* The first allocation; each growth doubles, up to the cap. */
#define GROWBUF_FIRST 4096

void growbuf_init(struct growbuf *b, size_t max)
{
    memset(b, 0, sizeof *b);
    b->max = max;
}

enum growbuf_err growbuf__grow(struct growbuf *b, size_t n)
{
    if (b->err)
        return b->err;
    /* len + n + 1 must fit in max, asked without overflowing. */
    if (b->max == 0 || n > b->max - 1 - b->len) {
        b->err = GROWBUF_TOO_LARGE;
        return b->err;
    }
    size_t need = b->len + n + 1;
    if (need <= b->cap)
        return GROWBUF_OK;
    size_t cap = b->cap ? b->cap : GROWBUF_FIRST;
    while (cap < need && cap <= b->max / 2)
        cap *= 2;
    if (cap < need || cap > b->max)
        cap = b->max; /* need <= max: the last step ends at the cap */
    char *p = realloc(b->p, cap);
    if (!p) {
        b->err = GROWBUF_NO_MEMORY;
        return b->err;
    }
    b->p = p;
    b->cap = cap;
    return GROWBUF_OK;
}

enum growbuf_err growbuf_puts(struct growbuf *b, const char *s)
{
    return growbuf_append(b, s, strlen(s));
}

enum growbuf_err growbuf_vprintf(struct growbuf *b, const char *fmt, va_list ap)
{
    if (b->err)
        return b->err;
    va_list again;
    va_copy(again, ap);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    enum growbuf_err e = GROWBUF_OK;
    if (n < 0) {
        e = GROWBUF_NO_MEMORY; /* vsnprintf fails only on an encoding error or EOVERFLOW */
    } else if ((size_t)n < sizeof small) {
        e = growbuf_append(b, small, (size_t)n);
    } else {
        e = growbuf__grow(b, (size_t)n);
        if (!e) {
            vsnprintf(b->p + b->len, (size_t)n + 1, fmt, again);
            b->len += (size_t)n;
        }
    }
    va_end(again);
    return e;
}

enum growbuf_err growbuf_printf(struct growbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    enum growbuf_err e = growbuf_vprintf(b, fmt, ap);
    va_end(ap);
    return e;
}

const char *growbuf_err_text(enum growbuf_err e)
{
    switch (e) {
    case GROWBUF_OK: return "";
    case GROWBUF_TOO_LARGE: return "larger than its limit";
    case GROWBUF_NO_MEMORY: return "out of memory";
    }
    return "unknown error";
}

void growbuf_clear(struct growbuf *b)
{
    b->len = 0;
    if (b->p)
        b->p[0] = '\0';
}

char *growbuf_take(struct growbuf *b)
{
    char *p = b->p;
    size_t max = b->max;
    growbuf_init(b, max);
    return p;
}

void growbuf_free(struct growbuf *b)
{
    if (!b)
        return;
    free(b->p);
    growbuf_init(b, b->max);
}
