/* cli_args.h - the client commands' option parsing: `--name value`,
 * `--name=value`, flags, and positional arguments, with usage errors as one
 * line. `--json` is known to every command.
 */
#ifndef ALALLO_CLI_ARGS_H
#define ALALLO_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>

#define CLI_MAX_POSITIONAL 8

/* A table of options ends with an entry whose name is NULL. */
struct cli_opt {
    const char *name;    /* "--model"                                    */
    bool takes_value;    /* false: a flag                                */
    const char *value;   /* OUT: the value ("" for a flag), NULL if absent */
};

struct cli_args {
    const char *pos[CLI_MAX_POSITIONAL];
    int npos;
    bool json;           /* --json was given */
};

/* Parses argv[0..argc-1] against opts. Returns 0, or -1 with a one-line
 * reason in err (an unknown option, with the nearest known one when one is
 * close: "unknown option --modle (did you mean --model?)"; a missing value;
 * too many positional arguments). A lone "--" ends the options. */
int cli_parse(int argc, char **argv, struct cli_opt *opts, struct cli_args *out /* OUT */,
              char *err, size_t errcap);

/* The value of option `name` after cli_parse, or NULL. */
const char *cli_get(const struct cli_opt *opts, const char *name);

/* Parses a whole number in [min, max]. Returns 0 or -1. */
int cli_parse_long(const char *s, long min, long max, long *out /* OUT */);

/* Parses a moment as Unix seconds: a whole number of them, or an RFC 3339
 * time "2026-12-03T18:00:00Z" (seconds optional, "T" or a space, "Z" or an
 * offset "+01:00"). Returns 0 or -1. */
int cli_parse_time(const char *s, long long *out /* OUT */);

/* Parses a finite number in [min, max]. Returns 0 or -1. */
int cli_parse_double(const char *s, double min, double max, double *out /* OUT */);

#endif
