/*
 * The interposer's configuration: the HAMi-compatible environment contract
 * and the limits file that overrides it (docs/interposer.md,
 * docs/isolation.md).  Parsing is pure (no logging, no globals) so it can be
 * fuzzed; gv_ipcfg_load applies the precedence rules.
 */
#ifndef GV_INTERPOSER_CONFIG_H
#define GV_INTERPOSER_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/gv_error.h"

#define GV_IPCFG_MAX_DEVICES 16
#define GV_IPCFG_MAX_PRIORITY 15
#define GV_IPCFG_DEFAULT_LIMITS_FILE "/etc/gpuvisor/limits.env"

enum gv_ipcfg_policy { GV_POLICY_DEFAULT = 0, GV_POLICY_FORCE = 1, GV_POLICY_DISABLE = 2 };

/* A KEY / KEY_<i> pair: the per-index value wins over the plain one. */
struct gv_ipcfg_indexed {
    uint64_t all;
    uint64_t dev[GV_IPCFG_MAX_DEVICES];
    bool has[GV_IPCFG_MAX_DEVICES];
};

struct gv_ipcfg {
    struct gv_ipcfg_indexed mem;       /* CUDA_DEVICE_MEMORY_LIMIT: bytes, 0 = unlimited */
    struct gv_ipcfg_indexed mem_pct;   /* GPUVISOR_DEVICE_MEMORY_PERCENT: of the card */
    struct gv_ipcfg_indexed mem_share; /* GPUVISOR_DEVICE_MEMORY_SHARE: device-resident bytes
                                          when oversubscribed (0 = the card) */
    struct gv_ipcfg_indexed sm;        /* CUDA_DEVICE_SM_LIMIT: percent, 0 = unlimited */
    struct gv_ipcfg_indexed ctx;       /* GPUVISOR_CONTEXT_RESERVE: bytes per context
                                          (0 = measure through NVML) */
    char shared_cache[PATH_MAX];
    int priority;
    bool has_priority; /* CUDA_TASK_PRIORITY given: take part in priority */
    /* GPUVISOR_NODE_DIR: the node-wide priority directory ("" = default). */
    char node_dir[PATH_MAX];
    enum gv_ipcfg_policy policy;
    bool oversubscribe;
    /* Where the values came from: the limits file's path or "environment". */
    char source[PATH_MAX];
};

void gv_ipcfg_init(struct gv_ipcfg *c);

/*
 * Applies one KEY=VALUE.  GV_ENOTFOUND for a key outside the contract
 * (callers ignore those); GV_EPARSE/GV_ERANGE with a message naming key and
 * value for a bad value, leaving c unchanged.
 */
gv_status gv_ipcfg_set(struct gv_ipcfg *c, const char *key, const char *value,
                       struct gv_error *err);

/*
 * Parses limits-file text: KEY=VALUE lines, '#' comments, blank lines, an
 * optional "export " prefix and optional matching quotes around the value.
 * Unknown keys are ignored.  On error nothing is applied and err names the
 * origin and line.
 */
gv_status gv_ipcfg_parse_text(struct gv_ipcfg *c, const char *text, size_t len,
                              const char *origin, struct gv_error *err);

/* Applies the contract keys found in envp (NULL-terminated "K=V" strings). */
gv_status gv_ipcfg_parse_env(struct gv_ipcfg *c, char *const *envp, struct gv_error *err);

/*
 * The process's configuration: the limits file (GV_IPCFG_DEFAULT_LIMITS_FILE,
 * or GPUVISOR_LIMITS_FILE only while the default path does not exist) when
 * it exists, and then the environment is not consulted at all; otherwise
 * the environment.
 */
gv_status gv_ipcfg_load(struct gv_ipcfg *c, char *const *envp, struct gv_error *err);

/*
 * Effective limits for the device the application sees as index dev;
 * physical is the card's size, used by percentage limits.
 */
uint64_t gv_ipcfg_mem_limit(const struct gv_ipcfg *c, int dev, uint64_t physical);
uint32_t gv_ipcfg_sm_limit(const struct gv_ipcfg *c, int dev);
/* Bytes charged per context (0 = measure what the driver takes). */
uint64_t gv_ipcfg_ctx_reserve(const struct gv_ipcfg *c, int dev);
/* Device-resident bytes allowed when oversubscribed (0 = the whole card). */
uint64_t gv_ipcfg_mem_share(const struct gv_ipcfg *c, int dev);
/* Whether any memory or SM limit is configured. */
bool gv_ipcfg_has_limits(const struct gv_ipcfg *c);

/* "4096", "1024m", "4g", "4Gi", "512KiB" -> bytes (k/m/g/t are powers of 1024). */
gv_status gv_ipcfg_parse_bytes(const char *text, uint64_t *out);

#endif
