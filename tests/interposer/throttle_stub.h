/*
 * A driver stand-in for the compute throttle's unit tests (test_throttle.c,
 * test_throttle_ops.c), so that both drive gv_throttle the same way: a clock
 * only the test moves (a sleep advances it), events whose calls all work or
 * all fail, and the scratch directory and fake libcuda.so.1 the tests run
 * beside.
 */
#ifndef GV_TESTS_THROTTLE_STUB_H
#define GV_TESTS_THROTTLE_STUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "interposer/throttle.h"

struct throttle_stub {
    uint64_t now;           /* the clock; sleep_ns advances it */
    bool events_fail;       /* every event call fails: a driver that cannot time */
    int records;            /* events recorded so far */
    int capturing;          /* what stream_capturing answers */
    const char *key_prefix; /* device keys are "<prefix>-<ordinal>" */
};

/* The state the stand-in's operations read and write. */
extern struct throttle_stub g_stub;

/* Operations over g_stub: each event elapses 1 us, when events work. */
struct gv_throttle_ops throttle_stub_ops(void);

/*
 * Makes <$GV_TEST_TMP or /tmp>/<name>-XXXXXX (its path in dir) and loads
 * $BUILD/tests/fakes/libcuda.so.1 as the interposer loads a driver.
 * 0, or -1 with the reason on stderr.
 */
int throttle_stub_setup(const char *name, char *dir, size_t cap, void **driver);
/* Removes the directory and unloads the driver. */
void throttle_stub_teardown(const char *dir, void *driver);

#endif
