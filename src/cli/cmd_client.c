/* cmd_client.c - placeholder until its module lands. */
#include <stdio.h>

#include "cmds.h"

int cmd_client(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "alallo %s: not built yet\n", argv[0]);
    return 1;
}
