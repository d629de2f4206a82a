/*
 * String -> uint32 hash map with open addressing and linear probing.  Keys
 * are borrowed from the objects they name (node names, pod uids), so an
 * entry costs 12 bytes and lookups never allocate.
 */
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc_internal.h"
#include "common/gv_hash.h"

#define TOMB ((const char *)&tomb_marker)
static const char tomb_marker;

void strmap_free(struct strmap *m)
{
    free(m->slots);
    memset(m, 0, sizeof(*m));
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

static uint32_t get_hashed(const struct strmap *m, const char *key, uint64_t h)
{
    uint32_t tag = tag_of(h);
    for (uint32_t i = (uint32_t)(h & (m->cap - 1));; i = (i + 1) & (m->cap - 1)) {
        const struct strmap_slot *sl = &m->slots[i];
        if (sl->key == NULL)
            return UINT32_MAX;
        if (sl->tag == tag && sl->key != TOMB && strcmp(sl->key, key) == 0)
            return sl->val;
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
    struct strmap n = {calloc(ncap, sizeof(*n.slots)), ncap, 0, 0};
    if (n.slots == NULL) {
        strmap_free(&n);
        return GV_ENOMEM;
    }
    for (uint32_t i = 0; i < m->cap; i++) {
        if (m->slots[i].key == NULL || m->slots[i].key == TOMB)
            continue;
        uint32_t j = (uint32_t)(gv_hash_str(m->slots[i].key) & (ncap - 1));
        while (n.slots[j].key != NULL)
            j = (j + 1) & (ncap - 1);
        n.slots[j] = m->slots[i];
        n.used++;
    }
    strmap_free(m);
    *m = n;
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
        if (sl->key == NULL) {
            if (tomb != UINT32_MAX) {
                sl = &m->slots[tomb];
                m->tombs--;
            } else {
                m->used++;
            }
            *sl = (struct strmap_slot){key, val, tag_of(h)};
            return GV_OK;
        }
        if (sl->key == TOMB) {
            if (tomb == UINT32_MAX)
                tomb = i;
        } else if (strcmp(sl->key, key) == 0) {
            sl->key = key;
            sl->val = val;
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
        if (sl->key == NULL)
            return;
        if (sl->key != TOMB && strcmp(sl->key, key) == 0) {
            sl->key = TOMB;
            m->tombs++;
            return;
        }
    }
}
