/* cmd_args.h - reading the options of the trainer's sub-commands
 * (train_cmds.h): `--name value` pairs and bare flags anywhere after the
 * command's own name (argv[0]). */
#ifndef ALALLO_TRAIN_CMD_ARGS_H
#define ALALLO_TRAIN_CMD_ARGS_H

#include <stdbool.h>

/* The value after option `name`, or NULL when it is absent (or last). */
const char *cmd_arg_value(int argc, char **argv, const char *name);

/* Whether flag `name` is given. */
bool cmd_has_flag(int argc, char **argv, const char *name);

/* An integer option in [lo, hi] into *out; absent leaves *out. Returns 0,
 * or -1 after telling stderr "CMD: NAME must be an integer from LO to HI"
 * (cmd is the command as the user typed it, e.g. "alallo model init"). */
int cmd_int_opt(const char *cmd, int argc, char **argv, const char *name, long lo, long hi,
                int *out /* IN/OUT */);

#endif
