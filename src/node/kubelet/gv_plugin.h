/*
 * The DevicePlugin gRPC service (kubelet device-plugin API v1beta1).
 *
 * Owns the gRPC server on the plugin socket, the ListAndWatch streams and a
 * small pool of workers for Allocate and GetPreferredAllocation.  What the devices are and what Allocate
 * answers come from outside (gv_plugin_set_devices, the allocate callback),
 * so this file only speaks the protocol.
 */
#ifndef GV_NODE_PLUGIN_H
#define GV_NODE_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/gv_error.h"
#include "node/loop/gv_loop.h"

struct gv_plugin;
struct V1beta1__ContainerAllocateResponse;

/* One advertised device (a slice of a GPU). */
struct gv_plugin_device {
    char id[64]; /* the kubelet limits device IDs; ours are at most 63 chars */
    bool healthy;
    int numa; /* -1: unknown */
    int gpu;  /* index of the physical GPU the slice belongs to (for preferences) */
};

/*
 * Fills resp for one container request (device IDs as the kubelet chose
 * them).  Runs on a worker thread; may block on the API server.  Returns a
 * gRPC status; on failure writes a message for the user into msg.
 */
typedef int (*gv_plugin_allocate_fn)(void *ud, const char *const *device_ids, size_t n_ids,
                                     struct V1beta1__ContainerAllocateResponse *resp, char *msg,
                                     size_t msg_size);

/*
 * GetPreferredAllocation for one container request (a worker thread, like
 * Allocate; may wait for the pod cache): writes up to size device IDs (pointers into available/must) into
 * out and returns true, or false to leave the choice to the generic
 * preference (distinct GPUs, most free slices).
 */
typedef bool (*gv_plugin_prefer_fn)(void *ud, const char *const *available, size_t n_available,
                                    const char *const *must, size_t n_must, size_t size,
                                    const char **out, size_t *n_out);

struct gv_plugin_config {
    const char *socket_path;
    size_t max_msg; /* 0: 4 MiB like the kubelet */
    unsigned workers; /* Allocate threads; 0: 4 */
    gv_plugin_allocate_fn allocate;
    void *allocate_ud;
    gv_plugin_prefer_fn prefer; /* NULL: generic preference only */
    void *prefer_ud;
};

gv_status gv_plugin_new(struct gv_loop *loop, const struct gv_plugin_config *cfg,
                        struct gv_plugin **out, struct gv_error *err);
void gv_plugin_free(struct gv_plugin *p);

/* (Re)creates the plugin socket (removing a stale one). */
gv_status gv_plugin_listen(struct gv_plugin *p, struct gv_error *err);
bool gv_plugin_socket_present(const struct gv_plugin *p);

/*
 * Replaces the device list (loop thread).  When it differs from the current
 * one, every ListAndWatch stream gets the new list.  Fails (leaving the old
 * list) when the encoded list would exceed the message cap.
 */
gv_status gv_plugin_set_devices(struct gv_plugin *p, const struct gv_plugin_device *devs, size_t n,
                                struct gv_error *err);
/* Size in bytes of the current ListAndWatch message. */
size_t gv_plugin_list_size(const struct gv_plugin *p);
size_t gv_plugin_watchers(const struct gv_plugin *p);

/* Ends the ListAndWatch streams and starts a graceful server shutdown. */
void gv_plugin_shutdown(struct gv_plugin *p, int64_t grace_ms);
bool gv_plugin_drained(const struct gv_plugin *p);
/* True once gv_plugin_shutdown() ran: the socket must not be recreated. */
bool gv_plugin_stopping(const struct gv_plugin *p);

/* Encodes a ListAndWatchResponse (exposed for the size test). */
gv_status gv_plugin_encode_list(const struct gv_plugin_device *devs, size_t n, uint8_t **out,
                                size_t *len, struct gv_error *err);

#endif
