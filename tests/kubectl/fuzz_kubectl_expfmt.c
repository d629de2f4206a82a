/* Fuzz target: kubectl-gpuvisor's Prometheus text exposition reader (the
 * agents' /metrics, received through the API server). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kubectl/gv_kubectl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(void *ud, const struct kc_sample *s)
{
    size_t *n = ud;
    /* every name and label the parser hands out is a terminated string */
    *n += strlen(s->name);
    for (size_t i = 0; i < s->n_labels; i++)
        *n += strlen(s->label_names[i]) + strlen(s->label_values[i]);
    if (s->n_labels > KC_EXP_MAX_LABELS)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    size_t n = 0;
    kc_expfmt_parse(text, size, check, &n);
    free(text);
    return 0;
}
