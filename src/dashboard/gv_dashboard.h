/*
 * The web dashboard's static files, compiled into the binary that serves
 * them (gpuvisor-scheduler --dashboard-listen): the page works offline, with
 * no CDN and nothing read from disk.  The files live in src/dashboard/web/
 * and are turned into a C table at build time by src/dashboard/embed.py.
 * The data the page shows comes from the scheduler's /api/state
 * (docs/observability.md, "Dashboard").
 */
#ifndef GV_DASHBOARD_H
#define GV_DASHBOARD_H

#include <stddef.h>

struct gv_dashboard_asset {
    const char *path;          /* "/index.html" */
    const char *content_type;  /* "text/html; charset=utf-8" */
    const unsigned char *data; /* NUL-terminated */
    size_t len;
};

/* Terminated by an entry with path NULL. */
extern const struct gv_dashboard_asset gv_dashboard_assets[];

/* The asset served at path ("/" is "/index.html"), or NULL. */
const struct gv_dashboard_asset *gv_dashboard_find(const char *path);

#endif
