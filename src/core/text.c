/* text.c - bounded copies and formatting. */
#include "core/text.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool text_copy(char *dst, size_t cap, const char *src)
{
    if (cap == 0)
        return false;
    if (!src)
        src = "";
    size_t n = strlen(src);
    bool fits = n < cap;
    if (!fits)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
    return fits;
}

bool text_printf(char *dst, size_t cap, const char *fmt, ...)
{
    if (cap == 0)
        return false;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(dst, cap, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < cap;
}

void text_one_line(char *s)
{
    unsigned char *u = (unsigned char *)s;
    size_t n = strlen(s), o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                                   : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (len > 1 && i + len > n) {
            int prefix = 1; /* cut off by the end of the buffer? */
            for (size_t k = i + 1; k < n; k++)
                prefix &= (u[k] & 0xc0) == 0x80;
            if (prefix)
                break;
        }
        int ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++)
            ok = (u[i + k] & 0xc0) == 0x80;
        if (ok && len == 3)
            ok = !(c == 0xe0 && u[i + 1] < 0xa0) && !(c == 0xed && u[i + 1] >= 0xa0);
        if (ok && len == 4)
            ok = !(c == 0xf0 && u[i + 1] < 0x90) && !(c == 0xf4 && u[i + 1] >= 0x90);
        if (!ok || (len == 1 && (c < 0x20 || c == 0x7f))) {
            u[o++] = '?';
            i++;
            continue;
        }
        memmove(u + o, u + i, len);
        o += len;
        i += len;
    }
    u[o] = '\0';
}

void text_error(char *err, size_t cap, const char *fmt, ...)
{
    if (!err || cap == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    text_one_line(err);
}

int text_utf8_prefix_n(const char *s, size_t len, size_t max)
{
    if (len <= max)
        return (int)len;
    size_t n = max;
    while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
        n--;
    return (int)n;
}

int text_utf8_prefix(const char *s, size_t max)
{
    return text_utf8_prefix_n(s, strnlen(s, max + 1), max);
}

bool text_has_control(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f || (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f))
            return true;
    return false;
}

bool text_parse_long(const char *s, long lo, long hi, long *out)
{
    if (!s)
        return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}
