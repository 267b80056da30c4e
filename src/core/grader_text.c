/* grader_text.c - the text_similarity grader's metrics (grader_text.h). */
#include "core/grader_text.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[GRADER_METRIC_COUNT] = {
    "fuzzy_match", "bleu", "gleu", "rouge_1", "rouge_2", "rouge_3", "rouge_4", "rouge_5",
    "rouge_l"};

const char *grader_metric_name(enum grader_metric m)
{
    return (unsigned)m < GRADER_METRIC_COUNT ? names[m] : NULL;
}

bool grader_metric_parse(const char *name, enum grader_metric *out)
{
    for (int i = 0; name && i < GRADER_METRIC_COUNT; i++)
        if (strcmp(name, names[i]) == 0) {
            *out = (enum grader_metric)i;
            return true;
        }
    return false;
}

/* ------------------------------------------------------------ words */

struct words {
    const char *s;                       /* the text */
    int n;                               /* words found */
    int at[GRADER_TEXT_MAX_WORDS];       /* each word's first byte */
    int len[GRADER_TEXT_MAX_WORDS];      /* and its length */
};

static bool word_byte(unsigned char c)
{
    return c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z');
}

static unsigned char lower(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c - 'A' + 'a') : c;
}

static void split(const char *s, struct words *w)
{
    w->s = s;
    w->n = 0;
    for (int i = 0; s[i] && w->n < GRADER_TEXT_MAX_WORDS;) {
        if (!word_byte((unsigned char)s[i])) {
            i++;
            continue;
        }
        int start = i;
        while (s[i] && word_byte((unsigned char)s[i]))
            i++;
        w->at[w->n] = start;
        w->len[w->n++] = i - start;
    }
}

static bool word_eq(const struct words *a, int i, const struct words *b, int j)
{
    if (a->len[i] != b->len[j])
        return false;
    const char *x = a->s + a->at[i], *y = b->s + b->at[j];
    for (int k = 0; k < a->len[i]; k++)
        if (lower((unsigned char)x[k]) != lower((unsigned char)y[k]))
            return false;
    return true;
}

/* Whether the n-gram of a at i equals the one of b at j. */
static bool gram_eq(const struct words *a, int i, const struct words *b, int j, int n)
{
    for (int k = 0; k < n; k++)
        if (!word_eq(a, i + k, b, j + k))
            return false;
    return true;
}

static int grams(const struct words *w, int n)
{
    return w->n >= n ? w->n - n + 1 : 0;
}

/* How many times the n-gram of a at i occurs in b. */
static int count_in(const struct words *a, int i, const struct words *b, int n)
{
    int c = 0;
    for (int j = 0; j < grams(b, n); j++)
        c += gram_eq(a, i, b, j, n);
    return c;
}

/* The clipped overlap of a's and b's n-grams: for each distinct n-gram of
 * a, the smaller of its counts in a and in b. */
static int overlap(const struct words *a, const struct words *b, int n)
{
    int sum = 0;
    for (int i = 0; i < grams(a, n); i++) {
        bool first = true;
        for (int k = 0; k < i && first; k++)
            first = !gram_eq(a, k, a, i, n);
        if (!first)
            continue;
        int ca = count_in(a, i, a, n), cb = count_in(a, i, b, n);
        sum += ca < cb ? ca : cb;
    }
    return sum;
}

static double f1(double hits, double answer_n, double reference_n)
{
    if (hits <= 0 || answer_n <= 0 || reference_n <= 0)
        return 0;
    double p = hits / answer_n, r = hits / reference_n;
    return 2 * p * r / (p + r);
}

static double bleu(const struct words *a, const struct words *r)
{
    if (a->n == 0)
        return 0;
    double log_sum = 0, smooth = 1;
    int orders = 0;
    for (int n = 1; n <= 4; n++) {
        int total = grams(a, n);
        if (total == 0)
            break;
        int hits = overlap(a, r, n);
        double p;
        if (hits == 0) {
            smooth *= 2;
            p = 1.0 / (smooth * total);
        } else {
            p = (double)hits / total;
        }
        log_sum += log(p);
        orders++;
    }
    double bp = a->n < r->n ? exp(1.0 - (double)r->n / a->n) : 1.0;
    return bp * exp(log_sum / orders);
}

static double gleu(const struct words *a, const struct words *r)
{
    int hits = 0, na = 0, nr = 0;
    for (int n = 1; n <= 4; n++) {
        hits += overlap(a, r, n);
        na += grams(a, n);
        nr += grams(r, n);
    }
    int most = na > nr ? na : nr;
    return most > 0 ? (double)hits / most : 0;
}

/* The length of the longest common subsequence of x (nx items) and y
 * (ny), equal(i, j) telling whether x[i] and y[j] match; one row of
 * ny + 1 counts. -1 on out of memory. */
static long lcs(int nx, int ny, bool (*equal)(const void *, int, int), const void *ctx)
{
    int *row = calloc((size_t)ny + 1, sizeof *row);
    if (!row)
        return -1;
    for (int i = 0; i < nx; i++) {
        int diag = 0; /* row[j - 1] of the row before */
        for (int j = 1; j <= ny; j++) {
            int up = row[j];
            row[j] = equal(ctx, i, j - 1) ? diag + 1 : (row[j - 1] > up ? row[j - 1] : up);
            diag = up;
        }
    }
    long n = row[ny];
    free(row);
    return n;
}

struct two_words {
    const struct words *a, *b;
};

static bool words_match(const void *ctx, int i, int j)
{
    const struct two_words *t = ctx;
    return word_eq(t->a, i, t->b, j);
}

/* ------------------------------------------------------------ characters */

/* Code points of s, at most GRADER_TEXT_MAX_CHARS; a byte that starts no
 * valid character counts as one. */
static int code_points(const char *s, uint32_t *out)
{
    const unsigned char *p = (const unsigned char *)s;
    int n = 0;
    while (*p && n < GRADER_TEXT_MAX_CHARS) {
        int len = *p < 0x80 ? 1 : (*p >> 5) == 6 ? 2 : (*p >> 4) == 14 ? 3 : (*p >> 3) == 30 ? 4 : 1;
        uint32_t c = len == 1 ? *p : (uint32_t)(*p & (0x7f >> len));
        for (int k = 1; k < len; k++) {
            if ((p[k] & 0xc0) != 0x80) {
                len = 1;
                c = *p;
                break;
            }
            c = (c << 6) | (p[k] & 0x3f);
        }
        out[n++] = c;
        p += len;
    }
    return n;
}

struct two_chars {
    const uint32_t *a, *b;
};

static bool chars_match(const void *ctx, int i, int j)
{
    const struct two_chars *t = ctx;
    return t->a[i] == t->b[j];
}

static double fuzzy(const char *a, const char *b)
{
    uint32_t *ca = malloc(GRADER_TEXT_MAX_CHARS * sizeof *ca);
    uint32_t *cb = malloc(GRADER_TEXT_MAX_CHARS * sizeof *cb);
    double score = 0;
    if (ca && cb) {
        int na = code_points(a, ca), nb = code_points(b, cb);
        struct two_chars t = {ca, cb};
        long common = lcs(na, nb, chars_match, &t);
        score = na + nb == 0 ? 1.0 : common < 0 ? 0 : 2.0 * (double)common / (na + nb);
    }
    free(ca);
    free(cb);
    return score;
}

double grader_text_score(enum grader_metric m, const char *answer, const char *reference)
{
    if (m == GRADER_FUZZY)
        return fuzzy(answer, reference);
    struct words *a = malloc(sizeof *a), *r = malloc(sizeof *r);
    double score = 0;
    if (!a || !r)
        goto out;
    split(answer, a);
    split(reference, r);
    if (m == GRADER_BLEU) {
        score = bleu(a, r);
    } else if (m == GRADER_GLEU) {
        score = gleu(a, r);
    } else if (m == GRADER_ROUGE_L) {
        struct two_words t = {a, r};
        long common = lcs(a->n, r->n, words_match, &t);
        score = f1((double)common, a->n, r->n);
    } else if (m >= GRADER_ROUGE_1 && m <= GRADER_ROUGE_5) {
        int n = (int)(m - GRADER_ROUGE_1) + 1;
        score = f1(overlap(a, r, n), grams(a, n), grams(r, n));
    }
out:
    free(a);
    free(r);
    return score;
}
