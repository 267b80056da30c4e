/* test_slurm_kit.c - the throwaway cluster itself (tests/slurm/slurm-up.sh
 * and slurm-down.sh): two kits run at once on other ports, each runs a
 * job through the executor, slurm-down stops every daemon it recorded and
 * removes the kit, and a kit the munge user cannot reach is refused with
 * a clear error. Needs root and the Slurm packages, as
 * test_slurm_cluster.c does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/fs.h"
#include "exec/slurm.h"

/* Runs cmd, its stdout (and whatever it sends there) into all. Returns
 * the exit status. */
static int run_cmd(const char *cmd, char *all, size_t cap)
{
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(all, 1, cap - 1, p);
    all[n] = '\0';
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void up(const char *kit, char *conf, size_t cap)
{
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "%s/tests/slurm/slurm-up.sh %s 2>&1", ALALLO_SOURCE_DIR, kit);
    int rc = run_cmd(cmd, out, sizeof out);
    if (rc != 0)
        fail_msg("slurm-up %s: status %d: %s", kit, rc, out);
    const char *e = strstr(out, "export SLURM_CONF=");
    assert_non_null(e);
    snprintf(conf, cap, "%.*s", (int)strcspn(e + 18, "\n"), e + 18);
}

static void down(const char *kit)
{
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "%s/tests/slurm/slurm-down.sh %s 2>&1", ALALLO_SOURCE_DIR, kit);
    assert_int_equal(run_cmd(cmd, out, sizeof out), 0);
}

/* The value of KEY= in slurm.conf. */
static void conf_value(const char *conf, const char *key, char *out, size_t cap)
{
    FILE *f = fopen(conf, "r");
    assert_non_null(f);
    char line[1024];
    out[0] = '\0';
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, klen) == 0 && line[klen] == '=')
            snprintf(out, cap, "%.*s", (int)strcspn(line + klen + 1, "\n"), line + klen + 1);
    fclose(f);
}

static int read_pid(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int pid = -1;
    if (fscanf(f, "%d", &pid) != 1)
        pid = -1;
    fclose(f);
    return pid;
}

/* A job through the executor on the cluster conf names, to its end. */
static void a_job_runs(const char *conf, const char *kit, const char *tag)
{
    setenv("SLURM_CONF", conf, 1);
    struct slurm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = 30000;
    struct executor *x = NULL;
    char err[256];
    assert_int_equal(executor_slurm_open(&cfg, &x, err, sizeof err), ERR_OK);
    struct exec_submit s;
    memset(&s, 0, sizeof s);
    snprintf(s.tag, sizeof s.tag, "%s", tag);
    snprintf(s.partition, sizeof s.partition, "ondemand");
    s.cpus = 1;
    s.mem_mb = 50;
    s.time_limit_min = 5;
    snprintf(s.script, sizeof s.script, "%s/jobs/job.sh", kit);
    snprintf(s.output, sizeof s.output, "%s/jobs/%s.out", kit, tag);
    FILE *f = fopen(s.script, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/bash\necho ran\n");
    fclose(f);
    assert_int_equal(chmod(s.script, 0755), 0);
    if (executor_submit(x, &s, NULL) != ERR_OK)
        fail_msg("submit on %s: %s", kit, x->error);
    double end = clock_mono_s() + 90;
    for (;;) {
        struct exec_job jobs[8];
        int n = 0;
        if (executor_list(x, jobs, 8, &n) != ERR_OK)
            fail_msg("list on %s: %s", kit, x->error);
        bool ended = false;
        for (int i = 0; i < n && i < 8; i++)
            if (strcmp(jobs[i].tag, tag) == 0 && jobs[i].state == EXEC_ENDED) {
                assert_string_equal(jobs[i].raw_state, "COMPLETED");
                ended = true;
            }
        if (ended)
            break;
        if (clock_mono_s() > end)
            fail_msg("%s: the job did not end within 90 s", kit);
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    executor_close(x);
}

static char kit_a[256], kit_b[256];

/* Whatever a test left running, stopped. */
static int both_down(void **state)
{
    (void)state;
    down(kit_a);
    down(kit_b);
    return 0;
}

static void two_kits_at_once_then_nothing_left(void **state)
{
    (void)state;
    if (geteuid() != 0)
        fail_msg("must run as root (slurmd runs the jobs), as CI does");
    char conf_a[512], conf_b[512];
    snprintf(kit_a, sizeof kit_a, "/tmp/alallo-test-kit-a-%ld", (long)getpid());
    snprintf(kit_b, sizeof kit_b, "/tmp/alallo-test-kit-b-%ld", (long)getpid());
    up(kit_a, conf_a, sizeof conf_a);
    up(kit_b, conf_b, sizeof conf_b);
    char port_a[32], port_b[32];
    conf_value(conf_a, "SlurmctldPort", port_a, sizeof port_a);
    conf_value(conf_b, "SlurmctldPort", port_b, sizeof port_b);
    assert_true(port_a[0] && port_b[0]);
    assert_string_not_equal(port_a, port_b);
    assert_string_not_equal(port_a, "6817"); /* Slurm's own default stays free */

    a_job_runs(conf_a, kit_a, "alallo-att-kita");
    a_job_runs(conf_b, kit_b, "alallo-att-kitb");

    const char *daemons[] = {"run/slurmctld.pid", "run/slurmd.pid", "munge/munged.pid"};
    int pids[3];
    char path[512];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", kit_a, daemons[i]);
        pids[i] = read_pid(path);
        assert_true(pids[i] > 0);
        assert_int_equal(kill(pids[i], 0), 0);
    }
    down(kit_a);
    struct stat st;
    assert_int_equal(stat(kit_a, &st), -1); /* removed */
    for (int i = 0; i < 3; i++) {
        /* Gone, or a zombie its parent (PID 1 here) has yet to reap. */
        char stat_path[64], buf[256] = "";
        snprintf(stat_path, sizeof stat_path, "/proc/%d/stat", pids[i]);
        FILE *f = fopen(stat_path, "r");
        if (f) {
            if (!fgets(buf, sizeof buf, f))
                buf[0] = '\0';
            fclose(f);
            const char *close_paren = strrchr(buf, ')');
            assert_non_null(close_paren);
            assert_int_equal(close_paren[2], 'Z');
        }
    }
    /* B was not disturbed by A going. */
    a_job_runs(conf_b, kit_b, "alallo-att-kitb2");
    down(kit_b);
    down(kit_b); /* twice is fine */
}

static void a_kit_munge_cannot_reach_is_refused_clearly(void **state)
{
    (void)state;
    char parent[256], kit[300], cmd[1024], out[4096];
    snprintf(parent, sizeof parent, "/tmp/alallo-test-kit-closed-%ld", (long)getpid());
    assert_int_equal(mkdir(parent, 0700), 0);
    snprintf(kit, sizeof kit, "%s/kit", parent);
    snprintf(cmd, sizeof cmd, "%s/tests/slurm/slurm-up.sh %s 2>&1", ALALLO_SOURCE_DIR, kit);
    assert_int_equal(run_cmd(cmd, out, sizeof out), 1);
    assert_non_null(strstr(out, "not searchable by others"));
    down(kit);
    assert_int_equal(fs_remove_tree(parent), 0);
    snprintf(cmd, sizeof cmd, "%s/tests/slurm/slurm-up.sh 2>&1", ALALLO_SOURCE_DIR);
    assert_int_equal(run_cmd(cmd, out, sizeof out), 2);
    assert_non_null(strstr(out, "usage"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(two_kits_at_once_then_nothing_left, both_down),
        cmocka_unit_test(a_kit_munge_cannot_reach_is_refused_clearly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
