/* cli_args.c - option parsing for the client commands. */
#include "cli/cli_args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct cli_opt *find(struct cli_opt *opts, const char *name, size_t len)
{
    for (struct cli_opt *o = opts; o && o->name; o++)
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
            return o;
    return NULL;
}

/* Edits (insert, delete, replace) between a[0..an) and b; options are short,
 * so one row of the table is enough. Capped at 9. */
static size_t distance(const char *a, size_t an, const char *b)
{
    size_t bn = strlen(b);
    if (an > 40 || bn > 40)
        return 9;
    size_t row[41];
    for (size_t j = 0; j <= bn; j++)
        row[j] = j;
    for (size_t i = 1; i <= an; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= bn; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[bn] < 9 ? row[bn] : 9;
}

/* The known option nearest to a mistyped one: two edits at most, or the
 * one the typed text begins (--learning-rate for --learning-rate-multiplier). */
static const char *nearest(const struct cli_opt *opts, const char *name, size_t len)
{
    const char *best = NULL;
    size_t best_d = 3;
    for (const struct cli_opt *o = opts; o && o->name; o++) {
        size_t d = distance(name, len, o->name);
        if (d >= best_d && len > 3 && strncmp(o->name, name, len) == 0)
            d = 2;
        if (d < best_d) {
            best_d = d;
            best = o->name;
        }
    }
    return best;
}

int cli_parse(int argc, char **argv, struct cli_opt *opts, struct cli_args *out, char *err,
              size_t errcap)
{
    memset(out, 0, sizeof *out);
    for (struct cli_opt *o = opts; o && o->name; o++)
        o->value = NULL;
    bool options_done = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!options_done && strcmp(a, "--") == 0) {
            options_done = true;
            continue;
        }
        if (options_done || strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            if (out->npos == CLI_MAX_POSITIONAL) {
                snprintf(err, errcap, "too many arguments");
                return -1;
            }
            out->pos[out->npos++] = a;
            continue;
        }
        if (strcmp(a, "--json") == 0) {
            out->json = true;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        struct cli_opt *o = find(opts, a, len);
        if (!o) {
            const char *near = nearest(opts, a, len);
            if (near)
                snprintf(err, errcap, "unknown option %.*s (did you mean %s?)", (int)len, a, near);
            else
                snprintf(err, errcap, "unknown option %.*s", (int)len, a);
            return -1;
        }
        if (!o->takes_value) {
            if (eq) {
                snprintf(err, errcap, "%s takes no value", o->name);
                return -1;
            }
            o->value = "";
        } else if (eq) {
            o->value = eq + 1;
        } else if (i + 1 < argc) {
            o->value = argv[++i];
        } else {
            snprintf(err, errcap, "%s needs a value", o->name);
            return -1;
        }
    }
    return 0;
}

const char *cli_get(const struct cli_opt *opts, const char *name)
{
    for (const struct cli_opt *o = opts; o && o->name; o++)
        if (strcmp(o->name, name) == 0)
            return o->value;
    return NULL;
}

int cli_parse_long(const char *s, long min, long max, long *out)
{
    if (!s || !*s)
        return -1;
    errno = 0;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

int cli_parse_double(const char *s, double min, double max, double *out)
{
    if (!s || !*s)
        return -1;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar. */
static long long days_from_civil(long long y, int m, int d)
{
    y -= m <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    long long yoe = y - era * 400;
    long long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

int cli_parse_time(const char *s, long long *out)
{
    long n;
    if (!s || !*s)
        return -1;
    if (cli_parse_long(s, 1, 253402300799L, &n) == 0) {
        *out = n;
        return 0;
    }
    int y, mo, d, h, mi, sec = 0, used = 0;
    char sep;
    if (sscanf(s, "%4d-%2d-%2d%c%2d:%2d%n", &y, &mo, &d, &sep, &h, &mi, &used) != 6 ||
        (sep != 'T' && sep != 't' && sep != ' '))
        return -1;
    const char *p = s + used;
    if (*p == ':') {
        int k = 0;
        if (sscanf(p, ":%2d%n", &sec, &k) != 1)
            return -1;
        p += k;
        if (*p == '.') /* fractions of a second: dropped */
            for (p++; *p >= '0' && *p <= '9'; p++)
                ;
    }
    long offset = 0;
    if ((*p == 'Z' || *p == 'z') && p[1] == '\0') {
        offset = 0;
    } else if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
        int oh, om, k = 0;
        if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &k) != 2 || k != 5 || oh > 23 || om > 59)
            return -1;
        offset = (*p == '+' ? 1 : -1) * (oh * 3600L + om * 60L);
    } else {
        return -1;
    }
    static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] ||
        (mo == 2 && d == 29 && !leap) || h > 23 || mi > 59 || sec > 60)
        return -1;
    long long t = days_from_civil(y, mo, d) * 86400LL + h * 3600LL + mi * 60LL + sec - offset;
    if (t <= 0)
        return -1;
    *out = t;
    return 0;
}
