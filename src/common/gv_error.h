/*
 * Error codes and the error-message struct shared by every gpuvisor
 * component (not the interposer's hooks, which speak CUDA/NVML codes).
 *
 * Functions that can fail return a gv_status and, when given a non-NULL
 * struct gv_error, fill it with a human-readable message naming what failed
 * (file, line, field, value).  Codes come from one X-macro list so the enum
 * and the names can never drift apart.
 */
#ifndef GV_ERROR_H
#define GV_ERROR_H

#include <stddef.h>

#define GV_STATUS_LIST(X)                                                      \
    X(GV_OK, "ok")                                                             \
    X(GV_EINVAL, "invalid argument")                                           \
    X(GV_ENOMEM, "out of memory")                                              \
    X(GV_EIO, "input/output error")                                            \
    X(GV_EPARSE, "parse error")                                                \
    X(GV_ERANGE, "value out of range")                                         \
    X(GV_ENOTFOUND, "not found")                                               \
    X(GV_EEXIST, "already exists")                                             \
    X(GV_ECONFLICT, "conflict")                                                \
    X(GV_ENOFIT, "does not fit")                                               \
    X(GV_EUNSUPPORTED, "not supported")                                        \
    X(GV_ETIMEOUT, "timed out")                                                \
    X(GV_EUNAVAILABLE, "unavailable")                                          \
    X(GV_EPROTO, "protocol error")                                             \
    X(GV_EINTERNAL, "internal error")

typedef enum {
#define GV_X_ENUM(code, text) code,
    GV_STATUS_LIST(GV_X_ENUM)
#undef GV_X_ENUM
    GV_STATUS_COUNT
} gv_status;

#define GV_ERROR_MSG_MAX 512

struct gv_error {
    gv_status code;
    char msg[GV_ERROR_MSG_MAX];
};

/* Static text for a code ("parse error"); never NULL. */
const char *gv_strerror(gv_status code);
/* Symbolic name of a code ("GV_EPARSE"); never NULL. */
const char *gv_status_name(gv_status code);

/*
 * Records code and a printf-style message in err (if err is non-NULL) and
 * returns code, so callers can write `return gv_error_set(err, ...)`.
 */
gv_status gv_error_set(struct gv_error *err, gv_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes err->msg with "<prefix>: " (adds context while unwinding). */
void gv_error_prefix(struct gv_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void gv_error_clear(struct gv_error *err);

#endif
