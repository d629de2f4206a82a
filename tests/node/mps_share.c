/*
 * What the node agent's MPS mode would hand a client on this machine's GPUs
 * (tests/gpu/run-gpu-tests.sh runs it on a real GPU; tests/node uses it over
 * the fake NVML): the GPU's SM count as the agent discovers it through NVML,
 * and the active-thread percentage of each share.
 *
 *   mps_share INDEX MILLI...   ->   "sms=S pct=P1 P2 ..."
 *
 * Exit 0, 1 when NVML or the GPU cannot be read, 2 on bad usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/discovery/gv_gpus.h"
#include "node/modes/gv_mode.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: mps_share INDEX MILLI...\n");
        return 2;
    }
    char *end;
    unsigned long index = strtoul(argv[1], &end, 10);
    if (*end != '\0' || end == argv[1]) {
        fprintf(stderr, "mps_share: bad GPU index \"%s\"\n", argv[1]);
        return 2;
    }
    struct gv_gpus_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    struct gv_gpus *g = NULL;
    struct gv_error err;
    if (gv_gpus_open(&cfg, &g, &err) != GV_OK) {
        fprintf(stderr, "mps_share: %s\n", err.msg);
        return 1;
    }
    struct gv_gpu *gpus = NULL;
    size_t n = 0;
    int rc = 1;
    if (gv_gpus_snapshot(g, &gpus, &n, &err) != GV_OK) {
        fprintf(stderr, "mps_share: %s\n", err.msg);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        if (gpus[i].index != index)
            continue;
        printf("sms=%u pct=", gpus[i].sms);
        rc = 0;
        for (int a = 2; a < argc; a++) {
            unsigned long milli = strtoul(argv[a], &end, 10);
            if (*end != '\0' || end == argv[a] || milli < 1 || milli > 1000) {
                fprintf(stderr, "\nmps_share: bad share \"%s\" (milli 1..1000)\n", argv[a]);
                rc = 2;
                break;
            }
            printf("%s%u", a > 2 ? " " : "", gv_mps_thread_percentage((unsigned)milli, gpus[i].sms));
        }
        printf("\n");
        goto done;
    }
    fprintf(stderr, "mps_share: no GPU with index %lu\n", index);
done:
    free(gpus);
    gv_gpus_free(g);
    return rc;
}
