/* Placement authentication in the scheduler: see placement_guard.h. */
#include "scheduler/placement_guard.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/gv_log.h"
#include "scheduler/events.h"
#include "scheduler/sched_internal.h"

static atomic_ullong rejected;

gv_status gv_sched_placement_sign(const struct gv_sched_config *cfg, const char *uid,
                                  const char *node, const char *assigned_at,
                                  const char *assignment, char *out, size_t cap,
                                  struct gv_error *err)
{
    if (cap > 0)
        out[0] = '\0';
    if (cfg->placement_key == NULL)
        return GV_OK;
    return gv_placement_sign(cfg->placement_key, uid, node, assigned_at, assignment, out, cap,
                             err);
}

static const char *meta(const json_t *pod, const char *key)
{
    return json_string_value(json_object_get(json_object_get(pod, "metadata"), key));
}

static bool trusted(const struct gv_sched_config *cfg, const json_t *pod, struct gv_error *err);

bool gv_sched_placement_trusted(const struct gv_sched_config *cfg, const json_t *pod)
{
    struct gv_error err = {0};
    return trusted(cfg, pod, &err);
}

bool gv_sched_placement_admit(struct gv_sched *s, const json_t *pod)
{
    struct gv_error err = {0};
    if (trusted(&s->cfg, pod, &err))
        return true;
    char why[GV_ERROR_MSG_MAX + 64];
    snprintf(why, sizeof(why), "gpuvisor placement ignored (not counted, no GPUs served): %s",
             err.msg);
    gv_sched_pod_event(s->kube, meta(pod, "namespace"), meta(pod, "name"), meta(pod, "uid"),
                       "Warning", "PlacementRejected", why, "placement-rejected");
    return false;
}

static bool trusted(const struct gv_sched_config *cfg, const json_t *pod, struct gv_error *out)
{
    if (cfg->placement_key == NULL)
        return true; /* the daemon runs keyless only with insecureUnsignedPlacements */
    struct gv_error err = {0};
    if (gv_placement_check_pod(cfg->placement_key, cfg->unsigned_before, pod, &err) == GV_OK)
        return true;
    *out = err;
    atomic_fetch_add(&rejected, 1);
    const char *ns = meta(pod, "namespace"), *name = meta(pod, "name");
    gv_warn_limited("pod %s/%s: placement ignored, not counted: %s", ns ? ns : "-",
                    name ? name : "-", err.msg);
    return false;
}

unsigned long long gv_sched_placements_rejected(void)
{
    return atomic_load(&rejected);
}

void gv_sched_placement_metrics(const struct gv_sched_config *cfg, FILE *out)
{
    fprintf(out,
            "# HELP gpuvisor_placement_signing_enabled 1 when placements are authenticated "
            "(placementKeyFile), 0 when unsigned ones are trusted.\n"
            "# TYPE gpuvisor_placement_signing_enabled gauge\n"
            "gpuvisor_placement_signing_enabled %d\n"
            "# HELP gpuvisor_placements_rejected_total Pod placements ignored because their "
            "signature was missing or wrong (forged or altered).\n"
            "# TYPE gpuvisor_placements_rejected_total counter\n"
            "gpuvisor_placements_rejected_total %llu\n",
            cfg->placement_key != NULL, gv_sched_placements_rejected());
}
