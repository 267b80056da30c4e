/* job_request.c - validating a job's settings at the edge (job_request.h). */
#include "api/job_request.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/shapes.h"
#include "control/context.h"
#include "control/jobs.h"
#include "control/models.h"
#include "core/integrations.h"
#include "core/job_hyper.h"
#include "core/ids.h"
#include "core/sample_prompts.h"
#include "core/text.h"
#include "sched/hyper.h"


static bool bad(struct http_response *res, enum alallo_err e, const char *param,
                const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static bool bad(struct http_response *res, enum alallo_err e, const char *param,
                const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    api_error(res, e, msg, param);
    return false;
}

/* An optional string field: absent or null leaves *out NULL. */
static bool opt_string(json_t *body, const char *key, const char **out, struct http_response *res)
{
    json_t *v = json_object_get(body, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return true;
    if (!json_is_string(v))
        return bad(res, ERR_INVALID, key, "%s must be a string.", key);
    *out = json_string_value(v);
    return true;
}

/* One hyper-parameter: an integer (or number when `real`) in [lo, hi], or
 * "auto" / absent (keeps *out). */
static bool hyper(json_t *hp, const char *key, bool real, double lo, double hi, double *out,
                  struct http_response *res)
{
    json_t *v = json_object_get(hp, key);
    if (!v || json_is_null(v) || (json_is_string(v) && strcmp(json_string_value(v), "auto") == 0))
        return true;
    bool ok = real ? json_is_number(v) : json_is_integer(v);
    double x = json_number_value(v);
    char param[80];
    text_printf(param, sizeof param, "hyperparameters.%s", key);
    if (!ok || !isfinite(x) || x < lo || x > hi || (real && x <= 0))
        return bad(res, ERR_INVALID, param, "%s must be %s between %g and %g, or \"auto\".", key,
                   real ? "a number" : "an integer", lo, hi);
    *out = x;
    return true;
}

/* A hyper-parameter that is a boolean, or absent / "auto" (keeps *out). */
static bool hyper_bool(json_t *hp, const char *key, bool *out, struct http_response *res)
{
    json_t *v = json_object_get(hp, key);
    if (!v || json_is_null(v) || (json_is_string(v) && strcmp(json_string_value(v), "auto") == 0))
        return true;
    char param[80];
    text_printf(param, sizeof param, "hyperparameters.%s", key);
    if (!json_is_boolean(v))
        return bad(res, ERR_INVALID, param, "%s must be true or false.", key);
    *out = json_is_true(v);
    return true;
}

/* A hyper-parameter that is a number in [lo, hi] (zero allowed), or absent. */
static bool hyper_range(json_t *hp, const char *key, double lo, double hi, double *out,
                        struct http_response *res)
{
    json_t *v = json_object_get(hp, key);
    if (!v || json_is_null(v) || (json_is_string(v) && strcmp(json_string_value(v), "auto") == 0))
        return true;
    char param[80];
    text_printf(param, sizeof param, "hyperparameters.%s", key);
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < lo ||
        json_number_value(v) > hi)
        return bad(res, ERR_INVALID, param, "%s must be a number from %g to %g.", key, lo, hi);
    *out = json_number_value(v);
    return true;
}

/* lora_target_modules: "all", or a non-empty array of distinct module names. */
static bool hyper_targets(json_t *hp, unsigned *out, struct http_response *res)
{
    json_t *v = json_object_get(hp, "lora_target_modules");
    const char *param = "hyperparameters.lora_target_modules";
    if (!v || json_is_null(v) || (json_is_string(v) && (strcmp(json_string_value(v), "auto") == 0 ||
                                                         strcmp(json_string_value(v), "all") == 0)))
        return true;
    const char *expect = "lora_target_modules must be \"all\" or a list of q_proj, k_proj, "
                         "v_proj, o_proj, gate_proj, up_proj, down_proj.";
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > JOB_HYPER_TARGETS)
        return bad(res, ERR_INVALID, param, "%s", expect);
    unsigned bits = 0;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        int b = job_hyper_target_parse(json_string_value(e));
        if (b < 0)
            return bad(res, ERR_INVALID, param, "%s", expect);
        bits |= 1u << b;
    }
    *out = bits;
    return true;
}

/* validation_split and early_stopping {patience, min_delta} (docs/api.md,
 * "Validation and early stopping"). */
static bool parse_watch(json_t *hp, struct job_hyper *h, struct http_response *res)
{
    if (!hyper_range(hp, "validation_split", 0, JOB_HYPER_MAX_SPLIT, &h->validation_split, res))
        return false;
    json_t *es = json_object_get(hp, "early_stopping");
    if (!es || json_is_null(es))
        return true;
    const char *param = "hyperparameters.early_stopping";
    if (!json_is_object(es))
        return bad(res, ERR_INVALID, param,
                   "early_stopping must be an object {patience, min_delta}.");
    json_t *p = json_object_get(es, "patience"), *d = json_object_get(es, "min_delta");
    if (!json_is_integer(p) || json_integer_value(p) < 1 ||
        json_integer_value(p) > JOB_HYPER_MAX_PATIENCE)
        return bad(res, ERR_INVALID, "hyperparameters.early_stopping.patience",
                   "early_stopping.patience must be an integer from 1 to %d (epochs).",
                   JOB_HYPER_MAX_PATIENCE);
    if (d && !json_is_null(d) &&
        !(json_is_number(d) && isfinite(json_number_value(d)) && json_number_value(d) >= 0 &&
          json_number_value(d) <= JOB_HYPER_MAX_MIN_DELTA))
        return bad(res, ERR_INVALID, "hyperparameters.early_stopping.min_delta",
                   "early_stopping.min_delta must be a number from 0 to %g.",
                   JOB_HYPER_MAX_MIN_DELTA);
    h->early_stopping_patience = (int)json_integer_value(p);
    h->early_stopping_min_delta = d && json_is_number(d) ? json_number_value(d) : 0.0;
    return true;
}

/* The hyper-parameters beyond epochs, batch and rate (core/job_hyper.h).
 * max_seq_len is bounded by the model's context; 0 in h->max_seq_len when
 * left to the default. */
static bool parse_more_hyper(json_t *hp, bool dpo, int model_ctx, struct job_hyper *h,
                             struct http_response *res)
{
    double seq = 0, rank = h->lora_rank;
    if (!hyper(hp, "max_seq_len", false, JOB_HYPER_MIN_SEQ, model_ctx, &seq, res) ||
        !hyper_bool(hp, "packing", &h->packing, res) ||
        !hyper(hp, "lora_rank", false, 1, JOB_HYPER_MAX_RANK, &rank, res) ||
        !hyper(hp, "lora_alpha", true, 0, JOB_HYPER_MAX_ALPHA, &h->lora_alpha, res) ||
        !hyper_range(hp, "lora_dropout", 0, 1, &h->lora_dropout, res) ||
        !hyper_targets(hp, &h->lora_targets, res) ||
        !hyper_range(hp, "warmup_ratio", 0, JOB_HYPER_MAX_WARMUP, &h->warmup_ratio, res) ||
        !hyper_range(hp, "weight_decay", 0, JOB_HYPER_MAX_DECAY, &h->weight_decay, res) ||
        !hyper_bool(hp, "train_on_inputs", &h->train_on_inputs, res))
        return false;
    if (h->lora_dropout >= 1)
        return bad(res, ERR_INVALID, "hyperparameters.lora_dropout",
                   "lora_dropout must be at least 0 and below 1.");
    h->max_seq_len = (int)seq;
    h->lora_rank = (int)rank;
    json_t *sch = json_object_get(hp, "lr_scheduler");
    if (sch && !json_is_null(sch) &&
        !(json_is_string(sch) && strcmp(json_string_value(sch), "auto") == 0) &&
        !job_hyper_schedule_parse(json_string_value(sch), &h->lr_schedule))
        return bad(res, ERR_INVALID, "hyperparameters.lr_scheduler",
                   "lr_scheduler must be \"cosine\", \"linear\" or \"constant\".");
    if (dpo && !hyper(hp, "beta", true, 0, JOB_HYPER_MAX_BETA, &h->dpo_beta, res))
        return false;
    if (!dpo && json_object_get(hp, "beta"))
        return bad(res, ERR_INVALID, "hyperparameters.beta",
                   "beta is a hyper-parameter of DPO (method.type \"dpo\").");
    return parse_watch(hp, h, res);
}

static bool valid_suffix(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 40)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return false;
    }
    return true;
}

static bool parse_metadata(json_t *body, struct store_job *j, struct http_response *res)
{
    json_t *md = json_object_get(body, "metadata");
    if (!md || json_is_null(md))
        return true;
    if (!json_is_object(md) || json_object_size(md) > 16)
        return bad(res, ERR_INVALID, "metadata",
                   "metadata must be an object of at most 16 string values.");
    const char *k;
    json_t *v;
    json_object_foreach(md, k, v)
    {
        if (strlen(k) > 64 || !json_is_string(v) || strlen(json_string_value(v)) > 512)
            return bad(res, ERR_INVALID, "metadata",
                       "metadata keys are at most 64 characters and values strings of at most "
                       "512.");
    }
    char *text = json_dumps(md, JSON_COMPACT | JSON_SORT_KEYS);
    bool fits = text && text_copy(j->metadata, sizeof j->metadata, text);
    free(text);
    if (!fits)
        return bad(res, ERR_INVALID, "metadata", "metadata is too large.");
    return true;
}

/* The model `id` names: a base model, a fine-tuned model of the account,
 * or a job id of the account standing for its fine-tuned model. */
static bool resolve_model(struct api_server *srv, const char *account, const char *id,
                          struct catalog_model *m, struct http_response *res)
{
    char name[256], why[300];
    if (!control_model_name(srv->ctl, account, id, name, sizeof name, why, sizeof why))
        return bad(res, ERR_NOT_FOUND, "model", "%s", why);
    if (control_model_find(srv->ctl, account, name, m))
        return true;
    char msg[1024];
    control_no_such_model(srv->ctl, account, id, msg, sizeof msg);
    return bad(res, ERR_NOT_FOUND, "model", "%s", msg);
}

/* `integrations` (core/integrations.h), kept in the job's hyper object. A
 * W&B integration needs the account's W&B API key to be set. */
static bool parse_integrations(struct api_server *srv, const struct http_request *req,
                               json_t *body, struct store_job *j, struct http_response *res)
{
    struct job_wandb w;
    char param[64], msg[160];
    if (!integrations_parse(json_object_get(body, "integrations"), &w, param, sizeof param, msg,
                            sizeof msg))
        return bad(res, ERR_INVALID, param, "%s", msg);
    if (!w.on)
        return true;
    char key[STORE_SETTING_MAX];
    enum alallo_err e = store_account_setting_get(srv->ctl->store, req->account.id, "wandb_api_key", key,
                                                  sizeof key);
    explicit_bzero(key, sizeof key);
    if (e == ERR_NOT_FOUND)
        return bad(res, ERR_INVALID, "integrations",
                   "Set the account's W&B API key first (POST "
                   "/v1/organization/integrations/wandb).");
    if (e)
        return bad(res, e, "integrations", "Could not read the account's settings.");
    if (!integrations_into_hyper(&w, j->hyper, sizeof j->hyper))
        return bad(res, ERR_INVALID, "integrations", "integrations are too large.");
    return true;
}

/* `sample_prompts` (core/sample_prompts.h), kept in the job's hyper object,
 * and what answering them adds to the estimate (out->sample_*). Without
 * prompts of its own, a supervised job with validation data is answered on
 * the first of its validation prompts. */
static bool parse_sample_prompts(json_t *body, bool dpo, struct job_draft *out,
                                 struct http_response *res)
{
    json_t *v = json_object_get(body, "sample_prompts");
    char param[64], msg[200];
    if (!sample_prompts_check(v, param, sizeof param, msg, sizeof msg))
        return bad(res, ERR_INVALID, param, "%s", msg);
    if (!sample_prompts_into_hyper(v, out->job.hyper, sizeof out->job.hyper))
        return bad(res, ERR_INVALID, "sample_prompts",
                   "sample_prompts are too large together with the job's other settings "
                   "(%zu bytes at most).", sizeof out->job.hyper - 1);
    if (json_array_size(v) > 0) {
        out->sample_prompts = (int)json_array_size(v);
        for (size_t i = 0; i < json_array_size(v); i++) {
            int64_t bytes = (int64_t)sample_prompt_bytes(json_array_get(v, i));
            out->sample_tokens += (double)control_job_tokens_per_epoch(1, bytes, INT_MAX);
        }
    } else if (out->valid_examples > 0 && !dpo) {
        out->sample_prompts = out->valid_examples < SAMPLE_PROMPTS_FROM_VALIDATION
                                  ? (int)out->valid_examples
                                  : SAMPLE_PROMPTS_FROM_VALIDATION;
        out->sample_tokens =
            out->sample_prompts * (out->valid_tokens / (double)out->valid_examples);
    }
    return true;
}

bool job_request_parse(struct api_server *srv, const struct http_request *req, json_t *body,
                       struct job_draft *out, struct http_response *res)
{
    memset(out, 0, sizeof *out);
    struct store_job *j = &out->job;
    const char *account = req->account.id;
    text_copy(j->account, sizeof j->account, account);

    const char *model, *training, *validation, *suffix, *name, *precision, *goal, *adapter;
    if (!opt_string(body, "model", &model, res) ||
        !opt_string(body, "training_file", &training, res) ||
        !opt_string(body, "validation_file", &validation, res) ||
        !opt_string(body, "suffix", &suffix, res) || !opt_string(body, "name", &name, res) ||
        !opt_string(body, "precision", &precision, res) ||
        !opt_string(body, "goal", &goal, res) || !opt_string(body, "adapter", &adapter, res))
        return false;
    if (!model)
        return bad(res, ERR_INVALID, "model", "model is required.");
    if (!training)
        return bad(res, ERR_INVALID, "training_file", "training_file is required.");
    if (strlen(model) >= sizeof j->model)
        return bad(res, ERR_INVALID, "model", "model is too long.");
    if (!resolve_model(srv, account, model, &out->model, res))
        return false;
    text_copy(j->model, sizeof j->model, out->model.id); /* a job id: its model's name */

    if (!ids_valid(training) ||
        store_file_get(srv->ctl->store, account, training, &out->file) != ERR_OK)
        return bad(res, ERR_NOT_FOUND, "training_file", "No such file: %s.", training);
    text_copy(j->training_file, sizeof j->training_file, training);
    struct store_file vf = {0};
    if (validation) {
        if (!ids_valid(validation) ||
            store_file_get(srv->ctl->store, account, validation, &vf) != ERR_OK)
            return bad(res, ERR_NOT_FOUND, "validation_file", "No such file: %s.", validation);
        text_copy(j->validation_file, sizeof j->validation_file, validation);
    }

    /* Hyper-parameters: method.supervised.hyperparameters wins over the
     * older top-level hyperparameters, as in OpenAI's API. */
    json_t *hp = json_object_get(body, "hyperparameters");
    json_t *method = json_object_get(body, "method");
    bool dpo = false;
    if (method && !json_is_null(method)) {
        const char *type = json_string_value(json_object_get(method, "type"));
        if (!json_is_object(method) || !type)
            return bad(res, ERR_INVALID, "method", "method must be an object with a type.");
        if (strcmp(type, "supervised") != 0 && strcmp(type, "dpo") != 0)
            return bad(res, ERR_INVALID, "method.type",
                       "method.type must be \"supervised\" or \"dpo\".");
        dpo = strcmp(type, "dpo") == 0;
        json_t *sup = json_object_get(method, type);
        json_t *mhp = json_object_get(sup, "hyperparameters");
        if (mhp)
            hp = mhp;
    }
    if (hp && !json_is_null(hp) && !json_is_object(hp))
        return bad(res, ERR_INVALID, "hyperparameters", "hyperparameters must be an object.");
    long examples = out->file.examples;
    /* 0: "auto" or left out, chosen below from the data set and the model
     * (sched/hyper.h). */
    double epochs = 0, batch = 0, lr = 0;
    if (!hyper(hp, "n_epochs", false, 1, 50, &epochs, res) ||
        !hyper(hp, "batch_size", false, 1, 256, &batch, res) ||
        !hyper(hp, "learning_rate_multiplier", true, 0, 10, &lr, res))
        return false;
    struct hyper_params chosen = {.n_epochs = (int)epochs, .batch_size = (int)batch,
                           .lr_multiplier = lr};
    if (dpo)
        hyper_auto_dpo(examples, out->model.params, &chosen);
    else
        hyper_auto(examples, out->model.params, &chosen);
    j->n_epochs = chosen.n_epochs;
    j->batch_size = chosen.batch_size;
    j->lr_multiplier = chosen.lr_multiplier;
    text_copy(j->method, sizeof j->method, dpo ? "dpo" : "supervised");
    struct job_hyper more;
    job_hyper_defaults(&more);
    if (!parse_more_hyper(hp, dpo, control_model_context(&out->model), &more, res))
        return false;
    if (more.early_stopping_patience > 0 && !j->validation_file[0] && !(more.validation_split > 0))
        return bad(res, ERR_INVALID, "hyperparameters.early_stopping",
                   "early_stopping watches the validation loss: give a validation_file or a "
                   "validation_split.");
    if (dpo && more.validation_split > 0)
        return bad(res, ERR_INVALID, "hyperparameters.validation_split",
                   "DPO has no validation loss to watch: validation_split is for supervised "
                   "jobs.");
    if (dpo && more.early_stopping_patience > 0)
        return bad(res, ERR_INVALID, "hyperparameters.early_stopping",
                   "DPO has no validation loss to watch: early_stopping is for supervised "
                   "jobs.");
    long held_out = j->validation_file[0] ? 0 : job_hyper_split_held_out(more.validation_split,
                                                                          examples);
    if (held_out < 0)
        return bad(res, ERR_INVALID, "hyperparameters.validation_split",
                   "validation_split holds out some of the training file's examples and trains "
                   "on the rest: %s has %ld example%s, at least 2 are needed (or give a "
                   "validation_file).",
                   out->file.filename, examples, examples == 1 ? "" : "s");
    if (dpo && strcmp(out->file.format, "preference") != 0)
        return bad(res, ERR_INVALID, "training_file",
                   "DPO trains on preference data (input, preferred_output, "
                   "non_preferred_output); %s is not.", training);
    if (!dpo && strcmp(out->file.format, "preference") == 0)
        return bad(res, ERR_INVALID, "training_file",
                   "%s holds preference pairs: train on it with method.type \"dpo\".",
                   training);

    if (suffix && !valid_suffix(suffix))
        return bad(res, ERR_INVALID, "suffix",
                   "suffix must be 1 to 40 letters, digits, '-' or '_'.");
    text_copy(j->suffix, sizeof j->suffix, suffix);
    if (name && (strlen(name) == 0 || strlen(name) > 100))
        return bad(res, ERR_INVALID, "name", "name must be 1 to 100 characters.");
    if (name && text_has_control(name))
        return bad(res, ERR_INVALID, "name",
                   "name must not contain control characters (such as newlines or escapes).");
    if (name) {
        text_copy(j->name, sizeof j->name, name);
    } else {
        /* By default a job is named after its data set. */
        text_copy(j->name, sizeof j->name, out->file.filename);
        char *dot = strrchr(j->name, '.');
        if (dot && dot != j->name)
            *dot = '\0';
    }
    if (precision && strcmp(precision, "16-bit") != 0 && strcmp(precision, "4-bit") != 0)
        return bad(res, ERR_INVALID, "precision", "precision must be \"16-bit\" or \"4-bit\".");
    text_copy(j->precision, sizeof j->precision, precision ? precision : "16-bit");
    if (goal && strcmp(goal, "lowest_cost") != 0 && strcmp(goal, "fastest_finish") != 0)
        return bad(res, ERR_INVALID, "goal",
                   "goal must be \"lowest_cost\" or \"fastest_finish\".");
    text_copy(j->goal, sizeof j->goal, goal ? goal : "lowest_cost");
    if (adapter && strcmp(adapter, "lora") != 0 && strcmp(adapter, "full") != 0)
        return bad(res, ERR_INVALID, "adapter", "adapter must be \"lora\" or \"full\".");
    text_copy(j->adapter, sizeof j->adapter, adapter ? adapter : "lora");
    if (strcmp(j->adapter, "full") == 0 && strcmp(j->precision, "4-bit") == 0)
        return bad(res, ERR_INVALID, "adapter",
                   "Full fine-tuning needs 16-bit precision; 4-bit trains LoRA adapters.");

    json_t *seed = json_object_get(body, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed) || json_integer_value(seed) < 0 ||
            json_integer_value(seed) > 2147483647)
            return bad(res, ERR_INVALID, "seed", "seed must be an integer from 0 to 2147483647.");
        j->seed = json_integer_value(seed);
    } else {
        j->seed = (int64_t)randombytes_uniform(2147483647U);
    }
    if (!parse_metadata(body, j, res))
        return false;

    /* The context last: its default depends on the precision, adapter and
     * batch, and on what the workers offer. */
    if (more.max_seq_len == 0) {
        more.max_seq_len = JOB_HYPER_LEGACY_SEQ;
        if (!job_hyper_format(&more, dpo, j->hyper, sizeof j->hyper))
            return bad(res, ERR_INTERNAL, "hyperparameters", "hyperparameters are too large.");
        more.max_seq_len = control_default_context(srv->ctl, &out->model, j);
    }
    if (!job_hyper_format(&more, dpo, j->hyper, sizeof j->hyper))
        return bad(res, ERR_INTERNAL, "hyperparameters", "hyperparameters are too large.");
    if (!parse_integrations(srv, req, body, j, res))
        return false;
    j->examples = examples;
    j->tokens =
        control_job_tokens_per_epoch(examples, out->file.text_bytes, more.max_seq_len);
    /* DPO trains both answers of a pair, each after the input: about twice
     * the file's tokens (docs/api.md, "DPO"). */
    if (dpo)
        j->tokens *= 2;
    /* What validation reads, for the estimate (control_job_estimate). */
    if (validation && !dpo) {
        out->valid_examples = vf.examples;
        out->valid_tokens = (double)control_job_tokens_per_epoch(vf.examples, vf.text_bytes,
                                                                 more.max_seq_len);
    } else if (held_out > 0 && !dpo) {
        out->valid_examples = held_out;
        out->valid_tokens = (double)j->tokens * (double)held_out / (double)examples;
    }
    if (!parse_sample_prompts(body, dpo, out, res))
        return false;
    j->max_steps = job_max_steps(examples, j->n_epochs, j->batch_size);
    json_t *ms = json_object_get(body, "max_steps");
    if (ms && !json_is_null(ms)) {
        if (!json_is_integer(ms) || json_integer_value(ms) < 1 ||
            json_integer_value(ms) > 10000000)
            return bad(res, ERR_INVALID, "max_steps",
                       "max_steps must be an integer from 1 to 10000000.");
        j->max_steps = (long)json_integer_value(ms);
    }
    if (j->max_steps <= 0)
        return bad(res, ERR_INVALID, "training_file", "The training file has no examples.");
    return true;
}
