/* test_wlog.c - the worker's own log: whole lines from several threads,
 * and rotation of a log grown too large. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "worker/wlog.h"

static char dir[256];
static struct wlog shared;

static int make_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/alallo-test-wlog-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void *writer(void *arg)
{
    long id = (long)arg;
    for (int i = 0; i < 500; i++)
        wlog_printf(&shared, "thread %ld line %d %s", id, i,
                    "padding-padding-padding-padding-padding-padding-padding-padding");
    return NULL;
}

static void lines_stay_whole_across_threads(void **state)
{
    (void)state;
    char path[300];
    snprintf(path, sizeof path, "%s/worker.log", dir);
    assert_int_equal(wlog_open(&shared, path, "w1"), 0);
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, writer, (void *)i);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    wlog_close(&shared);
    wlog_close(&shared); /* twice is fine */
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        long id;
        int k;
        char pad[128];
        /* 2024-05-01T12:00:00Z w1: thread 3 line 17 padding... */
        if (sscanf(line + 21, "w1: thread %ld line %d %127s", &id, &k, pad) != 3 ||
            line[20] != ' ' || line[19] != 'Z' || strlen(pad) != 63)
            fail_msg("torn line: %s", line);
        n++;
    }
    fclose(f);
    assert_int_equal(n, 2000);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
}

static void a_big_log_is_rotated_at_open(void **state)
{
    (void)state;
    char path[300], old[310];
    snprintf(path, sizeof path, "%s/big.log", dir);
    snprintf(old, sizeof old, "%s.1", path);
    int fd = open(path, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, WLOG_ROTATE_BYTES + 1), 0);
    close(fd);
    struct wlog log;
    assert_int_equal(wlog_open(&log, path, "w1"), 0);
    wlog_printf(&log, "fresh");
    wlog_close(&log);
    struct stat st;
    assert_int_equal(stat(old, &st), 0);
    assert_int_equal(st.st_size, WLOG_ROTATE_BYTES + 1);
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size < 100);
    /* A small log is appended to, not rotated. */
    assert_int_equal(wlog_open(&log, path, "w1"), 0);
    wlog_printf(&log, "more");
    wlog_close(&log);
    struct stat st2;
    assert_int_equal(stat(path, &st2), 0);
    assert_true(st2.st_size > st.st_size);
    /* Long texts are cut, the line still ends. */
    char *big = malloc(10000);
    memset(big, 'x', 9999);
    big[9999] = '\0';
    assert_int_equal(wlog_open(&log, path, "w1"), 0);
    wlog_printf(&log, "%s", big);
    wlog_close(&log);
    free(big);
    FILE *f = fopen(path, "r");
    char line[4096];
    char last[4096] = "";
    while (fgets(line, sizeof line, f))
        snprintf(last, sizeof last, "%s", line);
    fclose(f);
    assert_true(strlen(last) < 2300);
    assert_int_equal(last[strlen(last) - 1], '\n');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lines_stay_whole_across_threads),
        cmocka_unit_test(a_big_log_is_rotated_at_open),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
