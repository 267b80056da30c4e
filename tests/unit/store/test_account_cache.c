/* test_account_cache.c - store/account_cache.h: a found account is
 * answered from memory until its time is up, other hashes and expired
 * entries are not, a hash that shares a slot replaces the older one, and
 * forget() forgets. Pure: the clock is the test's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "store/account_cache.h"

static struct account_cache cache;

static int setup(void **state)
{
    (void)state;
    account_cache_init(&cache);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    account_cache_destroy(&cache);
    return 0;
}

static struct store_account account(const char *id)
{
    struct store_account a = {.created_ms = 7};
    snprintf(a.id, sizeof a.id, "%s", id);
    snprintf(a.name, sizeof a.name, "name-%s", id);
    return a;
}

static void found_until_its_time_is_up(void **state)
{
    (void)state;
    struct store_account a = account("acct-1"), got;
    assert_false(account_cache_get(&cache, "h1", 1000, &got));
    account_cache_put(&cache, "h1", &a, 1000);
    memset(&got, 0, sizeof got);
    assert_true(account_cache_get(&cache, "h1", 1000, &got));
    assert_string_equal(got.id, "acct-1");
    assert_string_equal(got.name, "name-acct-1");
    assert_int_equal(got.created_ms, 7);
    assert_true(account_cache_get(&cache, "h1", 1000 + ACCOUNT_CACHE_TTL_MS - 1, &got));
    assert_false(account_cache_get(&cache, "h1", 1000 + ACCOUNT_CACHE_TTL_MS, &got));
    /* Read again from the store: kept again from then. */
    account_cache_put(&cache, "h1", &a, 1000 + ACCOUNT_CACHE_TTL_MS);
    assert_true(account_cache_get(&cache, "h1", 1000 + ACCOUNT_CACHE_TTL_MS, &got));
}

static void another_hash_is_not_found(void **state)
{
    (void)state;
    struct store_account a = account("acct-1"), got = account("untouched");
    account_cache_put(&cache, "h1", &a, 0);
    assert_false(account_cache_get(&cache, "h2", 0, &got));
    assert_false(account_cache_get(&cache, "h", 0, &got));
    assert_false(account_cache_get(&cache, "h1x", 0, &got));
    assert_false(account_cache_get(&cache, "", 0, &got));
    assert_string_equal(got.id, "untouched");
}

/* Many more hashes than slots: each lookup answers its own account or
 * nothing, never another's, and the newest put of each slot is found. */
static void a_full_table_never_answers_another_account(void **state)
{
    (void)state;
    char h[KEYS_HASH_HEX], id[32];
    int n = ACCOUNT_CACHE_SLOTS * 4;
    for (int i = 0; i < n; i++) {
        snprintf(h, sizeof h, "%064x", (unsigned)i);
        snprintf(id, sizeof id, "acct-%d", i);
        struct store_account a = account(id);
        account_cache_put(&cache, h, &a, 0);
    }
    int hits = 0;
    for (int i = 0; i < n; i++) {
        struct store_account got;
        snprintf(h, sizeof h, "%064x", (unsigned)i);
        snprintf(id, sizeof id, "acct-%d", i);
        if (account_cache_get(&cache, h, 1, &got)) {
            assert_string_equal(got.id, id);
            hits++;
        }
    }
    assert_true(hits > 0 && hits <= ACCOUNT_CACHE_SLOTS);
    snprintf(h, sizeof h, "%064x", (unsigned)(n - 1));
    struct store_account got;
    assert_true(account_cache_get(&cache, h, 1, &got)); /* the newest is kept */
}

static void too_long_a_hash_is_not_kept(void **state)
{
    (void)state;
    char h[KEYS_HASH_HEX + 8];
    memset(h, 'a', sizeof h - 1);
    h[sizeof h - 1] = '\0';
    struct store_account a = account("acct-1"), got;
    account_cache_put(&cache, h, &a, 0);
    assert_false(account_cache_get(&cache, h, 0, &got));
    h[KEYS_HASH_HEX - 1] = '\0'; /* its first 64 characters are another hash */
    assert_false(account_cache_get(&cache, h, 0, &got));
}

static void forget_forgets(void **state)
{
    (void)state;
    struct store_account a = account("acct-1"), b = account("acct-2"), got;
    account_cache_put(&cache, "h1", &a, 0);
    account_cache_put(&cache, "h2", &b, 0);
    account_cache_forget(&cache, "h1");
    assert_false(account_cache_get(&cache, "h1", 0, &got));
    assert_true(account_cache_get(&cache, "h2", 0, &got));
    assert_string_equal(got.id, "acct-2");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(found_until_its_time_is_up, setup, teardown),
        cmocka_unit_test_setup_teardown(another_hash_is_not_found, setup, teardown),
        cmocka_unit_test_setup_teardown(a_full_table_never_answers_another_account, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(too_long_a_hash_is_not_kept, setup, teardown),
        cmocka_unit_test_setup_teardown(forget_forgets, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
