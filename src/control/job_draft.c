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
#include "control/rft_data.h"
#include "core/grader.h"
#include "core/grader_python.h"
#include "core/ids.h"
#include "core/job.h"
#include "core/sample_prompts.h"
#include "core/text.h"
#include "sched/estimator.h"
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
/* The same for the field `param`, its error at check `at` with `code`. */
static bool resolve_model_at(struct control *ctl, const char *account, const char *id,
                             struct catalog_model *m, enum job_check_at at,
                             enum alallo_err code, const char *param, struct field_error *err)
{
    char name[256], why[300];
    if (!control_model_name(ctl, account, id, name, sizeof name, why, sizeof why))
        return fail(err, at, code, param, "%s", why);
    if (control_model_find(ctl, account, name, m))
        return true;
    char msg[1024];
    control_no_such_model(ctl, account, id, msg, sizeof msg);
    return fail(err, at, code, param, "%s", msg);
}

static bool resolve_model(struct control *ctl, const char *account, const char *id,
                          struct catalog_model *m, struct field_error *err)
{
    return resolve_model_at(ctl, account, id, m, JOB_AT_MODEL, ERR_NOT_FOUND, "model", err);
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
    } else if (out->valid_examples > 0 && !rq->dpo && !rq->rft) {
        out->sample_prompts = out->valid_examples < SAMPLE_PROMPTS_FROM_VALIDATION
                                  ? (int)out->valid_examples
                                  : SAMPLE_PROMPTS_FROM_VALIDATION;
        out->sample_tokens =
            out->sample_prompts * (out->valid_tokens / (double)out->valid_examples);
    }
    return true;
}

/* A reinforcement job's files: prompts (chats that end with the user's
 * message), each line holding what the grader reads; other methods' files
 * hold no such prompts. */
static bool check_rft_data(const struct job_request *rq, const struct job_draft *out,
                           const struct store_file *vf, struct field_error *err)
{
    bool prompts = strcmp(out->file.format, "reinforcement") == 0;
    if (!rq->rft && prompts)
        return fail(err, JOB_AT_FORMAT, ERR_INVALID, "training_file",
                    "%s holds prompts without answers (chats that end with the user's "
                    "message): train on it with method.type \"reinforcement\" and a grader.",
                    rq->training_file);
    if (!rq->rft)
        return true;
    if (!prompts)
        return fail(err, JOB_AT_FORMAT, ERR_INVALID, "training_file",
                    "Reinforcement fine-tuning trains on prompts: chats whose last message is "
                    "the user's, with the fields the grader reads; %s is %s data.",
                    rq->training_file, out->file.format[0] ? out->file.format : "other");
    if (rq->validation_file && strcmp(vf->format, "reinforcement") != 0)
        return fail(err, JOB_AT_FORMAT, ERR_INVALID, "validation_file",
                    "The validation file of reinforcement fine-tuning holds prompts too (chats "
                    "whose last message is the user's); %s does not.",
                    rq->validation_file);
    char msg[sizeof err->message];
    if (!rft_data_check(out->file.path, rq->training_file, rq->grader, msg, sizeof msg))
        return fail(err, JOB_AT_FORMAT, ERR_INVALID, "training_file", "%s", msg);
    if (rq->validation_file &&
        !rft_data_check(vf->path, rq->validation_file, rq->grader, msg, sizeof msg))
        return fail(err, JOB_AT_FORMAT, ERR_INVALID, "validation_file", "%s", msg);
    return true;
}

/* Tokens of a template or prompt of `bytes` bytes in `messages` messages:
 * as a training example's (control_job_tokens_per_epoch), 4 bytes a token
 * and 8 more for each message's frame. */
static double text_tokens(size_t bytes, int messages)
{
    return (double)bytes / 4.0 + 8.0 * messages;
}

/* The parameters one token goes through (a mixture of experts': the
 * active ones). */
static double params_per_token(const struct catalog_model *m)
{
    return (double)(m->active_params > 0 ? m->active_params : m->params);
}

struct grader_models {
    struct control *ctl;
    const char *account;
    const struct catalog_model *policy;
    int answer_tokens;    /* the policy's answer, at most                  */
    json_t *dirs;         /* model name: its folder, for the trainer       */
    int64_t params, bytes; /* OUT: the models' weights, each counted once
                              (the trainer loads each once)               */
    double grade_tokens;  /* OUT: grading per answer, in training tokens of
                             the policy (est_rft_grade_tokens, summed)     */
    struct field_error *err;
};

static bool grader_model_known(void *ctx, const struct grader_ask *a)
{
    struct grader_models *gm = ctx;
    struct catalog_model m;
    if (!resolve_model_at(gm->ctl, gm->account, a->model, &m, JOB_AT_CONTEXT, ERR_INVALID,
                          a->param, gm->err))
        return false;
    if (!json_object_get(gm->dirs, a->model)) {
        gm->params += m.params;
        gm->bytes += m.bytes;
    }
    json_object_set_new(gm->dirs, a->model, json_string(m.dir));
    double policy = params_per_token(gm->policy), judge = params_per_token(&m);
    /* a model of unknown size is counted as the policy's */
    double ratio = policy > 0 && judge > 0 ? judge / policy : 1.0;
    gm->grade_tokens += est_rft_grade_tokens(text_tokens(a->template_bytes, a->messages),
                                             a->answer_reads, gm->answer_tokens, a->max_tokens,
                                             ratio);
    return true;
}

/* The grader, and the folders of the models its score_model graders ask,
 * kept in the job's hyper object for the trainer; *grade_tokens what
 * grading one answer costs (docs/estimator.md, "Reinforcement fine-tuning:
 * rollouts, grading and updates"). */
static bool add_grader(struct control *ctl, const char *account, const struct job_request *rq,
                       const struct catalog_model *policy, int answer_tokens,
                       struct store_job *j, double *grade_tokens, struct field_error *err)
{
    /* a python grader: the sandbox works on this machine and the source
     * compiles in it (docs/rft.md) */
    char param[sizeof err->param], msg[sizeof err->message];
    if (!grader_python_ready(rq->grader, "method.reinforcement.grader", param, sizeof param, msg,
                             sizeof msg))
        return fail(err, JOB_AT_CONTEXT, ERR_INVALID, param, "%s", msg);
    struct grader_models gm = {ctl, account, policy, answer_tokens, json_object(), 0, 0, 0, err};
    if (!grader_each_model(rq->grader, "method.reinforcement.grader", grader_model_known, &gm)) {
        json_decref(gm.dirs);
        return false;
    }
    /* what the planner reserves and the estimate loads for them
     * (job_hyper_grader_weights) */
    bool ok = job_hyper_set(j->hyper, sizeof j->hyper, "grader_models", gm.dirs);
    if (ok && (gm.params > 0 || gm.bytes > 0))
        ok = job_hyper_set(j->hyper, sizeof j->hyper, "grader_weights",
                           json_pack("{s:I,s:I}", "params", (json_int_t)gm.params, "bytes",
                                     (json_int_t)gm.bytes));
    /* each python grader runs once per answer, at a cost in seconds that
     * no worker's speed changes (est_rft_python_s) */
    int python = grader_python_count(rq->grader);
    if (ok && python > 0)
        ok = job_hyper_set(j->hyper, sizeof j->hyper, "python_answer_s",
                           json_real(python * EST_PYTHON_GRADE_S));
    if (!ok || !job_hyper_set(j->hyper, sizeof j->hyper, "grader", json_deep_copy(rq->grader)))
        return fail(err, JOB_AT_CONTEXT, ERR_INVALID, "method.reinforcement.grader",
                    "The grader is too large: a job's grader and hyper-parameters together "
                    "hold at most %zu bytes.", sizeof j->hyper - 1);
    *grade_tokens = gm.grade_tokens;
    return true;
}

/* The tokens one epoch of reinforcement fine-tuning counts as, from the
 * prompts' tokens: rollouts, grading and updates (sched/estimator.h). */
static int64_t rft_tokens(int64_t prompt_tokens, long examples, const struct job_hyper *h,
                          double grade_tokens)
{
    return (int64_t)llround(est_rft_tokens((double)prompt_tokens, examples, h->rft_group,
                                           h->rft_answer_tokens, h->rft_kl > 0, grade_tokens));
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
    bool rft = rq->rft;
    if (dpo)
        hyper_auto_dpo(examples, out->model.params, &chosen);
    else if (rft)
        hyper_auto_rft(examples, out->model.params, &chosen);
    else
        hyper_auto(examples, out->model.params, &chosen);
    j->n_epochs = chosen.n_epochs;
    j->batch_size = chosen.batch_size;
    j->lr_multiplier = chosen.lr_multiplier;
    text_copy(j->method, sizeof j->method, dpo ? "dpo" : rft ? "reinforcement" : "supervised");
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
    if (!check_rft_data(rq, out, &vf, err))
        return false;

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
    double grade_tokens = 0;
    if (rft && !add_grader(ctl, account, rq, &out->model, more.rft_answer_tokens, j,
                           &grade_tokens, err))
        return false;
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
    /* Reinforcement: each prompt is answered rft_group times, each answer
     * decoded and then trained on (docs/estimator.md, "Reinforcement"). */
    /* What validation reads, for the estimate (control_job_estimate): for
     * reinforcement, the prompts its validation rewards answer, the
     * validation file's or the first JOB_HYPER_RFT_VALID_FROM_TRAIN training ones. */
    if (rft) {
        out->rft = true;
        out->rft_grade_tokens = grade_tokens;
        if (rq->validation_file) {
            out->valid_examples = vf.examples;
            out->valid_tokens = (double)control_job_tokens_per_epoch(vf.examples, vf.text_bytes,
                                                                     more.max_seq_len);
        } else if (examples > 0) {
            out->valid_examples = examples < JOB_HYPER_RFT_VALID_FROM_TRAIN
                                      ? examples
                                      : JOB_HYPER_RFT_VALID_FROM_TRAIN;
            out->valid_tokens = (double)j->tokens * (double)out->valid_examples /
                                (double)examples;
        }
        j->tokens = rft_tokens(j->tokens, examples, &more, grade_tokens);
    } else if (rq->validation_file && !dpo) {
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
