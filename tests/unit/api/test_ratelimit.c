/* test_ratelimit.c - the per-key token bucket: bursts, refill, the retry
 * time, independence of keys, bounded memory, and exactness under threads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "api/ratelimit.h"

static void refuses_bad_arguments(void **state)
{
    (void)state;
    assert_null(ratelimit_new(0, 10, 16));
    assert_null(ratelimit_new(-1, 10, 16));
    assert_null(ratelimit_new(5, 0.5, 16));
    assert_null(ratelimit_new(5, 10, 0));
    assert_null(ratelimit_new(5, 10, RATELIMIT_MAX_KEYS + 1));
    assert_null(ratelimit_new(0.0 / 0.0, 10, 16));
    ratelimit_free(NULL);

    struct ratelimit *rl = ratelimit_new(5, 10, 16);
    assert_non_null(rl);
    double retry = -1;
    assert_false(ratelimit_take(rl, "", 0, &retry));
    assert_true(retry == 0.0);
    assert_false(ratelimit_take(rl, NULL, 0, &retry));
    char longkey[RATELIMIT_KEY_MAX + 2];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    assert_false(ratelimit_take(rl, longkey, 0, &retry));
    longkey[RATELIMIT_KEY_MAX] = '\0'; /* exactly the longest allowed */
    assert_true(ratelimit_take(rl, longkey, 0, &retry));
    ratelimit_free(rl);
}

static void burst_then_refill(void **state)
{
    (void)state;
    /* 2 per second, bursts of 5. */
    struct ratelimit *rl = ratelimit_new(2, 5, 64);
    double retry = 0;
    for (int i = 0; i < 5; i++)
        assert_true(ratelimit_take(rl, "acct-a", 100.0, &retry));
    assert_false(ratelimit_take(rl, "acct-a", 100.0, &retry));
    assert_float_equal(retry, 0.5, 1e-9); /* one token at 2/s */
    /* A quarter second later half a token is back: still refused, 0.25 s. */
    assert_false(ratelimit_take(rl, "acct-a", 100.25, &retry));
    assert_float_equal(retry, 0.25, 1e-9);
    assert_true(ratelimit_take(rl, "acct-a", 100.5, &retry));
    assert_false(ratelimit_take(rl, "acct-a", 100.5, NULL));
    /* A long pause refills to the burst, not beyond. */
    for (int i = 0; i < 5; i++)
        assert_true(ratelimit_take(rl, "acct-a", 1000.0, NULL));
    assert_false(ratelimit_take(rl, "acct-a", 1000.0, NULL));
    ratelimit_free(rl);
}

static void sustained_rate(void **state)
{
    (void)state;
    /* Asking 100 times a second for 10 s at 10/s with bursts of 20 lets
     * through the burst plus 10 a second, no more. */
    struct ratelimit *rl = ratelimit_new(10, 20, 64);
    int ok = 0;
    for (int i = 0; i < 1000; i++)
        ok += ratelimit_take(rl, "k", 50.0 + i * 0.01, NULL);
    assert_in_range(ok, 20 + 99, 20 + 100);
    ratelimit_free(rl);
}

static void clock_going_back_adds_nothing(void **state)
{
    (void)state;
    struct ratelimit *rl = ratelimit_new(1, 2, 16);
    assert_true(ratelimit_take(rl, "k", 10.0, NULL));
    assert_true(ratelimit_take(rl, "k", 10.0, NULL));
    assert_false(ratelimit_take(rl, "k", 5.0, NULL));
    /* And going back did not move the bucket's clock: 10.5 is half a token. */
    assert_false(ratelimit_take(rl, "k", 10.5, NULL));
    assert_true(ratelimit_take(rl, "k", 11.0, NULL));
    ratelimit_free(rl);
}

static void keys_are_independent(void **state)
{
    (void)state;
    struct ratelimit *rl = ratelimit_new(1, 3, 64);
    for (int i = 0; i < 3; i++)
        assert_true(ratelimit_take(rl, "acct-a", 0, NULL));
    assert_false(ratelimit_take(rl, "acct-a", 0, NULL));
    /* Another key, and a key that is a prefix of it, start full. */
    for (int i = 0; i < 3; i++) {
        assert_true(ratelimit_take(rl, "acct-b", 0, NULL));
        assert_true(ratelimit_take(rl, "acct-", 0, NULL));
    }
    assert_false(ratelimit_take(rl, "acct-b", 0, NULL));
    assert_int_equal(ratelimit_size(rl), 3);
    ratelimit_free(rl);
}

static void memory_is_bounded(void **state)
{
    (void)state;
    /* 32 slots; 10,000 keys pass through, each emptied, at one instant. */
    struct ratelimit *rl = ratelimit_new(1, 2, 32);
    char key[32];
    for (int i = 0; i < 10000; i++) {
        snprintf(key, sizeof key, "acct-%d", i);
        assert_true(ratelimit_take(rl, key, 0, NULL));
        assert_true(ratelimit_take(rl, key, 0, NULL));
        assert_true(ratelimit_size(rl) <= 32);
    }
    assert_int_equal(ratelimit_size(rl), 32);
    ratelimit_free(rl);
}

static void full_buckets_are_reused_before_busy_ones(void **state)
{
    (void)state;
    /* Two slots per shard, 1 token a second, bursts of 100. "busy" empties
     * its bucket at t=0 and then idles (it is the longest idle key), while
     * one passer a second takes a token (each is full again a second
     * later). Passers reuse each other's full buckets, so "busy" keeps its
     * bucket: at t=50 it holds 50 tokens, not a fresh 100. Evicting the
     * idlest bucket first would hand it 100. */
    struct ratelimit *rl = ratelimit_new(1, 100, 2 * RATELIMIT_SHARDS);
    for (int i = 0; i < 100; i++)
        assert_true(ratelimit_take(rl, "busy", 0.0, NULL));
    char key[32];
    for (int i = 1; i < 50; i++) {
        snprintf(key, sizeof key, "passer-%d", i);
        assert_true(ratelimit_take(rl, key, (double)i, NULL));
        assert_true(ratelimit_size(rl) <= 2 * RATELIMIT_SHARDS);
    }
    int passed = 0;
    for (int i = 0; i < 51; i++)
        passed += ratelimit_take(rl, "busy", 50.0, NULL);
    assert_int_equal(passed, 50);
    ratelimit_free(rl);
}

struct hammer {
    struct ratelimit *rl;
    const char *key;
    int passed;
};

static void *hammer_run(void *arg)
{
    struct hammer *h = arg;
    for (int i = 0; i < 20000; i++)
        h->passed += ratelimit_take(h->rl, h->key, 7.0, NULL);
    return NULL;
}

static void exact_under_threads(void **state)
{
    (void)state;
    /* Eight threads take 80,000 times from each of two keys at one instant:
     * exactly the burst of each key (60,000) passes, however the threads
     * interleave. A lost update (no lock) lets more through. */
    enum { THREADS = 8 };
    struct ratelimit *rl = ratelimit_new(1, 60000, 64);
    pthread_t t[THREADS];
    struct hammer h[THREADS];
    for (int i = 0; i < THREADS; i++) {
        h[i] = (struct hammer){rl, i % 2 ? "odd" : "even", 0};
        assert_int_equal(pthread_create(&t[i], NULL, hammer_run, &h[i]), 0);
    }
    int odd = 0, even = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        if (i % 2)
            odd += h[i].passed;
        else
            even += h[i].passed;
    }
    assert_int_equal(odd, 60000);
    assert_int_equal(even, 60000);
    ratelimit_free(rl);
}

static void monotonic_clock(void **state)
{
    (void)state;
    double a = ratelimit_now();
    double b = ratelimit_now();
    assert_true(a > 0);
    assert_true(b >= a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(refuses_bad_arguments),
        cmocka_unit_test(burst_then_refill),
        cmocka_unit_test(sustained_rate),
        cmocka_unit_test(clock_going_back_adds_nothing),
        cmocka_unit_test(keys_are_independent),
        cmocka_unit_test(memory_is_bounded),
        cmocka_unit_test(full_buckets_are_reused_before_busy_ones),
        cmocka_unit_test(exact_under_threads),
        cmocka_unit_test(monotonic_clock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
