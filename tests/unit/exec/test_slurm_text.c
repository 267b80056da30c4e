/* test_slurm_text.c - reading Slurm's outputs (job ids with ";cluster",
 * durations, time stamps, squeue and sinfo lines, GRES texts) and Slurm's
 * words said plainly. Pure: no Slurm needed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>
#include <time.h>

#include "exec/slurm_text.h"

static void job_ids_with_and_without_a_cluster(void **state)
{
    (void)state;
    char id[EXEC_ID_MAX];
    assert_true(slurm_parse_job_id("123\n", id));
    assert_string_equal(id, "123");
    assert_true(slurm_parse_job_id("4567;alallo-ci\n", id));
    assert_string_equal(id, "4567");
    assert_true(slurm_parse_job_id("  89 \n", id));
    assert_string_equal(id, "89");
    assert_true(slurm_parse_job_id("12_3\n", id));
    assert_string_equal(id, "12_3");
    assert_false(slurm_parse_job_id("", id));
    assert_false(slurm_parse_job_id(NULL, id));
    assert_false(slurm_parse_job_id("Submitted batch job 5\n", id));
    assert_false(slurm_parse_job_id(";cluster\n", id));
    assert_false(slurm_parse_job_id("12a\n", id));
    assert_false(slurm_parse_job_id("123456789012345678901234567890123456\n", id));
}

static void durations_in_every_form(void **state)
{
    (void)state;
    long m = -1;
    assert_true(slurm_parse_minutes("30", &m));
    assert_int_equal(m, 30);
    assert_true(slurm_parse_minutes("30:59", &m)); /* min:sec */
    assert_int_equal(m, 30);
    assert_true(slurm_parse_minutes("12:00:00", &m));
    assert_int_equal(m, 720);
    assert_true(slurm_parse_minutes("2-00", &m));
    assert_int_equal(m, 2880);
    assert_true(slurm_parse_minutes("1-12:30", &m));
    assert_int_equal(m, 1440 + 720 + 30);
    assert_true(slurm_parse_minutes("1-00:00:59", &m));
    assert_int_equal(m, 1440);
    assert_true(slurm_parse_minutes("UNLIMITED", &m));
    assert_int_equal(m, 0);
    assert_true(slurm_parse_minutes("INFINITE", &m));
    assert_int_equal(m, 0);
    assert_false(slurm_parse_minutes("NONE", &m));
    assert_false(slurm_parse_minutes("", &m));
    assert_false(slurm_parse_minutes("1:2:3:4", &m));
    assert_false(slurm_parse_minutes("1h", &m));
    assert_false(slurm_parse_minutes("-5", &m));
    assert_false(slurm_parse_minutes("1234567", &m));
}

static void time_stamps_and_none(void **state)
{
    (void)state;
    struct tm tm = {.tm_year = 126, .tm_mon = 11, .tm_mday = 1, .tm_hour = 11, .tm_min = 14,
                    .tm_sec = 42, .tm_isdst = -1};
    int64_t want = (int64_t)mktime(&tm) * 1000;
    assert_int_equal(slurm_parse_timestamp_ms("2026-12-01T11:14:42"), want);
    assert_int_equal(slurm_parse_timestamp_ms("N/A"), 0);
    assert_int_equal(slurm_parse_timestamp_ms("Unknown"), 0);
    assert_int_equal(slurm_parse_timestamp_ms("None"), 0);
    assert_int_equal(slurm_parse_timestamp_ms("2026-12-01T11:14:42x"), 0);
}

static void max_time_of_a_partition_line(void **state)
{
    (void)state;
    long m = -1;
    assert_true(slurm_partition_max_time(
        "PartitionName=spot AllowGroups=ALL DefMemPerNode=UNLIMITED MaxTime=12:00:00 MinNodes=0",
        &m));
    assert_int_equal(m, 720);
    assert_true(slurm_partition_max_time("PartitionName=x MaxTime=UNLIMITED State=UP", &m));
    assert_int_equal(m, 0);
    /* "DefMaxTime"-like keys must not be read for MaxTime. */
    assert_false(slurm_partition_max_time("PartitionName=x OverMaxTime=5 State=UP", &m));
    assert_false(slurm_partition_max_time("PartitionName=x MaxTime=soon", &m));
}

static void states_and_where_they_put_a_job(void **state)
{
    (void)state;
    assert_int_equal(slurm_state_of("PENDING"), EXEC_PENDING);
    assert_int_equal(slurm_state_of("CONFIGURING"), EXEC_PENDING);
    assert_int_equal(slurm_state_of("REQUEUE_HOLD"), EXEC_PENDING);
    assert_int_equal(slurm_state_of("RUNNING"), EXEC_RUNNING);
    assert_int_equal(slurm_state_of("COMPLETING"), EXEC_RUNNING);
    assert_int_equal(slurm_state_of("SUSPENDED"), EXEC_RUNNING);
    const char *ended[] = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "PREEMPTED",
                           "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "DEADLINE"};
    for (size_t i = 0; i < sizeof ended / sizeof ended[0]; i++)
        assert_int_equal(slurm_state_of(ended[i]), EXEC_ENDED);
    assert_int_equal(slurm_state_of("SOMETHING_NEW"), EXEC_PENDING);
}

static void pending_reasons_in_plain_words(void **state)
{
    (void)state;
    char w[EXEC_REASON_MAX];
    slurm_pending_words("Resources", w, sizeof w);
    assert_string_equal(w, "Waiting for free GPUs, CPUs or memory on the cluster (Slurm: Resources)");
    slurm_pending_words("Priority", w, sizeof w);
    assert_non_null(strstr(w, "higher priority"));
    slurm_pending_words("PartitionTimeLimit", w, sizeof w);
    assert_non_null(strstr(w, "time limit is above the partition's maximum"));
    slurm_pending_words("ReqNodeNotAvail, UnavailableNodes:node[1-3]", w, sizeof w);
    assert_string_equal(w, "The nodes it needs are down, drained or reserved (Slurm: ReqNodeNotAvail)");
    slurm_pending_words("QOSMaxJobsPerUserLimit", w, sizeof w);
    assert_non_null(strstr(w, "QOS allows no more running jobs"));
    slurm_pending_words("QOSGrpGRES", w, sizeof w);
    assert_non_null(strstr(w, "QOS's group limit"));
    slurm_pending_words("AssocGrpCpuLimit", w, sizeof w);
    assert_non_null(strstr(w, "account's group limit"));
    slurm_pending_words("BeginTime", w, sizeof w);
    assert_non_null(strstr(w, "start time has not come"));
    slurm_pending_words("Dependency", w, sizeof w);
    assert_non_null(strstr(w, "depends on"));
    slurm_pending_words("DependencyNeverSatisfied", w, sizeof w);
    assert_non_null(strstr(w, "never start"));
    slurm_pending_words("", w, sizeof w);
    assert_string_equal(w, "Waiting to be scheduled (Slurm: None)");
    slurm_pending_words("SomeFutureReason", w, sizeof w);
    assert_string_equal(w, "Waiting in the cluster's queue (Slurm: SomeFutureReason)");
    /* A reason too long for the buffer is cut, still one line. */
    char small[24];
    slurm_pending_words("Resources", small, sizeof small);
    assert_int_equal(strlen(small), sizeof small - 1);
}

static void end_states_in_plain_words(void **state)
{
    (void)state;
    char w[EXEC_REASON_MAX];
    slurm_end_words("TIMEOUT", "TimeLimit", w, sizeof w);
    assert_string_equal(w, "The Slurm job reached its time limit (Slurm: TIMEOUT, TimeLimit)");
    slurm_end_words("NODE_FAIL", "None", w, sizeof w);
    assert_string_equal(w, "The node running the Slurm job failed (Slurm: NODE_FAIL)");
    slurm_end_words("CANCELLED", "", w, sizeof w);
    assert_non_null(strstr(w, "cancelled outside alallo"));
    slurm_end_words("NEWSTATE", "", w, sizeof w);
    assert_string_equal(w, "The Slurm job ended (Slurm: NEWSTATE)");
}

static void squeue_lines(void **state)
{
    (void)state;
    struct exec_job j;
    char l1[] = "17|PENDING|Resources|2026-12-01T12:00:00|N/A|(null)|alallo-att-abc\n";
    assert_true(slurm_parse_squeue_line(l1, &j));
    assert_string_equal(j.id, "17");
    assert_string_equal(j.tag, "alallo-att-abc");
    assert_int_equal(j.state, EXEC_PENDING);
    assert_string_equal(j.raw_state, "PENDING");
    assert_string_equal(j.raw_reason, "Resources");
    assert_non_null(strstr(j.reason, "free GPUs"));
    assert_string_equal(j.node, "");
    assert_true(j.start_ms > 0);

    char l2[] = "18;c1|RUNNING|None|2026-12-01T11:00:00|2026-12-01T23:00:00|vm|alallo-att-x";
    assert_true(slurm_parse_squeue_line(l2, &j));
    assert_string_equal(j.id, "18");
    assert_int_equal(j.state, EXEC_RUNNING);
    assert_string_equal(j.node, "vm");
    assert_string_equal(j.reason, "");

    char l3[] = "19|FAILED|NonZeroExitCode|2026-12-01T11:00:00|2026-12-01T11:01:00|vm|alallo-att-y";
    assert_true(slurm_parse_squeue_line(l3, &j));
    assert_int_equal(j.state, EXEC_ENDED);
    assert_non_null(strstr(j.reason, "failed"));

    /* A '|' in a job name stays in the name: the name is the last field. */
    char l4[] = "20|RUNNING|None|N/A|N/A|vm|a|b|c";
    assert_true(slurm_parse_squeue_line(l4, &j));
    assert_string_equal(j.tag, "a|b|c");
    assert_int_equal(j.start_ms, 0);

    char bad1[] = "21|RUNNING|None|N/A";
    assert_false(slurm_parse_squeue_line(bad1, &j));
    char bad2[] = "x|RUNNING|None|N/A|N/A|vm|alallo-att-z";
    assert_false(slurm_parse_squeue_line(bad2, &j));
    char bad3[] = "";
    assert_false(slurm_parse_squeue_line(bad3, &j));
}

static void gres_texts(void **state)
{
    (void)state;
    assert_int_equal(slurm_gres_gpus("gpu:2", ""), 2);
    assert_int_equal(slurm_gres_gpus("gpu:a100:4(S:0-1)", ""), 4);
    assert_int_equal(slurm_gres_gpus("gpu:a100:4(S:0-1),gpu:v100:2", "a100"), 4);
    assert_int_equal(slurm_gres_gpus("gpu:a100:4(S:0,2-3),gpu:v100:2", "v100"), 2);
    assert_int_equal(slurm_gres_gpus("gpu:a100:4(S:0,2-3),gpu:v100:2", ""), 6);
    assert_int_equal(slurm_gres_gpus("gpu:2", "a100"), 0); /* untyped: not an a100 */
    assert_int_equal(slurm_gres_gpus("(null)", ""), 0);
    assert_int_equal(slurm_gres_gpus("mps:100,gpu:1", ""), 1);
    assert_int_equal(slurm_gres_gpus("gpu:lots", ""), 0);
}

static void sinfo_lines_add_up_nodes_that_take_work(void **state)
{
    (void)state;
    struct exec_capacity c;
    memset(&c, 0, sizeof c);
    char l1[] = "n1|64|512000|gpu:a100:8(S:0-1)|mix\n";
    char l2[] = "n2|64|512000|gpu:a100:4|idle";
    char l3[] = "n3|64|512000|gpu:a100:8|down*";
    char l4[] = "n4|64|512000|gpu:a100:8|drain";
    char l5[] = "n5|32|256000+|gpu:v100:2|alloc";
    assert_true(slurm_add_sinfo_line(l1, "a100", &c));
    assert_true(slurm_add_sinfo_line(l2, "a100", &c));
    assert_true(slurm_add_sinfo_line(l3, "a100", &c));
    assert_true(slurm_add_sinfo_line(l4, "a100", &c));
    assert_true(slurm_add_sinfo_line(l5, "a100", &c));
    assert_int_equal(c.nodes, 5);
    assert_int_equal(c.nodes_up, 3);
    assert_int_equal(c.cpus, 160);
    assert_int_equal(c.mem_mb, 1280000);
    assert_int_equal(c.gpus, 12);
    assert_int_equal(c.max_gpus_per_node, 8);
    char bad[] = "n6|many|1|gpu:1|idle";
    assert_false(slurm_add_sinfo_line(bad, "", &c));
    char bad2[] = "n6|1|1";
    assert_false(slurm_add_sinfo_line(bad2, "", &c));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(job_ids_with_and_without_a_cluster),
        cmocka_unit_test(durations_in_every_form),
        cmocka_unit_test(time_stamps_and_none),
        cmocka_unit_test(max_time_of_a_partition_line),
        cmocka_unit_test(states_and_where_they_put_a_job),
        cmocka_unit_test(pending_reasons_in_plain_words),
        cmocka_unit_test(end_states_in_plain_words),
        cmocka_unit_test(squeue_lines),
        cmocka_unit_test(gres_texts),
        cmocka_unit_test(sinfo_lines_add_up_nodes_that_take_work),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
