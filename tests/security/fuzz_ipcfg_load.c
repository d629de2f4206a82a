/*
 * Fuzz target: gv_ipcfg_load, the interposer's choice between a limits file
 * and the environment.  The input is split at the first NUL: environment
 * lines, then the limits file's content (written to a scratch file that
 * GPUVISOR_LIMITS_FILE names, as `gpuvisor run` does where no
 * /etc/gpuvisor/limits.env exists).  Property: once a limits file is used,
 * the environment is not read at all (a process cannot add, change or
 * remove a limit through it): the result equals parsing the file alone.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "interposer/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char path[256];

static void cleanup(void)
{
    if (path[0] != '\0')
        unlink(path);
}

static bool same(const struct gv_ipcfg *a, const struct gv_ipcfg *b)
{
    for (int i = -1; i < GV_IPCFG_MAX_DEVICES; i++)
        if (gv_ipcfg_mem_limit(a, i, 1ull << 36) != gv_ipcfg_mem_limit(b, i, 1ull << 36) ||
            gv_ipcfg_sm_limit(a, i) != gv_ipcfg_sm_limit(b, i))
            return false;
    return a->priority == b->priority && a->policy == b->policy &&
           strcmp(a->shared_cache, b->shared_cache) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct stat st;
    if (stat(GV_IPCFG_DEFAULT_LIMITS_FILE, &st) == 0)
        return 0; /* a real limits file here: the property is about the scratch one */
    if (path[0] == '\0') {
        const char *tmp = getenv("TMPDIR");
        snprintf(path, sizeof(path), "%s/gv-fuzz-ipcfg-XXXXXX", tmp ? tmp : "/tmp");
        int fd = mkstemp(path);
        if (fd < 0) {
            path[0] = '\0';
            return 0;
        }
        close(fd);
        atexit(cleanup);
    }
    const uint8_t *nul = memchr(data, '\0', size);
    size_t elen = nul ? (size_t)(nul - data) : size;
    const char *file = nul ? (const char *)nul + 1 : "";
    size_t flen = nul ? size - elen - 1 : 0;
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return 0;
    fwrite(file, 1, flen, f);
    fclose(f);

    char *env = malloc(elen + 1);
    if (env == NULL)
        return 0;
    memcpy(env, data, elen);
    env[elen] = '\0';
    char *envp[66];
    int n = 0;
    for (char *save = NULL, *line = strtok_r(env, "\n", &save); line != NULL && n < 64;
         line = strtok_r(NULL, "\n", &save))
        if (strncmp(line, "GPUVISOR_LIMITS_FILE=", 21) != 0)
            envp[n++] = line;
    char named[300];
    snprintf(named, sizeof(named), "GPUVISOR_LIMITS_FILE=%s", path);
    envp[n++] = named;
    envp[n] = NULL;

    struct gv_ipcfg loaded, alone;
    struct gv_error e1, e2;
    gv_status s1 = gv_ipcfg_load(&loaded, envp, &e1);
    gv_ipcfg_init(&alone);
    gv_status s2 = gv_ipcfg_parse_text(&alone, file, flen, path, &e2);
    if (s1 != s2 || (s1 == GV_OK && !same(&loaded, &alone)))
        abort(); /* the environment changed what the limits file says */
    free(env);
    return 0;
}
