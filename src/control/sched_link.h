/* sched_link.h - how the server drives the scheduler modules of src/sched
 * (planner, scheduler, estimator, time_left, ledger) with what the store
 * holds: docs/scheduler.md, "How the server calls this".
 *
 * The sched modules are pure; this module owns the state they need between
 * calls:
 *  - the calibration history (struct est_history), rebuilt at start-up
 *    from the store's calibration rows and fed each finished attempt and
 *    job (sched_link_calibrate);
 *  - per job, two texts the store keeps without reading them: `plan` (the
 *    nominal parts of the estimate made at creation, as JSON) and
 *    `ledger_state` (the job's struct ledger_job and the time-left state of
 *    its current attempt, as a versioned line format).
 * All times are seconds on the server's wall clock (ms / 1000).
 * Thread-safe: the history and the pass are behind one mutex.
 */
#ifndef ALALLO_CONTROL_SCHED_LINK_H
#define ALALLO_CONTROL_SCHED_LINK_H

#include <stdbool.h>
#include <stddef.h>

#include "control/catalog.h"
#include "control/control.h"
#include "sched/estimator.h"
#include "sched/ledger.h"
#include "sched/planner.h"
#include "sched/scheduler.h"
#include "sched/time_left.h"
#include "store/store.h"

#define SCHED_LINK_SEQ_LEN 256     /* context of jobs older than max_seq_len */
#define SCHED_LINK_WORKERS 1024    /* workers seen by one pass              */
#define SCHED_LINK_QUEUE 16384     /* waiting jobs seen by one pass         */
#define SCHED_LINK_CALIBRATION 4096 /* calibration rows read at start-up    */

/* The kind of the calibration rows that teach factors of actual to nominal
 * training (a model's, a shape's under "speed:…", a worker's under
 * "worker:…", fixed costs under "start:…"). Nominal is against the
 * workers' start-up bench (core/bench_speed.h), so the rows of another
 * bench do not teach today's: those of the tiny shape's, kind "model",
 * are left unread. */
#define SCHED_LINK_FACTOR_KIND "factor"

/* The nominal parts of a job's estimate, kept in store_job.plan. */
struct sched_plan {
    double flops_per_token;
    enum plan_method method;
    enum worker_class class_; /* of the worker the estimate chose        */
    bool waits;               /* capacity was not free at creation       */
    enum sched_goal goal;
    double start_s;           /* nominal wait + loading                  */
    double train_s;           /* nominal training                        */
    double startup_s;         /* nominal loading                         */
    double model_factor;      /* the model's factor the estimate used    */
    double startup_factor;    /* sched_link_startup_factor the estimate
                                 used (in startup_s); 1 in older plans    */
    double range_margin;      /* the estimate's range_margin; 0 in older */
    bool new_shape;           /* the estimate's new_shape: its part bands
                                 were the defaults, so it does not measure
                                 the margin                               */
    int64_t gpu_need;         /* GPU memory at a batch of 1 (estimate
                                 gpu_need_bytes); 0 in plans written before
                                 it: the pass then checks no GPU        */
    double finish_by_s;       /* goal finish_by: the deadline (Unix
                                 seconds); 0 for the other goals        */
    double between_share;     /* the estimate's between_share: what
                                 validation and sample answers add to the
                                 steps' time; 0 in older plans            */
    double python_s;          /* the estimate's python_s: the python
                                 graders' seconds of the whole job; 0 in
                                 older plans and jobs without one         */
    double price_low;         /* the estimate's price range's lower end
                                 (currency units, unrounded); 0 in older
                                 plans                                    */
    double price_margin;      /* the estimate's price_margin; 0 in older */
    double price_high_nominal; /* the estimate's price_high_nominal: the
                                  upper end before its margin; 0 in older
                                  plans                                   */
    double params;            /* the estimate's params: the model's active
                                 parameters, for a worker's speed on it; 0
                                 in older plans (the bench's speed)       */
};

/* The job's ledger and the time left of its current attempt, kept in
 * store_job.ledger_state. */
struct sched_state {
    struct ledger_job ledger;
    bool has_tl;            /* an attempt runs: the fields below are its  */
    struct tl_state tl;
    double nominal_step_s;  /* nominal seconds per step on its worker, with
                               the model's factor                          */
    double model_factor;    /* sched_link_model_factor() at its start     */
    double speed_log;       /* its worker's own correction at its start
                               (sched_worker.speed_log)                    */
    int worker_class;       /* enum worker_class of its worker            */
    /* The job's, over its attempts: the first pace band shown in each
     * share-done cell (tl_note_shown), measured at its success. */
    struct tl_shown tl_shown[EST_TL_CELLS];
};

struct sched_link;

struct sched_link *sched_link_new(void);
void sched_link_free(struct sched_link *l);

/* Replays the store's calibration rows into the history. */
enum alallo_err sched_link_load_history(struct sched_link *l, struct store *s);

/* Forgets everything learnt or cached in this process (the history, the
 * models' factors, the snapshot, the latest pass's assignments) and
 * replays the store's calibration rows: for a standby that becomes the
 * leader, whose memory missed what the previous leader did. */
enum alallo_err sched_link_reload(struct sched_link *l, struct store *s);

/* How many times slower than the FLOPs model `model` trains, learnt from
 * its finished attempts (calibration rows of kind "model"); 1 when none. */
double sched_link_model_factor(struct sched_link *l, const char *model);

/* The key a job's shape is learnt under (docs/estimator.md, "The range"):
 * part ("speed" or "start"), model, precision, adapter, method, batch and
 * context length, e.g. "speed:alallo-base|16bit|lora|sft|b8|s512". */
void sched_link_shape_key(const struct store_job *j, const char *part, char *out, size_t cap);

/* Where the speed factor of a job's shape comes from. */
enum sched_link_basis {
    SCHED_SHAPE_NONE = 0, /* nothing learnt that it could borrow: 1     */
    SCHED_SHAPE_BORROWED, /* borrowed (docs/estimator.md, "A shape
                             nothing has finished of")                   */
    SCHED_SHAPE_OWN,      /* learnt from its own finished attempts       */
};

/* How many times slower than the FLOPs model j's shape trains: learnt from
 * finished attempts of that shape (calibration rows of kind "model" under
 * its "speed" key); else borrowed from its nearest learnt neighbour (the
 * same model and precision, est_shape_nearest); else its model's factor
 * (any shape of it); else the fleet's (the mean of the factors learnt per
 * worker, "worker:NAME"); else 1. *basis (may be NULL) says which. */
double sched_link_speed(struct sched_link *l, const struct store_job *j,
                        enum sched_link_basis *basis /* OUT */);
/* sched_link_speed without the basis. */
double sched_link_speed_factor(struct sched_link *l, const struct store_job *j);

/* How many times the nominal loading j's shape's fixed costs take (the
 * attempt's running time that is not steps: loading, the DPO reference
 * pass, the final save), learnt under its "start" key; else its nearest
 * learnt neighbour's; 1 when none. */
double sched_link_startup_factor(struct sched_link *l, const struct store_job *j);

/* Whether j's shape has a factor learnt under part ("speed", "start"). */
bool sched_link_shape_known(struct sched_link *l, const struct store_job *j, const char *part);

/* A worker's own speed (docs/estimator.md, "The worker's own speed"):
 * calibration rows of kind "factor" under "wres:NAME" hold its attempts'
 * offsets (est_worker_offset), and the workers the link reads are
 * corrected by est_worker_speed_logs over them. The key of worker `name`. */
#define SCHED_LINK_WORKER_SPEED_PREFIX "wres:"
/* Corrects the n workers w[] (as the link reads them, sched_link_workers)
 * by their own speeds against each other's (capacity_correct_speed). */
void sched_link_correct_speeds(struct sched_link *l, struct sched_worker *w, int n);
/* The offset of one finished attempt of method m on a worker of class c
 * (est_worker_offset against the link's history; borrowed: its prediction
 * was of a borrowed factor), `applied` the correction it was predicted
 * with. NAN when a time is not positive. */
double sched_link_worker_offset(struct sched_link *l, int method, int class_, bool borrowed,
                                double actual_s, double predicted_s, double applied);

/* Adds one calibration pair to the history (after it is stored). */
void sched_link_calibrate(struct sched_link *l, const struct store_calibration *k);

/* The tokens job j trains in all: the trainer runs exactly max_steps
 * steps of batch_size examples (cycling the data set, so an explicit
 * max_steps may mean more or less than n_epochs epochs), each example
 * about tokens/examples long. */
double sched_link_train_tokens(const struct store_job *j);

/* The tokens the frozen reference of a DPO job reads before training: the
 * data set once (j->tokens); 0 for any other method. */
double sched_link_reference_tokens(const struct store_job *j);

/* The nominal loading before an attempt of job j on model m
 * (est_loading_s): the model's files and, for a reinforcement job, its
 * score_model graders' models (job_hyper_grader_weights). */
double sched_link_loading_s(const struct catalog_model *m, const struct store_job *j);

/* The planner's view of training model m with the settings of job j
 * (a reinforcement job's grader models in grader_params). */
void sched_link_plan_job(const struct catalog_model *m, const struct store_job *j,
                         struct plan_job *out /* OUT */);

/* The capacity as the scheduler sees it at `now`: every worker the store
 * knows (lost ones included, as WORKER_LOST), with busy_until_s from the
 * time left of the job each one runs. Returns how many (<= cap). */
int sched_link_workers(struct control *ctl, double now, struct sched_worker *out /* OUT */,
                       int cap);

/* The capacity as the latest snapshot of estimates saw it (the same
 * workers as sched_link_workers, lost ones included), read afresh when
 * older than a second or invalidated: the one cached picture of the fleet
 * (fleet.h). Returns how many (<= cap). */
int sched_link_fleet(struct control *ctl, double now, struct sched_worker *out /* OUT */,
                     int cap);

/* Walks every open attempt alongside the workers: open[n] as
 * store_attempt_list_open(store, "", ...) gives them (by worker name), the
 * workers visited in name order (as store_worker_list gives them), *cursor
 * 0 at the start. Returns worker `name`'s attempt, or NULL when it runs
 * none. */
const struct store_attempt *sched_link_attempt_of(const struct store_attempt *open, int n,
                                                  int *cursor, const char *name);

/* The estimate of the draft job j (training model m) at `now`: the wait
 * comes from where j would stand in the fair order of the queue. With no
 * worker known at all, out->fit is PLAN_FITS and out->worker -1 (the job
 * waits). ERR_INVALID with a reason for a job the planner refuses. */
enum alallo_err sched_link_estimate(struct control *ctl, const struct catalog_model *m,
                                    const struct store_job *j, double now,
                                    struct estimate *out /* OUT */, char *why, size_t whycap);

/* Adds the queued job j, just stored, to the snapshot estimates read, so
 * that the next estimate counts it in the queue before the snapshot is
 * read again. */
void sched_link_note_queued(struct control *ctl, const struct store_job *j);

/* Forgets the assignments the latest pass made for workers that have not
 * claimed yet (cfg.pass_reuse_s): the fleet changed (a worker registered,
 * came back, was drained, taken back or lost). */
void sched_link_forget_pass(struct sched_link *l);

/* Makes the next estimate read the queue and the fleet afresh (a worker
 * registered, drained or was lost). Estimates otherwise use a snapshot at
 * most a second old. */
void sched_link_invalidate(struct sched_link *l);

/* The plan text of an estimate (for store_job.plan), and back. */
bool sched_plan_write(const struct estimate *e, enum sched_goal goal, double model_factor,
                      double startup_factor,
                      char *out, size_t cap);
bool sched_plan_read(const char *text, struct sched_plan *out /* OUT */);

/* The ledger-state text, and back. A job without one (created before the
 * ledger) reads as a fresh ledger from its stored estimate. */
bool sched_state_write(const struct sched_state *st, char *out, size_t cap);
bool sched_state_read(const char *text, struct sched_state *out /* OUT */);
void sched_state_of_job(const struct store_job *j, struct sched_state *out /* OUT */);

/* The waiting job j as the scheduler sees it (id: the caller's): its
 * training still to do as FLOPs, grown by its plan's between_share (what
 * runs between steps runs at the worker's speed), and its loading with its
 * python graders' seconds still to run beside it. False when it has no
 * plan. */
bool sched_link_waiting_job(struct sched_link *l, const struct store_waiting *j, int64_t id,
                            struct sched_job *out /* OUT */);

/* One scheduling pass over the waiting jobs and the workers. Writes
 * "Starting" / "Waiting for capacity" into queued jobs whose message
 * changed, and fails at once a waiting job no known capacity can run. With
 * `claimer` non-NULL, *job_out gets the job the pass assigned to that
 * worker ("" when none). ERR_UNAVAILABLE, with nothing done, in a process
 * that does not lead (leadership.h): a standby never runs a pass. */
enum alallo_err sched_link_pass(struct control *ctl, const char *claimer,
                                char job_out[IDS_MAX] /* OUT, may be NULL */);

/* Sets the margins of an attempt's time left (t, just begun) from the
 * history (tl_calibrate); they are kept with it in the ledger state. */
void sched_link_calibrate_time_left(struct sched_link *l, struct tl_state *t);

/* The margin (in half-widths of the range) the price ranges of estimates
 * made now get at their lower end (end 0: est_price_margin over the
 * history) or their upper end (end 1: est_price_high_margin). */
double sched_link_price_margin(struct sched_link *l, int end);

/* The `waited` of calibration rows of kind "price": where a succeeded
 * job's net price fell against its price range's lower end, and its price
 * before the cap against the upper end, in half-widths of that range
 * (est_price_spread). Rows of 0 and 1, measured in logs by alallo before
 * 2026-12-06, are not read: the margins are learnt again. */
#define SCHED_LINK_PRICE_LOW 2
#define SCHED_LINK_PRICE_HIGH 3

/* The seconds j's python graders take over `steps` of its steps, one
 * answer at a time and whatever the worker's speed (est_rft_python_s,
 * validation rewards left out); 0 for a job without one. Part of the
 * nominal training wherever it is counted from FLOPs, and left out of
 * what an attempt teaches of the speed (lifecycle). */
double sched_link_python_s(const struct store_job *j, long steps);

/* The training-time range of `steps` of job j's `max_steps` on a worker,
 * from the history (for time left and the budget at an attempt's start). */
void sched_link_train_range(struct sched_link *l, const struct store_job *j,
                            const struct sched_worker *w, long steps_left, double *low_s,
                            double *high_s);

/* The nominal seconds of what runs after job j's last step on worker w
 * (tl_set_tail): a reinforcement job's final validation, one of its
 * validation rounds (the validation's part of the plan's between_share
 * over the rounds the trainer runs); 0 for the other methods. */
double sched_link_tail_s(struct sched_link *l, const struct store_job *j,
                         const struct sched_worker *w);

/* The goal finish_by's factors of method m (est_finish_by_factors over
 * the history, kept up to date as it learns) into out, for
 * sched_job.finish_hi. */
void sched_link_finish_by_factors(struct sched_link *l, enum plan_method m,
                                  float out[2][WORKER_CLASS_COUNT][SCHED_FINISH_SHARES] /* OUT */);

/* Money in micros as the API's currency number. */
double sched_link_money(int64_t micros);

#endif
