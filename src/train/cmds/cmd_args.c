/* cmd_args.c - see cmd_args.h. */
#include "train/cmds/cmd_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *cmd_arg_value(int argc, char **argv, const char *name)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    return NULL;
}

bool cmd_has_flag(int argc, char **argv, const char *name)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return true;
    return false;
}

int cmd_int_opt(const char *cmd, int argc, char **argv, const char *name, long lo, long hi,
                int *out)
{
    const char *v = cmd_arg_value(argc, argv, name);
    if (!v)
        return 0;
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "%s: %s must be an integer from %ld to %ld\n", cmd, name, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}
