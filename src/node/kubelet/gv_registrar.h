/*
 * Keeps the plugin registered with the kubelet.
 *
 * Watches the device-plugin directory with inotify (on the loop thread).
 * When the kubelet restarts it deletes our socket and recreates
 * kubelet.sock: we then recreate the socket at once and register again from
 * a dedicated thread.  Register runs off the loop because the kubelet calls
 * back into the plugin (GetDevicePluginOptions) before it answers.
 */
#ifndef GV_NODE_REGISTRAR_H
#define GV_NODE_REGISTRAR_H

#include <stdbool.h>
#include <stdint.h>

#include "common/gv_error.h"
#include "node/loop/gv_loop.h"
#include "node/kubelet/gv_plugin.h"

struct gv_registrar;

struct gv_registrar_config {
    const char *plugin_dir;      /* /var/lib/kubelet/device-plugins */
    const char *kubelet_socket;  /* file name in plugin_dir: kubelet.sock */
    const char *endpoint;        /* our socket's file name in plugin_dir */
    const char *resource_name;   /* nvidia.com/gpu */
};

gv_status gv_registrar_new(struct gv_loop *loop, struct gv_plugin *plugin,
                           const struct gv_registrar_config *cfg, struct gv_registrar **out,
                           struct gv_error *err);
void gv_registrar_free(struct gv_registrar *r);

/* Asks for a (re-)registration now (any thread); aborts one in flight. */
void gv_registrar_kick(struct gv_registrar *r);
/* Number of successful registrations so far (any thread). */
uint64_t gv_registrar_count(struct gv_registrar *r);

/* Sends one RegisterRequest; exposed for tests. */
gv_status gv_registrar_register_once(const char *kubelet_socket_path, const char *endpoint,
                                     const char *resource_name, int timeout_ms, int cancel_fd,
                                     struct gv_error *err);

#endif
