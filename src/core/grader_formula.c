/* grader_formula.c - a multi grader's calculate_output (grader_formula.h):
 * a recursive-descent parser into a node array, and its evaluation. */
#include "core/grader_formula.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"

#define MAX_CALL_ARGS 16

struct parser {
    const char *src, *p;
    struct formula *f;
    int depth;
    char *err;
    size_t errcap;
    bool failed;
};

static int fail(struct parser *ps, const char *what)
{
    if (!ps->failed)
        text_error(ps->err, ps->errcap, "calculate_output: %s at character %d", what,
                   (int)(ps->p - ps->src) + 1);
    ps->failed = true;
    return -1;
}

static void spaces(struct parser *ps)
{
    while (*ps->p == ' ' || *ps->p == '\t')
        ps->p++;
}

/* A node with operands ops[0..n), or -1. */
static int node(struct parser *ps, enum formula_op op, const int *ops, int n)
{
    struct formula *f = ps->f;
    if (f->n_node >= GRADER_FORMULA_NODES || f->n_args + n > GRADER_FORMULA_NODES)
        return fail(ps, "the formula is too long");
    struct formula_node *x = &f->node[f->n_node];
    memset(x, 0, sizeof *x);
    x->op = op;
    x->first = f->n_args;
    x->count = n;
    for (int i = 0; i < n; i++)
        f->args[f->n_args++] = ops[i];
    return f->n_node++;
}

static int expr(struct parser *ps);

static bool name_byte(char c, bool first)
{
    return isalpha((unsigned char)c) || c == '_' || (!first && (isdigit((unsigned char)c) || c == '.'));
}

static int call(struct parser *ps, const char *fn, size_t len)
{
    enum formula_op op;
    if (len == 3 && memcmp(fn, "min", 3) == 0)
        op = F_MIN;
    else if (len == 3 && memcmp(fn, "max", 3) == 0)
        op = F_MAX;
    else if (len == 3 && memcmp(fn, "abs", 3) == 0)
        op = F_ABS;
    else
        return fail(ps, "unknown function (min, max and abs are known)");
    ps->p++; /* ( */
    int ops[MAX_CALL_ARGS], n = 0;
    for (;;) {
        if (n == MAX_CALL_ARGS)
            return fail(ps, "too many arguments");
        int a = expr(ps);
        if (a < 0)
            return -1;
        ops[n++] = a;
        spaces(ps);
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p != ')')
            return fail(ps, "expected ',' or ')'");
        ps->p++;
        break;
    }
    if (op == F_ABS && n != 1)
        return fail(ps, "abs takes one argument");
    return node(ps, op, ops, n);
}

static int primary(struct parser *ps)
{
    spaces(ps);
    const char *p = ps->p;
    if (*p == '(') {
        ps->p++;
        int x = expr(ps);
        if (x < 0)
            return -1;
        spaces(ps);
        if (*ps->p != ')')
            return fail(ps, "expected ')'");
        ps->p++;
        return x;
    }
    if (isdigit((unsigned char)*p) || (*p == '.' && isdigit((unsigned char)p[1]))) {
        char *end;
        double v = strtod(p, &end);
        /* strtod also reads hex and exponents: only digits, '.', e/E and a
         * sign after the e are a number here */
        for (const char *q = p; q < end; q++)
            if (!(isdigit((unsigned char)*q) || *q == '.' || *q == 'e' || *q == 'E' ||
                  ((*q == '+' || *q == '-') && q > p && (q[-1] == 'e' || q[-1] == 'E'))))
                return fail(ps, "malformed number");
        if (!isfinite(v))
            return fail(ps, "number out of range");
        ps->p = end;
        int x = node(ps, F_NUM, NULL, 0);
        if (x >= 0)
            ps->f->node[x].num = v;
        return x;
    }
    if (name_byte(*p, true)) {
        size_t len = 0;
        while (name_byte(p[len], len == 0))
            len++;
        ps->p = p + len;
        spaces(ps);
        if (*ps->p == '(')
            return call(ps, p, len);
        if (len >= GRADER_FORMULA_NAME)
            return fail(ps, "name too long");
        int x = node(ps, F_NAME, NULL, 0);
        if (x >= 0)
            memcpy(ps->f->node[x].name, p, len);
        return x;
    }
    return fail(ps, *p ? "expected a number, a grader's name, a function or '('"
                       : "the formula ends too soon");
}

static int unary(struct parser *ps)
{
    spaces(ps);
    if (*ps->p == '-') {
        ps->p++;
        if (++ps->depth > GRADER_FORMULA_DEPTH)
            return fail(ps, "nested too deeply");
        int x = unary(ps);
        ps->depth--;
        return x < 0 ? -1 : node(ps, F_NEG, &x, 1);
    }
    return primary(ps);
}

static int term(struct parser *ps)
{
    int x = unary(ps);
    for (;;) {
        if (x < 0)
            return -1;
        spaces(ps);
        char c = *ps->p;
        if (c != '*' && c != '/')
            return x;
        ps->p++;
        int y = unary(ps);
        if (y < 0)
            return -1;
        int ops[2] = {x, y};
        x = node(ps, c == '*' ? F_MUL : F_DIV, ops, 2);
    }
}

static int expr(struct parser *ps)
{
    if (++ps->depth > GRADER_FORMULA_DEPTH)
        return fail(ps, "nested too deeply");
    int x = term(ps);
    for (;;) {
        if (x < 0)
            return -1;
        spaces(ps);
        char c = *ps->p;
        if (c != '+' && c != '-')
            break;
        ps->p++;
        int y = term(ps);
        if (y < 0)
            return -1;
        int ops[2] = {x, y};
        x = node(ps, c == '+' ? F_ADD : F_SUB, ops, 2);
    }
    ps->depth--;
    return x;
}

bool formula_parse(const char *src, struct formula *f, char *err, size_t errcap)
{
    memset(f, 0, sizeof *f);
    struct parser ps = {.src = src, .p = src, .f = f, .err = err, .errcap = errcap};
    int root = expr(&ps);
    if (root >= 0) {
        spaces(&ps);
        if (*ps.p)
            root = fail(&ps, "unexpected character");
    }
    f->root = root;
    return root >= 0;
}

bool formula_each_name(const struct formula *f, bool (*fn)(void *ctx, const char *name), void *ctx)
{
    for (int i = 0; i < f->n_node; i++)
        if (f->node[i].op == F_NAME && !fn(ctx, f->node[i].name))
            return false;
    return true;
}

struct evaluation {
    const struct formula *f;
    double (*value)(void *ctx, const char *name);
    void *ctx;
    char *err;
    size_t errcap;
    bool failed;
};

static double eval(struct evaluation *e, int i)
{
    const struct formula_node *x = &e->f->node[i];
    const int *a = e->f->args + x->first;
    double v = 0;
    switch (x->op) {
    case F_NUM:
        return x->num;
    case F_NAME:
        v = e->value(e->ctx, x->name);
        if (!isfinite(v) && !e->failed) {
            text_error(e->err, e->errcap, "calculate_output: %s is not a finite number", x->name);
            e->failed = true;
        }
        return v;
    case F_ADD:
        return eval(e, a[0]) + eval(e, a[1]);
    case F_SUB:
        return eval(e, a[0]) - eval(e, a[1]);
    case F_MUL:
        return eval(e, a[0]) * eval(e, a[1]);
    case F_DIV: {
        double n = eval(e, a[0]), d = eval(e, a[1]);
        if (d == 0 && !e->failed) {
            text_error(e->err, e->errcap, "calculate_output divides by zero");
            e->failed = true;
        }
        return d == 0 ? 0 : n / d;
    }
    case F_NEG:
        return -eval(e, a[0]);
    case F_ABS:
        return fabs(eval(e, a[0]));
    case F_MIN:
    case F_MAX:
        v = eval(e, a[0]);
        for (int k = 1; k < x->count; k++) {
            double w = eval(e, a[k]);
            v = x->op == F_MIN ? (w < v ? w : v) : (w > v ? w : v);
        }
        return v;
    }
    return 0;
}

bool formula_eval(const struct formula *f, double (*value)(void *ctx, const char *name), void *ctx,
                  double *out, char *err, size_t errcap)
{
    struct evaluation e = {.f = f, .value = value, .ctx = ctx, .err = err, .errcap = errcap};
    double v = f->root >= 0 ? eval(&e, f->root) : 0;
    if (!e.failed && !isfinite(v)) {
        text_error(err, errcap, "calculate_output's value is not a finite number");
        e.failed = true;
    }
    *out = e.failed ? 0 : v;
    return !e.failed;
}
