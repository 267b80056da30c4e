/* jobs.c - creating a job: its estimate, its plan and ledger, and the
 * store row (jobs.h). */
#include "control/jobs.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "control/catalog.h"
#include "control/checkpoint_models.h"
#include "control/job_move.h"
#include "control/paths.h"
#include "core/integrations.h"
#include "core/job_hyper.h"
#include "core/sample_prompts.h"
#include "core/ids.h"
#include "core/job.h"
#include "core/text.h"

bool control_model_find(struct control *ctl, const char *account, const char *id,
                        struct catalog_model *m)
{
    if (catalog_find(ctl->catalog, id, m))
        return true;
    struct store_job base;
    if (strncmp(id, "ft:", 3) == 0 &&
        store_job_by_model(ctl->store, account, id, &base) == ERR_OK) {
        char dir[1024], err[200];
        if (text_printf(dir, sizeof dir, "%s/jobs/%s/out/model", ctl->cfg.data_dir, base.id) &&
            catalog_read_dir(dir, m, err, sizeof err) == 0) {
            text_copy(m->id, sizeof m->id, id);
            return true;
        }
    }
    /* A listed checkpoint, made into a model on first use. */
    char dir[1024], adapter[1024], why[300], err[200];
    if (control_checkpoint_model_dir(ctl, account, id, dir, sizeof dir, adapter, sizeof adapter,
                                     NULL, why, sizeof why) == ERR_OK &&
        catalog_read_dir(dir, m, err, sizeof err) == 0) {
        text_copy(m->id, sizeof m->id, id);
        return true;
    }
    return false;
}

int64_t control_job_tokens_per_epoch(long examples, int64_t text_bytes, int seq_len)
{
    if (examples <= 0)
        return 0;
    double per_example = (double)text_bytes / (double)examples / 4.0 + 8.0;
    if (per_example > seq_len)
        per_example = seq_len;
    return (int64_t)ceil(per_example * (double)examples);
}

enum alallo_err control_job_estimate(struct control *ctl, struct job_draft *r, char *why,
                                     size_t whycap)
{
    r->now = (double)clock_now_ms() / 1000.0;
    enum alallo_err e = sched_link_estimate(ctl, &r->model, &r->job, r->now, &r->est, why, whycap);
    r->model_factor = sched_link_speed_factor(ctl->sched, &r->job);
    r->startup_factor = sched_link_startup_factor(ctl->sched, &r->job);
    if (!e && ctl->cfg.plan_scale != 1.0)
        r->est.memory_bytes = (int64_t)llround((double)r->est.memory_bytes * ctl->cfg.plan_scale);
    if (!e)
        r->job.memory_bytes = r->est.memory_bytes;
    /* validation and sample answers run between steps on the same worker
     * (docs/estimator.md) */
    double trained = sched_link_train_tokens(&r->job);
    double share = est_samples_share(trained, r->sample_prompts, r->sample_tokens,
                                     SAMPLE_ANSWER_TOKENS, r->job.n_epochs);
    if (r->rft) { /* its validation rewards: answered and graded, at its rhythm */
        struct job_hyper h;
        job_hyper_parse(r->job.hyper, &h);
        long every = job_hyper_rft_eval_every(&h, r->job.max_steps);
        share += est_rft_validation_share(trained, r->valid_tokens, r->valid_examples,
                                          h.rft_eval_samples, h.rft_answer_tokens,
                                          r->rft_grade_tokens, r->job.max_steps, every);
        /* python graders: seconds, whatever the worker's speed, added as
         * their share of the nominal training (the validation rewards'
         * runs are in the learnt speed: docs/estimator.md) */
        double python = sched_link_python_s(&r->job, r->job.max_steps);
        r->est.between_share = share;
        r->est.python_s = python;
        if (!e && python > 0 && r->est.train_s > 0)
            share += python / r->est.train_s;
    } else {
        share += est_validation_share(trained, r->valid_tokens, r->valid_examples,
                                      r->job.n_epochs, r->job.max_steps, r->job.batch_size,
                                      CONTROL_VALID_EVERY_STEPS);
        r->est.between_share = share;
    }
    if (!e)
        est_add_validation(&r->est, share);
    if (!e)
        est_time_limit_message(&r->est, (double)ctl->cfg.time_limit_s);
    double by = job_hyper_finish_by(r->job.hyper);
    if (!e && by > 0 && strcmp(r->job.goal, "finish_by") == 0)
        est_finish_by_verdict(&r->est, r->now, by);
    return e;
}

/* The ends of a range as the API shows them: the lower one rounded down,
 * the upper one up, so that the shown range holds the computed one. */
static double money4_down(int64_t micros)
{
    return floor((double)micros / 100.0) / 10000.0;
}

static double money4_up(int64_t micros)
{
    return ceil((double)micros / 100.0) / 10000.0;
}

/* One term of the range: its nominal seconds and its range, to a tenth. */
static json_t *term(double nominal_s, double low_s, double high_s)
{
    return json_pack("{s:f,s:f,s:f}", "s", round(nominal_s * 10) / 10, "low_s",
                     round(low_s * 10) / 10, "high_s", round(high_s * 10) / 10);
}

/* The range, term by term (docs/estimator.md, "The range, term by term"):
 * what each part adds to the sum before the margin, the next choice's
 * finish when the job would wait, the margin (in logs), where the
 * training factor comes from, and how far each end of the price range
 * moved from the training range's (logs, > 0 lowered). For reading, not
 * for computing with. */
static json_t *estimate_terms(const struct estimate *e)
{
    json_t *t = json_pack(
        "{s:o,s:o,s:o,s:f,s:s,s:{s:f,s:f}}", "wait", term(e->wait_s, e->wait_low_s, e->wait_high_s),
        "fixed", term(e->startup_s, e->startup_low_s, e->startup_high_s), "training",
        term(e->train_s, e->train_low_s, e->train_high_s), "margin",
        round(e->range_margin * 1000) / 1000,
        "basis", e->new_shape ? "new" : e->borrowed_shape ? "borrowed" : "own", "price_margin",
        "low", round(e->price_margin * 1000) / 1000, "high",
        round(e->price_high_margin * 1000) / 1000);
    if (t && e->alt_worker >= 0)
        json_object_set_new(t, "next_choice",
                            json_pack("{s:f,s:f}", "low_s", round(e->alt_low_s * 10) / 10,
                                      "high_s", round(e->alt_high_s * 10) / 10));
    return t ? t : json_object();
}

json_t *control_estimate_json(const struct estimate *e)
{
    bool ranged = e->fit == PLAN_FITS && e->worker >= 0;
    json_t *time = ranged ? json_pack("{s:f,s:f,s:s}", "low_s", job_range_low_s(e->time_low_s),
                                      "high_s", job_range_high_s(e->time_high_s), "text",
                                      e->time_text)
                          : json_null();
    json_t *price =
        ranged ? json_pack("{s:f,s:f,s:s}", "low", money4_down(e->price_low_micros), "high",
                           money4_up(e->price_high_micros), "currency", CONTROL_CURRENCY)
               : json_null();
    json_t *training = ranged ? json_pack("{s:f,s:f}", "low_s", job_range_low_s(e->train_low_s),
                                          "high_s", job_range_high_s(e->train_high_s))
                              : json_null();
    json_t *plan = json_pack("{s:I,s:o}", "memory_bytes", (json_int_t)e->memory_bytes, "worker",
                             e->worker_name[0] && e->worker >= 0 ? json_string(e->worker_name)
                                                                 : json_null());
    /* On a GPU worker: the micro-batch that fits one GPU and its memory. */
    if (plan && ranged && e->gpu_batch > 0)
        json_object_set_new(plan, "gpu", json_pack("{s:i,s:I}", "batch", e->gpu_batch,
                                                   "memory_bytes",
                                                   (json_int_t)e->gpu_memory_bytes));
    /* The goal finish_by: the deadline, whether the range's upper end is by
     * it and that end as a moment (both null while no capacity is known);
     * when it is not, the message says so. */
    const char *message = e->finish_by_message[0] ? e->finish_by_message : e->message;
    json_t *out = json_pack(
        "{s:s,s:o,s:o,s:o,s:o,s:o,s:o}", "object", "fine_tuning.estimate", "time", time, "price",
        price, "plan", plan ? plan : json_object(), "message",
        message ? json_string(message) : json_null(), "training", training, "time_limit_message",
        e->limit_message[0] ? json_string(e->limit_message) : json_null());
    if (out && ranged)
        json_object_set_new(out, "terms", estimate_terms(e));
    if (out && e->finish_by_s > 0)
        json_object_set_new(
            out, "finish_by",
            json_pack("{s:I,s:o,s:o}", "deadline", (json_int_t)e->finish_by_s, "met",
                      e->finish_high_s > 0 ? json_boolean(e->finish_by_met) : json_null(),
                      "high_at",
                      e->finish_high_s > 0 ? json_integer((json_int_t)ceil(e->finish_high_s))
                                           : json_null()));
    return out;
}

/* Fills the draft's estimate fields, plan and ledger from r->est, for a
 * job created at created_s (seconds): the time range and the ledger's
 * upper end of time count from creation. */
static void apply_estimate(struct job_draft *r, double created_s)
{
    struct store_job *j = &r->job;
    const struct estimate *e = &r->est;
    json_t *est = control_estimate_json(e);
    char *est_text = est ? json_dumps(est, JSON_COMPACT) : NULL;
    json_decref(est);
    text_copy(j->estimate, sizeof j->estimate, est_text);
    free(est_text);
    if (e->fit != PLAN_FITS)
        return; /* failed at once: nothing to plan */
    enum sched_goal g;
    if (!sched_goal_parse(j->goal, &g))
        g = SCHED_LOWEST_COST;
    sched_plan_write(e, g, r->model_factor, r->startup_factor, j->plan,
                     sizeof j->plan);
    if (e->worker < 0)
        return; /* no capacity known yet: no ranges, the ledger starts when placed */
    double waited = r->now > created_s ? r->now - created_s : 0;
    j->est_low_s = waited + e->time_low_s;
    j->est_high_s = waited + e->time_high_s;
    j->est_train_low_s = e->train_low_s;
    j->est_train_high_s = e->train_high_s;
    j->est_price_high = (double)e->price_high_micros / 1e6;
    struct sched_state *st = calloc(1, sizeof *st);
    if (!st)
        return;
    ledger_job_init(&st->ledger, created_s, waited + e->time_high_s,
                    e->startup_s + e->train_high_s, e->price_high_micros);
    sched_state_write(st, j->ledger_state, sizeof j->ledger_state);
    free(st);
}

void control_job_apply_estimate(struct job_draft *r)
{
    apply_estimate(r, r->now);
}

bool control_job_unpriced(const struct store_job *j)
{
    return !j->ledger_state[0] && !(j->est_price_high > 0) && !(j->est_high_s > 0);
}

enum alallo_err control_job_estimate_placed(struct control *ctl, const struct store_job *j,
                                            struct job_draft *r, char *why, size_t whycap)
{
    memset(r, 0, sizeof *r);
    r->job = *j;
    if (!control_model_find(ctl, j->account, j->model, &r->model)) {
        text_printf(why, whycap, "the model %s is gone", j->model);
        return ERR_NOT_FOUND;
    }
    enum alallo_err e = control_job_estimate(ctl, r, why, whycap);
    if (!e && (r->est.fit != PLAN_FITS || r->est.worker < 0)) {
        text_copy(why, whycap, "no capacity with a known speed can run it yet");
        e = ERR_UNAVAILABLE;
    }
    return e;
}

bool control_job_price_placed(struct store_job *j, struct job_draft *r)
{
    if (!control_job_unpriced(j) || r->est.worker < 0)
        return false;
    r->job = *j;
    apply_estimate(r, (double)j->created_ms / 1000.0);
    *j = r->job;
    return true;
}

enum alallo_err control_job_create(struct control *ctl, struct job_draft *r, char *why,
                                   size_t whycap)
{
    enum alallo_err e = control_job_estimate(ctl, r, why, whycap);
    if (e)
        return e;
    /* goal finish_by: a deadline no capacity meets is refused, with the
     * earliest finish named; nothing is created or charged. */
    if (r->est.finish_by_s > 0 && !r->est.finish_by_met) {
        text_copy(why, whycap, r->est.finish_by_message);
        return ERR_INVALID;
    }
    struct store_job *j = &r->job;
    ids_make(j->id, sizeof j->id, "ftjob-");
    int64_t now = (int64_t)llround(r->now * 1000.0);
    j->created_ms = now;
    control_job_apply_estimate(r);

    /* SPEC §2: a job no known capacity can ever run fails at once, and
     * costs nothing; with no worker known at all it waits. */
    struct store_event first = {.created_ms = now};
    text_copy(first.level, sizeof first.level, "info");
    text_copy(first.type, sizeof first.type, "message");
    if (r->est.fit != PLAN_FITS) {
        e = job_move_initial(j, JOB_FAILED, r->est.fail_message);
        if (e)
            return e;
        j->finished_ms = now;
        text_copy(first.level, sizeof first.level, "error");
        text_printf(first.message, sizeof first.message, "Created fine-tuning job %s: %s", j->id,
                    j->message);
    } else {
        e = job_move_initial(j, JOB_QUEUED,
                             r->est.worker >= 0 && !r->est.message ? MSG_STARTING
                                                                   : MSG_WAITING_FOR_CAPACITY);
        if (e)
            return e;
        text_printf(first.message, sizeof first.message, "Created fine-tuning job %s", j->id);
    }
    /* The forwarding cursor goes first: a crash before the job's insert
     * leaves a row no job matches (store_cursor_pending ignores it), a
     * crash after leaves a job whose metrics still reach W&B. */
    struct job_wandb wb;
    integrations_from_hyper(j->hyper, &wb);
    if (wb.on && j->status == JOB_QUEUED) {
        e = store_cursor_put(ctl->store, j->id, "wandb", 0, 0);
        if (e)
            return e;
    }
    e = store_job_insert(ctl->store, j, &first);
    if (e == ERR_NOT_FOUND) {
        /* A data set was deleted since the request was checked: the store
         * refused the job in the transaction that would have inserted it. */
        struct store_file f;
        bool train_gone = store_file_get(ctl->store, j->account, j->training_file, &f) != ERR_OK;
        text_printf(why, whycap, "No such file: %s.",
                    train_gone || !j->validation_file[0] ? j->training_file : j->validation_file);
    }
    if (e)
        return e;
    atomic_fetch_add(&ctl->metrics.jobs_created, 1);
    if (j->status == JOB_QUEUED)
        sched_link_note_queued(ctl, j);
    return ERR_OK;
}
