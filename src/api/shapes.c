/* shapes.c - JSON shapes of jobs, files, events, checkpoints, ledger rows. */
#include "api/shapes.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/estimate_provisional.h"
#include "core/text.h"

static json_t *str_or_null(const char *s) { return s && s[0] ? json_string(s) : json_null(); }

static json_t *secs_or_null(int64_t ms) { return ms > 0 ? json_integer(ms / 1000) : json_null(); }

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
    (void)j;
    return "Supervised fine-tuning";
}

void shape_fine_tuned_model_name(const struct store_job *j, char *out, size_t cap)
{
    const char *dash = strchr(j->id, '-');
    text_printf(out, cap, "ft:%s:%s:%s", j->model, j->suffix[0] ? j->suffix : "alallo",
                dash ? dash + 1 : j->id);
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
static json_t *job_error(const struct store_job *j)
{
    if (j->status != JOB_FAILED)
        return json_null();
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
    return json_pack("{s:s,s:s,s:o}", "code", code, "message", j->message, "param",
                     str_or_null(param));
}

static double num(json_t *obj, const char *a, const char *b)
{
    return json_number_value(json_object_get(json_object_get(obj, a), b));
}

json_t *shape_job(const struct store_job *j, const struct store_attempt *attempts, int n_attempts,
                  int64_t now_ms)
{
    json_t *estimate = j->estimate[0] ? json_loads(j->estimate, 0, NULL) : NULL;
    json_t *hp = json_pack("{s:i,s:i,s:f}", "n_epochs", j->n_epochs, "batch_size", j->batch_size,
                           "learning_rate_multiplier", j->lr_multiplier);
    json_t *metadata = j->metadata[0] ? json_loads(j->metadata, 0, NULL) : NULL;

    json_t *time_left = json_null();
    double low, high;
    const char *basis;
    int64_t estimated_finish = 0;
    if (time_left_provisional(j, num(estimate, "training", "low_s"),
                              num(estimate, "training", "high_s"), num(estimate, "time", "low_s"),
                              num(estimate, "time", "high_s"), now_ms, &low, &high, &basis)) {
        char text[64];
        job_time_left_range_text(text, sizeof text, low, high);
        time_left = json_pack("{s:I,s:I,s:s,s:s}", "low_s", (json_int_t)llround(low), "high_s",
                              (json_int_t)llround(high), "text", text, "basis", basis);
        estimated_finish = now_ms / 1000 + (int64_t)llround(high);
    }

    json_t *atts = json_array();
    for (int i = 0; i < n_attempts && atts; i++) {
        const struct store_attempt *a = &attempts[i];
        json_array_append_new(
            atts, json_pack("{s:s,s:s,s:s,s:I,s:I,s:o,s:o,s:o}", "id", a->id, "worker", a->worker,
                            "status", a->status, "start_step", (json_int_t)a->start_step,
                            "end_step", (json_int_t)a->end_step, "reason", str_or_null(a->reason),
                            "started_at", secs_or_null(a->started_ms), "ended_at",
                            secs_or_null(a->ended_ms)));
    }

    json_t *o = json_object();
    if (!o || !hp || !atts) {
        json_decref(o);
        json_decref(hp);
        json_decref(atts);
        json_decref(estimate);
        json_decref(metadata);
        json_decref(time_left);
        return NULL;
    }
    json_object_set_new(o, "object", json_string("fine_tuning.job"));
    json_object_set_new(o, "id", json_string(j->id));
    json_object_set_new(o, "name", json_string(j->name));
    json_object_set_new(o, "model", json_string(j->model));
    json_object_set_new(o, "created_at", json_integer(j->created_ms / 1000));
    json_object_set_new(o, "started_at", secs_or_null(j->started_ms));
    json_object_set_new(o, "finished_at", secs_or_null(j->finished_ms));
    json_object_set_new(o, "fine_tuned_model", str_or_null(j->fine_tuned_model));
    json_object_set_new(o, "organization_id", json_string(j->account));
    json_object_set_new(o, "result_files", json_array());
    json_object_set_new(o, "status", json_string(job_status_name(j->status)));
    json_object_set_new(o, "message", str_or_null(j->message));
    json_object_set_new(o, "training_file", json_string(j->training_file));
    json_object_set_new(o, "validation_file", str_or_null(j->validation_file));
    json_object_set_new(o, "hyperparameters", json_deep_copy(hp));
    json_object_set_new(o, "method",
                        json_pack("{s:s,s:{s:o}}", "type", j->method, "supervised",
                                  "hyperparameters", hp));
    json_object_set_new(o, "trained_tokens",
                        j->status == JOB_SUCCEEDED ? json_integer(j->trained_tokens) : json_null());
    json_object_set_new(o, "error", job_error(j));
    json_object_set_new(o, "user_provided_suffix", str_or_null(j->suffix));
    json_object_set_new(o, "seed", json_integer(j->seed));
    json_object_set_new(o, "estimated_finish",
                        estimated_finish ? json_integer(estimated_finish) : json_null());
    json_object_set_new(o, "integrations", json_array());
    json_object_set_new(o, "metadata", metadata ? metadata : json_null());
    json_object_set_new(o, "precision", json_string(j->precision));
    json_object_set_new(o, "goal", json_string(j->goal));
    json_object_set_new(o, "adapter", json_string(j->adapter));
    json_object_set_new(o, "training_method", json_string(shape_training_method(j)));
    json_object_set_new(o, "progress",
                        json_pack("{s:I,s:I,s:i}", "steps_done", (json_int_t)j->steps_done,
                                  "max_steps", (json_int_t)j->max_steps, "percent",
                                  job_progress_percent(j->steps_done, j->max_steps, j->status)));
    json_object_set_new(o, "time_left", time_left);
    json_object_set_new(o, "estimate", estimate ? estimate : json_null());
    json_object_set_new(o, "price",
                        json_pack("{s:o,s:o,s:s}", "charged", money(j->price_charged), "refunded",
                                  money(j->price_refunded), "currency", SHAPES_CURRENCY));
    json_object_set_new(o, "attempts", atts);
    return o;
}

json_t *shape_file(const struct store_file *f)
{
    return json_pack("{s:s,s:s,s:I,s:I,s:s,s:s,s:s,s:n,s:I}", "object", "file", "id", f->id,
                     "bytes", (json_int_t)f->bytes, "created_at", (json_int_t)(f->created_ms / 1000),
                     "filename", f->filename, "purpose", f->purpose, "status", "processed",
                     "status_details", "examples", (json_int_t)f->examples);
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
    shape_fine_tuned_model_name(j, base, sizeof base);
    text_printf(model, sizeof model, "%s:ckpt-step-%ld", base, c->step);
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:{s:I,s:f},s:I}", "object",
                     "fine_tuning.job.checkpoint", "id", id, "created_at",
                     (json_int_t)(c->created_ms / 1000), "fine_tuned_model_checkpoint", model,
                     "fine_tuning_job_id", j->id, "metrics", "step", (json_int_t)c->step,
                     "train_loss", c->train_loss, "step_number", (json_int_t)c->step);
}

json_t *shape_ledger_row(const struct store_ledger_row *r)
{
    char id[40];
    text_printf(id, sizeof id, "ledger-%" PRId64, r->seq);
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:o,s:s,s:I,s:I}", "object", "ledger.entry", "id", id,
                     "job", r->job, "attempt", r->attempt, "kind", r->kind, "amount",
                     money(r->amount), "currency", SHAPES_CURRENCY, "steps", (json_int_t)r->steps,
                     "created_at", (json_int_t)(r->created_ms / 1000));
}
