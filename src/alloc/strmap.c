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
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}

static uint32_t slot_of(const struct strmap *m, const char *key)
{
    return (uint32_t)(gv_hash_str(key) & (m->cap - 1));
}

uint32_t strmap_get(const struct strmap *m, const char *key)
{
    if (m->cap == 0)
        return UINT32_MAX;
    for (uint32_t i = slot_of(m, key);; i = (i + 1) & (m->cap - 1)) {
        const char *k = m->keys[i];
        if (k == NULL)
            return UINT32_MAX;
        if (k != TOMB && strcmp(k, key) == 0)
            return m->vals[i];
    }
}

static gv_status grow(struct strmap *m)
{
    uint32_t ncap = m->cap ? m->cap * 2 : 64;
    if (m->used - m->tombs < m->cap / 4 && m->cap > 0)
        ncap = m->cap; /* mostly tombstones: rehash in place size */
    struct strmap n = {calloc(ncap, sizeof(*n.keys)), calloc(ncap, sizeof(*n.vals)), ncap, 0, 0};
    if (n.keys == NULL || n.vals == NULL) {
        strmap_free(&n);
        return GV_ENOMEM;
    }
    for (uint32_t i = 0; i < m->cap; i++) {
        if (m->keys[i] == NULL || m->keys[i] == TOMB)
            continue;
        uint32_t j = slot_of(&n, m->keys[i]);
        while (n.keys[j] != NULL)
            j = (j + 1) & (ncap - 1);
        n.keys[j] = m->keys[i];
        n.vals[j] = m->vals[i];
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
    for (uint32_t i = slot_of(m, key);; i = (i + 1) & (m->cap - 1)) {
        const char *k = m->keys[i];
        if (k == NULL) {
            if (tomb != UINT32_MAX) {
                i = tomb;
                m->tombs--;
            } else {
                m->used++;
            }
            m->keys[i] = key;
            m->vals[i] = val;
            return GV_OK;
        }
        if (k == TOMB) {
            if (tomb == UINT32_MAX)
                tomb = i;
        } else if (strcmp(k, key) == 0) {
            m->keys[i] = key;
            m->vals[i] = val;
            return GV_OK;
        }
    }
}

void strmap_del(struct strmap *m, const char *key)
{
    if (m->cap == 0)
        return;
    for (uint32_t i = slot_of(m, key);; i = (i + 1) & (m->cap - 1)) {
        const char *k = m->keys[i];
        if (k == NULL)
            return;
        if (k != TOMB && strcmp(k, key) == 0) {
            m->keys[i] = TOMB;
            m->tombs++;
            return;
        }
    }
}
