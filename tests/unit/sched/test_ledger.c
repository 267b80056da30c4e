/* test_ledger.c - every money rule of SPEC §2, the limits, and fencing. */
#include <stdlib.h>
#include <string.h>

#include "sched/ledger.h"
#include "sched_test.h"

#define MICROS 1000000LL

struct rows {
    struct ledger_row r[LEDGER_MAX_ROWS];
    size_t n;
};

static void settle(struct ledger_job *j, enum job_status s, enum job_message m,
                   enum job_status from, double now, struct rows *out)
{
    struct ledger_outcome o = {.status = s, .message = m, .cancelled_from = from};
    assert_int_equal(ledger_settle(j, &o, now, out->r, LEDGER_MAX_ROWS, &out->n), ERR_OK);
    char why[128] = "";
    int broken = ledger_check(j, why, sizeof why);
    if (broken)
        print_error("ledger_check: %s\n", why);
    assert_int_equal(broken, 0);
}

/* A job estimated at up to 2 h from creation, up to 1.5 h of training and
 * up to 10.00 of price; created at t=0. */
static void init(struct ledger_job *j)
{
    ledger_job_init(j, 0, 7200, 5400, 10 * MICROS);
}

/* One attempt at rate/h from `from` to `to` steps, its steps taking
 * train_s, checkpointed at `ckpt`. */
static uint64_t run(struct ledger_job *j, int64_t id, double rate, long from, long to,
                    double train_s, long ckpt, double begin)
{
    uint64_t f;
    assert_int_equal(ledger_attempt_begin(j, id, rate, from, begin, &f), ERR_OK);
    assert_int_equal(ledger_attempt_progress(j, f, to, train_s), ERR_OK);
    if (ckpt > from)
        assert_int_equal(ledger_attempt_checkpoint(j, f, ckpt), ERR_OK);
    return f;
}

static void succeeded_pays_its_steps(void **state)
{
    (void)state;
    struct ledger_job j;
    init(&j);
    struct rows r;
    /* 100 steps in 3600 s at 2.00/h = 2.00; loading (begin at 100, steps
     * from 160) is not in train_s and costs nothing. */
    uint64_t f = run(&j, 1, 2.0, 0, 100, 3600, 0, 100);
    assert_int_equal(ledger_attempt_end(&j, f, 3760, 100), ERR_OK);
    settle(&j, JOB_SUCCEEDED, MSG_NONE, JOB_QUEUED, 3760, &r);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.r[0].kind, LEDGER_CHARGE);
    assert_int_equal(r.r[0].amount_micros, 2 * MICROS);
    assert_int_equal(r.r[0].attempt_id, 1);
    assert_int_equal(r.r[0].from_step, 0);
    assert_int_equal(r.r[0].to_step, 100);
    assert_int_equal(r.r[0].reason, LEDGER_R_STEPS);
    assert_string_equal(ledger_kind_name(r.r[0].kind), "charge");
    assert_int_equal(j.charged_micros, 2 * MICROS);
    assert_int_equal(j.refunded_micros, 0);
    assert_true(j.closed);
    /* Closed: settling again is refused and bills nothing. */
    struct ledger_outcome o = {.status = JOB_SUCCEEDED};
    size_t n = 9;
    assert_int_equal(ledger_settle(&j, &o, 4000, r.r, LEDGER_MAX_ROWS, &n), ERR_CONFLICT);
    assert_int_equal(n, 0);
    assert_int_equal(ledger_net_micros(&j), 2 * MICROS);
}

static void succeeded_never_above_the_estimate(void **state)
{
    (void)state;
    struct ledger_job j;
    init(&j);
    struct rows r;
    /* 6 h at 2.00/h = 12.00 > 10.00: the excess 2.00 is refunded. */
    uint64_t f = run(&j, 1, 2.0, 0, 100, 6 * 3600, 50, 0);
    settle(&j, JOB_RUNNING, MSG_NONE, JOB_QUEUED, 100, &r); /* interim: checkpointed half */
    assert_int_equal(r.n, 1);
    assert_int_equal(r.r[0].amount_micros, 6 * MICROS);
    assert_int_equal(r.r[0].to_step, 50);
    ledger_attempt_end(&j, f, 6 * 3600, 100);
    settle(&j, JOB_SUCCEEDED, MSG_NONE, JOB_QUEUED, 6 * 3600, &r);
    assert_int_equal(r.n, 2);
    assert_int_equal(r.r[0].kind, LEDGER_CHARGE);
    assert_int_equal(r.r[0].amount_micros, 6 * MICROS);
    assert_int_equal(r.r[1].kind, LEDGER_REFUND);
    assert_int_equal(r.r[1].amount_micros, 2 * MICROS);
    assert_int_equal(r.r[1].reason, LEDGER_R_ABOVE_ESTIMATE);
    assert_int_equal(ledger_net_micros(&j), 10 * MICROS);
    assert_int_equal(j.charged_micros, 12 * MICROS);
    assert_int_equal(j.refunded_micros, 2 * MICROS);
    /* its price before the cap, which the estimator's upper end learns */
    assert_int_equal(ledger_steps_micros(&j), 12 * MICROS);
}

static void failed_and_stopped_are_free(void **state)
{
    (void)state;
    const enum job_message msgs[] = {MSG_TRAINING_FAILED, MSG_FAILED_INTERNAL, MSG_STOPPED_BUDGET,
                                     MSG_STOPPED_TIME_LIMIT};
    const enum ledger_reason want[] = {LEDGER_R_FAILED, LEDGER_R_FAILED, LEDGER_R_STOPPED,
                                       LEDGER_R_STOPPED};
    for (int k = 0; k < 4; k++) {
        struct ledger_job j;
        init(&j);
        struct rows r;
        uint64_t f = run(&j, 1, 3.6, 0, 80, 1000, 80, 0);
        settle(&j, JOB_RUNNING, MSG_NONE, JOB_QUEUED, 1000, &r);
        assert_int_equal(j.charged_micros, MICROS); /* 1000 s at 3.60/h */
        ledger_attempt_end(&j, f, 1000, 80);
        settle(&j, JOB_FAILED, msgs[k], JOB_QUEUED, 1000, &r);
        assert_int_equal(r.n, 1);
        assert_int_equal(r.r[0].kind, LEDGER_REFUND);
        assert_int_equal(r.r[0].amount_micros, MICROS);
        assert_int_equal(r.r[0].reason, want[k]);
        assert_int_equal(ledger_net_micros(&j), 0);
    }
}

static void cancel_rules(void **state)
{
    (void)state;
    struct ledger_job j;
    struct rows r;

    /* While queued, never started: nothing at all. */
    init(&j);
    settle(&j, JOB_CANCELLED, MSG_NONE, JOB_QUEUED, 50, &r);
    assert_int_equal(r.n, 0);
    assert_int_equal(ledger_net_micros(&j), 0);

    /* While queued again after a move: free, what was charged comes back. */
    init(&j);
    uint64_t f = run(&j, 1, 3.6, 0, 40, 1000, 40, 0);
    ledger_attempt_end(&j, f, 1000, 40);
    settle(&j, JOB_RUNNING, MSG_NONE, JOB_QUEUED, 1000, &r);
    assert_int_equal(ledger_net_micros(&j), MICROS);
    settle(&j, JOB_CANCELLED, MSG_NONE, JOB_QUEUED, 1100, &r);
    assert_int_equal(r.r[0].reason, LEDGER_R_CANCELLED_QUEUED);
    assert_int_equal(ledger_net_micros(&j), 0);

    /* While running: the steps of the partial model (checkpoint on cancel). */
    init(&j);
    f = run(&j, 1, 3.6, 0, 40, 1000, 0, 0);
    ledger_attempt_checkpoint(&j, f, 40);
    ledger_attempt_end(&j, f, 1010, 40);
    settle(&j, JOB_CANCELLED, MSG_NONE, JOB_RUNNING, 1010, &r);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.r[0].kind, LEDGER_CHARGE);
    assert_int_equal(r.r[0].amount_micros, MICROS);
    assert_int_equal(ledger_net_micros(&j), MICROS);

    /* While running, no checkpoint written on stop: only what the latest
     * checkpoint holds is charged (the settle ends the attempt). */
    init(&j);
    f = run(&j, 1, 3.6, 0, 40, 1000, 20, 0);
    settle(&j, JOB_CANCELLED, MSG_NONE, JOB_RESCHEDULING, 1010, &r);
    assert_int_equal(ledger_net_micros(&j), MICROS / 2);
    assert_true(j.attempts[0].ended);

    /* After the upper end of the estimated time (7200 s from creation): free. */
    init(&j);
    f = run(&j, 1, 3.6, 0, 40, 1000, 40, 6000);
    settle(&j, JOB_RUNNING, MSG_NONE, JOB_QUEUED, 7000, &r);
    assert_int_equal(ledger_net_micros(&j), MICROS);
    ledger_attempt_end(&j, f, 7201, 40);
    settle(&j, JOB_CANCELLED, MSG_NONE, JOB_RUNNING, 7201, &r);
    assert_int_equal(r.r[0].reason, LEDGER_R_CANCELLED_LATE);
    assert_int_equal(ledger_net_micros(&j), 0);
    /* ...and exactly at the upper end it still charges. */
    init(&j);
    f = run(&j, 1, 3.6, 0, 40, 1000, 40, 6000);
    ledger_attempt_end(&j, f, 7200, 40);
    settle(&j, JOB_CANCELLED, MSG_NONE, JOB_RUNNING, 7200, &r);
    assert_int_equal(ledger_net_micros(&j), MICROS);
}

/* The cancel a user is shown (ledger_cancel_micros, the API's
 * price.cancel_now) is the cancel they are charged: at many points of a
 * job (before its first checkpoint, between checkpoints, after a move,
 * past the estimated time), a preview is taken, then the job is cancelled
 * in that same state the way the server does it (the trainer writes a
 * checkpoint when it stops, the attempt ends with it, the final settle),
 * and the net charge is compared. */
static void cancel_preview_is_the_charge(void **state)
{
    (void)state;
    struct ledger_job *j = calloc(1, sizeof *j);
    struct ledger_job *c = calloc(1, sizeof *c);
    assert_non_null(j);
    assert_non_null(c);
    struct rows *r = calloc(1, sizeof *r);
    assert_non_null(r);
    unsigned seed = 12;
    int compared = 0, nonzero = 0;
    for (int trial = 0; trial < 200; trial++) {
        /* A job of 200 steps, 1 s each at 3.60/h, checkpointed every 50,
         * moved once at step 120 (resumed from 100) on half the trials. */
        ledger_job_init(j, 0, 7200, 5400, 10 * MICROS);
        seed = seed * 1103515245u + 12345u;
        long stop_at = 1 + (long)(seed >> 8) % 199;
        bool moved = trial % 2 == 1;
        double t0 = trial % 5 == 4 ? 7000 : 10; /* late: the cancel is free */
        uint64_t f;
        assert_int_equal(ledger_attempt_begin(j, 1, 3.6, 0, t0, &f), ERR_OK);
        long start = 0;
        for (long s = 1; s <= stop_at; s++) {
            double now = t0 + (double)s;
            assert_int_equal(ledger_attempt_progress(j, f, s, (double)(s - start)), ERR_OK);
            if (s % 50 == 0) {
                assert_int_equal(ledger_attempt_checkpoint(j, f, s), ERR_OK);
                settle(j, JOB_RUNNING, MSG_NONE, JOB_QUEUED, now, r);
            }
            if (moved && s == 120 && s < stop_at) {
                moved = false;
                assert_int_equal(ledger_attempt_end(j, f, now, j->latest_checkpoint), ERR_OK);
                settle(j, JOB_RUNNING, MSG_NONE, JOB_QUEUED, now, r);
                start = j->latest_checkpoint;
                assert_int_equal(ledger_attempt_begin(j, 2, 7.2, start, now, &f), ERR_OK);
                s = start;
                t0 = now - (double)s;
            }
        }
        double now = t0 + (double)stop_at + 0.5;
        int64_t shown = ledger_cancel_micros(j, JOB_RUNNING, now);
        /* The cancel, as the server runs it. */
        *c = *j;
        struct ledger_attempt *a = ledger_current(c, c->fence);
        assert_non_null(a);
        if (a->done_step > c->latest_checkpoint)
            assert_int_equal(ledger_attempt_checkpoint(c, c->fence, a->done_step), ERR_OK);
        assert_int_equal(ledger_attempt_end(c, c->fence, now, c->latest_checkpoint), ERR_OK);
        settle(c, JOB_CANCELLED, MSG_NONE, JOB_RUNNING, now, r);
        if (shown != ledger_net_micros(c))
            print_error("trial %d: cancel at step %ld shown %lld, charged %lld\n", trial,
                        stop_at, (long long)shown, (long long)ledger_net_micros(c));
        assert_int_equal(shown, ledger_net_micros(c));
        /* The preview changed nothing. */
        assert_false(j->closed);
        compared++;
        nonzero += shown > 0;
    }
    assert_int_equal(compared, 200);
    assert_true(nonzero > 100);
    /* Cancelled while re-scheduling (nothing runs), and after the job
     * closed: the preview is still the charge. */
    ledger_job_init(j, 0, 7200, 5400, 10 * MICROS);
    uint64_t f;
    assert_int_equal(ledger_attempt_begin(j, 1, 3.6, 0, 0, &f), ERR_OK);
    assert_int_equal(ledger_attempt_progress(j, f, 70, 70), ERR_OK);
    assert_int_equal(ledger_attempt_checkpoint(j, f, 50), ERR_OK);
    assert_int_equal(ledger_attempt_end(j, f, 80, 50), ERR_OK);
    settle(j, JOB_RUNNING, MSG_NONE, JOB_QUEUED, 80, r);
    int64_t shown = ledger_cancel_micros(j, JOB_RESCHEDULING, 90);
    settle(j, JOB_CANCELLED, MSG_NONE, JOB_RESCHEDULING, 90, r);
    assert_int_equal(shown, ledger_net_micros(j));
    assert_int_equal(shown, 50 * MICROS / 1000);
    assert_int_equal(ledger_cancel_micros(j, JOB_RUNNING, 100), ledger_net_micros(j));
    free(r);
    free(c);
    free(j);
}

/* A cancel is priced when it is accepted (ledger_fix_cancel): the steps
 * the trainer completes while it stops (or had completed but not yet
 * reported), a slower step time reported meanwhile, and a stop that ends
 * past the estimated time change nothing: the net charge is the amount
 * shown at acceptance, and the later steps stay in the partial model. */
static void a_cancel_charges_what_it_was_accepted_at(void **state)
{
    (void)state;
    struct ledger_job *j = calloc(1, sizeof *j);
    struct rows *r = calloc(1, sizeof *r);
    assert_non_null(j);
    assert_non_null(r);
    for (int trial = 0; trial < 4; trial++) {
        ledger_job_init(j, 0, 7200, 5400, 10 * MICROS);
        uint64_t f;
        assert_int_equal(ledger_attempt_begin(j, 1, 3.6, 0, 10, &f), ERR_OK);
        assert_int_equal(ledger_attempt_progress(j, f, 80, 80), ERR_OK);
        assert_int_equal(ledger_attempt_checkpoint(j, f, 50), ERR_OK);
        settle(j, JOB_RUNNING, MSG_NONE, JOB_QUEUED, 90, r);
        /* trial 3: accepted just before the estimated time runs out */
        double accepted = trial == 3 ? 7190 : 95;
        enum job_status from = ledger_cancel_from(JOB_RUNNING, 80);
        assert_int_equal(from, JOB_RUNNING);
        int64_t shown = ledger_cancel_micros(j, from, accepted);
        assert_int_equal(shown, 80 * MICROS / 1000); /* 80 s at 3.60/h */
        ledger_fix_cancel(j, from, accepted);
        /* Shown again, later, with more steps reported: the same. */
        assert_int_equal(ledger_cancel_micros(j, JOB_RUNNING, accepted + 30), shown);
        ledger_fix_cancel(j, JOB_QUEUED, accepted + 40); /* a second call: nothing */
        /* While stopping: 20 more steps (slower on trial 1), a checkpoint
         * holding them, the attempt's end and the final settle. */
        double train_s = trial == 1 ? 140 : 100;
        assert_int_equal(ledger_attempt_progress(j, f, 100, train_s), ERR_OK);
        assert_int_equal(ledger_attempt_checkpoint(j, f, 100), ERR_OK);
        double end = accepted + (trial == 2 ? 7200 : 20); /* trial 2: stops late */
        assert_int_equal(ledger_attempt_end(j, f, end, 100), ERR_OK);
        settle(j, JOB_CANCELLED, MSG_NONE, JOB_RUNNING, end, r);
        if (ledger_net_micros(j) != shown)
            print_error("trial %d: shown %lld, charged %lld\n", trial, (long long)shown,
                        (long long)ledger_net_micros(j));
        /* trial 1: slower steps reported since; still the price shown */
        assert_int_equal(ledger_net_micros(j), shown);
        /* No step after the accepted one is billed. */
        assert_int_equal(j->attempts[0].billed_to, 80);
    }
    /* Accepted before the first step: free, even if steps come after. */
    ledger_job_init(j, 0, 7200, 5400, 10 * MICROS);
    uint64_t f;
    assert_int_equal(ledger_attempt_begin(j, 1, 3.6, 0, 10, &f), ERR_OK);
    ledger_fix_cancel(j, ledger_cancel_from(JOB_RUNNING, 0), 12);
    assert_int_equal(ledger_cancel_micros(j, JOB_RUNNING, 20), 0);
    assert_int_equal(ledger_attempt_progress(j, f, 10, 10), ERR_OK);
    assert_int_equal(ledger_attempt_checkpoint(j, f, 10), ERR_OK);
    assert_int_equal(ledger_attempt_end(j, f, 30, 10), ERR_OK);
    settle(j, JOB_CANCELLED, MSG_NONE, JOB_RUNNING, 30, r);
    assert_int_equal(ledger_net_micros(j), 0);
    free(r);
    free(j);
}

static void each_step_billed_once_across_moves(void **state)
{
    (void)state;
    struct ledger_job j;
    init(&j);
    struct rows r;
    /* Attempt 1 at 3.60/h: 60 steps in 600 s, checkpoint at 50; its worker
     * is lost. Steps 51..60 are lost work: never billed to it. */
    uint64_t f1 = run(&j, 1, 3.6, 0, 60, 600, 50, 0);
    settle(&j, JOB_RUNNING, MSG_NONE, JOB_QUEUED, 600, &r);
    assert_int_equal(ledger_net_micros(&j), 500000); /* 50 steps x 10 s at 3.60/h */
    assert_int_equal(ledger_steps_micros(&j), 600000); /* its 60 done steps */
    ledger_attempt_end(&j, f1, 700, 50);
    settle(&j, JOB_RUNNING, MSG_NONE, JOB_QUEUED, 700, &r);
    assert_int_equal(r.n, 0);
    /* A late report from attempt 1 is fenced and bills nothing. */
    assert_int_equal(ledger_attempt_progress(&j, f1, 70, 700), ERR_FENCED);
    assert_int_equal(ledger_attempt_checkpoint(&j, f1, 60), ERR_FENCED);
    assert_int_equal(ledger_attempt_end(&j, f1, 800, 60), ERR_FENCED);
    /* Attempt 2 at 7.20/h resumes at 50, repeats 51..60 and finishes 100:
     * 50 steps in 250 s. */
    uint64_t f2 = run(&j, 2, 7.2, 50, 100, 250, 0, 900);
    assert_true(f2 > f1);
    assert_int_equal(ledger_attempt_progress(&j, f1, 100, 2000), ERR_FENCED);
    ledger_attempt_end(&j, f2, 1200, 100);
    settle(&j, JOB_SUCCEEDED, MSG_NONE, JOB_QUEUED, 1200, &r);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.r[0].attempt_id, 2);
    assert_int_equal(r.r[0].from_step, 50);
    assert_int_equal(r.r[0].to_step, 100);
    assert_int_equal(r.r[0].amount_micros, 500000); /* 250 s at 7.20/h */
    assert_int_equal(ledger_net_micros(&j), MICROS);
    assert_int_equal(ledger_steps_micros(&j), MICROS); /* the lost steps are not the price's */
    assert_int_equal(j.attempts[0].billed_to, 50);
    assert_int_equal(j.attempts[1].billed_to, 100);
}

static void a_skipped_checkpoint_refunds_lost_work(void **state)
{
    (void)state;
    struct ledger_job j;
    init(&j);
    struct rows r;
    uint64_t f1 = run(&j, 1, 3.6, 0, 60, 600, 50, 0);
    ledger_attempt_end(&j, f1, 600, 50);
    settle(&j, JOB_RUNNING, MSG_NONE, JOB_QUEUED, 600, &r);
    assert_int_equal(ledger_net_micros(&j), 500000);
    /* The checkpoint at 50 turned out incomplete: the trainer resumed at 40. */
    uint64_t f2 = run(&j, 2, 3.6, 40, 40, 0, 0, 700);
    settle(&j, JOB_RUNNING, MSG_NONE, JOB_QUEUED, 700, &r);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.r[0].kind, LEDGER_REFUND);
    assert_int_equal(r.r[0].reason, LEDGER_R_LOST_WORK);
    assert_int_equal(r.r[0].from_step, 40);
    assert_int_equal(r.r[0].to_step, 50);
    assert_int_equal(r.r[0].amount_micros, 100000);
    assert_int_equal(ledger_attempt_progress(&j, f2, 100, 600), ERR_OK);
    ledger_attempt_end(&j, f2, 1400, 100);
    settle(&j, JOB_SUCCEEDED, MSG_NONE, JOB_QUEUED, 1400, &r);
    /* 40 steps at 10 s + 60 steps at 10 s, all at 3.60/h */
    assert_int_equal(ledger_net_micros(&j), MICROS);
    assert_string_equal(ledger_reason_text(LEDGER_R_LOST_WORK), "lost work (repeated for free)");
}

/* An attempt begun at the recorded checkpoint (50) whose trainer could
 * only resume from 40 is rebased there before any progress: earlier work
 * after 40 is refunded, and nothing goes up or after progress. */
static void a_rebase_moves_the_start_down_only(void **state)
{
    (void)state;
    struct ledger_job j;
    init(&j);
    struct rows r;
    uint64_t f1 = run(&j, 1, 3.6, 0, 60, 600, 50, 0);
    ledger_attempt_end(&j, f1, 600, 50);
    settle(&j, JOB_RUNNING, MSG_NONE, JOB_QUEUED, 600, &r);
    uint64_t f2;
    assert_int_equal(ledger_attempt_begin(&j, 2, 3.6, 50, 700, &f2), ERR_OK);
    assert_int_equal(ledger_attempt_rebase(&j, f2, 51), ERR_INVALID);
    assert_int_equal(ledger_attempt_rebase(&j, f1, 40), ERR_FENCED);
    assert_int_equal(ledger_attempt_rebase(&j, f2, 40), ERR_OK);
    assert_int_equal(j.latest_checkpoint, 40);
    settle(&j, JOB_RUNNING, MSG_NONE, JOB_QUEUED, 700, &r);
    assert_int_equal(r.n, 1);
    assert_int_equal(r.r[0].reason, LEDGER_R_LOST_WORK);
    assert_int_equal(r.r[0].from_step, 40);
    assert_int_equal(r.r[0].to_step, 50);
    assert_int_equal(ledger_attempt_progress(&j, f2, 100, 600), ERR_OK);
    assert_int_equal(ledger_attempt_rebase(&j, f2, 30), ERR_INVALID);
    ledger_attempt_end(&j, f2, 1400, 100);
    settle(&j, JOB_SUCCEEDED, MSG_NONE, JOB_QUEUED, 1400, &r);
    assert_int_equal(ledger_net_micros(&j), MICROS);
}

static void settling_is_idempotent(void **state)
{
    (void)state;
    struct ledger_job j;
    init(&j);
    struct rows r;
    run(&j, 1, 3.6, 0, 60, 600, 30, 0);
    settle(&j, JOB_RUNNING, MSG_NONE, JOB_QUEUED, 600, &r);
    assert_int_equal(r.n, 1);
    settle(&j, JOB_RUNNING, MSG_NONE, JOB_QUEUED, 600, &r);
    assert_int_equal(r.n, 0);
    size_t n;
    struct ledger_outcome o = {.status = JOB_RUNNING};
    assert_int_equal(ledger_settle(&j, &o, 600, r.r, 3, &n), ERR_INVALID); /* too small */
}

static void attempts_and_fences(void **state)
{
    (void)state;
    struct ledger_job j;
    init(&j);
    uint64_t f1, f2;
    assert_int_equal(ledger_attempt_begin(&j, 1, 1.0, 0, 0, &f1), ERR_OK);
    assert_int_equal(f1, 1);
    /* One owner: a second attempt while one runs is a conflict. */
    assert_int_equal(ledger_attempt_begin(&j, 2, 1.0, 0, 0, &f2), ERR_CONFLICT);
    assert_int_equal(ledger_attempt_progress(&j, f1, 10, 5), ERR_OK);
    assert_int_equal(ledger_attempt_progress(&j, f1, 9, 6), ERR_INVALID);
    assert_int_equal(ledger_attempt_progress(&j, f1, 11, 4), ERR_INVALID);
    assert_int_equal(ledger_attempt_progress(&j, 0, 11, 6), ERR_FENCED);
    assert_int_equal(ledger_attempt_progress(&j, f1 + 1, 11, 6), ERR_FENCED);
    assert_int_equal(ledger_attempt_checkpoint(&j, f1, 11), ERR_INVALID);
    assert_null(ledger_current(&j, f1 + 1));
    assert_non_null(ledger_current(&j, f1));
    assert_int_equal(ledger_attempt_end(&j, f1, 10, 10), ERR_OK);
    assert_int_equal(ledger_attempt_begin(&j, 2, -1.0, 0, 0, &f2), ERR_INVALID);
    for (int i = 1; i < LEDGER_MAX_ATTEMPTS; i++) {
        assert_int_equal(ledger_attempt_begin(&j, i + 1, 1.0, 10, 10, &f2), ERR_OK);
        assert_int_equal(f2, (uint64_t)i + 1);
        assert_int_equal(ledger_attempt_end(&j, f2, 10, 10), ERR_OK);
    }
    assert_int_equal(ledger_attempt_begin(&j, 99, 1.0, 10, 10, &f2), ERR_TOO_LARGE);
}

static void limits(void **state)
{
    (void)state;
    struct ledger_limits l;
    ledger_limits_default(&l);
    assert_near(l.time_limit_s, 12 * 3600, 0);
    assert_near(l.budget_multiple, 2, 0);
    struct ledger_job j;
    /* Upper end of training 5400 s: the budget is 10800 s of running. */
    init(&j);
    uint64_t f;
    ledger_attempt_begin(&j, 1, 1.0, 0, 0, &f);
    assert_int_equal(ledger_limit_reached(&j, &l, 10799), MSG_NONE);
    assert_near(ledger_limit_deadline(&j, &l, 1000), 10800, 1e-9);
    ledger_attempt_end(&j, f, 4000, 0);
    /* Waiting between attempts does not count. */
    ledger_attempt_begin(&j, 2, 1.0, 0, 9000, &f);
    assert_near(ledger_running_s(&j, 10000), 5000, 1e-9);
    assert_near(ledger_limit_deadline(&j, &l, 10000), 10000 + 5800, 1e-9);
    assert_int_equal(ledger_limit_reached(&j, &l, 15800), MSG_STOPPED_BUDGET);
    assert_string_equal(job_message_text(MSG_STOPPED_BUDGET), "Stopped: the budget was reached");

    /* A small operator time limit comes first. */
    l.time_limit_s = 3600;
    assert_int_equal(ledger_limit_reached(&j, &l, 9100), MSG_STOPPED_TIME_LIMIT);
    assert_string_equal(job_message_text(MSG_STOPPED_TIME_LIMIT),
                        "Stopped: the time limit was reached");
    assert_near(ledger_limit_deadline(&j, &l, 9000), 9000, 1e-9); /* already past */
    ledger_attempt_end(&j, f, 9100, 0);
    assert_true(isinf(ledger_limit_deadline(&j, &l, 9100)));
    /* Limits off: nothing is ever reached. */
    l.time_limit_s = 0;
    l.budget_multiple = 0;
    assert_int_equal(ledger_limit_reached(&j, &l, 1e9), MSG_NONE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(succeeded_pays_its_steps),
        cmocka_unit_test(succeeded_never_above_the_estimate),
        cmocka_unit_test(failed_and_stopped_are_free),
        cmocka_unit_test(cancel_rules),
        cmocka_unit_test(cancel_preview_is_the_charge),
        cmocka_unit_test(a_cancel_charges_what_it_was_accepted_at),
        cmocka_unit_test(each_step_billed_once_across_moves),
        cmocka_unit_test(a_skipped_checkpoint_refunds_lost_work),
        cmocka_unit_test(a_rebase_moves_the_start_down_only),
        cmocka_unit_test(settling_is_idempotent),
        cmocka_unit_test(attempts_and_fences),
        cmocka_unit_test(limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
