/* ResourceQuota table (src/scheduler/quota.c): HAMi's keys, limits, charges. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/quota.h"

static json_t *rq(const char *ns, const char *name, const char *hard)
{
    json_t *h = json_loads(hard, 0, NULL);
    assert_non_null(h);
    return json_pack("{s:{s:s,s:s},s:{s:o}}", "metadata", "namespace", ns, "name", name, "spec",
                     "hard", h);
}

static bool gone_uid(void *ud, const char *uid)
{
    return strcmp(uid, (const char *)ud) != 0; /* false only for ud */
}

static void test_quota_table(void **state)
{
    (void)state;
    struct gv_quota *q = gv_quota_new("nvidia.com/gpumem", "nvidia.com/gpucores");
    char why[256];
    /* no quota: anything fits */
    assert_true(gv_quota_fits(q, "a", "p0", 1u << 30, 1000, NULL, NULL, why, sizeof(why)));
    /* limits. and requests. forms; the smaller wins; foreign keys ignored */
    json_t *o = rq("a", "q1", "{\"limits.nvidia.com/gpumem\":\"8000\","
                             "\"requests.nvidia.com/gpumem\":\"6000\",\"pods\":\"4\"}");
    gv_quota_object(q, o, false);
    assert_true(gv_quota_fits(q, "a", "p1", 6000, 0, NULL, NULL, why, sizeof(why)));
    assert_false(gv_quota_fits(q, "a", "p1", 6001, 0, NULL, NULL, why, sizeof(why)));
    assert_non_null(strstr(why, "exceeded quota q1: nvidia.com/gpumem used 0 + asked 6001 > "
                                "limit 6000 (namespace a)"));
    assert_true(gv_quota_fits(q, "b", "p1", 60000, 0, NULL, NULL, why, sizeof(why))); /* other ns */
    /* charges add up; a pod's own charge is not counted twice; released ones drop */
    gv_quota_charge(q, "p1", "a", 4000, 50);
    assert_false(gv_quota_fits(q, "a", "p2", 2001, 0, NULL, NULL, why, sizeof(why)));
    assert_true(gv_quota_fits(q, "a", "p1", 6000, 0, NULL, NULL, why, sizeof(why)));
    /* gone_uid(ud, uid): every pod but ud still placed */
    assert_false(gv_quota_fits(q, "a", "p2", 6000, 0, gone_uid, "nobody", why, sizeof(why)));
    assert_true(gv_quota_fits(q, "a", "p2", 6000, 0, gone_uid, "p1", why, sizeof(why)));
    assert_true(gv_quota_fits(q, "a", "p2", 6000, 0, NULL, NULL, why, sizeof(why))); /* dropped */
    /* a second object: every one applies; cores too */
    json_t *o2 = rq("a", "q2", "{\"limits.nvidia.com/gpucores\":\"30\"}");
    gv_quota_object(q, o2, false);
    assert_false(gv_quota_fits(q, "a", "p3", 0, 31, NULL, NULL, why, sizeof(why)));
    assert_non_null(strstr(why, "q2: nvidia.com/gpucores"));
    /* a fraction rounds down; a value that is no quantity admits nothing */
    json_t *bad = rq("a", "q2", "{\"limits.nvidia.com/gpucores\":\"1500m\"}");
    gv_quota_object(q, bad, false);
    assert_true(gv_quota_fits(q, "a", "p3", 0, 1, NULL, NULL, why, sizeof(why)));
    assert_false(gv_quota_fits(q, "a", "p3", 0, 2, NULL, NULL, why, sizeof(why)));
    json_decref(bad);
    bad = rq("a", "q2", "{\"limits.nvidia.com/gpucores\":\"lots\"}");
    gv_quota_object(q, bad, false);
    assert_false(gv_quota_fits(q, "a", "p3", 0, 1, NULL, NULL, why, sizeof(why)));
    assert_non_null(strstr(why, "limit 0"));
    assert_true(gv_quota_fits(q, "a", "p3", 0, 0, NULL, NULL, why, sizeof(why)));
    /* deleted: no limit */
    gv_quota_object(q, o, true);
    assert_true(gv_quota_fits(q, "a", "p9", 1u << 30, 0, NULL, NULL, why, sizeof(why)));
    json_decref(o);
    json_decref(o2);
    json_decref(bad);
    gv_quota_free(q);
}

/* A gpumem quota of 0, or one that cannot be read (no quantity, a JSON
 * number, a negative value), admits no memory at all: failing open would
 * lift the limit (mutants quota-zero-unlimited, quota-unreadable-unlimited). */
static void test_zero_and_unreadable_gpumem_admit_nothing(void **state)
{
    (void)state;
    static const char *const hards[] = {
        "{\"limits.nvidia.com/gpumem\":\"0\"}",
        "{\"requests.nvidia.com/gpumem\":\"0\"}",
        "{\"limits.nvidia.com/gpumem\":\"lots\"}",
        "{\"limits.nvidia.com/gpumem\":8000}",
        "{\"limits.nvidia.com/gpumem\":\"-5\"}",
        "{\"limits.nvidia.com/gpumem\":\"8000\",\"requests.nvidia.com/gpumem\":\"x\"}",
    };
    for (size_t i = 0; i < sizeof(hards) / sizeof(hards[0]); i++) {
        struct gv_quota *q = gv_quota_new("nvidia.com/gpumem", "nvidia.com/gpucores");
        char why[256] = "";
        json_t *o = rq("a", "q0", hards[i]);
        gv_quota_object(q, o, false);
        if (gv_quota_fits(q, "a", "p1", 1, 0, NULL, NULL, why, sizeof(why)))
            fail_msg("quota %s admitted 1 MiB", hards[i]);
        assert_non_null(strstr(why, "exceeded quota q0: nvidia.com/gpumem used 0 + asked 1 > "
                                    "limit 0"));
        /* no memory asked: nothing to refuse; another namespace: not limited */
        assert_true(gv_quota_fits(q, "a", "p1", 0, 5, NULL, NULL, why, sizeof(why)));
        assert_true(gv_quota_fits(q, "b", "p1", 1000, 0, NULL, NULL, why, sizeof(why)));
        json_decref(o);
        gv_quota_free(q);
    }
}

/* limits.* and requests.* together: the smaller holds, in either order, 0 included; an
 * object naming nothing of ours, or no namespace, changes nothing and breaks nothing. */
static void test_smaller_of_two_keys_and_odd_objects(void **state)
{
    (void)state;
    static const char *const hards[] = {
        "{\"limits.nvidia.com/gpumem\":\"0\",\"requests.nvidia.com/gpumem\":\"8000\"}",
        "{\"limits.nvidia.com/gpumem\":\"8000\",\"requests.nvidia.com/gpumem\":\"0\"}",
        "{\"limits.nvidia.com/gpumem\":\"3000\",\"requests.nvidia.com/gpumem\":\"5000\"}",
        "{\"limits.nvidia.com/gpumem\":\"5000\",\"requests.nvidia.com/gpumem\":\"3000\"}",
    };
    static const uint64_t most[] = {0, 0, 3000, 3000};
    char why[256];
    for (size_t i = 0; i < sizeof(hards) / sizeof(hards[0]); i++) {
        struct gv_quota *q = gv_quota_new("nvidia.com/gpumem", "nvidia.com/gpucores");
        json_t *o = rq("a", "q", hards[i]);
        gv_quota_object(q, o, false);
        if (most[i] > 0)
            assert_true(gv_quota_fits(q, "a", "p", most[i], 0, NULL, NULL, why, sizeof(why)));
        if (gv_quota_fits(q, "a", "p", most[i] + 1, 0, NULL, NULL, why, sizeof(why)))
            fail_msg("%s: %llu MiB admitted", hards[i], (unsigned long long)most[i] + 1);
        json_decref(o);
        gv_quota_free(q);
    }
    struct gv_quota *q = gv_quota_new("nvidia.com/gpumem", "nvidia.com/gpucores");
    /* nothing of ours, on an empty table and beside a real one */
    json_t *other = rq("a", "pods", "{\"pods\":\"10\"}");
    gv_quota_object(q, other, false);
    gv_quota_object(q, other, true);
    json_t *o = rq("a", "q", "{\"limits.nvidia.com/gpumem\":\"100\"}");
    gv_quota_object(q, o, false);
    gv_quota_object(q, other, false);
    assert_false(gv_quota_fits(q, "a", "p", 101, 0, NULL, NULL, why, sizeof(why)));
    /* no namespace or name: not a quota anyone can be held to */
    json_t *anon = json_pack("{s:{s:s},s:{s:{s:s}}}", "metadata", "name", "x", "spec", "hard",
                             "limits.nvidia.com/gpumem", "1");
    gv_quota_object(q, anon, false);
    assert_true(gv_quota_fits(q, "b", "p", 5000, 0, NULL, NULL, why, sizeof(why)));
    json_decref(anon);
    anon = json_pack("{s:{s:s},s:{s:{s:s}}}", "metadata", "namespace", "b", "spec", "hard",
                     "limits.nvidia.com/gpumem", "1");
    gv_quota_object(q, anon, false);
    assert_true(gv_quota_fits(q, "b", "p", 5000, 0, NULL, NULL, why, sizeof(why)));
    json_decref(anon);
    json_decref(other);
    json_decref(o);
    gv_quota_free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_quota_table),
                                       cmocka_unit_test(test_zero_and_unreadable_gpumem_admit_nothing),
                                       cmocka_unit_test(test_smaller_of_two_keys_and_odd_objects)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
