/* Tables beside the engine: nodes (agent state) and pod records, as sorted
 * pointer arrays searched with bsearch.  Inserts are O(n) moves of pointers,
 * which at 5,000 nodes costs microseconds and keeps memory to one pointer
 * per entry.  Nodes are ordered by (name hash, name) with the hashes in a
 * parallel array: a filter looks up every candidate, and a binary search
 * over 40 KB of hashes touches one node name instead of thirteen (it was a
 * fifth of a 5,000-node filter). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gv_hash.h"
#include "contracts/inventory.h"
#include "scheduler/sched_internal.h"

double gv_sched_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Binary search over n sorted entries; cmp orders entry i against the key
 * held in ctx.  Returns the index, or the insert point with *found false. */
static size_t bisect(size_t n, int (*cmp)(const void *ctx, size_t i), const void *ctx,
                     bool *found)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp(ctx, mid);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

struct by_name {
    void *const *arr; /* structs whose first member is a string pointer */
    const char *key;
};

static int cmp_by_name(const void *ctx, size_t i)
{
    const struct by_name *b = ctx;
    return strcmp(*(char *const *)b->arr[i], b->key);
}

/* Index of key in a sorted array of structs whose first member is a string
 * pointer; *found tells whether it is there (else it is the insert point). */
static size_t search(void *const *arr, size_t n, const char *key, bool *found)
{
    struct by_name b = {arr, key};
    return bisect(n, cmp_by_name, &b, found);
}

static int insert_at(void ***arr, size_t *n, size_t *cap, size_t pos, void *item)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        void **na = realloc(*arr, nc * sizeof(*na));
        if (na == NULL)
            return -1;
        *arr = na;
        *cap = nc;
    }
    memmove(*arr + pos + 1, *arr + pos, (*n - pos) * sizeof(**arr));
    (*arr)[pos] = item;
    (*n)++;
    return 0;
}

static void remove_at(void **arr, size_t *n, size_t pos)
{
    memmove(arr + pos, arr + pos + 1, (*n - pos - 1) * sizeof(*arr));
    (*n)--;
}

struct by_hash {
    const struct gv_sched *s;
    uint64_t h;
    const char *name;
    size_t base; /* entry i of the search is node base + i */
};

static int cmp_by_hash(const void *ctx, size_t i)
{
    const struct by_hash *b = ctx;
    uint64_t mh = b->s->node_hash[b->base + i];
    return mh < b->h ? -1 : mh > b->h ? 1 : strcmp(b->s->nodes[b->base + i]->name, b->name);
}

/*
 * Directory over the hash order: about one entry per node, so the range of
 * a hash's top bits holds one node or two and a lookup reads that range
 * only, instead of 16 halvings across the array (a quarter of a 50,000-name
 * filter).  Inserts and removes mark it stale (they halve, as before); the
 * next gv_sched_node_find rebuilds it, O(nodes), once per change of the
 * node set.  Without memory for it the search halves.
 */
static void dir_rebuild(struct gv_sched *s)
{
    unsigned bits = 1;
    while (((size_t)1 << bits) < s->n_nodes && bits < 30)
        bits++;
    uint32_t *d = realloc(s->node_dir, (((size_t)1 << bits) + 1) * sizeof(*d));
    s->dir_dirty = false;
    if (d == NULL) {
        free(s->node_dir);
        s->node_dir = NULL;
        return;
    }
    size_t i = 0;
    for (size_t b = 0; b <= ((size_t)1 << bits); b++) {
        while (i < s->n_nodes && (s->node_hash[i] >> (64 - bits)) < b)
            i++;
        d[b] = (uint32_t)i;
    }
    s->node_dir = d;
    s->dir_bits = bits;
}

/* Index of name (hash h) in s->nodes, or its insert point (*found false). */
static size_t node_search(const struct gv_sched *s, uint64_t h, const char *name, bool *found)
{
    size_t lo = 0, hi = s->n_nodes;
    if (s->node_dir != NULL && !s->dir_dirty) {
        size_t b = (size_t)(h >> (64 - s->dir_bits));
        lo = s->node_dir[b];
        hi = s->node_dir[b + 1];
    }
    struct by_hash key = {s, h, name, lo};
    return lo + bisect(hi - lo, cmp_by_hash, &key, found);
}

struct snode *gv_sched_node_find(struct gv_sched *s, const char *name)
{
    /* A stale directory is rebuilt by the batch lookup (a filter) only:
     * rebuilding it here made adding n nodes one at a time, each looked up
     * once, O(n^2) (1.6 s of a 50,000-node start); one lookup halves. */
    bool found;
    size_t i = node_search(s, gv_hash_str(name), name, &found);
    return found ? s->nodes[i] : NULL;
}

/*
 * out[i] = gv_sched_node_find(s, names[i]) for a filter's candidates, in
 * passes over blocks of names, each pass a loop whose iterations do not
 * depend on one another: hash every name; find every hash in its directory
 * range; confirm every name on its record.  The processor then has the
 * cache misses of many names in flight at once (a record costs a few ns
 * instead of a memory latency); one lookup after another, each waiting for
 * its previous step, cost about 100 ns a name at 50,000 nodes.
 */
#define FIND_BLOCK 64
#define RANGE_SCAN 16 /* longer directory ranges are halved (node_search) */
void gv_sched_nodes_find(struct gv_sched *s, const char *const *names, size_t n,
                         struct snode **out)
{
    if (s->dir_dirty)
        dir_rebuild(s);
    if (s->node_dir == NULL) {
        for (size_t i = 0; i < n; i++)
            out[i] = gv_sched_node_find(s, names[i]);
        return;
    }
    const unsigned shift = 64 - s->dir_bits;
    uint64_t h[FIND_BLOCK];
    uint32_t at[FIND_BLOCK];
    for (size_t base = 0; base < n; base += FIND_BLOCK) {
        size_t m = n - base < FIND_BLOCK ? n - base : FIND_BLOCK;
        const char *const *nm = names + base;
        for (size_t j = 0; j < m; j++)
            h[j] = gv_hash_str(nm[j]);
        /* the first entry >= the hash in its range (UINT32_MAX: a long
         * range, searched by halving below) */
        for (size_t j = 0; j < m; j++) {
            uint32_t k = s->node_dir[h[j] >> shift], hi = s->node_dir[(h[j] >> shift) + 1];
            if (hi - k > RANGE_SCAN) {
                at[j] = UINT32_MAX;
                continue;
            }
            while (k < hi && s->node_hash[k] < h[j])
                k++;
            at[j] = k;
        }
        /* request every record of the block before the first is read */
        for (size_t j = 0; j < m; j++)
            if (at[j] < s->n_nodes)
                __builtin_prefetch(s->nodes[at[j]]->name);
        for (size_t j = 0; j < m; j++) {
            struct snode *found = NULL;
            if (at[j] == UINT32_MAX) {
                bool hit;
                size_t f = node_search(s, h[j], nm[j], &hit);
                found = hit ? s->nodes[f] : NULL;
            } else {
                /* equal hashes are ordered by name: try each */
                for (uint32_t k = at[j]; k < s->n_nodes && s->node_hash[k] == h[j]; k++)
                    if (strcmp(s->nodes[k]->name, nm[j]) == 0) {
                        found = s->nodes[k];
                        break;
                    }
            }
            out[base + j] = found;
        }
    }
}

size_t gv_sched_node_after(struct gv_sched *s, const char *name)
{
    bool found;
    size_t i = node_search(s, gv_hash_str(name), name, &found);
    return found ? i + 1 : i;
}

size_t gv_sched_rec_after(struct gv_sched *s, const char *uid)
{
    bool found;
    size_t i = search((void *const *)s->recs, s->n_recs, uid, &found);
    return found ? i + 1 : i;
}

struct srec *gv_sched_rec_find(struct gv_sched *s, const char *uid)
{
    bool found;
    size_t i = search((void *const *)s->recs, s->n_recs, uid, &found);
    return found ? s->recs[i] : NULL;
}

struct srec *gv_sched_rec_get(struct gv_sched *s, const char *uid, const char *ns, const char *name)
{
    bool found;
    size_t i = search((void *const *)s->recs, s->n_recs, uid, &found);
    if (found)
        return s->recs[i];
    struct srec *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return NULL;
    r->uid = strdup(uid);
    r->ns = strdup(ns ? ns : "");
    r->name = strdup(name ? name : "");
    r->since = gv_sched_now();
    if (r->uid == NULL || r->ns == NULL || r->name == NULL ||
        insert_at((void ***)&s->recs, &s->n_recs, &s->cap_recs, i, r) != 0) {
        free(r->uid);
        free(r->ns);
        free(r->name);
        free(r);
        return NULL;
    }
    return r;
}

static void rec_free(struct srec *r)
{
    free(r->uid);
    free(r->ns);
    free(r->name);
    free(r->node);
    free(r->encoded);
    free(r->rv);
    free(r);
}

void gv_sched_rec_drop(struct gv_sched *s, const char *uid)
{
    bool found;
    size_t i = search((void *const *)s->recs, s->n_recs, uid, &found);
    if (!found)
        return;
    struct srec *r = s->recs[i];
    remove_at((void **)s->recs, &s->n_recs, i);
    rec_free(r);
}

void gv_sched_forget_pod(struct gv_sched *s, const char *uid)
{
    if (gv_alloc_is_placed(s->cluster, uid))
        gv_alloc_release(s->cluster, uid, NULL);
    gv_sched_rec_drop(s, uid);
}

static int replace_str(char **slot, const char *v)
{
    char *c = NULL;
    if (v != NULL && (c = strdup(v)) == NULL)
        return -1;
    free(*slot);
    *slot = c;
    return 0;
}

gv_status gv_sched_rec_set(struct srec *r, enum rec_phase phase, const char *node,
                           const char *encoded, const char *rv)
{
    if (replace_str(&r->node, node) != 0 || replace_str(&r->encoded, encoded) != 0 ||
        replace_str(&r->rv, rv) != 0)
        return GV_ENOMEM;
    r->phase = phase;
    r->bind_unknown = false;
    r->since = gv_sched_now();
    return GV_OK;
}

struct snode *gv_sched_node_add(struct gv_sched *s, const char *name)
{
    bool found;
    uint64_t h = gv_hash_str(name);
    size_t i = node_search(s, h, name, &found);
    if (found)
        return s->nodes[i];
    if (s->n_nodes == s->cap_nodes) {
        /* Grow the hashes first: insert_at grows s->nodes to the same cap. */
        size_t nc = s->cap_nodes ? s->cap_nodes * 2 : 64;
        uint64_t *nh = realloc(s->node_hash, nc * sizeof(*nh));
        if (nh == NULL)
            return NULL;
        s->node_hash = nh;
    }
    size_t len = strlen(name) + 1;
    struct snode *n = calloc(1, sizeof(*n) + len);
    if (n == NULL || insert_at((void ***)&s->nodes, &s->n_nodes, &s->cap_nodes, i, n) != 0) {
        free(n);
        return NULL;
    }
    memcpy(n->name, name, len);
    memmove(s->node_hash + i + 1, s->node_hash + i, (s->n_nodes - 1 - i) * sizeof(*s->node_hash));
    s->node_hash[i] = h;
    s->dir_dirty = true;
    return n;
}

void gv_sched_node_remove(struct gv_sched *s, const char *name)
{
    bool found;
    size_t i = node_search(s, gv_hash_str(name), name, &found);
    if (!found)
        return;
    struct snode *n = s->nodes[i];
    remove_at((void **)s->nodes, &s->n_nodes, i);
    memmove(s->node_hash + i, s->node_hash + i + 1, (s->n_nodes - i) * sizeof(*s->node_hash));
    s->dir_dirty = true;
    free(n->reason);
    free(n);
}

void gv_sched_tables_free(struct gv_sched *s)
{
    while (s->n_nodes > 0)
        gv_sched_node_remove(s, s->nodes[s->n_nodes - 1]->name);
    free(s->nodes);
    free(s->node_hash);
    s->node_hash = NULL;
    free(s->node_dir);
    s->node_dir = NULL;
    s->cap_nodes = 0;
    for (size_t i = 0; i < s->n_recs; i++)
        rec_free(s->recs[i]);
    free(s->recs);
    s->nodes = NULL;
    s->recs = NULL;
    s->n_nodes = s->n_recs = 0;
}

/* RFC 3339 as Kubernetes writes it: "2026-11-21T05:52:47Z", optionally with
 * fractional seconds and a numeric offset. */
int gv_sched_parse_time(const char *text, time_t *out)
{
    if (text == NULL)
        return -1;
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *p = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm);
    if (p == NULL)
        return -1;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return -1;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    long offset = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int sign = *p == '-' ? -1 : 1;
        int hh, mm;
        if (p[1] < '0' || p[1] > '9' || p[2] < '0' || p[2] > '9' || p[3] != ':' || p[4] < '0' ||
            p[4] > '9' || p[5] < '0' || p[5] > '9')
            return -1;
        hh = (p[1] - '0') * 10 + (p[2] - '0');
        mm = (p[4] - '0') * 10 + (p[5] - '0');
        if (hh > 23 || mm > 59)
            return -1;
        offset = sign * (hh * 3600L + mm * 60L);
        p += 6;
    } else {
        return -1;
    }
    if (*p != '\0')
        return -1;
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return -1;
    *out = t - offset;
    return 0;
}

/* Microseconds: the node agent admits pods in gpuvisor.io/assigned-at order,
 * and two binds to one node often fall within the same second. */
void gv_sched_format_time(const struct timespec *ts, char *buf, size_t cap)
{
    struct tm tm;
    char sec[32];
    gmtime_r(&ts->tv_sec, &tm);
    strftime(sec, sizeof(sec), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, cap, "%s.%06ldZ", sec, ts->tv_nsec / 1000);
}

/* Keep in step with gv_sched_node_usable (sched_internal.h). */
const char *gv_sched_node_unusable(struct gv_sched *s, const struct snode *n, time_t now, char *buf,
                                   size_t cap)
{
    if (n == NULL)
        return "no gpuvisor inventory for this node (gpuvisor-node not running here?)";
    switch (n->state) {
    case NODE_NO_INVENTORY:
        return "no gpuvisor inventory for this node (gpuvisor-node not running here?)";
    case NODE_MALFORMED:
        snprintf(buf, cap, "gpuvisor-node inventory unusable: %s", n->reason ? n->reason : "?");
        return buf;
    case NODE_OK:
        break;
    }
    if (n->heartbeat == 0) {
        snprintf(buf, cap, "gpuvisor-node agent stale: no readable %s",
                 GV_INVENTORY_HEARTBEAT_ANNOTATION);
        return buf;
    }
    if (now - n->heartbeat > s->cfg.heartbeat_timeout_s) {
        snprintf(buf, cap, "gpuvisor-node agent stale: last heartbeat %lds ago (limit %lds)",
                 (long)(now - n->heartbeat), s->cfg.heartbeat_timeout_s);
        return buf;
    }
    return NULL;
}
