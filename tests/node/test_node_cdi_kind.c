/*
 * CDI kinds (src/node/cdi_kind.c): the name rules its strictest consumers
 * apply (a spec with a kind they cannot parse is dropped whole), the node
 * config refusing such a kind, a default no other spec on the node claims,
 * and the other specs that claim ours found (issue 28; mutants
 * cdi-kind-unchecked, cdi-class-dot-allowed).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "node/discovery/gv_cdi.h"
#include "node/config/gv_config.h"

static void test_kind_rules(void **state)
{
    (void)state;
    static const char *const good[] = {"gpuvisor.io/gpu", "nvidia.com/gpu", "a/b",
                                       "vendor-1.example_x/class_2-b", "X9/Y9",
                                       /* the ends of each character range */
                                       "A/Z", "Z/A", "z/a0", "a9/z", "Az-0/zA_9"};
    /* the kinds issue 28 found written as given, and the rules' edges */
    static const char *const bad[] = {"gpu",  "gpuvisor.io/gpu.shared", "/gpu", "gpuvisor.io/",
                                       "1vendor/gpu", "vendor-/gpu", "vendor/-gpu", "vendor/gpu_",
                                       "ven dor/gpu", "vendor/gp/u", "vendor/gpu=0", ""};
    struct gv_error err = {0};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        if (gv_cdi_kind_check(good[i], &err) != GV_OK)
            fail_msg("%s refused: %s", good[i], err.msg);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (gv_cdi_kind_check(bad[i], &err) == GV_OK)
            fail_msg("\"%s\" accepted", bad[i]);
        assert_non_null(strstr(err.msg, "CDI kind"));
    }
    assert_int_equal(gv_cdi_kind_check("gpuvisor.io/gpu.shared", &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "the class"));
    assert_int_equal(gv_cdi_kind_check("/gpu", &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "the vendor is empty"));
    assert_int_equal(gv_cdi_kind_check("vendor/", &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "the class is empty"));
}

static void test_config_refuses_bad_kind_and_default_is_own(void **state)
{
    (void)state;
    struct gv_node_config *c = NULL;
    struct gv_error err = {0};
    assert_int_equal(gv_node_config_default(&c, &err), GV_OK);
    assert_string_equal(c->cdi_kind, "gpuvisor.io/gpu"); /* not nvidia-ctk's nvidia.com/gpu */
    assert_int_equal(gv_cdi_kind_check(c->cdi_kind, &err), GV_OK);
    gv_node_config_free(c);
    c = NULL;
    const char bad[] = "{\"cdi\": true, \"cdiKind\": \"gpu\"}";
    assert_int_not_equal(gv_node_config_parse(bad, strlen(bad), "node1", &c, &err), GV_OK);
    assert_null(c);
    assert_non_null(strstr(err.msg, "cdiKind"));
    const char good[] = "{\"cdi\": true, \"cdiKind\": \"example.com/accel\"}";
    assert_int_equal(gv_node_config_parse(good, strlen(good), "node1", &c, &err), GV_OK);
    assert_string_equal(c->cdi_kind, "example.com/accel");
    gv_node_config_free(c);
}

static void put(const char *dir, const char *name, const char *text)
{
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_claimed_kind_found(void **state)
{
    (void)state;
    const char *tmp = getenv("GV_TEST_TMP");
    char a[512], b[512], own[600], out[1024];
    snprintf(a, sizeof(a), "%s/cdi-etc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    snprintf(b, sizeof(b), "%s/cdi-run-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(a));
    assert_non_null(mkdtemp(b));
    /* nvidia-ctk's YAML, and JSON specs */
    put(a, "nvidia.yaml", "---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n");
    put(b, "other.json", "{\"cdiVersion\":\"0.5.0\",\"kind\":\"nvidia.com/gpu\",\"devices\":[]}");
    put(b, "gpuvisor-nvidia.com_gpu.json",
        "{\"cdiVersion\":\"0.5.0\",\"kind\":\"nvidia.com/gpu\",\"devices\":[]}");
    put(b, "mine.json", "{\"cdiVersion\":\"0.5.0\",\"kind\":\"gpuvisor.io/gpu\",\"devices\":[]}");
    put(b, "notes.txt", "kind: nvidia.com/gpu\n");
    snprintf(own, sizeof(own), "%s/gpuvisor-nvidia.com_gpu.json", b);
    const char *dirs[] = {a, b, "/nonexistent/cdi", NULL};
    assert_int_equal(gv_cdi_kind_claimed(dirs, "nvidia.com/gpu", own, out, sizeof(out)), 2);
    assert_non_null(strstr(out, "nvidia.yaml"));
    assert_non_null(strstr(out, "other.json"));
    assert_null(strstr(out, "gpuvisor-nvidia.com_gpu.json")); /* our own file */
    snprintf(own, sizeof(own), "%s/mine.json", b);
    assert_int_equal(gv_cdi_kind_claimed(dirs, "gpuvisor.io/gpu", own, out, sizeof(out)), 0);
    /* Other specs' kinds are read into a 256-byte buffer: one of 256 characters or more,
     * JSON or YAML, is no kind of ours and is not copied past the buffer (under the
     * sanitizer an overflow aborts; without it the copy would match). */
    char lk[300], text[700];
    memset(lk, 'k', sizeof(lk) - 1);
    lk[0] = 'v';
    lk[1] = '/';
    for (size_t len = 255; len <= 257; len++) {
        lk[len] = '\0';
        snprintf(text, sizeof(text), "{\"cdiVersion\":\"0.5.0\",\"kind\":\"%s\"}", lk);
        put(b, "long.json", text);
        snprintf(text, sizeof(text), "cdiVersion: 0.5.0\nkind: %s\n", lk);
        put(a, "long.yaml", text);
        assert_int_equal(gv_cdi_kind_claimed(dirs, lk, own, out, sizeof(out)), len < 256 ? 2 : 0);
        lk[len] = 'k';
    }
    char cmd[1100];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' '%s'", a, b);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kind_rules),
        cmocka_unit_test(test_config_refuses_bad_kind_and_default_is_own),
        cmocka_unit_test(test_claimed_kind_found),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
