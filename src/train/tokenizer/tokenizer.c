/* tokenizer.c - loading a Hugging Face tokenizer.json and the public API of
 * tokenizer.h (encode, decode, special ids).
 *
 * Loading is strict: a step we do not implement (a normalizer, pre-tokenizer
 * or decoder type, a BPE option) is an error naming it, because silently
 * tokenizing differently from the model's training would quietly ruin a
 * fine-tune. The one leniency is the NFC normalizer, taken as "text is
 * already NFC" (see docs/formats.md).
 */
#include "train/tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train/tokenizer/tokenizer_internal.h"
#include "core/growbuf.h"
#include "core/text.h"

#define TOK_MAX_FILE ((size_t)256 << 20)

/* The GPT-2 pre-split pattern used by ByteLevel when use_regex is set. */
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

#define QUOTE(s, max) text_utf8_prefix_n((s), strlen(s), (max)), (s)

void tokenizer_free(struct tokenizer *t)
{
    if (!t)
        return;
    if (t->str)
        for (int32_t i = 0; i < t->n_ids; i++)
            free(t->str[i]);
    free(t->str);
    free(t->str_len);
    free(t->added_kind);
    tok_map_free(&t->vocab);
    tok_pairs_free(&t->merges);
    for (int i = 0; i < t->n_norm; i++) {
        free(t->norm[i].a);
        free(t->norm[i].b);
    }
    for (int i = 0; i < t->n_pre; i++)
        tok_pre_free(&t->pre[i]);
    for (size_t i = 0; i < t->n_added; i++)
        free(t->added[i].content);
    free(t->added);
    free(t);
}

/* ---- loading helpers ---------------------------------------------------- */

static pcre2_code *compile_re(const char *pattern, int literal, char *err, size_t cap)
{
    int code;
    PCRE2_SIZE off;
    uint32_t opts = literal ? PCRE2_LITERAL : (PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &code, &off,
                                   NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        text_error(err, cap, "tokenizer.json: regex \"%.*s\" does not compile at %zu: %s",
                   QUOTE(pattern, 60), (size_t)off, (const char *)msg);
        return NULL;
    }
    /* JIT makes the pre-split several times faster; the interpreter is a
     * correct fallback where JIT is unavailable. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

/* A "pattern" object: {"String": s} or {"Regex": r}. */
static pcre2_code *compile_pattern(json_t *pat, char *err, size_t cap)
{
    json_t *s = json_object_get(pat, "String");
    json_t *r = json_object_get(pat, "Regex");
    if (json_is_string(s))
        return compile_re(json_string_value(s), 1, err, cap);
    if (json_is_string(r))
        return compile_re(json_string_value(r), 0, err, cap);
    text_error(err, cap, "tokenizer.json: a Split pattern needs \"String\" or \"Regex\"");
    return NULL;
}

static const char *type_of(json_t *o)
{
    const char *s = json_string_value(json_object_get(o, "type"));
    return s ? s : "";
}

static int get_bool(json_t *o, const char *key, int dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static int add_norm(struct tokenizer *t, json_t *n, char *err, size_t cap)
{
    if (json_is_null(n) || !n)
        return 0;
    const char *type = type_of(n);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(n, "normalizers");
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) if (add_norm(t, v, err, cap) < 0) return -1;
        return 0;
    }
    if (strcmp(type, "NFC") == 0)
        return 0; /* documented leniency: input is taken to be NFC already */
    if (t->n_norm == TOK_MAX_STEPS) {
        text_error(err, cap, "tokenizer.json: too many normalizer steps");
        return -1;
    }
    struct tok_norm *s = &t->norm[t->n_norm];
    if (strcmp(type, "Prepend") == 0) {
        const char *p = json_string_value(json_object_get(n, "prepend"));
        if (!p)
            goto bad;
        s->kind = NORM_PREPEND;
        s->a = strdup(p);
        s->b = NULL;
    } else if (strcmp(type, "Replace") == 0) {
        const char *from = json_string_value(json_object_get(json_object_get(n, "pattern"), "String"));
        const char *to = json_string_value(json_object_get(n, "content"));
        if (!from || !to || !from[0]) {
            text_error(
                err, cap,
                "tokenizer.json: only Replace normalizers with a String pattern are supported");
            return -1;
        }
        s->kind = NORM_REPLACE;
        s->a = strdup(from);
        s->b = strdup(to);
        if (!s->b)
            goto oom;
    } else {
        text_error(err, cap, "tokenizer.json: unsupported normalizer \"%.*s\"", QUOTE(type, 40));
        return -1;
    }
    if (!s->a)
        goto oom;
    t->n_norm++;
    return 0;
bad:
    text_error(err, cap, "tokenizer.json: malformed %s normalizer", type);
    return -1;
oom:
    text_error(err, cap, "out of memory");
    return -1;
}

static int parse_prepend_scheme(json_t *o, enum tok_prepend *out)
{
    const char *scheme = json_string_value(json_object_get(o, "prepend_scheme"));
    if (scheme) {
        if (strcmp(scheme, "always") == 0)
            *out = PREPEND_ALWAYS;
        else if (strcmp(scheme, "first") == 0)
            *out = PREPEND_FIRST;
        else if (strcmp(scheme, "never") == 0)
            *out = PREPEND_NEVER;
        else
            return -1;
        return 0;
    }
    /* Older files say add_prefix_space instead. */
    *out = get_bool(o, "add_prefix_space", 1) ? PREPEND_ALWAYS : PREPEND_NEVER;
    return 0;
}

static int set_replacement(char dst[8], json_t *o)
{
    const char *r = json_string_value(json_object_get(o, "replacement"));
    if (!r)
        r = "\xe2\x96\x81"; /* U+2581, SentencePiece's space mark */
    size_t l = strlen(r);
    if (l == 0 || l >= 8 || tok_utf8_len((const unsigned char *)r, l) != l)
        return -1;
    memcpy(dst, r, l + 1);
    return 0;
}

static int add_pre(struct tokenizer *t, json_t *p, int *saw_bytelevel, char *err, size_t cap)
{
    if (!p || json_is_null(p))
        return 0;
    const char *type = type_of(p);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(p, "pretokenizers");
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) if (add_pre(t, v, saw_bytelevel, err, cap) < 0) return -1;
        return 0;
    }
    if (t->n_pre == TOK_MAX_STEPS) {
        text_error(err, cap, "tokenizer.json: too many pre-tokenizer steps");
        return -1;
    }
    struct tok_pre *s = &t->pre[t->n_pre];
    memset(s, 0, sizeof *s);
    if (strcmp(type, "ByteLevel") == 0) {
        s->kind = PRE_BYTELEVEL;
        s->add_prefix_space = get_bool(p, "add_prefix_space", 1);
        if (get_bool(p, "use_regex", 1) && !(s->re = compile_re(gpt2_pattern, 0, err, cap)))
            return -1;
        *saw_bytelevel = 1;
    } else if (strcmp(type, "Split") == 0) {
        s->kind = PRE_SPLIT;
        if (get_bool(p, "invert", 0)) {
            text_error(err, cap, "tokenizer.json: inverted Split pre-tokenizers are not supported");
            return -1;
        }
        const char *b = json_string_value(json_object_get(p, "behavior"));
        if (!b || strcmp(b, "Isolated") == 0)
            s->behavior = SPLIT_ISOLATED;
        else if (strcmp(b, "Removed") == 0)
            s->behavior = SPLIT_REMOVED;
        else if (strcmp(b, "MergedWithPrevious") == 0)
            s->behavior = SPLIT_MERGED_PREV;
        else if (strcmp(b, "MergedWithNext") == 0)
            s->behavior = SPLIT_MERGED_NEXT;
        else {
            text_error(err, cap, "tokenizer.json: unsupported Split behavior \"%.*s\"",
                       QUOTE(b, 30));
            return -1;
        }
        if (!(s->re = compile_pattern(json_object_get(p, "pattern"), err, cap)))
            return -1;
    } else if (strcmp(type, "Digits") == 0) {
        s->kind = PRE_SPLIT;
        s->behavior = SPLIT_ISOLATED;
        const char *pat = get_bool(p, "individual_digits", 0) ? "\\p{N}" : "\\p{N}+";
        if (!(s->re = compile_re(pat, 0, err, cap)))
            return -1;
    } else if (strcmp(type, "Metaspace") == 0) {
        s->kind = PRE_METASPACE;
        s->split = get_bool(p, "split", 1);
        if (set_replacement(s->replacement, p) < 0 || parse_prepend_scheme(p, &s->prepend) < 0) {
            text_error(err, cap, "tokenizer.json: malformed Metaspace pre-tokenizer");
            return -1;
        }
    } else {
        text_error(err, cap, "tokenizer.json: unsupported pre-tokenizer \"%.*s\"", QUOTE(type, 40));
        return -1;
    }
    t->n_pre++;
    return 0;
}

static int add_decoder(struct tokenizer *t, json_t *d, char *err, size_t cap)
{
    if (!d || json_is_null(d))
        return 0;
    const char *type = type_of(d);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(d, "decoders");
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) if (add_decoder(t, v, err, cap) < 0) return -1;
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        t->dec_byte_level = 1;
    } else if (strcmp(type, "Metaspace") == 0) {
        enum tok_prepend pre;
        if (set_replacement(t->dec_meta, d) < 0 || parse_prepend_scheme(d, &pre) < 0)
            goto bad;
        t->dec_metaspace = 1;
        t->dec_strip_first = pre != PREPEND_NEVER;
    } else if (strcmp(type, "Replace") == 0) {
        const char *from = json_string_value(json_object_get(json_object_get(d, "pattern"), "String"));
        const char *to = json_string_value(json_object_get(d, "content"));
        if (!from || !to || strcmp(to, " ") != 0 || strlen(from) >= sizeof t->dec_meta)
            goto bad;
        snprintf(t->dec_meta, sizeof t->dec_meta, "%s", from);
        t->dec_metaspace = 1;
    } else if (strcmp(type, "ByteFallback") == 0) {
        t->dec_byte_fallback = 1;
    } else if (strcmp(type, "Fuse") == 0) {
        /* joining tokens is what decode does anyway */
    } else if (strcmp(type, "Strip") == 0) {
        const char *c = json_string_value(json_object_get(d, "content"));
        json_int_t start = json_integer_value(json_object_get(d, "start"));
        json_int_t stop = json_integer_value(json_object_get(d, "stop"));
        if (!c || strcmp(c, " ") != 0 || start > 1 || stop != 0)
            goto bad;
        t->dec_strip_first = (int)start;
    } else {
        text_error(err, cap, "tokenizer.json: unsupported decoder \"%.*s\"", QUOTE(type, 40));
        return -1;
    }
    return 0;
bad:
    text_error(err, cap, "tokenizer.json: unsupported %s decoder settings", type);
    return -1;
}

static int set_id_text(struct tokenizer *t, int32_t id, const char *s, char *err, size_t cap)
{
    if (id < 0 || id >= t->n_ids) {
        text_error(err, cap, "tokenizer.json: token id %d out of range", (int)id);
        return -1;
    }
    if (t->str[id]) {
        if (strcmp(t->str[id], s) == 0)
            return 0;
        free(t->str[id]); /* an added token redefining a vocabulary id wins */
    }
    size_t l = strlen(s);
    t->str[id] = malloc(l + 1);
    if (!t->str[id]) {
        text_error(err, cap, "out of memory");
        return -1;
    }
    memcpy(t->str[id], s, l + 1);
    t->str_len[id] = (uint32_t)l;
    return 0;
}

static int cmp_added_len(const void *a, const void *b)
{
    const struct tok_added *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id - y->id;
}

/* Reads a "merges" entry: "a b" or ["a", "b"]. */
static int merge_parts(json_t *m, const char **a, size_t *al, const char **b, size_t *bl)
{
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        const char *sp = strchr(s, ' ');
        if (!sp || sp == s || sp[1] == '\0' || strchr(sp + 1, ' '))
            return -1;
        *a = s;
        *al = (size_t)(sp - s);
        *b = sp + 1;
        *bl = strlen(sp + 1);
        return 0;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *al = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *bl = json_string_length(json_array_get(m, 1));
        return 0;
    }
    return -1;
}

static int load_merges(struct tokenizer *t, json_t *merges, char *err, size_t cap)
{
    size_t n = json_array_size(merges);
    t->has_merges = n > 0;
    if (n == 0)
        return 0;
    if (tok_pairs_init(&t->merges, n) < 0)
        goto oom;
    char *buf = NULL;
    size_t bufcap = 0;
    for (size_t i = 0; i < n; i++) {
        const char *a, *b;
        size_t al, bl;
        if (merge_parts(json_array_get(merges, i), &a, &al, &b, &bl) < 0) {
            text_error(err, cap, "tokenizer.json: merge %zu is not \"a b\" or [\"a\", \"b\"]", i);
            free(buf);
            return -1;
        }
        if (al + bl > bufcap) {
            bufcap = (al + bl) * 2 + 64;
            char *nb = realloc(buf, bufcap);
            if (!nb) {
                free(buf);
                goto oom;
            }
            buf = nb;
        }
        memcpy(buf, a, al);
        memcpy(buf + al, b, bl);
        int32_t ia = tok_map_get(&t->vocab, a, al), ib = tok_map_get(&t->vocab, b, bl);
        int32_t im = tok_map_get(&t->vocab, buf, al + bl);
        if (ia < 0 || ib < 0 || im < 0) {
            text_error(err, cap,
                       "tokenizer.json: merge %zu (\"%.*s\" + \"%.*s\") uses a token not in the "
                       "vocabulary",
                       i, text_utf8_prefix_n(a, al, 40), a, text_utf8_prefix_n(b, bl, 40), b);
            free(buf);
            return -1;
        }
        if (tok_pairs_put(&t->merges, ia, ib, (int32_t)i, im) < 0) {
            free(buf);
            goto oom;
        }
    }
    free(buf);
    return 0;
oom:
    text_error(err, cap, "out of memory");
    return -1;
}

static int32_t find_named(const struct tokenizer *t, const char *const *names)
{
    for (int i = 0; names[i]; i++) {
        int32_t id = tokenizer_token_id(t, names[i]);
        if (id >= 0)
            return id;
    }
    return -1;
}

/* The special token a TemplateProcessing post-processor puts first. */
static int32_t template_bos(const struct tokenizer *t, json_t *pp)
{
    if (!pp || json_is_null(pp))
        return -1;
    if (strcmp(type_of(pp), "Sequence") == 0) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(pp, "processors"), i, v)
        {
            int32_t id = template_bos(t, v);
            if (id >= 0)
                return id;
        }
        return -1;
    }
    if (strcmp(type_of(pp), "TemplateProcessing") != 0)
        return -1;
    json_t *first = json_array_get(json_object_get(pp, "single"), 0);
    const char *name = json_string_value(json_object_get(json_object_get(first, "SpecialToken"), "id"));
    return name ? tokenizer_token_id(t, name) : -1;
}

static int load_model(struct tokenizer *t, json_t *model, json_t *added, char *err, size_t cap)
{
    const char *type = json_string_value(json_object_get(model, "type"));
    if (type && strcmp(type, "BPE") != 0) {
        text_error(err, cap, "tokenizer.json: unsupported model type \"%.*s\"", QUOTE(type, 40));
        return -1;
    }
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab) || json_object_size(vocab) == 0) {
        text_error(err, cap, "tokenizer.json: model.vocab must be a non-empty object");
        return -1;
    }
    const char *cs = json_string_value(json_object_get(model, "continuing_subword_prefix"));
    const char *ew = json_string_value(json_object_get(model, "end_of_word_suffix"));
    if ((cs && cs[0]) || (ew && ew[0])) {
        text_error(err, cap, "tokenizer.json: BPE word prefixes/suffixes are not supported");
        return -1;
    }
    /* Ids must be dense enough to index an array. */
    int32_t max_id = -1;
    const char *k;
    json_t *v;
    json_object_foreach(vocab, k, v)
    {
        json_int_t id = json_integer_value(v);
        if (!json_is_integer(v) || id < 0 || id >= TOK_MAX_VOCAB) {
            text_error(err, cap, "tokenizer.json: vocabulary id of \"%.*s\" is not in 0..%d",
                       QUOTE(k, 40), TOK_MAX_VOCAB - 1);
            return -1;
        }
        if (id > max_id)
            max_id = (int32_t)id;
    }
    size_t i;
    json_array_foreach(added, i, v)
    {
        json_t *idv = json_object_get(v, "id");
        json_int_t id = json_integer_value(idv);
        if (!json_is_integer(idv) || id < 0 || id >= TOK_MAX_VOCAB ||
            !json_is_string(json_object_get(v, "content"))) {
            text_error(err, cap,
                       "tokenizer.json: added token %zu needs an id in range and a content", i);
            return -1;
        }
        if (id > max_id)
            max_id = (int32_t)id;
    }
    t->n_ids = max_id + 1;
    t->str = calloc((size_t)t->n_ids, sizeof *t->str);
    t->str_len = calloc((size_t)t->n_ids, sizeof *t->str_len);
    t->added_kind = calloc((size_t)t->n_ids, 1);
    if (!t->str || !t->str_len || !t->added_kind || tok_map_init(&t->vocab, json_object_size(vocab)) < 0) {
        text_error(err, cap, "out of memory");
        return -1;
    }
    json_object_foreach(vocab, k, v)
    {
        int32_t id = (int32_t)json_integer_value(v);
        if (t->str[id]) {
            text_error(err, cap, "tokenizer.json: id %d is used by two vocabulary entries",
                       (int)id);
            return -1;
        }
        if (set_id_text(t, id, k, err, cap) < 0)
            return -1;
    }
    /* The map points at t->str, which is stable from here on. */
    for (int32_t id = 0; id < t->n_ids; id++)
        if (t->str[id] && tok_map_put(&t->vocab, t->str[id], t->str_len[id], id) < 0) {
            text_error(err, cap, "out of memory");
            return -1;
        }
    t->n_added = json_array_size(added);
    t->added = calloc(t->n_added ? t->n_added : 1, sizeof *t->added);
    if (!t->added) {
        text_error(err, cap, "out of memory");
        return -1;
    }
    json_array_foreach(added, i, v)
    {
        struct tok_added *a = &t->added[i];
        const char *c = json_string_value(json_object_get(v, "content"));
        a->id = (int32_t)json_integer_value(json_object_get(v, "id"));
        a->len = strlen(c);
        a->special = get_bool(v, "special", 0);
        a->content = strdup(c);
        if (!a->content) {
            text_error(err, cap, "out of memory");
            return -1;
        }
        if (a->len == 0) {
            text_error(err, cap, "tokenizer.json: added token %zu is empty", i);
            return -1;
        }
        if (!t->str[a->id] && set_id_text(t, a->id, c, err, cap) < 0)
            return -1;
        t->added_kind[a->id] = a->special ? 2 : 1;
        t->added_first[(unsigned char)c[0]] = 1;
    }
    qsort(t->added, t->n_added, sizeof *t->added, cmp_added_len);
    t->ignore_merges = get_bool(model, "ignore_merges", 0);
    t->byte_fallback = get_bool(model, "byte_fallback", 0);
    t->fuse_unk = get_bool(model, "fuse_unk", 0);
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    t->unk_id = unk ? tok_map_get(&t->vocab, unk, strlen(unk)) : -1;
    return load_merges(t, json_object_get(model, "merges"), err, cap);
}

static struct tokenizer *load_root(json_t *root, char *err, size_t cap)
{
    if (!json_is_object(root) || !json_is_object(json_object_get(root, "model"))) {
        text_error(err, cap, "tokenizer.json: no \"model\" object");
        return NULL;
    }
    struct tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        text_error(err, cap, "out of memory");
        return NULL;
    }
    for (size_t c = 0; c < sizeof t->char_byte / sizeof t->char_byte[0]; c++)
        t->char_byte[c] = -1;
    for (int b = 0; b < 256; b++) {
        t->byte_str_len[b] = (uint8_t)tok_utf8_put(tok_byte_char((uint8_t)b), t->byte_str[b]);
        t->char_byte[tok_byte_char((uint8_t)b)] = (int16_t)b;
    }
    int saw_bytelevel = 0;
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added)) {
        text_error(err, cap, "tokenizer.json: added_tokens is not an array");
        goto fail;
    }
    if (load_model(t, json_object_get(root, "model"), added, err, cap) < 0 ||
        add_norm(t, json_object_get(root, "normalizer"), err, cap) < 0 ||
        add_pre(t, json_object_get(root, "pre_tokenizer"), &saw_bytelevel, err, cap) < 0 ||
        add_decoder(t, json_object_get(root, "decoder"), err, cap) < 0)
        goto fail;
    t->kind = saw_bytelevel || t->dec_byte_level ? TOK_BYTE_LEVEL : TOK_SENTENCEPIECE;
    if (t->kind == TOK_BYTE_LEVEL) {
        t->dec_byte_level = 1;
        for (int b = 0; b < 256; b++)
            t->byte_id[b] = tok_map_get(&t->vocab, t->byte_str[b], t->byte_str_len[b]);
    } else {
        for (int b = 0; b < 256; b++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            t->byte_id[b] = tok_map_get(&t->vocab, name, strlen(name));
        }
        if (t->byte_fallback)
            t->dec_byte_fallback = 1;
    }
    static const char *const bos_names[] = {"<s>", "<|begin_of_text|>", "<bos>", "<|startoftext|>",
                                            "<|endoftext|>", NULL};
    static const char *const eos_names[] = {"</s>", "<|end_of_text|>", "<eos>", "<|endoftext|>",
                                            "<|im_end|>", NULL};
    t->bos = template_bos(t, json_object_get(root, "post_processor"));
    if (t->bos < 0)
        t->bos = find_named(t, bos_names);
    t->eos = find_named(t, eos_names);
    return t;
fail:
    tokenizer_free(t);
    return NULL;
}

struct tokenizer *tokenizer_load_json(const char *json, size_t len, char *err, size_t errcap)
{
    json_error_t jerr;
    json_t *root = json_loadb(json, len, 0, &jerr);
    if (!root) {
        text_error(err, errcap, "tokenizer.json: not valid JSON (line %d: %s)", jerr.line,
                   jerr.text);
        return NULL;
    }
    struct tokenizer *t = load_root(root, err, errcap);
    json_decref(root);
    return t;
}

struct tokenizer *tokenizer_load(const char *path, char *err, size_t errcap)
{
    struct stat sb;
    if (stat(path, &sb) < 0) {
        text_error(err, errcap, "%s: cannot read", path);
        return NULL;
    }
    if ((size_t)sb.st_size > TOK_MAX_FILE) {
        text_error(err, errcap, "%s: larger than 256 MiB", path);
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        text_error(err, errcap, "%s: not valid JSON (line %d: %s)", path, jerr.line, jerr.text);
        return NULL;
    }
    struct tokenizer *t = load_root(root, err, errcap);
    json_decref(root);
    return t;
}

int tokenizer_vocab_size(const struct tokenizer *t)
{
    return t->n_ids;
}

int tokenizer_bos_id(const struct tokenizer *t)
{
    return t->bos;
}

int tokenizer_eos_id(const struct tokenizer *t)
{
    return t->eos;
}

int tokenizer_token_id(const struct tokenizer *t, const char *text)
{
    size_t l = strlen(text);
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == l && memcmp(t->added[i].content, text, l) == 0)
            return t->added[i].id;
    return tok_map_get(&t->vocab, text, l);
}

const char *tokenizer_token_text(const struct tokenizer *t, int id)
{
    return id >= 0 && id < t->n_ids ? t->str[id] : NULL;
}

int tokenizer_token_kind(const struct tokenizer *t, int id)
{
    if (id < 0 || id >= t->n_ids || !t->str[id])
        return -1;
    return t->added_kind[id];
}

int tokenizer_is_byte_level(const struct tokenizer *t)
{
    return t->kind == TOK_BYTE_LEVEL;
}

/* ---- encoding ------------------------------------------------------------- */

struct enc {
    struct tok_pieces a, b;
    struct tok_bpe_work *w;
    int32_t *ids;
    size_t n, cap;
};

static int encode_segment(const struct tokenizer *t, struct enc *e, const char *s, size_t len,
                          int first)
{
    if (len == 0)
        return 0;
    if (tok_pre_run(t, s, len, first, &e->a, &e->b) < 0)
        return -1;
    for (size_t i = 0; i < e->a.n; i++)
        if (tok_bpe_piece(t, e->w, e->a.buf + e->a.off[i], e->a.plen[i], &e->ids, &e->n, &e->cap) < 0)
            return -1;
    return 0;
}

/* The longest added token that starts at s, or NULL. */
static const struct tok_added *added_at(const struct tokenizer *t, const char *s, size_t avail)
{
    if (!t->added_first[(unsigned char)s[0]])
        return NULL;
    for (size_t i = 0; i < t->n_added; i++) {
        const struct tok_added *a = &t->added[i];
        if (a->len <= avail && memcmp(a->content, s, a->len) == 0)
            return a;
    }
    return NULL;
}

static int encode(const struct tokenizer *t, const char *text, size_t len, int special,
                  int32_t **ids, size_t *n)
{
    *ids = NULL;
    *n = 0;
    if (len > TOK_MAX_INPUT)
        return -1;
    struct enc e = {0};
    e.w = tok_bpe_work_new();
    int rc = e.w ? 0 : -1;
    size_t seg = 0;
    if (special && t->n_added > 0) {
        for (size_t i = 0; i < len && rc == 0;) {
            const struct tok_added *a = added_at(t, text + i, len - i);
            if (!a) {
                i++;
                continue;
            }
            rc = encode_segment(t, &e, text + seg, i - seg, seg == 0);
            if (rc == 0 && e.n == e.cap) {
                size_t c = e.cap ? e.cap * 2 : 64;
                int32_t *p = realloc(e.ids, c * sizeof *p);
                if (!p)
                    rc = -1;
                else {
                    e.ids = p;
                    e.cap = c;
                }
            }
            if (rc == 0)
                e.ids[e.n++] = a->id;
            i += a->len;
            seg = i;
        }
    }
    if (rc == 0)
        rc = encode_segment(t, &e, text + seg, len - seg, seg == 0);
    tok_pieces_free(&e.a);
    tok_pieces_free(&e.b);
    tok_bpe_work_free(e.w);
    if (rc < 0) {
        free(e.ids);
        return -1;
    }
    if (!e.ids) {
        e.ids = malloc(sizeof *e.ids); /* a valid pointer even for no tokens */
        if (!e.ids)
            return -1;
    }
    *ids = e.ids;
    *n = e.n;
    return 0;
}

int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len, int32_t **ids,
                     size_t *n)
{
    return encode(t, text, len, 0, ids, n);
}

int tokenizer_encode_special(const struct tokenizer *t, const char *text, size_t len,
                             int32_t **ids, size_t *n)
{
    return encode(t, text, len, 1, ids, n);
}

/* ---- decoding ------------------------------------------------------------- */

/* Decoded text grows in a growbuf without a cap of its own: it is bounded
 * by the ids given and the vocabulary's strings. -1 on out of memory. */
static int sb_put(struct growbuf *b, const char *s, size_t n)
{
    return growbuf_append(b, s, n) ? -1 : 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

static int decode_token(const struct tokenizer *t, const char *s, size_t len, struct growbuf *raw)
{
    if (t->dec_byte_fallback && len == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' &&
        hexval(s[3]) >= 0 && hexval(s[4]) >= 0) {
        char byte = (char)(hexval(s[3]) * 16 + hexval(s[4]));
        return sb_put(raw, &byte, 1);
    }
    if (t->dec_byte_level) {
        for (size_t i = 0; i < len;) {
            size_t cl = tok_utf8_len((const unsigned char *)s + i, len - i);
            uint32_t cp = tok_utf8_get((const unsigned char *)s + i, cl);
            int byte = cl > 1 || s[i] >= 0 ? (cp < 256 + 68 ? t->char_byte[cp] : -1) : -1;
            int rc;
            if (byte >= 0) {
                char c = (char)byte;
                rc = sb_put(raw, &c, 1);
            } else {
                rc = sb_put(raw, s + i, cl); /* not from the byte table: kept as written */
            }
            if (rc < 0)
                return -1;
            i += cl;
        }
        return 0;
    }
    if (t->dec_metaspace) {
        size_t ml = strlen(t->dec_meta);
        for (size_t i = 0; i < len;) {
            if (i + ml <= len && memcmp(s + i, t->dec_meta, ml) == 0) {
                if (sb_put(raw, " ", 1) < 0)
                    return -1;
                i += ml;
            } else {
                if (sb_put(raw, s + i, 1) < 0)
                    return -1;
                i++;
            }
        }
        return 0;
    }
    return sb_put(raw, s, len);
}

/* Byte-level and byte-fallback tokens can end mid-character: `len` bytes
 * as UTF-8 with every invalid sequence replaced by U+FFFD, so callers
 * always get UTF-8 (malloc'd, NUL-terminated); NULL when memory ran out. */
static char *valid_utf8(const char *p, size_t len)
{
    struct growbuf out = GROWBUF_INIT(GROWBUF_UNBOUNDED);
    if (sb_put(&out, "", 0) < 0)
        return NULL;
    const unsigned char *u = (const unsigned char *)p;
    for (size_t i = 0; i < len;) {
        size_t cl = tok_utf8_len(u + i, len - i);
        int rc = cl == 1 && u[i] >= 0x80 ? sb_put(&out, "\xef\xbf\xbd", 3)
                                         : sb_put(&out, p + i, cl);
        if (rc < 0) {
            free(out.p);
            return NULL;
        }
        i += cl;
    }
    return out.p;
}

char *tokenizer_decode(const struct tokenizer *t, const int32_t *ids, size_t n, int skip_special)
{
    struct growbuf raw = GROWBUF_INIT(GROWBUF_UNBOUNDED);
    int first = 1;
    if (sb_put(&raw, "", 0) < 0)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_ids || !t->str[id])
            continue;
        int rc;
        size_t before = raw.len;
        if (t->added_kind[id]) {
            if (t->added_kind[id] == 2 && skip_special)
                continue;
            rc = sb_put(&raw, t->str[id], t->str_len[id]);
        } else {
            rc = decode_token(t, t->str[id], t->str_len[id], &raw);
            if (rc == 0 && first && t->dec_strip_first && raw.len > before && raw.p[before] == ' ') {
                memmove(raw.p + before, raw.p + before + 1, raw.len - before - 1);
                raw.len--;
                raw.p[raw.len] = '\0';
            }
        }
        if (rc < 0) {
            free(raw.p);
            return NULL;
        }
        first = 0;
    }
    char *text = valid_utf8(raw.p, raw.len);
    free(raw.p);
    return text;
}

char *tokenizer_token_piece(const struct tokenizer *t, int id, char **bytes, size_t *len)
{
    *bytes = NULL;
    *len = 0;
    if (id < 0 || id >= t->n_ids || !t->str[id])
        return NULL;
    struct growbuf raw = GROWBUF_INIT(GROWBUF_UNBOUNDED);
    int rc = sb_put(&raw, "", 0);
    if (rc == 0)
        rc = t->added_kind[id] ? sb_put(&raw, t->str[id], t->str_len[id])
                               : decode_token(t, t->str[id], t->str_len[id], &raw);
    char *text = rc == 0 ? valid_utf8(raw.p, raw.len) : NULL;
    if (!text) {
        free(raw.p);
        return NULL;
    }
    *bytes = raw.p;
    *len = raw.len;
    return text;
}
