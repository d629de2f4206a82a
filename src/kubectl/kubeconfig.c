/*
 * Which cluster kubectl-gpuvisor talks to: the kubeconfig found as kubectl
 * finds it, and the clients made from it.  Below main.c and the commands
 * (defrag.c needs a second, non-retrying client), so they import one way.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kubectl/gv_kubectl.h"

static bool is_file(const char *p)
{
    struct stat st;
    return p != NULL && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* kubectl's order: flag, $KUBECONFIG (first existing entry), ~/.kube/config,
 * then in-cluster. */
int load_config(const struct kc_opts *o, struct gv_kube_config **cfg, struct gv_error *err)
{
    if (o->server != NULL)
        return gv_kube_config_from_url(o->server, cfg, err) == GV_OK ? 0 : -1;
    char path[4096] = "";
    if (o->kubeconfig != NULL) {
        snprintf(path, sizeof(path), "%s", o->kubeconfig);
    } else if (getenv("KUBECONFIG") != NULL && *getenv("KUBECONFIG") != '\0') {
        char *list = strdup(getenv("KUBECONFIG")), *save = NULL;
        for (char *p = list ? strtok_r(list, ":", &save) : NULL; p; p = strtok_r(NULL, ":", &save))
            if (is_file(p)) {
                snprintf(path, sizeof(path), "%s", p);
                break;
            }
        free(list);
    } else if (getenv("HOME") != NULL) {
        snprintf(path, sizeof(path), "%s/.kube/config", getenv("HOME"));
        if (!is_file(path))
            path[0] = '\0';
    }
    if (path[0] != '\0')
        return gv_kube_config_from_kubeconfig(path, o->context, cfg, err) == GV_OK ? 0 : -1;
    if (getenv("KUBERNETES_SERVICE_HOST") != NULL)
        return gv_kube_config_in_cluster(NULL, cfg, err) == GV_OK ? 0 : -1;
    gv_error_set(err, GV_ENOTFOUND,
                 "no kubeconfig found (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not "
                 "running in a cluster");
    return -1;
}

int kc_kube_client_once(const struct kc_opts *o, struct gv_kube_client **out,
                        struct gv_kube_config **cfg, struct gv_error *err)
{
    *out = NULL;
    *cfg = NULL;
    if (load_config(o, cfg, err) != 0)
        return -1;
    (*cfg)->max_retries = 0;
    (*cfg)->timeout_ms = 20000;
    return gv_kube_client_new(*cfg, out, err) == GV_OK ? 0 : -1;
}
