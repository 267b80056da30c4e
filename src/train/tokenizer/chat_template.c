/* chat_template.c - the Jinja subset of chat_template.h.
 *
 * Three stages. The scanner cuts the source into text and tags, applying
 * whitespace control as transformers configures Jinja (trim_blocks: the
 * newline after a block or comment tag goes; lstrip_blocks: blanks before a
 * block tag at the start of a line go; `-` strips all whitespace on its
 * side) and turns tag contents into tokens. The parser builds a tree of
 * nodes, all from one arena freed with the template. The renderer walks it.
 *
 * Memory while rendering: every value the renderer makes is registered in a
 * pool that holds one reference to it until the render ends, so values are
 * passed around as borrowed pointers and an error can unwind with longjmp
 * without leaking. The pool has a cap, so a template that loops forever
 * making values fails instead of exhausting memory; so does output.
 */
#include "train/tokenizer/chat_template.h"

#include <ctype.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/growbuf.h"

#define MAX_POOL (4 << 20)   /* values made in one render */
#define MAX_DEPTH 64         /* nesting of macro calls and of frames */
#define MAX_TOKENS (1 << 20)
#define MAX_STEPS (10 * 1000 * 1000) /* loop passes in one render: no template loops for ever */

/* ---- tokens ------------------------------------------------------------ */

enum tk { T_EOF, T_TEXT, T_EXPR_OPEN, T_EXPR_CLOSE, T_STMT_OPEN, T_STMT_CLOSE, T_NAME, T_NUM,
          T_STR, T_OP };

struct token {
    enum tk kind;
    const char *s; /* T_TEXT, T_NAME, T_OP: into the source; T_STR: decoded, in the arena */
    size_t n;
    double num;
    int is_int;
    int line;
};

/* ---- nodes ------------------------------------------------------------- */

enum nk {
    /* statements */
    S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_MACRO, S_BREAK, S_CONTINUE,
    /* expressions */
    E_LIT, E_VAR, E_ATTR, E_INDEX, E_SLICE, E_CALL, E_FILTER, E_TEST, E_NOTTEST, E_NEG, E_NOT,
    E_AND, E_OR, E_BIN, E_COND, E_LIST, E_DICT
};

struct node {
    enum nk kind;
    int line;
    const char *name;  /* var, attr, filter, test, macro, set target; op for E_BIN */
    size_t name_len;
    json_t *lit;       /* E_LIT (owned by the template) */
    struct node *a, *b, *c;
    struct node **args; /* call, filter, test arguments; list/dict items; macro defaults */
    const char **kw;    /* keyword of each argument, or NULL; macro parameter names */
    size_t nargs;
    struct node *body, *orelse; /* statement lists */
    const char *name2;          /* for: second target name; set: attribute */
    struct node *next;
};

struct chat_template {
    struct node *root;
    void **arena; /* every allocation of the parse */
    size_t n_arena, cap_arena;
    json_t **lits;
    size_t n_lits, cap_lits;
};

struct parser {
    struct chat_template *t;
    struct token *tok;
    size_t n, cap, pos;
    const char *src;
    size_t len;
    char *err;
    size_t errcap;
    jmp_buf jb;
};

static void perr(struct parser *p, int line, const char *fmt, ...)
{
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errcap, "chat template line %d: %s", line, msg);
    longjmp(p->jb, 1);
}

static void *amalloc(struct parser *p, size_t n)
{
    struct chat_template *t = p->t;
    if (t->n_arena == t->cap_arena) {
        size_t cap = t->cap_arena ? t->cap_arena * 2 : 256;
        void **a = realloc(t->arena, cap * sizeof *a);
        if (!a)
            perr(p, 0, "out of memory");
        t->arena = a;
        t->cap_arena = cap;
    }
    void *m = calloc(1, n ? n : 1);
    if (!m)
        perr(p, 0, "out of memory");
    t->arena[t->n_arena++] = m;
    return m;
}

static json_t *keep_lit(struct parser *p, json_t *v)
{
    struct chat_template *t = p->t;
    if (!v)
        perr(p, 0, "out of memory");
    if (t->n_lits == t->cap_lits) {
        size_t cap = t->cap_lits ? t->cap_lits * 2 : 64;
        json_t **a = realloc(t->lits, cap * sizeof *a);
        if (!a) {
            json_decref(v);
            perr(p, 0, "out of memory");
        }
        t->lits = a;
        t->cap_lits = cap;
    }
    t->lits[t->n_lits++] = v;
    return v;
}

static int line_at(const char *src, size_t pos)
{
    int line = 1;
    for (size_t i = 0; i < pos; i++)
        line += src[i] == '\n';
    return line;
}

static void push(struct parser *p, struct token tk)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 256;
        if (cap > MAX_TOKENS)
            perr(p, tk.line, "the template is too long");
        struct token *a = realloc(p->tok, cap * sizeof *a);
        if (!a)
            perr(p, tk.line, "out of memory");
        p->tok = a;
        p->cap = cap;
    }
    p->tok[p->n++] = tk;
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Appends the UTF-8 form of code point u. */
static size_t put_utf8(char *o, unsigned u)
{
    if (u < 0x80) {
        o[0] = (char)u;
        return 1;
    }
    if (u < 0x800) {
        o[0] = (char)(0xC0 | (u >> 6));
        o[1] = (char)(0x80 | (u & 0x3F));
        return 2;
    }
    if (u < 0x10000) {
        o[0] = (char)(0xE0 | (u >> 12));
        o[1] = (char)(0x80 | ((u >> 6) & 0x3F));
        o[2] = (char)(0x80 | (u & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (u >> 18));
    o[1] = (char)(0x80 | ((u >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((u >> 6) & 0x3F));
    o[3] = (char)(0x80 | (u & 0x3F));
    return 4;
}

/* A string literal starting at src[i] (the quote); returns the index after it. */
static size_t lex_string(struct parser *p, size_t i, size_t end, int line)
{
    char q = p->src[i++];
    char *o = amalloc(p, end - i + 1);
    size_t n = 0;
    while (i < end && p->src[i] != q) {
        char c = p->src[i++];
        if (c != '\\' || i >= end) {
            o[n++] = c;
            continue;
        }
        char e = p->src[i++];
        switch (e) {
        case 'n': o[n++] = '\n'; break;
        case 't': o[n++] = '\t'; break;
        case 'r': o[n++] = '\r'; break;
        case '0': o[n++] = '\0'; break;
        case '\\': case '\'': case '"': o[n++] = e; break;
        case 'u': {
            unsigned u = 0;
            int k = 0;
            for (; k < 4 && i < end && isxdigit((unsigned char)p->src[i]); k++, i++)
                u = u * 16 + (unsigned)(isdigit((unsigned char)p->src[i])
                                            ? p->src[i] - '0'
                                            : (tolower((unsigned char)p->src[i]) - 'a' + 10));
            if (k != 4)
                perr(p, line, "bad \\u escape in a string");
            n += put_utf8(o + n, u);
            break;
        }
        default: o[n++] = '\\'; o[n++] = e; break;
        }
    }
    if (i >= end)
        perr(p, line, "a string is not closed");
    push(p, (struct token){.kind = T_STR, .s = o, .n = n, .line = line});
    return i + 1;
}

static void lex_tag(struct parser *p, size_t i, size_t end, int line)
{
    static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">="};
    while (i < end) {
        char c = p->src[i];
        if (is_ws(c)) {
            line += c == '\n';
            i++;
        } else if (isalpha((unsigned char)c) || c == '_') {
            size_t s = i;
            while (i < end && (isalnum((unsigned char)p->src[i]) || p->src[i] == '_'))
                i++;
            push(p, (struct token){.kind = T_NAME, .s = p->src + s, .n = i - s, .line = line});
        } else if (isdigit((unsigned char)c)) {
            size_t s = i;
            int is_int = 1;
            while (i < end && isdigit((unsigned char)p->src[i]))
                i++;
            if (i + 1 < end && p->src[i] == '.' && isdigit((unsigned char)p->src[i + 1])) {
                is_int = 0;
                i++;
                while (i < end && isdigit((unsigned char)p->src[i]))
                    i++;
            }
            char buf[64];
            size_t n = i - s < sizeof buf - 1 ? i - s : sizeof buf - 1;
            memcpy(buf, p->src + s, n);
            buf[n] = '\0';
            push(p, (struct token){.kind = T_NUM, .num = strtod(buf, NULL), .is_int = is_int,
                                   .line = line});
        } else if (c == '\'' || c == '"') {
            i = lex_string(p, i, end, line);
        } else {
            size_t n = 1;
            for (size_t k = 0; k < sizeof ops2 / sizeof *ops2; k++)
                if (i + 1 < end && memcmp(p->src + i, ops2[k], 2) == 0)
                    n = 2;
            if (n == 1 && !strchr("()[]{}.,:|~+-*/%<>=", c))
                perr(p, line, "unexpected character '%c'", c);
            push(p, (struct token){.kind = T_OP, .s = p->src + i, .n = n, .line = line});
            i += n;
        }
    }
}

/* The end of a tag's content: the index of the closing "}}"/"%}" (skipping
 * string literals), or of "#}" for a comment. */
static size_t tag_end(struct parser *p, size_t i, char kind, int line)
{
    char close = kind == '{' ? '}' : kind;
    for (; i + 1 < p->len; i++) {
        char c = p->src[i];
        if (kind != '#' && (c == '\'' || c == '"')) {
            size_t j = i + 1;
            while (j < p->len && p->src[j] != c)
                j += p->src[j] == '\\' ? 2 : 1;
            i = j;
            continue;
        }
        if (c == close && p->src[i + 1] == '}')
            return i;
    }
    perr(p, line, "a tag is not closed");
    return 0;
}

static void scan(struct parser *p)
{
    size_t pos = 0, text_start = 0;
    for (;;) {
        size_t i = pos;
        while (i + 1 < p->len &&
               !(p->src[i] == '{' && (p->src[i + 1] == '{' || p->src[i + 1] == '%' ||
                                      p->src[i + 1] == '#')))
            i++;
        if (i + 1 >= p->len) {
            if (text_start < p->len)
                push(p, (struct token){.kind = T_TEXT, .s = p->src + text_start,
                                       .n = p->len - text_start});
            break;
        }
        char kind = p->src[i + 1];
        int line = line_at(p->src, i);
        char mod = i + 2 < p->len ? p->src[i + 2] : 0;
        size_t text_end = i;
        if (mod == '-') {
            while (text_end > text_start && is_ws(p->src[text_end - 1]))
                text_end--;
        } else if (kind != '{' && mod != '+') {
            size_t j = i;
            while (j > text_start && (p->src[j - 1] == ' ' || p->src[j - 1] == '\t'))
                j--;
            if (j == 0 || p->src[j - 1] == '\n')
                text_end = j;
        }
        if (text_end > text_start)
            push(p, (struct token){.kind = T_TEXT, .s = p->src + text_start,
                                   .n = text_end - text_start, .line = line});
        size_t cstart = i + 2 + (mod == '-' || mod == '+');
        size_t close = tag_end(p, cstart, kind, line);
        size_t cend = close;
        char rmod = cend > cstart ? p->src[cend - 1] : 0;
        if (rmod == '-' || rmod == '+')
            cend--;
        if (kind != '#') {
            push(p, (struct token){.kind = kind == '{' ? T_EXPR_OPEN : T_STMT_OPEN, .line = line});
            lex_tag(p, cstart, cend, line);
            push(p, (struct token){.kind = kind == '{' ? T_EXPR_CLOSE : T_STMT_CLOSE,
                                   .line = line});
        }
        pos = close + 2;
        if (rmod == '-') {
            while (pos < p->len && is_ws(p->src[pos]))
                pos++;
        } else if (kind != '{' && rmod != '+' && pos < p->len && p->src[pos] == '\n') {
            pos++;
        }
        text_start = pos;
    }
    push(p, (struct token){.kind = T_EOF, .line = line_at(p->src, p->len)});
}

/* ---- parser ------------------------------------------------------------ */

static struct token *peek(struct parser *p) { return &p->tok[p->pos]; }
static struct token *next(struct parser *p)
{
    struct token *t = &p->tok[p->pos];
    if (t->kind != T_EOF)
        p->pos++;
    return t;
}

static int is_op(const struct token *t, const char *op)
{
    return t->kind == T_OP && t->n == strlen(op) && memcmp(t->s, op, t->n) == 0;
}

static int is_name(const struct token *t, const char *name)
{
    return t->kind == T_NAME && t->n == strlen(name) && memcmp(t->s, name, t->n) == 0;
}

static const char *tk_desc(const struct token *t, char *buf, size_t cap)
{
    switch (t->kind) {
    case T_EOF: return "the end of the template";
    case T_EXPR_CLOSE: return "}}";
    case T_STMT_CLOSE: return "%}";
    case T_STR: return "a string";
    case T_NUM: return "a number";
    default: snprintf(buf, cap, "\"%.*s\"", (int)(t->n < 40 ? t->n : 40), t->s); return buf;
    }
}

static void expect_op(struct parser *p, const char *op)
{
    struct token *t = next(p);
    if (!is_op(t, op)) {
        char b[64];
        perr(p, t->line, "expected \"%s\", found %s", op, tk_desc(t, b, sizeof b));
    }
}

static const char *expect_name(struct parser *p, size_t *len)
{
    struct token *t = next(p);
    if (t->kind != T_NAME) {
        char b[64];
        perr(p, t->line, "expected a name, found %s", tk_desc(t, b, sizeof b));
    }
    char *s = amalloc(p, t->n + 1);
    memcpy(s, t->s, t->n);
    if (len)
        *len = t->n;
    return s;
}

static void expect_close(struct parser *p, enum tk kind)
{
    struct token *t = next(p);
    if (t->kind != kind) {
        char b[64];
        perr(p, t->line, "expected %s, found %s", kind == T_STMT_CLOSE ? "%}" : "}}",
             tk_desc(t, b, sizeof b));
    }
}

static struct node *mk(struct parser *p, enum nk kind, int line)
{
    struct node *n = amalloc(p, sizeof *n);
    n->kind = kind;
    n->line = line;
    return n;
}

static struct node *expr(struct parser *p);
static struct node *or_expr(struct parser *p);

struct argv_build {
    struct node *a[64];
    const char *kw[64];
    size_t n;
};

static void put_args(struct parser *p, struct node *n, struct argv_build *b)
{
    n->nargs = b->n;
    n->args = amalloc(p, (b->n + 1) * sizeof *n->args);
    n->kw = amalloc(p, (b->n + 1) * sizeof *n->kw);
    memcpy(n->args, b->a, b->n * sizeof *b->a);
    memcpy(n->kw, b->kw, b->n * sizeof *b->kw);
}

/* "(" already read: arguments up to ")". */
static void call_args(struct parser *p, struct node *n)
{
    struct argv_build b = {0};
    while (!is_op(peek(p), ")")) {
        if (b.n == 64)
            perr(p, peek(p)->line, "more than 64 arguments");
        struct token *t = peek(p);
        if (t->kind == T_NAME && is_op(&p->tok[p->pos + 1], "=")) {
            b.kw[b.n] = expect_name(p, NULL);
            next(p);
        }
        b.a[b.n++] = expr(p);
        if (!is_op(peek(p), ","))
            break;
        next(p);
    }
    expect_op(p, ")");
    put_args(p, n, &b);
}

static struct node *lit(struct parser *p, json_t *v, int line)
{
    struct node *n = mk(p, E_LIT, line);
    n->lit = keep_lit(p, v);
    return n;
}

static struct node *primary(struct parser *p)
{
    struct token *t = next(p);
    char b[64];
    if (t->kind == T_STR) {
        json_t *v = json_stringn(t->s, t->n);
        if (!v)
            perr(p, t->line, "a string that is not valid UTF-8");
        return lit(p, v, t->line);
    }
    if (t->kind == T_NUM) {
        if (!(t->num < 9.0e18)) /* what a 64-bit integer (and a finite float) holds */
            perr(p, t->line, "a number too large");
        return lit(p, t->is_int ? json_integer((json_int_t)t->num) : json_real(t->num), t->line);
    }
    if (t->kind == T_NAME) {
        if (is_name(t, "true") || is_name(t, "True"))
            return lit(p, json_true(), t->line);
        if (is_name(t, "false") || is_name(t, "False"))
            return lit(p, json_false(), t->line);
        if (is_name(t, "none") || is_name(t, "None"))
            return lit(p, json_null(), t->line);
        struct node *n = mk(p, E_VAR, t->line);
        p->pos--;
        n->name = expect_name(p, &n->name_len);
        return n;
    }
    if (is_op(t, "(")) {
        struct node *e = expr(p);
        if (is_op(peek(p), ",")) { /* a tuple: a list here */
            struct argv_build bl = {.a = {e}, .n = 1};
            while (is_op(peek(p), ",")) {
                next(p);
                if (is_op(peek(p), ")"))
                    break;
                if (bl.n == 64)
                    perr(p, t->line, "a tuple of more than 64 items");
                bl.a[bl.n++] = expr(p);
            }
            struct node *l = mk(p, E_LIST, t->line);
            put_args(p, l, &bl);
            e = l;
        }
        expect_op(p, ")");
        return e;
    }
    if (is_op(t, "[") || is_op(t, "{")) {
        int dict = is_op(t, "{");
        struct node *l = mk(p, dict ? E_DICT : E_LIST, t->line);
        struct node **items = NULL;
        size_t n = 0, cap = 0;
        while (!is_op(peek(p), dict ? "}" : "]")) {
            if (n + 2 > cap) {
                size_t nc = cap ? cap * 2 : 16;
                struct node **a = amalloc(p, nc * sizeof *a);
                if (items)
                    memcpy(a, items, n * sizeof *a);
                items = a;
                cap = nc;
            }
            items[n++] = expr(p);
            if (dict) {
                expect_op(p, ":");
                items[n++] = expr(p);
            }
            if (!is_op(peek(p), ","))
                break;
            next(p);
        }
        expect_op(p, dict ? "}" : "]");
        l->args = items;
        l->nargs = n;
        return l;
    }
    perr(p, t->line, "unexpected %s in an expression", tk_desc(t, b, sizeof b));
    return NULL;
}

static struct node *postfix(struct parser *p, struct node *e)
{
    for (;;) {
        struct token *t = peek(p);
        if (is_op(t, ".")) {
            next(p);
            struct node *n = mk(p, E_ATTR, t->line);
            n->a = e;
            n->name = expect_name(p, &n->name_len);
            e = n;
        } else if (is_op(t, "[")) {
            next(p);
            struct node *idx[3] = {NULL, NULL, NULL};
            int slice = 0;
            for (int k = 0; k < 3; k++) {
                if (!is_op(peek(p), ":") && !is_op(peek(p), "]"))
                    idx[k] = expr(p);
                if (k < 2 && is_op(peek(p), ":")) {
                    next(p);
                    slice = 1;
                } else {
                    break;
                }
            }
            expect_op(p, "]");
            struct node *n = mk(p, slice ? E_SLICE : E_INDEX, t->line);
            n->a = e;
            if (!slice && !idx[0])
                perr(p, t->line, "an empty subscript []");
            n->b = idx[0];
            n->c = idx[1];
            n->orelse = idx[2];
            e = n;
        } else if (is_op(t, "(")) {
            next(p);
            struct node *n = mk(p, E_CALL, t->line);
            n->a = e;
            call_args(p, n);
            e = n;
        } else {
            return e;
        }
    }
}

static int starts_primary(const struct token *t)
{
    if (t->kind == T_STR || t->kind == T_NUM)
        return 1;
    if (t->kind == T_NAME)
        return !is_name(t, "and") && !is_name(t, "or") && !is_name(t, "else") &&
               !is_name(t, "if") && !is_name(t, "is") && !is_name(t, "in") && !is_name(t, "not");
    return is_op(t, "(") || is_op(t, "[") || is_op(t, "{");
}

static struct node *filters(struct parser *p, struct node *e)
{
    for (;;) {
        struct token *t = peek(p);
        if (is_op(t, "|")) {
            next(p);
            struct node *n = mk(p, E_FILTER, t->line);
            n->name = expect_name(p, &n->name_len);
            n->a = e;
            if (is_op(peek(p), "(")) {
                next(p);
                call_args(p, n);
            }
            e = postfix(p, n);
        } else if (is_name(t, "is")) {
            next(p);
            int neg = is_name(peek(p), "not");
            if (neg)
                next(p);
            struct node *n = mk(p, neg ? E_NOTTEST : E_TEST, t->line);
            /* `none`, `true`, `false` are names of tests here */
            n->name = expect_name(p, &n->name_len);
            n->a = e;
            if (is_op(peek(p), "(")) {
                next(p);
                call_args(p, n);
            } else if (starts_primary(peek(p))) {
                struct argv_build b = {.n = 1};
                b.a[0] = postfix(p, primary(p));
                put_args(p, n, &b);
            }
            e = n;
        } else {
            return e;
        }
    }
}

static struct node *unary(struct parser *p)
{
    struct token *t = peek(p);
    if (is_op(t, "-") || is_op(t, "+")) {
        next(p);
        struct node *inner = unary(p);
        if (is_op(t, "+"))
            return inner;
        struct node *n = mk(p, E_NEG, t->line);
        n->a = inner;
        return n;
    }
    return filters(p, postfix(p, primary(p)));
}

static struct node *bin(struct parser *p, const char *op, struct node *a, struct node *b, int line)
{
    struct node *n = mk(p, E_BIN, line);
    n->name = op;
    n->a = a;
    n->b = b;
    return n;
}

static struct node *pow_expr(struct parser *p)
{
    struct node *e = unary(p);
    while (is_op(peek(p), "**")) {
        int line = next(p)->line;
        e = bin(p, "**", e, unary(p), line);
    }
    return e;
}

static struct node *math2(struct parser *p)
{
    struct node *e = pow_expr(p);
    for (;;) {
        struct token *t = peek(p);
        const char *op = is_op(t, "*") ? "*" : is_op(t, "/") ? "/" : is_op(t, "//") ? "//"
                         : is_op(t, "%") ? "%" : NULL;
        if (!op)
            return e;
        next(p);
        e = bin(p, op, e, pow_expr(p), t->line);
    }
}

static struct node *concat(struct parser *p)
{
    struct node *e = math2(p);
    while (is_op(peek(p), "~")) {
        int line = next(p)->line;
        e = bin(p, "~", e, math2(p), line);
    }
    return e;
}

static struct node *math1(struct parser *p)
{
    struct node *e = concat(p);
    for (;;) {
        struct token *t = peek(p);
        const char *op = is_op(t, "+") ? "+" : is_op(t, "-") ? "-" : NULL;
        if (!op)
            return e;
        next(p);
        e = bin(p, op, e, concat(p), t->line);
    }
}

static struct node *compare(struct parser *p)
{
    static const char *const ops[] = {"==", "!=", "<=", ">=", "<", ">"};
    struct node *e = math1(p);
    for (;;) {
        struct token *t = peek(p);
        const char *op = NULL;
        for (size_t k = 0; k < sizeof ops / sizeof *ops; k++)
            if (is_op(t, ops[k]))
                op = ops[k];
        if (is_name(t, "in"))
            op = "in";
        if (is_name(t, "not") && is_name(&p->tok[p->pos + 1], "in")) {
            next(p);
            op = "not in";
        }
        if (!op)
            return e;
        next(p);
        e = bin(p, op, e, math1(p), t->line);
    }
}

static struct node *not_expr(struct parser *p)
{
    struct token *t = peek(p);
    if (is_name(t, "not")) {
        next(p);
        struct node *n = mk(p, E_NOT, t->line);
        n->a = not_expr(p);
        return n;
    }
    return compare(p);
}

static struct node *and_expr(struct parser *p)
{
    struct node *e = not_expr(p);
    while (is_name(peek(p), "and")) {
        struct node *n = mk(p, E_AND, next(p)->line);
        n->a = e;
        n->b = not_expr(p);
        e = n;
    }
    return e;
}

static struct node *or_expr(struct parser *p)
{
    struct node *e = and_expr(p);
    while (is_name(peek(p), "or")) {
        struct node *n = mk(p, E_OR, next(p)->line);
        n->a = e;
        n->b = and_expr(p);
        e = n;
    }
    return e;
}

static struct node *expr(struct parser *p)
{
    struct node *e = or_expr(p);
    if (is_name(peek(p), "if")) {
        struct node *n = mk(p, E_COND, next(p)->line);
        n->a = e;
        n->b = or_expr(p);
        if (is_name(peek(p), "else")) {
            next(p);
            n->c = expr(p);
        }
        return n;
    }
    return e;
}

/* Statements until a tag whose first word is one of `ends` (NULL-ended);
 * that word is consumed and returned in *end (NULL at the end of the
 * template, allowed only when ends is empty). */
static struct node *body(struct parser *p, const char *const *ends, const char **end);

static struct node *stmt_if(struct parser *p, int line)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    struct node *n = mk(p, S_IF, line);
    n->a = expr(p);
    expect_close(p, T_STMT_CLOSE);
    const char *end;
    n->body = body(p, ends, &end);
    if (strcmp(end, "elif") == 0) {
        n->orelse = stmt_if(p, peek(p)->line);
    } else if (strcmp(end, "else") == 0) {
        static const char *const e2[] = {"endif", NULL};
        expect_close(p, T_STMT_CLOSE);
        n->orelse = body(p, e2, &end);
        expect_close(p, T_STMT_CLOSE);
    } else {
        expect_close(p, T_STMT_CLOSE);
    }
    return n;
}

static struct node *stmt_for(struct parser *p, int line)
{
    struct node *n = mk(p, S_FOR, line);
    n->name = expect_name(p, &n->name_len);
    if (is_op(peek(p), ",")) {
        next(p);
        n->name2 = expect_name(p, NULL);
    }
    if (!is_name(next(p), "in"))
        perr(p, line, "expected \"in\" in a for statement");
    n->a = or_expr(p); /* not expr: a trailing `if` filters the loop */
    if (is_name(peek(p), "if")) {
        next(p);
        n->b = expr(p);
    }
    if (is_name(peek(p), "recursive"))
        perr(p, line, "unsupported: recursive for loops");
    expect_close(p, T_STMT_CLOSE);
    static const char *const ends[] = {"else", "endfor", NULL};
    const char *end;
    n->body = body(p, ends, &end);
    expect_close(p, T_STMT_CLOSE);
    if (strcmp(end, "else") == 0) {
        static const char *const e2[] = {"endfor", NULL};
        n->orelse = body(p, e2, &end);
        expect_close(p, T_STMT_CLOSE);
    }
    return n;
}

static struct node *stmt_set(struct parser *p, int line)
{
    struct node *n = mk(p, S_SET, line);
    n->name = expect_name(p, &n->name_len);
    if (is_op(peek(p), ".")) {
        next(p);
        n->name2 = expect_name(p, NULL);
    }
    if (is_op(peek(p), ","))
        perr(p, line, "unsupported: set with several targets");
    if (!is_op(peek(p), "="))
        perr(p, line, "unsupported: set blocks ({%% set x %%}...{%% endset %%})");
    next(p);
    n->a = expr(p);
    expect_close(p, T_STMT_CLOSE);
    return n;
}

static struct node *stmt_macro(struct parser *p, int line)
{
    struct node *n = mk(p, S_MACRO, line);
    n->name = expect_name(p, &n->name_len);
    expect_op(p, "(");
    struct argv_build b = {0};
    while (!is_op(peek(p), ")")) {
        if (b.n == 64)
            perr(p, line, "a macro of more than 64 parameters");
        b.kw[b.n] = expect_name(p, NULL);
        b.a[b.n] = NULL;
        if (is_op(peek(p), "=")) {
            next(p);
            b.a[b.n] = expr(p);
        }
        b.n++;
        if (!is_op(peek(p), ","))
            break;
        next(p);
    }
    expect_op(p, ")");
    put_args(p, n, &b);
    expect_close(p, T_STMT_CLOSE);
    static const char *const ends[] = {"endmacro", NULL};
    const char *end;
    n->body = body(p, ends, &end);
    expect_close(p, T_STMT_CLOSE);
    return n;
}

static struct node *body(struct parser *p, const char *const *ends, const char **end)
{
    struct node head = {0}, *tail = &head;
    *end = NULL;
    for (;;) {
        struct token *t = next(p);
        struct node *n = NULL;
        if (t->kind == T_EOF) {
            if (ends[0])
                perr(p, t->line, "missing {%% %s %%}", ends[0]);
            return head.next;
        }
        if (t->kind == T_TEXT) {
            n = mk(p, S_TEXT, t->line);
            char *text = amalloc(p, t->n + 1); /* the source is the caller's */
            memcpy(text, t->s, t->n);
            n->name = text;
            n->name_len = t->n;
        } else if (t->kind == T_EXPR_OPEN) {
            n = mk(p, S_OUT, t->line);
            n->a = expr(p);
            expect_close(p, T_EXPR_CLOSE);
        } else if (t->kind == T_STMT_OPEN) {
            struct token *w = next(p);
            if (w->kind != T_NAME)
                perr(p, w->line, "a statement must start with a name");
            for (size_t k = 0; ends[k]; k++)
                if (is_name(w, ends[k])) {
                    *end = ends[k];
                    return head.next;
                }
            if (is_name(w, "if")) {
                n = stmt_if(p, w->line);
            } else if (is_name(w, "for")) {
                n = stmt_for(p, w->line);
            } else if (is_name(w, "set")) {
                n = stmt_set(p, w->line);
            } else if (is_name(w, "macro")) {
                n = stmt_macro(p, w->line);
            } else if (is_name(w, "break") || is_name(w, "continue")) {
                n = mk(p, is_name(w, "break") ? S_BREAK : S_CONTINUE, w->line);
                expect_close(p, T_STMT_CLOSE);
            } else if (is_name(w, "generation") || is_name(w, "endgeneration")) {
                /* transformers' marks of assistant text; alallo finds the
                 * assistant turns itself (chat_format.c) */
                expect_close(p, T_STMT_CLOSE);
                continue;
            } else {
                perr(p, w->line, "unsupported statement \"%.*s\"", (int)w->n, w->s);
            }
        } else {
            perr(p, t->line, "unexpected token outside a tag");
        }
        tail->next = n;
        tail = n;
    }
}

void chat_template_free(struct chat_template *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_arena; i++)
        free(t->arena[i]);
    for (size_t i = 0; i < t->n_lits; i++)
        json_decref(t->lits[i]);
    free(t->arena);
    free(t->lits);
    free(t);
}

struct chat_template *chat_template_parse(const char *src, size_t len, char *err, size_t errcap)
{
    if (len > CHAT_TEMPLATE_MAX_SOURCE) {
        snprintf(err, errcap, "chat template is longer than 1 MiB");
        return NULL;
    }
    struct chat_template *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errcap, "out of memory");
        return NULL;
    }
    struct parser *p = calloc(1, sizeof *p);
    if (!p) {
        free(t);
        snprintf(err, errcap, "out of memory");
        return NULL;
    }
    p->t = t;
    p->src = src;
    p->len = len;
    p->err = err;
    p->errcap = errcap;
    if (setjmp(p->jb)) {
        free(p->tok);
        free(p);
        chat_template_free(t);
        return NULL;
    }
    scan(p);
    static const char *const none[] = {NULL};
    const char *end;
    t->root = body(p, none, &end);
    free(p->tok);
    free(p);
    return t;
}

/* ---- rendering --------------------------------------------------------- */

/* What a render writes goes into a growbuf of at most
 * CHAT_TEMPLATE_MAX_OUTPUT bytes (OUTBUF), as do the strings built on the
 * way (filters, slices, string concatenation). */
#define OUTBUF GROWBUF_INIT(CHAT_TEMPLATE_MAX_OUTPUT)

struct macro_def {
    const struct node *n;
};

struct rt {
    jmp_buf jb;
    char *err;
    size_t errcap;
    json_t **pool;
    size_t n_pool, cap_pool;
    json_t *frames[MAX_DEPTH * 2];
    int n_frames;
    const json_t *vars;
    struct growbuf *out;
    const struct node *macros[256];
    int n_macros;
    int depth;
    int ctl; /* 1 break, 2 continue */
    long steps; /* loop passes so far */
};

static void rerr(struct rt *r, int line, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0)
        snprintf(r->err, r->errcap, "chat template line %d: %s", line, msg);
    else
        snprintf(r->err, r->errcap, "%s", msg);
    longjmp(r->jb, 1);
}

/* Registers a new reference in the pool; returns it borrowed. */
static json_t *own(struct rt *r, json_t *v)
{
    if (!v)
        rerr(r, 0, "out of memory while rendering the chat template");
    if (r->n_pool == r->cap_pool) {
        size_t cap = r->cap_pool ? r->cap_pool * 2 : 1024;
        json_t **a = cap <= MAX_POOL ? realloc(r->pool, cap * sizeof *a) : NULL;
        if (!a) {
            json_decref(v);
            rerr(r, 0, "the chat template made too many values");
        }
        r->pool = a;
        r->cap_pool = cap;
    }
    r->pool[r->n_pool++] = v;
    return v;
}

static void out_put(struct rt *r, const char *s, size_t n)
{
    enum growbuf_err e = growbuf_append(r->out, s, n);
    if (e == GROWBUF_TOO_LARGE)
        rerr(r, 0, "the chat template wrote more than 64 MiB");
    if (e)
        rerr(r, 0, "out of memory while rendering the chat template");
}

static void out_str(struct rt *r, const char *s) { out_put(r, s, strlen(s)); }

static const char *type_name(const json_t *v)
{
    if (!v)
        return "undefined";
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "dict";
    case JSON_ARRAY: return "list";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "float";
    case JSON_NULL: return "none";
    default: return "boolean";
    }
}

static int truthy(const json_t *v)
{
    if (!v || json_is_null(v) || json_is_false(v))
        return 0;
    if (json_is_true(v))
        return 1;
    if (json_is_integer(v))
        return json_integer_value(v) != 0;
    if (json_is_real(v))
        return json_real_value(v) != 0;
    if (json_is_string(v))
        return json_string_length(v) > 0;
    if (json_is_array(v))
        return json_array_size(v) > 0;
    return json_object_size(v) > 0;
}

/* Python's repr of a float: the shortest text that reads back the same. */
static void float_text(double d, char *buf, size_t cap)
{
    if (isnan(d)) {
        snprintf(buf, cap, "NaN");
        return;
    }
    if (isinf(d)) {
        snprintf(buf, cap, d > 0 ? "Infinity" : "-Infinity");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    if (!strpbrk(buf, ".eEn"))
        strncat(buf, ".0", cap - strlen(buf) - 1);
}

static void json_text(struct rt *r, struct growbuf *o, const json_t *v, int indent, int depth,
                      int sort);

static void put_json_string(struct growbuf *o, struct rt *r, const char *s, size_t n)
{
    struct growbuf *saved = r->out;
    r->out = o;
    out_put(r, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[8];
        if (c == '"' || c == '\\') {
            e[0] = '\\';
            e[1] = (char)c;
            out_put(r, e, 2);
        } else if (c < 0x20) {
            const char *m = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t"
                            : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
            if (m) {
                out_put(r, m, 2);
            } else {
                snprintf(e, sizeof e, "\\u%04x", c);
                out_put(r, e, 6);
            }
        } else {
            out_put(r, (const char *)&s[i], 1);
        }
    }
    out_put(r, "\"", 1);
    r->out = saved;
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* json.dumps(v, ensure_ascii=False, indent=indent or None, sort_keys=sort) */
static void json_text(struct rt *r, struct growbuf *o, const json_t *v, int indent, int depth,
                      int sort)
{
    struct growbuf *saved = r->out;
    r->out = o;
    char buf[64];
    if (depth > 100)
        rerr(r, 0, "a value nested too deeply for tojson");
    if (!v || json_is_null(v)) {
        out_str(r, "null");
    } else if (json_is_true(v)) {
        out_str(r, "true");
    } else if (json_is_false(v)) {
        out_str(r, "false");
    } else if (json_is_integer(v)) {
        snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        out_str(r, buf);
    } else if (json_is_real(v)) {
        float_text(json_real_value(v), buf, sizeof buf);
        out_str(r, buf);
    } else if (json_is_string(v)) {
        put_json_string(o, r, json_string_value(v), json_string_length(v));
    } else {
        int arr = json_is_array(v);
        size_t n = arr ? json_array_size(v) : json_object_size(v);
        out_str(r, arr ? "[" : "{");
        const char **keys = NULL;
        if (!arr && n) {
            keys = malloc(n * sizeof *keys);
            if (!keys)
                rerr(r, 0, "out of memory");
            size_t k = 0;
            const char *key;
            json_t *val;
            json_object_foreach((json_t *)v, key, val) keys[k++] = key;
            if (sort)
                qsort(keys, n, sizeof *keys, cmp_keys);
        }
        for (size_t i = 0; i < n; i++) {
            if (i)
                out_str(r, indent > 0 ? "," : ", ");
            if (indent > 0) {
                out_str(r, "\n");
                for (int s = 0; s < indent * (depth + 1); s++)
                    out_str(r, " ");
            }
            if (arr) {
                json_text(r, o, json_array_get(v, i), indent, depth + 1, sort);
            } else {
                put_json_string(o, r, keys[i], strlen(keys[i]));
                out_str(r, ": ");
                json_text(r, o, json_object_get(v, keys[i]), indent, depth + 1, sort);
            }
        }
        free(keys);
        if (indent > 0 && n) {
            out_str(r, "\n");
            for (int s = 0; s < indent * depth; s++)
                out_str(r, " ");
        }
        out_str(r, arr ? "]" : "}");
    }
    r->out = saved;
}

/* Python's str() of a value, as Jinja prints it, into o. */
static void str_text(struct rt *r, struct growbuf *o, const json_t *v, int quoted)
{
    struct growbuf *saved = r->out;
    r->out = o;
    char buf[64];
    if (!v) {
        /* an undefined value prints as nothing */
    } else if (json_is_string(v)) {
        if (quoted) {
            const char *s = json_string_value(v);
            int dq = strchr(s, '\'') && !strchr(s, '"');
            out_str(r, dq ? "\"" : "'");
            for (size_t i = 0; i < json_string_length(v); i++) {
                char c = s[i];
                if (c == '\\' || (!dq && c == '\''))
                    out_put(r, "\\", 1);
                if (c == '\n')
                    out_str(r, "\\n");
                else
                    out_put(r, &c, 1);
            }
            out_str(r, dq ? "\"" : "'");
        } else {
            out_put(r, json_string_value(v), json_string_length(v));
        }
    } else if (json_is_null(v)) {
        out_str(r, "None");
    } else if (json_is_true(v)) {
        out_str(r, "True");
    } else if (json_is_false(v)) {
        out_str(r, "False");
    } else if (json_is_integer(v)) {
        snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        out_str(r, buf);
    } else if (json_is_real(v)) {
        float_text(json_real_value(v), buf, sizeof buf);
        out_str(r, buf);
    } else if (json_is_array(v)) {
        out_str(r, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                out_str(r, ", ");
            str_text(r, o, json_array_get(v, i), 1);
        }
        out_str(r, "]");
    } else {
        out_str(r, "{");
        const char *key;
        json_t *val;
        int first = 1;
        json_object_foreach((json_t *)v, key, val) {
            if (!first)
                out_str(r, ", ");
            first = 0;
            json_t *k = own(r, json_string(key));
            str_text(r, o, k, 1);
            out_str(r, ": ");
            str_text(r, o, val, 1);
        }
        out_str(r, "}");
    }
    r->out = saved;
}

static json_t *to_string(struct rt *r, const json_t *v)
{
    if (v && json_is_string(v))
        return (json_t *)v;
    struct growbuf o = OUTBUF;
    str_text(r, &o, v, 0);
    json_t *s = json_stringn(o.p ? o.p : "", o.len);
    growbuf_free(&o);
    return own(r, s);
}

static json_t *str_n(struct rt *r, const char *s, size_t n) { return own(r, json_stringn(s, n)); }

/* The text written into o as a value; o's buffer is freed. */
static json_t *take_str(struct rt *r, struct growbuf *o)
{
    json_t *v = json_stringn(o->p ? o->p : "", o->len);
    growbuf_free(o);
    return own(r, v);
}

static json_t *lookup(struct rt *r, const char *name)
{
    for (int i = r->n_frames - 1; i >= 0; i--) {
        json_t *v = json_object_get(r->frames[i], name);
        if (v)
            return v;
    }
    return json_object_get(r->vars, name);
}

static const struct node *find_macro(struct rt *r, const char *name)
{
    for (int i = r->n_macros - 1; i >= 0; i--)
        if (strcmp(r->macros[i]->name, name) == 0)
            return r->macros[i];
    return NULL;
}

static json_t *eval(struct rt *r, const struct node *n);
static void exec_list(struct rt *r, const struct node *n);

static int is_num(const json_t *v) { return v && (json_is_integer(v) || json_is_real(v)); }
static double num(const json_t *v)
{
    return json_is_integer(v) ? (double)json_integer_value(v) : json_real_value(v);
}

static int equal(const json_t *a, const json_t *b)
{
    if (!a || !b)
        return !a && !b;
    if (is_num(a) && is_num(b))
        return num(a) == num(b);
    return json_equal((json_t *)a, (json_t *)b);
}

static size_t utf8_len(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

/* Byte offset of the code point index ci (clamped to n). */
static size_t utf8_off(const char *s, size_t n, size_t ci)
{
    size_t i = 0, k = 0;
    while (i < n && k < ci) {
        i++;
        while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80)
            i++;
        k++;
    }
    return i;
}

static json_t *item_index(struct rt *r, const json_t *v, const json_t *idx, int line)
{
    if (!v)
        rerr(r, line, "indexing an undefined value");
    if (json_is_object(v)) {
        if (!json_is_string(idx))
            return NULL;
        return json_object_get(v, json_string_value(idx));
    }
    if (!json_is_integer(idx))
        return NULL;
    json_int_t i = json_integer_value(idx);
    if (json_is_array(v)) {
        json_int_t n = (json_int_t)json_array_size(v);
        if (i < 0)
            i += n;
        return i >= 0 && i < n ? json_array_get(v, (size_t)i) : NULL;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t bn = json_string_length(v);
        json_int_t n = (json_int_t)utf8_len(s, bn);
        if (i < 0)
            i += n;
        if (i < 0 || i >= n)
            return NULL;
        size_t a = utf8_off(s, bn, (size_t)i), b = utf8_off(s, bn, (size_t)i + 1);
        return str_n(r, s + a, b - a);
    }
    return NULL;
}

static json_int_t slice_bound(const json_t *v, json_int_t dflt, json_int_t n, int line,
                              struct rt *r)
{
    if (!v || json_is_null(v))
        return dflt;
    if (!json_is_integer(v))
        rerr(r, line, "a slice bound must be an integer");
    json_int_t i = json_integer_value(v);
    if (i < 0)
        i += n;
    if (i < 0)
        i = dflt < 0 ? -1 : 0;
    if (i > n)
        i = n;
    return i;
}

static json_t *slice(struct rt *r, const json_t *v, const json_t *a, const json_t *b,
                     const json_t *c, int line)
{
    json_int_t step = c && !json_is_null(c) ? json_integer_value(c) : 1;
    if (step == 0)
        rerr(r, line, "slice step cannot be zero");
    int is_str = v && json_is_string(v);
    if (!v || (!is_str && !json_is_array(v)))
        rerr(r, line, "cannot slice a %s", type_name(v));
    const char *s = is_str ? json_string_value(v) : NULL;
    size_t bn = is_str ? json_string_length(v) : 0;
    json_int_t n = is_str ? (json_int_t)utf8_len(s, bn) : (json_int_t)json_array_size(v);
    json_int_t lo = slice_bound(a, step > 0 ? 0 : n - 1, n, line, r);
    json_int_t hi = slice_bound(b, step > 0 ? n : -1, n, line, r);
    if (step < 0 && lo >= n)
        lo = n - 1;
    json_t *out = is_str ? NULL : own(r, json_array());
    struct growbuf o = OUTBUF;
    struct growbuf *saved = r->out;
    r->out = &o;
    for (json_int_t i = lo; step > 0 ? i < hi : i > hi; i += step) {
        if (is_str) {
            size_t x = utf8_off(s, bn, (size_t)i), y = utf8_off(s, bn, (size_t)i + 1);
            out_put(r, s + x, y - x);
        } else {
            json_array_append(out, json_array_get(v, (size_t)i));
        }
    }
    r->out = saved;
    if (is_str) {
        return take_str(r, &o);
    }
    growbuf_free(&o);
    return out;
}

static json_t *attr(struct rt *r, const json_t *v, const char *name, int line)
{
    if (!v)
        rerr(r, line, "an undefined value has no attribute \"%s\"", name);
    if (json_is_object(v))
        return json_object_get(v, name);
    return NULL;
}

#define KW_ONLY SIZE_MAX /* an argument that can only be given by keyword */

struct args {
    json_t *pos[64];
    const char *kw[64];
    json_t *kwv[64];
    size_t n_pos, n_kw;
};

static void eval_args(struct rt *r, const struct node *n, struct args *a)
{
    memset(a, 0, sizeof *a);
    for (size_t i = 0; i < n->nargs; i++) {
        json_t *v = eval(r, n->args[i]);
        if (n->kw && n->kw[i]) {
            a->kw[a->n_kw] = n->kw[i];
            a->kwv[a->n_kw++] = v;
        } else {
            a->pos[a->n_pos++] = v;
        }
    }
}

/* The i-th positional argument or the keyword argument `name`; `*found`
 * says whether either was given. */
static json_t *arg(const struct args *a, size_t i, const char *name, int *found)
{
    if (found)
        *found = 1;
    if (i < a->n_pos)
        return a->pos[i];
    for (size_t k = 0; name && k < a->n_kw; k++)
        if (strcmp(a->kw[k], name) == 0)
            return a->kwv[k];
    if (found)
        *found = 0;
    return NULL;
}

static const char *need_str(struct rt *r, const json_t *v, const char *what, int line)
{
    if (!v)
        return "";
    if (!json_is_string(v))
        rerr(r, line, "%s needs a string, not a %s", what, type_name(v));
    return json_string_value(v);
}

static json_t *strip(struct rt *r, const json_t *v, const json_t *chars, int left, int right,
                     int line)
{
    const char *s = need_str(r, v, "strip", line);
    size_t n = v ? json_string_length(v) : 0;
    const char *set = chars && !json_is_null(chars) ? need_str(r, chars, "strip", line) : NULL;
    size_t a = 0, b = n;
#define STRIPPABLE(c) (set ? strchr(set, (c)) != NULL && (c) : is_ws(c))
    while (left && a < b && STRIPPABLE(s[a]))
        a++;
    while (right && b > a && STRIPPABLE(s[b - 1]))
        b--;
#undef STRIPPABLE
    return str_n(r, s + a, b - a);
}

static json_t *case_map(struct rt *r, const json_t *v, int mode, int line)
{
    const char *s = need_str(r, v, "a case filter", line);
    size_t n = v ? json_string_length(v) : 0;
    char *o = malloc(n + 1);
    if (!o)
        rerr(r, line, "out of memory");
    int start = 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (mode == 0)
            c = (unsigned char)toupper(c);
        else if (mode == 1)
            c = (unsigned char)tolower(c);
        else if (mode == 2)
            c = (unsigned char)(start ? toupper(c) : tolower(c));
        else
            c = (unsigned char)(i == 0 ? toupper(c) : tolower(c));
        start = !isalnum(c);
        o[i] = (char)c;
    }
    json_t *res = str_n(r, o, n);
    free(o);
    return res;
}

static json_t *replace(struct rt *r, const json_t *v, const json_t *from, const json_t *to,
                       const json_t *count, int line)
{
    const char *s = need_str(r, v, "replace", line);
    const char *f = need_str(r, from, "replace", line);
    const char *t = need_str(r, to, "replace", line);
    size_t fl = strlen(f), tl = strlen(t), n = v ? json_string_length(v) : 0;
    json_int_t max = count && json_is_integer(count) ? json_integer_value(count) : -1;
    struct growbuf o = OUTBUF;
    struct growbuf *saved = r->out;
    r->out = &o;
    size_t i = 0;
    json_int_t done = 0;
    out_put(r, "", 0);
    while (i <= n) {
        const char *hit = fl && (max < 0 || done < max) ? strstr(s + i, f) : NULL;
        if (!fl && (max < 0 || done < max) && i <= n) {
            out_put(r, t, tl);
            done++;
            if (i < n)
                out_put(r, s + i, 1);
            i++;
            continue;
        }
        if (!hit) {
            out_put(r, s + i, n - i);
            break;
        }
        out_put(r, s + i, (size_t)(hit - (s + i)));
        out_put(r, t, tl);
        i = (size_t)(hit - s) + fl;
        done++;
    }
    r->out = saved;
    return take_str(r, &o);
}

static json_t *split(struct rt *r, const json_t *v, const json_t *sep, const json_t *maxs,
                     int line)
{
    const char *s = need_str(r, v, "split", line);
    size_t n = v ? json_string_length(v) : 0;
    json_t *out = own(r, json_array());
    json_int_t max = maxs && json_is_integer(maxs) ? json_integer_value(maxs) : -1;
    if (!sep || json_is_null(sep)) {
        size_t i = 0;
        while (i < n) {
            while (i < n && is_ws(s[i]))
                i++;
            if (i >= n)
                break;
            size_t j = i;
            if (max >= 0 && (json_int_t)json_array_size(out) >= max) {
                size_t e = n;
                while (e > i && is_ws(s[e - 1]))
                    e--;
                json_array_append_new(out, json_stringn(s + i, e - i));
                break;
            }
            while (j < n && !is_ws(s[j]))
                j++;
            json_array_append_new(out, json_stringn(s + i, j - i));
            i = j;
        }
        return out;
    }
    const char *f = need_str(r, sep, "split", line);
    size_t fl = strlen(f);
    if (!fl)
        rerr(r, line, "split: empty separator");
    size_t i = 0;
    for (;;) {
        const char *hit = strstr(s + i, f);
        if (!hit || (max >= 0 && (json_int_t)json_array_size(out) >= max)) {
            json_array_append_new(out, json_stringn(s + i, n - i));
            break;
        }
        json_array_append_new(out, json_stringn(s + i, (size_t)(hit - (s + i))));
        i = (size_t)(hit - s) + fl;
    }
    return out;
}

static int affix(struct rt *r, const json_t *v, const json_t *what, int end, int line)
{
    if (what && json_is_array(what)) {
        for (size_t i = 0; i < json_array_size(what); i++)
            if (affix(r, v, json_array_get(what, i), end, line))
                return 1;
        return 0;
    }
    const char *s = need_str(r, v, end ? "endswith" : "startswith", line);
    const char *a = need_str(r, what, end ? "endswith" : "startswith", line);
    size_t n = strlen(s), an = strlen(a);
    if (an > n)
        return 0;
    return memcmp(end ? s + n - an : s, a, an) == 0;
}

static json_t *items_of(struct rt *r, const json_t *v, int line)
{
    if (!v || !json_is_object(v))
        rerr(r, line, "items needs a dict, not a %s", type_name(v));
    json_t *out = own(r, json_array());
    const char *k;
    json_t *val;
    json_object_foreach((json_t *)v, k, val)
        json_array_append_new(out, json_pack("[sO]", k, val));
    return out;
}

/* A method call obj.name(args), or 0 in *handled when obj has no such method. */
static json_t *method(struct rt *r, const json_t *obj, const char *name, const struct args *a,
                      int line, int *handled)
{
    *handled = 1;
    if (obj && json_is_string(obj)) {
        if (!strcmp(name, "strip"))
            return strip(r, obj, arg(a, 0, "chars", NULL), 1, 1, line);
        if (!strcmp(name, "lstrip"))
            return strip(r, obj, arg(a, 0, "chars", NULL), 1, 0, line);
        if (!strcmp(name, "rstrip"))
            return strip(r, obj, arg(a, 0, "chars", NULL), 0, 1, line);
        if (!strcmp(name, "upper"))
            return case_map(r, obj, 0, line);
        if (!strcmp(name, "lower"))
            return case_map(r, obj, 1, line);
        if (!strcmp(name, "title"))
            return case_map(r, obj, 2, line);
        if (!strcmp(name, "capitalize"))
            return case_map(r, obj, 3, line);
        if (!strcmp(name, "split"))
            return split(r, obj, arg(a, 0, "sep", NULL), arg(a, 1, "maxsplit", NULL), line);
        if (!strcmp(name, "startswith") || !strcmp(name, "endswith"))
            return affix(r, obj, arg(a, 0, NULL, NULL), name[0] == 'e', line) ? json_true()
                                                                              : json_false();
        if (!strcmp(name, "replace"))
            return replace(r, obj, arg(a, 0, NULL, NULL), arg(a, 1, NULL, NULL),
                           arg(a, 2, NULL, NULL), line);
    }
    if (obj && json_is_object(obj)) {
        if (!strcmp(name, "items"))
            return items_of(r, obj, line);
        if (!strcmp(name, "keys") || !strcmp(name, "values")) {
            json_t *out = own(r, json_array());
            const char *k;
            json_t *val;
            json_object_foreach((json_t *)obj, k, val)
                json_array_append_new(out, name[0] == 'k' ? json_string(k) : json_incref(val));
            return out;
        }
        if (!strcmp(name, "get")) {
            const json_t *key = arg(a, 0, NULL, NULL);
            json_t *v = key && json_is_string(key) ? json_object_get(obj, json_string_value(key))
                                                   : NULL;
            if (v)
                return v;
            json_t *d = arg(a, 1, NULL, NULL);
            return d ? d : json_null();
        }
    }
    *handled = 0;
    return NULL;
}

static int run_test(struct rt *r, const char *name, const json_t *v, const struct args *a,
                    int line)
{
    const json_t *x = arg(a, 0, NULL, NULL);
    if (!strcmp(name, "defined"))
        return v != NULL;
    if (!strcmp(name, "undefined"))
        return v == NULL;
    if (!strcmp(name, "none"))
        return v && json_is_null(v);
    if (!strcmp(name, "string"))
        return v && json_is_string(v);
    if (!strcmp(name, "number"))
        return v && (json_is_number(v));
    if (!strcmp(name, "integer"))
        return v && json_is_integer(v);
    if (!strcmp(name, "float"))
        return v && json_is_real(v);
    if (!strcmp(name, "boolean"))
        return v && json_is_boolean(v);
    if (!strcmp(name, "true"))
        return v && json_is_true(v);
    if (!strcmp(name, "false"))
        return v && json_is_false(v);
    if (!strcmp(name, "mapping"))
        return v && json_is_object(v);
    if (!strcmp(name, "iterable"))
        return !v || json_is_array(v) || json_is_object(v) || json_is_string(v);
    if (!strcmp(name, "sequence"))
        return v && (json_is_array(v) || json_is_object(v) || json_is_string(v));
    if (!strcmp(name, "even") || !strcmp(name, "odd")) {
        if (!v || !json_is_integer(v))
            rerr(r, line, "test \"%s\" needs an integer", name);
        return (json_integer_value(v) % 2 == 0) == (name[0] == 'e');
    }
    if (!strcmp(name, "divisibleby")) {
        if (!v || !json_is_integer(v) || !x || !json_is_integer(x) || !json_integer_value(x))
            rerr(r, line, "test \"divisibleby\" needs integers");
        return json_integer_value(v) % json_integer_value(x) == 0;
    }
    if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "sameas"))
        return equal(v, x);
    if (!strcmp(name, "ne"))
        return !equal(v, x);
    if (!strcmp(name, "in")) {
        if (!x)
            rerr(r, line, "test \"in\" needs a value");
        if (json_is_array(x)) {
            for (size_t i = 0; i < json_array_size(x); i++)
                if (equal(v, json_array_get(x, i)))
                    return 1;
            return 0;
        }
        if (json_is_object(x))
            return v && json_is_string(v) && json_object_get(x, json_string_value(v));
        if (json_is_string(x))
            return v && json_is_string(v) && strstr(json_string_value(x), json_string_value(v));
        return 0;
    }
    rerr(r, line, "unsupported test \"%s\"", name);
    return 0;
}

static json_t *filter(struct rt *r, const char *name, json_t *v, const struct args *a, int line);

/* The values of v to walk: a list, a dict's keys, a string's characters;
 * undefined walks nothing. */
static json_t *as_list(struct rt *r, const json_t *v, int line)
{
    if (!v)
        return own(r, json_array());
    if (json_is_array(v))
        return (json_t *)v;
    json_t *out = own(r, json_array());
    if (json_is_object(v)) {
        const char *k;
        json_t *val;
        json_object_foreach((json_t *)v, k, val) json_array_append_new(out, json_string(k));
        return out;
    }
    if (json_is_string(v)) {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        for (size_t i = 0; i < n;) {
            size_t j = i + 1;
            while (j < n && ((unsigned char)s[j] & 0xC0) == 0x80)
                j++;
            json_array_append_new(out, json_stringn(s + i, j - i));
            i = j;
        }
        return out;
    }
    rerr(r, line, "a %s cannot be iterated", type_name(v));
    return NULL;
}

static json_t *dotted(const json_t *v, const char *path)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    char *save = NULL;
    for (char *part = strtok_r(buf, ".", &save); part && v; part = strtok_r(NULL, ".", &save))
        v = json_is_object(v) ? json_object_get(v, part) : NULL;
    return (json_t *)v;
}

/* select / reject / selectattr / rejectattr */
static json_t *select_items(struct rt *r, json_t *v, const struct args *a, int by_attr, int keep,
                            int line)
{
    json_t *list = as_list(r, v, line);
    size_t first = by_attr ? 1 : 0;
    const char *path = by_attr ? need_str(r, arg(a, 0, NULL, NULL), "selectattr", line) : NULL;
    const json_t *tname = arg(a, first, NULL, NULL);
    struct args targs = {0};
    for (size_t i = first + 1; i < a->n_pos; i++)
        targs.pos[targs.n_pos++] = a->pos[i];
    json_t *out = own(r, json_array());
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *item = json_array_get(list, i);
        json_t *x = by_attr ? dotted(item, path) : item;
        int ok = tname ? run_test(r, need_str(r, tname, "select", line), x, &targs, line)
                       : truthy(x);
        if (ok == keep)
            json_array_append(out, item);
    }
    return out;
}

static json_t *filter(struct rt *r, const char *name, json_t *v, const struct args *a, int line)
{
    int found;
    if (!strcmp(name, "trim"))
        return strip(r, v ? to_string(r, v) : NULL, arg(a, 0, "chars", NULL), 1, 1, line);
    if (!strcmp(name, "string"))
        return to_string(r, v);
    if (!strcmp(name, "safe"))
        return v;
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "title") ||
        !strcmp(name, "capitalize"))
        return case_map(r, to_string(r, v),
                        name[0] == 'u' ? 0 : name[0] == 'l' ? 1 : name[0] == 't' ? 2 : 3, line);
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        size_t n = !v ? 0
                   : json_is_string(v) ? utf8_len(json_string_value(v), json_string_length(v))
                   : json_is_array(v)  ? json_array_size(v)
                   : json_is_object(v) ? json_object_size(v)
                                       : (rerr(r, line, "a %s has no length", type_name(v)), 0);
        return own(r, json_integer((json_int_t)n));
    }
    if (!strcmp(name, "tojson")) {
        const json_t *ind = arg(a, 0, "indent", NULL);
        const json_t *sk = arg(a, KW_ONLY, "sort_keys", NULL);
        struct growbuf o = OUTBUF;
        json_text(r, &o, v, ind && json_is_integer(ind) ? (int)json_integer_value(ind) : 0, 0,
                  truthy(sk));
        return take_str(r, &o);
    }
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        json_t *dv = arg(a, 0, "default_value", &found);
        int boolean = truthy(arg(a, 1, "boolean", NULL));
        if (!v || (boolean && !truthy(v)))
            return found ? dv : str_n(r, "", 0);
        return v;
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        json_t *l = as_list(r, v, line);
        size_t n = json_array_size(l);
        return n ? json_array_get(l, name[0] == 'f' ? 0 : n - 1) : NULL;
    }
    if (!strcmp(name, "list"))
        return as_list(r, v, line);
    if (!strcmp(name, "items"))
        return items_of(r, v, line);
    if (!strcmp(name, "reverse")) {
        if (v && json_is_string(v)) {
            json_t *sl = own(r, json_integer(-1));
            return slice(r, v, NULL, NULL, sl, line);
        }
        json_t *l = as_list(r, v, line), *out = own(r, json_array());
        for (size_t i = json_array_size(l); i > 0; i--)
            json_array_append(out, json_array_get(l, i - 1));
        return out;
    }
    if (!strcmp(name, "unique")) {
        json_t *l = as_list(r, v, line), *out = own(r, json_array());
        for (size_t i = 0; i < json_array_size(l); i++) {
            int seen = 0;
            for (size_t k = 0; k < json_array_size(out) && !seen; k++)
                seen = equal(json_array_get(out, k), json_array_get(l, i));
            if (!seen)
                json_array_append(out, json_array_get(l, i));
        }
        return out;
    }
    if (!strcmp(name, "join")) {
        const char *sep = need_str(r, arg(a, 0, "d", NULL), "join", line);
        const json_t *at = arg(a, 1, "attribute", NULL);
        json_t *l = as_list(r, v, line);
        struct growbuf o = OUTBUF;
        for (size_t i = 0; i < json_array_size(l); i++) {
            json_t *item = json_array_get(l, i);
            if (at)
                item = dotted(item, need_str(r, at, "join", line));
            struct growbuf *saved = r->out;
            r->out = &o;
            if (i)
                out_str(r, sep);
            r->out = saved;
            str_text(r, &o, item, 0);
        }
        return take_str(r, &o);
    }
    if (!strcmp(name, "replace"))
        return replace(r, to_string(r, v), arg(a, 0, NULL, NULL), arg(a, 1, NULL, NULL),
                       arg(a, 2, "count", NULL), line);
    if (!strcmp(name, "int") || !strcmp(name, "float") || !strcmp(name, "abs")) {
        double d = 0;
        if (is_num(v))
            d = num(v);
        else if (v && json_is_string(v))
            d = strtod(json_string_value(v), NULL);
        else if (v && json_is_boolean(v))
            d = json_is_true(v);
        if (!strcmp(name, "abs")) {
            if (!is_num(v))
                rerr(r, line, "abs needs a number");
            return json_is_integer(v) ? own(r, json_integer(llabs(json_integer_value(v))))
                                      : own(r, json_real(fabs(d)));
        }
        return name[0] == 'i' ? own(r, json_integer((json_int_t)d)) : own(r, json_real(d));
    }
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
        return select_items(r, v, a, 1, name[0] == 's', line);
    if (!strcmp(name, "select") || !strcmp(name, "reject"))
        return select_items(r, v, a, 0, name[0] == 's', line);
    if (!strcmp(name, "map")) {
        json_t *l = as_list(r, v, line), *out = own(r, json_array());
        const json_t *at = arg(a, KW_ONLY, "attribute", NULL);
        const json_t *fname = arg(a, 0, NULL, NULL);
        if (!at && !fname)
            rerr(r, line, "map needs an attribute or a filter name");
        struct args fargs = {0};
        for (size_t i = 1; i < a->n_pos; i++)
            fargs.pos[fargs.n_pos++] = a->pos[i];
        for (size_t i = 0; i < json_array_size(l); i++) {
            json_t *item = json_array_get(l, i);
            json_t *m = at ? dotted(item, need_str(r, at, "map", line))
                           : filter(r, need_str(r, fname, "map", line), item, &fargs, line);
            json_array_append(out, m ? m : json_null());
        }
        return out;
    }
    if (!strcmp(name, "indent")) {
        const json_t *w = arg(a, 0, "width", NULL);
        int first = truthy(arg(a, 1, "first", NULL)), blank = truthy(arg(a, 2, "blank", NULL));
        char pad[64] = "    ";
        if (w && json_is_integer(w)) {
            json_int_t k = json_integer_value(w);
            k = k < 0 ? 0 : k > 63 ? 63 : k;
            memset(pad, ' ', (size_t)k);
            pad[k] = '\0';
        } else if (w && json_is_string(w)) {
            snprintf(pad, sizeof pad, "%s", json_string_value(w));
        }
        json_t *sv = to_string(r, v);
        const char *s = json_string_value(sv);
        struct growbuf o = OUTBUF;
        struct growbuf *saved = r->out;
        r->out = &o;
        out_put(r, "", 0);
        int line_start = 1, first_line = 1;
        for (size_t i = 0; i < json_string_length(sv); i++) {
            if (line_start && (first || !first_line) && (blank || s[i] != '\n'))
                out_str(r, pad);
            out_put(r, s + i, 1);
            line_start = s[i] == '\n';
            if (line_start)
                first_line = 0;
        }
        r->out = saved;
        return take_str(r, &o);
    }
    rerr(r, line, "unsupported filter \"%s\"", name);
    return NULL;
}

static json_t *call_macro(struct rt *r, const struct node *m, const struct args *a, int line)
{
    if (r->depth >= MAX_DEPTH || r->n_frames >= MAX_DEPTH * 2 - 1)
        rerr(r, line, "macros nested too deeply");
    json_t *frame = own(r, json_object());
    for (size_t i = 0; i < m->nargs; i++) {
        json_t *v = arg(a, i, m->kw[i], NULL);
        if (!v && m->args[i])
            v = eval(r, m->args[i]);
        if (v)
            json_object_set(frame, m->kw[i], v);
    }
    struct growbuf o = OUTBUF, *saved = r->out;
    int saved_frames = r->n_frames;
    r->frames[r->n_frames++] = frame;
    r->out = &o;
    r->depth++;
    exec_list(r, m->body);
    r->depth--;
    r->out = saved;
    r->n_frames = saved_frames;
    json_t *res = json_stringn(o.p ? o.p : "", o.len);
    growbuf_free(&o);
    return own(r, res);
}

static json_t *call(struct rt *r, const struct node *n)
{
    struct args a;
    if (n->a->kind == E_ATTR) {
        json_t *obj = eval(r, n->a->a);
        eval_args(r, n, &a);
        int handled;
        json_t *res = method(r, obj, n->a->name, &a, n->line, &handled);
        if (handled)
            return res;
        rerr(r, n->line, "unsupported method \"%s\" of a %s", n->a->name, type_name(obj));
    }
    if (n->a->kind != E_VAR)
        rerr(r, n->line, "only functions and methods can be called");
    const char *name = n->a->name;
    eval_args(r, n, &a);
    const struct node *m = find_macro(r, name);
    if (m)
        return call_macro(r, m, &a, n->line);
    if (!strcmp(name, "raise_exception")) {
        const json_t *msg = arg(&a, 0, NULL, NULL);
        rerr(r, 0, "the chat template refused: %s",
             msg && json_is_string(msg) ? json_string_value(msg) : "(no message)");
    }
    if (!strcmp(name, "namespace") || !strcmp(name, "dict")) {
        json_t *ns = own(r, json_object());
        for (size_t i = 0; i < a.n_kw; i++)
            json_object_set(ns, a.kw[i], a.kwv[i]);
        return ns;
    }
    if (!strcmp(name, "range")) {
        json_int_t v[3] = {0, 0, 1};
        if (a.n_pos < 1 || a.n_pos > 3)
            rerr(r, n->line, "range takes 1 to 3 integers");
        for (size_t i = 0; i < a.n_pos; i++)
            if (!json_is_integer(a.pos[i]))
                rerr(r, n->line, "range takes integers");
        if (a.n_pos == 1) {
            v[1] = json_integer_value(a.pos[0]);
        } else {
            v[0] = json_integer_value(a.pos[0]);
            v[1] = json_integer_value(a.pos[1]);
            if (a.n_pos == 3)
                v[2] = json_integer_value(a.pos[2]);
        }
        if (v[2] == 0)
            rerr(r, n->line, "range step cannot be zero");
        json_t *out = own(r, json_array());
        for (json_int_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
            if (json_array_size(out) > 1000000)
                rerr(r, n->line, "range is too long");
            json_array_append_new(out, json_integer(i));
        }
        return out;
    }
    if (!lookup(r, name))
        rerr(r, n->line, "unknown function \"%s\"", name);
    rerr(r, n->line, "\"%s\" is not a function", name);
    return NULL;
}

static json_t *binop(struct rt *r, const char *op, json_t *x, json_t *y, int line)
{
    if (!strcmp(op, "=="))
        return equal(x, y) ? json_true() : json_false();
    if (!strcmp(op, "!="))
        return equal(x, y) ? json_false() : json_true();
    if (!strcmp(op, "in") || !strcmp(op, "not in")) {
        if (!y)
            rerr(r, line, "\"in\" needs a list, dict or string on its right, not undefined");
        struct args a = {.pos = {y}, .n_pos = 1};
        int in = run_test(r, "in", x, &a, line);
        return in == (op[0] == 'i') ? json_true() : json_false();
    }
    if (!strcmp(op, "~")) {
        json_t *a = to_string(r, x), *b = to_string(r, y);
        struct growbuf o = OUTBUF;
        struct growbuf *saved = r->out;
        r->out = &o;
        out_put(r, json_string_value(a), json_string_length(a));
        out_put(r, json_string_value(b), json_string_length(b));
        r->out = saved;
        return take_str(r, &o);
    }
    if (!x || !y)
        rerr(r, line, "undefined value used with \"%s\"", op);
    if (op[0] == '<' || op[0] == '>') {
        int c;
        if (is_num(x) && is_num(y))
            c = num(x) < num(y) ? -1 : num(x) > num(y);
        else if (json_is_string(x) && json_is_string(y))
            c = strcmp(json_string_value(x), json_string_value(y));
        else
            rerr(r, line, "cannot compare a %s with a %s", type_name(x), type_name(y));
        int res = op[0] == '<' ? (op[1] ? c <= 0 : c < 0) : (op[1] ? c >= 0 : c > 0);
        return res ? json_true() : json_false();
    }
    if (!strcmp(op, "+") && json_is_string(x) && json_is_string(y)) {
        struct growbuf o = OUTBUF;
        struct growbuf *saved = r->out;
        r->out = &o;
        out_put(r, json_string_value(x), json_string_length(x));
        out_put(r, json_string_value(y), json_string_length(y));
        r->out = saved;
        return take_str(r, &o);
    }
    if (!strcmp(op, "+") && json_is_array(x) && json_is_array(y)) {
        json_t *out = own(r, json_copy(x));
        json_array_extend(out, y);
        return out;
    }
    if (!is_num(x) || !is_num(y))
        rerr(r, line, "cannot use \"%s\" with a %s and a %s", op, type_name(x), type_name(y));
    int ints = json_is_integer(x) && json_is_integer(y);
    double a = num(x), b = num(y);
    if ((op[0] == '/' || op[0] == '%') && b == 0)
        rerr(r, line, "division by zero");
    if (ints && op[0] != '/' && strcmp(op, "**")) {
        json_int_t i = json_integer_value(x), j = json_integer_value(y), k;
        switch (op[0]) {
        case '+': k = i + j; break;
        case '-': k = i - j; break;
        case '*': k = i * j; break;
        default: k = ((i % j) + j) % j; break;
        }
        return own(r, json_integer(k));
    }
    if (!strcmp(op, "//")) {
        double q = floor(a / b);
        return ints ? own(r, json_integer((json_int_t)q)) : own(r, json_real(q));
    }
    if (!strcmp(op, "**"))
        return ints && b >= 0 ? own(r, json_integer((json_int_t)pow(a, b))) : own(r, json_real(pow(a, b)));
    double d = op[0] == '+' ? a + b : op[0] == '-' ? a - b : op[0] == '*' ? a * b
               : op[0] == '/' ? a / b : fmod(fmod(a, b) + b, b);
    return own(r, json_real(d));
}

static json_t *eval(struct rt *r, const struct node *n)
{
    switch (n->kind) {
    case E_LIT: return n->lit;
    case E_VAR: return lookup(r, n->name);
    case E_ATTR: return attr(r, eval(r, n->a), n->name, n->line);
    case E_INDEX: {
        json_t *v = eval(r, n->a);
        return item_index(r, v, eval(r, n->b), n->line);
    }
    case E_SLICE: {
        json_t *v = eval(r, n->a);
        json_t *a = n->b ? eval(r, n->b) : NULL, *b = n->c ? eval(r, n->c) : NULL;
        json_t *c = n->orelse ? eval(r, n->orelse) : NULL;
        return slice(r, v, a, b, c, n->line);
    }
    case E_CALL: return call(r, n);
    case E_FILTER: {
        json_t *v = eval(r, n->a);
        struct args a;
        eval_args(r, n, &a);
        return filter(r, n->name, v, &a, n->line);
    }
    case E_TEST:
    case E_NOTTEST: {
        json_t *v = eval(r, n->a);
        struct args a;
        eval_args(r, n, &a);
        int res = run_test(r, n->name, v, &a, n->line);
        return res == (n->kind == E_TEST) ? json_true() : json_false();
    }
    case E_NEG: {
        json_t *v = eval(r, n->a);
        if (!is_num(v))
            rerr(r, n->line, "cannot negate a %s", type_name(v));
        return json_is_integer(v) ? own(r, json_integer(-json_integer_value(v)))
                                  : own(r, json_real(-json_real_value(v)));
    }
    case E_NOT: return truthy(eval(r, n->a)) ? json_false() : json_true();
    case E_AND: {
        json_t *a = eval(r, n->a);
        return truthy(a) ? eval(r, n->b) : a;
    }
    case E_OR: {
        json_t *a = eval(r, n->a);
        return truthy(a) ? a : eval(r, n->b);
    }
    case E_BIN: {
        json_t *a = eval(r, n->a);
        return binop(r, n->name, a, eval(r, n->b), n->line);
    }
    case E_COND:
        if (truthy(eval(r, n->b)))
            return eval(r, n->a);
        return n->c ? eval(r, n->c) : NULL;
    case E_LIST: {
        json_t *l = own(r, json_array());
        for (size_t i = 0; i < n->nargs; i++) {
            json_t *v = eval(r, n->args[i]);
            json_array_append(l, v ? v : json_null());
        }
        return l;
    }
    case E_DICT: {
        json_t *d = own(r, json_object());
        for (size_t i = 0; i + 1 < n->nargs; i += 2) {
            json_t *k = eval(r, n->args[i]);
            json_t *v = eval(r, n->args[i + 1]);
            if (!k || !json_is_string(k))
                rerr(r, n->line, "dict keys must be strings");
            json_object_set(d, json_string_value(k), v ? v : json_null());
        }
        return d;
    }
    default: rerr(r, n->line, "not an expression"); return NULL;
    }
}

static void set_var(json_t *frame, const char *name, json_t *v)
{
    if (v)
        json_object_set(frame, name, v);
    else
        json_object_del(frame, name);
}

static void exec_for(struct rt *r, const struct node *n)
{
    json_t *src = as_list(r, eval(r, n->a), n->line);
    if (r->n_frames >= MAX_DEPTH * 2 - 1)
        rerr(r, n->line, "loops nested too deeply");
    json_t *frame = own(r, json_object());
    int saved_frames = r->n_frames;
    r->frames[r->n_frames++] = frame;
    json_t *items = src;
    if (n->b) { /* the loop's `if`: filter first, so loop.length counts what is kept */
        items = own(r, json_array());
        for (size_t i = 0; i < json_array_size(src); i++) {
            json_t *it = json_array_get(src, i);
            if (n->name2) {
                set_var(frame, n->name, json_array_get(it, 0));
                set_var(frame, n->name2, json_array_get(it, 1));
            } else {
                set_var(frame, n->name, it);
            }
            if (truthy(eval(r, n->b)))
                json_array_append(items, it);
        }
    }
    size_t len = json_array_size(items);
    for (size_t i = 0; i < len; i++) {
        if (++r->steps > MAX_STEPS)
            rerr(r, n->line, "the chat template ran more than %d loop passes", MAX_STEPS);
        json_t *frame_i = own(r, json_object()); /* each pass starts clean, as in Jinja */
        r->frames[r->n_frames - 1] = frame_i;
        json_t *it = json_array_get(items, i);
        if (n->name2) {
            if (!json_is_array(it) || json_array_size(it) != 2)
                rerr(r, n->line, "cannot unpack a %s into two names", type_name(it));
            set_var(frame_i, n->name, json_array_get(it, 0));
            set_var(frame_i, n->name2, json_array_get(it, 1));
        } else {
            set_var(frame_i, n->name, it);
        }
        json_t *loop = json_pack("{sI sI sI sI sb sb sI}", "index", (json_int_t)i + 1, "index0",
                                 (json_int_t)i, "revindex", (json_int_t)(len - i), "revindex0",
                                 (json_int_t)(len - i - 1), "first", i == 0, "last", i + 1 == len,
                                 "length", (json_int_t)len);
        own(r, loop);
        if (i > 0)
            json_object_set(loop, "previtem", json_array_get(items, i - 1));
        if (i + 1 < len)
            json_object_set(loop, "nextitem", json_array_get(items, i + 1));
        json_object_set(frame_i, "loop", loop);
        exec_list(r, n->body);
        int ctl = r->ctl;
        r->ctl = 0;
        if (ctl == 1)
            break;
    }
    if (len == 0 && n->orelse) {
        r->frames[r->n_frames - 1] = frame;
        exec_list(r, n->orelse);
    }
    r->n_frames = saved_frames;
}

static void exec_list(struct rt *r, const struct node *n)
{
    for (; n && !r->ctl; n = n->next) {
        switch (n->kind) {
        case S_TEXT: out_put(r, n->name, n->name_len); break;
        case S_OUT: {
            json_t *v = eval(r, n->a);
            str_text(r, r->out, v, 0);
            break;
        }
        case S_IF:
            if (truthy(eval(r, n->a)))
                exec_list(r, n->body);
            else if (n->orelse)
                exec_list(r, n->orelse);
            break;
        case S_FOR: exec_for(r, n); break;
        case S_SET: {
            json_t *v = eval(r, n->a);
            if (n->name2) {
                json_t *ns = lookup(r, n->name);
                if (!ns || !json_is_object(ns))
                    rerr(r, n->line, "cannot set an attribute of \"%s\", which is not a namespace",
                         n->name);
                json_object_set(ns, n->name2, v ? v : json_null());
            } else {
                set_var(r->frames[r->n_frames - 1], n->name, v);
            }
            break;
        }
        case S_MACRO:
            if (r->n_macros == 256)
                rerr(r, n->line, "more than 256 macros");
            r->macros[r->n_macros++] = n;
            break;
        case S_BREAK: r->ctl = 1; break;
        case S_CONTINUE: r->ctl = 2; break;
        default: rerr(r, n->line, "not a statement"); break;
        }
    }
}

int chat_template_render(const struct chat_template *t, const json_t *vars, char **out,
                         size_t *out_len, char *err, size_t errcap)
{
    *out = NULL;
    *out_len = 0;
    struct rt *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    struct growbuf o = OUTBUF;
    r->err = err;
    r->errcap = errcap;
    r->vars = vars;
    r->out = &o;
    int rc = 0;
    if (setjmp(r->jb)) {
        rc = -1;
    } else {
        r->frames[r->n_frames++] = own(r, json_object());
        out_put(r, "", 0);
        exec_list(r, t->root);
    }
    for (size_t i = 0; i < r->n_pool; i++)
        json_decref(r->pool[i]);
    free(r->pool);
    free(r);
    if (rc) {
        growbuf_free(&o);
        return -1;
    }
    *out = o.p;
    *out_len = o.len;
    return 0;
}
