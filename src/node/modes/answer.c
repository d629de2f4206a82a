/*
 * Building a container's Allocate answer (see answer_internal.h): the
 * protobuf-c repeated fields of the response, the limits file's lines, and
 * what modes add through gv_mode_answer_* (gv_mode.h).  allocator.c adds
 * the visible devices and the interposer's part.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node/modes/answer_internal.h"
#include "node/modes/gv_mode.h"


/*
 * Appends a new element to one of the answer's protobuf-c repeated fields
 * (pointer array arr of n): out is the element, or NULL with b->oom set.
 * A macro so that each field keeps its own type (no casts through void **).
 */
#define ANSWER_APPEND(b, arr, n, out)                                                              \
    do {                                                                                           \
        void *grown_ = realloc((arr), ((n) + 1) * sizeof(*(arr)));                                \
        (out) = malloc(sizeof(*(out)));                                                            \
        if (grown_ != NULL)                                                                        \
            (arr) = grown_;                                                                        \
        if (grown_ == NULL || (out) == NULL) {                                                     \
            free(out);                                                                             \
            (out) = NULL;                                                                          \
            (b)->oom = true;                                                                       \
        } else {                                                                                   \
            (arr)[(n)++] = (out);                                                                  \
        }                                                                                          \
    } while (0)

void gv_answer_env(struct gv_mode_answer *b, const char *key, const char *value, bool limit)
{
    V1beta1__ContainerAllocateResponse__EnvsEntry *e;
    ANSWER_APPEND(b, b->r->envs, b->r->n_envs, e);
    if (e == NULL)
        return;
    v1beta1__container_allocate_response__envs_entry__init(e);
    e->key = strdup(key);
    e->value = strdup(value);
    if (!e->key || !e->value)
        b->oom = true;
    if (limit) {
        size_t add = strlen(key) + strlen(value) + 2;
        char *l = realloc(b->limits, b->limits_len + add + 1);
        if (l == NULL) {
            b->oom = true;
            return;
        }
        b->limits = l;
        b->limits_len += (size_t)sprintf(l + b->limits_len, "%s=%s\n", key, value);
    }
}

void gv_answer_mount(struct gv_mode_answer *b, const char *host, const char *ctr, bool ro)
{
    V1beta1__Mount *m;
    ANSWER_APPEND(b, b->r->mounts, b->r->n_mounts, m);
    if (m == NULL)
        return;
    v1beta1__mount__init(m);
    m->host_path = strdup(host);
    m->container_path = strdup(ctr);
    m->read_only = ro;
    if (!m->host_path || !m->container_path)
        b->oom = true;
}

static void add_cdi_name(struct gv_mode_answer *b, const char *name)
{
    V1beta1__CDIDevice *d;
    ANSWER_APPEND(b, b->r->cdi_devices, b->r->n_cdi_devices, d);
    if (d == NULL)
        return;
    v1beta1__cdidevice__init(d);
    d->name = strdup(name);
    if (!d->name)
        b->oom = true;
}

void gv_answer_cdi(struct gv_mode_answer *b, const char *kind, const char *uuid)
{
    char name[256];
    snprintf(name, sizeof(name), "%s=%s", kind, uuid);
    add_cdi_name(b, name);
}

static void add_device(struct gv_mode_answer *b, const char *host, const char *ctr,
                       const char *perms)
{
    V1beta1__DeviceSpec *d;
    ANSWER_APPEND(b, b->r->devices, b->r->n_devices, d);
    if (d == NULL)
        return;
    v1beta1__device_spec__init(d);
    d->host_path = strdup(host);
    d->container_path = strdup(ctr);
    d->permissions = strdup(perms);
    if (!d->host_path || !d->container_path || !d->permissions)
        b->oom = true;
}

/* ---- what modes add (gv_mode.h) ------------------------------------------------- */

void gv_mode_answer_env(struct gv_mode_answer *b, const char *key, const char *value)
{
    gv_answer_env(b, key, value, false);
}

void gv_mode_answer_limit(struct gv_mode_answer *b, const char *key, const char *value)
{
    gv_answer_env(b, key, value, true);
}

void gv_mode_answer_mount(struct gv_mode_answer *b, const char *host, const char *ctr, bool ro)
{
    gv_answer_mount(b, host, ctr, ro);
}

void gv_mode_answer_device(struct gv_mode_answer *b, const char *host, const char *ctr,
                           const char *perms)
{
    add_device(b, host, ctr, perms);
}

void gv_mode_answer_cdi(struct gv_mode_answer *b, const char *name)
{
    add_cdi_name(b, name);
}

void gv_mode_answer_visible(struct gv_mode_answer *b, const char *uuid)
{
    for (size_t i = 0; i < b->n_visible; i++)
        if (strcmp(b->visible[i], uuid) == 0)
            return;
    if (b->n_visible < GV_ALLOC_MAX_DEVICES)
        snprintf(b->visible[b->n_visible++], GV_ALLOC_UUID_MAX, "%s", uuid);
}

void gv_mode_answer_interposer(struct gv_mode_answer *b)
{
    b->interposer = true;
}
