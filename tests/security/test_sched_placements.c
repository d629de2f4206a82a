/*
 * The scheduler's side of placement signing (src/scheduler/placement_guard.c):
 * which pods' placements the informer may count, with and without a key,
 * and the upgrade window for unsigned placements of pods the API server
 * created before a cutoff.  Also: a bind's signature verifies where the
 * node agent checks it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <string.h>

#include "common/gv_log.h"
#include "scheduler/placement_guard.h"

#define KEY "sched-key-0123456789abcdef0123456789abcdef"
#define AT "2026-11-26T06:00:00.000000Z"
#define ASG "v1;node=gpu-1;c=GPU-0:1000:0"

static json_t *pod_of(const char *uid, const char *created, const char *sig)
{
    json_t *p = json_pack("{s:{s:s,s:s,s:s,s:s,s:{s:s,s:s,s:s}}}", "metadata", "uid", uid, "name",
                          uid, "namespace", "tenant", "creationTimestamp", created, "annotations",
                          "gpuvisor.io/assignment", ASG, "gpuvisor.io/assigned-node", "gpu-1",
                          "gpuvisor.io/assigned-at", AT);
    if (sig != NULL)
        json_object_set_new(json_object_get(json_object_get(p, "metadata"), "annotations"),
                            GV_PLACEMENT_SIG_ANNOTATION, json_string(sig));
    return p;
}

static void test_trust_rules(void **state)
{
    (void)state;
    gv_log_set_level(GV_LOG_ERROR);
    struct gv_sched_config cfg;
    assert_int_equal(gv_sched_config_default(&cfg, NULL), GV_OK);
    /* Keyless, a bind carries no signature (and signing is no error). */
    char none[GV_PLACEMENT_SIG_MAX] = "stale";
    assert_int_equal(gv_sched_placement_sign(&cfg, "s-1", "gpu-1", AT, ASG, none, sizeof(none), NULL),
                     GV_OK);
    assert_string_equal(none, "");
    json_t *unsigned_old = pod_of("u-old", "2026-01-01T00:00:00Z", NULL);
    json_t *unsigned_new = pod_of("u-new", "2026-12-01T00:00:00Z", NULL);
    /* No key (library use, or --insecure-unsigned-placements): taken as written. */
    assert_true(gv_sched_placement_trusted(&cfg, unsigned_new));

    assert_int_equal(gv_placement_key_parse(KEY, strlen(KEY), &cfg.placement_key, NULL), GV_OK);
    char sig[GV_PLACEMENT_SIG_MAX];
    struct gv_error err = {0};
    assert_int_equal(gv_sched_placement_sign(&cfg, "s-1", "gpu-1", AT, ASG, sig, sizeof(sig), &err),
                     GV_OK);
    json_t *signed_pod = pod_of("s-1", "2026-12-01T00:00:00Z", sig);
    json_t *moved = pod_of("s-2", "2026-12-01T00:00:00Z", sig); /* same signature, other pod */
    unsigned long long before = gv_sched_placements_rejected();
    assert_true(gv_sched_placement_trusted(&cfg, signed_pod));
    assert_false(gv_sched_placement_trusted(&cfg, unsigned_old));
    assert_false(gv_sched_placement_trusted(&cfg, unsigned_new));
    assert_false(gv_sched_placement_trusted(&cfg, moved));
    assert_int_equal(gv_sched_placements_rejected() - before, 3);

    /* Upgrade window: unsigned placements of pods created before the cutoff
     * count; newer ones, and any with a wrong signature, do not. */
    cfg.unsigned_before = 1795651200; /* 2026-11-26T00:00:00Z */
    assert_true(gv_sched_placement_trusted(&cfg, unsigned_old));
    assert_false(gv_sched_placement_trusted(&cfg, unsigned_new));
    json_t *old_forged = pod_of("f-old", "2026-01-01T00:00:00Z", "v1.00");
    assert_false(gv_sched_placement_trusted(&cfg, old_forged));
    json_t *no_ts = json_deep_copy(unsigned_old);
    json_object_del(json_object_get(no_ts, "metadata"), "creationTimestamp");
    assert_false(gv_sched_placement_trusted(&cfg, no_ts));
    /* Strictly before the cutoff, in the API server's own form (UTC, "Z" or
     * fractional seconds): anything else about the clock is not trusted. */
    struct {
        const char *created;
        bool trusted;
    } clock[] = {
        {"2026-11-25T23:59:59Z", true},     {"2026-11-25T23:59:59.999999Z", true},
        {"2026-11-26T00:00:00Z", false},    {"2026-11-26T00:00:00.000001Z", false},
        {"2026-01-01T00:00:00", false},     {"2026-01-01T00:00:00+05:00", false},
        {"2026-01-01T00:00:00 Z", false},   {"2026-01-01", false},
        {"not a time", false},
    };
    for (size_t i = 0; i < sizeof(clock) / sizeof(clock[0]); i++) {
        json_t *p = pod_of("u-clock", clock[i].created, NULL);
        if (gv_sched_placement_trusted(&cfg, p) != clock[i].trusted)
            fail_msg("created %s: trusted should be %d", clock[i].created, clock[i].trusted);
        json_decref(p);
    }

    /* The bind's signature is what the node agent verifies. */
    struct gv_placement_policy pol = {.key = cfg.placement_key};
    assert_int_equal(gv_placement_admit(&pol, signed_pod, &err), GV_OK);

    json_decref(no_ts);
    json_decref(old_forged);
    json_decref(moved);
    json_decref(signed_pod);
    json_decref(unsigned_new);
    json_decref(unsigned_old);
    gv_sched_config_clear(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_trust_rules)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
