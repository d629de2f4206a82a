/*
 * gRPC over HTTP/2 on unix sockets, built on nghttp2.
 *
 * Just what a kubelet device plugin needs: a server for request-unary
 * methods (unary replies and server streams) driven by gv_loop, and a
 * blocking unary client for Registration.Register.  Messages are opaque
 * bytes here; protobuf encoding stays with the callers.  Why nghttp2 and not
 * the gRPC C core: docs/node-agent.md ("Transport").
 *
 * Threading: everything except gv_grpc_server_complete() runs on the loop
 * thread.  A gv_grpc_call is valid from its handler until its close callback
 * (or, when none is set, until the handler returns and the call is
 * finished); other threads refer to calls by gv_grpc_call_id().
 */
#ifndef GV_NODE_GRPC_H
#define GV_NODE_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/gv_error.h"
#include "node/loop/gv_loop.h"

/* Canonical gRPC status codes (grpc/doc/statuscodes.md). */
#define GV_GRPC_STATUS_LIST(X)                                                                     \
    X(OK, 0)                                                                                       \
    X(CANCELLED, 1)                                                                                \
    X(UNKNOWN, 2)                                                                                  \
    X(INVALID_ARGUMENT, 3)                                                                         \
    X(DEADLINE_EXCEEDED, 4)                                                                        \
    X(NOT_FOUND, 5)                                                                                \
    X(ALREADY_EXISTS, 6)                                                                           \
    X(PERMISSION_DENIED, 7)                                                                        \
    X(RESOURCE_EXHAUSTED, 8)                                                                       \
    X(FAILED_PRECONDITION, 9)                                                                      \
    X(ABORTED, 10)                                                                                 \
    X(OUT_OF_RANGE, 11)                                                                            \
    X(UNIMPLEMENTED, 12)                                                                           \
    X(INTERNAL, 13)                                                                                \
    X(UNAVAILABLE, 14)                                                                             \
    X(DATA_LOSS, 15)                                                                               \
    X(UNAUTHENTICATED, 16)

enum gv_grpc_status {
#define GV_X_GRPC(name, num) GV_GRPC_##name = num,
    GV_GRPC_STATUS_LIST(GV_X_GRPC)
#undef GV_X_GRPC
};

const char *gv_grpc_status_name(int status);

/* The kubelet's (and grpc-go's) default receive limit. */
#define GV_GRPC_DEFAULT_MAX_MSG (4u * 1024 * 1024)

/* ---- framing: 1 byte compressed flag, 4 bytes big-endian length, message */

struct gv_grpc_framer {
    size_t max_len;
    uint8_t hdr[5];
    size_t hdr_have;
    uint8_t *msg;
    size_t msg_len, msg_have;
    bool in_msg;
};

/* Called once per complete message; a non-OK return stops feeding. */
typedef gv_status (*gv_grpc_msg_cb)(const uint8_t *msg, size_t len, void *ud,
                                    struct gv_error *err);

void gv_grpc_framer_init(struct gv_grpc_framer *f, size_t max_len);
void gv_grpc_framer_clear(struct gv_grpc_framer *f);
/*
 * Feeds bytes from DATA frames (any split).  Fails with GV_ERANGE when a
 * message announces more than max_len bytes, GV_EUNSUPPORTED when it is
 * compressed (we never negotiate compression).
 */
gv_status gv_grpc_framer_feed(struct gv_grpc_framer *f, const uint8_t *data, size_t len,
                              gv_grpc_msg_cb cb, void *ud, struct gv_error *err);
/* True when no message is half-received. */
bool gv_grpc_framer_idle(const struct gv_grpc_framer *f);

/* Parses a grpc-timeout header value ("100m", "5S", at most 8 digits). */
gv_status gv_grpc_parse_timeout(const char *value, size_t len, int64_t *ms, struct gv_error *err);

/* ---- server */

struct gv_grpc_server;
struct gv_grpc_call;

/* req is the single request message; the handler must eventually finish the call. */
typedef void (*gv_grpc_handler)(struct gv_grpc_call *call, const uint8_t *req, size_t len,
                                void *ud);
typedef void (*gv_grpc_close_cb)(struct gv_grpc_call *call, void *ud);

struct gv_grpc_method {
    const char *path; /* "/v1beta1.DevicePlugin/Allocate" */
    gv_grpc_handler handler;
};

struct gv_grpc_server_config {
    const char *socket_path;
    const struct gv_grpc_method *methods;
    size_t n_methods;
    void *ud;            /* passed to handlers */
    size_t max_recv_msg; /* 0: GV_GRPC_DEFAULT_MAX_MSG */
    size_t max_send_msg; /* 0: GV_GRPC_DEFAULT_MAX_MSG */
    /* Abuse limits (docs/isolation.md): open connections (0: 64; past it
     * the longest-idle connection without calls is closed for the new one,
     * or the new one is refused when every connection has a call open), and
     * how long a connection without calls may stay silent (0: 60000 ms). */
    size_t max_conns;
    int64_t idle_ms;
};

gv_status gv_grpc_server_new(struct gv_loop *loop, const struct gv_grpc_server_config *cfg,
                             struct gv_grpc_server **out, struct gv_error *err);
/* Closes every connection at once (no GOAWAY; use shutdown first). */
void gv_grpc_server_free(struct gv_grpc_server *srv);

/*
 * (Re)creates the listening socket: removes whatever is at the path (a stale
 * socket of a previous run, or nothing), binds and listens.  Connections
 * accepted on an earlier socket are kept.
 */
gv_status gv_grpc_server_listen(struct gv_grpc_server *srv, struct gv_error *err);
/* Serves an already connected stream socket (tests, fuzzing, socket activation). */
gv_status gv_grpc_server_adopt(struct gv_grpc_server *srv, int fd, struct gv_error *err);
/* True while the path still names the socket we bound (not deleted/replaced). */
bool gv_grpc_server_socket_present(const struct gv_grpc_server *srv);

/*
 * Graceful stop: no new connections, GOAWAY to every peer, in-flight calls
 * may finish; after grace_ms the still-open calls end with UNAVAILABLE.
 * gv_grpc_server_drained() turns true once every connection is closed.
 */
void gv_grpc_server_shutdown(struct gv_grpc_server *srv, int64_t grace_ms);
bool gv_grpc_server_drained(const struct gv_grpc_server *srv);
size_t gv_grpc_server_connections(const struct gv_grpc_server *srv);

uint64_t gv_grpc_call_id(const struct gv_grpc_call *call);
const char *gv_grpc_call_path(const struct gv_grpc_call *call);
/* Queues one response message; fails (GV_ERANGE) above max_send_msg. */
gv_status gv_grpc_call_send(struct gv_grpc_call *call, const uint8_t *msg, size_t len,
                            struct gv_error *err);
/* Ends the call with a status (trailers); idempotent. */
void gv_grpc_call_finish(struct gv_grpc_call *call, int status, const char *message);
/* Called once when the call goes away for any reason (finish, cancel, deadline, disconnect). */
void gv_grpc_call_on_close(struct gv_grpc_call *call, gv_grpc_close_cb cb, void *ud);

/*
 * Any thread: sends msg (may be NULL) then finishes call `id` with status.
 * Dropped silently when the call is gone (cancelled, deadline passed).
 * Takes ownership of msg (free()d).
 */
void gv_grpc_server_complete(struct gv_grpc_server *srv, uint64_t id, int status,
                             const char *message, uint8_t *msg, size_t len);

/* ---- blocking unary client */

struct gv_grpc_reply {
    int status; /* gRPC status; -1 when none was received */
    char *message;
    uint8_t *body; /* response message, NULL when none */
    size_t len;
};

/* cancel_fd (-1: none) becoming readable aborts the call with GV_EUNAVAILABLE. */
gv_status gv_grpc_client_unary(const char *socket_path, const char *path, const uint8_t *req,
                               size_t len, int timeout_ms, int cancel_fd,
                               struct gv_grpc_reply *reply, struct gv_error *err);
void gv_grpc_reply_clear(struct gv_grpc_reply *reply);

#endif
