/*
 * MPS client limits from the limits file (docs/node-agent.md, "MPS").
 *
 * On an MPS GPU the CUDA driver reads the client's limits
 * (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) and
 * the daemon's pipe directory from the environment when CUDA starts.  The
 * node agent hands them out in the Allocate answer, but the container's own
 * env (the pod spec, which the tenant writes) comes after the device
 * plugin's and wins.  The same values are in the read-only limits file, so
 * here, before main() and any thread, they are put back into the
 * environment: nothing the tenant writes raises its MPS limits.
 *
 * Only these keys, only when the limits file names them; the file is the
 * one gv_ipcfg_load reads (the default path, or GPUVISOR_LIMITS_FILE while
 * it does not exist).  Errors leave the environment as it was: the
 * configuration loader reports the file's problems when CUDA is used.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "interposer/config.h"

static const char *const mps_keys[] = {"CUDA_MPS_PIPE_DIRECTORY",
                                       "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                                       "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"};

/* Applies one "KEY=VALUE" line (optional "export ", optional matching quotes). */
static void apply_line(char *line)
{
    while (*line == ' ' || *line == '\t')
        line++;
    if (strncmp(line, "export ", 7) == 0)
        line += 7;
    char *eq = strchr(line, '=');
    if (eq == NULL)
        return;
    *eq = '\0';
    char *val = eq + 1;
    size_t vl = strlen(val);
    while (vl && (val[vl - 1] == '\r' || val[vl - 1] == ' ' || val[vl - 1] == '\t'))
        val[--vl] = '\0';
    if (vl >= 2 && (val[0] == '"' || val[0] == '\'') && val[vl - 1] == val[0]) {
        val[vl - 1] = '\0';
        val++;
    }
    for (size_t i = 0; i < sizeof(mps_keys) / sizeof(mps_keys[0]); i++)
        if (strcmp(line, mps_keys[i]) == 0)
            setenv(mps_keys[i], val, 1);
}

void gv_mps_env_apply(const char *path);

void gv_mps_env_apply(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    enum { MAX = 64 * 1024 };
    char *buf = malloc(MAX + 1);
    size_t used = 0;
    while (buf && used < MAX) {
        ssize_t r = read(fd, buf + used, MAX - used);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        used += (size_t)r;
    }
    close(fd);
    if (buf == NULL)
        return;
    buf[used] = '\0';
    for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
        if (strstr(l, "CUDA_MPS_") != NULL)
            apply_line(l);
    free(buf);
}

__attribute__((constructor)) static void gv_mps_env_init(void)
{
    const char *path = GV_IPCFG_DEFAULT_LIMITS_FILE;
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) {
        path = getenv("GPUVISOR_LIMITS_FILE");
        if (path == NULL || *path == '\0')
            return;
    }
    gv_mps_env_apply(path);
}
