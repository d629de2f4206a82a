/*
 * CDI kinds: the name rules a consumer applies to a spec's "kind", and the
 * other specs on the node that claim the same kind (docs/mig-cdi.md, "CDI").
 *
 * Why here and not left to the runtime: a consumer that finds a kind it
 * cannot parse drops the whole spec, silently, and two specs with the same
 * kind and device names make podman resolve none of them; either way every
 * CDI name Allocate hands out fails at container start, far from the cause.
 */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/gv_file.h"
#include "node/discovery/gv_cdi.h"

static bool letter(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

static bool alnum(char c)
{
    return letter(c) || (c >= '0' && c <= '9');
}

/*
 * One half of a kind (CDI's parser: a letter first, a letter or digit last,
 * letters, digits and `extra` between).  The vendor allows '_', '-' and '.';
 * the class '_' and '-' only: CDI 0.6 added '.' to the class, but 0.5
 * consumers (podman 4.3, Debian bookworm's) refuse it, and a spec must be
 * readable by every consumer on the node.
 */
static const char *bad_part(const char *s, size_t n, const char *extra)
{
    if (n == 0)
        return "is empty";
    if (!letter(s[0]))
        return "must start with a letter";
    if (!alnum(s[n - 1]))
        return "must end with a letter or digit";
    for (size_t i = 1; i + 1 < n; i++)
        if (!alnum(s[i]) && strchr(extra, s[i]) == NULL)
            return "has a character other than letters, digits and the allowed punctuation";
    return NULL;
}

gv_status gv_cdi_kind_check(const char *kind, struct gv_error *err)
{
    const char *slash = kind ? strchr(kind, '/') : NULL;
    if (slash == NULL)
        return gv_error_set(err, GV_EINVAL,
                            "CDI kind \"%s\" is not <vendor>/<class> (e.g. gpuvisor.io/gpu)",
                            kind ? kind : "");
    const char *why = bad_part(kind, (size_t)(slash - kind), "_-.");
    if (why != NULL)
        return gv_error_set(err, GV_EINVAL, "CDI kind \"%s\": the vendor %s (letters, digits, "
                            "'_', '-', '.')", kind, why);
    why = bad_part(slash + 1, strlen(slash + 1), "_-");
    if (why != NULL)
        return gv_error_set(err, GV_EINVAL, "CDI kind \"%s\": the class %s (letters, digits, "
                            "'_', '-'; no '.', which CDI 0.5 consumers refuse)", kind, why);
    return GV_OK;
}

/*
 * The kind a spec file names: JSON through jansson; YAML (nvidia-ctk's
 * default) by its top-level "kind:" line, which is all a spec's kind can be.
 */
static bool spec_kind(const char *path, char *out, size_t cap)
{
    char *text = NULL;
    size_t len = 0;
    if (gv_file_read_all(path, &text, &len, NULL) != GV_OK)
        return false;
    bool ok = false;
    size_t n = strlen(path);
    if (n > 5 && strcmp(path + n - 5, ".json") == 0) {
        json_t *j = json_loadb(text, len, 0, NULL);
        const char *k = json_string_value(json_object_get(j, "kind"));
        if (k != NULL && strlen(k) < cap) {
            memcpy(out, k, strlen(k) + 1);
            ok = true;
        }
        json_decref(j);
    } else {
        for (char *line = text; line != NULL && !ok; line = strchr(line, '\n')) {
            if (*line == '\n')
                line++;
            if (strncmp(line, "kind:", 5) != 0)
                continue;
            char *v = line + 5;
            v += strspn(v, " \t\"'");
            size_t l = strcspn(v, " \t\"'\r\n#");
            if (l > 0 && l < cap) {
                memcpy(out, v, l);
                out[l] = '\0';
                ok = true;
            }
        }
    }
    free(text);
    return ok;
}

size_t gv_cdi_kind_claimed(const char *const *dirs, const char *kind, const char *own,
                           char *out, size_t cap)
{
    size_t found = 0, used = 0;
    if (cap > 0)
        out[0] = '\0';
    for (size_t d = 0; dirs[d] != NULL; d++) {
        DIR *dir = opendir(dirs[d]);
        struct dirent *e;
        while (dir != NULL && (e = readdir(dir)) != NULL) {
            size_t n = strlen(e->d_name);
            bool spec = (n > 5 && strcmp(e->d_name + n - 5, ".json") == 0) ||
                        (n > 5 && strcmp(e->d_name + n - 5, ".yaml") == 0);
            char path[1024], k[256];
            if (!spec || snprintf(path, sizeof(path), "%s/%s", dirs[d], e->d_name) >=
                             (int)sizeof(path))
                continue;
            if (own != NULL && strcmp(path, own) == 0)
                continue;
            if (!spec_kind(path, k, sizeof(k)) || strcmp(k, kind) != 0)
                continue;
            found++;
            int w = snprintf(out + used, cap > used ? cap - used : 0, "%s%s", used ? ", " : "",
                             path);
            if (w > 0 && used + (size_t)w < cap)
                used += (size_t)w;
        }
        if (dir != NULL)
            closedir(dir);
    }
    return found;
}
