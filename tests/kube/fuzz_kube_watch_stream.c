/*
 * Fuzzes what the kube client parses from the network: the watch event
 * stream decoder (fed in fuzzer-chosen chunk sizes, as TCP would deliver
 * it) and the Status error-body parser.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kube/kube_internal.h"

static bool on_event(void *ud, gv_kube_event_type type, json_t *obj)
{
    size_t *n = ud;
    (*n)++;
    /* Touch what a consumer would read. */
    (void)gv_kube_event_name(type);
    (void)json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
    return *n < 1000;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* First byte: chunk size for the stream (1..256). */
    size_t chunk = (size_t)data[0] + 1;
    const char *p = (const char *)data + 1;
    size_t len = size - 1;

    size_t events = 0;
    struct gv_kube_stream s;
    gv_kube_stream_init(&s, on_event, &events);
    s.max_line = 1 << 16;
    struct gv_error err;
    gv_status st = GV_OK;
    for (size_t off = 0; off < len && st == GV_OK; off += chunk) {
        size_t n = len - off < chunk ? len - off : chunk;
        st = gv_kube_stream_feed(&s, p + off, n, &err);
    }
    if (st == GV_OK)
        st = gv_kube_stream_finish(&s, &err);
    if (st != GV_OK && strlen(err.msg) == 0)
        __builtin_trap(); /* every error must say what was wrong */
    gv_kube_stream_release(&s);

    gv_kube_http_error(409, p, len, "PATCH /x", &err);
    if (strlen(err.msg) == 0)
        __builtin_trap();
    return 0;
}
