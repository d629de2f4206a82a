/* Fuzzes the kubeconfig reader (YAML via libyaml → JSON tree → config). */
#include <stdint.h>
#include <string.h>

#include "kube/gv_kube.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gv_kube_config *cfg = NULL;
    struct gv_error err;
    gv_status st = gv_kube_config_parse_kubeconfig((const char *)data, size, "/base", NULL, &cfg,
                                                   &err);
    if (st == GV_OK) {
        if (cfg == NULL || cfg->server == NULL)
            __builtin_trap();
        gv_kube_config_free(cfg);
    } else if (cfg != NULL || strlen(err.msg) == 0) {
        __builtin_trap(); /* failures leave nothing behind and say why */
    }
    return 0;
}
