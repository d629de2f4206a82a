/*
 * Fuzzes the HTTP/1.1 response parser with what a hostile or broken API
 * server could send, in fuzzer-chosen chunk sizes (as TCP delivers it),
 * then a connection close.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kube_http.h"

static bool on_body(void *ud, const char *data, size_t len)
{
    size_t *total = ud;
    /* Touch every byte handed out, so ASan sees out-of-range slices. */
    for (size_t i = 0; i < len; i++)
        *total += (unsigned char)data[i] != 0;
    return *total < ((size_t)1 << 20);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t chunk = (size_t)data[0] + 1;
    const char *p = (const char *)data + 1;
    size_t len = size - 1;
    struct gv_http_parser *hp = malloc(sizeof(*hp));
    if (hp == NULL)
        return 0;
    gv_http_parser_init(hp);
    struct gv_error err;
    size_t total = 0;
    gv_status st = GV_OK;
    for (size_t off = 0; off < len && st == GV_OK && hp->state != GV_HTTP_DONE && !hp->stopped;) {
        size_t n = len - off < chunk ? len - off : chunk;
        size_t used = 0;
        st = gv_http_parser_feed(hp, p + off, n, &used, on_body, &total, &err);
        if (used > n)
            abort();
        off += used == 0 && st == GV_OK && hp->state != GV_HTTP_DONE ? n : used;
    }
    if (st == GV_OK)
        (void)gv_http_parser_eof(hp, &err);
    free(hp);
    return 0;
}
