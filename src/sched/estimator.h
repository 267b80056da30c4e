/* estimator.h - the estimate of time and price shown before a job starts,
 * and the calibration history that makes its ranges honest. Pure: time is a
 * parameter, no I/O; the caller owns every struct.
 *
 * Nominal parts (from the job and the fleet, never constants alone):
 *   wait      when the chosen worker is free, after the queue ahead
 *             (the scheduler's horizon, scheduler.h: sched_pass free_at_s)
 *   training  train_tokens x model FLOPs per token (plus, for DPO, one
 *             forward of the frozen reference over the data set) / the
 *             worker's measured FLOP/s (planner.h, capacity.h)
 *   start-up  loading before the first step (the caller's figure)
 * Each part has its own range, measured apart, and the time range is their
 * sum (docs/estimator.md, "The range, term by term"):
 *   wait      the running attempt's own time left on the chosen worker
 *             (sched_worker busy_low_s..busy_high_s, from its pace), then
 *             the jobs placed ahead at the training band, plus up to one
 *             pass interval where passes run on a clock; a job that waits
 *             may be put back (a later job stands before it in the fair
 *             order) and run on the scheduler's next choice, so the range
 *             holds the finish there too (alt_worker)
 *   start-up  the fixed costs' band: the error of attempts' fixed costs
 *             against their nominal, by (method, worker class)
 *   training  the training band: the error of attempts' training time
 *             against the prediction they were made with, by (method,
 *             worker class)
 * Bands are the 5th..95th percentile of their ring of log ratios (the
 * newest EST_HISTORY_CAP), each weighed by its recency (halving every
 * EST_HALF_LIFE errors added to its ring since), widened by the sampling
 * error of their mean and pulled towards a wide default band while the
 * effective number of errors is small; so an old burst of large errors
 * (a load surge that has ended) stops widening new ranges once newer
 * errors outweigh it, and a slowdown measured now moves them; thin cells
 * borrow their neighbours'. The sum is then widened or narrowed about its
 * geometric centre by a margin measured on succeeded jobs (how far outside
 * the sum they fell), by wait cell, so that it holds EST_COVER of them.
 * The price range is the worker's rate times the training range.
 * docs/estimator.md explains it for users and operators.
 */
#ifndef ALALLO_SCHED_ESTIMATOR_H
#define ALALLO_SCHED_ESTIMATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/job.h"
#include "sched/capacity.h"
#include "sched/planner.h"
#include "sched/scheduler.h"

#define EST_HISTORY_CAP 256
/* An error weighs half as much once this many newer ones were added to its
 * ring (bands and margins alike; docs/estimator.md, "Old errors age"). */
#define EST_HALF_LIFE 32.0
/* Cells of the range's margin by how much of a job's time is waiting:
 * capacity free, a short wait, a long one (est_wait_cell). */
#define EST_WAIT_CELLS 3
#define EST_LONG_WAIT_SHARE 0.25
/* Cells of the time-left margin by the share of the job's steps done when
 * the band was shown: under 20%, 20-50%, 50-80%, the rest (time_left.h). */
#define EST_TL_CELLS 4
#define EST_DEFAULT_STARTUP_S 60.0
#define EST_NO_CAPACITY_MESSAGE "No capacity is free right now; the job would wait in the queue."
/* Capacity is free, but the job's goal places it on a busy worker: it
 * would wait for that one (its time counts the wait). */
#define EST_WAITS_CHEAPER_MESSAGE                                                            \
    "A cheaper worker is busy; for the lowest cost the job would wait for it."
#define EST_WAITS_FASTER_MESSAGE                                                             \
    "A faster worker is busy; for the fastest finish the job would wait for it."
#define EST_WAITS_DEADLINE_MESSAGE                                                           \
    "A cheaper worker is busy; it still finishes the job by its deadline, so the job would "  \
    "wait for it."

/* The newest EST_HISTORY_CAP log ratios of one cell. */
struct est_ring {
    uint32_t n;    /* how many are held (<= EST_HISTORY_CAP) */
    uint32_t next; /* where the next one goes                */
    float log_ratio[EST_HISTORY_CAP];
};

/* The newest EST_HISTORY_CAP succeeded jobs of one cell: the log of
 * actual/nominal of their start (creation to first step: the wait for
 * capacity and loading) and of their training (first step to the end,
 * moves included), kept in pairs so that a band can recombine them with
 * the weights of the job being estimated. */
struct est_job_ring {
    uint32_t n;
    uint32_t next;
    float log_start[EST_HISTORY_CAP];
    float log_train[EST_HISTORY_CAP];
};

/* Calibration history. Zero it (or est_history_init) to start empty. */
struct est_history {
    /* attempts: actual / nominal training time on the worker that ran them
     * (time left, price, budget) */
    struct est_ring train[PLAN_METHOD_COUNT][WORKER_CLASS_COUNT];
    /* succeeded jobs against the estimate made at creation, by method, the
     * class of the worker that estimate chose, whether capacity was free at
     * creation ([0]) or the job had to wait ([1]), and goal (a lowest_cost
     * job may start on any worker of about the same price, so its spread
     * is its own) */
    struct est_job_ring job[PLAN_METHOD_COUNT][WORKER_CLASS_COUNT][2][SCHED_GOAL_COUNT];
    /* attempts' fixed costs: actual / nominal of the running time that is
     * not steps (loading, the reference pass, the final save), by method
     * and class of the worker that ran them */
    struct est_ring start[PLAN_METHOD_COUNT][WORKER_CLASS_COUNT];
    /* succeeded jobs: where the actual time fell against the sum of the
     * parts' ranges given at creation, in half-widths of that sum
     * (est_range_spread, in logs), by est_wait_cell */
    struct est_ring spread[EST_WAIT_CELLS];
    /* succeeded jobs: how far below the lower end of the price range
     * given at creation, before its margin, their net price fell (log of
     * that end over the price, > 0 below), in half-widths of that range,
     * for the margin of that end (est_price_margin) */
    struct est_ring price_spread;
    /* each succeeded job's log(price before the cap / the upper end
     * before its margin), in half-widths (est_price_high_margin) */
    struct est_ring price_spread_high;
    /* succeeded jobs: how far outside each end of the time-left pace band
     * shown in a share-done cell the truth fell, in logs (> 0 outside,
     * < 0 inside), below ([0]) and above ([1]); time_left.h */
    struct est_ring tl_spread[EST_TL_CELLS][2];
    /* attempts of a shape nothing had finished of, predicted with a speed
     * factor borrowed from its nearest learnt neighbour (est_shape_nearest)
     * or from the fleet: actual / that prediction, by method and class of
     * the worker that ran them; the band of the next such prediction */
    struct est_ring borrowed[PLAN_METHOD_COUNT][WORKER_CLASS_COUNT];
};

/* A range as multipliers of a nominal time. */
struct est_band {
    double lo, hi;
    int n; /* samples it rests on */
};

struct est_request {
    struct plan_job job;
    double train_tokens;  /* tokens trained over all epochs                */
    double reference_tokens; /* DPO: tokens the frozen reference reads
                                before training (the data set once); 0
                                for supervised jobs (planner_work_flops) */
    enum sched_goal goal;
    double startup_s;     /* expected loading; <= 0: EST_DEFAULT_STARTUP_S */
    double work_factor;   /* how many times slower than its FLOPs this
                             model trains (learnt per model by the caller);
                             <= 0: 1                                       */
    double now;
    double pass_delay_s;  /* the longest a job waits, once capacity frees,
                             for the scheduling pass that places it (the
                             pass interval); 0: placed at once             */
    double next_pass_s;   /* when the next scheduling pass runs (same clock
                             as now); 0: whenever capacity frees            */
    bool borrowed_shape;  /* nothing of this shape has finished yet, but
                             work_factor (and the loading's factor in
                             startup_s) is borrowed from a neighbouring
                             shape or the fleet: the training range is the
                             measured band of such borrowed predictions
                             (est_band_borrowed), fixed costs the measured
                             band of learnt ones; new_shape must be false */
    bool new_shape;       /* nothing of this shape has finished yet: its
                             speed and fixed costs are not learnt, and the
                             training and fixed-cost ranges are the wide
                             default bands (the error rings hold the
                             errors of learnt shapes only)                 */
    const char *currency; /* NULL: "USD"                                   */
    double finish_by_s;   /* goal finish_by: the deadline (Unix seconds)   */
};

struct estimate {
    enum plan_fit fit;
    enum job_message fail_message; /* MSG_NONE when it fits; else the failed
                                      job's message (planner.h)           */
    enum plan_method method;
    int64_t memory_bytes;          /* plan.memory_bytes                     */
    double flops_per_token;
    double params;                 /* planner_active_params: a worker's
                                      speed on the model
                                      (capacity_worker_flops_for)           */
    double work_flops;             /* planner_work_flops: training, plus
                                      the DPO reference pass               */
    double reference_flops;        /* the reference pass's part of it      */
    int worker;                    /* index into workers; -1 none           */
    char worker_name[CAPACITY_NAME_MAX]; /* plan.worker; "" none           */
    int64_t gpu_need_bytes;        /* planner_gpu_need: what a GPU must hold
                                      to run the job at all (any worker)    */
    int gpu_batch;                 /* on a GPU worker: the micro-batch that
                                      fits one of its GPUs (planner_gpu_batch);
                                      0 otherwise                           */
    int64_t gpu_memory_bytes;      /* the GPU memory at that batch; 0 none  */
    enum worker_class worker_class;
    bool waits;                    /* the job would not start at once       */
    double wait_s, startup_s, train_s; /* nominal parts                     */
    double wait_low_s, wait_high_s;  /* the wait's range: the running job's
                                        own time left and the jobs ahead    */
    double startup_low_s, startup_high_s; /* fixed costs' range             */
    int wait_cell;                   /* est_wait_cell of this estimate       */
    int alt_worker;                  /* a job that waits: the scheduler's next
                                        choice, where it runs when put back
                                        (a job created later stands before it
                                        in the fair order); -1 none         */
    double alt_low_s, alt_high_s;    /* the range of its finish there (from
                                        now), held by the time range        */
    bool new_shape;                  /* the request's: default part bands    */
    double between_share;            /* what validation and sample answers
                                        add between steps, as a share of the
                                        steps' nominal time (in train_s once
                                        est_add_validation ran; python
                                        graders' seconds not in it): an
                                        attempt's clock holds it, so the
                                        speed it teaches leaves it out      */
    double python_s;                 /* python graders' seconds over the
                                        whole job (est_rft_python_s), in
                                        train_s once est_add_validation ran
                                        as their share of it; 0 for a job
                                        without one (set by the caller)     */
    bool borrowed_shape;             /* the request's: borrowed factor       */
    double range_margin;             /* the margin (logs) applied to the half-
                                        width of the parts' sum
                                        (est_range_margin, at least half of
                                        that half-width kept)               */
    double price_margin;             /* how far the price's lower end was
                                        lowered (> 0) or raised (< 0), in
                                        logs, from the training range's
                                        (est_price_margin)                  */
    double price_high_margin;        /* how far the upper end (the cap) was
                                        lowered from the training range's,
                                        in logs, >= 0 (est_price_high_margin) */
    double price_high_nominal;       /* that upper end before it (currency
                                        units, unrounded), which the job's
                                        price is measured against            */
    double finish_s;               /* now + the nominal parts: the chosen
                                      worker's new free time on the horizon */
    double time_low_s, time_high_s;  /* estimate.time, from now              */
    char time_text[48];              /* "40 min to 1.3 h"                    */
    double train_low_s, train_high_s; /* training time range on the worker  */
    int64_t price_low_micros, price_high_micros; /* millionths of currency  */
    char currency[8];
    const char *message;           /* EST_NO_CAPACITY_MESSAGE, EST_WAITS_*
                                      when it waits for a busy worker though
                                      another is free, or NULL              */
    char limit_message[160];       /* est_time_limit_message(); "" none     */
    /* goal finish_by (est_finish_by_verdict): the deadline, whether the
     * range's upper end (now + time_high_s) is by it, that upper end as a
     * moment, and when it is not, "No capacity can finish this job by
     * <deadline>; the earliest is <upper end>." */
    double finish_by_s;            /* 0: not a finish_by estimate          */
    bool finish_by_met;
    double finish_high_s;          /* now + time_high_s                    */
    char finish_by_message[160];
};

/* When the job's estimated running time (startup plus training, the time
 * the limit counts) passes the time limit of limit_s seconds, writes the
 * estimate's warning into e->limit_message: "The job would reach the
 * 12-hour time limit before it finishes; it would then stop, and you pay
 * nothing." when even the lower end passes it, "The job may reach ..." when
 * only the upper end does. Else (or limit_s <= 0, or no ranges) "". */
void est_time_limit_message(struct estimate *e, double limit_s);

/* The training work validation adds, as a share of the training's own
 * (docs/estimator.md, "Validation"): a forward pass (about a third of a
 * step's forward and backward work per token) over the whole validation
 * set at each of n_epochs epochs' ends, and over one batch every
 * valid_every steps. valid_tokens and valid_examples: one pass over the
 * set; train_tokens: the whole run's. 0 without validation. */
double est_validation_share(double train_tokens, double valid_tokens, long valid_examples,
                            int n_epochs, long max_steps, int batch, long valid_every);

/* The training work sample answers add, as a share of the training's own
 * (docs/estimator.md, "Sample answers"): n_prompts prompts of
 * prompt_tokens tokens together, answered before the first step and at
 * each of n_epochs epochs' ends, each answer answer_tokens long at most.
 * Reading a prompt is a forward pass (a third of a step's work per token);
 * each answer token is generated alone, a forward pass of one token that
 * uses the machine EST_DECODE_SLOWDOWN times worse than a batch's.
 * train_tokens: the whole run's. 0 without samples. */
#define EST_DECODE_SLOWDOWN 4.0
double est_samples_share(double train_tokens, int n_prompts, double prompt_tokens,
                         int answer_tokens, int n_epochs);

/* Reinforcement fine-tuning's work in one epoch, in training tokens of the
 * policy (docs/estimator.md, "Reinforcement fine-tuning: rollouts, grading
 * and updates"), as three terms, from its prompts (`prompts` of them,
 * prompt_tokens together), `group` answers to each, an answer counted at
 * answer_tokens / 2:
 *   rollout  each answer reads its prompt (a forward pass, a third of a
 *            training token's work per token) and decodes its tokens one
 *            at a time (EST_DECODE_SLOWDOWN / 3 each)
 *   grading  grade_per_answer (est_rft_grade_tokens, summed over the
 *            grader's score_model graders; 0 for the text graders) for each
 *            answer
 *   update   training on prompt and answer together (one each), plus a
 *            forward pass for the reference when `kl` (a third more) */
struct est_rft_terms {
    double rollout, grading, update;
};
void est_rft_terms(double prompt_tokens, long prompts, int group, int answer_tokens, bool kl,
                   double grade_per_answer, struct est_rft_terms *out /* OUT */);
/* Their sum. */
double est_rft_tokens(double prompt_tokens, long prompts, int group, int answer_tokens, bool kl,
                      double grade_per_answer);

/* The work reinforcement fine-tuning's validation rewards add, as a share
 * of the training's own (train_tokens: the whole run's, est_rft_tokens):
 * before the first step, every eval_every steps and at the last of
 * max_steps, valid_prompts prompts (valid_prompt_tokens together) are each
 * answered eval_samples times, a rollout and grade_per_answer each (no
 * update). 0 without prompts. */
/* The validation rounds a reinforcement job of max_steps runs, one every
 * eval_every steps: before the first step, after each eval_every-th and
 * after the last. */
double est_rft_validation_rounds(long max_steps, long eval_every);

double est_rft_validation_share(double train_tokens, double valid_prompt_tokens,
                                long valid_prompts, int eval_samples, int answer_tokens,
                                double grade_per_answer, long max_steps, long eval_every);

/* A python grader's run for one answer, in seconds of the worker's time
 * whatever the model or the worker's speed: the sandbox's start and the
 * interpreter's, 45-51 ms measured by bench/train/rft.sh GRADER=python on
 * the 2-core development VM (docs/estimator.md). A source's own work
 * beyond a trivial one is not foreseen. */
#define EST_PYTHON_GRADE_S 0.05

/* The seconds python graders add to `steps` steps of a reinforcement
 * run, each answer graded in answer_s (EST_PYTHON_GRADE_S for each python
 * grader of the job's; 0 none): `batch` prompts a step, `group` answers
 * to each, one answer at a time, nothing hidden behind the rollouts
 * (docs/rft.md). The validation rewards' runs are not counted: they are
 * in the learnt speed (docs/estimator.md). 0 when an argument is out of
 * range. */
double est_rft_python_s(double answer_s, long steps, int batch, int group);

/* What one score_model grader costs for each answer it grades, in training
 * tokens of the policy: its model reads the grading prompt (prompt_tokens
 * of template, plus the answer, counted at answer_tokens / 2, each time the
 * template reads it: a forward pass, a third of a training token each) and
 * decodes its reply, counted at its limit max_tokens, one token at a time
 * (EST_DECODE_SLOWDOWN / 3 each), all scaled by size_ratio, the grader
 * model's parameters (per token) over the policy's. 0 when an argument is
 * not positive (answer_reads may be 0). */
/* A token a score_model grader's model decodes, for one answer at a time,
 * uses the machine this many times worse than a training step's forward:
 * bench/train/rft.sh GRADER=score_model measured a grading at 42-73
 * training tokens' time with a 16-token reply, 90-160 with a 48-token one
 * and 504-525 with a 160-token one on the built-in model
 * (docs/estimator.md), about 3 training tokens per token decoded, a
 * forward being a third of one. */
#define EST_DECODE_ALONE 9.0
double est_rft_grade_tokens(double prompt_tokens, int answer_reads, int answer_tokens,
                            int max_tokens, double size_ratio);

/* The nominal loading before an attempt's first step (the fixed costs'
 * nominal, est_request.startup_s before the learnt factor): a base
 * EST_LOAD_BASE_S, then the policy's files (model_bytes) read at
 * EST_LOAD_BYTES_PER_S and, for reinforcement fine-tuning, the files of
 * the models its score_model graders ask (grader_bytes, each model once;
 * 0 for any other grader), which the trainer loads before the first step
 * too (docs/estimator.md, "Reinforcement fine-tuning: rollouts, grading
 * and updates"). Negative or non-finite bytes count as 0. */
#define EST_LOAD_BASE_S 2.0
#define EST_LOAD_BYTES_PER_S 200e6
double est_loading_s(double model_bytes, double grader_bytes);

/* Stretches the estimate's training time, total time and price by
 * (1 + share): validation and sample answers run on the same worker
 * between steps. */
void est_add_validation(struct estimate *e, double share);

/* The goal finish_by's verdict on e, made at `now` for the deadline
 * finish_by_s (after est_add_validation, so that it judges the range
 * shown): fills e's finish_by fields. Without ranges (no capacity known,
 * or the job fits nowhere) finish_by_met is true and no message is set:
 * nothing can be judged yet. */
void est_finish_by_verdict(struct estimate *e, double now, double finish_by_s);

/* The multipliers a finish_by job's placement reads (sched_job.finish_hi):
 * for each worker class, whether the job waits and each share of start
 * k / (SCHED_FINISH_SHARES - 1), the upper end at the 90% level of
 * est_band_job for method m: the same band the estimate's range shows. */
void est_finish_by_factors(const struct est_history *h, enum plan_method m,
                           float out[2][WORKER_CLASS_COUNT][SCHED_FINISH_SHARES] /* OUT */);

void est_history_init(struct est_history *h /* OUT */);

/* Adds one attempt's training ratio. Ignored unless both times are > 0 and
 * finite and the method and class are valid. */
void est_history_add_train(struct est_history *h, enum plan_method m, enum worker_class c,
                           double actual_s, double nominal_s);

/* Adds one succeeded job: how long it took from creation to its first
 * step and from there to the end, against the estimate's nominal parts
 * (wait + loading, training). Pairs that are not both > 0 are skipped. */
void est_history_add_job(struct est_history *h, enum plan_method m, enum worker_class c,
                         bool waited, enum sched_goal g, double start_actual_s, double start_nominal_s,
                         double train_actual_s, double train_nominal_s);

/* Adds one attempt's fixed costs: its running time that was not steps
 * (loading, the reference pass, the final save) against the nominal
 * loading. Ignored unless both are > 0. */
void est_history_add_start(struct est_history *h, enum plan_method m, enum worker_class c,
                           double actual_s, double nominal_s);

/* Where `actual_s` fell against the range [low_s, high_s] that was given
 * with `margin` (est_estimate's range_margin): its distance in logs from
 * the range's geometric centre, less the half-width of the parts' sum
 * (that range's without the margin); <= 0 inside that sum. A value for
 * est_history_add_spread; NAN when an argument is not valid. */
double est_range_spread(double actual_s, double low_s, double high_s, double margin);

/* The margin's cell of a job whose estimate waits wait_s (for capacity)
 * of a nominal total_s: 0 capacity free, 1 a wait under
 * EST_LONG_WAIT_SHARE of the total, 2 a longer one. */
int est_wait_cell(bool waits, double wait_s, double total_s);

/* Adds one succeeded job's est_range_spread(), in its est_wait_cell. */
void est_history_add_spread(struct est_history *h, int cell, double spread);

/* The margin, in logs, that the half-width of the parts' sum needs to hold
 * EST_COVER of the succeeded jobs (the EST_COVER quantile of their
 * spreads, weighed by recency as the bands are), pulled towards 0 while
 * there are few (effectively): it keeps the time range
 * calibrated when the parts, measured apart, do not add up (a job placed
 * on another worker than its estimate chose; the queue reordered). */
#define EST_COVER 0.93
double est_range_margin(const struct est_history *h, int cell);

/* The price range is the training range at the worker's rate, each end
 * then measured. Its lower end only informs: moved to where
 * EST_PRICE_COVER of succeeded jobs' net prices stayed above it. The
 * spread of one job: log(the lower end before its margin / its net
 * price), > 0 when it paid less, divided by the half-width of that range
 * before its margins (0.5 log(upper / lower end)): est_price_spread. Its
 * upper end is the job's price cap: a succeeded job never pays more
 * (ledger.h), so it is only ever lowered from the training range's, to
 * where EST_PRICE_COVER of succeeded jobs' prices before the cap stayed
 * under it (est_history_add_price_high_spread); the few above pay the
 * cap.
 *
 * In half-widths, not logs: a range's width follows how well its shape is
 * learnt, and a margin measured in logs on the wide ranges of a shape's
 * first jobs, applied to the narrow ones of its later jobs, raised their
 * lower ends above what a sixth of them paid (30 real jobs, 2026-12-06:
 * 0.83 inside); in half-widths the same replay holds 0.90-0.97 of them at
 * the same median width (docs/estimator.md, "The price range"). */
#define EST_PRICE_COVER 0.95
void est_history_add_price_spread(struct est_history *h, double spread);

/* log(end / price) in half-widths of the price range [low, high] (before
 * its margins): > 0 when the price is below `end`. NaN when the range has
 * no width or an amount is not positive. */
double est_price_spread(double end, double price, double low, double high);

/* The half-widths by which the price's lower end is lowered (> 0) or
 * raised (< 0): the EST_PRICE_COVER quantile of the spreads, weighed by
 * recency, pulled towards 0 while there are few (effectively).
 * est_estimate raises the end at most to the range's geometric centre. */
double est_price_margin(const struct est_history *h);

/* Adds one succeeded job's log(its price before the cap / the upper end
 * before its margin) in half-widths (est_price_spread(price, end, ...)):
 * > 0 when it cost more. Not finite is ignored. */
void est_history_add_price_high_spread(struct est_history *h, double spread);

/* The half-widths (>= 0) by which the price's upper end is lowered: minus
 * the EST_PRICE_COVER quantile of those spreads, weighed by recency,
 * pulled towards 0 while there are few; 0 where that quantile is above 0
 * (the cap is never raised over the training range's). est_estimate
 * lowers the end at most to the range's geometric centre. */
double est_price_high_margin(const struct est_history *h);

/* Adds how far outside one end (side 0 below, 1 above) of a time-left
 * band shown in cell `cell` (EST_TL_CELLS) a succeeded job's truth fell,
 * in logs. Ignored when not finite or the cell or side is not valid. */
void est_history_add_tl_spread(struct est_history *h, int cell, int side, double spread);

/* The margin, in logs, that one end of the time-left band of a cell needs
 * to hold EST_TL_SIDE_COVER of the succeeded jobs on its side (the quantile
 * of their spreads, weighed by recency; negative narrows), pulled towards
 * EST_TL_MARGIN_PRIOR while there are few (effectively); thin cells borrow
 * their neighbours'. Both ends together hold about
 * 1 - 2 x (1 - EST_TL_SIDE_COVER). The prior is what a job's pace left
 * unseen on the 2-core VM the estimates are measured on: the time truly
 * left at 20% of the steps fell 8% (one standard deviation, in logs)
 * around the pace's middle (docs/estimator.md, "The measured margin"). */
#define EST_TL_SIDE_COVER 0.965
#define EST_TL_MARGIN_PRIOR 0.08
double est_tl_margin(const struct est_history *h, int cell, int side);

/* Adds one attempt of a shape whose speed factor was borrowed: its
 * training time against the prediction made with the borrowed factor.
 * Ignored unless both are > 0 and the cell is valid. */
void est_history_add_borrowed(struct est_history *h, enum plan_method m, enum worker_class c,
                              double actual_s, double predicted_s);

/* The band of training time predicted with a borrowed factor, of (m, c):
 * the 5th..95th percentile of those predictions' errors, pulled towards
 * the default training band while there are few (a thin cell borrows the
 * other methods of its class, as est_band_train does). */
struct est_band est_band_borrowed(const struct est_history *h, enum plan_method m,
                                  enum worker_class c);

/* A shape a speed factor is learnt for (docs/estimator.md, "A shape
 * nothing has finished of"). */
struct est_shape {
    char model[128], precision[16], adapter[16], method[16];
    int batch, seq_len;
};

/* The nearest of n learnt shapes to `want` whose speed factor `want` may
 * borrow: the same model and precision; among those, the fewest of
 * adapter and method differing, then the nearest tokens per step (batch x
 * context, in logs), then the nearest batch. Returns its index, or -1
 * when none has the same model and precision. */
int est_shape_nearest(const struct est_shape *want, const struct est_shape *known, int n);

/* The band of attempts' fixed costs of (m, c): multipliers of nominal. */
struct est_band est_band_start(const struct est_history *h, enum plan_method m,
                               enum worker_class c);

/* The band of attempts' training time of (m, c): multipliers of nominal. */
struct est_band est_band_train(const struct est_history *h, enum plan_method m,
                               enum worker_class c);

/* The band of a new job's time from creation to finish, as multipliers of
 * its nominal total, where start_share is the share of that total that is
 * the start (wait + loading). Each past job of the cell gives the ratio it
 * would have had with this job's mix: share x its start ratio + (1 - share)
 * x its training ratio; the band is taken over those. */
struct est_band est_band_job(const struct est_history *h, enum plan_method m,
                             enum worker_class c, bool waits, enum sched_goal g,
                             double start_share);

/* The estimate of `req` on `workers`, given when each is free (free_at,
 * [n_workers], the scheduler's horizon; NULL: each worker's own state as in
 * sched_free_at). A job that fits nowhere comes back with ERR_OK, fit and
 * fail_message set and no ranges. ERR_INVALID (reason in why) for a bad
 * job or token count; ERR_NOMEM. */
enum alallo_err est_estimate(const struct est_request *req, const struct sched_worker *workers,
                             size_t n_workers, const double *free_at,
                             const struct est_history *h, struct estimate *out /* OUT */,
                             char *why, size_t whycap);

/* Speed per GPU kind (docs/estimator.md, "GPU workers"). A worker measures
 * its own speed when it starts, as every worker does; the speed of a GPU
 * kind is the geometric mean, per GPU, of the measured workers of that
 * kind (a worker's FLOP/s / its GPUs: an attempt holds all of them). */
#define EST_GPU_KINDS_MAX 64
struct est_gpu_kind {
    char kind[32];
    double flops_per_gpu; /* learnt FLOP/s of one GPU of the kind */
    int workers;          /* measured workers it rests on         */
};

/* The kinds of the measured GPU workers among `workers` (lost ones
 * included: a measurement stays true of its kind), at most cap. Returns
 * how many were written. */
int est_gpu_kinds(const struct sched_worker *workers, size_t n, struct est_gpu_kind *out /* OUT */,
                  int cap);

/* Gives each GPU worker that has not measured yet the speed of its kind
 * (flops_per_gpu x its GPUs), so that a new worker of a known kind is
 * estimated at once instead of at capacity_worker_flops's slow default.
 * Measured workers and CPU workers are left alone. */
void est_gpu_fill_speed(struct sched_worker *workers, size_t n);

/* The training-time range for `nominal_s` seconds of training of method m on
 * a worker of class c: [nominal x band.lo, nominal x band.hi]. Used for the
 * estimate, for time left at the start of an attempt (time_left.h) and for
 * the budget. */
void est_train_range(const struct est_history *h, enum plan_method m, enum worker_class c,
                     double nominal_s, double *low_s /* OUT */, double *high_s /* OUT */);

/* A worker's own speed beside its shape's factor (docs/estimator.md, "The
 * worker's own speed"). Its bench is one measurement; the attempts it
 * runs tell how it really does against the fleet. Each finished attempt
 * gives an offset: log(actual / the prediction it was given) plus the
 * correction that prediction carried (`applied`), less the centre of the
 * training band it was predicted with (method m, class c; the band of
 * borrowed predictions when `borrowed`), read before the attempt's own
 * error joins it. NAN when a time is not positive. */
double est_worker_offset(const struct est_history *h, enum plan_method m, enum worker_class c,
                         bool borrowed, double actual_s, double predicted_s, double applied);

/* The corrections, in logs (> 0: slower than its bench), of n workers from
 * their offsets' means mean[i] over count[i] attempts: each mean shrunk
 * towards 0 by EST_WORKER_PRIOR attempts, less the count-weighted mean of
 * the shrunk means of the workers that have any, so that the corrections
 * of a fleet sum to about 0 (the training band is measured against
 * corrected predictions and keeps its centre) and a fleet of one worker
 * is never corrected. A worker with none gets 0; each is held within
 * +-EST_WORKER_MAX_LOG. */
void est_worker_speed_logs(const double *mean, const long *count, size_t n,
                           double *out /* OUT, n */);
#define EST_WORKER_PRIOR 4.0

/* A mean in logs after its n-th value x (n >= 1): the mean of all while
 * n <= memory, then a moving average of that length. A learnt factor's
 * memory is short (EST_FACTOR_MEMORY), to follow a fleet whose speed
 * changes; a worker's offsets' is long (EST_WORKER_MEMORY): its bench
 * error lasts, and with a memory of 8 the simulation's corrections were
 * noise enough to widen waiting jobs' ranges (docs/estimator.md). */
double est_mean_step(double mean, long n, double x, long memory);
#define EST_FACTOR_MEMORY 8
#define EST_WORKER_MEMORY 64

#define EST_WORKER_MAX_LOG 1.0986 /* log 3 */

#endif
