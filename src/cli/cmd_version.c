#include <stdio.h>

#include "cli/commands.h"
#include "common/gv_version.h"

int gv_cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("gpuvisor %s\n", GV_VERSION);
    return 0;
}
