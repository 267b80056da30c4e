/* bpe_train.c - byte-level BPE training (bpe_train.h).
 *
 * Words (pre-tokens) are counted once; each distinct word is then a list of
 * symbol ids with a weight. Pair counts live in a hash table with, per pair,
 * the list of words it occurs in, so a merge touches only those words. The
 * best pair comes from a max-heap whose entries may be stale: a popped entry
 * whose count no longer matches the table is pushed back with the current
 * count (the same lazy scheme Hugging Face's trainer uses), which keeps each
 * merge close to O(words touched).
 */
#include "train/tokenizer/bpe_train.h"
#include "core/fs.h"
#include "core/text.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_WORDS 20000000u       /* distinct pre-tokens */
#define MAX_WORD_LEN 4096         /* longer pre-tokens are counted in pieces */
#define ARENA_CHUNK (1u << 20)

static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char special_token[] = "<|endoftext|>";

/* ---- arena: bytes that never move ------------------------------------ */
struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    char data[];
};

static void *arena_alloc(struct arena_chunk **head, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    struct arena_chunk *c = *head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > ARENA_CHUNK ? n : ARENA_CHUNK;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->next = *head;
        c->used = 0;
        c->cap = cap;
        *head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    return p;
}

static void arena_free(struct arena_chunk *c)
{
    while (c) {
        struct arena_chunk *n = c->next;
        free(c);
        c = n;
    }
}

/* ---- words --------------------------------------------------------------- */
struct word {
    const char *bytes; /* arena */
    uint32_t len;
    uint32_t nsym;
    int32_t *sym;      /* arena; nsym symbols after merges */
    int64_t count;
};

/* ---- pairs --------------------------------------------------------------- */
struct pair {
    int32_t a, b;
    int64_t count;
    uint32_t *words; /* indices of words that contained the pair at some point */
    uint32_t nwords, cwords;
};

struct heap_ent {
    int64_t count;
    int32_t a, b;
};

struct bpe_trainer {
    struct arena_chunk *arena;
    pcre2_code *re;
    pcre2_match_data *md;
    /* word hash: bytes -> index */
    uint32_t *wslots; /* index + 1, 0 = empty */
    size_t wcap;
    struct word *words;
    size_t nwords, words_cap;
    /* pair hash: (a, b) -> index */
    uint32_t *pslots;
    size_t pcap;
    struct pair *pairs;
    size_t npairs, pairs_cap;
    struct heap_ent *heap;
    size_t nheap, hcap;
    uint32_t *touched; /* pairs that gained during one merge */
    size_t ntouched, touched_cap;
    /* tokens: 0..255 bytes, then merged ones */
    char **tok;
    uint32_t *tok_len;
    size_t ntok, tok_cap, tok_len_cap;
    uint32_t *tslots; /* token text -> id + 1 */
    size_t tcap;
    int32_t (*merges)[2];
    size_t nmerges, merges_cap;
    int trained;
};

static uint64_t hash_bytes(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t hash_pair(int32_t a, int32_t b)
{
    uint64_t x = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *n = realloc(*p, c * elem);
    if (!n)
        return -1;
    *p = n;
    *cap = c;
    return 0;
}

/* Adds a token's text; returns its id (existing one when the text is known). */
static int32_t token_intern(struct bpe_trainer *bt, const char *s, size_t len)
{
    if ((bt->ntok + 1) * 2 > bt->tcap) {
        size_t cap = bt->tcap ? bt->tcap * 2 : 1024;
        uint32_t *slots = calloc(cap, sizeof *slots);
        if (!slots)
            return -1;
        for (size_t i = 0; i < bt->ntok; i++) {
            size_t j = hash_bytes(bt->tok[i], bt->tok_len[i]) & (cap - 1);
            while (slots[j])
                j = (j + 1) & (cap - 1);
            slots[j] = (uint32_t)i + 1;
        }
        free(bt->tslots);
        bt->tslots = slots;
        bt->tcap = cap;
    }
    size_t mask = bt->tcap - 1;
    size_t j = hash_bytes(s, len) & mask;
    for (; bt->tslots[j]; j = (j + 1) & mask) {
        uint32_t id = bt->tslots[j] - 1;
        if (bt->tok_len[id] == len && memcmp(bt->tok[id], s, len) == 0)
            return (int32_t)id;
    }
    if (grow((void **)&bt->tok, &bt->tok_cap, bt->ntok + 1, sizeof *bt->tok) < 0)
        return -1;
    if (grow((void **)&bt->tok_len, &bt->tok_len_cap, bt->ntok + 1, sizeof *bt->tok_len) < 0)
        return -1;
    char *copy = arena_alloc(&bt->arena, len + 1);
    if (!copy)
        return -1;
    memcpy(copy, s, len);
    copy[len] = '\0';
    bt->tok[bt->ntok] = copy;
    bt->tok_len[bt->ntok] = (uint32_t)len;
    bt->tslots[j] = (uint32_t)bt->ntok + 1;
    return (int32_t)bt->ntok++;
}

struct bpe_trainer *bpe_train_new(void)
{
    struct bpe_trainer *bt = calloc(1, sizeof *bt);
    if (!bt)
        return NULL;
    int code;
    PCRE2_SIZE off;
    bt->re = pcre2_compile((PCRE2_SPTR)gpt2_pattern, PCRE2_ZERO_TERMINATED,
                           PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &off, NULL);
    if (!bt->re)
        goto fail;
    (void)pcre2_jit_compile(bt->re, PCRE2_JIT_COMPLETE);
    bt->md = pcre2_match_data_create_from_pattern(bt->re, NULL);
    if (!bt->md)
        goto fail;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        if (token_intern(bt, &c, 1) != b)
            goto fail;
    }
    return bt;
fail:
    bpe_train_free(bt);
    return NULL;
}

void bpe_train_free(struct bpe_trainer *bt)
{
    if (!bt)
        return;
    if (bt->md)
        pcre2_match_data_free(bt->md);
    if (bt->re)
        pcre2_code_free(bt->re);
    free(bt->wslots);
    free(bt->words);
    free(bt->pslots);
    for (size_t i = 0; i < bt->npairs; i++)
        free(bt->pairs[i].words);
    free(bt->pairs);
    free(bt->heap);
    free(bt->touched);
    free(bt->tok);
    free(bt->tok_len);
    free(bt->tslots);
    free(bt->merges);
    arena_free(bt->arena);
    free(bt);
}

/* ---- counting ------------------------------------------------------------ */

static int word_add(struct bpe_trainer *bt, const char *s, size_t len)
{
    if ((bt->nwords + 1) * 2 > bt->wcap) {
        size_t cap = bt->wcap ? bt->wcap * 2 : 4096;
        uint32_t *slots = calloc(cap, sizeof *slots);
        if (!slots)
            return -1;
        for (size_t i = 0; i < bt->nwords; i++) {
            size_t j = hash_bytes(bt->words[i].bytes, bt->words[i].len) & (cap - 1);
            while (slots[j])
                j = (j + 1) & (cap - 1);
            slots[j] = (uint32_t)i + 1;
        }
        free(bt->wslots);
        bt->wslots = slots;
        bt->wcap = cap;
    }
    size_t mask = bt->wcap - 1;
    size_t j = hash_bytes(s, len) & mask;
    for (; bt->wslots[j]; j = (j + 1) & mask) {
        struct word *w = &bt->words[bt->wslots[j] - 1];
        if (w->len == len && memcmp(w->bytes, s, len) == 0) {
            w->count++;
            return 0;
        }
    }
    if (bt->nwords >= MAX_WORDS)
        return -2;
    if (grow((void **)&bt->words, &bt->words_cap, bt->nwords + 1, sizeof *bt->words) < 0)
        return -1;
    char *copy = arena_alloc(&bt->arena, len);
    if (!copy)
        return -1;
    memcpy(copy, s, len);
    bt->words[bt->nwords] = (struct word){.bytes = copy, .len = (uint32_t)len, .count = 1};
    bt->wslots[j] = (uint32_t)bt->nwords + 1;
    bt->nwords++;
    return 0;
}

static int add_piece(struct bpe_trainer *bt, const char *s, size_t len, char *err, size_t cap)
{
    while (len > 0) {
        size_t n = len > MAX_WORD_LEN ? MAX_WORD_LEN : len;
        int rc = word_add(bt, s, n);
        if (rc == -2) {
            text_error(err, cap, "more than %u distinct words", MAX_WORDS);
            return -1;
        }
        if (rc < 0) {
            text_error(err, cap, "out of memory");
            return -1;
        }
        s += n;
        len -= n;
    }
    return 0;
}

int bpe_train_add_text(struct bpe_trainer *bt, const char *text, size_t len, char *err,
                       size_t errcap)
{
    if (bt->trained) {
        text_error(err, errcap, "text added after training");
        return -1;
    }
    size_t pos = 0;
    while (pos < len) {
        int rc = pcre2_match(bt->re, (PCRE2_SPTR)text, len, pos, 0, bt->md, NULL);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(bt->md);
        size_t ms = rc < 0 ? len : ov[0], me = rc < 0 ? len : ov[1];
        /* Bytes the pattern skips (invalid UTF-8) are words of their own. */
        if (ms > pos && add_piece(bt, text + pos, ms - pos, err, errcap) < 0)
            return -1;
        if (me > ms && add_piece(bt, text + ms, me - ms, err, errcap) < 0)
            return -1;
        if (rc < 0)
            break;
        pos = me > ms ? me : ms + 1; /* the pattern never matches empty; be safe anyway */
    }
    return 0;
}

/* ---- pairs and the heap -------------------------------------------------- */

static long pair_find(const struct bpe_trainer *bt, int32_t a, int32_t b, size_t *slot)
{
    size_t mask = bt->pcap - 1;
    size_t j = hash_pair(a, b) & mask;
    for (; bt->pslots[j]; j = (j + 1) & mask) {
        const struct pair *p = &bt->pairs[bt->pslots[j] - 1];
        if (p->a == a && p->b == b)
            return (long)bt->pslots[j] - 1;
    }
    *slot = j;
    return -1;
}

static struct pair *pair_get(struct bpe_trainer *bt, int32_t a, int32_t b)
{
    if ((bt->npairs + 1) * 2 > bt->pcap) {
        size_t cap = bt->pcap ? bt->pcap * 2 : 4096;
        uint32_t *slots = calloc(cap, sizeof *slots);
        if (!slots)
            return NULL;
        for (size_t i = 0; i < bt->npairs; i++) {
            size_t j = hash_pair(bt->pairs[i].a, bt->pairs[i].b) & (cap - 1);
            while (slots[j])
                j = (j + 1) & (cap - 1);
            slots[j] = (uint32_t)i + 1;
        }
        free(bt->pslots);
        bt->pslots = slots;
        bt->pcap = cap;
    }
    size_t slot = 0;
    long i = pair_find(bt, a, b, &slot);
    if (i >= 0)
        return &bt->pairs[i];
    if (grow((void **)&bt->pairs, &bt->pairs_cap, bt->npairs + 1, sizeof *bt->pairs) < 0)
        return NULL;
    bt->pairs[bt->npairs] = (struct pair){.a = a, .b = b};
    bt->pslots[slot] = (uint32_t)bt->npairs + 1;
    return &bt->pairs[bt->npairs++];
}

static int pair_note_word(struct pair *p, uint32_t w)
{
    if (p->nwords > 0 && p->words[p->nwords - 1] == w)
        return 0; /* the same word twice in a row: once is enough */
    if (p->nwords == p->cwords) {
        uint32_t c = p->cwords ? p->cwords * 2 : 4;
        uint32_t *n = realloc(p->words, c * sizeof *n);
        if (!n)
            return -1;
        p->words = n;
        p->cwords = c;
    }
    p->words[p->nwords++] = w;
    return 0;
}

/* Heap order: higher count first; on equal counts the smaller (a, b). */
static int ent_better(const struct heap_ent *x, const struct heap_ent *y)
{
    if (x->count != y->count)
        return x->count > y->count;
    if (x->a != y->a)
        return x->a < y->a;
    return x->b < y->b;
}

static int heap_push(struct bpe_trainer *bt, struct heap_ent e)
{
    if (grow((void **)&bt->heap, &bt->hcap, bt->nheap + 1, sizeof *bt->heap) < 0)
        return -1;
    size_t i = bt->nheap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!ent_better(&e, &bt->heap[parent]))
            break;
        bt->heap[i] = bt->heap[parent];
        i = parent;
    }
    bt->heap[i] = e;
    return 0;
}

static struct heap_ent heap_pop(struct bpe_trainer *bt)
{
    struct heap_ent top = bt->heap[0], last = bt->heap[--bt->nheap];
    size_t i = 0, n = bt->nheap;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const struct heap_ent *best = &last;
        if (l < n && ent_better(&bt->heap[l], best)) {
            m = l;
            best = &bt->heap[l];
        }
        if (r < n && ent_better(&bt->heap[r], best))
            m = r;
        if (m == i)
            break;
        bt->heap[i] = bt->heap[m];
        i = m;
    }
    if (n > 0)
        bt->heap[i] = last;
    return top;
}

static int count_initial_pairs(struct bpe_trainer *bt)
{
    for (size_t w = 0; w < bt->nwords; w++) {
        struct word *wd = &bt->words[w];
        wd->sym = arena_alloc(&bt->arena, wd->len * sizeof *wd->sym);
        if (!wd->sym)
            return -1;
        wd->nsym = wd->len;
        for (uint32_t i = 0; i < wd->len; i++)
            wd->sym[i] = (unsigned char)wd->bytes[i];
        for (uint32_t i = 0; i + 1 < wd->nsym; i++) {
            struct pair *p = pair_get(bt, wd->sym[i], wd->sym[i + 1]);
            if (!p || pair_note_word(p, (uint32_t)w) < 0)
                return -1;
            p->count += wd->count;
        }
    }
    for (size_t i = 0; i < bt->npairs; i++)
        if (heap_push(bt, (struct heap_ent){bt->pairs[i].count, bt->pairs[i].a, bt->pairs[i].b}) < 0)
            return -1;
    return 0;
}

static int64_t pair_count(const struct bpe_trainer *bt, int32_t a, int32_t b)
{
    size_t slot;
    long i = pair_find(bt, a, b, &slot);
    return i < 0 ? 0 : bt->pairs[i].count;
}

/* Adds delta to pair (a, b), noting word w when it grows. */
static int bump(struct bpe_trainer *bt, int32_t a, int32_t b, int64_t delta, uint32_t w)
{
    struct pair *p = pair_get(bt, a, b);
    if (!p)
        return -1;
    p->count += delta;
    if (delta <= 0)
        return 0;
    if (pair_note_word(p, w) < 0 ||
        grow((void **)&bt->touched, &bt->touched_cap, bt->ntouched + 1, sizeof *bt->touched) < 0)
        return -1;
    bt->touched[bt->ntouched++] = (uint32_t)(p - bt->pairs);
    return 0;
}

/* Replaces every (a, b) in the words that hold it with `id`, keeping pair
 * counts exact; pairs that gained are pushed onto the heap. */
static int apply_merge(struct bpe_trainer *bt, int32_t a, int32_t b, int32_t id)
{
    size_t slot;
    long pi = pair_find(bt, a, b, &slot);
    if (pi < 0)
        return 0;
    /* Copy the word list: bump() may grow bt->pairs and move it. */
    uint32_t nw = bt->pairs[pi].nwords;
    uint32_t *wl = malloc((nw ? nw : 1) * sizeof *wl);
    if (!wl)
        return -1;
    memcpy(wl, bt->pairs[pi].words, nw * sizeof *wl);
    int rc = 0;
    for (uint32_t k = 0; k < nw && rc == 0; k++) {
        uint32_t w = wl[k];
        if (k > 0 && wl[k - 1] == w)
            continue;
        struct word *wd = &bt->words[w];
        int64_t c = wd->count;
        uint32_t out = 0;
        for (uint32_t i = 0; i < wd->nsym && rc == 0;) {
            if (i + 1 < wd->nsym && wd->sym[i] == a && wd->sym[i + 1] == b) {
                /* left neighbour (already written to out) and right one */
                if (out > 0) {
                    int32_t left = wd->sym[out - 1];
                    rc |= bump(bt, left, a, -c, w);
                    rc |= bump(bt, left, id, c, w);
                }
                if (i + 2 < wd->nsym) {
                    int32_t right = wd->sym[i + 2];
                    rc |= bump(bt, b, right, -c, w);
                    /* When the next pair is again (a, b), (id, a) is counted
                     * now and (id, id) fixed up by the next iteration. */
                    rc |= bump(bt, id, right, c, w);
                }
                rc |= bump(bt, a, b, -c, w);
                wd->sym[out++] = id;
                i += 2;
            } else {
                wd->sym[out++] = wd->sym[i++];
            }
        }
        wd->nsym = out;
    }
    free(wl);
    if (rc)
        return -1;
    /* Pairs that gained enter the heap with their current counts; pairs
     * whose counts only fell are corrected lazily when popped. */
    for (size_t i = 0; i < bt->ntouched; i++) {
        const struct pair *p = &bt->pairs[bt->touched[i]];
        if (p->count > 0 && heap_push(bt, (struct heap_ent){p->count, p->a, p->b}) < 0)
            return -1;
    }
    bt->ntouched = 0;
    return 0;
}

int bpe_train_run(struct bpe_trainer *bt, int vocab_size, int min_frequency,
                  struct bpe_train_result *out, char *err, size_t errcap)
{
    if (bt->trained) {
        text_error(err, errcap, "already trained");
        return -1;
    }
    if (vocab_size < BPE_TRAIN_MIN_VOCAB || vocab_size > BPE_TRAIN_MAX_VOCAB || min_frequency < 1) {
        text_error(err, errcap, "vocabulary size must be %d..%d", BPE_TRAIN_MIN_VOCAB,
               BPE_TRAIN_MAX_VOCAB);
        return -1;
    }
    if (bt->nwords == 0) {
        text_error(err, errcap, "no text to learn from");
        return -1;
    }
    bt->trained = 1;
    if (count_initial_pairs(bt) < 0)
        goto oom;
    size_t target = (size_t)vocab_size - 1; /* the special token takes one id */
    while (bt->ntok < target && bt->nheap > 0) {
        struct heap_ent e = heap_pop(bt);
        int64_t now = pair_count(bt, e.a, e.b);
        if (now != e.count) {
            if (now > 0 && heap_push(bt, (struct heap_ent){now, e.a, e.b}) < 0)
                goto oom;
            continue;
        }
        if (now < min_frequency)
            break;
        size_t la = bt->tok_len[e.a], lb = bt->tok_len[e.b];
        char *joined = malloc(la + lb);
        if (!joined)
            goto oom;
        memcpy(joined, bt->tok[e.a], la);
        memcpy(joined + la, bt->tok[e.b], lb);
        int32_t id = token_intern(bt, joined, la + lb);
        free(joined);
        if (id < 0)
            goto oom;
        if (grow((void **)&bt->merges, &bt->merges_cap, bt->nmerges + 1, sizeof *bt->merges) < 0)
            goto oom;
        bt->merges[bt->nmerges][0] = e.a;
        bt->merges[bt->nmerges][1] = e.b;
        bt->nmerges++;
        if (apply_merge(bt, e.a, e.b, id) < 0)
            goto oom;
    }
    out->vocab_size = (int)bt->ntok + 1;
    out->n_merges = (int)bt->nmerges;
    out->n_words = bt->nwords;
    return 0;
oom:
    text_error(err, errcap, "out of memory");
    return -1;
}

/* ---- output -------------------------------------------------------------- */

/* A token's text in GPT-2's printable byte form. */
static char *printable_form(const char *s, size_t len)
{
    char *out = malloc(len * 2 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        unsigned b = (unsigned char)s[i];
        int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        unsigned cp = b;
        if (!printable) {
            unsigned n = 0;
            for (unsigned k = 0; k < b; k++)
                if (!((k >= 33 && k <= 126) || (k >= 161 && k <= 172) || (k >= 174)))
                    n++;
            cp = 256 + n;
        }
        if (cp < 0x80) {
            *o++ = (char)cp;
        } else {
            *o++ = (char)(0xc0 | cp >> 6);
            *o++ = (char)(0x80 | (cp & 0x3f));
        }
    }
    *o = '\0';
    return out;
}

char *bpe_train_json(const struct bpe_trainer *bt)
{
    if (!bt->trained)
        return NULL;
    json_t *vocab = json_object(), *merges = json_array();
    char **names = calloc(bt->ntok, sizeof *names);
    char *result = NULL;
    if (!vocab || !merges || !names)
        goto out;
    for (size_t i = 0; i < bt->ntok; i++) {
        names[i] = printable_form(bt->tok[i], bt->tok_len[i]);
        if (!names[i] || json_object_set_new(vocab, names[i], json_integer((json_int_t)i)) < 0)
            goto out;
    }
    int32_t special_id = (int32_t)bt->ntok;
    json_object_set_new(vocab, special_token, json_integer(special_id));
    for (size_t i = 0; i < bt->nmerges; i++) {
        const char *a = names[bt->merges[i][0]], *b = names[bt->merges[i][1]];
        size_t la = strlen(a), lb = strlen(b);
        char *m = malloc(la + lb + 2);
        if (!m)
            goto out;
        memcpy(m, a, la);
        m[la] = ' ';
        memcpy(m + la + 1, b, lb + 1);
        json_array_append_new(merges, json_string(m));
        free(m);
    }
    json_t *root = json_pack(
        "{s:s, s:n, s:n,"
        " s:[{s:i, s:s, s:b, s:b, s:b, s:b, s:b}],"
        " s:n,"
        " s:{s:s, s:b, s:b, s:b},"
        " s:{s:s, s:b, s:b, s:b},"
        " s:{s:s, s:b, s:b, s:b},"
        " s:{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:O, s:O}}",
        "version", "1.0", "truncation", "padding", "added_tokens", "id", special_id, "content",
        special_token, "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1,
        "normalizer", "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets",
        1, "use_regex", 1, "post_processor", "type", "ByteLevel", "add_prefix_space", 0,
        "trim_offsets", 0, "use_regex", 1, "decoder", "type", "ByteLevel", "add_prefix_space", 0,
        "trim_offsets", 1, "use_regex", 1, "model", "type", "BPE", "dropout", "unk_token",
        "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
        "ignore_merges", 0, "vocab", vocab, "merges", merges);
    if (root) {
        result = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        json_decref(root);
    }
out:
    if (names)
        for (size_t i = 0; i < bt->ntok; i++)
            free(names[i]);
    free(names);
    json_decref(vocab);
    json_decref(merges);
    return result;
}

int bpe_train_write(const struct bpe_trainer *bt, const char *path, char *err, size_t errcap)
{
    char *json = bpe_train_json(bt);
    if (!json) {
        text_error(err, errcap, bt->trained ? "out of memory" : "not trained");
        return -1;
    }
    char tmp[4200];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
        free(json);
        text_error(err, errcap, "%s: path too long", path);
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        text_error(err, errcap, "%s: %s", tmp, strerror(errno));
        free(json);
        return -1;
    }
    int rc = fs_write_all(fd, json, strlen(json));
    free(json);
    if (rc == 0 && write(fd, "\n", 1) != 1)
        rc = -1;
    if (rc == 0)
        rc = fsync(fd);
    if (close(fd) != 0)
        rc = -1;
    if (rc == 0)
        rc = rename(tmp, path);
    if (rc != 0) {
        text_error(err, errcap, "%s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}
