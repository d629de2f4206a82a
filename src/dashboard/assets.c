/* Lookup of the dashboard's embedded files (table generated at build time). */
#include <string.h>

#include "dashboard/gv_dashboard.h"

const struct gv_dashboard_asset *gv_dashboard_find(const char *path)
{
    if (path == NULL)
        return NULL;
    if (strcmp(path, "/") == 0)
        path = "/index.html";
    for (const struct gv_dashboard_asset *a = gv_dashboard_assets; a->path != NULL; a++)
        if (strcmp(a->path, path) == 0)
            return a;
    return NULL;
}
