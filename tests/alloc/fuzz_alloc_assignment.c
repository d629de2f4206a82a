/* libFuzzer target: the gpuvisor.io/assignment annotation parser. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/gv_alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct gv_alloc_assignment a, b;
    static char buf[GV_ALLOC_ASSIGNMENT_MAX];
    struct gv_error err;
    if (gv_alloc_assignment_decode((const char *)data, size, &a, &err) != GV_OK)
        return 0;
    /* Anything accepted re-encodes to the same bytes and decodes equal. */
    size_t len;
    if (gv_alloc_assignment_encode(&a, buf, sizeof(buf), &len, &err) != GV_OK)
        abort();
    if (len != size || memcmp(buf, data, size) != 0)
        abort();
    if (gv_alloc_assignment_decode(buf, len, &b, &err) != GV_OK || memcmp(&a, &b, sizeof(a)) != 0)
        abort();
    return 0;
}
