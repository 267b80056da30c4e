/* test_process.c - the process executor: real child processes running
 * small shell scripts. Every wait polls the executor's list up to a
 * generous deadline (a loaded machine is slow), never a fixed sleep. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/fs.h"
#include "exec/process.h"

#define DEADLINE_S 60.0

static char dir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/alallo-test-process-%ld", (long)getpid());
    fs_remove_tree(dir);
    return mkdir(dir, 0700);
}

static int teardown(void **state)
{
    (void)state;
    return fs_remove_tree(dir);
}

static void script(const char *name, const char *body, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\n%s", body);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, 0700), 0);
}

static struct executor *open_x(int grace_s)
{
    struct process_config cfg = {.grace_s = grace_s, .keep_ended_s = 600, .gpus = 2};
    struct executor *x = NULL;
    char err[128];
    assert_int_equal(executor_process_open(&cfg, &x, err, sizeof err), ERR_OK);
    assert_string_equal(x->name, "process");
    return x;
}

static struct exec_submit submission(const char *tag, const char *script_path)
{
    struct exec_submit s;
    memset(&s, 0, sizeof s);
    snprintf(s.tag, sizeof s.tag, "%s", tag);
    snprintf(s.script, sizeof s.script, "%s", script_path);
    snprintf(s.output, sizeof s.output, "%s/%s.out", dir, tag);
    return s;
}

/* The job tagged tag in a fresh list; false when not listed. */
static bool find(struct executor *x, const char *tag, struct exec_job *out)
{
    struct exec_job jobs[16];
    int n = 0;
    assert_int_equal(executor_list(x, jobs, 16, &n), ERR_OK);
    for (int i = 0; i < n && i < 16; i++)
        if (strcmp(jobs[i].tag, tag) == 0) {
            *out = jobs[i];
            return true;
        }
    return false;
}

static void pause_a_little(void)
{
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* Lists until the job tagged tag has ended; fails past the deadline. */
static struct exec_job wait_ended(struct executor *x, const char *tag)
{
    double end = clock_mono_s() + DEADLINE_S;
    struct exec_job j;
    for (;;) {
        assert_true(find(x, tag, &j));
        if (j.state == EXEC_ENDED)
            return j;
        assert_true(clock_mono_s() < end);
        pause_a_little();
    }
}

/* Whether buf holds line as one whole line of its own: a line that only
 * contains it ("child up" for "up") does not count, so a wait can never be
 * satisfied by another process's output. */
static bool holds_line(const char *buf, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = buf; (p = strstr(p, line)) != NULL; p++)
        if ((p == buf || p[-1] == '\n') && p[n] == '\n')
            return true;
    return false;
}

/* Waits until file path holds line as a whole line; fails past the
 * deadline. */
static void wait_line(const char *path, const char *line)
{
    double end = clock_mono_s() + DEADLINE_S;
    for (;;) {
        char buf[4096] = "";
        FILE *f = fopen(path, "r");
        if (f) {
            size_t n = fread(buf, 1, sizeof buf - 1, f);
            buf[n] = '\0';
            fclose(f);
        }
        if (holds_line(buf, line))
            return;
        assert_true(clock_mono_s() < end);
        pause_a_little();
    }
}

static void a_line_is_matched_whole(void **state)
{
    (void)state;
    assert_true(holds_line("up\n", "up"));
    assert_true(holds_line("child up\nup\n", "up"));
    assert_false(holds_line("child up\n", "up"));
    assert_false(holds_line("up", "up")); /* not yet ended by a newline */
    assert_false(holds_line("child got TERM\n", "got TERM"));
    assert_true(holds_line("child got TERM\ngot TERM\n", "got TERM"));
}

static void a_script_runs_and_completes(void **state)
{
    (void)state;
    struct executor *x = open_x(5);
    char path[512], out[512];
    script("ok.sh", "echo hello from $PWD\n", path, sizeof path);
    struct exec_submit s = submission("alallo-att-ok", path);
    snprintf(s.workdir, sizeof s.workdir, "%s", dir);
    struct exec_receipt r;
    assert_int_equal(executor_submit(x, &s, &r), ERR_OK);
    assert_true(r.id[0] != '\0');
    struct exec_job j = wait_ended(x, "alallo-att-ok");
    assert_string_equal(j.id, r.id);
    assert_string_equal(j.raw_state, "COMPLETED");
    assert_string_equal(j.node, "localhost");
    assert_non_null(strstr(j.reason, "completed"));
    snprintf(out, sizeof out, "%s/alallo-att-ok.out", dir);
    char want[600];
    snprintf(want, sizeof want, "hello from %s", dir);
    wait_line(out, want);
    executor_close(x);
}

/* Closes the descriptor *arg after 300 ms. */
static void *close_later(void *arg)
{
    nanosleep(&(struct timespec){.tv_nsec = 300 * 1000000L}, NULL);
    close(*(int *)arg);
    return NULL;
}

/* A script still open for writing somewhere (a child that another thread
 * forked while it was written holds the descriptor until it execs) cannot
 * be run: ETXTBSY. The submission waits for it to be closed, moments
 * later, instead of failing. */
static void a_script_held_open_for_writing_runs_once_closed(void **state)
{
    (void)state;
    struct executor *x = open_x(5);
    char path[512];
    script("busy.sh", "echo ran\n", path, sizeof path);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, close_later, &fd), 0);
    struct exec_submit s = submission("alallo-att-busy", path);
    struct exec_receipt r;
    assert_int_equal(executor_submit(x, &s, &r), ERR_OK);
    pthread_join(t, NULL);
    struct exec_job j = wait_ended(x, "alallo-att-busy");
    assert_string_equal(j.raw_state, "COMPLETED");
    executor_close(x);
}

static void a_failing_script_says_its_status(void **state)
{
    (void)state;
    struct executor *x = open_x(5);
    char path[512];
    script("fail.sh", "echo oops >&2; exit 3\n", path, sizeof path);
    struct exec_submit s = submission("alallo-att-fail", path);
    assert_int_equal(executor_submit(x, &s, NULL), ERR_OK);
    struct exec_job j = wait_ended(x, "alallo-att-fail");
    assert_string_equal(j.raw_state, "FAILED");
    assert_string_equal(j.reason, "The process exited with status 3");
    char out[512];
    snprintf(out, sizeof out, "%s/alallo-att-fail.out", dir);
    wait_line(out, "oops"); /* stderr goes to the output too */
    executor_close(x);
}

static void cancel_sends_term_to_the_whole_group(void **state)
{
    (void)state;
    struct executor *x = open_x(5);
    char path[512], out[512];
    /* The script and a child of it both trap TERM: both must hear it. */
    script("term.sh",
           "sh -c 'trap \"echo child got TERM; exit 4\" TERM; echo child up; "
           "while :; do sleep 0.05; done' &\n"
           "trap 'echo got TERM; wait; exit 4' TERM\n"
           "echo up\n"
           "while :; do sleep 0.05; done\n",
           path, sizeof path);
    struct exec_submit s = submission("alallo-att-term", path);
    assert_int_equal(executor_submit(x, &s, NULL), ERR_OK);
    snprintf(out, sizeof out, "%s/alallo-att-term.out", dir);
    /* Both traps are set before their lines are printed; each line is
     * matched whole, so "child up" never stands in for the script's "up". */
    wait_line(out, "child up");
    wait_line(out, "up");
    struct exec_job j;
    assert_true(find(x, "alallo-att-term", &j));
    assert_int_equal(j.state, EXEC_RUNNING);
    assert_int_equal(executor_cancel(x, "alallo-att-term"), ERR_OK);
    j = wait_ended(x, "alallo-att-term");
    assert_string_equal(j.raw_state, "CANCELLED");
    wait_line(out, "got TERM");
    wait_line(out, "child got TERM");
    /* Cancelling again, or a tag with no job: nothing to do. */
    assert_int_equal(executor_cancel(x, "alallo-att-term"), ERR_OK);
    assert_int_equal(executor_cancel(x, "alallo-att-none"), ERR_OK);
    executor_close(x);
}

static void a_script_that_ignores_term_is_killed_after_the_grace(void **state)
{
    (void)state;
    struct executor *x = open_x(1);
    char path[512], out[512];
    script("stubborn.sh", "trap '' TERM\necho up\nwhile :; do sleep 0.05; done\n", path,
           sizeof path);
    struct exec_submit s = submission("alallo-att-stubborn", path);
    assert_int_equal(executor_submit(x, &s, NULL), ERR_OK);
    snprintf(out, sizeof out, "%s/alallo-att-stubborn.out", dir);
    wait_line(out, "up");
    double t0 = clock_mono_s();
    assert_int_equal(executor_cancel(x, "alallo-att-stubborn"), ERR_OK);
    struct exec_job j = wait_ended(x, "alallo-att-stubborn");
    assert_true(clock_mono_s() - t0 >= 0.9); /* not before the grace */
    assert_string_equal(j.raw_state, "CANCELLED");
    executor_close(x);
}

static void usr1_comes_the_lead_before_the_limit(void **state)
{
    (void)state;
    struct executor *x = open_x(5);
    char path[512], out[512];
    script("usr1.sh",
           "trap 'echo got USR1' USR1\necho up\nwhile :; do sleep 0.05; done\n", path,
           sizeof path);
    struct exec_submit s = submission("alallo-att-usr1", path);
    s.time_limit_min = 1;
    /* USR1 about 5 s after the start: the trap is set well before, even on
     * a loaded machine (at 1 s a slow start met the default action). */
    s.signal_lead_s = 55;
    assert_int_equal(executor_submit(x, &s, NULL), ERR_OK);
    snprintf(out, sizeof out, "%s/alallo-att-usr1.out", dir);
    wait_line(out, "up");
    double end = clock_mono_s() + DEADLINE_S;
    for (;;) { /* the executor acts on time when called: keep listing */
        struct exec_job j;
        assert_true(find(x, "alallo-att-usr1", &j));
        assert_int_equal(j.state, EXEC_RUNNING);
        FILE *f = fopen(out, "r");
        char buf[256] = "";
        if (f) {
            buf[fread(buf, 1, sizeof buf - 1, f)] = '\0';
            fclose(f);
        }
        if (strstr(buf, "got USR1"))
            break;
        assert_true(clock_mono_s() < end);
        pause_a_little();
    }
    executor_close(x); /* stops it: SIGTERM, the default action */
}

static void close_stops_what_still_runs(void **state)
{
    (void)state;
    struct executor *x = open_x(1);
    char path[512], out[512], pidfile[512];
    snprintf(pidfile, sizeof pidfile, "%s/pid", dir);
    script("long.sh", "echo $$ > \"$1\"\necho up\nexec sleep 600\n", path, sizeof path);
    /* The script reads its pid file's path from $1: give it by a wrapper. */
    char wrapper[512], body[1200];
    snprintf(body, sizeof body, "exec '%s' '%s'\n", path, pidfile);
    script("wrap.sh", body, wrapper, sizeof wrapper);
    struct exec_submit s = submission("alallo-att-long", wrapper);
    assert_int_equal(executor_submit(x, &s, NULL), ERR_OK);
    snprintf(out, sizeof out, "%s/alallo-att-long.out", dir);
    wait_line(out, "up");
    FILE *f = fopen(pidfile, "r");
    assert_non_null(f);
    int pid = 0;
    assert_int_equal(fscanf(f, "%d", &pid), 1);
    fclose(f);
    assert_int_equal(kill(pid, 0), 0);
    executor_close(x);
    /* Reaped by close: the PID no longer names the script. */
    assert_int_equal(kill(pid, 0), -1);
}

static void bad_submissions_are_clear_errors(void **state)
{
    (void)state;
    struct executor *x = open_x(5);
    char path[512];
    script("ok.sh", "exit 0\n", path, sizeof path);
    struct exec_submit s = submission("alallo-att-bad", path);
    snprintf(s.output, sizeof s.output, "%s/no/such/folder/out", dir);
    assert_int_equal(executor_submit(x, &s, NULL), ERR_INVALID);
    assert_non_null(strstr(x->error, "cannot open the output"));
    s = submission("alallo-att-bad", path);
    snprintf(s.workdir, sizeof s.workdir, "%s/nowhere", dir);
    assert_int_equal(executor_submit(x, &s, NULL), ERR_INVALID);
    assert_non_null(strstr(x->error, "is not a folder"));
    char notexec[512];
    snprintf(notexec, sizeof notexec, "%s/plain.txt", dir);
    FILE *f = fopen(notexec, "w");
    assert_non_null(f);
    fclose(f);
    s = submission("alallo-att-bad", notexec);
    assert_int_equal(executor_submit(x, &s, NULL), ERR_INVALID);
    assert_non_null(strstr(x->error, "could not run"));
    struct exec_job jobs[4];
    int n = -1;
    assert_int_equal(executor_list(x, jobs, 4, &n), ERR_OK);
    assert_int_equal(n, 0); /* nothing half-recorded */
    struct exec_capacity c;
    assert_int_equal(executor_capacity(x, "", "", &c), ERR_OK);
    assert_int_equal(c.nodes_up, 1);
    assert_true(c.cpus >= 1);
    assert_true(c.mem_mb > 0);
    assert_int_equal(c.gpus, 2);
    executor_close(x);

    struct process_config bad = {.grace_s = -1};
    char err[128];
    assert_int_equal(executor_process_open(&bad, &x, err, sizeof err), ERR_INVALID);
    assert_null(x);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_line_is_matched_whole),
        cmocka_unit_test_setup_teardown(a_script_runs_and_completes, setup, teardown),
        cmocka_unit_test_setup_teardown(a_script_held_open_for_writing_runs_once_closed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_failing_script_says_its_status, setup, teardown),
        cmocka_unit_test_setup_teardown(cancel_sends_term_to_the_whole_group, setup, teardown),
        cmocka_unit_test_setup_teardown(a_script_that_ignores_term_is_killed_after_the_grace,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(usr1_comes_the_lead_before_the_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(close_stops_what_still_runs, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_submissions_are_clear_errors, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
