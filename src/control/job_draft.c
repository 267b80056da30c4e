/* job_draft.c - a job's request into its draft (job_draft.h): the checks
 * that need the model, the files or the account, in their place among the
 * request's JSON checks. */
#include "control/job_draft.h"

#include <limits.h>
#include <math.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "control/context.h"
#include "control/integrations.h"
#include "control/models.h"
#include "core/clock.h"
#include "core/ids.h"
#include "core/job.h"
#include "core/sample_prompts.h"
#include "core/text.h"
#include "sched/hyper.h"

static bool fail(struct field_error *err, enum job_check_at at, enum alallo_err code,
                 const char *param, const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static bool fail(struct field_error *err, enum job_check_at at, enum alallo_err code,
                 const char *param, const char *fmt, ...)
{
    err->at = at;
    err->code = code;
    text_copy(err->param, sizeof err->param, param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return false;
}

/* True when the request's own JSON error comes before check `at`: it is
 * then the answer. */
static bool json_error_first(const struct job_request *rq, enum job_check_at at,
                             struct field_error *err)
{
    if (rq->err.at == JOB_AT_NONE || rq->err.at > at)
        return false;
    *err = rq->err;
    return true;
}

/* The model `id` names: a base model, a fine-tuned model of the account,
 * or a job id of the account standing for its fine-tuned model. */
static bool resolve_model(struct control *ctl, const char *account, const char *id,
                          struct catalog_model *m, struct field_error *err)
{
    char name[256], why[300];
    if (!control_model_name(ctl, account, id, name, sizeof name, why, sizeof why))
        return fail(err, JOB_AT_MODEL, ERR_NOT_FOUND, "model", "%s", why);
    if (control_model_find(ctl, account, name, m))
        return true;
    char msg[1024];
    control_no_such_model(ctl, account, id, msg, sizeof msg);
    return fail(err, JOB_AT_MODEL, ERR_NOT_FOUND, "model", "%s", msg);
}

/* A W&B integration needs the account's W&B API key to be set; the
 * integration is kept in the job's hyper object. */
static bool add_integrations(struct control *ctl, const char *account,
                             const struct job_request *rq, struct store_job *j,
                             struct field_error *err)
{
    if (!rq->wandb.on)
        return true;
    char key[STORE_SETTING_MAX];
    enum alallo_err e = store_account_setting_get(ctl->store, account, INTEGRATIONS_WANDB_SETTING,
                                                  key, sizeof key);
    explicit_bzero(key, sizeof key);
    if (e == ERR_NOT_FOUND)
        return fail(err, JOB_AT_WANDB_KEY, ERR_INVALID, "integrations",
                    "Set the account's W&B API key first (POST "
                    "/v1/organization/integrations/wandb).");
    if (e)
        return fail(err, JOB_AT_WANDB_KEY, e, "integrations",
                    "Could not read the account's settings.");
    if (!integrations_into_hyper(&rq->wandb, j->hyper, sizeof j->hyper))
        return fail(err, JOB_AT_WANDB_KEY, ERR_INVALID, "integrations",
                    "integrations are too large.");
    return true;
}

/* sample_prompts, kept in the job's hyper object, and what answering them
 * adds to the estimate (out->sample_*). Without prompts of its own, a
 * supervised job with validation data is answered on the first of its
 * validation prompts. */
static bool add_sample_prompts(const struct job_request *rq, struct job_draft *out,
                               struct field_error *err)
{
    const json_t *v = rq->sample_prompts;
    if (!sample_prompts_into_hyper(v, out->job.hyper, sizeof out->job.hyper))
        return fail(err, JOB_AT_SAMPLE_SIZE, ERR_INVALID, "sample_prompts",
                    "sample_prompts are too large together with the job's other settings "
                    "(%zu bytes at most).", sizeof out->job.hyper - 1);
    if (json_array_size(v) > 0) {
        out->sample_prompts = (int)json_array_size(v);
        for (size_t i = 0; i < json_array_size(v); i++) {
            int64_t bytes = (int64_t)sample_prompt_bytes(json_array_get(v, i));
            out->sample_tokens += (double)control_job_tokens_per_epoch(1, bytes, INT_MAX);
        }
    } else if (out->valid_examples > 0 && !rq->dpo) {
        out->sample_prompts = out->valid_examples < SAMPLE_PROMPTS_FROM_VALIDATION
                                  ? (int)out->valid_examples
                                  : SAMPLE_PROMPTS_FROM_VALIDATION;
        out->sample_tokens =
            out->sample_prompts * (out->valid_tokens / (double)out->valid_examples);
    }
    return true;
}

bool control_job_draft(struct control *ctl, const char *account, const struct job_request *rq,
                       struct job_draft *out, struct field_error *err)
{
    memset(out, 0, sizeof *out);
    memset(err, 0, sizeof *err);
    struct store_job *j = &out->job;
    text_copy(j->account, sizeof j->account, account);
    bool dpo = rq->dpo;

    if (json_error_first(rq, JOB_AT_MODEL, err))
        return false;
    if (!resolve_model(ctl, account, rq->model, &out->model, err))
        return false;
    text_copy(j->model, sizeof j->model, out->model.id); /* a job id: its model's name */

    if (!ids_valid(rq->training_file) ||
        store_file_get(ctl->store, account, rq->training_file, &out->file) != ERR_OK)
        return fail(err, JOB_AT_FILES, ERR_NOT_FOUND, "training_file", "No such file: %s.",
                    rq->training_file);
    text_copy(j->training_file, sizeof j->training_file, rq->training_file);
    struct store_file vf = {0};
    if (rq->validation_file) {
        if (!ids_valid(rq->validation_file) ||
            store_file_get(ctl->store, account, rq->validation_file, &vf) != ERR_OK)
            return fail(err, JOB_AT_FILES, ERR_NOT_FOUND, "validation_file",
                        "No such file: %s.", rq->validation_file);
        text_copy(j->validation_file, sizeof j->validation_file, rq->validation_file);
    }

    if (json_error_first(rq, JOB_AT_SEQ, err))
        return false;
    /* "auto" (0) chosen from the data set and the model (sched/hyper.h). */
    long examples = out->file.examples;
    struct hyper_params chosen = {.n_epochs = (int)rq->epochs, .batch_size = (int)rq->batch,
                                  .lr_multiplier = rq->lr};
    if (dpo)
        hyper_auto_dpo(examples, out->model.params, &chosen);
    else
        hyper_auto(examples, out->model.params, &chosen);
    j->n_epochs = chosen.n_epochs;
    j->batch_size = chosen.batch_size;
    j->lr_multiplier = chosen.lr_multiplier;
    text_copy(j->method, sizeof j->method, dpo ? "dpo" : "supervised");
    struct job_hyper more = rq->more;
    if (rq->seq_given) {
        double hi = control_model_context(&out->model);
        if (!rq->seq_integer || !isfinite(rq->seq) || rq->seq < JOB_HYPER_MIN_SEQ || rq->seq > hi)
            return fail(err, JOB_AT_SEQ, ERR_INVALID, "hyperparameters.max_seq_len",
                        "%s must be %s between %g and %g, or \"auto\".", "max_seq_len",
                        "an integer", (double)JOB_HYPER_MIN_SEQ, hi);
        more.max_seq_len = (int)rq->seq;
    }

    if (json_error_first(rq, JOB_AT_HELD_OUT, err))
        return false;
    long held_out =
        j->validation_file[0] ? 0 : job_hyper_split_held_out(more.validation_split, examples);
    if (held_out < 0)
        return fail(err, JOB_AT_HELD_OUT, ERR_INVALID, "hyperparameters.validation_split",
                    "validation_split holds out some of the training file's examples and trains "
                    "on the rest: %s has %ld example%s, at least 2 are needed (or give a "
                    "validation_file).",
                    out->file.filename, examples, examples == 1 ? "" : "s");
    if (dpo && strcmp(out->file.format, "preference") != 0)
        return fail(err, JOB_AT_FORMAT, ERR_INVALID, "training_file",
                    "DPO trains on preference data (input, preferred_output, "
                    "non_preferred_output); %s is not.", rq->training_file);
    if (!dpo && strcmp(out->file.format, "preference") == 0)
        return fail(err, JOB_AT_FORMAT, ERR_INVALID, "training_file",
                    "%s holds preference pairs: train on it with method.type \"dpo\".",
                    rq->training_file);

    if (json_error_first(rq, JOB_AT_CONTEXT, err))
        return false;
    text_copy(j->suffix, sizeof j->suffix, rq->suffix);
    if (rq->name) {
        text_copy(j->name, sizeof j->name, rq->name);
    } else {
        /* By default a job is named after its data set. */
        text_copy(j->name, sizeof j->name, out->file.filename);
        char *dot = strrchr(j->name, '.');
        if (dot && dot != j->name)
            *dot = '\0';
    }
    text_copy(j->precision, sizeof j->precision, rq->precision ? rq->precision : "16-bit");
    text_copy(j->goal, sizeof j->goal, rq->goal ? rq->goal : "lowest_cost");
    /* A deadline must lie ahead: one already past can be met by nothing. */
    if (rq->finish_by > 0 && (double)rq->finish_by <= (double)clock_now_ms() / 1000.0) {
        char at[40];
        return fail(err, JOB_AT_CONTEXT, ERR_INVALID, "finish_by",
                    "finish_by must be in the future; %s has passed.",
                    job_moment_text(at, sizeof at, (double)rq->finish_by, false));
    }
    text_copy(j->adapter, sizeof j->adapter, rq->adapter ? rq->adapter : "lora");
    j->seed = rq->seed_given ? rq->seed : (int64_t)randombytes_uniform(2147483647U);
    text_copy(j->metadata, sizeof j->metadata, rq->metadata);

    /* The context last: its default depends on the precision, adapter and
     * batch, and on what the workers offer. */
    if (more.max_seq_len == 0) {
        more.max_seq_len = JOB_HYPER_LEGACY_SEQ;
        if (!job_hyper_format(&more, dpo, j->hyper, sizeof j->hyper))
            return fail(err, JOB_AT_CONTEXT, ERR_INTERNAL, "hyperparameters",
                        "hyperparameters are too large.");
        more.max_seq_len = control_default_context(ctl, &out->model, j);
    }
    if (!job_hyper_format(&more, dpo, j->hyper, sizeof j->hyper))
        return fail(err, JOB_AT_CONTEXT, ERR_INTERNAL, "hyperparameters",
                    "hyperparameters are too large.");
    if (rq->finish_by > 0 &&
        !job_hyper_set(j->hyper, sizeof j->hyper, "finish_by", json_integer(rq->finish_by)))
        return fail(err, JOB_AT_CONTEXT, ERR_INTERNAL, "finish_by",
                    "hyperparameters are too large.");
    if (json_error_first(rq, JOB_AT_WANDB_KEY, err))
        return false;
    if (!add_integrations(ctl, account, rq, j, err))
        return false;
    j->examples = examples;
    j->tokens = control_job_tokens_per_epoch(examples, out->file.text_bytes, more.max_seq_len);
    /* DPO trains both answers of a pair, each after the input: about twice
     * the file's tokens (docs/api.md, "DPO"). */
    if (dpo)
        j->tokens *= 2;
    /* What validation reads, for the estimate (control_job_estimate). */
    if (rq->validation_file && !dpo) {
        out->valid_examples = vf.examples;
        out->valid_tokens = (double)control_job_tokens_per_epoch(vf.examples, vf.text_bytes,
                                                                 more.max_seq_len);
    } else if (held_out > 0 && !dpo) {
        out->valid_examples = held_out;
        out->valid_tokens = (double)j->tokens * (double)held_out / (double)examples;
    }
    if (json_error_first(rq, JOB_AT_SAMPLE_SIZE, err))
        return false;
    if (!add_sample_prompts(rq, out, err))
        return false;
    if (json_error_first(rq, JOB_AT_EXAMPLES, err))
        return false;
    j->max_steps = rq->max_steps_given ? rq->max_steps
                                       : job_max_steps(examples, j->n_epochs, j->batch_size);
    if (j->max_steps <= 0)
        return fail(err, JOB_AT_EXAMPLES, ERR_INVALID, "training_file",
                    "The training file has no examples.");
    if (rq->err.at != JOB_AT_NONE) { /* a check placed after every other */
        *err = rq->err;
        return false;
    }
    return true;
}
