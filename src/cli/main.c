/* gpuvisor: command-line entry point; dispatches to src/cli/cmd_*.c. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "common/gv_log.h"

struct command {
    const char *name;
    const char *help;
    int (*run)(int argc, char **argv);
};

static const struct command commands[] = {
#define GV_X_ENTRY(name, help) {#name, help, gv_cmd_##name},
    GV_CLI_COMMAND_LIST(GV_X_ENTRY)
#undef GV_X_ENTRY
};

static void usage(FILE *out)
{
    fprintf(out, "usage: gpuvisor <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(out, "\nRun 'gpuvisor <command> --help' for a command's options.\n");
}

int main(int argc, char **argv)
{
    gv_log_init("gpuvisor", GV_LOG_WARN);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    }
    fprintf(stderr, "gpuvisor: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
