#include "common/gv_buf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Small first allocation: most users hold a few hundred bytes. */
#define GV_BUF_FIRST_CAP 256

void gv_buf_init(struct gv_buf *b, size_t max)
{
    memset(b, 0, sizeof(*b));
    b->max = max;
}

gv_status gv_buf_reserve(struct gv_buf *b, size_t n)
{
    if (n >= SIZE_MAX - b->len)
        return GV_ENOMEM;
    size_t need = b->len + n + 1;
    if (need <= b->cap)
        return GV_OK;
    size_t cap = b->cap ? b->cap : GV_BUF_FIRST_CAP;
    while (cap < need)
        cap = cap <= SIZE_MAX / 2 ? cap * 2 : need;
    char *d = realloc(b->data, cap);
    if (d == NULL)
        return GV_ENOMEM;
    b->data = d;
    b->cap = cap;
    return GV_OK;
}

gv_status gv_buf_append(struct gv_buf *b, const void *p, size_t n)
{
    if (b->overflow || (b->max != 0 && (b->len > b->max || n > b->max - b->len))) {
        b->overflow = true;
        return GV_ERANGE;
    }
    gv_status st = gv_buf_reserve(b, n);
    if (st != GV_OK)
        return st;
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return GV_OK;
}

size_t gv_buf_write_cb(char *p, size_t size, size_t n, void *ud)
{
    if (n != 0 && size > SIZE_MAX / n)
        return 0;
    return gv_buf_append(ud, p, size * n) == GV_OK ? size * n : 0;
}

void gv_buf_reset(struct gv_buf *b)
{
    b->len = 0;
    b->overflow = false;
    if (b->data != NULL)
        b->data[0] = '\0';
}

void gv_buf_free(struct gv_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}
