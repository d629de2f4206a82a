/* Fuzz target: AdmissionReview bodies through the webhook's decision code. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/gv_webhook.h"

/* Stand-in for the scheduler's node table: one VFIO resource name. */
static bool whole(void *ud, const char *resource)
{
    (void)ud;
    return strcmp(resource, "nvidia.com/GH100_H100_PCIE") == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void limits(void *ud, struct gv_webhook_limits *out)
{
    (void)ud;
    out->largest_gpu_mib = 81559;
    out->most_gpus = 8;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct gv_alloc_config cfg;
    static int init;
    if (!init) {
        gv_alloc_config_default(&cfg);
        cfg.default_mem_mib = 1024; /* exercise the defaulting paths too */
        cfg.default_cores = 10;
        init = 1;
    }
    struct gv_webhook_env env = {&cfg,  "gpuvisor-scheduler", limits, NULL, NULL, NULL,
                                 false, NULL,                 whole};
    char *out = NULL;
    struct gv_error err;
    if (gv_webhook_review(&env, (const char *)data, size, &out, &err) == GV_OK && out == NULL)
        abort(); /* success always carries a response */
    free(out);
    return 0;
}
