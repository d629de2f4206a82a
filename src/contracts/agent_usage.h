/*
 * What the node agents report on /metrics, read by consumers
 * (`kubectl gpuvisor top`, the scheduler's dashboard): a reader of the
 * Prometheus text exposition (format 0.0.4), and the usage model built from
 * the agent's series.  Names (docs/observability.md): per container and
 * GPU, gpuvisor_container_gpu_memory_used_bytes / _memory_limit_bytes /
 * _compute_share_achieved_ratio / _compute_share_limit_ratio, else HAMi's
 * hami_vgpu_memory_used_bytes / hami_vgpu_memory_limit_bytes /
 * hami_container_device_utilization_ratio; per GPU, dcgm-exporter's
 * DCGM_FI_DEV_GPU_UTIL / DCGM_FI_DEV_FB_USED / DCGM_FI_DEV_FB_FREE, else
 * hami_host_gpu_utilization_ratio / hami_host_gpu_memory_used_bytes.
 *
 * The text comes from another process over the network and is not
 * trusted: a malformed line is counted and skipped (one bad line must not
 * hide a node's other series).  Fuzzed: fuzz_agent_usage.
 */
#ifndef GV_CONTRACTS_AGENT_USAGE_H
#define GV_CONTRACTS_AGENT_USAGE_H

#include <stdbool.h>
#include <stddef.h>

#define GV_EXPFMT_MAX_LABELS 16

struct gv_expfmt_sample {
    const char *name;
    size_t n_labels;
    const char *label_names[GV_EXPFMT_MAX_LABELS];
    const char *label_values[GV_EXPFMT_MAX_LABELS];
    double value;
};

/* Calls fn for every well-formed sample of text (modified in place: names
 * and label values are unescaped and NUL-terminated inside it).  Returns the
 * number of malformed lines skipped. */
typedef void (*gv_expfmt_fn)(void *ud, const struct gv_expfmt_sample *s);
size_t gv_expfmt_parse(char *text, size_t len, gv_expfmt_fn fn, void *ud);
/* The sample's label value, or NULL. */
const char *gv_expfmt_label(const struct gv_expfmt_sample *s, const char *name);

/* One container on one GPU (ns/pod/ctr set), or one GPU (ns/pod/ctr ""). */
struct gv_usage_row {
    char *ns, *pod, *ctr, *uuid, *node, *model;
    double used, limit;       /* bytes */
    double share, target;     /* 0-1; target 1 = whole GPU or unlimited */
    double util;              /* percent */
    double fb_used, fb_total; /* MiB */
    long index;               /* GPU index, -1 unknown */
    bool have_used, have_limit, have_share, have_target, have_util, have_fb;
};

struct gv_usage_rows {
    struct gv_usage_row *v;
    size_t n, cap;
    void *index; /* key -> position in v (a jansson object): thousands of
                  * agents' series join in linear time */
};

struct gv_usage {
    struct gv_usage_rows ctrs, gpus;
};

/* Adds one agent's exposition (text is modified; node names the agent's
 * node for series without a node label).  Returns the malformed lines. */
size_t gv_usage_add_text(struct gv_usage *u, char *text, size_t len, const char *node);
/* The row for (ns, pod, ctr, uuid), added (zeroed, index -1) when absent;
 * NULL on OOM.  uuids match on their first 40 characters (HAMi cuts them). */
struct gv_usage_row *gv_usage_row_get(struct gv_usage_rows *r, const char *ns, const char *pod,
                                      const char *ctr, const char *uuid);
/* An agent pod's metrics port: name a number ("9401") or a container port
 * name (NULL: "metrics"), looked up in the Pod object.  -1 when absent. */
long gv_usage_agent_port(const void *pod_json, const char *name);

/* The row, or NULL when absent. */
struct gv_usage_row *gv_usage_row_find(struct gv_usage_rows *r, const char *ns, const char *pod,
                                       const char *ctr, const char *uuid);
/* Rebuilds the index after the caller reordered v (qsort). */
int gv_usage_rows_reindex(struct gv_usage_rows *r);
/* Sets the row's node unless it has one. */
void gv_usage_row_set_node(struct gv_usage_row *x, const char *node);
void gv_usage_rows_free(struct gv_usage_rows *r);
void gv_usage_free(struct gv_usage *u);

#endif
