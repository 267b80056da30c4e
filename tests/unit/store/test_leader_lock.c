/* test_leader_lock.c - the leader lock of store/leader_lock.h on both
 * stores: a data folder's flock, and, in the PostgreSQL pass of the store
 * tests (ALALLO_TEST_PG, store_fixture.h), PostgreSQL's advisory lock on a
 * fresh database of the test server. One holder at a time, the holder's
 * URL for the others, the lock free again when its holder closes or dies,
 * and a PostgreSQL session that ends is a lost lock, never taken again by
 * that handle. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test_child.h"
#include "store/leader_lock.h"
#include "store_fixture.h"

/* Tries l until it holds the lock, for up to 10 s: PostgreSQL frees a
 * session's locks when its backend ends, a moment after the client has
 * gone. Returns the last state. */
static enum leader_lock_state take_within(struct leader_lock *l, const char *url)
{
    enum leader_lock_state s = LEADER_LOCK_STANDBY;
    for (int i = 0; i < 200 && s == LEADER_LOCK_STANDBY; i++) {
        s = leader_lock_try(l, url);
        if (s == LEADER_LOCK_STANDBY)
            usleep(50000);
    }
    return s;
}

/* Two handles on one store, as two serves would have. */
static void one_holder_at_a_time(const char *where)
{
    char err[256];
    struct leader_lock *a, *b, *c;
    assert_int_equal(leader_lock_open(where, &a, err, sizeof err), ERR_OK);
    assert_int_equal(leader_lock_open(where, &b, err, sizeof err), ERR_OK);
    char url[LEADER_URL_MAX];
    enum alallo_err e = leader_lock_url(b, url, sizeof url);
    assert_true(e == ERR_NOT_FOUND);

    assert_int_equal(leader_lock_try(a, "http://a:1"), LEADER_LOCK_HELD);
    assert_int_equal(leader_lock_try(b, "http://b:2"), LEADER_LOCK_STANDBY);
    assert_int_equal(leader_lock_try(a, "http://a:1"), LEADER_LOCK_HELD); /* kept */
    assert_int_equal(leader_lock_try(b, "http://b:2"), LEADER_LOCK_STANDBY);
    assert_int_equal(leader_lock_url(b, url, sizeof url), ERR_OK);
    assert_string_equal(url, "http://a:1");

    /* The holder goes: the standby takes it and names itself. */
    leader_lock_close(a);
    assert_int_equal(take_within(b, "http://b:2"), LEADER_LOCK_HELD);
    assert_int_equal(leader_lock_open(where, &c, err, sizeof err), ERR_OK);
    assert_int_equal(leader_lock_try(c, "http://c:3"), LEADER_LOCK_STANDBY);
    assert_int_equal(leader_lock_url(c, url, sizeof url), ERR_OK);
    assert_string_equal(url, "http://b:2");
    leader_lock_close(b);
    leader_lock_close(c);
}

/* A holder killed with SIGKILL (a child process) frees the lock. */
static void freed_by_kill9(const char *where)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t me = getpid();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        test_child_dies_with_parent(me);
        char err[256];
        struct leader_lock *l;
        char ok = leader_lock_open(where, &l, err, sizeof err) == ERR_OK &&
                          take_within(l, "http://child:9") == LEADER_LOCK_HELD
                      ? 'y'
                      : 'n';
        if (write(ready[1], &ok, 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    char ok = 0;
    ssize_t got = read(ready[0], &ok, 1);
    if (got != 1 || ok != 'y') {
        /* Not the holder: end the child before failing, or it would wait
         * in pause() with the test's output pipe until ctest's timeout. */
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    assert_int_equal(got, 1);
    assert_int_equal(ok, 'y');
    char err[256];
    struct leader_lock *l;
    enum alallo_err opened = leader_lock_open(where, &l, err, sizeof err);
    int standby = opened == ERR_OK ? (int)leader_lock_try(l, "http://me:1") : -1;
    kill(pid, SIGKILL); /* before the asserts, as above */
    waitpid(pid, NULL, 0);
    assert_int_equal(opened, ERR_OK);
    assert_int_equal(standby, LEADER_LOCK_STANDBY);
    assert_int_equal(take_within(l, "http://me:1"), LEADER_LOCK_HELD);
    leader_lock_close(l);
    close(ready[0]);
    close(ready[1]);
}

static char folder[256];

static void test_file_one_holder(void **state)
{
    (void)state;
    one_holder_at_a_time(folder);
}

static void test_file_kill9(void **state)
{
    (void)state;
    freed_by_kill9(folder);
}

static void test_file_bad_folder(void **state)
{
    (void)state;
    char err[256] = "";
    struct leader_lock *l = NULL;
    assert_int_equal(leader_lock_open("/nonexistent/alallo-data", &l, err, sizeof err), ERR_IO);
    assert_null(l);
    assert_non_null(strstr(err, "leader.lock"));
}

/* ---- PostgreSQL --------------------------------------------------------- */

static char pg_url[512];

static int pg_setup(void **state)
{
    (void)state;
    return fixture_store_url("/tmp", "leader_lock", pg_url, sizeof pg_url);
}

static int pg_teardown(void **state)
{
    (void)state;
    fixture_store_drop("leader_lock");
    return 0;
}

static void test_pg_one_holder(void **state)
{
    (void)state;
    one_holder_at_a_time(pg_url);
}

static void test_pg_kill9(void **state)
{
    (void)state;
    freed_by_kill9(pg_url);
}

/* The holder's session is ended by the server (as when the database
 * restarts or a network cuts it): the holder is told LOST, stays lost, and
 * the other handle takes the lock. */
static void test_pg_session_ended_is_lost(void **state)
{
    (void)state;
    char err[256];
    struct leader_lock *a, *b;
    assert_int_equal(leader_lock_open(pg_url, &a, err, sizeof err), ERR_OK);
    assert_int_equal(leader_lock_open(pg_url, &b, err, sizeof err), ERR_OK);
    assert_int_equal(leader_lock_try(a, "http://a:1"), LEADER_LOCK_HELD);
    assert_int_equal(leader_lock_try(b, "http://b:2"), LEADER_LOCK_STANDBY);

    PGconn *admin = PQconnectdb(pg_url);
    assert_int_equal(PQstatus(admin), CONNECTION_OK);
    /* The holder's backend: the one session that holds our advisory lock. */
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
             "AND granted AND ((classid::bigint << 32) | objid::bigint) = %lld",
             (long long)LEADER_LOCK_KEY);
    PGresult *r = PQexec(admin, sql);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), 1);
    PQclear(r);
    PQfinish(admin);

    assert_int_equal(leader_lock_try(a, "http://a:1"), LEADER_LOCK_LOST);
    assert_int_equal(leader_lock_try(a, "http://a:1"), LEADER_LOCK_LOST); /* for good */
    assert_int_equal(take_within(b, "http://b:2"), LEADER_LOCK_HELD);
    leader_lock_close(a);
    leader_lock_close(b);
}

static void test_pg_bad_url(void **state)
{
    (void)state;
    char err[256] = "";
    struct leader_lock *l = NULL;
    char url[600];
    snprintf(url, sizeof url, "postgresql:///no_such_db?host=%s&port=55432&user=alallo",
             fixture_pg_dir());
    assert_int_equal(leader_lock_open(url, &l, err, sizeof err), ERR_UNAVAILABLE);
    assert_null(l);
    assert_non_null(strstr(err, "PostgreSQL"));
}

int main(void)
{
    if (fixture_on_pg()) {
        const struct CMUnitTest pg_tests[] = {
            cmocka_unit_test(test_pg_one_holder),
            cmocka_unit_test(test_pg_kill9),
            cmocka_unit_test(test_pg_session_ended_is_lost),
            cmocka_unit_test(test_pg_bad_url),
        };
        return cmocka_run_group_tests_name("leader lock, PostgreSQL", pg_tests, pg_setup,
                                           pg_teardown);
    }
    snprintf(folder, sizeof folder, "/tmp/alallo-ll-file-XXXXXX");
    if (!mkdtemp(folder))
        return 1;
    const struct CMUnitTest file_tests[] = {
        cmocka_unit_test(test_file_one_holder),
        cmocka_unit_test(test_file_kill9),
        cmocka_unit_test(test_file_bad_folder),
    };
    int failed = cmocka_run_group_tests_name("leader lock, data folder", file_tests, NULL, NULL);
    char lock[300];
    snprintf(lock, sizeof lock, "%s/leader.lock", folder);
    unlink(lock);
    rmdir(folder);
    return failed;
}
