/*
 * Test helper (not a test): writes the CDI spec the node agent writes, for
 * one GPU (index 0, minor 0, GPU_UUID below) found under a driver root, so a
 * real CDI consumer can read it (tests/node/test_node_cdi_podman.sh).
 *   cdi_spec_gen DRIVER_ROOT VERSION KIND OUT_DIR FILE
 * Exit 0 when written; the error on stderr otherwise.
 */
#include <stdio.h>
#include <string.h>

#include "node/discovery/gv_cdi.h"

#define GPU_UUID "GPU-0badc0de-0000-4000-8000-000000000000"

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: cdi_spec_gen DRIVER_ROOT VERSION KIND OUT_DIR FILE\n");
        return 2;
    }
    struct gv_error err = {0};
    struct gv_cdi_host *h = NULL;
    if (gv_cdi_discover(argv[1], NULL, argv[2], &h, &err) != GV_OK) {
        fprintf(stderr, "discover: %s\n", err.msg);
        return 1;
    }
    struct gv_gpu g;
    memset(&g, 0, sizeof(g));
    snprintf(g.uuid, sizeof(g.uuid), "%s", GPU_UUID);
    g.numa = -1;
    g.healthy = true;
    struct gv_cdi_interposer ip = {0};
    json_t *spec = gv_cdi_spec(argv[3], h, &g, 1, &ip, &err);
    int rc = spec != NULL && gv_cdi_write(argv[4], argv[5], spec, &err) == GV_OK ? 0 : 1;
    if (rc != 0)
        fprintf(stderr, "spec: %s\n", err.msg);
    json_decref(spec);
    gv_cdi_host_free(h);
    return rc;
}
