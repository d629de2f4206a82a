/*
 * DevicePlugin service: see gv_plugin.h.
 *
 * The current ListAndWatch message is kept encoded, so a new stream or a
 * change costs one memcpy per watcher.  Allocate runs on worker threads
 * because it may wait on the API server; the loop thread keeps serving
 * ListAndWatch and other pods' calls meanwhile.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_log.h"
#include "deviceplugin.pb-c.h"
#include "node/kubelet/gv_grpc.h"
#include "node/kubelet/gv_plugin.h"

struct watcher {
    struct gv_grpc_call *call;
    struct watcher *next;
};

struct job {
    void (*run)(struct gv_plugin *p, struct job *j); /* run_allocate or run_preferred */
    uint64_t call_id;
    uint8_t *req;
    size_t len;
    struct job *next;
};

struct gv_plugin {
    struct gv_loop *loop;
    struct gv_grpc_server *srv;
    size_t max_msg;
    gv_plugin_allocate_fn allocate;
    void *allocate_ud;
    gv_plugin_prefer_fn prefer;
    void *prefer_ud;
    /* written by the loop thread only; workers read devs under lock (preferences) */
    struct gv_plugin_device *devs;
    size_t n_devs;
    uint8_t *list;
    size_t list_len;
    struct watcher *watchers;
    bool stopping;
    /* worker pool */
    pthread_t *threads;
    unsigned n_threads;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct job *jobs, *jobs_tail;
    bool quit;
};

/* ---- ListAndWatch -------------------------------------------------------- */

gv_status gv_plugin_encode_list(const struct gv_plugin_device *devs, size_t n, uint8_t **out,
                                size_t *len, struct gv_error *err)
{
    V1beta1__ListAndWatchResponse msg = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
    V1beta1__Device *dv = calloc(n ? n : 1, sizeof(*dv));
    V1beta1__Device **dp = calloc(n ? n : 1, sizeof(*dp));
    V1beta1__TopologyInfo *topo = calloc(n ? n : 1, sizeof(*topo));
    V1beta1__NUMANode *numa = calloc(n ? n : 1, sizeof(*numa));
    V1beta1__NUMANode **numap = calloc(n ? n : 1, sizeof(*numap));
    gv_status st = GV_OK;
    *out = NULL;
    if (!dv || !dp || !topo || !numa || !numap) {
        st = gv_error_set(err, GV_ENOMEM, "ListAndWatch: out of memory for %zu devices", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        v1beta1__device__init(&dv[i]);
        dv[i].id = (char *)devs[i].id;
        dv[i].health = devs[i].healthy ? "Healthy" : "Unhealthy";
        if (devs[i].numa >= 0) {
            v1beta1__topology_info__init(&topo[i]);
            v1beta1__numanode__init(&numa[i]);
            numa[i].id = devs[i].numa;
            numap[i] = &numa[i];
            topo[i].n_nodes = 1;
            topo[i].nodes = &numap[i];
            dv[i].topology = &topo[i];
        }
        dp[i] = &dv[i];
    }
    msg.n_devices = n;
    msg.devices = dp;
    *len = v1beta1__list_and_watch_response__get_packed_size(&msg);
    *out = malloc(*len + 1);
    if (*out == NULL) {
        st = gv_error_set(err, GV_ENOMEM, "ListAndWatch: out of memory");
        goto out;
    }
    v1beta1__list_and_watch_response__pack(&msg, *out);
out:
    free(dv);
    free(dp);
    free(topo);
    free(numa);
    free(numap);
    return st;
}

static void watcher_closed(struct gv_grpc_call *call, void *ud)
{
    struct gv_plugin *p = ud;
    for (struct watcher **pp = &p->watchers; *pp; pp = &(*pp)->next) {
        if ((*pp)->call == call) {
            struct watcher *w = *pp;
            *pp = w->next;
            free(w);
            gv_info("ListAndWatch stream closed (%zu left)", gv_plugin_watchers(p));
            return;
        }
    }
}

static void h_list_and_watch(struct gv_grpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    struct gv_plugin *p = ud;
    V1beta1__Empty *e = v1beta1__empty__unpack(NULL, len, req);
    if (e == NULL) {
        gv_grpc_call_finish(call, GV_GRPC_INVALID_ARGUMENT, "ListAndWatch: malformed Empty");
        return;
    }
    v1beta1__empty__free_unpacked(e, NULL);
    struct watcher *w = calloc(1, sizeof(*w));
    struct gv_error err;
    if (w == NULL) {
        gv_grpc_call_finish(call, GV_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    w->call = call;
    w->next = p->watchers;
    p->watchers = w;
    gv_grpc_call_on_close(call, watcher_closed, p);
    if (gv_grpc_call_send(call, p->list, p->list_len, &err) != GV_OK)
        gv_grpc_call_finish(call, GV_GRPC_INTERNAL, err.msg);
    gv_info("ListAndWatch stream opened: %zu devices", p->n_devs);
}

/*
 * Sends msg (or, when msg is NULL, the final status) to every stream.  A
 * send can close a stream and unlink its watcher, so this walks a snapshot
 * and re-checks each call.  Returns the number of streams.
 */
static size_t broadcast(struct gv_plugin *p, const uint8_t *msg, size_t len, int status,
                        const char *why)
{
    size_t nw = gv_plugin_watchers(p), k = 0;
    struct gv_grpc_call **calls = calloc(nw ? nw : 1, sizeof(*calls));
    if (calls == NULL)
        return 0;
    for (struct watcher *w = p->watchers; w; w = w->next)
        calls[k++] = w->call;
    for (size_t i = 0; i < k; i++) {
        bool alive = false;
        for (struct watcher *w = p->watchers; w; w = w->next)
            alive |= w->call == calls[i];
        if (!alive)
            continue;
        struct gv_error e;
        if (msg == NULL)
            gv_grpc_call_finish(calls[i], status, why);
        else if (gv_grpc_call_send(calls[i], msg, len, &e) != GV_OK)
            gv_warn("ListAndWatch update: %s", e.msg);
    }
    free(calls);
    return k;
}

static bool devs_equal(const struct gv_plugin_device *a, size_t na,
                       const struct gv_plugin_device *b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i].id, b[i].id) != 0 || a[i].healthy != b[i].healthy ||
            a[i].numa != b[i].numa || a[i].gpu != b[i].gpu)
            return false;
    return true;
}

gv_status gv_plugin_set_devices(struct gv_plugin *p, const struct gv_plugin_device *devs, size_t n,
                                struct gv_error *err)
{
    if (p->list != NULL && devs_equal(p->devs, p->n_devs, devs, n))
        return GV_OK;
    uint8_t *list;
    size_t len;
    gv_status st = gv_plugin_encode_list(devs, n, &list, &len, err);
    if (st != GV_OK)
        return st;
    if (len > p->max_msg) {
        free(list);
        return gv_error_set(err, GV_ERANGE,
                            "ListAndWatch: %zu devices encode to %zu bytes, over the %zu-byte "
                            "message limit (lower deviceSplitCount)",
                            n, len, p->max_msg);
    }
    struct gv_plugin_device *copy = malloc((n ? n : 1) * sizeof(*copy));
    if (copy == NULL) {
        free(list);
        return gv_error_set(err, GV_ENOMEM, "ListAndWatch: out of memory");
    }
    if (n)
        memcpy(copy, devs, n * sizeof(*copy));
    pthread_mutex_lock(&p->lock);
    free(p->devs);
    p->devs = copy;
    p->n_devs = n;
    pthread_mutex_unlock(&p->lock);
    free(p->list);
    p->list = list;
    p->list_len = len;
    size_t k = broadcast(p, list, len, GV_GRPC_OK, NULL);
    gv_info("device list changed: %zu devices, %zu streams updated", n, k);
    return GV_OK;
}

size_t gv_plugin_list_size(const struct gv_plugin *p)
{
    return p->list_len;
}

size_t gv_plugin_watchers(const struct gv_plugin *p)
{
    size_t n = 0;
    for (struct watcher *w = p->watchers; w; w = w->next)
        n++;
    return n;
}

/* ---- unary methods ------------------------------------------------------- */

static void reply(struct gv_grpc_call *call, const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(len + 1);
    struct gv_error err;
    if (buf == NULL) {
        gv_grpc_call_finish(call, GV_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    protobuf_c_message_pack(msg, buf);
    if (gv_grpc_call_send(call, buf, len, &err) != GV_OK)
        gv_grpc_call_finish(call, GV_GRPC_RESOURCE_EXHAUSTED, err.msg);
    else
        gv_grpc_call_finish(call, GV_GRPC_OK, NULL);
    free(buf);
}

static void h_options(struct gv_grpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    (void)ud;
    V1beta1__Empty *e = v1beta1__empty__unpack(NULL, len, req);
    if (e == NULL) {
        gv_grpc_call_finish(call, GV_GRPC_INVALID_ARGUMENT,
                            "GetDevicePluginOptions: malformed Empty");
        return;
    }
    v1beta1__empty__free_unpacked(e, NULL);
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    o.pre_start_required = false;
    o.get_preferred_allocation_available = true;
    reply(call, &o.base);
}

static void h_prestart(struct gv_grpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    (void)ud;
    V1beta1__PreStartContainerRequest *r = v1beta1__pre_start_container_request__unpack(NULL, len,
                                                                                       req);
    if (r == NULL) {
        gv_grpc_call_finish(call, GV_GRPC_INVALID_ARGUMENT,
                            "PreStartContainer: malformed PreStartContainerRequest");
        return;
    }
    v1beta1__pre_start_container_request__free_unpacked(r, NULL);
    V1beta1__PreStartContainerResponse o = V1BETA1__PRE_START_CONTAINER_RESPONSE__INIT;
    reply(call, &o.base);
}

static const struct gv_plugin_device *find_dev(const struct gv_plugin *p, const char *id)
{
    for (size_t i = 0; i < p->n_devs; i++)
        if (strcmp(p->devs[i].id, id) == 0)
            return &p->devs[i];
    return NULL;
}

/*
 * A container asking for N devices gets N slices on N distinct GPUs, because
 * the scheduler's assignment (what Allocate really hands out) is per GPU:
 * the kubelet's own choice would otherwise pile slices onto one GPU and its
 * accounting would disagree with ours.  Ties go to the GPU with most free
 * slices, then to the order of the list.
 */
static void prefer_one(const struct gv_plugin *p, const V1beta1__ContainerPreferredAllocationRequest *r,
                       V1beta1__ContainerPreferredAllocationResponse *out, char **ids)
{
    size_t n = 0;
    size_t want = r->allocation_size > 0 ? (size_t)r->allocation_size : 0;
    bool *used = calloc(r->n_available_deviceids + 1, sizeof(*used));
    if (used == NULL)
        return;
    for (size_t i = 0; i < r->n_must_include_deviceids && n < want; i++)
        ids[n++] = r->must_include_deviceids[i];
    while (n < want) {
        ssize_t best = -1;
        size_t best_free = 0;
        bool best_distinct = false;
        for (size_t i = 0; i < r->n_available_deviceids; i++) {
            if (used[i])
                continue;
            const char *id = r->available_deviceids[i];
            bool taken = false;
            for (size_t k = 0; k < n; k++)
                taken |= strcmp(ids[k], id) == 0;
            if (taken)
                continue;
            const struct gv_plugin_device *d = find_dev(p, id);
            int gpu = d ? d->gpu : -1;
            bool distinct = true;
            for (size_t k = 0; k < n && gpu >= 0; k++) {
                const struct gv_plugin_device *o = find_dev(p, ids[k]);
                if (o && o->gpu == gpu)
                    distinct = false;
            }
            size_t nfree = 0;
            for (size_t j = 0; j < r->n_available_deviceids && gpu >= 0; j++) {
                const struct gv_plugin_device *o = find_dev(p, r->available_deviceids[j]);
                if (o && o->gpu == gpu)
                    nfree++;
            }
            if (best < 0 || (distinct && !best_distinct) ||
                (distinct == best_distinct && nfree > best_free)) {
                best = (ssize_t)i;
                best_free = nfree;
                best_distinct = distinct;
            }
        }
        if (best < 0)
            break;
        used[best] = true;
        ids[n++] = r->available_deviceids[best];
    }
    free(used);
    out->n_deviceids = n;
    out->deviceids = ids;
}

/*
 * Worker side: the preference comes from the pending assignment, which the
 * allocator may have to wait for (the kubelet can be a few ms ahead of the
 * pod watch), so it runs on a worker like Allocate.
 */
static void run_preferred(struct gv_plugin *p, struct job *j)
{
    V1beta1__PreferredAllocationRequest *r =
        v1beta1__preferred_allocation_request__unpack(NULL, j->len, j->req);
    if (r == NULL) {
        gv_grpc_server_complete(p->srv, j->call_id, GV_GRPC_INVALID_ARGUMENT,
                                "GetPreferredAllocation: malformed PreferredAllocationRequest",
                                NULL, 0);
        return;
    }
    size_t n = r->n_container_requests;
    V1beta1__PreferredAllocationResponse o = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
    V1beta1__ContainerPreferredAllocationResponse *cr = calloc(n + 1, sizeof(*cr));
    V1beta1__ContainerPreferredAllocationResponse **crp = calloc(n + 1, sizeof(*crp));
    char ***ids = calloc(n + 1, sizeof(*ids));
    bool ok = cr && crp && ids;
    for (size_t i = 0; ok && i < n; i++) {
        const V1beta1__ContainerPreferredAllocationRequest *c = r->container_requests[i];
        v1beta1__container_preferred_allocation_response__init(&cr[i]);
        crp[i] = &cr[i];
        ids[i] = calloc(c->n_available_deviceids + c->n_must_include_deviceids + 1,
                        sizeof(char *));
        if (ids[i] == NULL) {
            ok = false;
            break;
        }
        /* The pending assignment first: the kubelet then records the GPU we hand over. */
        size_t want = c->allocation_size > 0 ? (size_t)c->allocation_size : 0, got = 0;
        if (p->prefer && want && want <= c->n_available_deviceids + c->n_must_include_deviceids &&
            p->prefer(p->prefer_ud, (const char *const *)c->available_deviceids,
                      c->n_available_deviceids, (const char *const *)c->must_include_deviceids,
                      c->n_must_include_deviceids, want, (const char **)ids[i], &got) &&
            got == want) {
            cr[i].n_deviceids = got;
            cr[i].deviceids = ids[i];
        } else {
            pthread_mutex_lock(&p->lock);
            prefer_one(p, c, &cr[i], ids[i]);
            pthread_mutex_unlock(&p->lock);
        }
    }
    uint8_t *buf = NULL;
    size_t blen = 0;
    if (ok) {
        o.n_container_responses = n;
        o.container_responses = crp;
        blen = v1beta1__preferred_allocation_response__get_packed_size(&o);
        buf = malloc(blen + 1);
        ok = buf != NULL;
        if (ok)
            v1beta1__preferred_allocation_response__pack(&o, buf);
    }
    gv_grpc_server_complete(p->srv, j->call_id, ok ? GV_GRPC_OK : GV_GRPC_RESOURCE_EXHAUSTED,
                            ok ? NULL : "out of memory", buf, blen); /* takes buf */
    for (size_t i = 0; ids && i < n; i++)
        free(ids[i]);
    free(ids);
    free(cr);
    free(crp);
    v1beta1__preferred_allocation_request__free_unpacked(r, NULL);
}

/* ---- Allocate on workers ------------------------------------------------- */

static void free_container_response(V1beta1__ContainerAllocateResponse *r);

/* Worker side: decode, ask the allocator per container, encode, complete. */
static void run_allocate(struct gv_plugin *p, struct job *j)
{
    V1beta1__AllocateRequest *r = v1beta1__allocate_request__unpack(NULL, j->len, j->req);
    if (r == NULL) {
        gv_grpc_server_complete(p->srv, j->call_id, GV_GRPC_INVALID_ARGUMENT,
                                "Allocate: malformed AllocateRequest", NULL, 0);
        return;
    }
    size_t n = r->n_container_requests;
    V1beta1__AllocateResponse o = V1BETA1__ALLOCATE_RESPONSE__INIT;
    V1beta1__ContainerAllocateResponse **cr = calloc(n + 1, sizeof(*cr));
    int status = GV_GRPC_OK;
    char msg[512] = "";
    if (cr == NULL) {
        status = GV_GRPC_RESOURCE_EXHAUSTED;
        snprintf(msg, sizeof(msg), "Allocate: out of memory");
    }
    for (size_t i = 0; status == GV_GRPC_OK && i < n; i++) {
        cr[i] = calloc(1, sizeof(**cr));
        if (cr[i] == NULL) {
            status = GV_GRPC_RESOURCE_EXHAUSTED;
            snprintf(msg, sizeof(msg), "Allocate: out of memory");
            break;
        }
        v1beta1__container_allocate_response__init(cr[i]);
        const V1beta1__ContainerAllocateRequest *c = r->container_requests[i];
        status = p->allocate(p->allocate_ud, (const char *const *)c->devices_ids,
                             c->n_devices_ids, cr[i], msg, sizeof(msg));
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    if (status == GV_GRPC_OK) {
        o.n_container_responses = n;
        o.container_responses = cr;
        len = v1beta1__allocate_response__get_packed_size(&o);
        buf = malloc(len + 1);
        if (buf == NULL) {
            status = GV_GRPC_RESOURCE_EXHAUSTED;
            snprintf(msg, sizeof(msg), "Allocate: out of memory");
        } else {
            v1beta1__allocate_response__pack(&o, buf);
        }
    }
    gv_grpc_server_complete(p->srv, j->call_id, status, status == GV_GRPC_OK ? NULL : msg, buf,
                            len);
    for (size_t i = 0; cr && i < n; i++)
        free_container_response(cr[i]);
    free(cr);
    v1beta1__allocate_request__free_unpacked(r, NULL);
}

/*
 * The allocator builds responses with malloc'ed strings and arrays (see
 * gv_node_alloc_*), so the whole tree is released with free().
 */
static void free_container_response(V1beta1__ContainerAllocateResponse *r)
{
    if (r == NULL)
        return;
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void *worker_main(void *arg)
{
    struct gv_plugin *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        while (p->jobs == NULL && !p->quit)
            pthread_cond_wait(&p->cond, &p->lock);
        if (p->quit) {
            pthread_mutex_unlock(&p->lock);
            return NULL;
        }
        struct job *j = p->jobs;
        p->jobs = j->next;
        if (p->jobs == NULL)
            p->jobs_tail = NULL;
        pthread_mutex_unlock(&p->lock);
        j->run(p, j);
        free(j->req);
        free(j);
    }
}

static void enqueue(struct gv_plugin *p, struct gv_grpc_call *call, const uint8_t *req, size_t len,
                    void (*run)(struct gv_plugin *, struct job *))
{
    struct job *j = calloc(1, sizeof(*j));
    if (j == NULL || (j->req = malloc(len + 1)) == NULL) {
        free(j);
        gv_grpc_call_finish(call, GV_GRPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    memcpy(j->req, req, len);
    j->run = run;
    j->len = len;
    j->call_id = gv_grpc_call_id(call);
    pthread_mutex_lock(&p->lock);
    if (p->jobs_tail)
        p->jobs_tail->next = j;
    else
        p->jobs = j;
    p->jobs_tail = j;
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

static void h_allocate(struct gv_grpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    enqueue(ud, call, req, len, run_allocate);
}

static void h_preferred(struct gv_grpc_call *call, const uint8_t *req, size_t len, void *ud)
{
    enqueue(ud, call, req, len, run_preferred);
}

static const struct gv_grpc_method methods[] = {
    {"/v1beta1.DevicePlugin/GetDevicePluginOptions", h_options},
    {"/v1beta1.DevicePlugin/ListAndWatch", h_list_and_watch},
    {"/v1beta1.DevicePlugin/GetPreferredAllocation", h_preferred},
    {"/v1beta1.DevicePlugin/Allocate", h_allocate},
    {"/v1beta1.DevicePlugin/PreStartContainer", h_prestart},
};

gv_status gv_plugin_new(struct gv_loop *loop, const struct gv_plugin_config *cfg,
                        struct gv_plugin **out, struct gv_error *err)
{
    struct gv_plugin *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return gv_error_set(err, GV_ENOMEM, "plugin: out of memory");
    p->loop = loop;
    p->max_msg = cfg->max_msg ? cfg->max_msg : GV_GRPC_DEFAULT_MAX_MSG;
    p->allocate = cfg->allocate;
    p->allocate_ud = cfg->allocate_ud;
    p->prefer = cfg->prefer;
    p->prefer_ud = cfg->prefer_ud;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    struct gv_grpc_server_config sc = {
        .socket_path = cfg->socket_path,
        .methods = methods,
        .n_methods = sizeof(methods) / sizeof(methods[0]),
        .ud = p,
        .max_recv_msg = p->max_msg,
        .max_send_msg = p->max_msg,
    };
    if (gv_grpc_server_new(loop, &sc, &p->srv, err) != GV_OK)
        goto fail;
    if (gv_plugin_set_devices(p, NULL, 0, err) != GV_OK)
        goto fail;
    p->n_threads = cfg->workers ? cfg->workers : 4;
    p->threads = calloc(p->n_threads, sizeof(*p->threads));
    if (p->threads == NULL) {
        gv_error_set(err, GV_ENOMEM, "plugin: out of memory");
        goto fail;
    }
    for (unsigned i = 0; i < p->n_threads; i++) {
        if (pthread_create(&p->threads[i], NULL, worker_main, p) != 0) {
            p->n_threads = i;
            gv_error_set(err, GV_EINTERNAL, "plugin: cannot start Allocate workers");
            goto fail;
        }
    }
    *out = p;
    return GV_OK;
fail:
    gv_plugin_free(p);
    return err ? err->code : GV_EINTERNAL;
}

void gv_plugin_free(struct gv_plugin *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->lock);
    p->quit = true;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    free(p->threads);
    while (p->jobs) {
        struct job *j = p->jobs;
        p->jobs = j->next;
        free(j->req);
        free(j);
    }
    gv_grpc_server_free(p->srv); /* closes streams: watchers unlink themselves */
    while (p->watchers) {
        struct watcher *w = p->watchers;
        p->watchers = w->next;
        free(w);
    }
    free(p->devs);
    free(p->list);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    free(p);
}

gv_status gv_plugin_listen(struct gv_plugin *p, struct gv_error *err)
{
    return gv_grpc_server_listen(p->srv, err);
}

bool gv_plugin_socket_present(const struct gv_plugin *p)
{
    return gv_grpc_server_socket_present(p->srv);
}

void gv_plugin_shutdown(struct gv_plugin *p, int64_t grace_ms)
{
    p->stopping = true;
    broadcast(p, NULL, 0, GV_GRPC_UNAVAILABLE, "device plugin is shutting down");
    gv_grpc_server_shutdown(p->srv, grace_ms);
}

bool gv_plugin_stopping(const struct gv_plugin *p)
{
    return p->stopping;
}

bool gv_plugin_drained(const struct gv_plugin *p)
{
    return gv_grpc_server_drained(p->srv);
}
