/* tokenizer_tables.c - the hash tables, piece lists, UTF-8 helpers and the
 * GPT-2 byte table that the tokenizer_* files share. */
#include <stdlib.h>
#include <string.h>

#include "train/tokenizer/tokenizer_internal.h"

static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static size_t pow2_for(size_t expected)
{
    size_t cap = 16;
    while (cap < expected * 2)
        cap <<= 1;
    return cap;
}

int tok_map_init(struct tok_map *m, size_t expected)
{
    m->cap = pow2_for(expected);
    m->n = 0;
    m->slots = calloc(m->cap, sizeof *m->slots);
    return m->slots ? 0 : -1;
}

void tok_map_free(struct tok_map *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->n = 0;
}

static int map_grow(struct tok_map *m)
{
    struct tok_map bigger;
    bigger.cap = m->cap * 2;
    bigger.n = 0;
    bigger.slots = calloc(bigger.cap, sizeof *bigger.slots);
    if (!bigger.slots)
        return -1;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key)
            tok_map_put(&bigger, m->slots[i].key, m->slots[i].len, m->slots[i].id);
    free(m->slots);
    *m = bigger;
    return 0;
}

int tok_map_put(struct tok_map *m, const char *key, size_t len, int32_t id)
{
    if ((m->n + 1) * 2 > m->cap && map_grow(m) < 0)
        return -1;
    size_t mask = m->cap - 1;
    for (size_t i = hash_bytes(key, len) & mask;; i = (i + 1) & mask) {
        struct tok_map_slot *s = &m->slots[i];
        if (!s->key) {
            s->key = key;
            s->len = (uint32_t)len;
            s->id = id;
            m->n++;
            return 0;
        }
        if (s->len == len && memcmp(s->key, key, len) == 0) {
            s->id = id;
            return 0;
        }
    }
}

int32_t tok_map_get(const struct tok_map *m, const char *key, size_t len)
{
    if (m->cap == 0)
        return -1;
    size_t mask = m->cap - 1;
    for (size_t i = hash_bytes(key, len) & mask;; i = (i + 1) & mask) {
        const struct tok_map_slot *s = &m->slots[i];
        if (!s->key)
            return -1;
        if (s->len == len && memcmp(s->key, key, len) == 0)
            return s->id;
    }
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

int tok_pairs_init(struct tok_pairs *p, size_t expected)
{
    p->cap = pow2_for(expected);
    p->n = 0;
    p->slots = calloc(p->cap, sizeof *p->slots);
    return p->slots ? 0 : -1;
}

void tok_pairs_free(struct tok_pairs *p)
{
    free(p->slots);
    p->slots = NULL;
    p->cap = p->n = 0;
}

int tok_pairs_put(struct tok_pairs *p, int32_t a, int32_t b, int32_t rank, int32_t merged)
{
    if ((p->n + 1) * 2 > p->cap) {
        struct tok_pairs bigger;
        bigger.cap = p->cap * 2;
        bigger.n = 0;
        bigger.slots = calloc(bigger.cap, sizeof *bigger.slots);
        if (!bigger.slots)
            return -1;
        for (size_t i = 0; i < p->cap; i++)
            if (p->slots[i].key) {
                uint64_t k = p->slots[i].key - 1;
                tok_pairs_put(&bigger, (int32_t)(k >> 32), (int32_t)(k & 0xffffffffu),
                              p->slots[i].rank, p->slots[i].merged);
            }
        free(p->slots);
        *p = bigger;
    }
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    size_t mask = p->cap - 1;
    for (size_t i = mix64(key) & mask;; i = (i + 1) & mask) {
        struct tok_pair_slot *s = &p->slots[i];
        if (!s->key) {
            s->key = key;
            s->rank = rank;
            s->merged = merged;
            p->n++;
            return 0;
        }
        if (s->key == key) {
            /* A duplicate merge line keeps its first (best) rank. */
            return 0;
        }
    }
}

int tok_pairs_get(const struct tok_pairs *p, int32_t a, int32_t b, int32_t *rank, int32_t *merged)
{
    if (p->cap == 0)
        return -1;
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    size_t mask = p->cap - 1;
    for (size_t i = mix64(key) & mask;; i = (i + 1) & mask) {
        const struct tok_pair_slot *s = &p->slots[i];
        if (!s->key)
            return -1;
        if (s->key == key) {
            *rank = s->rank;
            *merged = s->merged;
            return 0;
        }
    }
}

/* ---- piece lists -------------------------------------------------------- */

void tok_pieces_free(struct tok_pieces *p)
{
    free(p->buf);
    free(p->off);
    free(p->plen);
    memset(p, 0, sizeof *p);
}

void tok_pieces_clear(struct tok_pieces *p)
{
    p->len = 0;
    p->n = 0;
}

static int reserve_bytes(struct tok_pieces *p, size_t more)
{
    if (p->len + more <= p->cap && p->buf)
        return 0;
    if (p->len + more > 4 * TOK_MAX_INPUT + 1024)
        return -1; /* normalizing can grow text (spaces -> 3-byte marks), never this much */
    size_t cap = p->cap ? p->cap : 256;
    while (cap < p->len + more)
        cap *= 2;
    char *b = realloc(p->buf, cap);
    if (!b)
        return -1;
    p->buf = b;
    p->cap = cap;
    return 0;
}

int tok_pieces_add(struct tok_pieces *p, const char *s, size_t len)
{
    if (p->n == p->ncap) {
        size_t ncap = p->ncap ? p->ncap * 2 : 64;
        size_t *o = realloc(p->off, ncap * sizeof *o);
        if (!o)
            return -1;
        p->off = o;
        size_t *l = realloc(p->plen, ncap * sizeof *l);
        if (!l)
            return -1;
        p->plen = l;
        p->ncap = ncap;
    }
    if (reserve_bytes(p, len) < 0)
        return -1;
    memcpy(p->buf + p->len, s, len);
    p->off[p->n] = p->len;
    p->plen[p->n] = len;
    p->len += len;
    p->n++;
    return 0;
}

int tok_pieces_extend(struct tok_pieces *p, const char *s, size_t len)
{
    if (p->n == 0)
        return tok_pieces_add(p, s, len);
    /* Only the last piece may grow, and it ends at p->len. */
    if (reserve_bytes(p, len) < 0)
        return -1;
    memcpy(p->buf + p->len, s, len);
    p->len += len;
    p->plen[p->n - 1] += len;
    return 0;
}

/* ---- UTF-8 and the byte table ------------------------------------------- */

size_t tok_utf8_len(const unsigned char *s, size_t avail)
{
    unsigned char c = s[0];
    size_t n;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4;
    else
        return 1;
    if (n > avail)
        return 1;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 1;
    /* Reject overlong forms, surrogates and code points past U+10FFFF. */
    if (n == 3 && ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] >= 0xa0)))
        return 1;
    if (n == 4 && ((c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] >= 0x90)))
        return 1;
    return n;
}

uint32_t tok_utf8_get(const unsigned char *s, size_t n)
{
    switch (n) {
    case 2:
        return (uint32_t)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
    case 3:
        return (uint32_t)(s[0] & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
    case 4:
        return (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3f) << 12 |
               (uint32_t)(s[2] & 0x3f) << 6 | (s[3] & 0x3f);
    default:
        return s[0];
    }
}

size_t tok_utf8_put(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xc0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xe0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        o[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
    o[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

/* GPT-2's table: printable Latin-1 bytes stand for themselves; the other 68
 * bytes (controls, space, DEL, NBSP, soft hyphen) take U+0100.. in order. */
static int printable(unsigned b)
{
    return (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

uint32_t tok_byte_char(uint8_t b)
{
    if (printable(b))
        return b;
    uint32_t n = 0;
    for (unsigned i = 0; i < b; i++)
        if (!printable(i))
            n++;
    return 256 + n;
}

int tok_char_byte(uint32_t cp)
{
    if (cp < 256)
        return printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    uint32_t n = cp - 256;
    for (unsigned i = 0; i < 256; i++)
        if (!printable(i) && n-- == 0)
            return (int)i;
    return -1;
}
