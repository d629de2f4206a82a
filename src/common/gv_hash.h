/*
 * String hash shared by the engine's name maps and the scheduler's node
 * table: FNV-1a, then MurmurHash3's 64-bit finaliser so that every bit
 * depends on every byte.  The scheduler's node directory indexes by the top
 * bits: FNV-1a alone barely moves them for names that differ in their last
 * characters (node-00000 ... node-49999 put a name in a range of 11 nodes on
 * average, up to 30, where 1.8 is expected).  Inline: it runs once per
 * candidate node of a filter.  Nothing stores these values.
 */
#ifndef GV_HASH_H
#define GV_HASH_H

#include <stdint.h>

static inline uint64_t gv_hash_str(const char *s)
{
    uint64_t h = UINT64_C(1469598103934665603);
    for (; *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= UINT64_C(1099511628211);
    }
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h *= UINT64_C(0xc4ceb9fe1a85ec53);
    return h ^ (h >> 33);
}

#endif
