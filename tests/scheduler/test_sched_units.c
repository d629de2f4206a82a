/* Scheduler internals with no I/O: RFC 3339 times from annotations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/sched_internal.h"

static void test_parse_time(void **state)
{
    (void)state;
    time_t t = 0;
    assert_int_equal(gv_sched_parse_time("2026-11-21T05:52:47Z", &t), 0);
    assert_int_equal((long)t, 1795240367L);
    assert_int_equal(gv_sched_parse_time("2026-11-21T05:52:47.123456Z", &t), 0);
    assert_int_equal((long)t, 1795240367L);
    assert_int_equal(gv_sched_parse_time("2026-11-21T07:52:47+02:00", &t), 0);
    assert_int_equal((long)t, 1795240367L);
    assert_int_equal(gv_sched_parse_time("2026-11-21T04:52:47-01:00", &t), 0);
    assert_int_equal((long)t, 1795240367L);
    static const char *bad[] = {"",
                                "2026-11-21",
                                "2026-11-21T05:52:47",
                                "2026-11-21T05:52:47Zjunk",
                                "2026-11-21T05:52:47.Z",
                                "2026-11-21T05:52:47+2:00",
                                "2026-11-21T05:52:47+24:00",
                                "yesterday"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (gv_sched_parse_time(bad[i], &t) == 0)
            fail_msg("'%s' accepted", bad[i]);
    assert_int_not_equal(gv_sched_parse_time(NULL, &t), 0);
}

static void test_format_roundtrip(void **state)
{
    (void)state;
    struct timespec ts = {1795240367, 123456789};
    char buf[48];
    gv_sched_format_time(&ts, buf, sizeof(buf));
    assert_string_equal(buf, "2026-11-21T05:52:47.123456Z");
    time_t t = 0;
    assert_int_equal(gv_sched_parse_time(buf, &t), 0);
    assert_int_equal((long)t, 1795240367L);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_time),
        cmocka_unit_test(test_format_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
