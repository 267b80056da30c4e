/* tokenizer_pre.c - normalizers and pre-tokenizers: the steps that turn a
 * segment of text into pre-tokens before BPE, following the semantics of
 * the Hugging Face `tokenizers` steps of the same names (Prepend, Replace;
 * Split, ByteLevel, Metaspace, Digits). */
#include <stdlib.h>
#include <string.h>

#include "train/tokenizer/tokenizer_internal.h"

void tok_pre_free(struct tok_pre *p)
{
    if (p->re)
        pcre2_code_free(p->re);
    p->re = NULL;
}

/* Finds the next match at or after `from`; 1 with [*ms, *me), else 0. */
struct matcher {
    const pcre2_code *re;
    pcre2_match_data *md;
    const char *lit; /* literal match instead of re */
    size_t lit_len;
};

static int next_match(struct matcher *m, const char *s, size_t len, size_t from, size_t *ms,
                      size_t *me)
{
    if (m->lit) {
        for (size_t i = from; i + m->lit_len <= len; i++)
            if (memcmp(s + i, m->lit, m->lit_len) == 0) {
                *ms = i;
                *me = i + m->lit_len;
                return 1;
            }
        return 0;
    }
    while (from <= len) {
        int rc = pcre2_match(m->re, (PCRE2_SPTR)s, len, from, 0, m->md, NULL);
        if (rc < 0)
            return 0;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
        if (ov[1] > ov[0]) {
            *ms = ov[0];
            *me = ov[1];
            return 1;
        }
        /* An empty match splits nothing; look again one character on. */
        if (ov[0] >= len)
            return 0;
        from = ov[0] + tok_utf8_len((const unsigned char *)s + ov[0], len - ov[0]);
    }
    return 0;
}

/* Splits one piece at the matches, folding matches into pieces the way
 * `behavior` says, and appends the results to out. */
static int split_piece(struct matcher *m, enum tok_split_behavior behavior, const char *s,
                       size_t len, struct tok_pieces *out)
{
    size_t pos = 0, ms, me;
    size_t emitted = 0;    /* pieces this call has added (only those may grow) */
    int previous_match = 0;
    for (;;) {
        int found = next_match(m, s, len, pos, &ms, &me);
        size_t gap_end = found ? ms : len;
        /* The gap [pos, gap_end), then the match [ms, me); empty gaps are
         * not parts at all. */
        for (int part = 0; part < 2; part++) {
            int is_match = part == 1;
            if (is_match && !found)
                break;
            const char *p = s + (is_match ? ms : pos);
            size_t n = is_match ? me - ms : gap_end - pos;
            if (n == 0)
                continue;
            int rc = 0;
            switch (behavior) {
            case SPLIT_ISOLATED:
                rc = tok_pieces_add(out, p, n);
                emitted++;
                break;
            case SPLIT_REMOVED:
                if (!is_match) {
                    rc = tok_pieces_add(out, p, n);
                    emitted++;
                }
                break;
            case SPLIT_MERGED_PREV:
                if (is_match && !previous_match && emitted > 0) {
                    rc = tok_pieces_extend(out, p, n);
                } else {
                    rc = tok_pieces_add(out, p, n);
                    emitted++;
                }
                break;
            case SPLIT_MERGED_NEXT:
                if (previous_match && emitted > 0) {
                    rc = tok_pieces_extend(out, p, n);
                } else {
                    rc = tok_pieces_add(out, p, n);
                    emitted++;
                }
                break;
            }
            if (rc < 0)
                return -1;
            previous_match = is_match;
        }
        if (!found)
            return 0;
        pos = me;
    }
}

static int normalize(const struct tokenizer *t, const char *text, size_t len,
                     struct tok_pieces *a, struct tok_pieces *b)
{
    tok_pieces_clear(a);
    if (tok_pieces_add(a, text, len) < 0)
        return -1;
    for (int i = 0; i < t->n_norm; i++) {
        const struct tok_norm *n = &t->norm[i];
        const char *s = a->buf;
        size_t sl = a->len;
        tok_pieces_clear(b);
        if (n->kind == NORM_PREPEND) {
            if (sl == 0)
                continue;
            if (tok_pieces_add(b, n->a, strlen(n->a)) < 0 || tok_pieces_extend(b, s, sl) < 0)
                return -1;
        } else {
            size_t al = strlen(n->a), bl = strlen(n->b), pos = 0;
            if (tok_pieces_add(b, "", 0) < 0)
                return -1;
            while (pos < sl) {
                if (al && pos + al <= sl && memcmp(s + pos, n->a, al) == 0) {
                    if (tok_pieces_extend(b, n->b, bl) < 0)
                        return -1;
                    pos += al;
                } else {
                    size_t next = pos + 1;
                    while (next < sl && (!al || s[next] != n->a[0]))
                        next++;
                    if (tok_pieces_extend(b, s + pos, next - pos) < 0)
                        return -1;
                    pos = next;
                }
            }
        }
        struct tok_pieces tmp = *a;
        *a = *b;
        *b = tmp;
    }
    return 0;
}

static int metaspace_piece(const struct tok_pre *p, const char *s, size_t len, int prepend,
                           struct tok_pieces *out, struct tok_pieces *tmp)
{
    size_t rl = strlen(p->replacement);
    tok_pieces_clear(tmp);
    if (tok_pieces_add(tmp, "", 0) < 0)
        return -1;
    int starts = len >= 1 && (s[0] == ' ' || (len >= rl && memcmp(s, p->replacement, rl) == 0));
    if (prepend && !starts && tok_pieces_extend(tmp, p->replacement, rl) < 0)
        return -1;
    for (size_t i = 0; i < len; i++) {
        int rc = s[i] == ' ' ? tok_pieces_extend(tmp, p->replacement, rl)
                             : tok_pieces_extend(tmp, s + i, 1);
        if (rc < 0)
            return -1;
    }
    if (!p->split)
        return tok_pieces_add(out, tmp->buf, tmp->len);
    struct matcher m = {.lit = p->replacement, .lit_len = rl};
    return split_piece(&m, SPLIT_MERGED_NEXT, tmp->buf, tmp->len, out);
}

int tok_pre_run(const struct tokenizer *t, const char *text, size_t len, int first,
                struct tok_pieces *out, struct tok_pieces *scratch)
{
    if (normalize(t, text, len, out, scratch) < 0)
        return -1;
    struct tok_pieces tmp = {0};
    int rc = 0;
    for (int i = 0; i < t->n_pre && rc == 0; i++) {
        const struct tok_pre *p = &t->pre[i];
        struct matcher m = {.re = p->re};
        if (p->re) {
            m.md = pcre2_match_data_create_from_pattern(p->re, NULL);
            if (!m.md) {
                rc = -1;
                break;
            }
        }
        tok_pieces_clear(scratch);
        for (size_t k = 0; k < out->n && rc == 0; k++) {
            const char *s = out->buf + out->off[k];
            size_t sl = out->plen[k];
            switch (p->kind) {
            case PRE_SPLIT:
                rc = split_piece(&m, p->behavior, s, sl, scratch);
                break;
            case PRE_BYTELEVEL: {
                const char *src = s;
                size_t srcl = sl;
                if (p->add_prefix_space && (sl == 0 || s[0] != ' ')) {
                    tok_pieces_clear(&tmp);
                    if (tok_pieces_add(&tmp, " ", 1) < 0 || tok_pieces_extend(&tmp, s, sl) < 0) {
                        rc = -1;
                        break;
                    }
                    src = tmp.buf;
                    srcl = tmp.len;
                }
                rc = p->re ? split_piece(&m, SPLIT_ISOLATED, src, srcl, scratch)
                           : tok_pieces_add(scratch, src, srcl);
                break;
            }
            case PRE_METASPACE: {
                int prepend = p->prepend == PREPEND_ALWAYS ||
                              (p->prepend == PREPEND_FIRST && first && k == 0);
                rc = metaspace_piece(p, s, sl, prepend, scratch, &tmp);
                break;
            }
            }
        }
        if (m.md)
            pcre2_match_data_free(m.md);
        struct tok_pieces swap = *out;
        *out = *scratch;
        *scratch = swap;
    }
    tok_pieces_free(&tmp);
    return rc;
}
