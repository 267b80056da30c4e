/* cmd_help.c - whether a command line asks for its usage (cmd_help.h). */
#include "core/cmd_help.h"

#include <string.h>

bool cmd_help_asked(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return true;
    return false;
}
