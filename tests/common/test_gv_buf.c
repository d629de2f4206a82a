/* Tests for src/common/gv_buf: growth, NUL termination, the size cap. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "common/gv_buf.h"

static void test_append_grows_and_terminates(void **state)
{
    (void)state;
    struct gv_buf b = {0};
    assert_null(b.data);
    char chunk[1000];
    size_t total = 0;
    for (int i = 0; i < 100; i++) {
        memset(chunk, 'a' + i % 26, sizeof(chunk));
        assert_int_equal(gv_buf_append(&b, chunk, sizeof(chunk)), GV_OK);
        total += sizeof(chunk);
        assert_int_equal(b.len, total);
        assert_true(b.cap > b.len);
        assert_int_equal(b.data[b.len], '\0');
    }
    /* Every chunk landed where it belongs, none overwritten. */
    for (size_t i = 0; i < total; i++)
        assert_int_equal(b.data[i], 'a' + (int)(i / sizeof(chunk)) % 26);
    assert_int_equal(strlen(b.data), total);
    assert_false(b.overflow);
    gv_buf_free(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
}

static void test_empty_append_gives_empty_string(void **state)
{
    (void)state;
    struct gv_buf b = {0};
    assert_int_equal(gv_buf_append(&b, NULL, 0), GV_OK);
    assert_non_null(b.data);
    assert_string_equal(b.data, "");
    gv_buf_free(&b);
}

static void test_max_is_inclusive_and_sticky(void **state)
{
    (void)state;
    struct gv_buf b;
    gv_buf_init(&b, 10);
    assert_int_equal(gv_buf_append(&b, "hello", 5), GV_OK);
    assert_int_equal(gv_buf_append(&b, "world", 5), GV_OK); /* exactly max */
    assert_string_equal(b.data, "helloworld");
    assert_false(b.overflow);
    assert_int_equal(gv_buf_append(&b, "!", 1), GV_ERANGE);
    assert_true(b.overflow);
    assert_int_equal(b.len, 10);
    assert_string_equal(b.data, "helloworld");
    /* Refused from now on, even with room, until reset. */
    gv_buf_reset(&b);
    assert_false(b.overflow);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.data, "");
    assert_int_equal(gv_buf_append(&b, "0123456789abc", 13), GV_ERANGE);
    assert_true(b.overflow);
    assert_int_equal(gv_buf_append(&b, "x", 1), GV_ERANGE);
    assert_int_equal(b.len, 0);
    gv_buf_reset(&b);
    assert_int_equal(gv_buf_append(&b, "x", 1), GV_OK);
    assert_int_equal(b.max, 10); /* reset keeps the cap */
    gv_buf_free(&b);
    assert_int_equal(b.max, 0);
}

static void test_reset_keeps_memory(void **state)
{
    (void)state;
    struct gv_buf b = {0};
    assert_int_equal(gv_buf_append(&b, "abcdef", 6), GV_OK);
    char *data = b.data;
    size_t cap = b.cap;
    gv_buf_reset(&b);
    assert_ptr_equal(b.data, data);
    assert_int_equal(b.cap, cap);
    assert_int_equal(gv_buf_append(&b, "xy", 2), GV_OK);
    assert_string_equal(b.data, "xy");
    gv_buf_free(&b);
}

static void test_reserve_then_appends_do_not_move(void **state)
{
    (void)state;
    struct gv_buf b = {0};
    assert_int_equal(gv_buf_append(&b, "x", 1), GV_OK);
    assert_int_equal(gv_buf_reserve(&b, 5000), GV_OK);
    assert_true(b.cap >= 1 + 5000 + 1);
    char *data = b.data;
    char big[5000];
    memset(big, 'z', sizeof(big));
    assert_int_equal(gv_buf_append(&b, big, sizeof(big)), GV_OK);
    assert_ptr_equal(b.data, data);
    assert_int_equal(b.len, 5001);
    /* Sizes that cannot be represented are refused, not wrapped. */
    assert_int_equal(gv_buf_reserve(&b, SIZE_MAX - 1), GV_ENOMEM);
    assert_int_equal(b.len, 5001);
    gv_buf_free(&b);
}

static void test_write_cb_counts_and_refuses(void **state)
{
    (void)state;
    struct gv_buf b;
    gv_buf_init(&b, 8);
    char abc[] = "abcdef";
    assert_int_equal(gv_buf_write_cb(abc, 2, 3, &b), 6);
    assert_string_equal(b.data, "abcdef");
    /* Past the cap: 0, so a curl transfer stops. */
    assert_int_equal(gv_buf_write_cb(abc, 1, 3, &b), 0);
    assert_true(b.overflow);
    /* size * n that does not fit a size_t is refused, not wrapped. */
    gv_buf_reset(&b);
    assert_int_equal(gv_buf_write_cb(abc, SIZE_MAX / 2, 4, &b), 0);
    assert_int_equal(b.len, 0);
    gv_buf_free(&b);
    /* Without a cap too: a product that wraps to 2 appends nothing. */
    gv_buf_init(&b, 0);
    assert_int_equal(gv_buf_write_cb(abc, SIZE_MAX / 2 + 2, 2, &b), 0);
    assert_int_equal(b.len, 0);
    gv_buf_free(&b);
}

/* Sizes at the end of size_t: refused, nothing written, the content kept
 * (without the checks len + n + 1 wrapped to a tiny size that "fit"). */
static void test_sizes_that_wrap_refused(void **state)
{
    (void)state;
    struct gv_buf b;
    gv_buf_init(&b, 0);
    assert_int_equal(gv_buf_append(&b, "abc", 3), GV_OK);
    assert_int_equal(gv_buf_reserve(&b, SIZE_MAX - b.len), GV_ENOMEM);
    assert_int_equal(gv_buf_reserve(&b, SIZE_MAX), GV_ENOMEM);
    assert_int_equal(gv_buf_append(&b, "x", SIZE_MAX), GV_ENOMEM);
    assert_int_equal(gv_buf_append(&b, "x", SIZE_MAX - 3), GV_ENOMEM);
    assert_int_equal(b.len, 3);
    assert_string_equal(b.data, "abc");
    /* a full capped buffer still takes an empty append */
    struct gv_buf c;
    gv_buf_init(&c, 3);
    assert_int_equal(gv_buf_append(&c, "abc", 3), GV_OK);
    assert_int_equal(gv_buf_append(&c, "", 0), GV_OK);
    assert_false(c.overflow);
    gv_buf_free(&c);
    gv_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_grows_and_terminates),
        cmocka_unit_test(test_empty_append_gives_empty_string),
        cmocka_unit_test(test_max_is_inclusive_and_sticky),
        cmocka_unit_test(test_reset_keeps_memory),
        cmocka_unit_test(test_reserve_then_appends_do_not_move),
        cmocka_unit_test(test_write_cb_counts_and_refuses),
        cmocka_unit_test(test_sizes_that_wrap_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
