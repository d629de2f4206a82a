/*
 * The environment Aliyun's gpushare device plugin gives a container asking
 * for aliyun.com/gpu-mem, so applications that size themselves from it keep
 * working (docs/contracts.md, "Environment"):
 *   ALIYUN_COM_GPU_MEM_IDX        index of the GPU (a comma list for several)
 *   ALIYUN_COM_GPU_MEM_DEV        memory of that GPU, GiB
 *   ALIYUN_COM_GPU_MEM_CONTAINER  the container's aliyun.com/gpu-mem, GiB
 *   ALIYUN_COM_GPU_MEM_POD        the sum over the pod's containers, GiB
 */
#ifndef GV_CONTRACTS_GPUSHARE_H
#define GV_CONTRACTS_GPUSHARE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define GV_GPUSHARE_RESOURCE "aliyun.com/gpu-mem"
#define GV_GPUSHARE_ENV_COUNT 4

struct gv_gpushare_env {
    const char *key;
    char value[160];
};

/*
 * Fills out[] for container `container` of pod, whose GPUs on this node
 * have the given indexes (n of them) and the first has dev_mib of memory.
 * Returns GV_GPUSHARE_ENV_COUNT, or 0 when the container asks for no
 * aliyun.com/gpu-mem (or it is not a whole number).
 */
size_t gv_gpushare_env(const json_t *pod, const char *container, const unsigned *indexes,
                       size_t n, uint64_t dev_mib, struct gv_gpushare_env out[GV_GPUSHARE_ENV_COUNT]);

#endif
