/* test_time_left.c - time left from the estimate until ~5% of steps, then
 * from the measured pace with a narrowing band; reset after a move. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/job.h"
#include "sched/time_left.h"
#include "sched_test.h"

static void from_the_estimate_first(void **state)
{
    (void)state;
    struct tl_state s;
    /* 1000 steps, estimate 2000..4000 s of training, 60 s of loading. */
    tl_begin(&s, 1000, 0, 100, 60, 2000, 4000);
    assert_int_equal(s.switch_after, 50);
    struct tl_value v;
    tl_value(&s, 100, &v);
    assert_int_equal(v.basis, TL_ESTIMATE);
    assert_string_equal(tl_basis_name(v.basis), "estimate");
    assert_near(v.low_s, 2060, 1e-9);
    assert_near(v.high_s, 4060, 1e-9);
    assert_string_equal(v.text, "34 min to 68 min"); /* the time-left rule: minutes under 1.5 h */
    /* Loading runs down with the clock. */
    tl_value(&s, 130, &v);
    assert_near(v.low_s, 2030, 1e-9);
    /* The trainer started (step 0 at t=160), then 40 steps: still the
     * estimate, scaled by the steps left. */
    tl_observe(&s, 0, 160);
    tl_observe(&s, 20, 200);
    tl_observe(&s, 40, 240);
    tl_value(&s, 240, &v);
    assert_int_equal(v.basis, TL_ESTIMATE);
    assert_near(v.low_s, 2000 * 0.96, 1e-9);
    assert_near(v.high_s, 4000 * 0.96, 1e-9);
}

static void then_from_the_pace(void **state)
{
    (void)state;
    struct tl_state s;
    tl_begin(&s, 1000, 0, 0, 60, 2000, 4000);
    tl_observe(&s, 0, 60);
    /* About 2 s per step, each report a little off (the band is measured
     * from that spread: a perfectly steady pace would give a point). */
    static const double jitter[] = {0.3, -0.2, 0.25, -0.3, 0.1};
    for (long step = 10; step <= 50; step += 10)
        tl_observe(&s, step, 60 + 2.0 * step + jitter[step / 10 - 1]);
    struct tl_value v;
    tl_value(&s, 160.1, &v);
    assert_int_equal(v.basis, TL_PACE);
    assert_string_equal(tl_basis_name(v.basis), "pace");
    assert_near(v.mid_s, 950 * 2.0, 950 * 0.02);
    assert_true(v.low_s < v.mid_s && v.high_s > v.mid_s);
    /* Narrower than the estimate's band was. */
    double rel_pace = (v.high_s - v.low_s) / v.mid_s;
    assert_true(rel_pace < (4000.0 - 2000.0) / 3000.0);
    char t[48];
    assert_string_equal(v.text, job_time_left_range_text(t, sizeof t, v.low_s, v.high_s));
    /* Time passing between reports counts. */
    struct tl_value later;
    tl_value(&s, 170.1, &later);
    assert_near(later.mid_s, v.mid_s - 10, 1e-6);

    /* Narrows as the job goes. */
    for (long step = 60; step <= 800; step += 10)
        tl_observe(&s, step, 60 + 2.0 * step + jitter[step / 10 % 5]);
    tl_value(&s, 60 + 1600 + jitter[0], &later);
    assert_near(later.mid_s, 400, 400 * 0.02);
    assert_true((later.high_s - later.low_s) / later.mid_s < rel_pace);

    /* The smoothed pace follows a change: now 3 s per step. */
    double t0 = 60 + 1600;
    for (long step = 810; step <= 900; step += 10)
        tl_observe(&s, step, t0 + 3.0 * (step - 800));
    tl_value(&s, t0 + 300, &later);
    assert_true(later.mid_s > 100 * 2.8 && later.mid_s < 100 * 3.2);
}

static void noisy_steps_widen_the_band(void **state)
{
    (void)state;
    struct tl_state calm, noisy;
    tl_begin(&calm, 1000, 0, 0, 0, 1000, 2000);
    tl_begin(&noisy, 1000, 0, 0, 0, 1000, 2000);
    tl_observe(&calm, 0, 0);
    tl_observe(&noisy, 0, 0);
    double tn = 0;
    for (long step = 10; step <= 200; step += 10) {
        tl_observe(&calm, step, 2.0 * step);
        tn += 10 * (step % 20 ? 1.0 : 3.0);
        tl_observe(&noisy, step, tn);
    }
    struct tl_value a, b;
    tl_value(&calm, 400, &a);
    tl_value(&noisy, tn, &b);
    assert_true((b.high_s - b.low_s) / b.mid_s > (a.high_s - a.low_s) / a.mid_s);
}

static void a_move_starts_again_from_the_estimate(void **state)
{
    (void)state;
    struct tl_state s;
    tl_begin(&s, 1000, 0, 0, 0, 2000, 4000);
    tl_observe(&s, 0, 0);
    for (long step = 10; step <= 500; step += 10)
        tl_observe(&s, step, 2.0 * step);
    struct tl_value v;
    tl_value(&s, 1000, &v);
    assert_int_equal(v.basis, TL_PACE);
    /* Moved at step 480 (the latest checkpoint) to a worker estimated at
     * 500..700 s for the 520 steps left. */
    tl_begin(&s, 1000, 480, 1100, 30, 500, 700);
    tl_value(&s, 1100, &v);
    assert_int_equal(v.basis, TL_ESTIMATE);
    assert_near(v.low_s, 530, 1e-9);
    assert_near(v.high_s, 730, 1e-9);
    /* 5% of the job's steps in the new attempt before pace again. */
    tl_observe(&s, 480, 1130);
    tl_observe(&s, 520, 1170);
    tl_value(&s, 1170, &v);
    assert_int_equal(v.basis, TL_ESTIMATE);
    tl_observe(&s, 530, 1180);
    tl_value(&s, 1180, &v);
    assert_int_equal(v.basis, TL_PACE);
    assert_near(v.mid_s, 470, 1e-6);
}

static void near_the_end_and_odd_reports(void **state)
{
    (void)state;
    struct tl_state s;
    /* Resumed at 990 of 1000: pace after half of what is left. */
    tl_begin(&s, 1000, 990, 0, 0, 10, 20);
    assert_int_equal(s.switch_after, 5);
    tl_observe(&s, 990, 0);
    tl_observe(&s, 995, 5);
    struct tl_value v;
    tl_value(&s, 5, &v);
    assert_int_equal(v.basis, TL_PACE);
    assert_near(v.mid_s, 5, 1e-9);
    /* Reports that go backwards change nothing. */
    tl_observe(&s, 993, 6);
    tl_observe(&s, 996, 5);
    tl_value(&s, 5, &v);
    assert_near(v.mid_s, 5, 1e-9);
    /* Late: at least one step's time is left until the last step. */
    tl_value(&s, 500, &v);
    assert_near(v.mid_s, 1, 1e-9);
    assert_string_equal(v.text, "under 1 min"); /* a short range reads "under" */
    /* Done: nothing left. */
    tl_observe(&s, 1000, 10);
    tl_value(&s, 10, &v);
    assert_near(v.high_s, 0, 0);
}

/* Issue 35: a reinforcement job validates after its last step. Its time
 * left holds that tail: at the start the estimate reads as before; once
 * its steps are done, what is left of the tail at the pace's speed, not
 * 0, so a job queued behind it does not read as starting now. */
static void the_work_after_the_last_step_is_time_left(void **state)
{
    (void)state;
    struct tl_state s, plain;
    tl_begin(&s, 10, 0, 0, 2, 20, 40);
    tl_begin(&plain, 10, 0, 0, 2, 20, 40);
    tl_set_tail(&s, 6); /* of the estimate's 20..40, 6 s run after step 10 */
    struct tl_value v, w;
    tl_value(&s, 0, &v);
    tl_value(&plain, 0, &w);
    assert_near(v.low_s, w.low_s, 1e-9); /* at the start: the estimate */
    assert_near(v.high_s, w.high_s, 1e-9);
    /* steps at 4 s each: twice the estimate's middle pace of 2.4 s */
    for (int step = 0; step <= 10; step++) {
        tl_observe(&s, step, 2 + 4.0 * step);
        tl_observe(&plain, step, 2 + 4.0 * step);
    }
    tl_value(&plain, 42, &w);
    assert_near(w.high_s, 0, 0); /* without the tail: done */
    tl_value(&s, 42, &v);
    assert_int_equal(v.basis, TL_PACE);
    double tail = 6 * (4.0 * 10 / (30 - 6)); /* the tail at the pace's speed */
    assert_near(v.mid_s, tail, 1e-9);
    assert_near(v.low_s, TL_TAIL_LO * tail, 1e-9);
    assert_near(v.high_s, TL_TAIL_HI * tail, 1e-9);
    /* it runs down as the tail runs, never under its floor */
    tl_value(&s, 45, &v);
    assert_near(v.mid_s, (6 - 3) * tail / 6, 1e-9);
    tl_value(&s, 100, &v);
    assert_near(v.mid_s, TL_TAIL_FLOOR * tail, 1e-9);
    /* a tail is never more than the estimate's low end holds */
    tl_set_tail(&s, 1000);
    assert_near(s.tail_s, 0.9 * 20, 1e-9);
    tl_set_tail(&s, -1);
    assert_near(s.tail_s, 0, 0);
}

/* Issue 35: a job whose first attempt has begun but not reported yet
 * reads as its own estimate less the time since creation, not as its
 * training and loading alone (which hold neither its other fixed costs
 * nor the margin learnt for whole jobs). The job queued behind it reads
 * its wait from this. Seen before: a job promised 4 s to 19 s read as
 * 5.3 s busy at its start, and took 12.1 s. */
static void before_the_pace_a_job_reads_as_its_own_estimate(void **state)
{
    (void)state;
    struct tl_state s;
    tl_begin(&s, 10, 0, 100, 2, 2, 4); /* begun at t=100: 2 s loading, 2..4 s steps */
    struct tl_value v, plain;
    /* created at t=99 with the estimate 4..19 s: at t=100, 3..18 s left */
    tl_value_of_job(&s, 100, 4, 19, 1, &v);
    tl_value(&s, 100, &plain);
    assert_near(plain.low_s, 4, 1e-9); /* the estimate basis alone */
    assert_near(plain.high_s, 6, 1e-9);
    assert_int_equal(v.basis, TL_ESTIMATE);
    assert_near(v.low_s, 4, 1e-9);   /* the basis's end is the higher one */
    assert_near(v.high_s, 18, 1e-9); /* 19 less the 1 s since creation */
    assert_near(v.mid_s, 11, 1e-9);
    char want[48];
    assert_string_equal(v.text, job_time_left_range_text(want, sizeof want, 4, 18));
    /* it counts down with the time since creation */
    tl_value_of_job(&s, 105, 4, 19, 6, &v);
    assert_near(v.high_s, 13, 1e-9);
    /* without an estimate, or once the job's page is on its pace, or for an
     * attempt that resumed from a checkpoint: the time left unchanged */
    tl_value_of_job(&s, 100, 0, 0, 1, &v);
    assert_near(v.high_s, plain.high_s, 1e-9);
    for (int step = 0; step <= 3; step++)
        tl_observe(&s, step, 102 + 0.3 * step);
    tl_value(&s, 103, &plain);
    tl_value_of_job(&s, 103, 4, 19, 4, &v);
    assert_int_equal(v.basis, TL_PACE);
    assert_near(v.high_s, plain.high_s, 1e-9);
    struct tl_state r;
    tl_begin(&r, 10, 5, 100, 2, 1, 2);
    tl_value(&r, 100, &plain);
    tl_value_of_job(&r, 100, 4, 19, 1, &v);
    assert_near(v.high_s, plain.high_s, 1e-9);
}

/* Issue 12: after 5% the pace range is narrower than the estimate's and
 * keeps narrowing; a worker that slows down mid-job moves the range. Seen
 * before: 245..735 s, then 416..1511 s, then 771..3455 s. */
static void a_slowdown_moves_the_range(void **state)
{
    (void)state;
    struct tl_state s;
    /* 1000 steps, estimate 1500..3500 s; 2 s per step, 4 s from step 400. */
    const double est_w = (3500.0 - 1500.0) / 2500.0;
    tl_begin(&s, 1000, 0, 0, 0, 1500, 3500);
    tl_observe(&s, 0, 0);
    double t = 0, prev_w = est_w;
    int checks = 0, inside = 0, widened = 0;
    for (long step = 10; step <= 990; step += 10) {
        t += 10 * (step <= 400 ? 2.0 : 4.0);
        tl_observe(&s, step, t);
        struct tl_value v;
        tl_value(&s, t, &v);
        if (v.basis != TL_PACE)
            continue;
        double truth = 4.0 * (double)(1000 - step) + 2.0 * (double)(step < 400 ? 400 - step : 0);
        double w = (v.high_s - v.low_s) / (0.5 * (v.high_s + v.low_s));
        double ahead = (1000.0 - (double)step) / 1000.0;
        assert_true(w < est_w);                            /* narrower than the estimate */
        assert_true(w <= est_w * (0.25 + 0.5 * ahead) + 1e-9); /* and more so as it goes */
        if (w > prev_w + 1e-9) {
            /* Re-widening only right after the change, within the cap. */
            assert_true(step > 400 && step <= 500);
            widened++;
        }
        prev_w = w;
        if (step > 450) { /* a few reports after the change: the truth is inside */
            checks++;
            inside += truth >= v.low_s && truth <= v.high_s;
        }
    }
    assert_true(inside >= 0.8 * checks);
    assert_true(widened <= 3);
}

/* Before the start, time left is the estimate minus the time waited
 * (issue 12: an estimate of 56 min to 3.6 h read "73 min to 3.6 h" of time
 * left one second later, floored at a training range that began higher). */
static void before_the_start_the_estimate_counts_down(void **state)
{
    (void)state;
    double lo, hi;
    /* The case seen: estimate 56 min..3.6 h, training part 73 min..3.0 h. */
    tl_before_start(56 * 60, 3.6 * 3600, 73 * 60, 3.0 * 3600, 1, &lo, &hi);
    assert_near(lo, 56 * 60, 1e-9); /* the training floor, clipped to the estimate */
    assert_near(hi, 3.6 * 3600 - 1, 1e-9);
    char a[48], b[48];
    assert_string_equal(job_time_left_range_text(a, sizeof a, lo, hi),
                        job_time_left_range_text(b, sizeof b, 56 * 60, 3.6 * 3600));
    assert_string_equal(a, "56 min to 3.6 h");
    /* At creation: exactly the estimate. */
    tl_before_start(600, 1800, 300, 900, 0, &lo, &hi);
    assert_near(lo, 600, 1e-9);
    assert_near(hi, 1800, 1e-9);
    /* Waiting counts down, never below the training part. */
    tl_before_start(600, 1800, 300, 900, 200, &lo, &hi);
    assert_near(lo, 400, 1e-9);
    assert_near(hi, 1600, 1e-9);
    tl_before_start(600, 1800, 300, 900, 5000, &lo, &hi);
    assert_near(lo, 300, 1e-9);
    assert_near(hi, 900, 1e-9);
    /* A training range above the estimate floors at the estimate. */
    tl_before_start(600, 1800, 700, 2000, 5000, &lo, &hi);
    assert_near(lo, 600, 1e-9);
    assert_near(hi, 1800, 1e-9);
}

/* Issue 32: a pace that varies 5% from report to report gives a time left
 * of at most 1.3x from 20% of the steps on, narrower at 50% than at 20%,
 * with the time really left inside (before: 1.6-1.85x at 10-30%). */
static void sharp_from_20_percent_and_narrowing(void **state)
{
    (void)state;
    struct tl_state s;
    tl_begin(&s, 500, 0, 0, 5, 300, 900);
    tl_observe(&s, 0, 5);
    /* a fixed wobble of about 5% around 1 s per step, 10 steps a report */
    static const double wobble[] = {0.05, -0.04, 0.02, -0.06, 0.04, -0.01, 0.06, -0.03};
    double t = 5, width[2] = {0, 0};
    for (long step = 10; step <= 500; step += 10) {
        t += 10 * (1.0 + wobble[step / 10 % 8]);
        tl_observe(&s, step, t);
        for (int k = 0; k < 2; k++)
            if (step == (k ? 250 : 100)) {
                struct tl_value v;
                tl_value(&s, t, &v);
                assert_int_equal(v.basis, TL_PACE);
                double truth = (double)(500 - step);
                assert_true(truth >= v.low_s && truth <= v.high_s);
                width[k] = v.high_s / v.low_s;
            }
    }
    assert_true(width[0] > 1.0 && width[0] <= 1.3);
    assert_true(width[1] < width[0]);
}

/* Issue 32: the trainer reports every few steps, each report's time off by
 * up to half (what the steps in it held), and its first report also holds
 * its start (allocating, first touches). Neither is the pace: reports
 * are gathered into samples of at least 1% of the steps, and the start's
 * sample is dropped once another is in. At 20% the middle is the time
 * truly left within 2%, and the band at most 1.1x with the truth inside
 * (before: the start slowed the mean, and the reports' jitter, read as
 * the pace's, made the band 1.2-1.5x wide). */
static void the_reports_jitter_and_the_start_are_not_the_pace(void **state)
{
    (void)state;
    struct tl_state s;
    tl_begin(&s, 1000, 0, 0, 5, 600, 1800);
    assert_int_equal(s.block_steps, 10);
    tl_observe(&s, 0, 0);
    /* each report 2 steps; its jitter cancels over 5 reports; the pace
     * wobbles 2-3% from one 10 steps to the next */
    static const double jitter[] = {0.5, -0.5, 0.3, -0.3, 0};
    static const double wobble[] = {0.03, -0.02, 0.01, -0.02};
    double t = 3; /* the start: 3 s before the first step */
    double at[501];
    at[0] = t;
    for (int r = 1; r <= 500; r++) {
        t += 2.0 * (1.0 + jitter[(r - 1) % 5]) * (1.0 + wobble[((r - 1) / 5) % 4]);
        at[r] = t;
    }
    for (int r = 1; r <= 100; r++)
        tl_observe(&s, 2L * r, at[r]);
    struct tl_value v;
    tl_value(&s, at[100], &v);
    assert_int_equal(v.basis, TL_PACE);
    double truth = at[500] - at[100];
    assert_true(fabs(v.mid_s / truth - 1.0) <= 0.02);
    assert_true(truth >= v.low_s && truth <= v.high_s);
    assert_true(v.high_s / v.low_s <= 1.1);
}

/* One job of 500 steps at about 1 s per step (the same 5% wobble), that
 * runs `slow` times slower from 30% of its steps on (a slower worker
 * after a move, a slowdown the steps could not see at 20%). Notes the
 * bands shown, learns from them at the end, and returns the band shown
 * at 20% and the time that was truly left then. */
static void drifting_job(struct est_history *h, double slow, struct tl_value *at20,
                         double *truth20)
{
    struct tl_state s;
    struct tl_shown shown[EST_TL_CELLS];
    memset(shown, 0, sizeof shown);
    tl_begin(&s, 500, 0, 0, 5, 300, 900);
    tl_calibrate(&s, h);
    tl_observe(&s, 0, 5);
    static const double wobble[] = {0.05, -0.04, 0.02, -0.06, 0.04, -0.01, 0.06, -0.03};
    double t = 5, t20 = 0;
    for (long step = 10; step <= 500; step += 10) {
        t += 10 * (1.0 + wobble[step / 10 % 8]) * (step > 150 ? slow : 1.0);
        tl_observe(&s, step, t);
        tl_note_shown(&s, shown);
        if (step == 100) {
            tl_value(&s, t, at20);
            t20 = t;
        }
    }
    *truth20 = t - t20;
    tl_history_add(shown, t, h);
}

/* Issue 32: the steps' spread cannot see a slowdown ahead, so a band from
 * it alone misses jobs that slow down; the margin measured on the jobs
 * before widens it until the time truly left falls inside, still at most
 * 1.3x at 20%; where the jobs before all fell well inside, it narrows. */
static void a_drift_ahead_is_learnt_from_the_jobs_before(void **state)
{
    (void)state;
    struct est_history *h = calloc(1, sizeof *h);
    assert_non_null(h);
    struct tl_value v;
    double truth;
    drifting_job(h, 1.15, &v, &truth);
    assert_int_equal(v.basis, TL_PACE);
    assert_true(truth > v.high_s); /* the steps alone: the truth is above */
    double first_lo = v.low_s / v.mid_s;
    /* Jobs before slowed down by 10-20%; this one by 15%. */
    static const double slows[] = {1.10, 1.20, 1.125, 1.175, 1.15};
    for (int k = 0; k < 40; k++)
        drifting_job(h, slows[k % 5], &v, &truth);
    drifting_job(h, 1.15, &v, &truth);
    assert_true(truth >= v.low_s && truth <= v.high_s);
    assert_true(v.high_s / v.low_s <= 1.3);
    /* The low end was never needed: it narrows (the same steps, so the
     * same band before its margin). */
    assert_true(v.low_s / v.mid_s > first_lo && v.low_s < v.mid_s);

    /* Steady jobs: the truth sits well inside, and the band narrows. */
    est_history_init(h);
    struct tl_value steady;
    drifting_job(h, 1.0, &steady, &truth);
    double raw_width = steady.high_s / steady.low_s;
    for (int k = 0; k < 40; k++)
        drifting_job(h, 1.0, &steady, &truth);
    assert_true(truth >= steady.low_s && truth <= steady.high_s);
    assert_true(steady.high_s / steady.low_s < raw_width);
    free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(from_the_estimate_first),
        cmocka_unit_test(then_from_the_pace),
        cmocka_unit_test(noisy_steps_widen_the_band),
        cmocka_unit_test(a_move_starts_again_from_the_estimate),
        cmocka_unit_test(near_the_end_and_odd_reports),
        cmocka_unit_test(before_the_start_the_estimate_counts_down),
        cmocka_unit_test(the_work_after_the_last_step_is_time_left),
        cmocka_unit_test(before_the_pace_a_job_reads_as_its_own_estimate),
        cmocka_unit_test(a_slowdown_moves_the_range),
        cmocka_unit_test(sharp_from_20_percent_and_narrowing),
        cmocka_unit_test(the_reports_jitter_and_the_start_are_not_the_pace),
        cmocka_unit_test(a_drift_ahead_is_learnt_from_the_jobs_before),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
