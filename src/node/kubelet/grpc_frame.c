/* gRPC message framing and header value parsing: see gv_grpc.h. */
#include <stdlib.h>
#include <string.h>

#include "node/kubelet/gv_grpc.h"

const char *gv_grpc_status_name(int status)
{
    switch (status) {
#define GV_X_GRPC(name, num)                                                                       \
    case num:                                                                                      \
        return #name;
        GV_GRPC_STATUS_LIST(GV_X_GRPC)
#undef GV_X_GRPC
    }
    return "UNKNOWN_STATUS";
}

void gv_grpc_framer_init(struct gv_grpc_framer *f, size_t max_len)
{
    memset(f, 0, sizeof(*f));
    f->max_len = max_len;
}

void gv_grpc_framer_clear(struct gv_grpc_framer *f)
{
    free(f->msg);
    gv_grpc_framer_init(f, f->max_len);
}

bool gv_grpc_framer_idle(const struct gv_grpc_framer *f)
{
    return f->hdr_have == 0 && !f->in_msg;
}

gv_status gv_grpc_framer_feed(struct gv_grpc_framer *f, const uint8_t *data, size_t len,
                              gv_grpc_msg_cb cb, void *ud, struct gv_error *err)
{
    while (len > 0 || f->in_msg) {
        if (!f->in_msg) {
            size_t take = 5 - f->hdr_have;
            if (take > len)
                take = len;
            memcpy(f->hdr + f->hdr_have, data, take);
            f->hdr_have += take;
            data += take;
            len -= take;
            if (f->hdr_have < 5)
                return GV_OK;
            f->hdr_have = 0;
            if (f->hdr[0] != 0)
                return gv_error_set(err, GV_EUNSUPPORTED,
                                    "grpc frame: compressed-flag %u but no compression was "
                                    "negotiated",
                                    f->hdr[0]);
            uint32_t n = (uint32_t)f->hdr[1] << 24 | (uint32_t)f->hdr[2] << 16 |
                         (uint32_t)f->hdr[3] << 8 | f->hdr[4];
            if (n > f->max_len)
                return gv_error_set(err, GV_ERANGE,
                                    "grpc frame: message of %u bytes exceeds the limit of %zu", n,
                                    f->max_len);
            free(f->msg);
            /* +1 so a zero-length message still has a non-NULL buffer. */
            f->msg = malloc((size_t)n + 1);
            if (f->msg == NULL)
                return gv_error_set(err, GV_ENOMEM, "grpc frame: out of memory for %u bytes", n);
            f->msg_len = n;
            f->msg_have = 0;
            f->in_msg = true;
        }
        size_t take = f->msg_len - f->msg_have;
        if (take > len)
            take = len;
        if (take)
            memcpy(f->msg + f->msg_have, data, take);
        f->msg_have += take;
        data += take;
        len -= take;
        if (f->msg_have < f->msg_len)
            return GV_OK;
        f->in_msg = false;
        gv_status st = cb(f->msg, f->msg_len, ud, err);
        free(f->msg);
        f->msg = NULL;
        if (st != GV_OK)
            return st;
    }
    return GV_OK;
}

gv_status gv_grpc_parse_timeout(const char *value, size_t len, int64_t *ms, struct gv_error *err)
{
    /* Spec: TimeoutValue = 1*8 DIGIT, TimeoutUnit = H / M / S / m / u / n. */
    if (len < 2 || len > 9)
        return gv_error_set(err, GV_EPARSE, "grpc-timeout: '%.*s' is not 1-8 digits and a unit",
                            (int)(len > 16 ? 16 : len), value);
    int64_t v = 0;
    for (size_t i = 0; i + 1 < len; i++) {
        if (value[i] < '0' || value[i] > '9')
            return gv_error_set(err, GV_EPARSE, "grpc-timeout: '%.*s' has a non-digit", (int)len,
                                value);
        v = v * 10 + (value[i] - '0');
    }
    switch (value[len - 1]) {
    case 'H':
        *ms = v * 3600000;
        break;
    case 'M':
        *ms = v * 60000;
        break;
    case 'S':
        *ms = v * 1000;
        break;
    case 'm':
        *ms = v;
        break;
    case 'u':
        *ms = (v + 999) / 1000;
        break;
    case 'n':
        *ms = (v + 999999) / 1000000;
        break;
    default:
        return gv_error_set(err, GV_EPARSE, "grpc-timeout: unknown unit '%c' in '%.*s'",
                            value[len - 1], (int)len, value);
    }
    return GV_OK;
}
