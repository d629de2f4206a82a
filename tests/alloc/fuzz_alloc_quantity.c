/* libFuzzer target: Kubernetes quantity parser (untrusted pod specs). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/gv_alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    int64_t v, m, mib;
    bool exact;
    struct gv_error err;
    gv_status a = gv_quantity_parse(s, 1, 1, &v, &exact, &err);
    gv_status b = gv_quantity_milli(s, &m, &err);
    gv_status c = gv_quantity_parse(s, 1, 1 << 20, &mib, NULL, &err);
    /* Invariants (ceil division written so INT64_MAX does not overflow):
     * results are never negative; a value that parses in
     * thousandths parses in units (rounded up) and in MiB (smaller). */
    if (a == GV_OK && v < 0)
        abort();
    if (b == GV_OK && (m < 0 || a != GV_OK || m / 1000 + (m % 1000 != 0) != v))
        abort();
    if (a == GV_OK && (c != GV_OK || mib > v))
        abort();
    if (a == GV_OK && exact && b == GV_OK && m != v * 1000)
        abort();
    free(s);
    return 0;
}
