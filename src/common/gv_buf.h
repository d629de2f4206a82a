/*
 * Growable byte buffer: append bytes, keep them NUL-terminated, optionally
 * refuse to grow past a size cap.
 *
 * HTTP bodies, watch lines and gRPC output all need the same "append to a
 * doubling heap buffer" step; one copy keeps the cap and overflow rules the
 * same everywhere.  A zeroed struct is an empty buffer with no cap.
 */
#ifndef GV_BUF_H
#define GV_BUF_H

#include <stdbool.h>
#include <stddef.h>

#include "common/gv_error.h"

struct gv_buf {
    char *data;    /* NUL-terminated once anything was appended; NULL before */
    size_t len;    /* bytes held, without the NUL */
    size_t cap;    /* bytes allocated */
    size_t max;    /* most bytes len may reach; 0: no cap */
    bool overflow; /* an append would have passed max; sticky until reset */
};

/* Empties b (without freeing anything) and sets its cap (0: none). */
void gv_buf_init(struct gv_buf *b, size_t max);

/*
 * Appends n bytes.  GV_ERANGE when len would pass max: nothing is appended,
 * overflow is set and every later append is refused too, so a truncated
 * body is never taken for a whole one.  GV_ENOMEM leaves b as it was.
 */
gv_status gv_buf_append(struct gv_buf *b, const void *p, size_t n);

/* Makes room for n more bytes, so appends of up to n in all cannot fail
 * for memory (they still honour max). */
gv_status gv_buf_reserve(struct gv_buf *b, size_t n);

/*
 * fwrite-shaped sink appending size * n bytes to the gv_buf ud, e.g. as
 * libcurl's CURLOPT_WRITEFUNCTION.  Returns size * n, or 0 when the append
 * fails (which makes curl abort the transfer).
 */
size_t gv_buf_write_cb(char *p, size_t size, size_t n, void *ud);

/* Empties b and clears overflow; keeps the memory and the cap. */
void gv_buf_reset(struct gv_buf *b);

/* Frees the memory and leaves b zeroed (empty, no cap). */
void gv_buf_free(struct gv_buf *b);

#endif
