/*
 * The gpuvisor CLI's subcommands: one list generates the declarations, the
 * dispatch table and the help text.  Each command lives in
 * src/cli/cmd_<name>.c and exports `int gv_cmd_<name>(int argc, char **argv)`
 * (argv[0] is the subcommand name; returns the process exit code:
 * 0 ok, 1 runtime failure, 2 bad usage or bad input).
 */
#ifndef GV_CLI_COMMANDS_H
#define GV_CLI_COMMANDS_H

#define GV_CLI_COMMAND_LIST(X)                                                 \
    X(version, "print the gpuvisor version")                                   \
    X(simulate, "replay a cluster trace through the allocation engine, compare policies") \
    X(run, "run a command in a GPU slice on this machine (no Kubernetes)")              \
    X(ps, "list live GPU tenants of this machine's shared regions")

#define GV_X_DECLARE(name, help) int gv_cmd_##name(int argc, char **argv);
GV_CLI_COMMAND_LIST(GV_X_DECLARE)
#undef GV_X_DECLARE

#endif
