/*
 * Fuzz target: responses to the node agent's gRPC client
 * (src/node/kubelet/grpc_client.c, used for Registration.Register with the
 * kubelet).  The input is what the peer on the socket answers: HTTP/2
 * frames (SETTINGS, HEADERS with HPACK, DATA with gRPC framing, trailers),
 * served by a peer thread on a unix socket after it reads the request.
 * Property: no crash or leak, a bounded wait (the call's timeout), and a
 * reply that is either an error or a complete one (status set, message
 * NUL-terminated, body within the 4 MiB cap).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_log.h"
#include "node/kubelet/gv_grpc.h"
#include "fuzz_peer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet++)
        gv_log_set_level(GV_LOG_ERROR);
    if (size > 60000)
        return 0; /* one write into the socket buffer */
    struct fuzz_peer *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return 0;
    p->answers[0] = (const char *)data;
    p->lens[0] = size;
    p->n = 1;
    if (fuzz_peer_start(p) != 0)
        abort();
    static const uint8_t req[] = {0x0a, 0x02, 'v', '1'};
    struct gv_grpc_reply reply = {0};
    struct gv_error err;
    gv_status st = gv_grpc_client_unary(p->path, "/v1beta1.Registration/Register", req,
                                        sizeof(req), 2000, -1, &reply, &err);
    fuzz_peer_stop(p);
    if (st == GV_OK) {
        if (reply.body != NULL && reply.len > GV_GRPC_DEFAULT_MAX_MSG)
            abort();
        if (reply.message != NULL && strlen(reply.message) > size)
            abort(); /* decoding never makes a message longer than what was sent */
    }
    gv_grpc_reply_clear(&reply);
    free(p);
    return 0;
}
