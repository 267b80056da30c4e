/* cmd_help.h - whether a command line asks for its usage.
 *
 * Every command and sub-command of the binary checks this first, before it
 * reads a file, opens a store, calls a server or runs anything: when it is
 * true the command prints its usage on stdout and exits 0
 * (tests/integration/cli_help.test.mjs runs each one). */
#ifndef ALALLO_CORE_CMD_HELP_H
#define ALALLO_CORE_CMD_HELP_H

#include <stdbool.h>

/* Whether `--help` or `-h` is among argv[1..argc-1] (argv[0] is the
 * command's own name), wherever it stands: `alallo bench train --steps 9
 * --help` asks for the usage too. An option's value spelt "-h" or "--help"
 * counts as asking. */
bool cmd_help_asked(int argc, char **argv);

#endif
