/*
 * Sharing modes: the axis along which the node agent grows
 * (docs/node-agent.md, "Sharing modes").
 *
 * A mode decides, for the GPUs the configuration gives it, what the agent
 * serves (discover), which devices the kubelet sees under which resource
 * names (advertise), what a container gets on top of the common Allocate
 * (allocate) and whether a served unit is usable (health).  Everything
 * else (pod matching, preferred allocation, the Allocate state machine,
 * answer records, progress annotations, the interposer's files) is common
 * and stays in allocator.c (with answer.c, the answer's fields, and
 * ctr_state.c, the container's files and Allocate records).
 *
 * Adding a mode: its name in GV_INVENTORY_MODE_LIST (contracts/inventory.h,
 * the one list the scheduler and the agent share) and one file
 * src/node/mode_<name>.c defining `const struct gv_mode gv_mode_<ID>`.
 * The table below is generated from that list, so there is no second list.
 */
#ifndef GV_NODE_MODE_H
#define GV_NODE_MODE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "alloc/gv_alloc.h"
#include "common/gv_error.h"
#include "contracts/inventory.h"
#include "node/allocate/gv_allocator.h"
#include "node/config/gv_config.h"
#include "node/discovery/gv_gpus.h"

/* Where modes keep files, as the agent and as the host see them (mount sources). */
struct gv_mode_env {
    const char *state_dir;      /* agent's view of --state-dir */
    const char *host_state_dir; /* the same directory as the host sees it */
    const char *install_dir;    /* host dir of lib/libgpuvisor.so */
    /*
     * Called (from any thread) when something a mode owns changed health
     * (an MPS daemon died or came back): the agent then runs discover,
     * health and advertise again on its loop.  NULL in tests.
     */
    void (*changed)(void *ud);
    void *changed_ud;
    /* MPS: the control program (NULL: /usr/bin/nvidia-cuda-mps-control; tests: a fake) */
    const char *mps_control;
    long mps_probe_ms; /* how often each MPS daemon is probed (0: 10000) */
    const char *sys_root; /* --sys-root: sysfs and /dev for modes reading them ("/") */
};

/*
 * The devices of one rebuild, grouped by resource name: the agent runs one
 * device plugin (socket + kubelet registration) per resource name.
 */
struct gv_mode_adv;
struct gv_mode_alloc;
/*
 * Adds device id under resource (healthy, NUMA and GPU index from g).
 * The id is "<unit key>" or "<unit key>::<k>" (unit key = the
 * gv_allocator_gpu's gpu.uuid, no ':' in it): Allocate maps IDs back to
 * units by that key.  False (logged) when the id is too long or memory ran
 * out.
 */
bool gv_mode_adv_add(struct gv_mode_adv *adv, const char *resource, const char *id,
                     const struct gv_gpu *g);

/*
 * Helpers for modes: `replicas` devices "<key>::<k>" of unit u under
 * resource (bare "<key>" when bare, replicas then 1).
 */
void gv_mode_advertise_replicas(struct gv_mode_adv *adv, const char *resource,
                                const struct gv_allocator_gpu *u, unsigned replicas, bool bare);
/* The resource a unit's devices go under: its settings' (NVIDIA's sharing block) or resourceName. */
const char *gv_mode_resource(const struct gv_node_config *cfg, const struct gv_allocator_gpu *u);
/*
 * NVIDIA's failRequestsGreaterThanOne: a gRPC error (msg set) when the unit
 * refuses requests of more than one replica and the container asked more.
 */
int gv_mode_check_replicas(const struct gv_mode_alloc *a, char *msg, size_t cap);
/* discover for modes whose unit is the whole GPU: one unit, the settings as configured. */
size_t gv_mode_discover_gpu(const struct gv_gpu *g, const struct gv_node_gpu_settings *s,
                            struct gv_allocator_gpu *out, size_t cap, char *why, size_t why_cap);
/*
 * The MIG devices of a MIG-enabled GPU as units of `mode` with `split`
 * devices each: key = MIG UUID, memory = the instance's, health = the
 * parent's and the instance's own (an instance-scoped Xid).  0 + why when
 * MIG is off or no MIG device exists.
 */
size_t gv_mode_discover_migs(const struct gv_gpu *g, const struct gv_node_gpu_settings *s,
                             enum gv_inventory_mode mode, unsigned split,
                             struct gv_allocator_gpu *out, size_t cap, char *why, size_t why_cap);
/* The same as a `discover` hook (state unused). */
size_t gv_mode_discover_whole(void *state, const struct gv_gpu *g,
                              const struct gv_node_gpu_settings *s, struct gv_allocator_gpu *out,
                              size_t cap, char *why, size_t why_cap);
/* An `advertise` hook: `split` devices "<key>::<k>" under gv_mode_resource (state unused). */
void gv_mode_advertise_split(void *state, const struct gv_node_config *cfg,
                             const struct gv_allocator_gpu *u, struct gv_mode_adv *adv);

/*
 * The container's answer being built.  Mode code adds to it; the common
 * part (allocator.c; answer.c) adds the visible-devices list and, when a mode asked
 * for it, the interposer's files, then records and replies.
 */
struct gv_mode_answer;
/* A container env variable (not seen by the interposer's limits file). */
void gv_mode_answer_env(struct gv_mode_answer *b, const char *key, const char *value);
/* A limit for the interposer: container env and a line of limits.env. */
void gv_mode_answer_limit(struct gv_mode_answer *b, const char *key, const char *value);
void gv_mode_answer_mount(struct gv_mode_answer *b, const char *host, const char *ctr, bool ro);
/* A device node (passthrough, modes without the NVIDIA runtime); perms: "rw", "rwm". */
void gv_mode_answer_device(struct gv_mode_answer *b, const char *host, const char *ctr,
                           const char *perms);
/* A fully qualified CDI device name ("vendor.com/class=name"). */
void gv_mode_answer_cdi(struct gv_mode_answer *b, const char *name);
/*
 * A GPU the NVIDIA container runtime must expose: collected and emitted
 * once as NVIDIA_VISIBLE_DEVICES, or as CDI names <cdiKind>=<uuid> when the
 * config says "cdi" (so modes mixed in one container share one list).
 */
void gv_mode_answer_visible(struct gv_mode_answer *b, const char *uuid);
/*
 * Inject the interposer: libgpuvisor.so, ld.so.preload (unless the pod
 * opted out), the runtime and node directories, the limits file with every
 * gv_mode_answer_limit line, the container's priority and the core
 * policy.  Only with a pod (gv_mode_alloc.pod != NULL): a pod gpuvisor did
 * not schedule has no per-container directory.
 */
void gv_mode_answer_interposer(struct gv_mode_answer *b);

/* One container's devices of one mode. */
struct gv_mode_alloc {
    const struct gv_mode_env *env;
    /*
     * The pod and the container's assignment; both NULL when the pod was not
     * scheduled by gpuvisor (only for modes without GV_MODE_NEEDS_ASSIGNMENT):
     * answer from the kubelet's IDs, as NVIDIA's plugin does.
     */
    json_t *pod;
    const struct gv_alloc_container_assign *c;
    const char *uid, *ctr; /* "" without a pod */
    size_t n_request; /* devices the container asked in all (kubelet IDs, or assigned GPUs) */
    size_t n_units;   /* distinct units of the container, all modes together */
    size_t n;         /* this mode's units below */
    /* The container's units of this mode (copies taken under the allocator's lock). */
    struct gv_allocator_gpu units[GV_ALLOC_MAX_DEVICES];
    /* Their device index in the container (CUDA ordinal; c->devices[idx[i]] with a pod). */
    unsigned idx[GV_ALLOC_MAX_DEVICES];
    /* How many kubelet device IDs named each unit (replicas asked, without a pod). */
    unsigned ids[GV_ALLOC_MAX_DEVICES];
    struct gv_mode_answer *answer;
};

enum {
    /* Limits come from a gpuvisor assignment: pods without one are refused. */
    GV_MODE_NEEDS_ASSIGNMENT = 1u << 0,
    /*
     * Devices for VMs (passthrough): never matched to a pod gpuvisor
     * scheduled; Allocate answers from the kubelet's IDs alone.
     */
    GV_MODE_NO_ASSIGNMENT = 1u << 1,
};

struct gv_mode {
    enum gv_inventory_mode id;
    unsigned flags;
    /* Optional per-agent state (NULL open: none). */
    gv_status (*open)(const struct gv_mode_env *env, void **state, struct gv_error *err);
    void (*close)(void *state);
    /*
     * The units this mode serves of physical GPU g with settings s (most
     * modes: one, the GPU itself, settings settled, e.g. exclusive forces
     * split 1; MIG: its instances).  Returns how many were written to out
     * (at most cap); 0 with why set: not served (logged).
     */
    size_t (*discover)(void *state, const struct gv_gpu *g, const struct gv_node_gpu_settings *s,
                       struct gv_allocator_gpu *out, size_t cap, char *why, size_t why_cap);
    /*
     * Optional: after every GPU was discovered, all of this mode's units
     * (start or stop per-GPU helpers such as MPS daemons).  Loop thread.
     */
    void (*sync)(void *state, const struct gv_allocator_gpu *units, size_t n);
    /* Optional: false with why when a unit cannot serve now (its helper is down). */
    bool (*health)(void *state, const struct gv_allocator_gpu *u, char *why, size_t why_cap);
    /* The unit's devices, under one or more resource names. */
    void (*advertise)(void *state, const struct gv_node_config *cfg,
                      const struct gv_allocator_gpu *u, struct gv_mode_adv *adv);
    /* Adds this mode's part of a container's answer; a gRPC status, msg on failure. */
    int (*allocate)(void *state, const struct gv_mode_alloc *a, char *msg, size_t msg_cap);
    /*
     * Optional: units found without NVML (sysfs: GPUs on vfio-pci, mdevs),
     * asked once per rebuild before the GPUs are discovered.  Returns how
     * many were written to out (at most cap).  Loop thread.
     */
    size_t (*discover_host)(void *state, const struct gv_node_config *cfg,
                            struct gv_allocator_gpu *out, size_t cap);
    /*
     * Optional, GV_MODE_NO_ASSIGNMENT modes: GetPreferredAllocation when every
     * available ID is this mode's (no pod to promise to).  Writes at most
     * size pointers into avail/must to out; returns how many (size: taken).
     * Worker thread.
     */
    size_t (*prefer)(void *state, const char *const *avail, size_t n_avail,
                     const char *const *must, size_t n_must, size_t size, const char **out);
};

/* Most units all discover_host hooks together may add per rebuild. */
#define GV_MODE_HOST_UNITS 256

/*
 * MIG devices pods ask as GPUs ("migMode": "vgpu", and migStrategy single
 * under nvidia.com/gpu): the parent GPU's inventory entry is replaced by
 * one entry per MIG device (uuid = MIG UUID, memory = the instance's, mode
 * vgpu or mig, mig false, the parent's index and PCI address), so the
 * scheduler's GPU placement puts slices (vgpu) or whole instances (mig,
 * exclusive) on MIG devices unchanged.  After gv_modes_build, with its
 * units (src/node/modes/mig_inventory.c).
 */
struct gv_inventory;
void gv_mode_mig_gpu_inventory(struct gv_inventory *inv, const struct gv_allocator_gpu *units,
                               size_t n);

/*
 * MPS mode: the CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of a client granted milli
 * (1..1000) of a GPU with sms SMs (0: unknown).  The driver turns a
 * percentage q into floor(q x TPCs / 100) TPCs (2 SMs each); this picks the
 * smallest q that grants the client's share in whole TPCs, rounded down,
 * except for a client holding more than half of the GPU, rounded up.  At
 * most one client of a GPU holds more than half, so the clients' TPCs never
 * add up to more than the GPU has, and two clients splitting a GPU leave no
 * TPC idle (docs/compute-share.md, "MPS", has the measurements).  Unknown
 * SM count: the share itself, rounded up to a whole percent.
 */
unsigned gv_mps_thread_percentage(unsigned milli, unsigned sms);

/* The table: one `gv_mode_<ID>` per entry of GV_INVENTORY_MODE_LIST. */
#define GV_X_MODE_DECL(id, name, whole) extern const struct gv_mode gv_mode_##id;
GV_INVENTORY_MODE_LIST(GV_X_MODE_DECL)
#undef GV_X_MODE_DECL

/* The mode's operations; NULL for an unknown id. */
const struct gv_mode *gv_mode_get(enum gv_inventory_mode id);

/*
 * The modes' states for one agent.  gv_modes_new opens every mode;
 * gv_modes_free closes them (stopping their helpers).
 */
struct gv_modes;
gv_status gv_modes_new(const struct gv_mode_env *env, struct gv_modes **out,
                       struct gv_error *err);
void gv_modes_free(struct gv_modes *m);
void *gv_modes_state(const struct gv_modes *m, enum gv_inventory_mode id);
const struct gv_mode_env *gv_modes_env(const struct gv_modes *m);

/*
 * One rebuild: discovers every GPU through its mode, syncs the modes,
 * applies health and collects the advertised devices per resource name.
 * Loop thread.  Caller frees with gv_mode_adv_free.
 */
struct gv_mode_adv *gv_mode_adv_new(void);
void gv_mode_adv_free(struct gv_mode_adv *adv);
gv_status gv_modes_build(struct gv_modes *m, const struct gv_node_config *cfg,
                         const struct gv_gpu *gpus, size_t n, struct gv_allocator_gpu **units,
                         size_t *n_units, struct gv_mode_adv *adv, struct gv_error *err);
/* The collected resources: names and their devices. */
size_t gv_mode_adv_resources(const struct gv_mode_adv *adv);
const char *gv_mode_adv_resource(const struct gv_mode_adv *adv, size_t i);
struct gv_plugin_device;
const struct gv_plugin_device *gv_mode_adv_devices(const struct gv_mode_adv *adv, size_t i,
                                                   size_t *n);

/*
 * MIG devices advertised bare (one device each) as "wholeDevices" entries
 * of kind mig, appended to inv (src/node/modes/mig_inventory.c): resource and
 * health as advertised in adv, parent GPU from gpus.  None under
 * migStrategy single (GPU entries instead, above).
 */
void gv_mode_mig_inventory(const struct gv_mode_adv *adv, const struct gv_gpu *gpus, size_t n,
                           struct gv_inventory *inv);

#endif
