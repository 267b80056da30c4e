/* shapes.c - JSON shapes of jobs, files, events, checkpoints, ledger rows. */
#include "api/shapes.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "control/job_view.h"
#include "control/paths.h"
#include "api/jsonw.h"
#include "api/results_id.h"
#include "core/integrations.h"
#include "core/sample_prompts.h"
#include "core/job_hyper.h"
#include "core/text.h"
#include "core/worker_state.h"

/* Money is shown rounded to a hundredth of a cent. */
static json_t *money(double v) { return json_real(llround(v * 10000.0) / 10000.0); }

json_t *shape_list(json_t *data, bool has_more)
{
    if (!data)
        return NULL;
    size_t n = json_array_size(data);
    json_t *first = n ? json_object_get(json_array_get(data, 0), "id") : NULL;
    json_t *last = n ? json_object_get(json_array_get(data, n - 1), "id") : NULL;
    return json_pack("{s:s,s:o,s:b,s:O,s:O}", "object", "list", "data", data, "has_more",
                     has_more, "first_id", first ? first : json_null(), "last_id",
                     last ? last : json_null());
}

const char *shape_training_method(const struct store_job *j)
{
    if (strcmp(j->method, "dpo") == 0)
        return "Direct preference optimization (DPO)";
    if (strcmp(j->method, "reinforcement") == 0)
        return "Reinforcement fine-tuning (GRPO)";
    return "Supervised fine-tuning";
}

void shape_event_id(const struct store_job *j, int64_t seq, char *out, size_t cap)
{
    const char *dash = strchr(j->id, '-');
    text_printf(out, cap, "ftevent-%s-%" PRId64, dash ? dash + 1 : j->id, seq);
}

int64_t shape_event_seq(const struct store_job *j, const char *id)
{
    char prefix[IDS_MAX + 16];
    const char *dash = strchr(j->id, '-');
    text_printf(prefix, sizeof prefix, "ftevent-%s-", dash ? dash + 1 : j->id);
    size_t n = strlen(prefix);
    if (strncmp(id, prefix, n) != 0)
        return 0;
    char *end;
    long long v = strtoll(id + n, &end, 10);
    return (*end || v <= 0) ? 0 : (int64_t)v;
}

/* The error object of a failed job, or null. */
static void write_error(struct jsonw *w, const struct store_job *j)
{
    if (j->status != JOB_FAILED) {
        jsonw_null(w);
        return;
    }
    const char *code = "internal_error";
    const char *param = NULL;
    if (strncmp(j->message, "Training failed: ", 17) == 0) {
        code = "training_failed";
        param = "training_file";
    } else if (strncmp(j->message, "Not available right now.", 24) == 0) {
        code = "not_available";
        param = "model";
    } else if (strncmp(j->message, "Stopped: ", 9) == 0) {
        code = "stopped";
    }
    jsonw_open(w, '{');
    jsonw_key(w, "code");
    jsonw_str(w, code);
    jsonw_key(w, "message");
    jsonw_str(w, j->message);
    jsonw_key(w, "param");
    jsonw_str(w, param);
    jsonw_close(w, '}');
}

static void write_secs(struct jsonw *w, const char *key, int64_t ms)
{
    jsonw_key(w, key);
    if (ms > 0)
        jsonw_int(w, ms / 1000);
    else
        jsonw_null(w);
}

/* The job's integrations in OpenAI's shape (an empty array for none). */
static void write_integrations(struct jsonw *w, const struct store_job *j)
{
    struct job_wandb wb;
    integrations_from_hyper(j->hyper, &wb);
    jsonw_key(w, "integrations");
    jsonw_open(w, '[');
    if (wb.on) {
        jsonw_open(w, '{');
        jsonw_key(w, "type");
        jsonw_str(w, "wandb");
        jsonw_key(w, "wandb");
        jsonw_open(w, '{');
        jsonw_key(w, "project");
        jsonw_str(w, wb.project);
        jsonw_key(w, "name");
        jsonw_str_or_null(w, wb.name);
        jsonw_key(w, "entity");
        jsonw_str_or_null(w, wb.entity);
        jsonw_key(w, "tags");
        jsonw_open(w, '[');
        for (int i = 0; i < wb.n_tags; i++)
            jsonw_str(w, wb.tags[i]);
        jsonw_close(w, ']');
        jsonw_close(w, '}');
        jsonw_close(w, '}');
    }
    jsonw_close(w, ']');
}

static void write_hyper(struct jsonw *w, const struct store_job *j)
{
    jsonw_open(w, '{');
    jsonw_key(w, "n_epochs");
    jsonw_int(w, j->n_epochs);
    jsonw_key(w, "batch_size");
    jsonw_int(w, j->batch_size);
    jsonw_key(w, "learning_rate_multiplier");
    jsonw_num(w, j->lr_multiplier);
    struct job_hyper h;
    job_hyper_parse(j->hyper, &h);
    jsonw_key(w, "max_seq_len");
    jsonw_int(w, h.max_seq_len);
    jsonw_key(w, "packing");
    jsonw_bool(w, h.packing);
    if (strcmp(j->adapter, "full") != 0) {
        jsonw_key(w, "lora_rank");
        jsonw_int(w, h.lora_rank);
        jsonw_key(w, "lora_alpha");
        jsonw_num(w, h.lora_alpha);
        jsonw_key(w, "lora_dropout");
        jsonw_num(w, h.lora_dropout);
        jsonw_key(w, "lora_target_modules");
        jsonw_open(w, '[');
        for (int i = 0; i < JOB_HYPER_TARGETS; i++)
            if (h.lora_targets & (1u << i))
                jsonw_str(w, job_hyper_target_name(i));
        jsonw_close(w, ']');
    }
    jsonw_key(w, "lr_scheduler");
    jsonw_str(w, job_hyper_schedule_name(h.lr_schedule));
    jsonw_key(w, "warmup_ratio");
    jsonw_num(w, h.warmup_ratio);
    jsonw_key(w, "weight_decay");
    jsonw_num(w, h.weight_decay);
    jsonw_key(w, "train_on_inputs");
    jsonw_bool(w, h.train_on_inputs);
    if (strcmp(j->method, "dpo") == 0) {
        jsonw_key(w, "beta");
        jsonw_num(w, h.dpo_beta);
    }
    if (h.rft_group > 0) { /* reinforcement (docs/rft.md) */
        jsonw_key(w, "beta");
        jsonw_num(w, h.rft_kl);
        jsonw_key(w, "eval_interval");
        if (h.rft_eval_interval > 0)
            jsonw_int(w, h.rft_eval_interval);
        else
            jsonw_str(w, "auto");
        jsonw_key(w, "eval_samples");
        jsonw_int(w, h.rft_eval_samples);
        jsonw_key(w, "compute_multiplier");
        jsonw_num(w, h.rft_compute_multiplier);
        jsonw_key(w, "reasoning_effort");
        jsonw_str(w, h.rft_effort);
        jsonw_key(w, "group_size");
        jsonw_int(w, h.rft_group);
    }
    if (h.validation_split > 0) {
        jsonw_key(w, "validation_split");
        jsonw_num(w, h.validation_split);
    }
    if (h.early_stopping_patience > 0) {
        jsonw_key(w, "early_stopping");
        jsonw_open(w, '{');
        jsonw_key(w, "patience");
        jsonw_int(w, h.early_stopping_patience);
        jsonw_key(w, "min_delta");
        jsonw_num(w, h.early_stopping_min_delta);
        jsonw_close(w, '}');
    }
    jsonw_close(w, '}');
}

/* A reinforcement job's grader as given (null when it has none). */
static void write_grader(struct jsonw *w, const struct store_job *j)
{
    json_t *o = json_loads(j->hyper, 0, NULL);
    char *g = json_dumps(json_object_get(o, "grader"), JSON_COMPACT | JSON_PRESERVE_ORDER);
    jsonw_key(w, "grader");
    if (g)
        jsonw_json(w, g);
    else
        jsonw_null(w);
    free(g);
    json_decref(o);
}

/* The job's own sample prompts as given (an empty array for none). */
static void write_sample_prompts(struct jsonw *w, const struct store_job *j)
{
    json_t *v = sample_prompts_from_hyper(j->hyper);
    char *text = v ? json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    jsonw_key(w, "sample_prompts");
    jsonw_json(w, text ? text : "[]");
    free(text);
    json_decref(v);
}

static void write_money(struct jsonw *w, const char *key, double v)
{
    jsonw_key(w, key);
    jsonw_num(w, (double)llround(v * 10000.0) / 10000.0);
}

void shape_job_write(struct jsonw *w, const struct store_job *j,
                     const struct store_attempt *attempts, int n_attempts, int64_t now_ms)
{
    jsonw_open(w, '{');
    jsonw_key(w, "object");
    jsonw_str(w, "fine_tuning.job");
    jsonw_key(w, "id");
    jsonw_str(w, j->id);
    jsonw_key(w, "name");
    jsonw_str(w, j->name);
    jsonw_key(w, "model");
    jsonw_str(w, j->model);
    jsonw_key(w, "created_at");
    jsonw_int(w, j->created_ms / 1000);
    write_secs(w, "started_at", j->started_ms);
    write_secs(w, "finished_at", j->finished_ms);
    jsonw_key(w, "fine_tuned_model");
    jsonw_str_or_null(w, j->fine_tuned_model);
    jsonw_key(w, "organization_id");
    jsonw_str(w, j->account);
    jsonw_key(w, "result_files");
    jsonw_open(w, '[');
    char results[IDS_MAX];
    if (results_file_id(j, results, sizeof results))
        jsonw_str(w, results);
    jsonw_close(w, ']');
    jsonw_key(w, "status");
    jsonw_str(w, job_status_name(j->status));
    jsonw_key(w, "message");
    jsonw_str_or_null(w, control_job_message(j, now_ms));
    /* Beside the message, not in it (the help page's words stay exact):
     * why the engine (Slurm) holds the job's attempt pending. */
    const char *engine_reason = NULL;
    for (int i = 0; i < n_attempts; i++)
        if (strcmp(attempts[i].id, j->active_attempt) == 0 &&
            engine_state_of(attempts[i].engine_state) != ENGINE_STATE_RUNNING &&
            attempts[i].engine_reason[0])
            engine_reason = attempts[i].engine_reason;
    jsonw_key(w, "engine_reason");
    jsonw_str_or_null(w, engine_reason);
    jsonw_key(w, "training_file");
    jsonw_str(w, j->training_file);
    jsonw_key(w, "validation_file");
    jsonw_str_or_null(w, j->validation_file);
    jsonw_key(w, "hyperparameters");
    write_hyper(w, j);
    jsonw_key(w, "method");
    jsonw_open(w, '{');
    jsonw_key(w, "type");
    jsonw_str(w, j->method);
    bool rft = strcmp(j->method, "reinforcement") == 0;
    jsonw_key(w, strcmp(j->method, "dpo") == 0 ? "dpo" : rft ? "reinforcement" : "supervised");
    jsonw_open(w, '{');
    jsonw_key(w, "hyperparameters");
    write_hyper(w, j);
    if (rft)
        write_grader(w, j);
    jsonw_close(w, '}');
    jsonw_close(w, '}');
    jsonw_key(w, "trained_tokens");
    if (j->status == JOB_SUCCEEDED)
        jsonw_int(w, j->trained_tokens);
    else
        jsonw_null(w);
    jsonw_key(w, "error");
    write_error(w, j);
    jsonw_key(w, "user_provided_suffix");
    jsonw_str_or_null(w, j->suffix);
    jsonw_key(w, "seed");
    jsonw_int(w, j->seed);

    struct job_view v;
    control_job_view(j, now_ms, &v);
    jsonw_key(w, "estimated_finish");
    if (v.has_time_left)
        jsonw_int(w, v.estimated_finish_s);
    else
        jsonw_null(w);
    write_integrations(w, j);
    write_sample_prompts(w, j);
    jsonw_key(w, "metadata");
    jsonw_json(w, j->metadata);
    jsonw_key(w, "precision");
    jsonw_str(w, j->precision);
    jsonw_key(w, "goal");
    jsonw_str(w, j->goal);
    /* the goal finish_by's deadline, Unix seconds; null for the others */
    jsonw_key(w, "finish_by");
    double finish_by = job_hyper_finish_by(j->hyper);
    if (finish_by > 0)
        jsonw_int(w, (int64_t)finish_by);
    else
        jsonw_null(w);
    jsonw_key(w, "adapter");
    jsonw_str(w, j->adapter);
    jsonw_key(w, "training_method");
    jsonw_str(w, shape_training_method(j));
    jsonw_key(w, "progress");
    jsonw_open(w, '{');
    jsonw_key(w, "steps_done");
    jsonw_int(w, j->steps_done);
    jsonw_key(w, "max_steps");
    jsonw_int(w, j->max_steps);
    jsonw_key(w, "percent");
    jsonw_int(w, job_progress_percent(j->steps_done, j->max_steps, j->status));
    jsonw_close(w, '}');
    jsonw_key(w, "time_left");
    if (v.has_time_left) {
        jsonw_open(w, '{');
        jsonw_key(w, "low_s");
        jsonw_num(w, v.time_left_low_s);
        jsonw_key(w, "high_s");
        jsonw_num(w, v.time_left_high_s);
        jsonw_key(w, "text");
        jsonw_str(w, v.time_left_text);
        jsonw_key(w, "basis");
        jsonw_str(w, v.time_left_basis);
        jsonw_close(w, '}');
    } else {
        jsonw_null(w);
    }
    jsonw_key(w, "estimate");
    jsonw_json(w, j->estimate); /* stored as the API shows it */
    jsonw_key(w, "price");
    jsonw_open(w, '{');
    write_money(w, "charged", j->price_charged);
    write_money(w, "refunded", j->price_refunded);
    write_money(w, "cancel_now", v.cancel_now);
    jsonw_key(w, "currency");
    jsonw_str(w, SHAPES_CURRENCY);
    jsonw_close(w, '}');
    jsonw_key(w, "attempts");
    jsonw_open(w, '[');
    for (int i = 0; i < n_attempts; i++) {
        const struct store_attempt *a = &attempts[i];
        jsonw_open(w, '{');
        jsonw_key(w, "id");
        jsonw_str(w, a->id);
        jsonw_key(w, "worker");
        jsonw_str(w, a->worker);
        jsonw_key(w, "status");
        jsonw_str(w, a->status);
        jsonw_key(w, "start_step");
        jsonw_int(w, a->start_step);
        jsonw_key(w, "end_step");
        jsonw_int(w, a->end_step);
        jsonw_key(w, "reason");
        jsonw_str_or_null(w, a->reason);
        write_secs(w, "started_at", a->started_ms);
        write_secs(w, "ended_at", a->ended_ms);
        if (a->engine_state[0]) {
            jsonw_key(w, "engine");
            jsonw_open(w, '{');
            jsonw_key(w, "state");
            jsonw_str(w, a->engine_state);
            jsonw_key(w, "job_id");
            jsonw_str_or_null(w, a->engine_id);
            jsonw_key(w, "reason");
            jsonw_str_or_null(w, a->engine_reason);
            jsonw_key(w, "node");
            jsonw_str_or_null(w, a->node);
            write_secs(w, "running_at", a->engine_running_ms);
            jsonw_key(w, "resume_from");
            jsonw_str_or_null(w, a->resume_from);
            jsonw_close(w, '}');
        }
        jsonw_close(w, '}');
    }
    jsonw_close(w, ']');
    jsonw_close(w, '}');
}

json_t *shape_job(const struct store_job *j, const struct store_attempt *attempts, int n_attempts,
                  int64_t now_ms)
{
    struct jsonw w = {0};
    shape_job_write(&w, j, attempts, n_attempts, now_ms);
    json_t *o = w.b.err ? NULL : json_loadb(w.b.p, w.b.len, 0, NULL);
    jsonw_free(&w);
    return o;
}

json_t *shape_file(const struct store_file *f)
{
    json_t *o = json_pack("{s:s,s:s,s:I,s:I,s:s,s:s,s:s,s:n,s:I}", "object", "file", "id", f->id,
                     "bytes", (json_int_t)f->bytes, "created_at", (json_int_t)(f->created_ms / 1000),
                     "filename", f->filename, "purpose", f->purpose, "status", "processed",
                     "status_details", "examples", (json_int_t)f->examples);
    if (o && f->format[0])
        json_object_set_new(o, "format", json_string(f->format));
    if (o && f->converted_from[0])
        json_object_set_new(o, "converted_from", json_string(f->converted_from));
    return o;
}

json_t *shape_event(const struct store_job *j, const struct store_event *e)
{
    char id[IDS_MAX + 32];
    shape_event_id(j, e->seq, id, sizeof id);
    json_t *data = e->data[0] ? json_loads(e->data, 0, NULL) : NULL;
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:s}", "object", "fine_tuning.job.event", "id", id,
                     "created_at", (json_int_t)(e->created_ms / 1000), "level", e->level,
                     "message", e->message, "data", data ? data : json_object(), "type", e->type);
}

json_t *shape_checkpoint(const struct store_job *j, const struct store_checkpoint *c)
{
    char id[IDS_MAX + 32], model[512];
    const char *dash = strchr(j->id, '-');
    text_printf(id, sizeof id, "ftckpt-%s-%ld", dash ? dash + 1 : j->id, c->step);
    char base[300];
    control_fine_tuned_model_name(j, base, sizeof base);
    text_printf(model, sizeof model, "%s:ckpt-step-%ld", base, c->step);
    json_t *o = json_pack("{s:s,s:s,s:I,s:s,s:s,s:{s:I,s:f},s:I}", "object",
                          "fine_tuning.job.checkpoint", "id", id, "created_at",
                          (json_int_t)(c->created_ms / 1000), "fine_tuned_model_checkpoint", model,
                          "fine_tuning_job_id", j->id, "metrics", "step", (json_int_t)c->step,
                          "train_loss", c->train_loss, "step_number", (json_int_t)c->step);
    /* The validation metrics the trainer measured by this step, by
     * OpenAI's names (docs/api.md, "Metrics"). */
    json_t *more = c->metrics[0] ? json_loads(c->metrics, 0, NULL) : NULL;
    if (o && json_is_object(more))
        json_object_update(json_object_get(o, "metrics"), more);
    json_decref(more);
    /* A download only while its files are kept. */
    struct stat st;
    char url[IDS_MAX + 96];
    if (o && stat(c->path, &st) == 0 &&
        text_printf(url, sizeof url, "/v1/fine_tuning/jobs/%s/checkpoints/%ld/content", j->id,
                    c->step))
        json_object_set_new(o, "download_url", json_string(url));
    return o;
}

json_t *shape_ledger_row(const struct store_ledger_row *r)
{
    char id[40];
    text_printf(id, sizeof id, "ledger-%" PRId64, r->seq);
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:o,s:s,s:I,s:I,s:I,s:I,s:o}", "object",
                     "ledger.entry", "id", id, "job", r->job, "attempt", r->attempt, "kind",
                     r->kind, "amount", money(r->amount), "currency", SHAPES_CURRENCY, "steps",
                     (json_int_t)r->steps, "from_step", (json_int_t)r->from_step, "to_step",
                     (json_int_t)r->to_step, "created_at", (json_int_t)(r->created_ms / 1000),
                     "reason", r->reason[0] ? json_string(r->reason) : json_null());
}
