/*
 * Private to the modes room: the set of the modes' states, made by
 * modes.c (which holds the mode table) and read through modes_common.c, which
 * every mode file may call.
 */
#ifndef GV_NODE_MODES_INTERNAL_H
#define GV_NODE_MODES_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "node/kubelet/gv_plugin.h"
#include "node/modes/gv_mode.h"

struct gv_modes {
    struct gv_mode_env env;
    void *state[GV_INVENTORY_MODE_COUNT];
};

/* The devices of one rebuild, grouped by resource name (gv_mode.h). */
struct adv_res {
    char name[128];
    struct gv_plugin_device *devs;
    size_t n, cap;
};

struct gv_mode_adv {
    struct adv_res *res;
    size_t n;
    bool oom;
};

#endif
