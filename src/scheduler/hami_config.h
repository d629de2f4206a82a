/*
 * HAMi's scheduler device ConfigMap (device-config.yaml) read as
 * gpuvisor-scheduler's configuration, so a cluster switching from HAMi keeps
 * its file (docs/migrate-from-hami.md, "Scheduler configuration").
 */
#ifndef GV_SCHED_HAMI_CONFIG_H
#define GV_SCHED_HAMI_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include "scheduler/gv_scheduler.h"

/* True when text is not a JSON object (so: HAMi's YAML). */
bool gv_sched_config_is_hami(const char *text, size_t len);

/*
 * Applies the document's "nvidia" section over cfg with HAMi's meaning;
 * keys that change nothing here are accepted and noted (cfg->notes, logged).
 * Unknown keys, other vendors' sections excepted, fail naming the key.  The
 * GPU policy becomes spread and the node policy binpack, HAMi's defaults.
 */
gv_status gv_sched_hami_config_parse(const char *text, size_t len, struct gv_sched_config *cfg,
                                     struct gv_error *err);

#endif
