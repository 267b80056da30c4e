/* tokenizer_bpe.c - BPE on one pre-token: split into initial symbols (bytes
 * through GPT-2's table, or characters with byte fallback), then apply the
 * lowest-ranked adjacent merge, leftmost first on ties, until none applies.
 *
 * A min-heap of candidate pairs keyed by (rank, position) makes a pre-token
 * of n symbols cost O(n log n) instead of O(n^2); stale heap entries are
 * recognised when popped (their symbols changed) and dropped.
 */
#include <stdlib.h>
#include <string.h>

#include "train/tokenizer/tokenizer_internal.h"

struct cand {
    int32_t rank;
    int32_t pos; /* index of the left symbol */
    int32_t a, b, merged;
};

struct tok_bpe_work {
    int32_t *id;  /* (cap) symbol ids; -1 once merged into its left neighbour */
    int32_t *next, *prev;
    size_t cap;
    struct cand *heap;
    size_t nheap, hcap;
    char *str; /* scratch text for vocabulary look-ups */
    size_t str_cap;
};

struct tok_bpe_work *tok_bpe_work_new(void)
{
    return calloc(1, sizeof(struct tok_bpe_work));
}

void tok_bpe_work_free(struct tok_bpe_work *w)
{
    if (!w)
        return;
    free(w->id);
    free(w->next);
    free(w->prev);
    free(w->heap);
    free(w->str);
    free(w);
}

static int reserve_syms(struct tok_bpe_work *w, size_t n)
{
    if (n <= w->cap)
        return 0;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < n)
        cap *= 2;
    int32_t *a = realloc(w->id, cap * sizeof *a);
    if (!a)
        return -1;
    w->id = a;
    a = realloc(w->next, cap * sizeof *a);
    if (!a)
        return -1;
    w->next = a;
    a = realloc(w->prev, cap * sizeof *a);
    if (!a)
        return -1;
    w->prev = a;
    w->cap = cap;
    return 0;
}

static int reserve_str(struct tok_bpe_work *w, size_t n)
{
    if (n <= w->str_cap)
        return 0;
    size_t cap = w->str_cap ? w->str_cap : 256;
    while (cap < n)
        cap *= 2;
    char *s = realloc(w->str, cap);
    if (!s)
        return -1;
    w->str = s;
    w->str_cap = cap;
    return 0;
}

static int cand_less(const struct cand *x, const struct cand *y)
{
    return x->rank != y->rank ? x->rank < y->rank : x->pos < y->pos;
}

static int heap_push(struct tok_bpe_work *w, struct cand c)
{
    if (w->nheap == w->hcap) {
        size_t cap = w->hcap ? w->hcap * 2 : 64;
        struct cand *h = realloc(w->heap, cap * sizeof *h);
        if (!h)
            return -1;
        w->heap = h;
        w->hcap = cap;
    }
    size_t i = w->nheap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_less(&c, &w->heap[parent]))
            break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = c;
    return 0;
}

static struct cand heap_pop(struct tok_bpe_work *w)
{
    struct cand top = w->heap[0];
    struct cand last = w->heap[--w->nheap];
    size_t i = 0, n = w->nheap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const struct cand *best = &last;
        if (l < n && cand_less(&w->heap[l], best)) {
            m = l;
            best = &w->heap[l];
        }
        if (r < n && cand_less(&w->heap[r], best))
            m = r;
        if (m == i)
            break;
        w->heap[i] = w->heap[m];
        i = m;
    }
    if (n > 0)
        w->heap[i] = last;
    return top;
}

/* Whether ids a, b merge; with a merge table by its rank, else (vocab-only
 * SentencePiece files) when their concatenation is a token, ranked by id. */
static int pair_rank(const struct tokenizer *t, struct tok_bpe_work *w, int32_t a, int32_t b,
                     int32_t *rank, int32_t *merged)
{
    if (t->has_merges)
        return tok_pairs_get(&t->merges, a, b, rank, merged);
    if (!t->str[a] || !t->str[b] || t->added_kind[a] || t->added_kind[b])
        return -1;
    size_t la = t->str_len[a], lb = t->str_len[b];
    if (reserve_str(w, la + lb) < 0)
        return -1;
    memcpy(w->str, t->str[a], la);
    memcpy(w->str + la, t->str[b], lb);
    int32_t id = tok_map_get(&t->vocab, w->str, la + lb);
    if (id < 0)
        return -1;
    *rank = id;
    *merged = id;
    return 0;
}

static int push_pair(const struct tokenizer *t, struct tok_bpe_work *w, int32_t pos)
{
    if (pos < 0)
        return 0;
    int32_t nx = w->next[pos];
    if (nx < 0)
        return 0;
    struct cand c = {.pos = pos, .a = w->id[pos], .b = w->id[nx]};
    if (pair_rank(t, w, c.a, c.b, &c.rank, &c.merged) < 0)
        return 0;
    return heap_push(w, c);
}

static int append_id(int32_t **ids, size_t *n, size_t *cap, int32_t id)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        int32_t *p = realloc(*ids, c * sizeof *p);
        if (!p)
            return -1;
        *ids = p;
        *cap = c;
    }
    (*ids)[(*n)++] = id;
    return 0;
}

/* Fills w->id with the initial symbols of s; returns their count, or -1. */
static long initial_symbols(const struct tokenizer *t, struct tok_bpe_work *w, const char *s,
                            size_t len)
{
    if (reserve_syms(w, len) < 0)
        return -1;
    long n = 0;
    const unsigned char *u = (const unsigned char *)s;
    if (t->kind == TOK_BYTE_LEVEL) {
        for (size_t i = 0; i < len; i++) {
            int32_t id = t->byte_id[u[i]];
            if (id < 0)
                id = t->unk_id; /* a vocabulary without this byte's character */
            if (id >= 0)
                w->id[n++] = id;
        }
        return n;
    }
    for (size_t i = 0; i < len;) {
        size_t cl = tok_utf8_len(u + i, len - i);
        int32_t id = tok_map_get(&t->vocab, s + i, cl);
        if (id >= 0 && t->added_kind[id])
            id = -1; /* added tokens are never produced by the model itself */
        if (id >= 0) {
            w->id[n++] = id;
        } else if (t->byte_fallback && t->byte_id[u[i]] >= 0) {
            for (size_t k = 0; k < cl; k++) {
                int32_t bid = t->byte_id[u[i + k]];
                w->id[n++] = bid >= 0 ? bid : t->unk_id;
            }
        } else if (t->unk_id >= 0) {
            if (!(t->fuse_unk && n > 0 && w->id[n - 1] == t->unk_id))
                w->id[n++] = t->unk_id;
        }
        i += cl;
    }
    /* unk_id may be -1 only when it was never needed */
    long k = 0;
    for (long i = 0; i < n; i++)
        if (w->id[i] >= 0)
            w->id[k++] = w->id[i];
    return k;
}

int tok_bpe_piece(const struct tokenizer *t, struct tok_bpe_work *w, const char *s, size_t len,
                  int32_t **ids, size_t *n, size_t *cap)
{
    if (len == 0)
        return 0;
    if (t->ignore_merges) {
        const char *key = s;
        size_t kl = len;
        if (t->kind == TOK_BYTE_LEVEL) {
            if (reserve_str(w, len * 2) < 0)
                return -1;
            kl = 0;
            for (size_t i = 0; i < len; i++) {
                unsigned char b = (unsigned char)s[i];
                memcpy(w->str + kl, t->byte_str[b], t->byte_str_len[b]);
                kl += t->byte_str_len[b];
            }
            key = w->str;
        }
        int32_t id = tok_map_get(&t->vocab, key, kl);
        if (id >= 0 && !t->added_kind[id])
            return append_id(ids, n, cap, id);
    }
    long ns = initial_symbols(t, w, s, len);
    if (ns < 0)
        return -1;
    for (long i = 0; i < ns; i++) {
        w->prev[i] = (int32_t)(i - 1);
        w->next[i] = i + 1 < ns ? (int32_t)(i + 1) : -1;
    }
    w->nheap = 0;
    for (long i = 0; i + 1 < ns; i++)
        if (push_pair(t, w, (int32_t)i) < 0)
            return -1;
    while (w->nheap > 0) {
        struct cand c = heap_pop(w);
        int32_t right = w->next[c.pos];
        if (w->id[c.pos] != c.a || right < 0 || w->id[right] != c.b)
            continue; /* stale: one side was merged since */
        w->id[c.pos] = c.merged;
        w->id[right] = -1;
        w->next[c.pos] = w->next[right];
        if (w->next[right] >= 0)
            w->prev[w->next[right]] = c.pos;
        if (push_pair(t, w, w->prev[c.pos]) < 0 || push_pair(t, w, c.pos) < 0)
            return -1;
    }
    for (long i = 0; i < ns; i++)
        if (w->id[i] >= 0 && append_id(ids, n, cap, w->id[i]) < 0)
            return -1;
    return 0;
}
