/*
 * Fuzz target: the limits-file / environment parser of libgpuvisor.so.
 * The input is parsed as a limits file, then each line as an environment
 * entry; whatever is accepted must leave a consistent configuration.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "interposer/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gv_ipcfg c;
    struct gv_error err;
    gv_ipcfg_init(&c);
    if (gv_ipcfg_parse_text(&c, (const char *)data, size, "fuzz", &err) == GV_OK) {
        for (int i = 0; i < GV_IPCFG_MAX_DEVICES; i++)
            if (gv_ipcfg_sm_limit(&c, i) > 100)
                abort();
        if (c.shared_cache[0] != '\0' && c.shared_cache[0] != '/')
            abort();
    }
    char *copy = malloc(size + 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    char *envp[64];
    int n = 0;
    for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line != NULL && n < 63;
         line = strtok_r(NULL, "\n", &save))
        envp[n++] = line;
    envp[n] = NULL;
    gv_ipcfg_init(&c);
    (void)gv_ipcfg_parse_env(&c, envp, &err);
    free(copy);
    return 0;
}
