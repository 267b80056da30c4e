/* test_slurm_cluster.c - the Slurm executor against a real throwaway
 * single-node cluster (tests/slurm/slurm-up.sh, brought up for this file
 * and down after it): submit, see a job pending with its reason in words,
 * running and ended by its tag, cancel by tag, a time limit clamped to the
 * partition's MaxTime, the partition's capacity, and a spot job preempted
 * by an on-demand one getting SIGTERM in its step.
 *
 * Needs root and the packages of `scripts/deps.sh test` (slurmctld,
 * slurmd, slurm-client, munge), as CI has; without them it fails saying
 * so. Every wait polls the executor's list with a generous deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "exec/slurm.h"

#define DEADLINE_S 90.0

static char kit[256];
static char jobs_dir[300];

static int cluster_up(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        fprintf(stderr, "test_slurm_cluster: must run as root (slurmd runs the jobs), as CI does\n");
        return -1;
    }
    snprintf(kit, sizeof kit, "/tmp/alallo-test-slurm-kit-%ld", (long)getpid());
    snprintf(jobs_dir, sizeof jobs_dir, "%s/jobs", kit);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/tests/slurm/slurm-up.sh %s", ALALLO_SOURCE_DIR, kit);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    char line[512] = "";
    char conf[512] = "";
    while (fgets(line, sizeof line, p))
        if (sscanf(line, "export SLURM_CONF=%511s", conf) == 1)
            break;
    int rc = pclose(p);
    if (rc != 0 || !conf[0]) {
        fprintf(stderr, "test_slurm_cluster: slurm-up.sh failed (status %d); is Slurm installed "
                        "(scripts/deps.sh test)?\n", rc);
        return -1;
    }
    setenv("SLURM_CONF", conf, 1);
    return 0;
}

static int cluster_down(void **state)
{
    (void)state;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/tests/slurm/slurm-down.sh %s", ALALLO_SOURCE_DIR, kit);
    return system(cmd) == 0 ? 0 : -1;
}

static struct executor *open_x(void)
{
    struct slurm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.timeout_ms = 30000;
    struct executor *x = NULL;
    char err[256];
    assert_int_equal(executor_slurm_open(&cfg, &x, err, sizeof err), ERR_OK);
    return x;
}

/* A batch script that runs BODY as a job step under srun (absolute paths:
 * with --export=NONE the job has no PATH). */
static void write_script(const char *name, const char *body, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", jobs_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/bash\nexec /usr/bin/srun --kill-on-bad-exit=1 /bin/bash -c '%s'\n", body);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, 0755), 0);
}

static struct exec_submit submission(const char *tag, const char *partition, const char *gres,
                                     const char *script)
{
    struct exec_submit s;
    memset(&s, 0, sizeof s);
    snprintf(s.tag, sizeof s.tag, "%s", tag);
    snprintf(s.partition, sizeof s.partition, "%s", partition);
    snprintf(s.gres, sizeof s.gres, "%s", gres);
    s.cpus = 1;
    s.mem_mb = 100; /* without --mem a job takes the node's whole memory */
    s.time_limit_min = 10;
    snprintf(s.script, sizeof s.script, "%s", script);
    snprintf(s.output, sizeof s.output, "%s/%s.out", jobs_dir, tag);
    snprintf(s.workdir, sizeof s.workdir, "%s", jobs_dir);
    snprintf(s.comment, sizeof s.comment, "alallo:ftjob-test:1");
    return s;
}

static bool find(struct executor *x, const char *tag, struct exec_job *out)
{
    struct exec_job jobs[64];
    int n = 0;
    enum alallo_err e = executor_list(x, jobs, 64, &n);
    if (e)
        fail_msg("list: %s", x->error);
    for (int i = 0; i < n && i < 64; i++)
        if (strcmp(jobs[i].tag, tag) == 0) {
            *out = jobs[i];
            return true;
        }
    return false;
}

static void pause_a_little(void)
{
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* Lists until the job tagged tag is in state st; fails past the deadline. */
static struct exec_job wait_state(struct executor *x, const char *tag, enum exec_state st)
{
    double end = clock_mono_s() + DEADLINE_S;
    struct exec_job j;
    memset(&j, 0, sizeof j);
    for (;;) {
        if (find(x, tag, &j) && j.state == st)
            return j;
        if (clock_mono_s() > end)
            fail_msg("%s: not in state %d within %.0f s (last: %s %s)", tag, (int)st, DEADLINE_S,
                     j.raw_state, j.reason);
        pause_a_little();
    }
}

static bool file_has(const char *path, const char *text)
{
    char buf[8192] = "";
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    buf[fread(buf, 1, sizeof buf - 1, f)] = '\0';
    fclose(f);
    return strstr(buf, text) != NULL;
}

static void wait_file_has(const char *path, const char *text)
{
    double end = clock_mono_s() + DEADLINE_S;
    while (!file_has(path, text)) {
        if (clock_mono_s() > end)
            fail_msg("%s: no '%s' within %.0f s", path, text, DEADLINE_S);
        pause_a_little();
    }
}

static void pending_running_ended_and_cancelled_by_tag(void **state)
{
    (void)state;
    struct executor *x = open_x();
    char hold[512], quick[512], release[512];
    snprintf(release, sizeof release, "%s/release-a", jobs_dir);
    char body[1024];
    snprintf(body, sizeof body,
             "echo gpus=$CUDA_VISIBLE_DEVICES; while [ ! -e %s ]; do sleep 0.1; done; echo done",
             release);
    write_script("hold.sh", body, hold, sizeof hold);
    write_script("quick.sh", "echo never", quick, sizeof quick);

    /* A holds both GPUs until released. */
    struct exec_submit a = submission("alallo-att-clusterA", "ondemand", "gpu:2", hold);
    struct exec_receipt ra;
    if (executor_submit(x, &a, &ra) != ERR_OK)
        fail_msg("submit A: %s", x->error);
    assert_true(ra.id[0] != '\0');
    struct exec_job ja = wait_state(x, a.tag, EXEC_RUNNING);
    assert_string_equal(ja.id, ra.id);
    assert_true(ja.node[0] != '\0');
    wait_file_has(a.output, "gpus=0,1");

    /* B needs a GPU: pending, and says why. Its 1000 min are more than
     * the partition's 12 h: clamped, and the receipt says so. */
    struct exec_submit b = submission("alallo-att-clusterB", "ondemand", "gpu:1", quick);
    b.time_limit_min = 1000;
    struct exec_receipt rb;
    if (executor_submit(x, &b, &rb) != ERR_OK)
        fail_msg("submit B: %s", x->error);
    assert_true(rb.clamped);
    assert_int_equal(rb.time_limit_min, 720);
    assert_non_null(strstr(rb.note, "partition ondemand"));
    struct exec_job jb = wait_state(x, b.tag, EXEC_PENDING);
    assert_string_equal(jb.raw_state, "PENDING");
    assert_non_null(strstr(jb.reason, "(Slurm: "));
    double end = clock_mono_s() + DEADLINE_S;
    while (strcmp(jb.raw_reason, "Resources") != 0 && strcmp(jb.raw_reason, "Priority") != 0) {
        if (clock_mono_s() > end)
            fail_msg("B pending for '%s', not for resources", jb.raw_reason);
        pause_a_little();
        assert_true(find(x, b.tag, &jb));
    }

    /* Cancel B by its tag: ended, never ran. */
    assert_int_equal(executor_cancel(x, b.tag), ERR_OK);
    jb = wait_state(x, b.tag, EXEC_ENDED);
    assert_string_equal(jb.raw_state, "CANCELLED");
    assert_false(file_has(b.output, "never"));

    /* A ends by itself: listed ended (within MinJobAge), its output kept. */
    FILE *f = fopen(release, "w");
    assert_non_null(f);
    fclose(f);
    ja = wait_state(x, a.tag, EXEC_ENDED);
    assert_string_equal(ja.raw_state, "COMPLETED");
    assert_non_null(strstr(ja.reason, "without the attempt reporting"));
    wait_file_has(a.output, "done");
    /* Cancelling what has ended is no error. */
    assert_int_equal(executor_cancel(x, a.tag), ERR_OK);
    executor_close(x);
}

static void spot_is_preempted_and_its_step_hears_sigterm(void **state)
{
    (void)state;
    struct executor *x = open_x();
    char spot[512], od[512];
    write_script("spot.sh",
                 "trap \"echo got TERM; exit 4\" TERM; echo up; "
                 "for i in $(seq 6000); do sleep 0.1; done",
                 spot, sizeof spot);
    write_script("od.sh", "echo on-demand ran", od, sizeof od);
    struct exec_submit s = submission("alallo-att-spot", "spot", "gpu:2", spot);
    if (executor_submit(x, &s, NULL) != ERR_OK)
        fail_msg("submit spot: %s", x->error);
    wait_state(x, s.tag, EXEC_RUNNING);
    wait_file_has(s.output, "up");

    struct exec_submit o = submission("alallo-att-ondemand", "ondemand", "gpu:1", od);
    double t0 = clock_mono_s();
    if (executor_submit(x, &o, NULL) != ERR_OK)
        fail_msg("submit on-demand: %s", x->error);
    wait_file_has(s.output, "got TERM");
    double took = clock_mono_s() - t0;
    fprintf(stderr, "preemption: SIGTERM in the spot step %.2f s after the on-demand submit\n",
            took);
    wait_file_has(o.output, "on-demand ran");
    struct exec_job js = wait_state(x, s.tag, EXEC_ENDED);
    assert_int_equal(js.state, EXEC_ENDED); /* not requeued: --no-requeue */
    wait_state(x, o.tag, EXEC_ENDED);
    executor_close(x);
}

static void capacity_of_the_partitions(void **state)
{
    (void)state;
    struct executor *x = open_x();
    struct exec_capacity c;
    if (executor_capacity(x, "spot", "", &c) != ERR_OK)
        fail_msg("capacity: %s", x->error);
    assert_int_equal(c.nodes, 1);
    assert_int_equal(c.nodes_up, 1);
    assert_int_equal(c.gpus, 2);
    assert_int_equal(c.max_gpus_per_node, 2);
    assert_int_equal(c.cpus, (int)sysconf(_SC_NPROCESSORS_ONLN));
    assert_int_equal(c.mem_mb, 4000);
    assert_int_equal(c.max_time_min, 720);
    assert_int_equal(executor_capacity(x, "", "", &c), ERR_OK); /* the default: ondemand */
    assert_int_equal(c.gpus, 2);
    assert_int_equal(executor_capacity(x, "nosuch", "", &c), ERR_INVALID);
    assert_non_null(strstr(x->error, "no partition nosuch"));
    executor_close(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(capacity_of_the_partitions),
        cmocka_unit_test(pending_running_ended_and_cancelled_by_tag),
        cmocka_unit_test(spot_is_preempted_and_its_step_hears_sigterm),
    };
    return cmocka_run_group_tests(tests, cluster_up, cluster_down);
}
