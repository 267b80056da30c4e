/* test_growbuf.c - the growable byte buffer (core/growbuf.h): appends keep
 * the text NUL-terminated across many growths; printf, short and long; the
 * cap is exact (max - 1 bytes of content fit, one more does not) and its
 * failure is sticky and keeps what came before; a size that overflows is
 * refused as too large; an allocation the allocator refuses fails as out
 * of memory, keeping the bytes; take hands the bytes over; free of NULL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "core/growbuf.h"

/* Under AddressSanitizer a refused allocation returns NULL, as it does in
 * the product build, instead of stopping the test (read by ASan at start;
 * unused otherwise). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

static void appends_grow_and_stay_terminated(void **state)
{
    (void)state;
    struct growbuf b;
    growbuf_init(&b, 1 << 20);
    assert_null(b.p);
    assert_int_equal(growbuf_append(&b, NULL, 0), GROWBUF_OK);
    assert_non_null(b.p);
    assert_string_equal(b.p, "");
    for (int i = 0; i < 10000; i++)
        assert_int_equal(growbuf_append(&b, "abc", 3), GROWBUF_OK);
    assert_int_equal(b.len, 30000);
    assert_true(b.cap > b.len);
    assert_int_equal(strlen(b.p), 30000);
    assert_memory_equal(b.p + 29997, "abc", 4);
    assert_int_equal(growbuf_puts(&b, "!"), GROWBUF_OK);
    assert_string_equal(b.p + 29997, "abc!");
    growbuf_free(&b);
    assert_null(b.p);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.max, 1 << 20);
    growbuf_free(NULL);
}

static void printf_short_and_long(void **state)
{
    (void)state;
    struct growbuf b;
    growbuf_init(&b, 1 << 20);
    assert_int_equal(growbuf_printf(&b, "%s=%d;", "steps", 42), GROWBUF_OK);
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    assert_int_equal(growbuf_printf(&b, "[%s]", big), GROWBUF_OK); /* past the short path */
    assert_int_equal(b.len, strlen("steps=42;") + 2 + 999);
    assert_memory_equal(b.p, "steps=42;[xxx", 13);
    assert_string_equal(b.p + b.len - 2, "x]");
    growbuf_free(&b);
}

static void the_cap_is_exact_and_sticky(void **state)
{
    (void)state;
    struct growbuf b;
    growbuf_init(&b, 10); /* 9 bytes of content and the NUL */
    assert_int_equal(growbuf_append(&b, "12345", 5), GROWBUF_OK);
    assert_int_equal(growbuf_append(&b, "6789", 4), GROWBUF_OK);
    assert_int_equal(b.len, 9);
    assert_true(b.cap <= 10);
    assert_int_equal(growbuf_append(&b, "0", 1), GROWBUF_TOO_LARGE);
    assert_int_equal(b.err, GROWBUF_TOO_LARGE);
    assert_string_equal(b.p, "123456789"); /* what came before is kept */
    assert_int_equal(growbuf_append(&b, NULL, 0), GROWBUF_TOO_LARGE); /* sticky */
    assert_int_equal(growbuf_printf(&b, "%d", 1), GROWBUF_TOO_LARGE);
    assert_string_equal(growbuf_err_text(b.err), "larger than its limit");
    growbuf_free(&b);
    assert_int_equal(b.err, GROWBUF_OK);

    growbuf_init(&b, 10);
    assert_int_equal(growbuf_printf(&b, "%s", "0123456789"), GROWBUF_TOO_LARGE);
    assert_null(b.p);
    growbuf_free(&b);

    growbuf_init(&b, 0); /* holds nothing, not even the NUL */
    assert_int_equal(growbuf_append(&b, NULL, 0), GROWBUF_TOO_LARGE);
    growbuf_free(&b);
}

static void a_size_that_overflows_is_too_large(void **state)
{
    (void)state;
    struct growbuf b;
    growbuf_init(&b, SIZE_MAX);
    assert_int_equal(growbuf_append(&b, "ab", 2), GROWBUF_OK);
    /* len + n + 1 wraps around: refused before any allocation or copy.
     * (The size goes through a volatile so that the compiler does not
     * judge a copy of that size that never runs.) */
    volatile size_t huge = SIZE_MAX - 1;
    assert_int_equal(growbuf_append(&b, "never read", huge), GROWBUF_TOO_LARGE);
    assert_string_equal(b.p, "ab");
    growbuf_free(&b);
}

static void a_refused_allocation_is_out_of_memory(void **state)
{
    (void)state;
    struct growbuf b;
    growbuf_init(&b, SIZE_MAX);
    assert_int_equal(growbuf_append(&b, "kept", 4), GROWBUF_OK);
    /* 2^62 bytes: more than any address space, so realloc refuses; the
     * source is never read. */
    volatile size_t huge = (size_t)1 << 62;
    assert_int_equal(growbuf_append(&b, "never read", huge), GROWBUF_NO_MEMORY);
    assert_string_equal(b.p, "kept");
    assert_int_equal(b.len, 4);
    assert_int_equal(growbuf_append(&b, "x", 1), GROWBUF_NO_MEMORY); /* sticky */
    assert_string_equal(growbuf_err_text(b.err), "out of memory");
    growbuf_free(&b);
}

static void take_hands_the_bytes_over(void **state)
{
    (void)state;
    struct growbuf b;
    growbuf_init(&b, 64);
    assert_null(growbuf_take(&b));
    assert_int_equal(growbuf_puts(&b, "mine"), GROWBUF_OK);
    char *p = growbuf_take(&b);
    assert_string_equal(p, "mine");
    assert_null(b.p);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    assert_int_equal(b.max, 64);
    free(p);
    assert_int_equal(growbuf_puts(&b, "again"), GROWBUF_OK);
    assert_string_equal(b.p, "again");
    growbuf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(appends_grow_and_stay_terminated),
        cmocka_unit_test(printf_short_and_long),
        cmocka_unit_test(the_cap_is_exact_and_sticky),
        cmocka_unit_test(a_size_that_overflows_is_too_large),
        cmocka_unit_test(a_refused_allocation_is_out_of_memory),
        cmocka_unit_test(take_hands_the_bytes_over),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
