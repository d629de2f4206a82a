/*
 * Object names as the API server accepts them: checked before a name given
 * on a command line or in a config goes into a request path, so that
 * nothing there can be misread as another path (see gv_kube.h).
 */
#include <string.h>

#include "kube/gv_kube.h"

bool gv_kube_dns_label(const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return false;
    return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}
