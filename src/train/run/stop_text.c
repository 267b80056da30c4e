/* stop_text.c - texts that end an answer (see stop_text.h). */
#include "train/run/stop_text.h"

#include <string.h>

int stop_texts_add(struct stop_texts *s, const char *text, size_t len)
{
    if (s->n >= STOP_TEXTS_MAX || len < 1 || len > STOP_TEXT_BYTES)
        return -1;
    memcpy(s->text[s->n], text, len);
    s->len[s->n++] = len;
    return 0;
}

/* Where needle[0..m) first starts in hay[0..n), or STOP_TEXT_NONE. */
static size_t find(const char *hay, size_t n, const char *needle, size_t m)
{
    if (m > n)
        return STOP_TEXT_NONE;
    const char *first = needle;
    for (size_t at = 0; at + m <= n;) {
        const char *p = memchr(hay + at, *first, n - m + 1 - at);
        if (!p)
            return STOP_TEXT_NONE;
        at = (size_t)(p - hay);
        if (memcmp(p, needle, m) == 0)
            return at;
        at++;
    }
    return STOP_TEXT_NONE;
}

size_t stop_texts_find(const struct stop_texts *s, const char *text, size_t len)
{
    size_t best = STOP_TEXT_NONE;
    for (int i = 0; i < s->n; i++) {
        /* once one is found, only a start before it matters */
        size_t n = best == STOP_TEXT_NONE ? len : best + s->len[i] - 1;
        size_t at = find(text, n < len ? n : len, s->text[i], s->len[i]);
        if (at < best)
            best = at;
    }
    return best;
}

size_t stop_texts_held(const struct stop_texts *s, const char *text, size_t len)
{
    size_t held = 0;
    for (int i = 0; i < s->n; i++)
        for (size_t k = s->len[i] - 1; k > held; k--)
            if (k <= len && memcmp(text + len - k, s->text[i], k) == 0) {
                held = k;
                break;
            }
    return held;
}
