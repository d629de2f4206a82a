/*
 * String -> uint32 hash map with open addressing and linear probing.  Keys
 * are not stored: each slot keeps its key's hash tag and the value, and the
 * key is read from the object the value names (a node's name, a pod's uid),
 * so an entry costs 8 bytes and lookups never allocate.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc_internal.h"
#include "common/gv_hash.h"

#define REF_EMPTY 0u
#define REF_TOMB 1u
#define REF_OF(v) ((v) + 2u)
#define VAL_OF(r) ((r) - 2u)

void strmap_init(struct strmap *m, const char *(*key_of)(const void *ctx, uint32_t v),
                 const void *ctx)
{
    memset(m, 0, sizeof(*m));
    m->key_of = key_of;
    m->ctx = ctx;
}

void strmap_free(struct strmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->used = m->tombs = 0;
}

static uint32_t slot_of(const struct strmap *m, const char *key)
{
    return (uint32_t)(gv_hash_str(key) & (m->cap - 1));
}

/* The hash's high half, kept per slot: a probe reads the key (a cache miss
 * into the object it names) only when the tags agree. */
static uint32_t tag_of(uint64_t h)
{
    return (uint32_t)(h >> 32);
}

static bool slot_is(const struct strmap *m, const struct strmap_slot *sl, const char *key)
{
    return sl->ref > REF_TOMB && strcmp(m->key_of(m->ctx, VAL_OF(sl->ref)), key) == 0;
}

static uint32_t get_hashed(const struct strmap *m, const char *key, uint64_t h)
{
    uint32_t tag = tag_of(h);
    for (uint32_t i = (uint32_t)(h & (m->cap - 1));; i = (i + 1) & (m->cap - 1)) {
        const struct strmap_slot *sl = &m->slots[i];
        if (sl->ref == REF_EMPTY)
            return UINT32_MAX;
        if (sl->tag == tag && slot_is(m, sl, key))
            return VAL_OF(sl->ref);
    }
}

uint32_t strmap_get(const struct strmap *m, const char *key)
{
    if (m->cap == 0)
        return UINT32_MAX;
    return get_hashed(m, key, gv_hash_str(key));
}

/*
 * n lookups at once, with the memory of lookup i + AHEAD requested while
 * lookup i runs: one at a time, each waits for its slot and then its key
 * (two cache misses at 50,000 names); pipelined, the misses overlap.
 */
#define AHEAD 8
void strmap_get_many(const struct strmap *m, const char *const *keys, size_t n, uint32_t *out)
{
    uint64_t h[AHEAD];
    if (m->cap == 0) {
        for (size_t i = 0; i < n; i++)
            out[i] = UINT32_MAX;
        return;
    }
    for (size_t i = 0; i < n + AHEAD; i++) {
        if (i < n) {
            uint64_t x = gv_hash_str(keys[i]);
            uint32_t s = (uint32_t)(x & (m->cap - 1));
            __builtin_prefetch(&m->slots[s]);
            if (i >= AHEAD)
                out[i - AHEAD] = get_hashed(m, keys[i - AHEAD], h[i % AHEAD]);
            h[i % AHEAD] = x;
        } else if (i >= AHEAD) {
            out[i - AHEAD] = get_hashed(m, keys[i - AHEAD], h[i % AHEAD]);
        }
    }
}

static gv_status grow(struct strmap *m)
{
    uint32_t ncap = m->cap ? m->cap * 2 : 64;
    if (m->used - m->tombs < m->cap / 4 && m->cap > 0)
        ncap = m->cap; /* mostly tombstones: rehash in place size */
    struct strmap_slot *ns = calloc(ncap, sizeof(*ns));
    if (ns == NULL)
        return GV_ENOMEM;
    uint32_t used = 0;
    for (uint32_t i = 0; i < m->cap; i++) {
        if (m->slots[i].ref <= REF_TOMB)
            continue;
        const char *key = m->key_of(m->ctx, VAL_OF(m->slots[i].ref));
        uint32_t j = (uint32_t)(gv_hash_str(key) & (ncap - 1));
        while (ns[j].ref != REF_EMPTY)
            j = (j + 1) & (ncap - 1);
        ns[j] = m->slots[i];
        used++;
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    m->used = used;
    m->tombs = 0;
    return GV_OK;
}

gv_status strmap_put(struct strmap *m, const char *key, uint32_t val)
{
    if ((m->used + 1) * 4 > m->cap * 3) {
        gv_status rc = grow(m);
        if (rc != GV_OK)
            return rc;
    }
    uint32_t tomb = UINT32_MAX;
    uint64_t h = gv_hash_str(key);
    for (uint32_t i = (uint32_t)(h & (m->cap - 1));; i = (i + 1) & (m->cap - 1)) {
        struct strmap_slot *sl = &m->slots[i];
        if (sl->ref == REF_EMPTY) {
            if (tomb != UINT32_MAX) {
                sl = &m->slots[tomb];
                m->tombs--;
            } else {
                m->used++;
            }
            *sl = (struct strmap_slot){tag_of(h), REF_OF(val)};
            return GV_OK;
        }
        if (sl->ref == REF_TOMB) {
            if (tomb == UINT32_MAX)
                tomb = i;
        } else if (slot_is(m, sl, key)) {
            sl->ref = REF_OF(val);
            return GV_OK;
        }
    }
}

void strmap_del(struct strmap *m, const char *key)
{
    if (m->cap == 0)
        return;
    for (uint32_t i = slot_of(m, key);; i = (i + 1) & (m->cap - 1)) {
        struct strmap_slot *sl = &m->slots[i];
        if (sl->ref == REF_EMPTY)
            return;
        if (slot_is(m, sl, key)) {
            sl->ref = REF_TOMB;
            m->tombs++;
            return;
        }
    }
}
