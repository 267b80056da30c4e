/* job_hyper.c - a job's further hyper-parameters as stored (job_hyper.h). */
#include "core/job_hyper.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const target_names[JOB_HYPER_TARGETS] = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
static const char *const schedule_names[JOB_LR_COUNT] = {"cosine", "linear", "constant"};

void job_hyper_defaults(struct job_hyper *h)
{
    memset(h, 0, sizeof *h);
    h->packing = true;
    h->lora_rank = 16;
    h->lora_alpha = 32.0;
    h->lora_targets = JOB_HYPER_ALL_TARGETS;
    h->lr_schedule = JOB_LR_COSINE;
    h->warmup_ratio = 0.05;
    h->dpo_beta = 0.1;
}

const char *job_hyper_target_name(int i)
{
    return i >= 0 && i < JOB_HYPER_TARGETS ? target_names[i] : NULL;
}

int job_hyper_target_parse(const char *name)
{
    for (int i = 0; name && i < JOB_HYPER_TARGETS; i++)
        if (strcmp(name, target_names[i]) == 0)
            return i;
    return -1;
}

const char *job_hyper_schedule_name(enum job_lr_schedule s)
{
    return (int)s >= 0 && s < JOB_LR_COUNT ? schedule_names[s] : NULL;
}

bool job_hyper_schedule_parse(const char *name, enum job_lr_schedule *out)
{
    for (int i = 0; name && i < JOB_LR_COUNT; i++)
        if (strcmp(name, schedule_names[i]) == 0) {
            *out = (enum job_lr_schedule)i;
            return true;
        }
    return false;
}

/* A number of o[key] within [lo, hi] into *out; anything else keeps it. */
static void num_in(json_t *o, const char *key, double lo, double hi, double *out)
{
    json_t *v = json_object_get(o, key);
    if (json_is_number(v) && isfinite(json_number_value(v)) && json_number_value(v) >= lo &&
        json_number_value(v) <= hi)
        *out = json_number_value(v);
}

void job_hyper_parse(const char *json, struct job_hyper *out)
{
    job_hyper_defaults(out);
    json_t *o = json && json[0] ? json_loads(json, 0, NULL) : NULL;
    if (!json_is_object(o)) {
        out->max_seq_len = JOB_HYPER_LEGACY_SEQ;
        out->packing = false;
        json_decref(o);
        return;
    }
    double seq = 0, rank = out->lora_rank;
    num_in(o, "max_seq_len", JOB_HYPER_MIN_SEQ, JOB_HYPER_MAX_SEQ, &seq);
    out->max_seq_len = seq > 0 ? (int)seq : JOB_HYPER_LEGACY_SEQ;
    if (json_is_boolean(json_object_get(o, "packing")))
        out->packing = json_is_true(json_object_get(o, "packing"));
    num_in(o, "lora_rank", 1, JOB_HYPER_MAX_RANK, &rank);
    out->lora_rank = (int)rank;
    num_in(o, "lora_alpha", 1e-9, JOB_HYPER_MAX_ALPHA, &out->lora_alpha);
    num_in(o, "lora_dropout", 0, 1, &out->lora_dropout);
    if (out->lora_dropout >= 1)
        out->lora_dropout = 0;
    json_t *t = json_object_get(o, "lora_target_modules");
    if (json_is_array(t) && json_array_size(t) > 0) {
        unsigned bits = 0;
        size_t i;
        json_t *v;
        json_array_foreach(t, i, v)
        {
            int b = job_hyper_target_parse(json_string_value(v));
            if (b >= 0)
                bits |= 1u << b;
        }
        if (bits)
            out->lora_targets = bits;
    }
    job_hyper_schedule_parse(json_string_value(json_object_get(o, "lr_scheduler")),
                             &out->lr_schedule);
    num_in(o, "warmup_ratio", 0, JOB_HYPER_MAX_WARMUP, &out->warmup_ratio);
    num_in(o, "weight_decay", 0, JOB_HYPER_MAX_DECAY, &out->weight_decay);
    if (json_is_boolean(json_object_get(o, "train_on_inputs")))
        out->train_on_inputs = json_is_true(json_object_get(o, "train_on_inputs"));
    num_in(o, "beta", 1e-9, JOB_HYPER_MAX_BETA, &out->dpo_beta);
    num_in(o, "validation_split", 0, JOB_HYPER_MAX_SPLIT, &out->validation_split);
    json_t *es = json_object_get(o, "early_stopping");
    double patience = 0;
    num_in(es, "patience", 0, JOB_HYPER_MAX_PATIENCE, &patience);
    out->early_stopping_patience = (int)patience;
    num_in(es, "min_delta", 0, JOB_HYPER_MAX_MIN_DELTA, &out->early_stopping_min_delta);
    json_t *rl = json_object_get(o, "reinforcement");
    if (json_is_object(rl)) {
        double cm = 1, every = 0, samples = 1;
        num_in(rl, "compute_multiplier", 1e-9, JOB_HYPER_MAX_COMPUTE, &cm);
        if (!job_hyper_rft(out, cm, json_string_value(json_object_get(rl, "reasoning_effort"))))
            job_hyper_rft(out, cm, NULL);
        num_in(rl, "eval_interval", 0, JOB_HYPER_MAX_EVAL_INTERVAL, &every);
        num_in(rl, "eval_samples", 1, JOB_HYPER_MAX_EVAL_SAMPLES, &samples);
        num_in(rl, "beta", 0, JOB_HYPER_MAX_BETA, &out->rft_kl);
        out->rft_eval_interval = (int)every;
        out->rft_eval_samples = (int)samples;
    }
    json_decref(o);
}

/* o as the stored text into out; false (out unchanged) when it does not fit. */
static bool dump_into(const json_t *o, char *out, size_t cap)
{
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    bool ok = s && strlen(s) < cap;
    if (ok)
        memcpy(out, s, strlen(s) + 1);
    free(s);
    return ok;
}

bool job_hyper_format(const struct job_hyper *h, bool dpo, char *out, size_t cap)
{
    json_t *t = json_array();
    for (int i = 0; i < JOB_HYPER_TARGETS; i++)
        if (h->lora_targets & (1u << i))
            json_array_append_new(t, json_string(target_names[i]));
    json_t *o = json_pack("{si sb si sf sf so ss sf sf sb}", "max_seq_len", h->max_seq_len,
                          "packing", h->packing, "lora_rank", h->lora_rank, "lora_alpha",
                          h->lora_alpha, "lora_dropout", h->lora_dropout,
                          "lora_target_modules", t, "lr_scheduler",
                          job_hyper_schedule_name(h->lr_schedule) ? job_hyper_schedule_name(
                                                                        h->lr_schedule)
                                                                  : "cosine",
                          "warmup_ratio", h->warmup_ratio, "weight_decay", h->weight_decay,
                          "train_on_inputs", h->train_on_inputs);
    if (o && dpo)
        json_object_set_new(o, "beta", json_real(h->dpo_beta));
    /* only when set, so that the object stays small for every other job */
    if (o && h->validation_split > 0)
        json_object_set_new(o, "validation_split", json_real(h->validation_split));
    if (o && h->early_stopping_patience > 0)
        json_object_set_new(o, "early_stopping",
                            json_pack("{si sf}", "patience", h->early_stopping_patience,
                                      "min_delta", h->early_stopping_min_delta));
    if (o && h->rft_group > 0)
        json_object_set_new(
            o, "reinforcement",
            json_pack("{sf si si ss sf si}", "compute_multiplier", h->rft_compute_multiplier,
                      "eval_interval", h->rft_eval_interval, "eval_samples", h->rft_eval_samples,
                      "reasoning_effort", h->rft_effort, "beta", h->rft_kl, "group_size",
                      h->rft_group));
    bool ok = o && dump_into(o, out, cap);
    json_decref(o);
    return ok;
}

bool job_hyper_rft(struct job_hyper *h, double compute_multiplier, const char *effort)
{
    static const char *const efforts[] = {"low", "medium", "high"};
    static const int tokens[] = {64, 128, 256};
    int e = 1;
    if (effort && strcmp(effort, "auto") != 0 && strcmp(effort, "default") != 0) {
        for (e = 0; e < 3 && strcmp(effort, efforts[e]) != 0; e++)
            ;
        if (e == 3)
            return false;
    }
    double cm = compute_multiplier > 0 ? compute_multiplier : 1;
    long g = lround(4 * cm);
    h->rft_compute_multiplier = cm;
    h->rft_group = (int)(g < 2 ? 2 : g > 32 ? 32 : g);
    h->rft_answer_tokens = tokens[e];
    snprintf(h->rft_effort, sizeof h->rft_effort, "%s", efforts[e]);
    if (h->rft_eval_samples < 1)
        h->rft_eval_samples = 1;
    return true;
}

bool job_hyper_set(char *hyper, size_t cap, const char *key, json_t *value)
{
    json_t *o = json_loads(hyper, 0, NULL);
    bool ok = json_is_object(o) && value && json_object_set(o, key, value) == 0 &&
              dump_into(o, hyper, cap);
    json_decref(value);
    json_decref(o);
    return ok;
}

double job_hyper_finish_by(const char *hyper)
{
    if (!hyper || !strstr(hyper, "\"finish_by\""))
        return 0; /* most jobs: no parse */
    json_t *o = json_loads(hyper, 0, NULL);
    json_t *v = json_object_get(o, "finish_by");
    double s = json_is_integer(v) && json_integer_value(v) > 0 ? (double)json_integer_value(v) : 0;
    json_decref(o);
    return s;
}

void job_hyper_grader_weights(const char *hyper, int64_t *params, int64_t *bytes)
{
    *params = *bytes = 0;
    if (!hyper || !strstr(hyper, "\"grader_weights\""))
        return; /* most jobs: no parse */
    json_t *o = json_loads(hyper, 0, NULL);
    json_t *w = json_object_get(o, "grader_weights");
    json_int_t p = json_integer_value(json_object_get(w, "params"));
    json_int_t b = json_integer_value(json_object_get(w, "bytes"));
    *params = p > 0 ? (int64_t)p : 0;
    *bytes = b > 0 ? (int64_t)b : 0;
    json_decref(o);
}

double job_hyper_python_answer_s(const char *hyper)
{
    if (!hyper || !strstr(hyper, "\"python_answer_s\""))
        return 0; /* most jobs: no parse */
    json_t *o = json_loads(hyper, 0, NULL);
    double s = json_number_value(json_object_get(o, "python_answer_s"));
    json_decref(o);
    return s > 0 && isfinite(s) ? s : 0;
}

long job_hyper_split_held_out(double split, long examples)
{
    if (!(split > 0))
        return 0;
    if (examples < 2)
        return -1;
    long k = (long)llround(split * (double)examples);
    return k < 1 ? 1 : k > examples - 1 ? examples - 1 : k;
}

long job_hyper_warmup_steps(const struct job_hyper *h, long max_steps)
{
    if (max_steps <= 0)
        return 0;
    return (long)ceil(h->warmup_ratio * (double)max_steps - 1e-9);
}

long job_hyper_rft_eval_every(const struct job_hyper *h, long max_steps)
{
    return h->rft_eval_interval > 0 ? h->rft_eval_interval : JOB_HYPER_RFT_EVAL_EVERY(max_steps);
}
