/* test_conn_guard.c - the bound on waiting connections: the oldest waiting
 * one is cut to make room, a deadline that trickling bytes cannot extend,
 * busy connections never cut, a cut connection not served, close forgets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "api/conn_guard.h"

static int cuts[64];
static int n_cuts;

static void record_cut(int fd) { cuts[n_cuts++] = fd; }

static int setup(void **state)
{
    (void)state;
    n_cuts = 0;
    memset(cuts, 0, sizeof cuts);
    return 0;
}

static void refuses_bad_arguments(void **state)
{
    (void)state;
    assert_null(conn_guard_new(0, 1000, record_cut));
    assert_null(conn_guard_new(4, 0, record_cut));
    conn_guard_free(NULL);
}

static void oldest_waiting_is_cut_for_a_new_one(void **state)
{
    (void)state;
    struct conn_guard *g = conn_guard_new(3, 10000, record_cut);
    struct conn_guard_entry *e[5];
    for (int i = 0; i < 3; i++)
        e[i] = conn_guard_open(g, 10 + i, i);
    assert_int_equal(n_cuts, 0);
    e[3] = conn_guard_open(g, 13, 3);
    assert_int_equal(n_cuts, 1);
    assert_int_equal(cuts[0], 10); /* the oldest, never the new one */
    assert_false(conn_guard_busy(g, e[0])); /* its request is not served */
    assert_true(conn_guard_busy(g, e[1]));
    e[4] = conn_guard_open(g, 14, 4); /* 2, 3, 4 wait: room */
    assert_int_equal(n_cuts, 1);
    struct conn_guard_stats st;
    conn_guard_get_stats(g, &st);
    assert_int_equal(st.waiting, 3);
    assert_int_equal(st.busy, 1);
    assert_int_equal((int)st.cut_full, 1);
    for (int i = 0; i < 5; i++)
        conn_guard_close(g, e[i]);
    conn_guard_get_stats(g, &st);
    assert_int_equal(st.waiting + st.busy, 0);
    conn_guard_free(g);
}

static void busy_connections_are_never_cut(void **state)
{
    (void)state;
    struct conn_guard *g = conn_guard_new(2, 1000, record_cut);
    struct conn_guard_entry *b[10];
    for (int i = 0; i < 10; i++) {
        b[i] = conn_guard_open(g, 100 + i, i);
        assert_true(conn_guard_busy(g, b[i]));
    }
    assert_int_equal(n_cuts, 0);
    assert_int_equal(conn_guard_expire(g, 1000000), 0);
    assert_int_equal(conn_guard_next_due(g, 0), -1);
    for (int i = 0; i < 10; i++)
        conn_guard_close(g, b[i]);
    conn_guard_free(g);
}

/* A deadline from when the connection began to wait, whatever arrives. */
static void deadline_is_not_extended(void **state)
{
    (void)state;
    struct conn_guard *g = conn_guard_new(100, 5000, record_cut);
    struct conn_guard_entry *a = conn_guard_open(g, 7, 1000);
    struct conn_guard_entry *b = conn_guard_open(g, 8, 3000);
    assert_int_equal(conn_guard_next_due(g, 1000), 5000);
    assert_int_equal(conn_guard_expire(g, 5999), 0);
    assert_int_equal(conn_guard_expire(g, 6000), 1);
    assert_int_equal(cuts[0], 7);
    assert_int_equal(conn_guard_next_due(g, 6000), 2000);
    assert_int_equal(conn_guard_expire(g, 9000), 1);
    assert_int_equal(cuts[1], 8);
    struct conn_guard_stats st;
    conn_guard_get_stats(g, &st);
    assert_int_equal((int)st.cut_late, 2);
    conn_guard_close(g, a);
    conn_guard_close(g, b);
    conn_guard_free(g);
}

/* Kept alive: after its answer it waits again, with a new deadline. */
static void wait_again_after_an_answer(void **state)
{
    (void)state;
    struct conn_guard *g = conn_guard_new(1, 5000, record_cut);
    struct conn_guard_entry *a = conn_guard_open(g, 7, 0);
    assert_true(conn_guard_busy(g, a));
    conn_guard_wait(g, a, 20000);
    assert_int_equal(conn_guard_expire(g, 24999), 0);
    struct conn_guard_entry *b = conn_guard_open(g, 8, 21000); /* a is the oldest */
    assert_int_equal(n_cuts, 1);
    assert_int_equal(cuts[0], 7);
    conn_guard_wait(g, a, 22000); /* cut: stays cut, never waits again */
    struct conn_guard_stats st;
    conn_guard_get_stats(g, &st);
    assert_int_equal(st.waiting, 1);
    conn_guard_close(g, a);
    conn_guard_close(g, b);
    conn_guard_free(g);
}

static int64_t queued[64]; /* what each fake socket (by fd) still holds */
static int64_t fake_unsent(int fd) { return queued[fd]; }

/* A download with a floor: cut at the end of a window in which its reader
 * took less than the floor while bytes waited for it; kept when it read
 * enough, or when nothing was waiting (the producer was the slow one); not
 * watched once its request is finished. */
static void a_download_read_below_its_floor_is_cut(void **state)
{
    (void)state;
    const int64_t w = CONN_GUARD_FLOOR_WINDOW_MS;
    memset(queued, 0, sizeof queued);
    struct conn_guard *g = conn_guard_new(4, 100 * w, record_cut); /* no header cuts */
    conn_guard_set_unsent(g, fake_unsent);
    struct conn_guard_entry *fast = conn_guard_open(g, 20, 0);
    struct conn_guard_entry *idle = conn_guard_open(g, 21, 0);
    struct conn_guard_entry *slow = conn_guard_open(g, 22, 0);
    struct conn_guard_entry *all[] = {fast, idle, slow};
    for (int i = 0; i < 3; i++) {
        assert_true(conn_guard_busy(g, all[i]));
        conn_guard_floor(g, all[i], 1000, 0);
        conn_guard_sent(g, all[i], 100 * w); /* a first burst, all taken */
    }
    assert_int_equal(conn_guard_expire(g, w - 1), 0); /* not due yet */
    assert_int_equal(conn_guard_expire(g, w), 0);
    /* Second window: fast takes 2 B/ms, slow 0.5 with 500 bytes waiting,
     * idle nothing, with nothing waiting for it. */
    conn_guard_sent(g, fast, 2 * w + 500);
    queued[20] = 500;
    conn_guard_sent(g, slow, w / 2 + 500);
    queued[22] = 500;
    assert_int_equal(conn_guard_expire(g, 2 * w), 1);
    assert_int_equal(n_cuts, 1);
    assert_int_equal(cuts[0], 22);
    struct conn_guard_stats st;
    conn_guard_get_stats(g, &st);
    assert_int_equal((int)st.cut_slow, 1);
    conn_guard_close(g, slow);
    /* A finished request is no longer watched; idle starved with bytes
     * waiting is cut at its next window's end. */
    conn_guard_wait(g, fast, 2 * w);
    queued[20] = queued[21] = 999999;
    assert_int_equal(conn_guard_expire(g, 3 * w), 1);
    assert_int_equal(cuts[1], 21);
    conn_guard_close(g, fast);
    conn_guard_close(g, idle);
    conn_guard_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(refuses_bad_arguments, setup),
        cmocka_unit_test_setup(oldest_waiting_is_cut_for_a_new_one, setup),
        cmocka_unit_test_setup(busy_connections_are_never_cut, setup),
        cmocka_unit_test_setup(deadline_is_not_extended, setup),
        cmocka_unit_test_setup(wait_again_after_an_answer, setup),
        cmocka_unit_test_setup(a_download_read_below_its_floor_is_cut, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
