/*
 * Tests for src/common/gv_jalloc: where jansson's allocations land (heap,
 * scratch region, zone), that zone pages go back to the kernel when their
 * last object dies (whichever thread frees it), and the fallbacks to malloc.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/gv_jalloc.h"
#include "common/gv_sanitizer.h"

static size_t page_size(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

static uintptr_t page_of(const void *p)
{
    return (uintptr_t)p & ~(uintptr_t)(page_size() - 1);
}

static bool resident(uintptr_t page)
{
    unsigned char v = 0;
    assert_int_equal(mincore((void *)page, page_size(), &v), 0);
    return v & 1;
}

static int setup(void **state)
{
    (void)state;
    gv_jalloc_init();
    gv_jalloc_init(); /* idempotent */
    return 0;
}

static void test_zone_places_only_inside_enter_leave(void **state)
{
    (void)state;
    struct gv_jzone *z = NULL;
    struct gv_error err;
    assert_int_equal(gv_jzone_new(1 << 20, &z, &err), GV_OK);
    json_t *before = json_string("heap");
    gv_jzone_enter(z);
    json_t *in = json_pack("{s:s, s:[i, i]}", "uid", "0b5c", "n", 1, 2);
    gv_jalloc_leave();
    json_t *after = json_string("heap again");
    assert_non_null(in);
    assert_false(gv_jzone_owns(z, before));
    assert_true(gv_jzone_owns(z, in));
    assert_true(gv_jzone_owns(z, json_object_get(in, "n")));
    assert_false(gv_jzone_owns(z, after));
    assert_int_equal(gv_jzone_pages_in_use(z), 1);
    /* Objects work as any other: read, modified outside the zone, freed. */
    assert_string_equal(json_string_value(json_object_get(in, "uid")), "0b5c");
    json_object_set_new(in, "later", json_true());
    assert_int_equal(json_object_size(in), 3);
    json_decref(in);
    json_decref(before);
    json_decref(after);
    gv_jzone_free(z);
}

/* Fills whole pages, then frees them: each page is dropped from memory
 * once its last object is gone, and its address is reused. */
static void test_zone_pages_return_when_their_objects_die(void **state)
{
    (void)state;
    struct gv_jzone *z = NULL;
    struct gv_error err;
    assert_int_equal(gv_jzone_new(1 << 20, &z, &err), GV_OK);
    enum { N = 400 };
    json_t *obj[N];
    gv_jzone_enter(z);
    for (int i = 0; i < N; i++) {
        obj[i] = json_integer(i); /* 32 bytes each: over 100 per page */
        assert_true(gv_jzone_owns(z, obj[i]));
    }
    gv_jalloc_leave();
    uintptr_t first = page_of(obj[0]), last = page_of(obj[N - 1]);
    assert_true(last > first);
    size_t pages = gv_jzone_pages_in_use(z);
    assert_int_equal(pages, (last - first) / page_size() + 1);
    assert_true(resident(first));
    /* Free every object of the first page but one: the page stays. */
    size_t on_first = 0;
    while (on_first < N && page_of(obj[on_first]) == first)
        on_first++;
    for (size_t i = 1; i < on_first; i++)
        json_decref(obj[i]);
    assert_int_equal(gv_jzone_pages_in_use(z), pages);
    assert_int_equal(json_integer_value(obj[0]), 0); /* the survivor is intact */
    json_decref(obj[0]);
    assert_int_equal(gv_jzone_pages_in_use(z), pages - 1);
    assert_false(resident(first));
    /* The current (last) page is kept for the next form even when empty. */
    for (size_t i = on_first; i < N; i++)
        json_decref(obj[i]);
    assert_int_equal(gv_jzone_pages_in_use(z), 1);
    /* Freed pages are reused before fresh ones: the zone does not creep. */
    for (int round = 0; round < 50; round++) {
        gv_jzone_enter(z);
        for (int i = 0; i < N; i++)
            obj[i] = json_integer(i);
        gv_jalloc_leave();
        for (int i = 0; i < N; i++) {
            assert_true(page_of(obj[i]) >= first && page_of(obj[i]) <= last + page_size());
            json_decref(obj[i]);
        }
    }
    assert_int_equal(gv_jzone_pages_in_use(z), 1);
    gv_jzone_free(z);
}

struct drop_job {
    json_t **objs;
    size_t n;
};

static void *drop_all(void *arg)
{
    struct drop_job *j = arg;
    for (size_t i = 0; i < j->n; i++)
        json_decref(j->objs[i]);
    return NULL;
}

/* Readers on other threads hold the last reference to cached forms. */
static void test_zone_objects_freed_on_other_threads(void **state)
{
    (void)state;
    struct gv_jzone *z = NULL;
    struct gv_error err;
    assert_int_equal(gv_jzone_new(4 << 20, &z, &err), GV_OK);
    enum { THREADS = 4, PER = 3000 };
    static json_t *objs[THREADS][PER];
    gv_jzone_enter(z);
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < PER; i++)
            objs[t][i] = json_sprintf("pod-%d-%d", t, i); /* interleaved across pages */
    gv_jalloc_leave();
    assert_true(gv_jzone_pages_in_use(z) > 10);
    pthread_t th[THREADS];
    struct drop_job jobs[THREADS];
    for (int t = 0; t < THREADS; t++) {
        jobs[t] = (struct drop_job){objs[t], PER};
        assert_int_equal(pthread_create(&th[t], NULL, drop_all, &jobs[t]), 0);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    assert_int_equal(gv_jzone_pages_in_use(z), 1);
    gv_jzone_free(z);
}

/* What the zone cannot take comes from malloc and is freed there. */
static void test_zone_falls_back_to_malloc(void **state)
{
    (void)state;
    struct gv_jzone *z = NULL;
    struct gv_error err;
    size_t ps = page_size();
    assert_int_equal(gv_jzone_new(4 * ps, &z, &err), GV_OK); /* 1 stack page, 3 object pages */
    char *big = malloc(ps * 2);
    memset(big, 'x', ps * 2 - 1);
    big[ps * 2 - 1] = '\0';
    gv_jzone_enter(z);
    json_t *large = json_string(big); /* the copy of the text is larger than a page */
    enum { N = 1000 };
    json_t *obj[N];
    for (int i = 0; i < N; i++)
        obj[i] = json_integer(i); /* ~130 per page: the zone fills up */
    gv_jalloc_leave();
    free(big);
    assert_true(gv_jzone_owns(z, large));
    assert_false(gv_jzone_owns(z, json_string_value(large)));
    assert_int_equal(strlen(json_string_value(large)), ps * 2 - 1);
    assert_int_equal(gv_jzone_pages_in_use(z), 3);
    assert_true(gv_jzone_owns(z, obj[0]));
    assert_false(gv_jzone_owns(z, obj[N - 1]));
    for (int i = 0; i < N; i++) {
        assert_int_equal(json_integer_value(obj[i]), i);
        json_decref(obj[i]);
    }
    json_decref(large);
    assert_int_equal(gv_jzone_pages_in_use(z), 1);
    gv_jzone_free(z);
}

#if GV_ASAN
/* Under ASan, touching an object whose page went back is reported like a
 * use after free of malloc'd memory (in a child: the report ends it). */
static void test_zone_use_after_release_caught_by_asan(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        struct gv_jzone *z = NULL;
        struct gv_error err;
        if (gv_jzone_new(1 << 20, &z, &err) != GV_OK)
            _exit(0);
        enum { N = 300 };
        json_t *obj[N];
        gv_jzone_enter(z);
        for (int i = 0; i < N; i++)
            obj[i] = json_integer(i); /* spills onto later pages: the first one is retired */
        gv_jalloc_leave();
        volatile json_int_t *stale = &((json_int_t *)(void *)obj[0])[1];
        for (int i = 0; i < N && page_of(obj[i]) == page_of(obj[0]); i++)
            json_decref(obj[i]);
        json_int_t v = *stale; /* the page is released: ASan must stop here */
        (void)v;
        _exit(0);
    }
    close(fds[1]);
    char report[8192], sink[4096];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof(report) - 1 && (r = read(fds[0], report + got, sizeof(report) - 1 - got)) > 0)
        got += (size_t)r;
    report[got] = '\0';
    while (read(fds[0], sink, sizeof(sink)) > 0) /* drain: a blocked child would never exit */
        ;
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_false(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (strstr(report, "use-after-poison") == NULL)
        fail_msg("no ASan report of the stale read: %s", report);
}
#endif

static void test_zone_limits(void **state)
{
    (void)state;
    struct gv_jzone *z[GV_JZONE_MAX + 1] = {0};
    struct gv_error err;
    assert_int_equal(gv_jzone_new(page_size(), &z[0], &err), GV_EINVAL);
    assert_non_null(strstr(err.msg, "zone"));
    for (int i = 0; i < GV_JZONE_MAX; i++)
        assert_int_equal(gv_jzone_new(1 << 16, &z[i], &err), GV_OK);
    assert_int_equal(gv_jzone_new(1 << 16, &z[GV_JZONE_MAX], &err), GV_EUNAVAILABLE);
    gv_jzone_free(z[1]);
    assert_int_equal(gv_jzone_new(1 << 16, &z[1], &err), GV_OK); /* a freed slot is reusable */
    for (int i = 0; i < GV_JZONE_MAX; i++)
        gv_jzone_free(z[i]);
    gv_jzone_free(NULL);
}

static void test_scratch_region(void **state)
{
    (void)state;
    struct gv_jscratch s;
    gv_jscratch_open(&s, 64 << 10);
    assert_true(s.base != 0);
    gv_jscratch_enter(&s);
    json_t *tree = json_loads("{\"items\":[1,2,3],\"name\":\"x\"}", 0, NULL);
    char *big = malloc(128 << 10);
    memset(big, 'y', (128 << 10) - 1);
    big[(128 << 10) - 1] = '\0';
    json_t *spill = json_string(big); /* does not fit: malloc */
    gv_jalloc_leave();
    free(big);
    assert_non_null(tree);
    assert_true((uintptr_t)tree >= s.base && (uintptr_t)tree < s.end);
    assert_false((uintptr_t)json_string_value(spill) >= s.base &&
                 (uintptr_t)json_string_value(spill) < s.end);
    /* What outlives the region is copied out first. */
    json_t *copy = json_deep_copy(tree);
    assert_false((uintptr_t)copy >= s.base && (uintptr_t)copy < s.end);
    gv_jscratch_enter(&s);
    json_decref(tree); /* frees inside the region do nothing */
    json_decref(spill); /* a spilled one is really freed */
    gv_jalloc_leave();
    gv_jscratch_close(&s);
    assert_int_equal(s.base, 0);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(copy, "items"), 2)), 3);
    json_decref(copy);
    /* A region that could not be mapped places nothing. */
    struct gv_jscratch none;
    gv_jscratch_open(&none, SIZE_MAX & ~(size_t)0xfff);
    assert_int_equal(none.base, 0);
    gv_jscratch_enter(&none);
    json_t *plain = json_string("heap");
    gv_jalloc_leave();
    assert_non_null(plain); /* from malloc, usable like any other */
    assert_string_equal(json_string_value(plain), "heap");
    json_decref(plain);
    gv_jscratch_close(&none);
}

/*
 * The hook itself, through jansson's own pointer to it: exact sizes at a
 * page's or a region's end, what a zone covers, what closing a region
 * gives back.
 */
static void test_hook_edges(void **state)
{
    (void)state;
    json_malloc_t hmalloc = NULL;
    json_free_t hfree = NULL;
    json_get_alloc_funcs(&hmalloc, &hfree);
    assert_non_null(hmalloc);
    assert_non_null(hfree);
    size_t ps = page_size();
    enum { PAGES = 64 };
    struct gv_jzone *z = NULL;
    struct gv_error err;
    assert_int_equal(gv_jzone_new(PAGES * ps, &z, &err), GV_OK);
    gv_jzone_enter(z);
    char *a = hmalloc(16);
    assert_true(gv_jzone_owns(z, a));
    uintptr_t page = page_of(a);
    /* the rest of the page, exactly: it fits there, not on a new page */
    size_t rest = page + ps - ((uintptr_t)a + 16);
    char *b = hmalloc(rest);
    assert_ptr_equal(b, a + 16);
    assert_int_equal(gv_jzone_pages_in_use(z), 1);
    /* more than a page's room never takes a page: malloc */
    char *big = hmalloc(ps);
    assert_false(gv_jzone_owns(z, big));
    assert_int_equal(gv_jzone_pages_in_use(z), 1);
    char *c = hmalloc(16); /* the page is full: the next one */
    assert_true(gv_jzone_owns(z, c));
    assert_int_equal(page_of(c), page + ps);
    /* an object as large as a page's whole room takes a page of its own */
    size_t room = ps - ((uintptr_t)a - page);
    char *whole = hmalloc(room);
    assert_true(gv_jzone_owns(z, whole));
    assert_int_equal((uintptr_t)whole, page + 2 * ps + ((uintptr_t)a - page));
    gv_jalloc_leave();
    hfree(whole);
    /* the zone's object pages are its own, its page stack and beyond are not */
    uintptr_t pages = page; /* the first object page */
    size_t stack_pages = (PAGES * sizeof(uint32_t) + ps - 1) / ps;
    uintptr_t end = pages + (PAGES - stack_pages) * ps;
    assert_true(gv_jzone_owns(z, (void *)pages));
    assert_false(gv_jzone_owns(z, (void *)(pages - 1)));
    assert_true(gv_jzone_owns(z, (void *)(end - 1)));
    assert_false(gv_jzone_owns(z, (void *)end));
    hfree(big);
    hfree(a);
    hfree(b);
    hfree(c);
    gv_jzone_free(z);

    /* the smallest zone: one stack page, one object page; sizes past what
     * the page stack can number are refused before anything is mapped */
    assert_int_equal(gv_jzone_new(2 * ps, &z, &err), GV_OK);
    gv_jzone_free(z);
    z = NULL;
    assert_int_equal(gv_jzone_new(((size_t)UINT32_MAX + 1) * ps, &z, &err), GV_EINVAL);
    assert_null(z);

    /* a region: its last bytes, exactly, are its own */
    struct gv_jscratch s;
    gv_jscratch_open(&s, 4 * ps);
    assert_true(s.base != 0);
    gv_jscratch_enter(&s);
    char *x = hmalloc(ps);
    char *y = hmalloc(3 * ps);
    char *spill = hmalloc(16);
    gv_jalloc_leave();
    assert_ptr_equal(x, (char *)s.base);
    assert_ptr_equal(y, (char *)s.base + ps);
    assert_false((uintptr_t)spill >= s.base && (uintptr_t)spill < s.end);
    hfree(spill);
    /* closing unmaps it: the kernel no longer knows the range */
    uintptr_t was = s.base;
    gv_jscratch_close(&s);
    unsigned char v = 0;
    assert_int_equal(mincore((void *)was, ps, &v), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zone_places_only_inside_enter_leave),
        cmocka_unit_test(test_zone_pages_return_when_their_objects_die),
        cmocka_unit_test(test_zone_objects_freed_on_other_threads),
        cmocka_unit_test(test_zone_falls_back_to_malloc),
#if GV_ASAN
        cmocka_unit_test(test_zone_use_after_release_caught_by_asan),
#endif
        cmocka_unit_test(test_zone_limits),
        cmocka_unit_test(test_scratch_region),
        cmocka_unit_test(test_hook_edges),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
