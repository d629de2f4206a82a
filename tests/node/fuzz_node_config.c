/* Fuzz target: the node configuration file (an operator-edited ConfigMap). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "node/config/gv_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gv_node_config *cfg = NULL;
    if (gv_node_config_parse((const char *)data, size, "node1", &cfg, NULL) != GV_OK)
        return 0;
    struct gv_node_gpu_settings s;
    for (unsigned i = 0; i < 4; i++)
        if (gv_node_config_gpu(cfg, "GPU-11111111-2222-4333-8444-000000000000", i, &s) &&
            (s.split < 1 || s.split > GV_NODE_MAX_SPLIT || !(s.mem_scaling > 0) ||
             memchr(s.resource, '\0', sizeof(s.resource)) == NULL ||
             /* only NVIDIA's sharing block names a resource, and only for its own mode */
             (s.resource[0] && s.mode != GV_NODE_MODE_TIMESLICING && s.mode != GV_NODE_MODE_MPS)))
            abort();
    gv_node_config_free(cfg);
    return 0;
}
