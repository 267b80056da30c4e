/* lifecycle.c - the rules of docs/lifecycle.md as store_job_update()
 * callbacks: claims, the end of an attempt, cancels, stops, lost workers,
 * start timeouts and limits. The trainer's events are trainer_events.c;
 * what both share is lifecycle_internal.h. Callbacks only look at and
 * change the structs they are given; everything they need from outside is
 * gathered first into their context.
 */
#include "control/lifecycle.h"
#include "control/lifecycle_internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "control/catalog.h"
#include "control/checkpoint_models.h"
#include "core/child.h"
#include "control/fleet.h"
#include "control/job_move.h"
#include "control/sched_link.h"
#include "control/jobs.h"
#include "control/paths.h"
#include "core/job_hyper.h"
#include "core/sample_prompts.h"
#include "core/fs.h"
#include "sched/hyper.h"
#include "sched/outcome.h"
#include "sched/resched.h"
#include "core/ids.h"
#include "core/worker_state.h"
#include "core/stop_reason.h"
#include "core/trainer_protocol.h"
#include "core/text.h"

/* ---- stops ------------------------------------------------------------ */

enum tproto_stop lifecycle_stop_for(const struct store_job *j, const struct store_attempt *a)
{
    if (!lifecycle__attempt_owns(j, a))
        return TPROTO_STOP_CANCEL;
    switch (outcome_worker_stop(j->status, lifecycle__stop_of(j))) {
    case STOP_REASON_CANCEL:
        return TPROTO_STOP_CANCEL;
    case STOP_REASON_MOVE:
        return TPROTO_STOP_MOVE;
    default:
        return TPROTO_STOP_NONE;
    }
}

/* ---- claim ------------------------------------------------------------ */

struct claim_ctx {
    struct control *ctl;
    const struct store_worker *worker;
    const struct sched_worker *sworker; /* the same worker as the scheduler sees it */
    bool engine;                        /* a slot of an engine's pool (lifecycle_claim_engine) */
    struct job_draft *priced;           /* the estimate of a job that had none; NULL */
    struct store_attempt attempt;       /* OUT */
    long resume_step;                   /* OUT: the checkpoint it continues from; 0 none */
    int64_t now;
};

/* Starts the ledger's and time left's record of attempt a on worker sw:
 * it continues from the latest checkpoint the server recorded (the ledger's
 * latest_checkpoint), which is also the checkpoint the attempt's spec names
 * (resume_step): the server decides where an attempt resumes, never the
 * trainer's folder. */
static void begin_attempt(struct control *ctl, struct store_job *j, struct sched_state *st,
                          const struct store_attempt *a, const struct sched_worker *sw,
                          double now)
{
    struct ledger_job *lj = &st->ledger;
    uint64_t fence;
    if (ledger_current(lj, lj->fence))
        ledger_attempt_end(lj, lj->fence, now, lj->latest_checkpoint);
    long start = lj->latest_checkpoint;
    if (ledger_attempt_begin(lj, a->fence, a->price_per_hour, start, now, &fence) != ERR_OK) {
        st->has_tl = false;
        return;
    }
    struct sched_plan p;
    double startup = sched_plan_read(j->plan, &p) ? p.startup_s : EST_DEFAULT_STARTUP_S;
    double lo, hi;
    sched_link_train_range(ctl->sched, j, sw, j->max_steps - start, &lo, &hi);
    /* A job of seconds that takes twice its estimate has not "taken far
     * longer than planned": the budget's base is at least a minute. */
    ledger_raise_budget_base(lj, fmax(BUDGET_BASE_MIN_S, ledger_running_s(lj, now) + startup + hi));
    tl_begin(&st->tl, j->max_steps, start, now, startup, lo, hi);
    tl_set_tail(&st->tl, sched_link_tail_s(ctl->sched, j, sw));
    sched_link_calibrate_time_left(ctl->sched, &st->tl);
    st->has_tl = true;
    double fpt = p.flops_per_token > 0 ? p.flops_per_token : 0;
    st->model_factor = sched_link_speed_factor(ctl->sched, j);
    st->nominal_step_s =
        j->max_steps > 0
            ? capacity_train_seconds(sched_link_train_tokens(j) * fpt / j->max_steps, p.params,
                                     sw) *
                  st->model_factor
            : 0;
    st->worker_class = (int)sw->class_;
    st->speed_log = sw->speed_log;
}

static enum alallo_err claim_cb(struct store_job *j, struct store_attempt *unused,
                                struct store_writes *w, void *vctx)
{
    struct claim_ctx *c = vctx;
    (void)unused;
    if ((j->status != JOB_QUEUED && j->status != JOB_RESCHEDULING) || j->active_attempt[0] ||
        lifecycle__stop_of(j) != STOP_REASON_NONE)
        return ERR_CONFLICT; /* someone else took it, or it was cancelled */
    struct store_attempt *a = &c->attempt;
    memset(a, 0, sizeof *a);
    if (!ids_make(a->id, sizeof a->id, "att-"))
        return ERR_INTERNAL;
    text_copy(a->job, sizeof a->job, j->id);
    text_copy(a->worker, sizeof a->worker, c->worker->name);
    a->fence = ++j->fence;
    text_copy(a->status, sizeof a->status, attempt_status_name(ATTEMPT_STARTING));
    a->price_per_hour = c->worker->price_per_hour;
    a->started_ms = c->now;
    a->t_started = a->t_last = -1;
    text_copy(j->active_attempt, sizeof j->active_attempt, a->id);
    /* An engine's attempt is recorded before it is submitted (docs/slurm.md,
     * "Crash-safe bookkeeping"); until the engine runs it the job still
     * waits for capacity, in the help page's words. */
    if (c->engine)
        text_copy(a->engine_state, sizeof a->engine_state,
                  engine_state_name(ENGINE_STATE_SUBMITTING));
    enum alallo_err e = ERR_OK;
    if (j->status == JOB_QUEUED)
        e = job_move_to(j, JOB_QUEUED, c->engine ? MSG_WAITING_FOR_CAPACITY : MSG_STARTING);
    if (e)
        return e;
    /* Created while no capacity was known: priced now, before its ledger
     * starts, so that its price has a cap (docs/estimator.md). */
    bool priced_now = false;
    if (control_job_unpriced(j)) {
        if (!c->priced || !control_job_price_placed(j, c->priced))
            return ERR_CONFLICT; /* estimated by someone else meanwhile: look again */
        priced_now = true;
    }
    struct sched_state *st = lifecycle__state_load(j);
    if (!st)
        return ERR_NOMEM;
    begin_attempt(c->ctl, j, st, a, c->sworker, (double)c->now / 1000.0);
    /* Until `started` says otherwise, the attempt starts where it was told
     * to; `started` is checked against this (apply_one). */
    c->resume_step = st->ledger.latest_checkpoint;
    a->start_step = a->end_step = c->resume_step;
    e = lifecycle__state_save(j, st);
    free(st);
    if (!e)
        e = store_writes_attempt(w, a);
    if (!e && priced_now) {
        const struct estimate *est = &c->priced->est;
        char line[STORE_MESSAGE_MAX];
        text_printf(line, sizeof line,
                    "Estimated when first placed (no capacity was known when the job was "
                    "created): %s, $%.4f to $%.4f; the price will not pass $%.4f",
                    est->time_text, (double)est->price_low_micros / 1e6,
                    (double)est->price_high_micros / 1e6, (double)est->price_high_micros / 1e6);
        e = lifecycle__note(w, c->now, "info", "%s", line);
        if (!e)
            e = store_writes_log(w, a->id, line);
    }
    if (!e && c->engine)
        e = lifecycle__note(w, c->now, "info", "Submitting attempt %s to %s", a->id, c->worker->name);
    else if (!e)
        e = lifecycle__note(w, c->now, "info", "Starting on worker %s", c->worker->name);
    return e;
}

struct unstartable {
    int64_t now;
    const char *missing_file; /* NULL: the model is gone */
};

/* A waiting job that can never start: its model or its data is gone. */
static enum alallo_err fail_unstartable_cb(struct store_job *j, struct store_attempt *a,
                                           struct store_writes *w, void *vctx)
{
    (void)a;
    const struct unstartable *u = vctx;
    if (j->active_attempt[0] || !job_transition_allowed(j->status, JOB_FAILED))
        return ERR_CONFLICT;
    enum alallo_err e = job_move_to(j, JOB_FAILED,
                                    u->missing_file ? MSG_TRAINING_FAILED : MSG_NOT_AVAILABLE);
    if (e)
        return e;
    if (u->missing_file) {
        char line[STORE_MESSAGE_MAX];
        text_printf(line, sizeof line, "the data set %s was deleted", u->missing_file);
        job_training_failed_message(j->message, sizeof j->message, line);
    }
    j->finished_ms = u->now;
    return lifecycle__note(w, u->now, "error", "%s", j->message);
}

/* The data set of j that is gone, or NULL when both are there. */
static const char *missing_file(struct control *ctl, const struct store_job *j)
{
    struct store_file f;
    if (store_file_get(ctl->store, j->account, j->training_file, &f) == ERR_NOT_FOUND)
        return j->training_file;
    if (j->validation_file[0] &&
        store_file_get(ctl->store, j->account, j->validation_file, &f) == ERR_NOT_FOUND)
        return j->validation_file;
    return NULL;
}

/* The trainer's spec for attempt `attempt_id` of job j that continues from
 * the checkpoint at resume_step (0: from the start) (docs/trainer-protocol.md):
 * the attempt writes its own checkpoint folder, and reads the one it
 * resumes from (`resume_from`, the path the server recorded) without
 * changing it, so that an attempt cut off from the server can never write
 * what the next one resumes from. */
/* A reinforcement job's part of the trainer's settings: the grader, the
 * folders of the models it asks, and the sampling (docs/trainer-protocol.md). */
static void add_rft_spec(json_t *spec, const struct store_job *j, const struct job_hyper *h)
{
    json_t *o = json_loads(j->hyper, 0, NULL);
    json_object_set_new(spec, "method", json_string("reinforcement"));
    json_object_set(spec, "grader", json_object_get(o, "grader"));
    json_t *models = json_object_get(o, "grader_models");
    json_object_set_new(spec, "grader_models", models ? json_incref(models) : json_object());
    json_object_set_new(spec, "rft_group", json_integer(h->rft_group));
    json_object_set_new(spec, "rft_answer_tokens", json_integer(h->rft_answer_tokens));
    json_object_set_new(spec, "rft_eval_interval", json_integer(h->rft_eval_interval));
    json_object_set_new(spec, "rft_eval_samples", json_integer(h->rft_eval_samples));
    json_object_set_new(spec, "rft_kl", json_real(h->rft_kl));
    json_decref(o);
}

static json_t *make_spec(struct control *ctl, const struct store_job *j, const char *attempt_id,
                         const char *model_dir, long resume_step)
{
    struct store_file train, valid;
    if (store_file_get(ctl->store, j->account, j->training_file, &train))
        return NULL;
    bool has_valid = j->validation_file[0] &&
                     store_file_get(ctl->store, j->account, j->validation_file, &valid) == ERR_OK;
    char ckpt[1024], out[1024];
    struct store_checkpoint from = {0};
    if (resume_step > 0 && store_checkpoint_get(ctl->store, j->id, resume_step, &from) != ERR_OK)
        from.path[0] = '\0'; /* not recorded: the trainer starts afresh, as for a damaged one */
    if (!control_attempt_dir(ctl, j->id, attempt_id, "checkpoints", ckpt, sizeof ckpt) ||
        !control_job_dir(ctl, j->id, "out", out, sizeof out) || fs_mkdirs(ckpt, 0700) ||
        fs_mkdirs(out, 0700))
        return NULL;
    bool full = strcmp(j->adapter, "full") == 0;
    /* Learning rate: the multiplier times a base rate fit for the method. */
    double lr = j->lr_multiplier * (full ? 2e-5 : 2e-4);
    struct job_hyper h;
    job_hyper_parse(j->hyper, &h);
    int seq_len = h.max_seq_len;
    struct catalog_model m;
    char err[200];
    if (catalog_read_dir(model_dir, &m, err, sizeof err) == 0 && m.max_positions > 0 &&
        m.max_positions < seq_len)
        seq_len = m.max_positions;
    long every = j->max_steps / 10;
    if (every < 10)
        every = 10;
    json_t *targets = json_array();
    for (int i = 0; i < JOB_HYPER_TARGETS; i++)
        if (h.lora_targets & (1u << i))
            json_array_append_new(targets, json_string(job_hyper_target_name(i)));
    json_t *spec = json_pack(
        "{s:s,s:s,s:s,s:o,s:s,s:s,s:s,s:s,s:{s:i,s:f,s:f,s:o},s:i,s:i,s:f,"
        "s:I,s:I,s:i,s:I,s:f,s:i,s:I}",
        "model_dir", model_dir, "train_file", train.path, "train_file_name", train.filename,
        "validation_file", has_valid ? json_string(valid.path) : json_null(), "checkpoint_dir",
        ckpt, "out_dir", out, "precision", j->precision, "adapter", j->adapter, "lora", "r",
        h.lora_rank, "alpha", h.lora_alpha, "dropout", h.lora_dropout, "targets", targets, "n_epochs", j->n_epochs,
        "batch_size", j->batch_size, "learning_rate", lr, "seed", (json_int_t)j->seed,
        "max_steps", (json_int_t)j->max_steps, "seq_len", seq_len, "checkpoint_every_steps",
        (json_int_t)every, "checkpoint_every_s", 300.0, "checkpoint_each_epoch", 1,
        "resume_step", (json_int_t)resume_step);
    if (!spec)
        return NULL;
    /* The checkpoint the server recorded last, which this attempt resumes
     * from (its own folder is new: a stale attempt never writes here). */
    json_object_set_new(spec, "resume_from", from.path[0] ? json_string(from.path) : json_null());
    /* The rest of the job's hyper-parameters (core/job_hyper.h). */
    json_object_set_new(spec, "packing", json_integer(h.packing));
    json_object_set_new(spec, "train_on_inputs", json_integer(h.train_on_inputs));
    json_object_set_new(spec, "lr_schedule", json_string(job_hyper_schedule_name(h.lr_schedule)));
    json_object_set_new(spec, "warmup_steps",
                        json_integer(job_hyper_warmup_steps(&h, j->max_steps)));
    json_object_set_new(spec, "weight_decay", json_real(h.weight_decay));
    json_object_set_new(spec, "valid_every_steps", json_integer(CONTROL_VALID_EVERY_STEPS));
    if (h.validation_split > 0)
        json_object_set_new(spec, "validation_split", json_real(h.validation_split));
    if (h.early_stopping_patience > 0) {
        json_object_set_new(spec, "early_stopping_patience",
                            json_integer(h.early_stopping_patience));
        json_object_set_new(spec, "early_stopping_min_delta",
                            json_real(h.early_stopping_min_delta));
    }
    /* the job's own sample prompts (core/sample_prompts.h) */
    json_t *samples = sample_prompts_from_hyper(j->hyper);
    if (samples)
        json_object_set_new(spec, "sample_prompts", samples);
    if (strcmp(j->method, "dpo") == 0) {
        json_object_set_new(spec, "method", json_string("dpo"));
        json_object_set_new(spec, "dpo_beta", json_real(h.dpo_beta));
    }
    if (strcmp(j->method, "reinforcement") == 0) /* docs/rft.md */
        add_rft_spec(spec, j, &h);
    return spec;
}

/* lifecycle_claim and lifecycle_claim_engine: `engine` records the attempt
 * as an engine's, to be submitted. */
static enum alallo_err claim(struct control *ctl, const char *worker, bool engine,
                             struct store_attempt *attempt, json_t **spec)
{
    *spec = NULL;
    struct store_worker w;
    enum alallo_err e = store_worker_get(ctl->store, worker, &w);
    if (e)
        return e;
    enum worker_state state;
    if (!worker_state_parse(w.state, &state) || state != WORKER_ACTIVE)
        return ERR_OK; /* draining or lost: nothing new */
    struct store_attempt open[1];
    int n_open;
    e = store_attempt_list_open(ctl->store, worker, open, 1, &n_open);
    if (e || n_open > 0)
        return e; /* one attempt at a time */

    struct sched_worker sw = {0};
    struct sched_worker *all = calloc(SCHED_LINK_WORKERS, sizeof *all);
    if (!all)
        return ERR_NOMEM;
    int n_all = sched_link_workers(ctl, (double)clock_now_ms() / 1000.0, all, SCHED_LINK_WORKERS);
    for (int i = 0; i < n_all; i++)
        if (strcmp(all[i].name, worker) == 0)
            sw = all[i];
    free(all);
    for (int tries = 0; tries < 8; tries++) {
        char pick[IDS_MAX];
        e = sched_link_pass(ctl, worker, pick);
        if (e || !pick[0])
            return e;
        struct store_job j;
        e = store_job_get(ctl->store, NULL, pick, &j);
        if (e)
            continue;
        char model_dir[1024];
        struct unstartable u = {.now = clock_now_ms(), .missing_file = missing_file(ctl, &j)};
        if (u.missing_file || !control_job_model_dir(ctl, &j, model_dir, sizeof model_dir)) {
            store_job_update(ctl->store, j.id, NULL, fail_unstartable_cb, &u);
            continue;
        }
        /* A job created while no capacity was known is estimated now that
         * some is; while none with a known speed can run it, it waits. */
        struct job_draft *priced = NULL;
        if (control_job_unpriced(&j)) {
            char why[STORE_MESSAGE_MAX];
            priced = calloc(1, sizeof *priced);
            if (!priced)
                return ERR_NOMEM;
            if (control_job_estimate_placed(ctl, &j, priced, why, sizeof why) != ERR_OK) {
                log_line("warn", "job %s is not placed yet: %s", j.id, why);
                free(priced);
                return ERR_OK;
            }
        }
        struct claim_ctx c = {.ctl = ctl,
                              .worker = &w,
                              .sworker = &sw,
                              .engine = engine,
                              .priced = priced,
                              .now = clock_now_ms()};
        e = store_job_update(ctl->store, j.id, NULL, claim_cb, &c);
        free(priced);
        if (e == ERR_CONFLICT)
            continue;
        if (e)
            return e;
        *attempt = c.attempt;
        if (store_job_get(ctl->store, NULL, j.id, &j) == ERR_OK)
            *spec = make_spec(ctl, &j, c.attempt.id, model_dir, c.resume_step);
        if (!*spec) {
            /* The attempt cannot be prepared (a folder cannot be made): end
             * it as a failure on our side, rather than leave the job stuck,
             * and look for other work. */
            struct attempt_end end = {.exit_status = -1, .not_started = true};
            end.error_kind = TPROTO_ERROR_INTERNAL;
            text_copy(end.line, sizeof end.line, "could not prepare the attempt's files");
            lifecycle_finish(ctl, c.attempt.id, c.attempt.fence, &end);
            continue;
        }
        fleet_invalidate(ctl); /* the worker is busy now */
        return ERR_OK;
    }
    return ERR_OK;
}

enum alallo_err lifecycle_claim(struct control *ctl, const char *worker,
                                struct store_attempt *attempt, json_t **spec)
{
    return claim(ctl, worker, false, attempt, spec);
}

enum alallo_err lifecycle_claim_engine(struct control *ctl, const char *slot,
                                       struct store_attempt *attempt, bool *claimed)
{
    json_t *spec = NULL;
    enum alallo_err e = claim(ctl, slot, true, attempt, &spec);
    *claimed = !e && spec;
    json_decref(spec); /* the runner asks for it when it starts (lifecycle_attempt_spec) */
    return e;
}

enum alallo_err lifecycle_attempt_spec(struct control *ctl, const char *attempt_id,
                                       struct store_attempt *attempt, struct store_job *job,
                                       json_t **spec)
{
    *spec = NULL;
    enum alallo_err e = store_attempt_get(ctl->store, attempt_id, attempt);
    if (!e)
        e = store_job_get(ctl->store, NULL, attempt->job, job);
    if (e)
        return e;
    if (!lifecycle__attempt_owns(job, attempt) || lifecycle__stop_of(job) == STOP_REASON_CANCEL)
        return ERR_FENCED;
    char model_dir[1024];
    if (!control_job_model_dir(ctl, job, model_dir, sizeof model_dir))
        return ERR_NOT_FOUND;
    *spec = make_spec(ctl, job, attempt->id, model_dir, attempt->start_step);
    return *spec ? ERR_OK : ERR_IO;
}

/* ---- the end of an attempt -------------------------------------------- */

struct finish_ctx {
    struct events_ctx base;
    const struct attempt_end *end;
    bool internal; /* OUT: failed on alallo's side */
    bool already;  /* OUT: the attempt had ended with success: nothing to do */
};

static enum alallo_err finish_cb(struct store_job *j, struct store_attempt *a,
                                 struct store_writes *w, void *vctx)
{
    struct finish_ctx *c = vctx;
    int64_t now = c->base.now;
    lifecycle__events_ctx_rerun(&c->base);
    c->already = c->internal = false;
    /* A finish sent again (its answer was lost) is answered 200 with no
     * change, unless the attempt was ended by the server (lost worker):
     * then its job has moved on and the report is stale. */
    if (attempt_status_of(a->status) == ATTEMPT_ENDED && a->fence == c->base.fence &&
        strcmp(a->reason, "worker lost") != 0 && strcmp(a->reason, "worker restarted") != 0) {
        c->already = true;
        return ERR_OK;
    }
    if (a->fence != c->base.fence || !lifecycle__attempt_owns(j, a))
        return ERR_FENCED;
    c->base.st = lifecycle__state_load(j);
    if (!c->base.st)
        return ERR_NOMEM;
    struct events_ctx *b = &c->base;
    const struct attempt_end *end = c->end;
    /* What becomes of the job: src/sched/outcome.h, shared with the
     * simulation. */
    struct outcome_job oj = {.status = j->status,
                             .stop = lifecycle__stop_of(j),
                             .trained = attempt_status_of(a->status) == ATTEMPT_RUNNING ||
                                        j->steps_done > 0};
    struct outcome_end oe = {.exit_status = end->exit_status,
                             .signal = end->signal,
                             .not_started = end->not_started,
                             .acted_on = end->acted_on == TPROTO_STOP_MOVE     ? STOP_REASON_MOVE
                                         : end->acted_on == TPROTO_STOP_CANCEL ? STOP_REASON_CANCEL
                                                                               : STOP_REASON_NONE,
                             .user_error = end->error_kind == TPROTO_ERROR_USER};
    struct outcome o;
    outcome_of_end(&oj, &oe, &o);
    char reason[STORE_MESSAGE_MAX];
    enum alallo_err e = ERR_OK;

    if (o.kind == OUTCOME_CANCELLED) {
        lifecycle__end_attempt(j, a, now, o.attempt_reason);
        e = lifecycle__ledger_end(b, j, -1, w);
        if (!e)
            e = job_move_to(j, JOB_CANCELLED, MSG_NONE);
        j->finished_ms = now;
        if (!e)
            e = lifecycle__settle(b, j, a, &o.ledger, w);
        if (!e)
            b->partial_step = outcome_partial_step(&o, &b->st->ledger);
        if (!e)
            e = lifecycle__note(w, now, "info", "The job was cancelled");
    } else if (o.kind == OUTCOME_STOPPED) {
        lifecycle__end_attempt(j, a, now, o.attempt_reason);
        e = lifecycle__ledger_end(b, j, -1, w);
        if (!e)
            e = job_move_to(j, JOB_FAILED, o.message);
        j->finished_ms = now;
        if (!e)
            e = lifecycle__settle(b, j, a, &o.ledger, w);
        if (!e)
            e = lifecycle__note(w, now, "error", "%s at step %ld", j->message, j->steps_done);
        if (!e)
            e = lifecycle__training_log(w, a->id, "%s at step %ld", j->message, j->steps_done);
    } else if (o.kind == OUTCOME_TRAINING_FAILED) {
        lifecycle__end_attempt(j, a, now, o.attempt_reason);
        e = lifecycle__ledger_end(b, j, -1, w);
        if (!e)
            e = job_move_to(j, JOB_FAILED, MSG_TRAINING_FAILED);
        job_training_failed_message(j->message, sizeof j->message,
                                    end->line[0] ? end->line : "the trainer stopped on an error");
        j->finished_ms = now;
        if (!e)
            e = lifecycle__settle(b, j, a, &o.ledger, w);
        if (!e)
            e = lifecycle__note(w, now, "error", "%s", j->message);
    } else if (o.kind == OUTCOME_REQUEUED) {
        /* Stopped on request after a checkpoint: continue elsewhere. */
        lifecycle__end_attempt(j, a, now, o.attempt_reason);
        e = lifecycle__ledger_end(b, j, -1, w);
        if (!e)
            e = job_move_to(j, o.status, o.message);
        if (!e)
            e = lifecycle__settle(b, j, a, &o.ledger, w);
        if (!e)
            e = lifecycle__note(w, now, "info", "Moving the job; it continues from its latest checkpoint");
    } else {
        if (end->not_started)
            text_copy(reason, sizeof reason, "the trainer could not be started");
        else if (end->signal)
            text_printf(reason, sizeof reason, "trainer killed by signal %d", end->signal);
        else
            text_printf(reason, sizeof reason, "trainer exited with status %d", end->exit_status);
        lifecycle__end_attempt(j, a, now, reason);
        e = lifecycle__ledger_end(b, j, -1, w);
        if (!e)
            e = job_move_to(j, JOB_FAILED, MSG_FAILED_INTERNAL);
        j->finished_ms = now;
        j->internal_failure = 1;
        c->internal = o.internal;
        if (!e)
            e = lifecycle__settle(b, j, a, &o.ledger, w);
        if (!e)
            e = lifecycle__note(w, now, "error", "%s", j->message);
    }
    if (!e)
        e = lifecycle__state_save(j, b->st);
    lifecycle__set_stop(j, STOP_REASON_NONE);
    return e;
}

struct partial_ctx {
    char model[256];
};

static enum alallo_err partial_cb(struct store_job *j, struct store_attempt *unused,
                                  struct store_writes *w, void *vctx)
{
    const struct partial_ctx *c = vctx;
    (void)unused;
    if (j->status != JOB_CANCELLED || j->fine_tuned_model[0])
        return ERR_CONFLICT;
    text_copy(j->fine_tuned_model, sizeof j->fine_tuned_model, c->model);
    char msg[STORE_MESSAGE_MAX];
    text_printf(msg, sizeof msg, "The partial model %s is ready", c->model);
    return store_writes_event(w, clock_now_ms(), "info", "message", msg, NULL);
}

/* A job cancelled after it trained keeps the checkpoint at `step` (the
 * last step it was charged for, outcome_partial_step) as a usable partial
 * model: made into a model folder (the trainer's materializer, as a child
 * process) where a finished job's model goes, and named after the
 * checkpoint, so completions and exports accept it. Called after the
 * cancel has committed, by every path that cancels: an attempt's end, a
 * cancel while re-scheduling, a lost worker. */
static void keep_partial_model(struct control *ctl, const char *job_id, long step)
{
    if (step <= 0)
        return;
    struct store_job *j = malloc(sizeof *j);
    struct store_checkpoint ck;
    char base[1024], out[1024];
    if (!j || store_job_get(ctl->store, NULL, job_id, j) != ERR_OK ||
        j->status != JOB_CANCELLED || j->fine_tuned_model[0] ||
        !control_job_model_dir(ctl, j, base, sizeof base) ||
        !control_job_dir(ctl, job_id, "out/model", out, sizeof out)) {
        free(j);
        return;
    }
    if (store_checkpoint_get(ctl->store, job_id, step, &ck) != ERR_OK) {
        log_line("error", "job %s: no checkpoint at step %ld for its partial model", job_id,
                 step);
        free(j);
        return;
    }
    char *argv[] = {ctl->alallo_bin, "train", "--materialize", ck.path, "--base", base,
                    "--out", out, NULL};
    struct child_result r;
    if (child_run(argv, 600, 1 << 16, &r) == 0 && r.exit_status == 0) {
        struct partial_ctx c;
        char name[256];
        control_fine_tuned_model_name(j, name, sizeof name);
        text_printf(c.model, sizeof c.model, "%s:ckpt-step-%ld", name, ck.step);
        store_job_update(ctl->store, job_id, NULL, partial_cb, &c);
    } else {
        log_line("warn", "job %s: the partial model could not be made: %s", job_id, r.err);
    }
    child_result_free(&r);
    free(j);
}

#define REPAIR_SCAN_MAX 65536 /* cancelled jobs looked at by one repair */

void lifecycle_repair_partial_models(struct control *ctl)
{
    char(*ids)[IDS_MAX] = calloc(REPAIR_SCAN_MAX, sizeof *ids);
    struct store_job *j = malloc(sizeof *j);
    int n = 0;
    if (!ids || !j || store_job_ids_in_status(ctl->store, JOB_CANCELLED, ids, REPAIR_SCAN_MAX, &n)) {
        free(ids);
        free(j);
        return;
    }
    if (n == REPAIR_SCAN_MAX)
        log_line("warn", "partial models: only the oldest %d cancelled jobs were looked at", n);
    int made = 0;
    for (int i = 0; i < n; i++) {
        if (store_job_get(ctl->store, NULL, ids[i], j) != ERR_OK || j->fine_tuned_model[0] ||
            !(j->price_charged - j->price_refunded > 0))
            continue;
        /* Charged, and no model: the cancel committed and the server
         * stopped before it made the model. The step is the ledger's, as
         * when the cancel was decided (outcome_partial_step). */
        struct sched_state *st = lifecycle__state_load(j);
        if (!st)
            continue;
        struct outcome o = {.kind = OUTCOME_CANCELLED, .partial_model = true};
        long step = outcome_partial_step(&o, &st->ledger);
        free(st);
        keep_partial_model(ctl, j->id, step);
        made++;
    }
    if (made)
        log_line("info", "partial models: %d cancelled job(s) charged without one were repaired",
                 made);
    free(ids);
    free(j);
}

enum alallo_err lifecycle_finish(struct control *ctl, const char *attempt_id, int64_t fence,
                                 const struct attempt_end *end)
{
    struct store_attempt att;
    enum alallo_err e = store_attempt_get(ctl->store, attempt_id, &att);
    if (e)
        return e;
    struct store_attempt *history = calloc(ATTEMPTS_MAX, sizeof *history);
    if (!history)
        return ERR_NOMEM;
    struct finish_ctx c = {.base = {.ctl = ctl, .fence = fence, .now = clock_now_ms(),
                                    .history = history},
                           .end = end};
    c.base.n_history = lifecycle__load_history(ctl, att.job, history, ATTEMPTS_MAX);
    e = store_job_update(ctl->store, att.job, attempt_id, finish_cb, &c);
    free(c.base.st);
    lifecycle__feed_calibration(ctl, &c.base, e);
    free(history);
    if (!e && !c.already)
        keep_partial_model(ctl, att.job, c.base.partial_step);
    if (!e && c.internal) {
        struct store_job j;
        if (store_job_get(ctl->store, NULL, att.job, &j) == ERR_OK) {
            /* The attempt's reason says how the trainer ended (exit status
             * or signal); the operator needs it beside the last line. */
            struct store_attempt ended;
            const char *how = store_attempt_get(ctl->store, attempt_id, &ended) == ERR_OK &&
                                      ended.reason[0]
                                  ? ended.reason
                                  : "trainer ended";
            char detail[2 * STORE_MESSAGE_MAX + 64];
            text_printf(detail, sizeof detail, "attempt %s on worker %s: %s; last line: %s",
                        attempt_id, att.worker, how,
                        end->line[0] ? end->line : "no error line");
            lifecycle_report_internal(ctl, &j, detail);
        }
    }
    if (!e)
        fleet_invalidate(ctl); /* the worker is free now */
    return e;
}

/* ---- cancel, stop, lost workers --------------------------------------- */

static enum alallo_err cancel_cb(struct store_job *j, struct store_attempt *unused,
                                 struct store_writes *w, void *vctx)
{
    struct events_ctx *c = vctx;
    (void)unused;
    lifecycle__events_ctx_rerun(c);
    if (j->status == JOB_CANCELLING)
        return ERR_OK;
    if (job_status_is_terminal(j->status))
        return ERR_CONFLICT;
    struct outcome o;
    outcome_of_cancel(j->status, j->active_attempt[0] != '\0', &o);
    enum alallo_err e;
    if (o.kind == OUTCOME_CANCELLED) {
        /* Nothing runs it: cancelled at once (src/sched/outcome.h). Steps
         * it did in earlier attempts (re-scheduling) are billed like a
         * cancel while running. */
        e = job_move_to(j, JOB_CANCELLED, MSG_NONE);
        if (e)
            return e;
        j->finished_ms = c->now;
        c->st = lifecycle__state_load(j);
        if (!c->st)
            return ERR_NOMEM;
        e = lifecycle__settle(c, j, NULL, &o.ledger, w);
        if (!e)
            c->partial_step = outcome_partial_step(&o, &c->st->ledger);
        if (!e)
            e = lifecycle__state_save(j, c->st);
        return e ? e : lifecycle__note(w, c->now, "info", "The job was cancelled");
    }
    /* Priced now: what the job shows as "Cancelling now costs" at this
     * moment is what it is charged, whatever the trainer completes while
     * it stops (docs/ledger.md). A running attempt that has trained no
     * step is cancelled as queued, as the API's cancel_now says. */
    c->st = lifecycle__state_load(j);
    if (!c->st)
        return ERR_NOMEM;
    ledger_fix_cancel(&c->st->ledger, ledger_cancel_from(j->status, j->steps_done),
                      (double)c->now / 1000.0);
    e = lifecycle__state_save(j, c->st);
    if (!e)
        e = job_move_to(j, JOB_CANCELLING, MSG_NONE);
    if (e)
        return e;
    lifecycle__set_stop(j, o.stop);
    return lifecycle__note(w, c->now, "info", "Cancellation requested; stopping the training");
}

enum alallo_err lifecycle_cancel(struct control *ctl, const char *account, const char *id,
                                 struct store_job *out)
{
    enum alallo_err e = store_job_get(ctl->store, account, id, out);
    if (e)
        return e;
    struct store_attempt *history = calloc(ATTEMPTS_MAX, sizeof *history);
    if (!history)
        return ERR_NOMEM;
    struct events_ctx c = {.ctl = ctl, .now = clock_now_ms(), .history = history};
    c.n_history = lifecycle__load_history(ctl, id, history, ATTEMPTS_MAX);
    e = store_job_update(ctl->store, id, NULL, cancel_cb, &c);
    free(c.st);
    free(history);
    if (!e)
        keep_partial_model(ctl, id, c.partial_step);
    if (!e)
        e = store_job_get(ctl->store, account, id, out);
    return e;
}

static enum alallo_err stop_cb(struct store_job *j, struct store_attempt *unused,
                               struct store_writes *w, void *vctx)
{
    const enum stop_reason *reason = vctx;
    (void)unused;
    (void)w;
    /* src/sched/outcome.h, shared with the simulation. A move (drain, spot
     * take-back) shows at once: the trainer now writes its checkpoint, and
     * the job continues elsewhere from it. */
    enum stop_reason stop;
    enum job_status to;
    if (!outcome_stop_request(j->status, j->active_attempt[0] != '\0', lifecycle__stop_of(j), *reason,
                              &stop, &to))
        return ERR_CONFLICT;
    lifecycle__set_stop(j, stop);
    if (to != j->status)
        return job_move_to(j, to, MSG_RESCHEDULING);
    return ERR_OK;
}

enum alallo_err lifecycle_request_stop(struct control *ctl, const char *id,
                                       enum stop_reason reason)
{
    return store_job_update(ctl->store, id, NULL, stop_cb, &reason);
}

bool lifecycle_attempt_finishing(const struct store_attempt *a, int64_t fence)
{
    return a->fence == fence && attempt_status_of(a->status) == ATTEMPT_ENDED &&
           strcmp(a->reason, OUTCOME_REASON_SUCCEEDED) == 0;
}

struct gone_ctx {
    struct events_ctx base;
    const char *reason;
};

static enum alallo_err gone_cb(struct store_job *j, struct store_attempt *a,
                               struct store_writes *w, void *vctx)
{
    struct gone_ctx *c = vctx;
    int64_t now = c->base.now;
    lifecycle__events_ctx_rerun(&c->base);
    if (attempt_status_of(a->status) == ATTEMPT_ENDED)
        return ERR_OK;
    bool owned = lifecycle__attempt_owns(j, a);
    lifecycle__end_attempt(j, a, now, c->reason);
    if (!owned)
        return ERR_OK;
    c->base.st = lifecycle__state_load(j);
    if (!c->base.st)
        return ERR_NOMEM;
    lifecycle__set_stop(j, STOP_REASON_NONE);
    enum alallo_err e = lifecycle__ledger_end(&c->base, j, -1, w);
    if (e)
        return e;
    /* What becomes of the job: src/sched/outcome.h, shared with the
     * simulation. */
    struct outcome o;
    outcome_of_worker_gone(j->status, &o);
    if (o.kind == OUTCOME_CANCELLED) {
        e = job_move_to(j, JOB_CANCELLED, MSG_NONE);
        j->finished_ms = now;
        if (!e)
            e = lifecycle__settle(&c->base, j, a, &o.ledger, w);
        if (!e)
            c->base.partial_step = outcome_partial_step(&o, &c->base.st->ledger);
        if (!e)
            e = lifecycle__note(w, now, "info", "The job was cancelled");
    } else if (o.status == JOB_QUEUED) {
        e = job_move_to(j, JOB_QUEUED, o.message);
        if (!e)
            e = lifecycle__note(w, now, "warn", "The worker %s was lost before training started",
                                a->worker);
    } else {
        e = job_move_to(j, o.status, o.message);
        if (!e)
            e = lifecycle__settle(&c->base, j, a, &o.ledger, w);
        if (!e)
            e = lifecycle__note(w, now,
                                "warn",
                                "The worker %s was lost (%s); the job continues from its latest checkpoint",
                                a->worker, c->reason);
    }
    return e ? e : lifecycle__state_save(j, c->base.st);
}

enum alallo_err lifecycle_worker_gone(struct control *ctl, const char *worker,
                                      const char *reason)
{
    struct store_attempt open[16];
    int n;
    enum alallo_err e = store_attempt_list_open(ctl->store, worker, open, 16, &n);
    if (e)
        return e;
    struct store_attempt *history = calloc(ATTEMPTS_MAX, sizeof *history);
    if (!history)
        return ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        struct gone_ctx c = {.base = {.ctl = ctl, .now = clock_now_ms(), .history = history},
                             .reason = reason};
        c.base.n_history = lifecycle__load_history(ctl, open[i].job, history, ATTEMPTS_MAX);
        enum alallo_err e2 = store_job_update(ctl->store, open[i].job, open[i].id, gone_cb, &c);
        free(c.base.st);
        lifecycle__feed_calibration(ctl, &c.base, e2);
        if (!e2)
            keep_partial_model(ctl, open[i].job, c.base.partial_step);
        if (e2 && !e)
            e = e2;
    }
    free(history);
    return e;
}

struct start_ctx {
    struct events_ctx base;
    int earlier;   /* attempts of the job that never started before */
    bool internal; /* OUT: the job failed */
};

static enum alallo_err start_timeout_cb(struct store_job *j, struct store_attempt *a,
                                        struct store_writes *w, void *vctx)
{
    struct start_ctx *c = vctx;
    int64_t now = c->base.now;
    lifecycle__events_ctx_rerun(&c->base);
    c->internal = false;
    if (attempt_status_of(a->status) != ATTEMPT_STARTING || !lifecycle__attempt_owns(j, a))
        return ERR_CONFLICT;
    c->base.st = lifecycle__state_load(j);
    if (!c->base.st)
        return ERR_NOMEM;
    lifecycle__end_attempt(j, a, now, START_TIMEOUT_REASON);
    enum alallo_err e = lifecycle__ledger_end(&c->base, j, -1, w);
    if (e)
        return e;
    if (j->status == JOB_CANCELLING || lifecycle__stop_of(j) == STOP_REASON_CANCEL) {
        /* As any attempt that ends while its job is cancelling
         * (src/sched/outcome.h): steps earlier attempts kept are charged,
         * and their checkpoint is the partial model. */
        struct outcome_job oj = {.status = j->status, .stop = lifecycle__stop_of(j),
                                 .trained = j->steps_done > 0};
        struct outcome_end oe = {.exit_status = -1, .not_started = true};
        struct outcome o;
        outcome_of_end(&oj, &oe, &o);
        e = job_move_to(j, JOB_CANCELLED, MSG_NONE);
        j->finished_ms = now;
        if (!e)
            e = lifecycle__settle(&c->base, j, a, &o.ledger, w);
        if (!e)
            c->base.partial_step = outcome_partial_step(&o, &c->base.st->ledger);
    } else if (c->earlier + 1 >= c->base.ctl->cfg.start_tries) {
        e = job_move_to(j, JOB_FAILED, MSG_FAILED_INTERNAL);
        j->finished_ms = now;
        j->internal_failure = 1;
        c->internal = true;
        if (!e)
            e = lifecycle__settle_as(&c->base, j, a, JOB_FAILED, MSG_FAILED_INTERNAL, JOB_QUEUED, w);
        if (!e)
            e = lifecycle__note(w, now, "error", "%s", j->message);
    } else {
        if (j->status == JOB_QUEUED)
            e = job_move_to(j, JOB_QUEUED, MSG_WAITING_FOR_CAPACITY);
        else
            e = job_move_to(j, JOB_RESCHEDULING, MSG_RESCHEDULING);
        if (!e)
            e = lifecycle__note(w, now, "warn", "The trainer on worker %s did not start; trying again",
                                a->worker);
    }
    lifecycle__set_stop(j, STOP_REASON_NONE);
    return e ? e : lifecycle__state_save(j, c->base.st);
}

void lifecycle_check_starts(struct control *ctl, int64_t now_ms)
{
    /* Every open attempt, of every worker, in one read. */
    struct store_attempt *open = calloc(SCHED_LINK_WORKERS, sizeof *open);
    struct store_attempt *history = calloc(ATTEMPTS_MAX, sizeof *history);
    int n_open = 0;
    if (!open || !history ||
        store_attempt_list_open(ctl->store, "", open, SCHED_LINK_WORKERS, &n_open)) {
        free(open);
        free(history);
        return;
    }
    for (int k = 0; k < n_open; k++) {
        /* An engine's attempt counts from when the engine runs it: time in
         * the engine's queue is waiting for capacity, not a slow start. */
        int64_t since = engine_state_of(open[k].engine_state) != ENGINE_STATE_NONE
                            ? open[k].engine_running_ms
                            : open[k].started_ms;
        if (attempt_status_of(open[k].status) != ATTEMPT_STARTING || since <= 0 ||
            now_ms - since < (int64_t)ctl->cfg.start_timeout_s * 1000)
            continue;
        struct start_ctx c = {.base = {.ctl = ctl, .now = now_ms, .history = history}};
        c.base.n_history = lifecycle__load_history(ctl, open[k].job, history, ATTEMPTS_MAX);
        for (int h = 0; h < c.base.n_history; h++)
            if (strcmp(history[h].reason, START_TIMEOUT_REASON) == 0)
                c.earlier++;
        log_line("warn", "attempt %s of job %s on worker %s: no `started` after %d s", open[k].id,
                open[k].job, open[k].worker, ctl->cfg.start_timeout_s);
        enum alallo_err e =
            store_job_update(ctl->store, open[k].job, open[k].id, start_timeout_cb, &c);
        free(c.base.st);
        lifecycle__feed_calibration(ctl, &c.base, e);
        if (!e)
            keep_partial_model(ctl, open[k].job, c.base.partial_step);
        struct store_job j;
        if (!e && c.internal && store_job_get(ctl->store, NULL, open[k].job, &j) == ERR_OK)
            lifecycle_report_internal(ctl, &j, "the trainer never started, attempt after "
                                               "attempt");
    }
    free(open);
    free(history);
}

static enum alallo_err limits_cb(struct store_job *j, struct store_attempt *unused,
                                 struct store_writes *w, void *vctx)
{
    struct events_ctx *c = vctx;
    (void)unused;
    (void)w;
    lifecycle__events_ctx_rerun(c);
    char before[32];
    text_copy(before, sizeof before, j->stop_reason);
    c->st = lifecycle__state_load(j);
    lifecycle__check_limits(c->ctl, j, c->st, c->now);
    return strcmp(before, j->stop_reason) == 0 ? ERR_CONFLICT /* nothing to write */ : ERR_OK;
}

void lifecycle_check_limits(struct control *ctl, int64_t now_ms)
{
    char(*ids)[IDS_MAX] = calloc(1000, IDS_MAX);
    int n = 0;
    if (!ids || store_job_ids_in_status(ctl->store, JOB_RUNNING, ids, 1000, &n)) {
        free(ids);
        return;
    }
    for (int i = 0; i < n; i++) {
        struct events_ctx c = {.ctl = ctl, .now = now_ms};
        store_job_update(ctl->store, ids[i], NULL, limits_cb, &c);
        free(c.st);
    }
    free(ids);
}

/* ---- telling the operator --------------------------------------------- */

struct webhook_job {
    char url[512];
    char body[2048];
};

static void *post_webhook(void *arg)
{
    struct webhook_job *wj = arg;
    CURL *curl = curl_easy_init();
    if (curl) {
        struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
        curl_easy_setopt(curl, CURLOPT_URL, wj->url);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, wj->body);
        curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(curl, CURLOPT_TIMEOUT, 10L);
        curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
        CURLcode rc = curl_easy_perform(curl);
        if (rc != CURLE_OK)
            log_line("warn", "webhook %s: %s", wj->url, curl_easy_strerror(rc));
        curl_slist_free_all(h);
        curl_easy_cleanup(curl);
    }
    free(wj);
    return NULL;
}

void lifecycle_report_internal(struct control *ctl, const struct store_job *j,
                               const char *detail)
{
    atomic_fetch_add(&ctl->metrics.internal_failures, 1);
    log_line("error", "job %s failed on alallo's side: %s", j->id, detail);
    if (!ctl->cfg.webhook[0])
        return;
    struct webhook_job *wj = calloc(1, sizeof *wj);
    if (!wj)
        return;
    text_copy(wj->url, sizeof wj->url, ctl->cfg.webhook);
    json_t *body = json_pack("{s:s,s:s,s:s,s:s,s:s}", "type", "job.failed_internal", "job", j->id,
                             "account", j->account, "message", j->message, "detail", detail);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    bool fits = text && text_copy(wj->body, sizeof wj->body, text);
    free(text);
    pthread_t t;
    if (!fits || pthread_create(&t, NULL, post_webhook, wj) != 0) {
        free(wj);
        return;
    }
    pthread_detach(t);
}
