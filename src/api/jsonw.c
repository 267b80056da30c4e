/* jsonw.c - compact JSON text with escaping and a size cap. */
#include "api/jsonw.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void jsonw_free(struct jsonw *w)
{
    growbuf_free(&w->b);
    memset(w, 0, sizeof *w);
}

static void put(struct jsonw *w, const char *s, size_t n)
{
    if (!w->b.max && !w->b.p) /* set to {0}: the cap is set here */
        growbuf_init(&w->b, JSONW_MAX);
    growbuf_append(&w->b, s, n);
}

/* Before a value: the comma, if a member came before. */
static void sep(struct jsonw *w)
{
    if (w->need_comma)
        put(w, ",", 1);
    w->need_comma = true;
}

void jsonw_raw(struct jsonw *w, const char *text, size_t n) { put(w, text, n); }

void jsonw_open(struct jsonw *w, char c)
{
    sep(w);
    put(w, &c, 1);
    w->need_comma = false;
}

void jsonw_close(struct jsonw *w, char c)
{
    put(w, &c, 1);
    w->need_comma = true;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when invalid. */
static size_t utf8_len(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    size_t n;
    unsigned min;
    unsigned cp;
    if ((s[0] & 0xe0) == 0xc0) {
        n = 2;
        cp = s[0] & 0x1f;
        min = 0x80;
    } else if ((s[0] & 0xf0) == 0xe0) {
        n = 3;
        cp = s[0] & 0x0f;
        min = 0x800;
    } else if ((s[0] & 0xf8) == 0xf0) {
        n = 4;
        cp = s[0] & 0x07;
        min = 0x10000;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

static void escaped(struct jsonw *w, const char *s)
{
    put(w, "\"", 1);
    const unsigned char *p = (const unsigned char *)s;
    const unsigned char *run = p;
    while (*p) {
        unsigned char c = *p;
        size_t n = c < 0x80 ? 1 : utf8_len(p);
        if (c >= 0x20 && c != '"' && c != '\\' && n > 0) {
            p += n;
            continue;
        }
        put(w, (const char *)run, (size_t)(p - run));
        char esc[8];
        if (n == 0) {
            put(w, "\xef\xbf\xbd", 3); /* U+FFFD for a byte that is not UTF-8 */
            p++;
        } else {
            if (c == '"')
                put(w, "\\\"", 2);
            else if (c == '\\')
                put(w, "\\\\", 2);
            else if (c == '\n')
                put(w, "\\n", 2);
            else if (c == '\t')
                put(w, "\\t", 2);
            else if (c == '\r')
                put(w, "\\r", 2);
            else {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                put(w, esc, 6);
            }
            p++;
        }
        run = p;
    }
    put(w, (const char *)run, (size_t)(p - run));
    put(w, "\"", 1);
}

void jsonw_key(struct jsonw *w, const char *key)
{
    sep(w);
    escaped(w, key);
    put(w, ":", 1);
    w->need_comma = false;
}

void jsonw_str(struct jsonw *w, const char *s)
{
    sep(w);
    if (s)
        escaped(w, s);
    else
        put(w, "null", 4);
}

void jsonw_str_or_null(struct jsonw *w, const char *s) { jsonw_str(w, s && s[0] ? s : NULL); }

void jsonw_int(struct jsonw *w, int64_t v)
{
    char b[24];
    int n = snprintf(b, sizeof b, "%lld", (long long)v);
    sep(w);
    put(w, b, (size_t)n);
}

void jsonw_num(struct jsonw *w, double v)
{
    sep(w);
    if (!isfinite(v)) {
        put(w, "null", 4);
        return;
    }
    char b[32];
    /* The shortest of 15 or 17 digits that reads back as the same value:
     * 0.0036, not 0.0035999999999999999. */
    int n = snprintf(b, sizeof b, "%.15g", v);
    if (strtod(b, NULL) != v)
        n = snprintf(b, sizeof b, "%.17g", v);
    /* Keep it a real number in JSON readers that care (1 -> 1.0). */
    if (!strpbrk(b, ".eE") && n + 2 < (int)sizeof b) {
        memcpy(b + n, ".0", 3);
        n += 2;
    }
    put(w, b, (size_t)n);
}

void jsonw_bool(struct jsonw *w, bool v)
{
    sep(w);
    put(w, v ? "true" : "false", v ? 4 : 5);
}

void jsonw_null(struct jsonw *w)
{
    sep(w);
    put(w, "null", 4);
}

void jsonw_json(struct jsonw *w, const char *text)
{
    sep(w);
    if (text && text[0])
        put(w, text, strlen(text));
    else
        put(w, "null", 4);
}
