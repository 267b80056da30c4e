/* job_request.c - validating a job's settings at the edge (job_request.h). */
#include "api/job_request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/integrations.h"
#include "core/job.h"
#include "core/job_hyper.h"
#include "core/sample_prompts.h"
#include "core/text.h"


static bool bad(struct field_error *err, enum alallo_err e, const char *param,
                const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Fills *err, whose `at` the parser has set to the group of checks it is
 * in (control/job_draft.h), and returns false. */
static bool bad(struct field_error *err, enum alallo_err e, const char *param,
                const char *fmt, ...)
{
    err->code = e;
    text_copy(err->param, sizeof err->param, param);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return false;
}

/* An optional string field: absent or null leaves *out NULL. */
static bool opt_string(json_t *body, const char *key, const char **out, struct field_error *err)
{
    json_t *v = json_object_get(body, key);
    *out = NULL;
    if (!v || json_is_null(v))
        return true;
    if (!json_is_string(v))
        return bad(err, ERR_INVALID, key, "%s must be a string.", key);
    *out = json_string_value(v);
    return true;
}

/* One hyper-parameter: an integer (or number when `real`) in [lo, hi], or
 * "auto" / absent (keeps *out). */
static bool hyper(json_t *hp, const char *key, bool real, double lo, double hi, double *out,
                  struct field_error *err)
{
    json_t *v = json_object_get(hp, key);
    if (!v || json_is_null(v) || (json_is_string(v) && strcmp(json_string_value(v), "auto") == 0))
        return true;
    bool ok = real ? json_is_number(v) : json_is_integer(v);
    double x = json_number_value(v);
    char param[80];
    text_printf(param, sizeof param, "hyperparameters.%s", key);
    if (!ok || !isfinite(x) || x < lo || x > hi || (real && x <= 0))
        return bad(err, ERR_INVALID, param, "%s must be %s between %g and %g, or \"auto\".", key,
                   real ? "a number" : "an integer", lo, hi);
    *out = x;
    return true;
}

/* A hyper-parameter that is a boolean, or absent / "auto" (keeps *out). */
static bool hyper_bool(json_t *hp, const char *key, bool *out, struct field_error *err)
{
    json_t *v = json_object_get(hp, key);
    if (!v || json_is_null(v) || (json_is_string(v) && strcmp(json_string_value(v), "auto") == 0))
        return true;
    char param[80];
    text_printf(param, sizeof param, "hyperparameters.%s", key);
    if (!json_is_boolean(v))
        return bad(err, ERR_INVALID, param, "%s must be true or false.", key);
    *out = json_is_true(v);
    return true;
}

/* A hyper-parameter that is a number in [lo, hi] (zero allowed), or absent. */
static bool hyper_range(json_t *hp, const char *key, double lo, double hi, double *out,
                        struct field_error *err)
{
    json_t *v = json_object_get(hp, key);
    if (!v || json_is_null(v) || (json_is_string(v) && strcmp(json_string_value(v), "auto") == 0))
        return true;
    char param[80];
    text_printf(param, sizeof param, "hyperparameters.%s", key);
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < lo ||
        json_number_value(v) > hi)
        return bad(err, ERR_INVALID, param, "%s must be a number from %g to %g.", key, lo, hi);
    *out = json_number_value(v);
    return true;
}

/* lora_target_modules: "all", or a non-empty array of distinct module names. */
static bool hyper_targets(json_t *hp, unsigned *out, struct field_error *err)
{
    json_t *v = json_object_get(hp, "lora_target_modules");
    const char *param = "hyperparameters.lora_target_modules";
    if (!v || json_is_null(v) || (json_is_string(v) && (strcmp(json_string_value(v), "auto") == 0 ||
                                                         strcmp(json_string_value(v), "all") == 0)))
        return true;
    const char *expect = "lora_target_modules must be \"all\" or a list of q_proj, k_proj, "
                         "v_proj, o_proj, gate_proj, up_proj, down_proj.";
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > JOB_HYPER_TARGETS)
        return bad(err, ERR_INVALID, param, "%s", expect);
    unsigned bits = 0;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e)
    {
        int b = job_hyper_target_parse(json_string_value(e));
        if (b < 0)
            return bad(err, ERR_INVALID, param, "%s", expect);
        bits |= 1u << b;
    }
    *out = bits;
    return true;
}

/* validation_split and early_stopping {patience, min_delta} (docs/api.md,
 * "Validation and early stopping"). */
static bool parse_watch(json_t *hp, struct job_hyper *h, struct field_error *err)
{
    if (!hyper_range(hp, "validation_split", 0, JOB_HYPER_MAX_SPLIT, &h->validation_split, err))
        return false;
    json_t *es = json_object_get(hp, "early_stopping");
    if (!es || json_is_null(es))
        return true;
    const char *param = "hyperparameters.early_stopping";
    if (!json_is_object(es))
        return bad(err, ERR_INVALID, param,
                   "early_stopping must be an object {patience, min_delta}.");
    json_t *p = json_object_get(es, "patience"), *d = json_object_get(es, "min_delta");
    if (!json_is_integer(p) || json_integer_value(p) < 1 ||
        json_integer_value(p) > JOB_HYPER_MAX_PATIENCE)
        return bad(err, ERR_INVALID, "hyperparameters.early_stopping.patience",
                   "early_stopping.patience must be an integer from 1 to %d (epochs).",
                   JOB_HYPER_MAX_PATIENCE);
    if (d && !json_is_null(d) &&
        !(json_is_number(d) && isfinite(json_number_value(d)) && json_number_value(d) >= 0 &&
          json_number_value(d) <= JOB_HYPER_MAX_MIN_DELTA))
        return bad(err, ERR_INVALID, "hyperparameters.early_stopping.min_delta",
                   "early_stopping.min_delta must be a number from 0 to %g.",
                   JOB_HYPER_MAX_MIN_DELTA);
    h->early_stopping_patience = (int)json_integer_value(p);
    h->early_stopping_min_delta = d && json_is_number(d) ? json_number_value(d) : 0.0;
    return true;
}

/* The hyper-parameters beyond epochs, batch and rate (core/job_hyper.h),
 * but max_seq_len, whose bound is the model's context: control checks it
 * (control/job_draft.c). */
static bool parse_more_hyper(json_t *hp, bool dpo, struct job_hyper *h, struct field_error *err)
{
    double rank = h->lora_rank;
    if (!hyper_bool(hp, "packing", &h->packing, err) ||
        !hyper(hp, "lora_rank", false, 1, JOB_HYPER_MAX_RANK, &rank, err) ||
        !hyper(hp, "lora_alpha", true, 0, JOB_HYPER_MAX_ALPHA, &h->lora_alpha, err) ||
        !hyper_range(hp, "lora_dropout", 0, 1, &h->lora_dropout, err) ||
        !hyper_targets(hp, &h->lora_targets, err) ||
        !hyper_range(hp, "warmup_ratio", 0, JOB_HYPER_MAX_WARMUP, &h->warmup_ratio, err) ||
        !hyper_range(hp, "weight_decay", 0, JOB_HYPER_MAX_DECAY, &h->weight_decay, err) ||
        !hyper_bool(hp, "train_on_inputs", &h->train_on_inputs, err))
        return false;
    if (h->lora_dropout >= 1)
        return bad(err, ERR_INVALID, "hyperparameters.lora_dropout",
                   "lora_dropout must be at least 0 and below 1.");
    h->lora_rank = (int)rank;
    json_t *sch = json_object_get(hp, "lr_scheduler");
    if (sch && !json_is_null(sch) &&
        !(json_is_string(sch) && strcmp(json_string_value(sch), "auto") == 0) &&
        !job_hyper_schedule_parse(json_string_value(sch), &h->lr_schedule))
        return bad(err, ERR_INVALID, "hyperparameters.lr_scheduler",
                   "lr_scheduler must be \"cosine\", \"linear\" or \"constant\".");
    if (dpo && !hyper(hp, "beta", true, 0, JOB_HYPER_MAX_BETA, &h->dpo_beta, err))
        return false;
    if (!dpo && json_object_get(hp, "beta"))
        return bad(err, ERR_INVALID, "hyperparameters.beta",
                   "beta is a hyper-parameter of DPO (method.type \"dpo\").");
    return parse_watch(hp, h, err);
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

static bool parse_metadata(json_t *body, char *metadata /* OUT */, size_t cap,
                           struct field_error *err)
{
    json_t *md = json_object_get(body, "metadata");
    if (!md || json_is_null(md))
        return true;
    if (!json_is_object(md) || json_object_size(md) > 16)
        return bad(err, ERR_INVALID, "metadata",
                   "metadata must be an object of at most 16 string values.");
    const char *k;
    json_t *v;
    json_object_foreach(md, k, v)
    {
        if (strlen(k) > 64 || !json_is_string(v) || strlen(json_string_value(v)) > 512)
            return bad(err, ERR_INVALID, "metadata",
                       "metadata keys are at most 64 characters and values strings of at most "
                       "512.");
    }
    char *text = json_dumps(md, JSON_COMPACT | JSON_SORT_KEYS);
    bool fits = text && text_copy(metadata, cap, text);
    free(text);
    if (!fits)
        return bad(err, ERR_INVALID, "metadata", "metadata is too large.");
    return true;
}

/* The goal finish_by's deadline: an integer of Unix seconds, as the API's
 * other times are (created_at). Given alone it sets the goal; a goal
 * finish_by needs it, and another goal refuses it. */
static bool parse_finish_by(json_t *body, struct job_request *rq, struct field_error *err)
{
    json_t *v = json_object_get(body, "finish_by");
    bool given = v && !json_is_null(v);
    if (given && (!json_is_integer(v) || json_integer_value(v) <= 0 ||
                  json_integer_value(v) > JOB_FINISH_BY_MAX))
        return bad(err, ERR_INVALID, "finish_by",
                   "finish_by must be the deadline as an integer of Unix seconds, for example "
                   "1767225600 (2026-01-01 00:00 UTC).");
    if (!given && rq->goal && strcmp(rq->goal, "finish_by") == 0)
        return bad(err, ERR_INVALID, "finish_by",
                   "The goal \"finish_by\" needs finish_by: the deadline in Unix seconds.");
    if (given && rq->goal && strcmp(rq->goal, "finish_by") != 0)
        return bad(err, ERR_INVALID, "finish_by",
                   "finish_by is the deadline of the goal \"finish_by\"; leave it out for "
                   "the goal \"%s\".", rq->goal);
    if (given) {
        rq->finish_by = (int64_t)json_integer_value(v);
        rq->goal = "finish_by";
    }
    return true;
}

bool job_request_parse(json_t *body, struct job_request *rq)
{
    memset(rq, 0, sizeof *rq);
    struct field_error *err = &rq->err;

    err->at = JOB_AT_FIELDS;
    if (!opt_string(body, "model", &rq->model, err) ||
        !opt_string(body, "training_file", &rq->training_file, err) ||
        !opt_string(body, "validation_file", &rq->validation_file, err) ||
        !opt_string(body, "suffix", &rq->suffix, err) || !opt_string(body, "name", &rq->name, err) ||
        !opt_string(body, "precision", &rq->precision, err) ||
        !opt_string(body, "goal", &rq->goal, err) || !opt_string(body, "adapter", &rq->adapter, err))
        return false;
    if (!rq->model)
        return bad(err, ERR_INVALID, "model", "model is required.");
    if (!rq->training_file)
        return bad(err, ERR_INVALID, "training_file", "training_file is required.");
    if (strlen(rq->model) >= sizeof ((struct store_job *)0)->model)
        return bad(err, ERR_INVALID, "model", "model is too long.");

    /* Hyper-parameters: method.supervised.hyperparameters wins over the
     * older top-level hyperparameters, as in OpenAI's API. */
    err->at = JOB_AT_HYPER;
    json_t *hp = json_object_get(body, "hyperparameters");
    json_t *method = json_object_get(body, "method");
    bool dpo = false;
    if (method && !json_is_null(method)) {
        const char *type = json_string_value(json_object_get(method, "type"));
        if (!json_is_object(method) || !type)
            return bad(err, ERR_INVALID, "method", "method must be an object with a type.");
        if (strcmp(type, "supervised") != 0 && strcmp(type, "dpo") != 0)
            return bad(err, ERR_INVALID, "method.type",
                       "method.type must be \"supervised\" or \"dpo\".");
        dpo = strcmp(type, "dpo") == 0;
        json_t *sup = json_object_get(method, type);
        json_t *mhp = json_object_get(sup, "hyperparameters");
        if (mhp)
            hp = mhp;
    }
    rq->dpo = dpo;
    if (hp && !json_is_null(hp) && !json_is_object(hp))
        return bad(err, ERR_INVALID, "hyperparameters", "hyperparameters must be an object.");
    /* 0: "auto" or left out, chosen by control from the data set and the
     * model (sched/hyper.h). */
    if (!hyper(hp, "n_epochs", false, 1, 50, &rq->epochs, err) ||
        !hyper(hp, "batch_size", false, 1, 256, &rq->batch, err) ||
        !hyper(hp, "learning_rate_multiplier", true, 0, 10, &rq->lr, err))
        return false;
    json_t *seq = json_object_get(hp, "max_seq_len");
    if (seq && !json_is_null(seq) &&
        !(json_is_string(seq) && strcmp(json_string_value(seq), "auto") == 0)) {
        rq->seq_given = true;
        rq->seq_integer = json_is_integer(seq);
        rq->seq = json_number_value(seq);
    }

    err->at = JOB_AT_MORE_HYPER;
    struct job_hyper *more = &rq->more;
    job_hyper_defaults(more);
    if (!parse_more_hyper(hp, dpo, more, err))
        return false;
    if (more->early_stopping_patience > 0 && !rq->validation_file &&
        !(more->validation_split > 0))
        return bad(err, ERR_INVALID, "hyperparameters.early_stopping",
                   "early_stopping watches the validation loss: give a validation_file or a "
                   "validation_split.");
    if (dpo && more->validation_split > 0)
        return bad(err, ERR_INVALID, "hyperparameters.validation_split",
                   "DPO has no validation loss to watch: validation_split is for supervised "
                   "jobs.");
    if (dpo && more->early_stopping_patience > 0)
        return bad(err, ERR_INVALID, "hyperparameters.early_stopping",
                   "DPO has no validation loss to watch: early_stopping is for supervised "
                   "jobs.");

    err->at = JOB_AT_SETTINGS;
    const char *suffix = rq->suffix, *name = rq->name, *precision = rq->precision,
               *goal = rq->goal, *adapter = rq->adapter;
    if (suffix && !valid_suffix(suffix))
        return bad(err, ERR_INVALID, "suffix",
                   "suffix must be 1 to 40 letters, digits, '-' or '_'.");
    if (name && (strlen(name) == 0 || strlen(name) > 100))
        return bad(err, ERR_INVALID, "name", "name must be 1 to 100 characters.");
    if (name && text_has_control(name))
        return bad(err, ERR_INVALID, "name",
                   "name must not contain control characters (such as newlines or escapes).");
    if (precision && strcmp(precision, "16-bit") != 0 && strcmp(precision, "4-bit") != 0)
        return bad(err, ERR_INVALID, "precision", "precision must be \"16-bit\" or \"4-bit\".");
    if (goal && strcmp(goal, "lowest_cost") != 0 && strcmp(goal, "fastest_finish") != 0 &&
        strcmp(goal, "finish_by") != 0)
        return bad(err, ERR_INVALID, "goal",
                   "goal must be \"lowest_cost\", \"fastest_finish\" or \"finish_by\".");
    if (!parse_finish_by(body, rq, err))
        return false;
    if (adapter && strcmp(adapter, "lora") != 0 && strcmp(adapter, "full") != 0)
        return bad(err, ERR_INVALID, "adapter", "adapter must be \"lora\" or \"full\".");
    if (adapter && strcmp(adapter, "full") == 0 && precision && strcmp(precision, "4-bit") == 0)
        return bad(err, ERR_INVALID, "adapter",
                   "Full fine-tuning needs 16-bit precision; 4-bit trains LoRA adapters.");
    json_t *seed = json_object_get(body, "seed");
    if (seed && !json_is_null(seed)) {
        if (!json_is_integer(seed) || json_integer_value(seed) < 0 ||
            json_integer_value(seed) > 2147483647)
            return bad(err, ERR_INVALID, "seed", "seed must be an integer from 0 to 2147483647.");
        rq->seed_given = true;
        rq->seed = json_integer_value(seed);
    }
    if (!parse_metadata(body, rq->metadata, sizeof rq->metadata, err))
        return false;

    err->at = JOB_AT_INTEGRATIONS;
    char param[64], imsg[160], smsg[200];
    if (!integrations_parse(json_object_get(body, "integrations"), &rq->wandb, param,
                            sizeof param, imsg, sizeof imsg))
        return bad(err, ERR_INVALID, param, "%s", imsg);

    err->at = JOB_AT_SAMPLE_PROMPTS;
    json_t *v = json_object_get(body, "sample_prompts");
    if (!sample_prompts_check(v, param, sizeof param, smsg, sizeof smsg))
        return bad(err, ERR_INVALID, param, "%s", smsg);
    rq->sample_prompts = v;

    err->at = JOB_AT_MAX_STEPS;
    json_t *ms = json_object_get(body, "max_steps");
    if (ms && !json_is_null(ms)) {
        if (!json_is_integer(ms) || json_integer_value(ms) < 1 ||
            json_integer_value(ms) > 10000000)
            return bad(err, ERR_INVALID, "max_steps",
                       "max_steps must be an integer from 1 to 10000000.");
        rq->max_steps_given = true;
        rq->max_steps = (long)json_integer_value(ms);
    }
    err->at = JOB_AT_NONE;
    return true;
}

bool job_request_draft(struct api_server *srv, const struct http_request *req, json_t *body,
                       struct job_draft *out, struct http_response *res)
{
    struct job_request *rq = malloc(sizeof *rq); /* large: not on the stack */
    if (!rq) {
        api_error(res, ERR_NOMEM, NULL, NULL);
        return false;
    }
    (void)job_request_parse(body, rq); /* its error, if any, is control_job_draft's to order */
    struct field_error err;
    bool ok = control_job_draft(srv->ctl, req->account.id, rq, out, &err);
    free(rq);
    if (!ok)
        api_error(res, err.code, err.message, err.param[0] ? err.param : NULL);
    return ok;
}
