#include "tests/scheduler/sched_handfed.h"

#include <stdlib.h>

void st_feed_node(struct gv_sched *s, const char *name, const struct gpu_desc *gpus, unsigned n)
{
    char *inv = st_inventory(name, gpus, n, true);
    json_t *node = st_node(name, inv, 0);
    gv_sched_node_update(s, node);
    json_decref(node);
    free(inv);
}

struct st_handfed *st_handfed_new(bool (*tweak)(struct gv_sched_config *cfg))
{
    struct st_handfed *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return NULL;
    if (gv_sched_config_default(&h->cfg, NULL) != GV_OK || (tweak != NULL && !tweak(&h->cfg)) ||
        gv_sched_new(&h->cfg, NULL, &h->s, NULL) != GV_OK) {
        gv_sched_config_clear(&h->cfg);
        free(h);
        return NULL;
    }
    return h;
}

void st_handfed_free(struct st_handfed *h)
{
    if (h == NULL)
        return;
    gv_sched_free(h->s);
    gv_sched_config_clear(&h->cfg);
    free(h);
}
