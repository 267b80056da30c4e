/* trainer_events.c - the trainer's events relayed by a worker, applied to
 * its job (lifecycle_events in lifecycle.h): progress, checkpoints, the
 * ledger's charges, time left, samples, memory, `done`; one transaction
 * per batch. The parts shared with the other callbacks are
 * lifecycle_internal.h.
 */
#include "control/lifecycle.h"
#include "control/lifecycle_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/job_move.h"
#include "control/jobs.h"
#include "control/paths.h"
#include "core/text.h"
#include "sched/hyper.h"
#include "sched/resched.h"

/* The longest prompt and answer text of a sample event kept (bytes, cut
 * at a character's start): both fit in an event's data. */
#define SAMPLE_TEXT_MAX 150
/* A graded sample's sub-graders kept (a multi grader's), each name cut to
 * fit; as many as fit in the event's data are written. */
#define SAMPLE_SCORES_MAX 8
#define SAMPLE_SCORE_NAME_MAX 48

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
    double score; /* a grader's score of the answer; NAN: none */
    int n_scores; /* a multi grader's sub-graders, by name */
    char score_name[SAMPLE_SCORES_MAX][SAMPLE_SCORE_NAME_MAX];
    double score_of[SAMPLE_SCORES_MAX];
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
    json_t *score = json_object_get(o, "score");
    t->score = json_is_number(score) && isfinite(json_number_value(score))
                   ? json_number_value(score)
                   : NAN;
    t->n_scores = 0;
    const char *name;
    json_t *v;
    json_object_foreach(json_object_get(o, "scores"), name, v)
    {
        if (t->n_scores == SAMPLE_SCORES_MAX || isnan(t->score))
            break;
        if (!json_is_number(v) || !isfinite(json_number_value(v)))
            continue;
        utf8_cut(t->score_name[t->n_scores], SAMPLE_SCORE_NAME_MAX, name);
        t->score_of[t->n_scores++] = json_number_value(v);
    }
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
    enum stop_reason s = lifecycle__stop_of(j);
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

static long clamp_step(const struct store_job *j, long step)
{
    if (step < 0)
        return 0;
    return step > j->max_steps ? j->max_steps : step;
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
                                               sched_link_speed_factor(c->ctl->sched, j) /
                                               p.model_factor,
                                  .created_ms = c->now};
    text_copy(k.kind, sizeof k.kind, "job");
    if (!(k.actual_b > 0) || !(k.nominal_b > 0))
        return ERR_OK;
    enum alallo_err e = lifecycle__calibrate(c, w, &k);
    /* Where the real time fell against the range shown, beyond its parts'
     * sum (est_range_spread, a log kept as exp), for the range's margin. */
    double spread = est_range_spread((double)(j->finished_ms - j->created_ms) / 1000.0,
                                     j->est_low_s, j->est_high_s, p.range_margin);
    if (e || !isfinite(spread) || p.new_shape)
        return e;
    text_copy(k.kind, sizeof k.kind, "spread");
    k.waited = est_wait_cell(p.waits, p.start_s - p.startup_s, p.start_s + p.train_s);
    k.actual_a = exp(spread);
    k.nominal_a = 1.0;
    k.actual_b = k.nominal_b = 0;
    e = lifecycle__calibrate(c, w, &k);
    /* And where its net price fell against the price range's lower end,
     * and its price before the cap against its upper end, both before
     * their margins and in half-widths of that range (est_price_spread):
     * rows of kind "price", `waited` SCHED_LINK_PRICE_LOW and
     * SCHED_LINK_PRICE_HIGH. A plan from before the upper end was kept
     * (no `pu`) has no range to measure against. */
    double paid = c->st ? (double)ledger_net_micros(&c->st->ledger) / 1e6 : 0;
    double plo = p.price_low * exp(p.price_margin), phi = p.price_high_nominal;
    double low_spread = est_price_spread(plo, paid, plo, phi);
    if (e || !isfinite(low_spread))
        return e;
    text_copy(k.kind, sizeof k.kind, "price");
    k.waited = SCHED_LINK_PRICE_LOW;
    k.actual_a = exp(low_spread);
    e = lifecycle__calibrate(c, w, &k);
    double steps = (double)ledger_steps_micros(&c->st->ledger) / 1e6;
    double high_spread = est_price_spread(steps, phi, plo, phi);
    if (e || !isfinite(high_spread))
        return e;
    k.waited = SCHED_LINK_PRICE_HIGH;
    k.actual_a = exp(high_spread);
    return lifecycle__calibrate(c, w, &k);
}

/* A job succeeded: where the time it truly had left fell against each
 * time-left band it was shown (tl_spreads), for their margins: rows of
 * kind "tl", the cell in `waited`, the end in `goal`, a log kept as exp. */
static enum alallo_err calibrate_time_left(struct events_ctx *c, const struct store_job *j,
                                           struct store_writes *w)
{
    struct sched_plan p;
    if (!c->st || !sched_plan_read(j->plan, &p))
        return ERR_OK;
    double tl[EST_TL_CELLS][2];
    tl_spreads(c->st->tl_shown, (double)j->finished_ms / 1000.0, tl);
    struct store_calibration k = {.method = (int)p.method, .class_ = (int)p.class_,
                                  .nominal_a = 1.0, .created_ms = c->now};
    text_copy(k.kind, sizeof k.kind, "tl");
    enum alallo_err e = ERR_OK;
    for (int cell = 0; !e && cell < EST_TL_CELLS; cell++)
        for (int side = 0; !e && side < 2; side++) {
            if (!isfinite(tl[cell][side]))
                continue;
            k.waited = cell;
            k.goal = side;
            k.actual_a = exp(tl[cell][side]);
            e = lifecycle__calibrate(c, w, &k);
        }
    return e;
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
    if (c->st->has_tl && j->run_started_ms) {
        tl_observe(&c->st->tl, step, (double)j->run_started_ms / 1000.0 + train_s);
        tl_note_shown(&c->st->tl, c->st->tl_shown);
    }
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
    if (!cur || peak <= 0 || lifecycle__stop_of(j) != STOP_REASON_NONE || j->status == JOB_CANCELLING)
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
        lifecycle__set_stop(j, STOP_REASON_MOVE);
        /* Only a job that trains shows the move at once; a job still
         * waiting for `started` keeps its status until the attempt ends. */
        if (j->status == JOB_RUNNING || j->status == JOB_RESCHEDULING) {
            enum alallo_err e = job_move_to(j, JOB_RESCHEDULING, MSG_RESCHEDULING);
            if (e)
                return e;
        }
        return lifecycle__note(w, c->now, "warn",
                               "The job needs %.0f MB, more than worker %s offers; moving it",
                               (double)d.mem_bytes / 1e6, a->worker);
    }
    if (d.action == RESCHED_FAIL) {
        lifecycle__set_stop(j, d.message == MSG_NOT_AVAILABLE_LOWER_PRECISION
                                   ? STOP_REASON_NOT_AVAILABLE_LOWER
                                   : STOP_REASON_NOT_AVAILABLE);
        return lifecycle__note(w, c->now, "error", "The job needs %.0f MB; no known worker offers it",
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
    lifecycle__end_attempt(j, a, c->now, reason);
    enum alallo_err e = lifecycle__ledger_end(c, j, -1, w);
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
    lifecycle__set_stop(j, STOP_REASON_NONE);
    c->broken = true;
    e = lifecycle__settle(c, j, a, &o, w);
    if (!e)
        e = lifecycle__note(w, c->now, cancelling ? "info" : "error", "%s",
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
        e = lifecycle__note(w, c->now, "warn",
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
        return lifecycle__note(w, c->now, "info", "Resumed from the checkpoint at step %ld on worker %s",
                               from, a->worker);
    return lifecycle__note(w, c->now, "info", "Fine-tuning job started");
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
    /* Reinforcement fine-tuning's loss is the policy objective, which need
     * not fall as the reward rises (docs/rft.md): its measure is the reward
     * curve, so the sentence about the loss is not said. */
    if (strcmp(j->method, "reinforcement") == 0)
        return ERR_OK;
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

/* The data of a sample event as JSON text shorter than cap (malloc'd), or
 * NULL when even the prompt and answer do not fit: the score, then as many
 * of the sub-graders' scores as fit. */
static char *sample_data(const struct tev *t, size_t cap)
{
    json_t *d = json_pack("{sb sI sb ss ss}", "sample", 1, "step", (json_int_t)t->step, "base",
                          t->base, "prompt", t->prompt, "answer", t->answer);
    char *text = d ? json_dumps(d, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (text && strlen(text) < cap && !isnan(t->score)) {
        json_object_set_new(d, "score", json_real(t->score));
        json_t *subs = NULL;
        for (int i = -1; i < t->n_scores; i++) {
            if (i == 0) {
                subs = json_object();
                json_object_set_new(d, "scores", subs);
            }
            if (i >= 0)
                json_object_set_new(subs, t->score_name[i], json_real(t->score_of[i]));
            char *more = json_dumps(d, JSON_COMPACT | JSON_PRESERVE_ORDER);
            if (!more || strlen(more) >= cap) {
                free(more);
                break;
            }
            free(text);
            text = more;
        }
    }
    json_decref(d);
    if (text && strlen(text) >= cap) {
        free(text);
        text = NULL;
    }
    return text;
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
            e = lifecycle__note(w, c->now, "info", "Checkpoint saved at step %ld", k.step);
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
        lifecycle__set_stop(j, STOP_REASON_NONE);
        lifecycle__end_attempt(j, a, c->now, o.attempt_reason);
        e = lifecycle__ledger_end(c, j, ran, w);
        if (!e)
            e = lifecycle__settle(c, j, a, &o.ledger, w);
        if (!e)
            e = calibrate_job(c, j, w);
        if (!e)
            e = calibrate_time_left(c, j, w);
        if (!e && t->early_stopped)
            e = note_early_stop(c, w, j, a, t);
        if (!e)
            e = lifecycle__note(w, c->now, "info", "The job has successfully completed");
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
         * it is the base model's (docs/api.md, "Sample answers"), and a
         * graded one's score (docs/rft.md). */
        char *text = sample_data(t, sizeof data);
        if (text) {
            char score[32] = "";
            if (!isnan(t->score))
                snprintf(score, sizeof score, " (score %.3g)", t->score);
            text_printf(msg, sizeof msg, "%s answer at step %ld%s: %s",
                        t->base ? "The base model's" : "The model's", t->step, score, t->answer);
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

static enum alallo_err events_cb(struct store_job *j, struct store_attempt *a,
                                 struct store_writes *w, void *vctx)
{
    struct events_ctx *c = vctx;
    lifecycle__events_ctx_rerun(c);
    /* A batch sent again after its `done` was applied (its answer was
     * lost): nothing after `done` changes anything. */
    if (lifecycle_attempt_finishing(a, c->fence))
        return ERR_OK;
    if (a->fence != c->fence || !lifecycle__attempt_owns(j, a))
        return ERR_FENCED;
    c->st = lifecycle__state_load(j);
    if (!c->st)
        return ERR_NOMEM;
    /* A batch sent again (its answer was lost) is skipped up to what was
     * applied; a gap (events the worker dropped) is accepted as is. */
    int skip = 0;
    if (c->first >= 0 && c->first < a->events_applied)
        skip = (int)(a->events_applied - c->first < c->n ? a->events_applied - c->first : c->n);
    for (int i = skip; i < c->n; i++) {
        if (!lifecycle__attempt_owns(j, a))
            break; /* `done` ended it; anything after changes nothing */
        enum alallo_err e = apply_one(c, j, a, &c->ev[i], w);
        if (e)
            return e;
    }
    if (c->first >= 0 && c->first + c->n > a->events_applied)
        a->events_applied = c->first + c->n;
    else if (c->first < 0)
        a->events_applied += c->n - skip;
    lifecycle__check_limits(c->ctl, j, c->st, c->now);
    c->stop = lifecycle__attempt_owns(j, a) ? lifecycle_stop_for(j, a)
              : c->broken        ? TPROTO_STOP_CANCEL
                                 : TPROTO_STOP_NONE;
    return lifecycle__state_save(j, c->st);
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
    int n_history = lifecycle__load_history(ctl, att.job, history, ATTEMPTS_MAX);
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
        lifecycle__feed_calibration(ctl, &c, e);
    } while (!e && i < total);
    *stop = c.stop;
    free(history);
    free(ev);
    free(workers);
    return e;
}
