/* test_trainer_proc.c - the trainer child: real processes (/bin/sh scripts
 * standing in for `alallo train`), their lines, exit codes, signals and
 * process groups. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test_child.h"
#include "worker/trainer_proc.h"

struct lines {
    char out[32][256];
    int n_out;
    char err[32][256];
    int n_err;
    int truncated;
    size_t longest;
};

static void collect(void *ctx, int stream, const char *line, size_t len, bool truncated)
{
    struct lines *l = ctx;
    assert_int_equal(strlen(line), len);
    if (truncated)
        l->truncated++;
    if (len > l->longest)
        l->longest = len;
    if (stream == 1 && l->n_out < 32)
        snprintf(l->out[l->n_out++], 256, "%s", line);
    if (stream == 2 && l->n_err < 32)
        snprintf(l->err[l->n_err++], 256, "%s", line);
}

/* Runs `script` under /bin/sh to the end (bounded: 20 s). */
static void run_script(const char *script, struct trainer_proc *p, struct lines *l)
{
    char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
    char err[200] = "";
    memset(l, 0, sizeof *l);
    if (trainer_proc_start(p, argv, NULL, err, sizeof err) != 0)
        fail_msg("start: %s", err);
    double until = trainer_proc_now() + 20;
    while (trainer_proc_poll(p, 100, collect, l) > 0)
        assert_true(trainer_proc_now() < until);
}

static void lines_and_exit_status(void **state)
{
    (void)state;
    struct trainer_proc p;
    struct lines l;
    run_script("echo '{\"event\":\"started\"}'; echo diag >&2; echo second; "
               "printf 'no newline at end'; exit 3",
               &p, &l);
    assert_true(p.reaped);
    assert_int_equal(p.exit_status, 3);
    assert_int_equal(p.term_signal, 0);
    assert_int_equal(l.n_out, 3);
    assert_string_equal(l.out[0], "{\"event\":\"started\"}");
    assert_string_equal(l.out[1], "second");
    assert_string_equal(l.out[2], "no newline at end");
    assert_int_equal(l.n_err, 1);
    assert_string_equal(l.err[0], "diag");
    trainer_proc_close(&p);
    trainer_proc_close(&p); /* twice is fine */
}

static void killed_by_signal(void **state)
{
    (void)state;
    struct trainer_proc p;
    struct lines l;
    run_script("echo before; kill -9 $$", &p, &l);
    assert_int_equal(p.term_signal, SIGKILL);
    assert_int_equal(p.exit_status, -1);
    assert_int_equal(l.n_out, 1);
    trainer_proc_close(&p);
}

static void exec_failure_is_reported(void **state)
{
    (void)state;
    struct trainer_proc p;
    char *argv[] = {"/nonexistent/alallo", "train", NULL};
    char err[200] = "";
    assert_int_equal(trainer_proc_start(&p, argv, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot run /nonexistent/alallo"));
    assert_non_null(strstr(err, "No such file"));
    trainer_proc_close(&p);
    /* A folder that does not exist is a start failure too. */
    char *argv2[] = {"/bin/true", NULL};
    assert_int_equal(trainer_proc_start(&p, argv2, "/nonexistent-dir", err, sizeof err), -1);
    trainer_proc_close(&p);
}

static void sigterm_reaches_the_whole_group(void **state)
{
    (void)state;
    struct trainer_proc p;
    struct lines l;
    memset(&l, 0, sizeof l);
    /* The script stands for a trainer that checkpoints on SIGTERM and exits
     * 4; its own child (sleep) must go with it. */
    const char *script = "trap 'echo \"{\\\"event\\\":\\\"checkpoint\\\",\\\"step\\\":7}\"; "
                         "exit 4' TERM; sleep 100 & echo ready; wait";
    char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
    char err[200];
    assert_int_equal(trainer_proc_start(&p, argv, NULL, err, sizeof err), 0);
    assert_int_equal(getpgid(p.pid), p.pid); /* its own process group */
    assert_int_not_equal(getpgid(p.pid), getpgrp());
    double until = trainer_proc_now() + 10;
    while (l.n_out == 0 && trainer_proc_now() < until)
        trainer_proc_poll(&p, 100, collect, &l);
    assert_string_equal(l.out[0], "ready");
    assert_int_equal(trainer_proc_signal(&p, SIGTERM), 0);
    until = trainer_proc_now() + 10;
    while (trainer_proc_poll(&p, 100, collect, &l) > 0)
        assert_true(trainer_proc_now() < until);
    assert_int_equal(p.exit_status, 4);
    assert_string_equal(l.out[1], "{\"event\":\"checkpoint\",\"step\":7}");
    /* Nothing of the group is left (SIGKILL takes a moment to land, and
     * init a moment to reap). */
    int left = 1;
    for (int i = 0; i < 50 && left; i++) {
        left = kill(-p.pid, 0) == 0;
        if (left)
            usleep(100000);
    }
    assert_false(left);
    assert_int_equal(trainer_proc_signal(&p, SIGTERM), -1); /* reaped: no signal */
    trainer_proc_close(&p);
}

static void close_kills_a_running_child(void **state)
{
    (void)state;
    struct trainer_proc p;
    char *argv[] = {"/bin/sleep", "100", NULL};
    char err[200];
    assert_int_equal(trainer_proc_start(&p, argv, NULL, err, sizeof err), 0);
    pid_t pid = p.pid;
    double t0 = trainer_proc_now();
    trainer_proc_close(&p);
    assert_true(trainer_proc_now() - t0 < 5);
    assert_int_equal(kill(pid, 0), -1);
}

static void long_lines_are_cut(void **state)
{
    (void)state;
    struct trainer_proc p;
    struct lines l;
    char script[200];
    snprintf(script, sizeof script, "head -c %d /dev/zero | tr '\\0' x; echo; echo after",
             TRAINER_PROC_MAX_LINE + 5000);
    run_script(script, &p, &l);
    assert_int_equal(l.truncated, 1);
    assert_int_equal(l.longest, TRAINER_PROC_MAX_LINE);
    assert_int_equal(l.n_out, 2);
    assert_string_equal(l.out[1], "after");
    trainer_proc_close(&p);
}

static void no_descriptor_leaks_and_stdin_is_empty(void **state)
{
    (void)state;
    int fd = open("/dev/null", O_RDONLY); /* deliberately without O_CLOEXEC */
    assert_true(fd > 2);
    char script[200];
    snprintf(script, sizeof script,
             "if [ -e /proc/self/fd/%d ]; then echo leaked; else echo clean; fi; "
             "read x; echo \"stdin:$x\"",
             fd);
    struct trainer_proc p;
    struct lines l;
    run_script(script, &p, &l);
    close(fd);
    assert_string_equal(l.out[0], "clean");
    assert_string_equal(l.out[1], "stdin:");
    trainer_proc_close(&p);
}

static void runs_in_the_given_folder(void **state)
{
    (void)state;
    struct trainer_proc p;
    struct lines l;
    char *argv[] = {"/bin/sh", "-c", "pwd", NULL};
    char err[200];
    memset(&l, 0, sizeof l);
    assert_int_equal(trainer_proc_start(&p, argv, "/tmp", err, sizeof err), 0);
    while (trainer_proc_poll(&p, 100, collect, &l) > 0)
        ;
    assert_string_equal(l.out[0], "/tmp");
    trainer_proc_close(&p);
}

/* kill -9 of the process that started a trainer takes the trainer with it. */
static void trainer_dies_with_its_worker(void **state)
{
    (void)state;
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t me = getpid();
    pid_t mid = fork();
    assert_true(mid >= 0);
    if (mid == 0) {
        test_child_dies_with_parent(me);
        close(pipefd[0]);
        struct trainer_proc p;
        char *argv[] = {"/bin/sleep", "100", NULL};
        char err[200];
        if (trainer_proc_start(&p, argv, NULL, err, sizeof err) != 0)
            _exit(1);
        pid_t child = p.pid;
        if (write(pipefd[1], &child, sizeof child) != (ssize_t)sizeof child)
            _exit(1);
        pause();
        _exit(0);
    }
    close(pipefd[1]);
    pid_t trainer = 0;
    ssize_t got = read(pipefd[0], &trainer, sizeof trainer);
    close(pipefd[0]);
    int was_running = got == (ssize_t)sizeof trainer && kill(trainer, 0) == 0;
    /* mid waits in pause(): it is killed before any assert can end the
     * test, or it would hold the test's output pipe (test_child.h). */
    kill(mid, SIGKILL);
    waitpid(mid, NULL, 0);
    assert_int_equal(got, (ssize_t)sizeof trainer);
    assert_true(was_running);
    /* Gone, or a zombie waiting for init to reap it. */
    int gone = 0;
    for (int i = 0; i < 50 && !gone; i++) {
        char path[64], stat[256] = "";
        snprintf(path, sizeof path, "/proc/%d/stat", (int)trainer);
        FILE *f = fopen(path, "r");
        if (!f) {
            gone = 1;
            break;
        }
        size_t n = fread(stat, 1, sizeof stat - 1, f);
        stat[n] = '\0';
        fclose(f);
        char *paren = strrchr(stat, ')');
        if (paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X'))
            gone = 1;
        else
            usleep(100000);
    }
    assert_true(gone);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lines_and_exit_status),
        cmocka_unit_test(killed_by_signal),
        cmocka_unit_test(exec_failure_is_reported),
        cmocka_unit_test(sigterm_reaches_the_whole_group),
        cmocka_unit_test(close_kills_a_running_child),
        cmocka_unit_test(long_lines_are_cut),
        cmocka_unit_test(no_descriptor_leaks_and_stdin_is_empty),
        cmocka_unit_test(runs_in_the_given_folder),
        cmocka_unit_test(trainer_dies_with_its_worker),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
