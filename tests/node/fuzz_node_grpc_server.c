/*
 * Fuzz target: untrusted bytes from a device-plugin socket peer.
 *
 * The input is what a client writes on the connection (HTTP/2 preface,
 * frames, HPACK headers, gRPC-framed messages).  It goes through the real
 * server path: nghttp2 session, our header checks, the gRPC framer,
 * dispatch and the response path, over a socketpair driven by the loop.
 * The same bytes also feed the framer alone in uneven chunks, and the first
 * bytes the grpc-timeout parser.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/gv_log.h"
#include "node/kubelet/gv_grpc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void h_unary(struct gv_grpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    (void)ud;
    gv_grpc_call_send(call, req, len, NULL);
    gv_grpc_call_finish(call, GV_GRPC_OK, NULL);
}

static void h_stream(struct gv_grpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    (void)ud;
    gv_grpc_call_send(call, req, len, NULL); /* stays open, like ListAndWatch */
}

static const struct gv_grpc_method methods[] = {
    {"/v1beta1.DevicePlugin/GetDevicePluginOptions", h_unary},
    {"/v1beta1.DevicePlugin/Allocate", h_unary},
    {"/v1beta1.DevicePlugin/ListAndWatch", h_stream},
};

static gv_status count_msg(const uint8_t *msg, size_t len, void *ud, struct gv_error *err)
{
    (void)msg;
    (void)err;
    *(size_t *)ud += len;
    return GV_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet++)
        gv_log_set_level(GV_LOG_ERROR);
    if (size > 60000)
        return 0; /* must fit in the socket buffer in one write */

    struct gv_grpc_framer f;
    gv_grpc_framer_init(&f, 1024);
    size_t total = 0;
    for (size_t off = 0, step = 1; off < size; off += step, step = step * 2 + 1) {
        size_t n = size - off < step ? size - off : step;
        if (gv_grpc_framer_feed(&f, data + off, n, count_msg, &total, NULL) != GV_OK)
            break;
    }
    gv_grpc_framer_clear(&f);
    int64_t ms;
    gv_grpc_parse_timeout((const char *)data, size < 12 ? size : 12, &ms, NULL);

    struct gv_loop *loop = NULL;
    struct gv_grpc_server *srv = NULL;
    struct gv_grpc_server_config cfg = {.socket_path = "/nonexistent/fuzz.sock",
                                        .methods = methods,
                                        .n_methods = sizeof(methods) / sizeof(methods[0]),
                                        .max_recv_msg = 4096};
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
        return 0;
    if (gv_loop_new(&loop, NULL) != GV_OK || gv_grpc_server_new(loop, &cfg, &srv, NULL) != GV_OK ||
        gv_grpc_server_adopt(srv, sv[0], NULL) != GV_OK) {
        close(sv[0]);
        goto out;
    }
    if (write(sv[1], data, size) < 0)
        goto out;
    shutdown(sv[1], SHUT_WR);
    char sink[65536];
    for (int i = 0; i < 8 && gv_grpc_server_connections(srv) > 0; i++) {
        gv_loop_run_once(loop, 0, NULL);
        while (read(sv[1], sink, sizeof(sink)) > 0)
            ;
    }
out:
    gv_grpc_server_free(srv);
    gv_loop_free(loop);
    close(sv[1]);
    return 0;
}
