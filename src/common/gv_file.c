#include "common/gv_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

gv_status gv_file_read_all(const char *path, char **out, size_t *len, struct gv_error *err)
{
    gv_status rc = GV_OK;
    char *buf = NULL;
    size_t used = 0, cap = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return gv_error_set(err, GV_EIO, "%s: cannot open: %s", path, strerror(errno));
    for (;;) {
        if (cap - used < 4096) {
            size_t ncap = cap ? cap * 2 : 65536;
            char *nbuf = realloc(buf, ncap + 1);
            if (nbuf == NULL) {
                rc = gv_error_set(err, GV_ENOMEM, "%s: out of memory reading file", path);
                goto fail;
            }
            buf = nbuf;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + used, cap - used);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            rc = gv_error_set(err, GV_EIO, "%s: read failed: %s", path, strerror(errno));
            goto fail;
        }
        if (r == 0)
            break;
        used += (size_t)r;
    }
    close(fd);
    buf[used] = '\0';
    *out = buf;
    if (len != NULL)
        *len = used;
    return GV_OK;
fail:
    close(fd);
    free(buf);
    return rc;
}

/*
 * The rename is a change to the directory, and a directory entry reaches the
 * disk only when the directory itself is synced (rename(2), fsync(2)): without
 * it a power loss can bring back the old file, or no file, although the new
 * content was synced.  Filesystems that cannot sync a directory say EINVAL;
 * nothing more can be done there, so that is not an error.
 */
static gv_status sync_parent(const char *path, struct gv_error *err)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == path)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return gv_error_set(err, GV_EIO, "%s: written, but its directory cannot be opened to "
                            "sync the rename: %s", path, strerror(errno));
    int rc = fsync(fd), e = errno;
    close(fd);
    if (rc != 0 && e != EINVAL)
        return gv_error_set(err, GV_EIO, "%s: written, but syncing its directory failed (the "
                            "rename may not survive a crash): %s", path, strerror(e));
    return GV_OK;
}

gv_status gv_file_write_atomic(const char *path, const void *data, size_t len, unsigned mode,
                               struct gv_error *err)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof(tmp))
        /* the reason first: the path alone may fill the message */
        return gv_error_set(err, GV_EINVAL, "path too long (%zu bytes): %s", strlen(path), path);
    /*
     * Made afresh, never opened through what is already there: with
     * O_TRUNC alone a link planted at the temporary name (by whoever can
     * write the directory) had the writer, root for the node agent, empty
     * and fill the file it names, and the rename then put the link itself
     * in place.  A name left by an earlier writer (a crash, the same pid
     * again after a restart) is removed and the file made once more; only
     * a name that comes back at once is an error.
     */
    int fd = -1;
    for (int attempt = 0; fd < 0 && attempt < 2; attempt++) {
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, (mode_t)mode);
        if (fd < 0 && (errno != EEXIST || attempt > 0 || unlink(tmp) != 0))
            return gv_error_set(err, GV_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    }
    /*
     * Exactly the mode asked for, whatever the process umask: files other
     * users must read (a container's limits file, a CDI spec the runtime
     * reads) stay readable under a strict umask.
     */
    if (fchmod(fd, (mode_t)mode) != 0)
        goto fail;
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            goto fail;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0)
        goto fail;
    if (close(fd) != 0) {
        fd = -1;
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return gv_error_set(err, GV_EIO, "%s: cannot rename into place: %s", path, strerror(e));
    }
    return sync_parent(path, err);
fail: {
    int e = errno;
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    return gv_error_set(err, GV_EIO, "%s: write failed: %s", path, strerror(e));
}
}
