/*
 * Small file helpers shared by the CLI and the daemons.
 *
 * Outputs are written atomically (temp file in the same directory, fsync,
 * rename, fsync of the directory) so a reader or a crash never sees half a
 * file, and a write reported done survives a crash: "no partial output" is a
 * product rule, not a per-caller habit.
 */
#ifndef GV_FILE_H
#define GV_FILE_H

#include <stddef.h>

#include "common/gv_error.h"

/* Reads a whole file into a NUL-terminated heap buffer (*out, *len). */
gv_status gv_file_read_all(const char *path, char **out, size_t *len, struct gv_error *err);

/* Writes data to path atomically with exactly the given mode (e.g. 0644;
 * the umask does not apply). */
gv_status gv_file_write_atomic(const char *path, const void *data, size_t len, unsigned mode,
                               struct gv_error *err);

#endif
