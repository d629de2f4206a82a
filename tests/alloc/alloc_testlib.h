/* Small request builder and random stream shared by the engine's tests. */
#ifndef GV_ALLOC_TESTLIB_H
#define GV_ALLOC_TESTLIB_H

#include <stdio.h>

#include "alloc/gv_alloc.h"

/* xorshift64: the seeded, reproducible random stream of the engine's
 * property tests (the seed is printed and taken from the environment). */
static inline uint64_t at_xorshift(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

/* One container "main" asking n GPUs of mem MiB and milli compute each. */
static inline struct gv_alloc_request *simple_req(const char *uid, uint32_t n, uint64_t mem,
                                                  uint32_t milli)
{
    struct gv_alloc_request *r;
    assert_int_equal(gv_alloc_request_new(&r, NULL), GV_OK);
    snprintf(r->uid, sizeof(r->uid), "%s", uid);
    r->n_containers = 1;
    snprintf(r->containers[0].name, sizeof(r->containers[0].name), "main");
    r->containers[0].num_gpu = n;
    r->containers[0].mem_kind = GV_ALLOC_MEM_MIB;
    r->containers[0].mem = mem;
    r->containers[0].milli = milli;
    r->containers[0].priority = -1;
    return r;
}

#endif
