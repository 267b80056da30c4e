/* text.c - bounded copies and formatting. */
#include "core/text.h"

#include <stdarg.h>
#include <stdio.h>
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
