/* cmd_generate.c - placeholder until its module lands. */
#include <stdio.h>

#include "cmds.h"

int cmd_generate_local(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "alallo %s: not built yet\n", argv[0]);
    return 1;
}
