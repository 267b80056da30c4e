/* lifecycle.c - the rules of docs/lifecycle.md as store_job_update()
 * callbacks. Callbacks only look at and change the structs they are given;
 * everything they need from outside is gathered first into their context.
 */
#include "control/lifecycle.h"

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

#define EVENTS_PER_TX 64 /* trainer events applied per transaction */
#define ATTEMPTS_MAX 64  /* attempts of one job considered for billing */
#define CAL_MAX 4        /* calibration pairs one transaction can add */
#define START_TIMEOUT_REASON "the trainer did not start in time"
#define BUDGET_BASE_MIN_S 60.0 /* the budget is a multiple of at least this */

static enum alallo_err note(struct store_writes *w, int64_t now, const char *level,
                            const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Queues an event of type "message". */
static enum alallo_err note(struct store_writes *w, int64_t now, const char *level,
                            const char *fmt, ...)
{
    char msg[STORE_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return store_writes_event(w, now, level, "message", msg, NULL);
}

/* ---- stops ------------------------------------------------------------ */

/* The stop asked of j's attempt; text the store holds that this server does
 * not know reads as none. */
static enum stop_reason stop_of(const struct store_job *j)
{
    enum stop_reason r;
    return stop_reason_parse(j->stop_reason, &r) ? r : STOP_REASON_NONE;
}

static void set_stop(struct store_job *j, enum stop_reason r)
{
    text_copy(j->stop_reason, sizeof j->stop_reason, stop_reason_name(r));
}

static bool attempt_owns(const struct store_job *j, const struct store_attempt *a)
{
    return a && a->fence == j->fence && attempt_status_of(a->status) != ATTEMPT_ENDED &&
           strcmp(j->active_attempt, a->id) == 0;
}

enum tproto_stop lifecycle_stop_for(const struct store_job *j, const struct store_attempt *a)
{
    if (!attempt_owns(j, a))
        return TPROTO_STOP_CANCEL;
    switch (outcome_worker_stop(j->status, stop_of(j))) {
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

/* The job's scheduler state; NULL when out of memory. Freed by the caller. */
static struct sched_state *state_load(const struct store_job *j)
{
    struct sched_state *st = malloc(sizeof *st);
    if (st)
        sched_state_of_job(j, st);
    return st;
}

static enum alallo_err state_save(struct store_job *j, const struct sched_state *st)
{
    return sched_state_write(st, j->ledger_state, sizeof j->ledger_state) ? ERR_OK
                                                                           : ERR_TOO_LARGE;
}

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
    st->has_tl = true;
    double fpt = p.flops_per_token > 0 ? p.flops_per_token : 0;
    st->model_factor = sched_link_model_factor(ctl->sched, j->model);
    st->nominal_step_s =
        j->max_steps > 0
            ? capacity_train_seconds(sched_link_train_tokens(j) * fpt / j->max_steps, sw) *
                  st->model_factor
            : 0;
    st->worker_class = (int)sw->class_;
}

static enum alallo_err claim_cb(struct store_job *j, struct store_attempt *unused,
                                struct store_writes *w, void *vctx)
{
    struct claim_ctx *c = vctx;
    (void)unused;
    if ((j->status != JOB_QUEUED && j->status != JOB_RESCHEDULING) || j->active_attempt[0] ||
        stop_of(j) != STOP_REASON_NONE)
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
    struct sched_state *st = state_load(j);
    if (!st)
        return ERR_NOMEM;
    begin_attempt(c->ctl, j, st, a, c->sworker, (double)c->now / 1000.0);
    /* Until `started` says otherwise, the attempt starts where it was told
     * to; `started` is checked against this (apply_one). */
    c->resume_step = st->ledger.latest_checkpoint;
    a->start_step = a->end_step = c->resume_step;
    e = state_save(j, st);
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
        e = note(w, c->now, "info", "%s", line);
        if (!e)
            e = store_writes_log(w, a->id, line);
    }
    if (!e && c->engine)
        e = note(w, c->now, "info", "Submitting attempt %s to %s", a->id, c->worker->name);
    else if (!e)
        e = note(w, c->now, "info", "Starting on worker %s", c->worker->name);
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
    return note(w, u->now, "error", "%s", j->message);
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
    if (!attempt_owns(job, attempt) || stop_of(job) == STOP_REASON_CANCEL)
        return ERR_FENCED;
    char model_dir[1024];
    if (!control_job_model_dir(ctl, job, model_dir, sizeof model_dir))
        return ERR_NOT_FOUND;
    *spec = make_spec(ctl, job, attempt->id, model_dir, attempt->start_step);
    return *spec ? ERR_OK : ERR_IO;
}

/* ---- trainer events --------------------------------------------------- */

/* The longest prompt and answer text of a sample event kept (bytes, cut
 * at a character's start): both fit in an event's data. */
#define SAMPLE_TEXT_MAX 150

struct tev {
    enum tproto_event kind; /* TPROTO_EVENT_COUNT: unknown to this server, or malformed */
    long step;
    double loss, lr, tokens_per_s;
    double packing_eff;                  /* step: -1 when absent */
    bool dpo;                            /* step: reward_margin/accuracy present */
    double reward_margin, reward_accuracy;
    int64_t peak_rss;
    int64_t gpu_peak;  /* memory: device bytes on a GPU, 0 when absent */
    int64_t tokens;
    long resumed_from; /* -1 when fresh */
    double t;          /* the trainer's clock; -1 when absent */
    char text[STORE_LOG_LINE_MAX]; /* log/error line, or checkpoint path */
    /* step: the metrics measured at it; checkpoint: its `metrics` object.
     * NAN when absent (enum tproto_metric) */
    double metric[TPROTO_METRIC_COUNT];
    bool early_stopped; /* done: early stopping ended it at `step` */
    long best_step;     /* done, early: the checkpoint that is the model */
    bool warn;          /* log: "level": "warn", also a warning event */
    /* sample: a prompt and the model's answer, cut to fit an event's data */
    bool base;
    char prompt[SAMPLE_TEXT_MAX], answer[SAMPLE_TEXT_MAX];
};

/* Reads the metrics named in o (docs/api.md, "Metrics"); NAN for each
 * absent or not a finite number. */
static void parse_metrics(json_t *o, double *metric)
{
    for (int i = 0; i < TPROTO_METRIC_COUNT; i++) {
        json_t *v = o ? json_object_get(o, tproto_metric_name((enum tproto_metric)i)) : NULL;
        metric[i] = json_is_number(v) && isfinite(json_number_value(v)) ? json_number_value(v)
                                                                         : NAN;
    }
}

/* Appends ,"name":value for each metric present to out (text_printf's
 * truncation rule: false when it did not fit). */
static bool append_metrics(const double *metric, char *out, size_t cap)
{
    for (int i = 0; i < TPROTO_METRIC_COUNT; i++) {
        if (isnan(metric[i]))
            continue;
        size_t len = strlen(out);
        if (!text_printf(out + len, cap - len, ",\"%s\":%.6g",
                         tproto_metric_name((enum tproto_metric)i), metric[i]))
            return false;
    }
    return true;
}

/* Copies src (NULL: "") into dst, cut at a UTF-8 character's start so that
 * the copy stays valid text. */
static void utf8_cut(char *dst, size_t cap, const char *src)
{
    size_t n = src ? strlen(src) : 0;
    if (n >= cap) {
        n = cap - 1;
        while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(dst, src ? src : "", n);
    dst[n] = '\0';
}

/* Reads one trainer event; returns false for an unknown or malformed one
 * (ignored: a newer trainer may send more). */
static bool parse_event(json_t *o, struct tev *t)
{
    enum tproto_event k;
    if (!tproto_event_parse(json_string_value(json_object_get(o, "event")), &k))
        return false;
    memset(t, 0, sizeof *t);
    t->kind = (enum tproto_event)k;
    json_t *step = json_object_get(o, "step");
    t->step = json_is_integer(step) ? (long)json_integer_value(step) : -1;
    t->loss = json_number_value(json_object_get(o, "loss"));
    if (t->kind == TPROTO_EVENT_CHECKPOINT || t->kind == TPROTO_EVENT_DONE)
        t->loss = json_number_value(json_object_get(o, "train_loss"));
    if (!isfinite(t->loss))
        t->loss = 0;
    t->lr = json_number_value(json_object_get(o, "lr"));
    t->tokens_per_s = json_number_value(json_object_get(o, "tokens_per_s"));
    json_t *pe = json_object_get(o, "packing_efficiency");
    t->packing_eff = json_is_number(pe) && json_number_value(pe) >= 0 &&
                             json_number_value(pe) <= 1
                         ? json_number_value(pe)
                         : -1;
    json_t *rm = json_object_get(o, "reward_margin"), *ra = json_object_get(o, "reward_accuracy");
    t->dpo = json_is_number(rm) && json_is_number(ra) && isfinite(json_number_value(rm)) &&
             isfinite(json_number_value(ra));
    t->reward_margin = t->dpo ? json_number_value(rm) : 0;
    t->reward_accuracy = t->dpo ? json_number_value(ra) : 0;
    t->peak_rss = (int64_t)json_number_value(json_object_get(o, "peak_rss_bytes"));
    t->gpu_peak = (int64_t)json_number_value(json_object_get(o, "gpu_peak_bytes"));
    if (t->gpu_peak < 0)
        t->gpu_peak = 0;
    t->tokens = (int64_t)json_number_value(json_object_get(o, "tokens"));
    json_t *rf = json_object_get(o, "resumed_from");
    t->resumed_from = json_is_integer(rf) ? (long)json_integer_value(rf) : -1;
    json_t *tt = json_object_get(o, "t");
    t->t = json_is_number(tt) && json_number_value(tt) >= 0 ? json_number_value(tt) : -1;
    parse_metrics(t->kind == TPROTO_EVENT_CHECKPOINT ? json_object_get(o, "metrics") : o,
                  t->metric);
    t->early_stopped = json_is_true(json_object_get(o, "early_stopped"));
    const char *level = json_string_value(json_object_get(o, "level"));
    t->warn = level && strcmp(level, "warn") == 0;
    t->base = json_is_true(json_object_get(o, "base"));
    utf8_cut(t->prompt, sizeof t->prompt, json_string_value(json_object_get(o, "prompt")));
    utf8_cut(t->answer, sizeof t->answer, json_string_value(json_object_get(o, "answer")));
    if (t->kind == TPROTO_EVENT_SAMPLE && (t->step < 0 || !json_object_get(o, "answer")))
        return false;
    json_t *best = json_object_get(o, "best_step");
    t->best_step = json_is_integer(best) ? (long)json_integer_value(best) : -1;
    if (t->kind == TPROTO_EVENT_DONE && t->early_stopped && (t->step < 1 || t->best_step < 1))
        return false;
    const char *text = json_string_value(
        json_object_get(o, t->kind == TPROTO_EVENT_CHECKPOINT ? "path" : "line"));
    text_copy(t->text, sizeof t->text, text);
    if ((t->kind == TPROTO_EVENT_LOG || t->kind == TPROTO_EVENT_ERROR) && !text)
        return false;
    if ((t->kind == TPROTO_EVENT_STEP || t->kind == TPROTO_EVENT_CHECKPOINT || t->kind == TPROTO_EVENT_STARTED) &&
        t->step < 0)
        return false;
    return true;
}

/* The data of a step's metrics event: the step, the loss, the rate and the
 * speed, then what the trainer sent besides (packing, DPO rewards). */
static void step_metrics(const struct store_job *j, const struct tev *t, char *data, size_t cap)
{
    char pack[64] = "", dpo[96] = "", metrics[256] = "";
    if (t->packing_eff >= 0)
        text_printf(pack, sizeof pack, ",\"packing_efficiency\":%.4f", t->packing_eff);
    if (t->dpo)
        text_printf(dpo, sizeof dpo, ",\"reward_margin\":%.6g,\"reward_accuracy\":%.4f",
                    t->reward_margin, t->reward_accuracy);
    /* train_loss is the step's loss; the others as the trainer measured */
    double rest[TPROTO_METRIC_COUNT];
    memcpy(rest, t->metric, sizeof rest);
    rest[TPROTO_METRIC_TRAIN_LOSS] = NAN;
    append_metrics(rest, metrics, sizeof metrics);
    text_printf(data, cap,
                "{\"step\":%ld,\"train_loss\":%.6g,\"learning_rate\":%.6g,"
                "\"tokens_per_s\":%.6g%s%s%s}",
                j->steps_done, t->loss, t->lr, t->tokens_per_s, pack, dpo, metrics);
}

/* A step's event message, as OpenAI words it ("Step 10/100: training
 * loss=1.23, validation loss=1.41"), with the full validation loss at an
 * epoch's end. */
static void step_message(const struct store_job *j, const struct tev *t, char *msg, size_t cap)
{
    char valid[48] = "", full[48] = "";
    if (!isnan(t->metric[TPROTO_METRIC_VALID_LOSS]))
        text_printf(valid, sizeof valid, ", validation loss=%.4f",
                    t->metric[TPROTO_METRIC_VALID_LOSS]);
    if (!isnan(t->metric[TPROTO_METRIC_FULL_VALID_LOSS]))
        text_printf(full, sizeof full, ", full validation loss=%.4f",
                    t->metric[TPROTO_METRIC_FULL_VALID_LOSS]);
    text_printf(msg, cap, "Step %ld/%ld: training loss=%.4f%s%s", j->steps_done, j->max_steps,
                t->loss, valid, full);
}

/* Whether the job is being stopped for the time limit or the budget. */
static bool limit_stop(const struct store_job *j)
{
    enum stop_reason s = stop_of(j);
    return s == STOP_REASON_TIME_LIMIT || s == STOP_REASON_BUDGET;
}

/* Whether `text` is the trainer's log line for a stop on request
 * ("stopped at step N on request"). */
static bool trainer_stop_line(const char *text)
{
    long step;
    int end = 0;
    return text && sscanf(text, "stopped at step %ld on request%n", &step, &end) == 1 &&
           end > 0 && text[end] == '\0';
}

/* Appends a formatted line to attempt `attempt`'s training log. */
static enum alallo_err training_log(struct store_writes *w, const char *attempt,
                                          const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static enum alallo_err training_log(struct store_writes *w, const char *attempt,
                                          const char *fmt, ...)
{
    char line[STORE_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    return store_writes_log(w, attempt, line);
}

struct events_ctx {
    struct control *ctl;
    const struct tev *ev;
    int n;
    int64_t first; /* index of ev[0] within the attempt; -1 unknown */
    int64_t fence;
    int64_t now;
    const struct store_attempt *history; /* earlier attempts, for billing */
    int n_history;
    const struct sched_worker *workers; /* the capacity, for memory reports */
    int n_workers;
    struct sched_state *st; /* the job's, loaded in the callback */
    struct store_calibration cal[CAL_MAX]; /* OUT: calibration pairs written */
    int n_cal;
    bool broken;           /* OUT: the trainer broke the protocol; the attempt was ended */
    enum tproto_stop stop; /* OUT */
    long partial_step;     /* OUT: a cancel's partial model is due at this
                              checkpoint step (outcome_partial_step); 0 none */
};

/* Clears what an earlier run of a callback left in c. store_job_update()
 * may run a callback more than once (on PostgreSQL, again after a
 * serialization failure or a deadlock: docs/store.md), and only the run
 * that commits may leave its outputs, so every callback that uses an
 * events_ctx starts with this. */
static void events_ctx_rerun(struct events_ctx *c)
{
    free(c->st);
    c->st = NULL;
    c->n_cal = 0;
    c->broken = false;
    c->stop = TPROTO_STOP_NONE;
    c->partial_step = 0;
}

static long clamp_step(const struct store_job *j, long step)
{
    if (step < 0)
        return 0;
    return step > j->max_steps ? j->max_steps : step;
}

/* The store's id of the job's attempt whose fence is `fence`. */
static const char *attempt_of_fence(const struct events_ctx *c, const struct store_attempt *cur,
                                    int64_t fence)
{
    if (cur && cur->fence == fence)
        return cur->id;
    for (int i = 0; i < c->n_history; i++)
        if (c->history[i].fence == fence)
            return c->history[i].id;
    return "";
}

/* Settles the job's ledger for `outcome` (src/sched/ledger.h) and writes
 * the rows it returns; the job's price follows the ledger. */
static enum alallo_err settle(struct events_ctx *c, struct store_job *j,
                              const struct store_attempt *current,
                              const struct ledger_outcome *outcome, struct store_writes *w)
{
    struct sched_state *st = c->st;
    if (!st || st->ledger.closed)
        return ERR_OK;
    struct ledger_row rows[LEDGER_MAX_ROWS];
    size_t n = 0;
    enum alallo_err e =
        ledger_settle(&st->ledger, outcome, (double)c->now / 1000.0, rows, LEDGER_MAX_ROWS, &n);
    if (e) {
        log_line("error", "job %s: the ledger refused to settle (%s)", j->id, err_message(e));
        return ERR_OK;
    }
    for (size_t i = 0; !e && i < n; i++) {
        struct store_ledger_row r = {.created_ms = c->now};
        text_copy(r.account, sizeof r.account, j->account);
        text_copy(r.job, sizeof r.job, j->id);
        text_copy(r.attempt, sizeof r.attempt, attempt_of_fence(c, current, rows[i].attempt_id));
        text_copy(r.kind, sizeof r.kind, ledger_kind_name(rows[i].kind));
        text_copy(r.reason, sizeof r.reason, ledger_reason_text(rows[i].reason));
        r.amount = sched_link_money(rows[i].amount_micros);
        r.from_step = rows[i].from_step;
        r.to_step = rows[i].to_step;
        r.steps = rows[i].to_step - rows[i].from_step;
        e = store_writes_ledger(w, &r);
    }
    j->price_charged = sched_link_money(st->ledger.charged_micros);
    j->price_refunded = sched_link_money(st->ledger.refunded_micros);
    return e;
}

static enum alallo_err settle_as(struct events_ctx *c, struct store_job *j,
                                 const struct store_attempt *current, enum job_status status,
                                 enum job_message m, enum job_status from, struct store_writes *w)
{
    struct ledger_outcome o = {.status = status, .message = m, .cancelled_from = from};
    return settle(c, j, current, &o, w);
}

/* Queues a calibration pair, written with the job and fed to the history
 * once committed. */
static enum alallo_err calibrate(struct events_ctx *c, struct store_writes *w,
                                 const struct store_calibration *k)
{
    if (!(k->actual_a > 0) || !(k->nominal_a > 0) || c->n_cal >= CAL_MAX)
        return ERR_OK;
    c->cal[c->n_cal++] = *k;
    return store_writes_calibration(w, k);
}

/* Ends the ledger's record of the running attempt: it keeps `kept` steps
 * (-1: up to the latest checkpoint). Its training time joins the
 * calibration history. */
static enum alallo_err ledger_end(struct events_ctx *c, struct store_job *j, long kept,
                                  struct store_writes *w)
{
    struct sched_state *st = c->st;
    if (!st)
        return ERR_OK;
    struct ledger_job *lj = &st->ledger;
    struct ledger_attempt *la = ledger_current(lj, lj->fence);
    if (!la)
        return ERR_OK;
    if (kept < 0)
        kept = lj->latest_checkpoint;
    ledger_attempt_end(lj, lj->fence, (double)c->now / 1000.0, kept);
    struct sched_plan p;
    enum alallo_err e = ERR_OK;
    if (sched_plan_read(j->plan, &p)) {
        /* The attempt against the plain FLOPs model teaches the model's own
         * speed; the estimator's history gets what is left after it. */
        double raw = (double)(la->done_step - la->start_step) * st->nominal_step_s /
                     (st->model_factor > 0 ? st->model_factor : 1.0);
        double f = sched_link_model_factor_with(c->ctl->sched, j->model, la->train_s, raw);
        struct store_calibration k = {.method = (int)p.method,
                                      .class_ = st->worker_class,
                                      .goal = (int)p.goal,
                                      .actual_a = la->train_s,
                                      .nominal_a = raw,
                                      .created_ms = c->now};
        text_copy(k.kind, sizeof k.kind, "model");
        text_copy(k.model, sizeof k.model, j->model);
        e = calibrate(c, w, &k);
        text_copy(k.kind, sizeof k.kind, "train");
        k.model[0] = '\0';
        k.nominal_a = raw * f;
        if (!e)
            e = calibrate(c, w, &k);
    }
    st->has_tl = false;
    return e;
}

/* A succeeded job's pair of start and training against its plan. */
static enum alallo_err calibrate_job(struct events_ctx *c, const struct store_job *j,
                                     struct store_writes *w)
{
    struct sched_plan p;
    if (!sched_plan_read(j->plan, &p) || !j->started_ms)
        return ERR_OK;
    struct store_calibration k = {.method = (int)p.method,
                                  .class_ = (int)p.class_,
                                  .waited = p.waits ? 1 : 0,
                                  .goal = (int)p.goal,
                                  .actual_a = (double)(j->started_ms - j->created_ms) / 1000.0,
                                  .nominal_a = p.start_s,
                                  .actual_b = (double)(j->finished_ms - j->started_ms) / 1000.0,
                                  /* against the model's factor as it is
                                   * now, not as it was at creation */
                                  .nominal_b = p.train_s *
                                               sched_link_model_factor(c->ctl->sched, j->model) /
                                               p.model_factor,
                                  .created_ms = c->now};
    text_copy(k.kind, sizeof k.kind, "job");
    if (!(k.actual_b > 0) || !(k.nominal_b > 0))
        return ERR_OK;
    return calibrate(c, w, &k);
}

/* Closes attempt a at c->now; adds its running time to the job. An
 * attempt whose worker went silent keeps the time up to its last report:
 * the silence before it was noticed is neither billed nor counted. */
static void end_attempt(struct store_job *j, struct store_attempt *a, int64_t now,
                        const char *reason)
{
    if (attempt_status_of(a->status) == ATTEMPT_ENDED)
        return;
    bool silent = strcmp(reason, "worker lost") == 0 || strcmp(reason, "worker restarted") == 0;
    if (j->run_started_ms && strcmp(j->active_attempt, a->id) == 0) {
        if (!silent)
            a->run_ms = now - j->run_started_ms;
        j->running_ms += a->run_ms;
        j->run_started_ms = 0;
    }
    a->end_step = j->steps_done;
    a->ended_ms = now;
    text_copy(a->status, sizeof a->status, attempt_status_name(ATTEMPT_ENDED));
    text_copy(a->reason, sizeof a->reason, reason);
    if (strcmp(j->active_attempt, a->id) == 0)
        j->active_attempt[0] = '\0';
}

/* A report of `t->step` steps: the ledger's training time comes from the
 * trainer's own clock (its events' `t`), so that batching and delivery
 * delays neither bill nor hide time; time left sees it on the server's
 * clock, shifted to when `started` arrived. */
static void progress(struct events_ctx *c, struct store_job *j, struct store_attempt *a,
                     const struct tev *t)
{
    double train_s;
    if (t->t >= 0 && a->t_started >= 0 && t->t >= a->t_started) {
        a->t_last = t->t;
        train_s = t->t - a->t_started;
    } else {
        train_s = j->run_started_ms ? (double)(c->now - j->run_started_ms) / 1000.0 : 0;
    }
    a->run_ms = (int64_t)llround(train_s * 1000.0);
    if (!c->st)
        return;
    long step = clamp_step(j, t->step);
    struct ledger_attempt *la = ledger_current(&c->st->ledger, c->st->ledger.fence);
    if (la && step >= la->done_step && train_s >= la->train_s)
        ledger_attempt_progress(&c->st->ledger, c->st->ledger.fence, step, train_s);
    if (c->st->has_tl && j->run_started_ms)
        tl_observe(&c->st->tl, step, (double)j->run_started_ms / 1000.0 + train_s);
}

/* The trainer measured its peak memory: move the job when it is above
 * what the worker offers (docs/scheduler.md, resched.h). */
static enum alallo_err on_memory(struct events_ctx *c, struct store_job *j,
                                 struct store_attempt *a, int64_t peak, struct store_writes *w)
{
    const struct sched_worker *cur = NULL;
    for (int i = 0; i < c->n_workers; i++)
        if (strcmp(c->workers[i].name, a->worker) == 0)
            cur = &c->workers[i];
    if (!cur || peak <= 0 || stop_of(j) != STOP_REASON_NONE || j->status == JOB_CANCELLING)
        return ERR_OK;
    /* The job's plan, so that a job that fits nowhere at 16-bit but would
     * at 4-bit is told so (planner_fit_for_need, as at creation). */
    struct catalog_model *m = malloc(sizeof *m);
    struct plan_job pj;
    bool planned = m && control_model_find(c->ctl, j->account, j->model, m);
    if (planned)
        sched_link_plan_job(m, j, &pj);
    free(m);
    struct resched_decision d;
    resched_on_memory(peak, j->memory_bytes, cur, c->workers, (size_t)c->n_workers,
                      planned ? &pj : NULL, &d);
    j->memory_bytes = d.mem_bytes;
    if (d.action == RESCHED_MOVE) {
        set_stop(j, STOP_REASON_MOVE);
        /* Only a job that trains shows the move at once; a job still
         * waiting for `started` keeps its status until the attempt ends. */
        if (j->status == JOB_RUNNING || j->status == JOB_RESCHEDULING) {
            enum alallo_err e = job_move_to(j, JOB_RESCHEDULING, MSG_RESCHEDULING);
            if (e)
                return e;
        }
        return note(w, c->now, "warn",
                    "The job needs %.0f MB, more than worker %s offers; moving it",
                    (double)d.mem_bytes / 1e6, a->worker);
    }
    if (d.action == RESCHED_FAIL) {
        set_stop(j, d.message == MSG_NOT_AVAILABLE_LOWER_PRECISION
                        ? STOP_REASON_NOT_AVAILABLE_LOWER
                        : STOP_REASON_NOT_AVAILABLE);
        return note(w, c->now, "error", "The job needs %.0f MB; no known worker offers it",
                    (double)d.mem_bytes / 1e6);
    }
    return ERR_OK;
}

/* The trainer said something the server cannot bill from (it resumed
 * from another checkpoint than the spec named): the attempt ends as a
 * failure on alallo's side, the job fails and costs nothing, and the
 * worker is told to stop the trainer. */
static enum alallo_err end_broken(struct events_ctx *c, struct store_job *j,
                                  struct store_attempt *a, const char *why,
                                  struct store_writes *w)
{
    log_line("error", "job %s attempt %s: %s", j->id, a->id, why);
    char reason[STORE_MESSAGE_MAX];
    text_printf(reason, sizeof reason, "trainer broke the protocol: %s", why);
    end_attempt(j, a, c->now, reason);
    enum alallo_err e = ledger_end(c, j, -1, w);
    /* A job being cancelled ends cancelled (with the steps earlier attempts
     * checkpointed); any other fails and costs nothing. */
    bool cancelling = j->status == JOB_CANCELLING;
    struct ledger_outcome o = {.status = cancelling ? JOB_CANCELLED : JOB_FAILED,
                               .message = cancelling ? MSG_NONE : MSG_FAILED_INTERNAL,
                               .cancelled_from = JOB_RUNNING};
    if (!e)
        e = job_move_to(j, o.status, o.message);
    if (e)
        return e;
    j->finished_ms = c->now;
    j->internal_failure = !cancelling;
    set_stop(j, STOP_REASON_NONE);
    c->broken = true;
    e = settle(c, j, a, &o, w);
    if (!e)
        e = note(w, c->now, cancelling ? "info" : "error", "%s",
                 cancelling ? "The job was cancelled" : j->message);
    return e;
}

/* `started`: the trainer must continue from the checkpoint the spec named
 * (a->start_step since the claim), or, when that one was missing or
 * damaged, from an older one; never from a newer one the server never
 * heard of (its steps would be billed without having been run). */
static enum alallo_err on_started(struct events_ctx *c, struct store_job *j,
                                  struct store_attempt *a, const struct tev *t,
                                  struct store_writes *w)
{
    if (attempt_status_of(a->status) != ATTEMPT_STARTING)
        return ERR_OK; /* said twice: the first one counts */
    long asked = a->start_step;
    long from = t->resumed_from < 0 ? 0 : t->resumed_from;
    if (t->step != from || from > asked) {
        char why[200];
        text_printf(why, sizeof why,
                    "it continued from step %ld (checkpoint %ld), not from the checkpoint at "
                    "step %ld it was given",
                    t->step, t->resumed_from, asked);
        return end_broken(c, j, a, why, w);
    }
    enum alallo_err e = ERR_OK;
    if (from < asked) {
        /* Billing follows: the steps after `from` are run again and billed
         * once, to this attempt; earlier attempts are refunded for them. */
        if (c->st && ledger_attempt_rebase(&c->st->ledger, c->st->ledger.fence, from) != ERR_OK)
            return end_broken(c, j, a, "it continued from an older checkpoint too late", w);
        e = note(w, c->now, "warn",
                 "The checkpoint at step %ld could not be read; continuing from step %ld", asked,
                 from);
        if (e)
            return e;
    }
    if (j->status == JOB_QUEUED || j->status == JOB_RESCHEDULING) {
        e = job_move_to(j, JOB_RUNNING, MSG_NONE);
        if (e)
            return e;
    }
    if (!j->started_ms)
        j->started_ms = c->now;
    j->run_started_ms = c->now;
    a->t_started = a->t_last = t->t;
    if (c->st && c->st->has_tl)
        tl_observe(&c->st->tl, from, (double)c->now / 1000.0);
    long reached = j->steps_done; /* before the move: steps after `from` were lost */
    j->steps_done = from;
    j->run_start_step = j->steps_done;
    a->start_step = a->end_step = j->steps_done;
    text_copy(a->status, sizeof a->status, attempt_status_name(ATTEMPT_RUNNING));
    if (from < reached) {
        /* Progress shows where training really is, and the job says why it
         * went back (docs/lifecycle.md). */
        char line[STORE_MESSAGE_MAX];
        text_printf(line, sizeof line,
                    "Resumed from step %ld on worker %s; steps %ld-%ld are repeated at no charge",
                    from, a->worker, from, reached);
        e = store_writes_event(w, c->now, "info", "message", line, NULL);
        return e ? e : store_writes_log(w, a->id, line);
    }
    if (from > 0)
        return note(w, c->now, "info", "Resumed from the checkpoint at step %ld on worker %s",
                    from, a->worker);
    return note(w, c->now, "info", "Fine-tuning job started");
}

/* The sentence a job that trained and learned nothing gets in its events
 * and training log (docs/lifecycle.md). */
#define NOTHING_LEARNED "The loss did not go down: try more epochs or a higher learning rate"

/* A succeeded job whose training loss did not go down meaningfully
 * (hyper_loss_went_down, src/sched/hyper.h) still succeeds, and says so in
 * its events and its training log. */
static enum alallo_err note_if_nothing_learned(struct store_writes *w, int64_t now,
                                               const struct store_job *j,
                                               const struct store_attempt *a)
{
    if (!hyper_loss_known(j->first_loss, j->train_loss) ||
        hyper_loss_went_down(j->first_loss, j->train_loss))
        return ERR_OK;
    char line[STORE_MESSAGE_MAX];
    text_printf(line, sizeof line, "%s (training loss %.4f at the first step, %.4f at the end).",
                NOTHING_LEARNED, j->first_loss, j->train_loss);
    enum alallo_err e = store_writes_event(w, now, "warn", "message", line, NULL);
    return e ? e : store_writes_log(w, a->id, line);
}

/* What stopping early saved against the plan: the steps not run, the
 * time they would have taken at this attempt's pace, and their price at
 * the price charged per step run. In the events and the training log. */
static enum alallo_err note_early_stop(struct events_ctx *c, struct store_writes *w,
                                       const struct store_job *j, const struct store_attempt *a,
                                       const struct tev *t)
{
    long ran = j->steps_done, saved = j->max_steps - ran;
    long here = ran - a->start_step;
    double step_s = here > 0 ? (double)a->run_ms / 1000.0 / (double)here : 0;
    double net = j->price_charged - j->price_refunded;
    double step_price = ran > 0 ? net / (double)ran : 0;
    char line[STORE_MESSAGE_MAX];
    text_printf(line, sizeof line,
                "Stopped early at step %ld of %ld: the full validation loss stopped improving; "
                "the fine-tuned model is the checkpoint at step %ld. Stopping early saved %ld "
                "steps (%.0f%%), about %.0f s of training and $%.4f against the plan.",
                ran, j->max_steps, t->best_step, saved,
                j->max_steps > 0 ? 100.0 * (double)saved / (double)j->max_steps : 0.0,
                step_s * (double)saved, step_price * (double)saved);
    char data[STORE_JSON_SMALL];
    text_printf(data, sizeof data,
                "{\"early_stopped\":true,\"steps_run\":%ld,\"planned_steps\":%ld,"
                "\"best_step\":%ld,\"saved_steps\":%ld,\"saved_s\":%.1f,\"saved_price\":%.4f}",
                ran, j->max_steps, t->best_step, saved, step_s * (double)saved,
                step_price * (double)saved);
    enum alallo_err e = store_writes_event(w, c->now, "info", "message", line, data);
    return e ? e : store_writes_log(w, a->id, line);
}

static enum alallo_err apply_one(struct events_ctx *c, struct store_job *j,
                                 struct store_attempt *a, const struct tev *t,
                                 struct store_writes *w)
{
    enum alallo_err e = ERR_OK;
    char msg[STORE_MESSAGE_MAX], data[STORE_JSON_SMALL];
    switch (t->kind) {
    case TPROTO_EVENT_STARTED:
        e = on_started(c, j, a, t, w);
        break;
    case TPROTO_EVENT_LOG:
        /* The trainer's own line for a stop the server asked for says "on
         * request"; a stop for a limit gets the help page's words in the
         * log instead, written when the attempt ends (finish_cb, OUTCOME_STOPPED). */
        if (limit_stop(j) && trainer_stop_line(t->text))
            break;
        e = store_writes_log(w, a->id, t->text);
        /* a trainer's warning (a DPO collapse, docs/trainer-protocol.md)
         * is also one of the job's events, as the server's own are */
        if (!e && t->warn)
            e = store_writes_event(w, c->now, "warn", "message", t->text, NULL);
        break;
    case TPROTO_EVENT_STEP:
        /* Progress before `started` has no known starting point to be
         * billed from, and a report below the steps already done takes
         * nothing back. */
        if (attempt_status_of(a->status) != ATTEMPT_RUNNING || t->step < a->end_step)
            break;
        j->steps_done = clamp_step(j, t->step);
        a->end_step = j->steps_done;
        progress(c, j, a, t);
        j->train_loss = t->loss;
        if (!(j->first_loss > 0) && t->loss > 0 && isfinite(t->loss))
            j->first_loss = t->loss; /* the job's first reported loss */
        step_message(j, t, msg, sizeof msg);
        step_metrics(j, t, data, sizeof data);
        e = store_writes_event(w, c->now, "info", "metrics", msg, data);
        break;
    case TPROTO_EVENT_MEMORY:
        if (t->gpu_peak > 0) {
            text_printf(data, sizeof data,
                        "{\"peak_rss_bytes\":%" PRId64 ",\"gpu_peak_bytes\":%" PRId64 "}",
                        t->peak_rss, t->gpu_peak);
            text_printf(msg, sizeof msg, "Peak memory %.1f MB, GPU memory %.1f MB",
                        (double)t->peak_rss / 1e6, (double)t->gpu_peak / 1e6);
        } else {
            text_printf(data, sizeof data, "{\"peak_rss_bytes\":%" PRId64 "}", t->peak_rss);
            text_printf(msg, sizeof msg, "Peak memory %.1f MB", (double)t->peak_rss / 1e6);
        }
        e = store_writes_event(w, c->now, "info", "metrics", msg, data);
        if (!e)
            e = on_memory(c, j, a, t->peak_rss, w);
        break;
    case TPROTO_EVENT_CHECKPOINT: {
        struct store_checkpoint k = {.step = clamp_step(j, t->step), .train_loss = t->loss,
                                     .created_ms = c->now};
        double rest[TPROTO_METRIC_COUNT];
        memcpy(rest, t->metric, sizeof rest);
        rest[TPROTO_METRIC_TRAIN_LOSS] = NAN; /* train_loss has its own column */
        char extra[STORE_JSON_SMALL] = "";
        if (append_metrics(rest, extra, sizeof extra) && extra[0])
            text_printf(k.metrics, sizeof k.metrics, "{%s}", extra + 1);
        /* Only a checkpoint newer than the one the job continues from is
         * recorded, and only after `started`: the store's checkpoints and
         * the ledger's latest_checkpoint (what the next attempt resumes
         * from, what is charged) stay the same list. A report at or below
         * it is ignored. */
        long recorded = c->st ? c->st->ledger.latest_checkpoint : j->run_start_step;
        if (attempt_status_of(a->status) != ATTEMPT_RUNNING || k.step <= recorded ||
            k.step < a->start_step)
            break;
        text_copy(k.job, sizeof k.job, j->id);
        /* The path as the server sees it: the attempt's own folder (where
         * its spec told it to write) and the step folder's name. A runner
         * on a node that mounts the data elsewhere (--cluster-data) reports
         * its own path; only the name is taken from it. */
        const char *name = strrchr(t->text, '/');
        name = name ? name + 1 : t->text;
        char dir[STORE_PATH_MAX];
        if (!name[0] || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
            !control_attempt_dir(c->ctl, j->id, a->id, "checkpoints", dir, sizeof dir) ||
            !text_printf(k.path, sizeof k.path, "%s/%s", dir, name))
            break; /* names no folder: not recorded */
        if (k.step > j->steps_done)
            j->steps_done = k.step;
        a->end_step = j->steps_done;
        struct tev at = *t;
        at.step = k.step;
        progress(c, j, a, &at);
        if (c->st &&
            ledger_attempt_checkpoint(&c->st->ledger, c->st->ledger.fence, k.step) != ERR_OK)
            break;
        e = store_writes_checkpoint(w, &k);
        if (!e)
            e = note(w, c->now, "info", "Checkpoint saved at step %ld", k.step);
        break;
    }
    case TPROTO_EVENT_DONE: {
        struct outcome o;
        outcome_of_done(j->status, &o);
        if (o.kind == OUTCOME_NONE)
            break;
        /* The model is done: from running, from a move or a cancel asked
         * for too late, and from a trainer that never said `started`
         * (counted as started now). */
        if (j->status == JOB_QUEUED)
            e = job_move_to(j, JOB_RUNNING, MSG_NONE);
        if (!e)
            e = job_move_to(j, JOB_SUCCEEDED, MSG_NONE);
        if (e)
            break;
        /* Early stopping ran fewer steps than planned, and is charged for
         * those alone (docs/api.md, "Early stopping"). */
        long ran = t->early_stopped ? clamp_step(j, t->step) : j->max_steps;
        j->steps_done = ran;
        if (t->loss > 0)
            j->train_loss = t->loss;
        a->end_step = j->steps_done;
        struct tev last = *t;
        last.step = ran;
        progress(c, j, a, &last);
        j->finished_ms = c->now;
        j->trained_tokens = (int64_t)llround(sched_link_train_tokens(j) * (double)ran /
                                             (double)(j->max_steps > 0 ? j->max_steps : 1));
        control_fine_tuned_model_name(j, j->fine_tuned_model, sizeof j->fine_tuned_model);
        set_stop(j, STOP_REASON_NONE);
        end_attempt(j, a, c->now, o.attempt_reason);
        e = ledger_end(c, j, ran, w);
        if (!e)
            e = settle(c, j, a, &o.ledger, w);
        if (!e)
            e = calibrate_job(c, j, w);
        if (!e && t->early_stopped)
            e = note_early_stop(c, w, j, a, t);
        if (!e)
            e = note(w, c->now, "info", "The job has successfully completed");
        if (!e)
            e = note_if_nothing_learned(w, c->now, j, a);
        break;
    }
    case TPROTO_EVENT_ERROR:
        /* The outcome is decided when the attempt finishes; the line goes
         * to the log so the user sees it where the help page says. */
        e = store_writes_log(w, a->id, t->text);
        break;
    case TPROTO_EVENT_SAMPLE: {
        /* A sample answer: an event of type "message" (the types OpenAI's
         * SDKs know) whose data says which prompt, which step, and whether
         * it is the base model's (docs/api.md, "Sample answers"). */
        json_t *d = json_pack("{sb sI sb ss ss}", "sample", 1, "step", (json_int_t)t->step,
                              "base", t->base, "prompt", t->prompt, "answer", t->answer);
        char *text = d ? json_dumps(d, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        json_decref(d);
        if (text && strlen(text) < sizeof data) {
            text_printf(msg, sizeof msg, "%s answer at step %ld: %s",
                        t->base ? "The base model's" : "The model's", t->step, t->answer);
            e = store_writes_event(w, c->now, "info", "message", msg, text);
        }
        free(text);
        break;
    }
    case TPROTO_EVENT_COUNT:
        break;
    }
    return e;
}

static void check_limits(const struct control *ctl, struct store_job *j,
                         const struct sched_state *st, int64_t now)
{
    if (j->status != JOB_RUNNING || !j->active_attempt[0] || stop_of(j) != STOP_REASON_NONE || !st)
        return;
    /* The ledger reads a limit of 0 as none; here 0 means at once. */
    struct ledger_limits l = {.time_limit_s = ctl->cfg.time_limit_s > 0
                                                  ? (double)ctl->cfg.time_limit_s
                                                  : 1e-9,
                              .budget_multiple = ctl->cfg.budget_multiple};
    enum stop_reason s = outcome_limit_stop(&st->ledger, &l, (double)now / 1000.0);
    if (s != STOP_REASON_NONE)
        set_stop(j, s);
}

static enum alallo_err events_cb(struct store_job *j, struct store_attempt *a,
                                 struct store_writes *w, void *vctx)
{
    struct events_ctx *c = vctx;
    events_ctx_rerun(c);
    if (a->fence != c->fence || !attempt_owns(j, a))
        return ERR_FENCED;
    c->st = state_load(j);
    if (!c->st)
        return ERR_NOMEM;
    /* A batch sent again (its answer was lost) is skipped up to what was
     * applied; a gap (events the worker dropped) is accepted as is. */
    int skip = 0;
    if (c->first >= 0 && c->first < a->events_applied)
        skip = (int)(a->events_applied - c->first < c->n ? a->events_applied - c->first : c->n);
    for (int i = skip; i < c->n; i++) {
        if (!attempt_owns(j, a))
            break; /* `done` ended it; anything after changes nothing */
        enum alallo_err e = apply_one(c, j, a, &c->ev[i], w);
        if (e)
            return e;
    }
    if (c->first >= 0 && c->first + c->n > a->events_applied)
        a->events_applied = c->first + c->n;
    else if (c->first < 0)
        a->events_applied += c->n - skip;
    check_limits(c->ctl, j, c->st, c->now);
    c->stop = attempt_owns(j, a) ? lifecycle_stop_for(j, a)
              : c->broken        ? TPROTO_STOP_CANCEL
                                 : TPROTO_STOP_NONE;
    return state_save(j, c->st);
}

/* Gives the calibration pairs a committed transaction wrote to the
 * estimator's history. */
static void feed_calibration(struct control *ctl, const struct events_ctx *c,
                             enum alallo_err committed)
{
    if (committed)
        return;
    for (int i = 0; i < c->n_cal; i++)
        sched_link_calibrate(ctl->sched, &c->cal[i]);
}

/* Earlier attempts of a job, for billing. Returns how many (0 on error). */
static int load_history(struct control *ctl, const char *job, struct store_attempt *out,
                        int cap)
{
    int n = 0;
    if (store_attempt_list(ctl->store, job, out, cap, &n))
        return 0;
    return n;
}

enum alallo_err lifecycle_events(struct control *ctl, const char *attempt_id, int64_t fence,
                                 int64_t first, json_t *events, enum tproto_stop *stop)
{
    *stop = TPROTO_STOP_NONE;
    if (!json_is_array(events))
        return ERR_INVALID;
    struct store_attempt att;
    enum alallo_err e = store_attempt_get(ctl->store, attempt_id, &att);
    if (e)
        return e;
    struct store_attempt *history = calloc(ATTEMPTS_MAX, sizeof *history);
    struct tev *ev = calloc(EVENTS_PER_TX, sizeof *ev);
    if (!history || !ev) {
        free(history);
        free(ev);
        return ERR_NOMEM;
    }
    int n_history = load_history(ctl, att.job, history, ATTEMPTS_MAX);
    size_t total = json_array_size(events), i = 0;
    struct sched_worker *workers = NULL; /* read when a memory report needs them */
    int n_workers = 0;
    for (size_t k = 0; k < total; k++) {
        const char *name = json_string_value(json_object_get(json_array_get(events, k), "event"));
        enum tproto_event kind;
        if (tproto_event_parse(name, &kind) && kind == TPROTO_EVENT_MEMORY) {
            workers = calloc(SCHED_LINK_WORKERS, sizeof *workers);
            if (workers)
                n_workers = sched_link_workers(ctl, (double)clock_now_ms() / 1000.0, workers,
                                               SCHED_LINK_WORKERS);
            break;
        }
    }
    struct events_ctx c = {.ctl = ctl, .ev = ev, .fence = fence, .history = history,
                           .n_history = n_history, .workers = workers, .n_workers = n_workers};
    do {
        /* Every event sent takes a slot, understood or not, so that
         * skipping a resent batch lines up with the worker's numbering. */
        size_t start = i;
        c.n = 0;
        for (; i < total && c.n < EVENTS_PER_TX; i++, c.n++)
            if (!parse_event(json_array_get(events, i), &ev[c.n]))
                ev[c.n].kind = TPROTO_EVENT_COUNT;
        c.first = first >= 0 ? first + (int64_t)start : -1;
        c.now = clock_now_ms();
        c.n_cal = 0;
        e = store_job_update(ctl->store, att.job, attempt_id, events_cb, &c);
        free(c.st);
        c.st = NULL;
        feed_calibration(ctl, &c, e);
    } while (!e && i < total);
    *stop = c.stop;
    free(history);
    free(ev);
    free(workers);
    return e;
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
    events_ctx_rerun(&c->base);
    c->already = c->internal = false;
    /* A finish sent again (its answer was lost) is answered 200 with no
     * change, unless the attempt was ended by the server (lost worker):
     * then its job has moved on and the report is stale. */
    if (attempt_status_of(a->status) == ATTEMPT_ENDED && a->fence == c->base.fence &&
        strcmp(a->reason, "worker lost") != 0 && strcmp(a->reason, "worker restarted") != 0) {
        c->already = true;
        return ERR_OK;
    }
    if (a->fence != c->base.fence || !attempt_owns(j, a))
        return ERR_FENCED;
    c->base.st = state_load(j);
    if (!c->base.st)
        return ERR_NOMEM;
    struct events_ctx *b = &c->base;
    const struct attempt_end *end = c->end;
    /* What becomes of the job: src/sched/outcome.h, shared with the
     * simulation. */
    struct outcome_job oj = {.status = j->status,
                             .stop = stop_of(j),
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
        end_attempt(j, a, now, o.attempt_reason);
        e = ledger_end(b, j, -1, w);
        if (!e)
            e = job_move_to(j, JOB_CANCELLED, MSG_NONE);
        j->finished_ms = now;
        if (!e)
            e = settle(b, j, a, &o.ledger, w);
        if (!e)
            b->partial_step = outcome_partial_step(&o, &b->st->ledger);
        if (!e)
            e = note(w, now, "info", "The job was cancelled");
    } else if (o.kind == OUTCOME_STOPPED) {
        end_attempt(j, a, now, o.attempt_reason);
        e = ledger_end(b, j, -1, w);
        if (!e)
            e = job_move_to(j, JOB_FAILED, o.message);
        j->finished_ms = now;
        if (!e)
            e = settle(b, j, a, &o.ledger, w);
        if (!e)
            e = note(w, now, "error", "%s at step %ld", j->message, j->steps_done);
        if (!e)
            e = training_log(w, a->id, "%s at step %ld", j->message, j->steps_done);
    } else if (o.kind == OUTCOME_TRAINING_FAILED) {
        end_attempt(j, a, now, o.attempt_reason);
        e = ledger_end(b, j, -1, w);
        if (!e)
            e = job_move_to(j, JOB_FAILED, MSG_TRAINING_FAILED);
        job_training_failed_message(j->message, sizeof j->message,
                                    end->line[0] ? end->line : "the trainer stopped on an error");
        j->finished_ms = now;
        if (!e)
            e = settle(b, j, a, &o.ledger, w);
        if (!e)
            e = note(w, now, "error", "%s", j->message);
    } else if (o.kind == OUTCOME_REQUEUED) {
        /* Stopped on request after a checkpoint: continue elsewhere. */
        end_attempt(j, a, now, o.attempt_reason);
        e = ledger_end(b, j, -1, w);
        if (!e)
            e = job_move_to(j, o.status, o.message);
        if (!e)
            e = settle(b, j, a, &o.ledger, w);
        if (!e)
            e = note(w, now, "info", "Moving the job; it continues from its latest checkpoint");
    } else {
        if (end->not_started)
            text_copy(reason, sizeof reason, "the trainer could not be started");
        else if (end->signal)
            text_printf(reason, sizeof reason, "trainer killed by signal %d", end->signal);
        else
            text_printf(reason, sizeof reason, "trainer exited with status %d", end->exit_status);
        end_attempt(j, a, now, reason);
        e = ledger_end(b, j, -1, w);
        if (!e)
            e = job_move_to(j, JOB_FAILED, MSG_FAILED_INTERNAL);
        j->finished_ms = now;
        j->internal_failure = 1;
        c->internal = o.internal;
        if (!e)
            e = settle(b, j, a, &o.ledger, w);
        if (!e)
            e = note(w, now, "error", "%s", j->message);
    }
    if (!e)
        e = state_save(j, b->st);
    set_stop(j, STOP_REASON_NONE);
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
        struct sched_state *st = state_load(j);
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
    c.base.n_history = load_history(ctl, att.job, history, ATTEMPTS_MAX);
    e = store_job_update(ctl->store, att.job, attempt_id, finish_cb, &c);
    free(c.base.st);
    feed_calibration(ctl, &c.base, e);
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
    events_ctx_rerun(c);
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
        c->st = state_load(j);
        if (!c->st)
            return ERR_NOMEM;
        e = settle(c, j, NULL, &o.ledger, w);
        if (!e)
            c->partial_step = outcome_partial_step(&o, &c->st->ledger);
        if (!e)
            e = state_save(j, c->st);
        return e ? e : note(w, c->now, "info", "The job was cancelled");
    }
    /* Priced now: what the job shows as "Cancelling now costs" at this
     * moment is what it is charged, whatever the trainer completes while
     * it stops (docs/ledger.md). A running attempt that has trained no
     * step is cancelled as queued, as the API's cancel_now says. */
    c->st = state_load(j);
    if (!c->st)
        return ERR_NOMEM;
    ledger_fix_cancel(&c->st->ledger, ledger_cancel_from(j->status, j->steps_done),
                      (double)c->now / 1000.0);
    e = state_save(j, c->st);
    if (!e)
        e = job_move_to(j, JOB_CANCELLING, MSG_NONE);
    if (e)
        return e;
    set_stop(j, o.stop);
    return note(w, c->now, "info", "Cancellation requested; stopping the training");
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
    c.n_history = load_history(ctl, id, history, ATTEMPTS_MAX);
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
    if (!outcome_stop_request(j->status, j->active_attempt[0] != '\0', stop_of(j), *reason,
                              &stop, &to))
        return ERR_CONFLICT;
    set_stop(j, stop);
    if (to != j->status)
        return job_move_to(j, to, MSG_RESCHEDULING);
    return ERR_OK;
}

enum alallo_err lifecycle_request_stop(struct control *ctl, const char *id,
                                       enum stop_reason reason)
{
    return store_job_update(ctl->store, id, NULL, stop_cb, &reason);
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
    events_ctx_rerun(&c->base);
    if (attempt_status_of(a->status) == ATTEMPT_ENDED)
        return ERR_OK;
    bool owned = attempt_owns(j, a);
    end_attempt(j, a, now, c->reason);
    if (!owned)
        return ERR_OK;
    c->base.st = state_load(j);
    if (!c->base.st)
        return ERR_NOMEM;
    set_stop(j, STOP_REASON_NONE);
    enum alallo_err e = ledger_end(&c->base, j, -1, w);
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
            e = settle(&c->base, j, a, &o.ledger, w);
        if (!e)
            c->base.partial_step = outcome_partial_step(&o, &c->base.st->ledger);
        if (!e)
            e = note(w, now, "info", "The job was cancelled");
    } else if (o.status == JOB_QUEUED) {
        e = job_move_to(j, JOB_QUEUED, o.message);
        if (!e)
            e = note(w, now, "warn", "The worker %s was lost before training started",
                     a->worker);
    } else {
        e = job_move_to(j, o.status, o.message);
        if (!e)
            e = settle(&c->base, j, a, &o.ledger, w);
        if (!e)
            e = note(w, now,
                     "warn",
                     "The worker %s was lost (%s); the job continues from its latest checkpoint",
                     a->worker, c->reason);
    }
    return e ? e : state_save(j, c->base.st);
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
        c.base.n_history = load_history(ctl, open[i].job, history, ATTEMPTS_MAX);
        enum alallo_err e2 = store_job_update(ctl->store, open[i].job, open[i].id, gone_cb, &c);
        free(c.base.st);
        feed_calibration(ctl, &c.base, e2);
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
    events_ctx_rerun(&c->base);
    c->internal = false;
    if (attempt_status_of(a->status) != ATTEMPT_STARTING || !attempt_owns(j, a))
        return ERR_CONFLICT;
    c->base.st = state_load(j);
    if (!c->base.st)
        return ERR_NOMEM;
    end_attempt(j, a, now, START_TIMEOUT_REASON);
    enum alallo_err e = ledger_end(&c->base, j, -1, w);
    if (e)
        return e;
    if (j->status == JOB_CANCELLING || stop_of(j) == STOP_REASON_CANCEL) {
        /* As any attempt that ends while its job is cancelling
         * (src/sched/outcome.h): steps earlier attempts kept are charged,
         * and their checkpoint is the partial model. */
        struct outcome_job oj = {.status = j->status, .stop = stop_of(j),
                                 .trained = j->steps_done > 0};
        struct outcome_end oe = {.exit_status = -1, .not_started = true};
        struct outcome o;
        outcome_of_end(&oj, &oe, &o);
        e = job_move_to(j, JOB_CANCELLED, MSG_NONE);
        j->finished_ms = now;
        if (!e)
            e = settle(&c->base, j, a, &o.ledger, w);
        if (!e)
            c->base.partial_step = outcome_partial_step(&o, &c->base.st->ledger);
    } else if (c->earlier + 1 >= c->base.ctl->cfg.start_tries) {
        e = job_move_to(j, JOB_FAILED, MSG_FAILED_INTERNAL);
        j->finished_ms = now;
        j->internal_failure = 1;
        c->internal = true;
        if (!e)
            e = settle_as(&c->base, j, a, JOB_FAILED, MSG_FAILED_INTERNAL, JOB_QUEUED, w);
        if (!e)
            e = note(w, now, "error", "%s", j->message);
    } else {
        if (j->status == JOB_QUEUED)
            e = job_move_to(j, JOB_QUEUED, MSG_WAITING_FOR_CAPACITY);
        else
            e = job_move_to(j, JOB_RESCHEDULING, MSG_RESCHEDULING);
        if (!e)
            e = note(w, now, "warn", "The trainer on worker %s did not start; trying again",
                     a->worker);
    }
    set_stop(j, STOP_REASON_NONE);
    return e ? e : state_save(j, c->base.st);
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
        c.base.n_history = load_history(ctl, open[k].job, history, ATTEMPTS_MAX);
        for (int h = 0; h < c.base.n_history; h++)
            if (strcmp(history[h].reason, START_TIMEOUT_REASON) == 0)
                c.earlier++;
        log_line("warn", "attempt %s of job %s on worker %s: no `started` after %d s", open[k].id,
                open[k].job, open[k].worker, ctl->cfg.start_timeout_s);
        enum alallo_err e =
            store_job_update(ctl->store, open[k].job, open[k].id, start_timeout_cb, &c);
        free(c.base.st);
        feed_calibration(ctl, &c.base, e);
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
    events_ctx_rerun(c);
    char before[32];
    text_copy(before, sizeof before, j->stop_reason);
    c->st = state_load(j);
    check_limits(c->ctl, j, c->st, c->now);
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
