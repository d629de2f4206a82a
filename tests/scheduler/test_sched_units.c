/* Scheduler internals with no I/O: RFC 3339 times from annotations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "scheduler/bind_inflight.h"
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

/* The node table found by hash position (sched_state.c): every node added
 * is found, removed ones are not, the order holds, whatever the names. */
static void test_node_table_lookup(void **state)
{
    (void)state;
    static struct gv_sched s;
    memset(&s, 0, sizeof(s));
    enum { N = 3000 };
    char name[N][24];
    srand(7);
    for (int i = 0; i < N; i++) {
        snprintf(name[i], sizeof(name[i]), i % 3 ? "node-%d" : "gpu-%x-%d", i, rand());
        assert_non_null(gv_sched_node_add(&s, name[i]));
        assert_ptr_equal(gv_sched_node_add(&s, name[i]), gv_sched_node_find(&s, name[i]));
    }
    assert_int_equal(s.n_nodes, N);
    for (size_t i = 1; i < s.n_nodes; i++)
        assert_true(s.node_hash[i - 1] < s.node_hash[i] ||
                    (s.node_hash[i - 1] == s.node_hash[i] &&
                     strcmp(s.nodes[i - 1]->name, s.nodes[i]->name) < 0));
    for (int i = 0; i < N; i += 2)
        gv_sched_node_remove(&s, name[i]);
    for (int i = 0; i < N; i++) {
        struct snode *n = gv_sched_node_find(&s, name[i]);
        if (i % 2 == 0)
            assert_null(n);
        else
            assert_string_equal(n->name, name[i]);
    }
    assert_null(gv_sched_node_find(&s, "absent"));
    /* the batched lookup of a filter: same answers, in order */
    static const char *names[N + 1];
    static struct snode *got[N + 1];
    for (int i = 0; i < N; i++)
        names[i] = name[N - 1 - i];
    names[N] = "absent";
    gv_sched_node_add(&s, "added-late"); /* directory stale: rebuilt first */
    gv_sched_nodes_find(&s, names, N + 1, got);
    for (int i = 0; i <= N; i++)
        assert_ptr_equal(got[i], gv_sched_node_find(&s, names[i]));
    gv_sched_tables_free(&s);
}

/* The node table under churn (adds and removes between batched lookups,
 * so the directory goes stale and is rebuilt many times, through several
 * sizes): each name is found by the single and the batched lookup exactly
 * when a scan of the sorted array has it. */
static void test_node_table_churn(void **state)
{
    (void)state;
    static struct gv_sched s;
    memset(&s, 0, sizeof(s));
    enum { POOL = 700, STEPS = 6000 };
    static char name[POOL][24];
    static bool in[POOL];
    static const char *names[POOL];
    static struct snode *got[POOL];
    srand(11);
    for (int i = 0; i < POOL; i++) {
        /* short and long names (the hash reads eight bytes at a time) */
        snprintf(name[i], sizeof(name[i]), i % 2 ? "n%d" : "gpu-node-%d-%x", i, rand() % 4096);
        names[i] = name[i];
    }
    for (int step = 0; step < STEPS; step++) {
        int i = rand() % POOL;
        if (in[i])
            gv_sched_node_remove(&s, name[i]);
        else
            assert_non_null(gv_sched_node_add(&s, name[i]));
        in[i] = !in[i];
        if (step % 500 != 499)
            continue;
        gv_sched_nodes_find(&s, names, POOL, got);
        size_t live = 0;
        for (int k = 0; k < POOL; k++) {
            struct snode *scan = NULL;
            for (size_t j = 0; j < s.n_nodes; j++)
                if (strcmp(s.nodes[j]->name, name[k]) == 0)
                    scan = s.nodes[j];
            assert_true((scan != NULL) == in[k]);
            assert_ptr_equal(gv_sched_node_find(&s, name[k]), scan);
            assert_ptr_equal(got[k], scan);
            live += in[k];
        }
        assert_int_equal(s.n_nodes, live);
    }
    gv_sched_tables_free(&s);
}

/* The bind journal names its entries by pod uid, which reaches the
 * extender in kube-scheduler's bind request: only what the API server
 * issues (letters, digits, '-', at most 64) becomes a file name; nothing
 * that climbs, nests or hides is written, and unjournal removes nothing
 * for it either. */
static void test_journal_names_only_uids(void **state)
{
    (void)state;
    static struct gv_sched s;
    memset(&s, 0, sizeof(s));
    char dir[256], sub[300], path[400];
    const char *base = getenv("GV_TEST_TMP");
    snprintf(dir, sizeof(dir), "%s/gv-journal-XXXXXX", base != NULL ? base : "/tmp");
    assert_non_null(mkdtemp(dir));
    snprintf(sub, sizeof(sub), "%s/j", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    s.cfg.bind_journal_dir = sub;
    static const char *const ok[] = {"0e8f4c1a-5b6d-4e2f-9a7b-3c2d1e0f9a8b", "0", "9", "a", "z",
                                     "A", "Z", "-"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        if (!gv_sched_inflight_journal(&s, ok[i], "ns", "p", "node-1", "v1;node=node-1"))
            fail_msg("uid '%s' not journaled", ok[i]);
        snprintf(path, sizeof(path), "%s/%s", sub, ok[i]);
        assert_int_equal(access(path, F_OK), 0);
        gv_sched_inflight_unjournal(&s, ok[i]);
        assert_int_not_equal(access(path, F_OK), 0);
    }
    char longest[66];
    memset(longest, 'a', 65);
    longest[65] = '\0';
    static const char *const bad[] = {"", ".", "..", "../x", "a/b", "a b", "a.b", "a_b", ".x",
                                      "x\n", "@", "[", "`", "{", "/"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (gv_sched_inflight_journal(&s, bad[i], "ns", "p", "node-1", "v1;node=node-1"))
            fail_msg("uid '%s' journaled", bad[i]);
    assert_false(gv_sched_inflight_journal(&s, longest, "ns", "p", "node-1", "v1;node=node-1"));
    longest[64] = '\0'; /* 64 is still a name */
    assert_true(gv_sched_inflight_journal(&s, longest, "ns", "p", "node-1", "v1;node=node-1"));
    gv_sched_inflight_unjournal(&s, longest);
    assert_false(gv_sched_inflight_journal(&s, NULL, "ns", "p", "node-1", "v1;node=node-1"));
    snprintf(path, sizeof(path), "%s/x", dir);
    assert_int_not_equal(access(path, F_OK), 0); /* "../x" wrote nothing beside the journal */
    assert_int_equal(rmdir(sub), 0);               /* empty: nothing written in it either */
    assert_int_equal(rmdir(dir), 0);
    /* no journal directory configured: nothing journaled */
    s.cfg.bind_journal_dir = NULL;
    assert_false(gv_sched_inflight_journal(&s, ok[0], "ns", "p", "node-1", "v1;node=node-1"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_time),
        cmocka_unit_test(test_node_table_lookup),
        cmocka_unit_test(test_node_table_churn),
        cmocka_unit_test(test_format_roundtrip),
        cmocka_unit_test(test_journal_names_only_uids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
