/*
 * What SM count an MPS client gets for its CUDA_MPS_ACTIVE_THREAD_PERCENTAGE:
 * prints "pct=<env> attr_sms=<multiprocessor count> affinity_sms=<SM count
 * of the context's execution affinity>" (make test-gpu's MPS report).
 * Driver API through dlopen, as the interposer does: no CUDA toolkit needed.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*init_fn)(unsigned);
typedef int (*dev_get_fn)(int *, int);
typedef int (*attr_fn)(int *, int, int);
typedef int (*ctx_create_fn)(void **, unsigned, int);
typedef int (*affinity_fn)(void *, int);

int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (h == NULL) {
        fprintf(stderr, "no libcuda.so.1\n");
        return 1;
    }
    init_fn init = (init_fn)dlsym(h, "cuInit");
    dev_get_fn dev_get = (dev_get_fn)dlsym(h, "cuDeviceGet");
    attr_fn attr = (attr_fn)dlsym(h, "cuDeviceGetAttribute");
    ctx_create_fn ctx_create = (ctx_create_fn)dlsym(h, "cuCtxCreate_v2");
    void *aff_sym = dlsym(h, "cuCtxGetExecAffinity");
    if (!init || !dev_get || !attr || !ctx_create)
        return 1;
    int dev = 0, sms = -1;
    void *ctx = NULL;
    if (init(0) != 0 || dev_get(&dev, 0) != 0 || ctx_create(&ctx, 0, dev) != 0) {
        fprintf(stderr, "CUDA init failed\n");
        return 1;
    }
    attr(&sms, 16 /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */, dev);
    struct {
        int type;
        union {
            struct {
                unsigned val;
            } smCount;
        } param;
    } aff = {0, {{0}}};
    int arc = -1;
    if (aff_sym != NULL)
        arc = ((int (*)(void *, int))aff_sym)(&aff, 0 /* CU_EXEC_AFFINITY_TYPE_SM_COUNT */);
    const char *p = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    printf("pct=%s attr_sms=%d affinity_sms=%d\n", p ? p : "none", sms,
           arc == 0 ? (int)aff.param.smCount.val : -1);
    return 0;
}
