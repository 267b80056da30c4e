/* grader_formula.h - the calculate_output of a multi grader: a formula
 * over the scores of its named graders (docs/rft.md, "multi"), parsed by
 * hand into a small tree, never evaluated as code. Pure.
 *
 * Grammar (spaces anywhere between tokens):
 *   expr   = term { ("+" | "-") term }
 *   term   = unary { ("*" | "/") unary }
 *   unary  = "-" unary | primary
 *   primary = NUMBER | NAME | FUNC "(" expr { "," expr } ")" | "(" expr ")"
 * NUMBER as strtod reads a decimal (no sign, no hex, no inf or nan); NAME
 * letters, digits, '_' and '.', not starting with a digit; FUNC one of min,
 * max (one argument or more), abs (one). At most GRADER_FORMULA_NODES
 * nodes and GRADER_FORMULA_DEPTH levels of nesting.
 */
#ifndef ALALLO_CORE_GRADER_FORMULA_H
#define ALALLO_CORE_GRADER_FORMULA_H

#include <stdbool.h>
#include <stddef.h>

#define GRADER_FORMULA_NODES 128
#define GRADER_FORMULA_DEPTH 32
#define GRADER_FORMULA_NAME 64

enum formula_op { F_NUM, F_NAME, F_ADD, F_SUB, F_MUL, F_DIV, F_NEG, F_MIN, F_MAX, F_ABS };

struct formula_node {
    enum formula_op op;
    double num;                     /* F_NUM */
    char name[GRADER_FORMULA_NAME]; /* F_NAME */
    int first, count;               /* operands: nodes `first`.. in `args` */
};

/* The parsed formula: nodes, and args, the operands' node indexes. The
 * root is node `root`. The caller owns it (plain data, no free). */
struct formula {
    struct formula_node node[GRADER_FORMULA_NODES];
    int args[GRADER_FORMULA_NODES];
    int n_node, n_args, root;
};

/* Parses src. false with a sentence in err naming where it stopped. */
bool formula_parse(const char *src, struct formula *f /* OUT */, char *err, size_t errcap);

/* Calls fn with each name the formula reads, in order (repeats included);
 * stops and returns false at fn's first false. */
bool formula_each_name(const struct formula *f, bool (*fn)(void *ctx, const char *name),
                       void *ctx);

/* The formula's value, each name's value from value(). false with a
 * sentence in err when a division by zero or a value that is not a finite
 * number comes up. */
bool formula_eval(const struct formula *f, double (*value)(void *ctx, const char *name),
                  void *ctx, double *out /* OUT */, char *err, size_t errcap);

#endif
