/*
 * Fuzz target: what the node monitor parses from files it does not write
 * itself (/proc/<pid>/cgroup text, container records) and the metrics
 * listener's request heads from the network.  The first byte picks the
 * parser (0 record, 1 cgroup, 2 HTTP head); a parsed cgroup must yield a
 * 36-character uid, a parsed head a path starting with what was sent.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "node/monitor/gv_metrics.h"
#include "node/monitor/gv_monitor.h"
#include "node/monitor/monitor_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if ((data[0] & 3) == 2) {
        char *text = malloc(size);
        if (text == NULL)
            return 0;
        memcpy(text, data + 1, size - 1);
        text[size - 1] = '\0';
        struct gv_metrics_http_head h;
        int rc = gv_metrics_http_parse_head(text, size - 1, &h);
        if (rc != 0 && rc != 400 && rc != 405)
            abort();
        if (rc == 0 && strlen(h.path) >= sizeof(h.path))
            abort();
        free(text);
    } else if (data[0] & 1) {
        char *text = malloc(size);
        if (text == NULL)
            return 0;
        memcpy(text, data + 1, size - 1);
        text[size - 1] = '\0';
        char uid[64], cid[80];
        if (gv_monitor_parse_cgroup(text, uid, sizeof(uid), cid, sizeof(cid)) && strlen(uid) != 36)
            abort();
        free(text);
    } else {
        struct gv_monitor_record r;
        struct gv_error err;
        if (gv_monitor_record_parse((const char *)data + 1, size - 1, &r, &err) == GV_OK &&
            r.n_dev > GV_MONITOR_MAX_GPUS)
            abort();
    }
    return 0;
}
