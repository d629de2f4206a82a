#include "common/gv_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const status_text[] = {
#define GV_X_TEXT(code, text) text,
    GV_STATUS_LIST(GV_X_TEXT)
#undef GV_X_TEXT
};

static const char *const status_names[] = {
#define GV_X_NAME(code, text) #code,
    GV_STATUS_LIST(GV_X_NAME)
#undef GV_X_NAME
};

const char *gv_strerror(gv_status code)
{
    if ((unsigned)code >= GV_STATUS_COUNT)
        return "unknown error";
    return status_text[code];
}

const char *gv_status_name(gv_status code)
{
    if ((unsigned)code >= GV_STATUS_COUNT)
        return "GV_EUNKNOWN";
    return status_names[code];
}

gv_status gv_error_set(struct gv_error *err, gv_status code, const char *fmt, ...)
{
    if (err == NULL)
        return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    return code;
}

void gv_error_prefix(struct gv_error *err, const char *fmt, ...)
{
    if (err == NULL)
        return;
    char prefix[GV_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    /* Truncation is acceptable: the innermost detail is kept first. */
    size_t plen = strnlen(prefix, sizeof(prefix) - 1);
    size_t room = sizeof(err->msg) - 1;
    if (plen + 2 > room)
        plen = room - 2;
    size_t mlen = strnlen(err->msg, room);
    if (plen + 2 + mlen > room)
        mlen = room - plen - 2;
    memmove(err->msg + plen + 2, err->msg, mlen);
    memcpy(err->msg, prefix, plen);
    err->msg[plen] = ':';
    err->msg[plen + 1] = ' ';
    err->msg[plen + 2 + mlen] = '\0';
}

void gv_error_clear(struct gv_error *err)
{
    if (err == NULL)
        return;
    err->code = GV_OK;
    err->msg[0] = '\0';
}
