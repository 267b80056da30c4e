/* test_slurm_stub.c - the Slurm executor against stub sbatch, squeue,
 * scancel, scontrol and sinfo: shell scripts in a folder of their own
 * (the executor's bin_dir) that record their arguments and answer what
 * the test put in files beside them (TOOL.out, TOOL.err, TOOL.rc,
 * TOOL.sleep). The real tools are exercised by test_slurm_cluster.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/fs.h"
#include "exec/slurm.h"

static char dir[256];

static void put(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void drop(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

/* The arguments TOOL got last, one a line. */
static void args_of(const char *tool, char *out, size_t cap)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.args", dir, tool);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/alallo-test-slurm-stub-%ld", (long)getpid());
    fs_remove_tree(dir);
    if (mkdir(dir, 0700) != 0)
        return -1;
    const char *tools[] = {"sbatch", "squeue", "scancel", "scontrol", "sinfo"};
    for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++) {
        char body[2048], path[512];
        snprintf(body, sizeof body,
                 "#!/bin/sh\n"
                 "d='%s'; t=%s\n"
                 "printf '%%s\\n' \"$@\" > \"$d/$t.args\"\n"
                 "[ -f \"$d/$t.sleep\" ] && sleep \"$(cat \"$d/$t.sleep\")\"\n"
                 "[ -f \"$d/$t.err\" ] && cat \"$d/$t.err\" >&2\n"
                 "[ -f \"$d/$t.out\" ] && cat \"$d/$t.out\"\n"
                 "[ -f \"$d/$t.rc\" ] && exit \"$(cat \"$d/$t.rc\")\"\n"
                 "exit 0\n",
                 dir, tools[i]);
        snprintf(path, sizeof path, "%s/%s", dir, tools[i]);
        put(tools[i], body);
        if (chmod(path, 0700) != 0)
            return -1;
    }
    put("scontrol.out",
        "PartitionName=ondemand AllowGroups=ALL Default=YES MaxTime=12:00:00 State=UP\n"
        "PartitionName=short AllowGroups=ALL Default=NO MaxTime=01:00:00 State=UP\n"
        "PartitionName=free AllowGroups=ALL Default=NO MaxTime=UNLIMITED State=UP\n");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return fs_remove_tree(dir);
}

static struct executor *open_x(int timeout_ms)
{
    struct slurm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.bin_dir, sizeof cfg.bin_dir, "%s", dir);
    snprintf(cfg.user, sizeof cfg.user, "svc");
    cfg.timeout_ms = timeout_ms;
    cfg.partition_cache_s = -1; /* read MaxTime every time: the tests change it */
    struct executor *x = NULL;
    char err[256];
    assert_int_equal(executor_slurm_open(&cfg, &x, err, sizeof err), ERR_OK);
    assert_string_equal(x->name, "slurm");
    return x;
}

static struct exec_submit a_submission(void)
{
    struct exec_submit s;
    memset(&s, 0, sizeof s);
    snprintf(s.tag, sizeof s.tag, "alallo-att-abc123");
    snprintf(s.partition, sizeof s.partition, "ondemand");
    snprintf(s.gres, sizeof s.gres, "gpu:a100:1");
    s.cpus = 4;
    s.mem_mb = 16384;
    s.time_limit_min = 90;
    s.signal_lead_s = 120;
    snprintf(s.script, sizeof s.script, "/data/jobs/j/attempts/a/attempt.sbatch");
    snprintf(s.output, sizeof s.output, "/data/jobs/j/attempts/a/slurm-%%j.out");
    return s;
}

static void submit_asks_sbatch_for_everything(void **state)
{
    (void)state;
    struct executor *x = open_x(5000);
    put("sbatch.out", "4242\n");
    struct exec_submit s = a_submission();
    snprintf(s.qos, sizeof s.qos, "high");
    snprintf(s.account, sizeof s.account, "lab");
    snprintf(s.constraint, sizeof s.constraint, "a100&ib");
    snprintf(s.workdir, sizeof s.workdir, "/scratch");
    snprintf(s.comment, sizeof s.comment, "alallo:ftjob-1:3");
    struct exec_receipt r;
    assert_int_equal(executor_submit(x, &s, &r), ERR_OK);
    assert_string_equal(r.id, "4242");
    assert_false(r.clamped);
    assert_int_equal(r.time_limit_min, 90);
    char a[4096];
    args_of("sbatch", a, sizeof a);
    assert_string_equal(a, "--parsable\n--no-requeue\n--export=NONE\n--nodes=1\n--ntasks=1\n"
                           "--job-name=alallo-att-abc123\n--partition=ondemand\n--qos=high\n"
                           "--account=lab\n--constraint=a100&ib\n--gres=gpu:a100:1\n"
                           "--cpus-per-task=4\n--mem=16384M\n--time=90\n--signal=USR1@120\n"
                           "--output=/data/jobs/j/attempts/a/slurm-%j.out\n--open-mode=append\n"
                           "--chdir=/scratch\n--comment=alallo:ftjob-1:3\n"
                           "/data/jobs/j/attempts/a/attempt.sbatch\n");
    /* The old entry point answers the same. */
    char id[EXEC_ID_MAX];
    put("sbatch.out", "4243;alallo-ci\n");
    assert_int_equal(x->ops->submit(x, &s, id), ERR_OK);
    assert_string_equal(id, "4243");
    executor_close(x);
}

static void a_minimal_submission_leaves_out_what_is_not_given(void **state)
{
    (void)state;
    struct executor *x = open_x(5000);
    put("sbatch.out", "7\n");
    struct exec_submit s;
    memset(&s, 0, sizeof s);
    snprintf(s.tag, sizeof s.tag, "alallo-att-min");
    snprintf(s.script, sizeof s.script, "/x/run.sh");
    struct exec_receipt r;
    assert_int_equal(executor_submit(x, &s, &r), ERR_OK);
    char a[1024];
    args_of("sbatch", a, sizeof a);
    assert_string_equal(a, "--parsable\n--no-requeue\n--export=NONE\n--nodes=1\n--ntasks=1\n"
                           "--job-name=alallo-att-min\n/x/run.sh\n");
    executor_close(x);
}

static void a_time_limit_above_max_time_is_clamped_and_said(void **state)
{
    (void)state;
    struct executor *x = open_x(5000);
    put("sbatch.out", "9\n");
    struct exec_submit s = a_submission();
    snprintf(s.partition, sizeof s.partition, "short");
    struct exec_receipt r;
    assert_int_equal(executor_submit(x, &s, &r), ERR_OK);
    assert_true(r.clamped);
    assert_int_equal(r.time_limit_min, 60);
    assert_string_equal(r.note, "Time limit cut from 90 to 60 min, the most partition short allows");
    char a[4096];
    args_of("sbatch", a, sizeof a);
    assert_non_null(strstr(a, "\n--time=60\n"));
    args_of("scontrol", a, sizeof a);
    assert_string_equal(a, "show\npartition\n-o\nshort\n");

    /* UNLIMITED: nothing to clamp. */
    snprintf(s.partition, sizeof s.partition, "free");
    s.time_limit_min = 100000;
    assert_int_equal(executor_submit(x, &s, &r), ERR_OK);
    assert_false(r.clamped);
    args_of("sbatch", a, sizeof a);
    assert_non_null(strstr(a, "\n--time=100000\n"));

    /* No partition: the default one's MaxTime (12 h). */
    s.partition[0] = '\0';
    s.time_limit_min = 1000;
    assert_int_equal(executor_submit(x, &s, &r), ERR_OK);
    assert_true(r.clamped);
    assert_int_equal(r.time_limit_min, 720);
    assert_non_null(strstr(r.note, "partition ondemand"));

    /* A partition Slurm does not know: refused before sbatch. */
    snprintf(s.partition, sizeof s.partition, "nosuch");
    assert_int_equal(executor_submit(x, &s, &r), ERR_INVALID);
    assert_non_null(strstr(x->error, "no partition nosuch"));
    executor_close(x);
}

static void a_lost_sbatch_reply_is_unavailable_within_the_limit(void **state)
{
    (void)state;
    struct executor *x = open_x(400);
    put("sbatch.sleep", "30");
    struct exec_submit s = a_submission();
    s.time_limit_min = 0;
    double t0 = clock_mono_s();
    struct exec_receipt r;
    assert_int_equal(executor_submit(x, &s, &r), ERR_UNAVAILABLE);
    double took = clock_mono_s() - t0;
    assert_true(took < 10.0); /* killed at 0.4 s; generous for a loaded machine */
    assert_non_null(strstr(x->error, "may exist; list by tag"));
    assert_string_equal(r.id, "");
    drop("sbatch.sleep");
    executor_close(x);
}

static void sbatch_refusals_keep_slurms_words(void **state)
{
    (void)state;
    struct executor *x = open_x(5000);
    struct exec_submit s = a_submission();
    s.time_limit_min = 0;
    put("sbatch.err", "sbatch: error: Batch job submission failed: Requested node configuration "
                      "is not available\n");
    put("sbatch.rc", "1");
    assert_int_equal(executor_submit(x, &s, NULL), ERR_INVALID);
    assert_non_null(strstr(x->error, "Requested node configuration is not available"));
    put("sbatch.err", "sbatch: error: Batch job submission failed: Unable to contact slurm "
                      "controller (connect failure)\n");
    assert_int_equal(executor_submit(x, &s, NULL), ERR_UNAVAILABLE);
    assert_non_null(strstr(x->error, "Unable to contact slurm controller"));
    drop("sbatch.err");
    drop("sbatch.rc");
    /* Exit 0 but no id: not trusted. */
    put("sbatch.out", "sbatch: Submitted batch job 5\n");
    assert_int_equal(executor_submit(x, &s, NULL), ERR_UNAVAILABLE);
    assert_non_null(strstr(x->error, "answered no job id"));
    executor_close(x);
}

static void bad_submissions_are_refused_before_any_command(void **state)
{
    (void)state;
    struct executor *x = open_x(5000);
    drop("sbatch.args");
    struct exec_submit s = a_submission();
    snprintf(s.tag, sizeof s.tag, "someone-else");
    assert_int_equal(executor_submit(x, &s, NULL), ERR_INVALID);
    assert_non_null(strstr(x->error, "not an attempt's tag"));
    s = a_submission();
    snprintf(s.script, sizeof s.script, "relative.sh");
    assert_int_equal(executor_submit(x, &s, NULL), ERR_INVALID);
    assert_non_null(strstr(x->error, "absolute path"));
    s = a_submission();
    snprintf(s.constraint, sizeof s.constraint, "a\nb");
    assert_int_equal(executor_submit(x, &s, NULL), ERR_INVALID);
    s = a_submission();
    s.mem_mb = -1;
    assert_int_equal(executor_submit(x, &s, NULL), ERR_INVALID);
    s = a_submission();
    s.signal_lead_s = 70000;
    assert_int_equal(executor_submit(x, &s, NULL), ERR_INVALID);
    assert_non_null(strstr(x->error, "more than 65535"));
    char path[512];
    snprintf(path, sizeof path, "%s/sbatch.args", dir);
    assert_int_equal(access(path, F_OK), -1);
    executor_close(x);
}

static void list_keeps_alallos_tags_only(void **state)
{
    (void)state;
    struct executor *x = open_x(5000);
    put("squeue.out",
        "11|RUNNING|None|2026-12-01T11:00:00|2026-12-01T12:00:00|vm|alallo-att-one\n"
        "12|PENDING|Priority|N/A|N/A|(null)|alallo-att-two\n"
        "13|RUNNING|None|N/A|N/A|vm|someones-job\n"
        "14;c|COMPLETED|None|N/A|N/A|vm|alallo-att-three\n"
        "15|PENDING|None|N/A|N/A|(null)|alallo-bad/id\n");
    struct exec_job jobs[8];
    int n = -1;
    assert_int_equal(executor_list(x, jobs, 8, &n), ERR_OK);
    assert_int_equal(n, 3);
    assert_string_equal(jobs[0].tag, "alallo-att-one");
    assert_int_equal(jobs[0].state, EXEC_RUNNING);
    assert_string_equal(jobs[1].tag, "alallo-att-two");
    assert_int_equal(jobs[1].state, EXEC_PENDING);
    assert_non_null(strstr(jobs[1].reason, "higher priority"));
    assert_string_equal(jobs[2].id, "14");
    assert_int_equal(jobs[2].state, EXEC_ENDED);
    char a[1024];
    args_of("squeue", a, sizeof a);
    assert_string_equal(a, "--noheader\n--all\n--states=all\n--user=svc\n--format=%i|%T|%r|%S|%e|%N|%j\n");
    /* Room for one: the total still says three. */
    assert_int_equal(executor_list(x, jobs, 1, &n), ERR_OK);
    assert_int_equal(n, 3);
    assert_string_equal(jobs[0].tag, "alallo-att-one");
    /* Nothing queued. */
    put("squeue.out", "");
    assert_int_equal(executor_list(x, jobs, 8, &n), ERR_OK);
    assert_int_equal(n, 0);
    executor_close(x);
}

static void a_list_with_an_unreadable_line_is_an_error(void **state)
{
    (void)state;
    struct executor *x = open_x(5000);
    put("squeue.out", "11|RUNNING|None|N/A|N/A|vm|alallo-att-one\n"
                      "garbage without bars\n");
    struct exec_job jobs[8];
    int n = -1;
    assert_int_equal(executor_list(x, jobs, 8, &n), ERR_UNAVAILABLE);
    assert_int_equal(n, 0);
    assert_non_null(strstr(x->error, "garbage without bars"));
    put("squeue.out", "");
    put("squeue.err", "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n");
    put("squeue.rc", "1");
    assert_int_equal(executor_list(x, jobs, 8, &n), ERR_UNAVAILABLE);
    assert_non_null(strstr(x->error, "Unable to contact"));
    drop("squeue.err");
    drop("squeue.rc");
    put("squeue.sleep", "30");
    assert_int_equal(x->ops->list(x, jobs, 8, &n), ERR_UNAVAILABLE);
    assert_non_null(strstr(x->error, "did not answer"));
    drop("squeue.sleep");
    executor_close(x);
}

static void cancel_goes_by_name_and_user(void **state)
{
    (void)state;
    struct executor *x = open_x(5000);
    assert_int_equal(executor_cancel(x, "alallo-att-abc"), ERR_OK);
    char a[256];
    args_of("scancel", a, sizeof a);
    assert_string_equal(a, "--name=alallo-att-abc\n--user=svc\n");
    put("scancel.err", "scancel: error: Kill job error on job id 5: Job/step already completing "
                       "or completed\n");
    put("scancel.rc", "1");
    assert_int_equal(executor_cancel(x, "alallo-att-abc"), ERR_OK);
    put("scancel.err", "scancel: error: Unable to contact slurm controller\n");
    assert_int_equal(executor_cancel(x, "alallo-att-abc"), ERR_UNAVAILABLE);
    drop("scancel.err");
    drop("scancel.rc");
    assert_int_equal(executor_cancel(x, "not-ours"), ERR_INVALID);
    executor_close(x);
}

static void capacity_of_a_partition(void **state)
{
    (void)state;
    struct executor *x = open_x(5000);
    put("sinfo.out", "n1|8|64000|gpu:a100:4|mix\n"
                     "n2|8|64000|gpu:a100:4|down*\n"
                     "n3|8|64000|gpu:2|idle\n");
    struct exec_capacity c;
    assert_int_equal(executor_capacity(x, "short", "a100", &c), ERR_OK);
    assert_int_equal(c.nodes, 3);
    assert_int_equal(c.nodes_up, 2);
    assert_int_equal(c.cpus, 16);
    assert_int_equal(c.mem_mb, 128000);
    assert_int_equal(c.gpus, 4);
    assert_int_equal(c.max_time_min, 60);
    char a[256];
    args_of("sinfo", a, sizeof a);
    assert_string_equal(a, "--noheader\n--Node\n--partition=short\n--format=%N|%c|%m|%G|%t\n");
    assert_int_equal(executor_capacity(x, "", "", &c), ERR_OK);
    assert_int_equal(c.gpus, 6);
    args_of("sinfo", a, sizeof a);
    assert_non_null(strstr(a, "--partition=ondemand"));
    put("sinfo.out", "n1|eight|64000|gpu:a100:4|mix\n");
    assert_int_equal(executor_capacity(x, "short", "a100", &c), ERR_UNAVAILABLE);
    assert_int_equal(c.nodes, 0);
    executor_close(x);
}

static void tools_that_are_missing_or_a_bad_config(void **state)
{
    (void)state;
    struct slurm_config cfg;
    memset(&cfg, 0, sizeof cfg);
    struct executor *x = NULL;
    char err[256];
    snprintf(cfg.bin_dir, sizeof cfg.bin_dir, "relative/bin");
    assert_int_equal(executor_slurm_open(&cfg, &x, err, sizeof err), ERR_INVALID);
    assert_null(x);
    assert_non_null(strstr(err, "not an absolute path"));
    snprintf(cfg.bin_dir, sizeof cfg.bin_dir, "/");
    snprintf(cfg.user, sizeof cfg.user, "a user");
    assert_int_equal(executor_slurm_open(&cfg, &x, err, sizeof err), ERR_INVALID);
    assert_non_null(strstr(err, "not a user name"));
    /* A folder without the tools: every call says it could not run them. */
    cfg.user[0] = '\0';
    snprintf(cfg.bin_dir, sizeof cfg.bin_dir, "%s/empty", dir);
    assert_int_equal(mkdir(cfg.bin_dir, 0700), 0);
    assert_int_equal(executor_slurm_open(&cfg, &x, err, sizeof err), ERR_OK);
    struct exec_job jobs[1];
    int n;
    assert_int_equal(executor_list(x, jobs, 1, &n), ERR_UNAVAILABLE);
    assert_non_null(strstr(x->error, "could not run"));
    assert_non_null(strstr(x->error, "/empty/squeue"));
    executor_close(x);
    executor_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(submit_asks_sbatch_for_everything, setup, teardown),
        cmocka_unit_test_setup_teardown(a_minimal_submission_leaves_out_what_is_not_given, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_time_limit_above_max_time_is_clamped_and_said, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(a_lost_sbatch_reply_is_unavailable_within_the_limit,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(sbatch_refusals_keep_slurms_words, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_submissions_are_refused_before_any_command, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(list_keeps_alallos_tags_only, setup, teardown),
        cmocka_unit_test_setup_teardown(a_list_with_an_unreadable_line_is_an_error, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(cancel_goes_by_name_and_user, setup, teardown),
        cmocka_unit_test_setup_teardown(capacity_of_a_partition, setup, teardown),
        cmocka_unit_test_setup_teardown(tools_that_are_missing_or_a_bad_config, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
