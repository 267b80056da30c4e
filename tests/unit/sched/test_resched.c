/* test_resched.c - when a running job moves, and how. */
#include <string.h>

#include "sched/resched.h"
#include "sched_test.h"

#define GB 1000000000LL

static struct sched_worker worker(int64_t mem, enum worker_state s)
{
    struct sched_worker w = {.cpus = 8, .mem_bytes = mem, .price_per_hour = 1, .flops = 1e12,
                             .state = s};
    return w;
}

static void memory_within_the_worker_keeps(void **state)
{
    (void)state;
    struct sched_worker ws[2] = {worker(16 * GB, WORKER_ACTIVE), worker(64 * GB, WORKER_ACTIVE)};
    struct resched_decision d;
    /* Peak above the plan but within what the worker offers: keep running,
     * and remember the larger need (+10%) for any later placement. */
    resched_on_memory(12 * GB, 10 * GB, &ws[0], ws, 2, NULL, &d);
    assert_int_equal(d.action, RESCHED_KEEP);
    assert_int_equal(d.mem_bytes, 13200000000LL);
    assert_int_equal(d.message, MSG_NONE);
    assert_null(d.stop);
    /* Below the plan: the plan stands. */
    resched_on_memory(5 * GB, 10 * GB, &ws[0], ws, 2, NULL, &d);
    assert_int_equal(d.mem_bytes, 10 * GB);
}

static void memory_above_the_worker_moves(void **state)
{
    (void)state;
    struct sched_worker ws[2] = {worker(16 * GB, WORKER_ACTIVE), worker(64 * GB, WORKER_ACTIVE)};
    struct resched_decision d;
    resched_on_memory(20 * GB, 10 * GB, &ws[0], ws, 2, NULL, &d);
    assert_int_equal(d.action, RESCHED_MOVE);
    assert_int_equal(d.mem_bytes, 22 * GB);
    assert_int_equal(d.message, MSG_RESCHEDULING);
    assert_string_equal(job_message_text(d.message), "Re-scheduling");
    assert_string_equal(d.stop, "move");
    assert_string_equal(d.reason, "needs more memory");
    /* A busy or draining big worker still counts: the job waits for it. */
    ws[1].state = WORKER_DRAINING;
    resched_on_memory(20 * GB, 10 * GB, &ws[0], ws, 2, NULL, &d);
    assert_int_equal(d.action, RESCHED_MOVE);
}

static void memory_nowhere_fails(void **state)
{
    (void)state;
    struct sched_worker ws[2] = {worker(16 * GB, WORKER_ACTIVE), worker(30 * GB, WORKER_LOST)};
    struct resched_decision d;
    resched_on_memory(20 * GB, 10 * GB, &ws[0], ws, 2, NULL, &d);
    assert_int_equal(d.action, RESCHED_FAIL);
    assert_int_equal(d.message, MSG_NOT_AVAILABLE);
    assert_string_equal(job_message_text(d.message), "Not available right now.");

    /* A 16-bit 8B LoRA job measured at 26 GB: 4-bit (about 15 GB by the
     * planner's ratio) would fit the 16 GB worker. */
    struct plan_job j = {
        .model = {.layers = 32, .hidden = 4096, .intermediate = 14336, .heads = 32,
                  .kv_heads = 8, .vocab = 128256},
        .precision = PLAN_16BIT, .adapter = PLAN_LORA, .batch = 1, .seq_len = 512,
    };
    ws[0].mem_bytes = 17 * GB;
    resched_on_memory(26 * GB, 25 * GB, &ws[0], ws, 2, &j, &d);
    assert_int_equal(d.action, RESCHED_FAIL);
    assert_int_equal(d.message, MSG_NOT_AVAILABLE_LOWER_PRECISION);
    /* Already 4-bit: nothing lower to suggest. */
    j.precision = PLAN_4BIT;
    resched_on_memory(26 * GB, 25 * GB, &ws[0], ws, 2, &j, &d);
    assert_int_equal(d.message, MSG_NOT_AVAILABLE);
}

static void worker_events(void **state)
{
    (void)state;
    struct resched_decision d;
    resched_on_worker(RESCHED_WORKER_LOST, 5 * GB, &d);
    assert_int_equal(d.action, RESCHED_MOVE);
    assert_null(d.stop); /* nobody to tell: it continues from the latest checkpoint */
    assert_string_equal(d.reason, "worker lost");
    assert_int_equal(d.message, MSG_RESCHEDULING);
    assert_int_equal(d.mem_bytes, 5 * GB);
    resched_on_worker(RESCHED_DRAINED, 5 * GB, &d);
    assert_int_equal(d.action, RESCHED_CHECKPOINT_THEN_MOVE);
    assert_string_equal(d.stop, "move");
    assert_string_equal(d.reason, "worker drained");
    resched_on_worker(RESCHED_SPOT_TAKEN, 5 * GB, &d);
    assert_int_equal(d.action, RESCHED_CHECKPOINT_THEN_MOVE);
    assert_string_equal(d.reason, "spot capacity taken back");
    resched_on_worker(RESCHED_MEMORY, 5 * GB, &d);
    assert_int_equal(d.action, RESCHED_KEEP);
    assert_string_equal(resched_reason_text(RESCHED_CAUSE_COUNT), "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(memory_within_the_worker_keeps),
        cmocka_unit_test(memory_above_the_worker_moves),
        cmocka_unit_test(memory_nowhere_fails),
        cmocka_unit_test(worker_events),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
