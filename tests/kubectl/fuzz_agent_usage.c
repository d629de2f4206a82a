/* Fuzz target: the reader of the node agents' /metrics
 * (src/contracts/agent_usage.c): the exposition parser and the usage model
 * `kubectl gpuvisor top` and the scheduler's dashboard build from it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "contracts/agent_usage.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(void *ud, const struct gv_expfmt_sample *s)
{
    size_t *n = ud;
    /* every name and label the parser hands out is a terminated string */
    *n += strlen(s->name);
    for (size_t i = 0; i < s->n_labels; i++)
        *n += strlen(s->label_names[i]) + strlen(s->label_values[i]);
    if (s->n_labels > GV_EXPFMT_MAX_LABELS)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), *again = malloc(size + 1);
    if (text == NULL || again == NULL) {
        free(text);
        free(again);
        return 0;
    }
    memcpy(text, data, size);
    text[size] = '\0';
    memcpy(again, text, size + 1);
    size_t n = 0;
    gv_expfmt_parse(text, size, check, &n);
    struct gv_usage u = {0};
    gv_usage_add_text(&u, again, size, "node-1");
    for (size_t i = 0; i < u.ctrs.n; i++)
        if (u.ctrs.v[i].node == NULL || u.ctrs.v[i].uuid == NULL)
            abort();
    gv_usage_free(&u);
    free(text);
    free(again);
    return 0;
}
