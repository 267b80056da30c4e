/* train_config.c - ATTEMPT.json parsing and validation (train_config.h). */
#include "train/run/train_config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/grader.h"
#include "core/sample_prompts.h"
#include "train/model/model.h"
#include "train/model/optim.h"

static int get_str(json_t *o, const char *key, int required, char *dst, size_t cap, char *err,
                   size_t errcap)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) {
            snprintf(err, errcap, "settings: missing field \"%s\"", key);
            return -1;
        }
        return 0;
    }
    const char *s = json_string_value(v);
    if (!s || !*s || strlen(s) >= cap) {
        snprintf(err, errcap, "settings: field \"%s\" must be a non-empty string under %zu bytes",
                 key, cap);
        return -1;
    }
    snprintf(dst, cap, "%s", s);
    return 0;
}

/* A whole number in [lo, hi]; absent keeps *out. */
static int get_uint(json_t *o, const char *key, int required, uint64_t lo, uint64_t hi,
                    uint64_t *out, char *err, size_t errcap)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) {
            snprintf(err, errcap, "settings: missing field \"%s\"", key);
            return -1;
        }
        return 0;
    }
    double d = json_is_integer(v) ? (double)json_integer_value(v)
               : json_is_real(v)  ? json_real_value(v)
                                  : -1.0;
    if (!json_is_number(v) || d != (double)(uint64_t)d || d < (double)lo || d > (double)hi) {
        snprintf(err, errcap, "settings: field \"%s\" must be an integer from %llu to %llu", key,
                 (unsigned long long)lo, (unsigned long long)hi);
        return -1;
    }
    *out = (uint64_t)d;
    return 0;
}

/* sample_prompts: checked as the API checks them, kept as JSON text. */
static int get_sample_prompts(json_t *o, struct train_config *c, char *err, size_t errcap)
{
    json_t *v = json_object_get(o, "sample_prompts");
    char param[64], msg[200];
    if (!sample_prompts_check(v, param, sizeof param, msg, sizeof msg)) {
        snprintf(err, errcap, "settings: %s", msg);
        return -1;
    }
    if (!v || json_is_null(v))
        return 0;
    char *text = json_dumps(v, JSON_COMPACT);
    if (!text || strlen(text) >= sizeof c->sample_prompts) {
        free(text);
        snprintf(err, errcap, "settings: field \"sample_prompts\" must be under %zu bytes",
                 sizeof c->sample_prompts);
        return -1;
    }
    memcpy(c->sample_prompts, text, strlen(text) + 1);
    free(text);
    return 0;
}

static int get_int(json_t *o, const char *key, int required, int lo, int hi, int *out,
                   char *err, size_t errcap)
{
    uint64_t v = (uint64_t)*out;
    if (get_uint(o, key, required, (uint64_t)lo, (uint64_t)hi, &v, err, errcap))
        return -1;
    *out = (int)v;
    return 0;
}

static int get_num(json_t *o, const char *key, double lo, double hi, double *out, char *err,
                   size_t errcap)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    double d = json_is_number(v) ? json_number_value(v) : -1e300;
    if (!(d >= lo && d <= hi)) {
        snprintf(err, errcap, "settings: field \"%s\" must be a number from %g to %g", key, lo,
                 hi);
        return -1;
    }
    *out = d;
    return 0;
}


/* Reinforcement fine-tuning's settings (docs/trainer-protocol.md): the
 * grader (checked as the API checks it), the folders of its models, and
 * the sampling. */
static int get_rft(json_t *o, struct train_config *c, char *err, size_t errcap)
{
    json_t *g = json_object_get(o, "grader");
    char param[256], msg[400];
    if (!g) {
        snprintf(err, errcap, "settings: reinforcement needs a \"grader\"");
        return -1;
    }
    if (!grader_check(g, "grader", param, sizeof param, msg, sizeof msg)) {
        snprintf(err, errcap, "settings: field \"%s\": %s", param, msg);
        return -1;
    }
    char *gt = json_dumps(g, JSON_COMPACT);
    json_t *gm = json_object_get(o, "grader_models");
    char *mt = json_dumps(gm ? gm : json_object(), JSON_COMPACT);
    int fits = gt && mt && strlen(gt) < sizeof c->rft_grader && strlen(mt) < sizeof c->rft_models;
    if (fits) {
        memcpy(c->rft_grader, gt, strlen(gt) + 1);
        memcpy(c->rft_models, mt, strlen(mt) + 1);
    }
    free(gt);
    free(mt);
    if (!fits) {
        snprintf(err, errcap, "settings: the grader is too large");
        return -1;
    }
    double kl = 0;
    c->rft_group = 4;
    c->rft_answer_tokens = 128;
    c->rft_eval_samples = 1;
    if (get_int(o, "rft_group", 0, 2, 64, &c->rft_group, err, errcap) ||
        get_int(o, "rft_answer_tokens", 0, 1, 4096, &c->rft_answer_tokens, err, errcap) ||
        get_int(o, "rft_eval_interval", 0, 0, 100000000, &c->rft_eval_interval, err, errcap) ||
        get_int(o, "rft_eval_samples", 0, 1, 64, &c->rft_eval_samples, err, errcap) ||
        get_num(o, "rft_kl", 0.0, 100.0, &kl, err, errcap))
        return -1;
    c->rft_kl = kl;
    return 0;
}

static int parse_lora(json_t *o, struct train_config *c, char *err, size_t errcap)
{
    json_t *l = json_object_get(o, "lora");
    if (!l || json_is_null(l))
        return 0;
    if (!json_is_object(l)) {
        snprintf(err, errcap, "settings: field \"lora\" must be an object");
        return -1;
    }
    double alpha = c->lora_alpha, dropout = 0.0;
    if (get_int(l, "r", 0, 1, 1024, &c->lora_r, err, errcap) ||
        get_num(l, "alpha", 1e-6, 1e6, &alpha, err, errcap) ||
        get_num(l, "dropout", 0.0, 1.0, &dropout, err, errcap))
        return -1;
    if (dropout >= 1.0) {
        snprintf(err, errcap, "settings: lora.dropout must be below 1");
        return -1;
    }
    c->lora_alpha = (float)alpha;
    c->lora_dropout = (float)dropout;
    json_t *t = json_object_get(l, "targets");
    if (!t || json_is_null(t))
        return 0;
    if (!json_is_array(t) || json_array_size(t) == 0) {
        snprintf(err, errcap, "settings: lora.targets must be a non-empty list");
        return -1;
    }
    unsigned mask = 0;
    size_t i;
    json_t *v;
    json_array_foreach(t, i, v)
    {
        const char *s = json_string_value(v);
        int p = s ? model_proj_parse(s) : -1;
        if (p < 0) {
            snprintf(err, errcap,
                     "settings: lora target \"%.40s\" is not one of q_proj, k_proj, v_proj, "
                     "o_proj, gate_proj, up_proj, down_proj",
                     s ? s : "?");
            return -1;
        }
        mask |= 1u << p;
    }
    c->lora_targets = mask;
    return 0;
}

int train_config_parse(const char *text, struct train_config *c, char *err, size_t errcap)
{
    memset(c, 0, sizeof *c);
    json_error_t je;
    json_t *o = json_loads(text, 0, &je);
    if (!o || !json_is_object(o)) {
        snprintf(err, errcap, "settings: not a JSON object (line %d: %s)", je.line, je.text);
        json_decref(o);
        return -1;
    }
    int rc = -1;
    char precision[16] = "16-bit", adapter[16] = "lora", sched[16] = "cosine";
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    c->lora_r = 16;
    c->lora_alpha = 32.0f;
    c->lora_targets = MODEL_ALL_PROJ;
    c->n_epochs = 1;
    c->batch_size = 4;
    c->seq_len = 512;
    c->threads = cpus > 0 ? (int)cpus : 1;
    c->max_grad_norm = 1.0f;
    c->keep_checkpoints = 3;
    c->packing = 1;
    c->valid_every_steps = 10;
    double lr = -1.0, every_s = 0.0, wd = 0.0, clip = 1.0;
    uint64_t warm = UINT64_MAX, resume = UINT64_MAX;
    if (get_str(o, "model_dir", 1, c->model_dir, sizeof c->model_dir, err, errcap) ||
        get_str(o, "train_file", 1, c->train_file, sizeof c->train_file, err, errcap) ||
        get_str(o, "train_file_name", 0, c->train_file_name, sizeof c->train_file_name, err,
                errcap) ||
        get_str(o, "validation_file", 0, c->validation_file, sizeof c->validation_file, err,
                errcap) ||
        get_str(o, "checkpoint_dir", 1, c->checkpoint_dir, sizeof c->checkpoint_dir, err,
                errcap) ||
        get_str(o, "out_dir", 1, c->out_dir, sizeof c->out_dir, err, errcap) ||
        get_str(o, "resume_from", 0, c->resume_from, sizeof c->resume_from, err, errcap) ||
        get_str(o, "precision", 0, precision, sizeof precision, err, errcap) ||
        get_str(o, "adapter", 0, adapter, sizeof adapter, err, errcap) ||
        get_str(o, "lr_schedule", 0, sched, sizeof sched, err, errcap))
        goto out;
    if (strcmp(precision, "16-bit") != 0 && strcmp(precision, "4-bit") != 0) {
        snprintf(err, errcap, "settings: precision must be \"16-bit\" or \"4-bit\"");
        goto out;
    }
    if (strcmp(adapter, "lora") != 0 && strcmp(adapter, "full") != 0) {
        snprintf(err, errcap, "settings: adapter must be \"lora\" or \"full\"");
        goto out;
    }
    c->four_bit = strcmp(precision, "4-bit") == 0;
    c->full = strcmp(adapter, "full") == 0;
    if (c->four_bit && c->full) {
        snprintf(err, errcap, "settings: full fine-tuning needs precision \"16-bit\"");
        goto out;
    }
    c->lr_schedule = optim_lr_kind_parse(sched);
    if (c->lr_schedule < 0) {
        snprintf(err, errcap, "settings: lr_schedule must be cosine, linear or constant");
        goto out;
    }
    if (parse_lora(o, c, err, errcap) ||
        get_int(o, "n_epochs", 0, 1, 1000, &c->n_epochs, err, errcap) ||
        get_int(o, "batch_size", 0, 1, 1024, &c->batch_size, err, errcap) ||
        get_num(o, "learning_rate", 1e-12, 1.0, &lr, err, errcap) ||
        get_uint(o, "seed", 0, 0, UINT64_MAX >> 1, &c->seed, err, errcap) ||
        get_uint(o, "max_steps", 1, 1, 100000000, &c->max_steps, err, errcap) ||
        get_int(o, "seq_len", 0, 8, 1 << 20, &c->seq_len, err, errcap) ||
        get_uint(o, "checkpoint_every_steps", 0, 0, 100000000, &c->checkpoint_every_steps, err,
                 errcap) ||
        get_num(o, "checkpoint_every_s", 0.0, 1e9, &every_s, err, errcap) ||
        get_int(o, "checkpoint_each_epoch", 0, 0, 1, &c->checkpoint_each_epoch, err, errcap) ||
        get_int(o, "threads", 0, 1, 1024, &c->threads, err, errcap) ||
        get_uint(o, "warmup_steps", 0, 0, 100000000, &warm, err, errcap) ||
        get_num(o, "weight_decay", 0.0, 10.0, &wd, err, errcap) ||
        get_num(o, "max_grad_norm", 0.0, 1e6, &clip, err, errcap) ||
        get_int(o, "keep_checkpoints", 0, 1, 1000, &c->keep_checkpoints, err, errcap) ||
        get_int(o, "packing", 0, 0, 1, &c->packing, err, errcap) ||
        get_int(o, "train_on_inputs", 0, 0, 1, &c->train_on_inputs, err, errcap) ||
        get_num(o, "validation_split", 0.0, 0.5, &c->validation_split, err, errcap) ||
        get_uint(o, "valid_every_steps", 0, 0, 100000000, &c->valid_every_steps, err, errcap) ||
        get_int(o, "early_stopping_patience", 0, 0, 1000, &c->early_stopping_patience, err,
                errcap) ||
        get_num(o, "early_stopping_min_delta", 0.0, 1e6, &c->early_stopping_min_delta, err,
                errcap))
        goto out;
    if (get_uint(o, "resume_step", 0, 0, c->max_steps, &resume, err, errcap) ||
        get_sample_prompts(o, c, err, errcap))
        goto out;
    char method[16] = "supervised";
    double beta = 0.1;
    if (get_str(o, "method", 0, method, sizeof method, err, errcap) ||
        get_num(o, "dpo_beta", 1e-6, 100.0, &beta, err, errcap))
        goto out;
    if (strcmp(method, "supervised") != 0 && strcmp(method, "dpo") != 0 &&
        strcmp(method, "reinforcement") != 0) {
        snprintf(err, errcap,
                 "settings: method must be \"supervised\", \"dpo\" or \"reinforcement\"");
        goto out;
    }
    c->dpo = strcmp(method, "dpo") == 0;
    c->rft = strcmp(method, "reinforcement") == 0;
    if (c->rft && get_rft(o, c, err, errcap))
        goto out;
    char device[16] = "cpu";
    if (get_str(o, "device", 0, device, sizeof device, err, errcap))
        goto out;
    if (strcmp(device, "cpu") != 0 && strcmp(device, "cuda") != 0) {
        snprintf(err, errcap, "settings: device must be \"cpu\" or \"cuda\"");
        goto out;
    }
    c->device = strcmp(device, "cuda") == 0 ? TRAIN_DEVICE_CUDA : TRAIN_DEVICE_CPU;
    c->dpo_beta = (float)beta;
    if (c->dpo && c->batch_size > 512) {
        snprintf(err, errcap, "settings: field \"batch_size\" must be at most 512 pairs for DPO");
        goto out;
    }
    c->resume_step = resume == UINT64_MAX ? -1 : (int64_t)resume;
    c->learning_rate = lr > 0.0 ? (float)lr : c->full ? 2e-5f : 2e-4f;
    c->checkpoint_every_s = every_s;
    c->weight_decay = (float)wd;
    c->max_grad_norm = (float)clip;
    c->warmup_steps = warm != UINT64_MAX ? warm : (c->max_steps + 19) / 20;
    if (c->warmup_steps > c->max_steps)
        c->warmup_steps = c->max_steps;
    if (!c->train_file_name[0]) {
        const char *slash = strrchr(c->train_file, '/');
        const char *base = slash ? slash + 1 : c->train_file;
        size_t len = strlen(base);
        if (len >= sizeof c->train_file_name)
            len = sizeof c->train_file_name - 1;
        memcpy(c->train_file_name, base, len);
        c->train_file_name[len] = '\0';
    }
    rc = 0;
out:
    json_decref(o);
    return rc;
}

int train_config_load(const char *path, struct train_config *c, char *err, size_t errcap)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errcap, "settings: cannot open %s", path);
        return -1;
    }
    enum { CAP = 1 << 20 };
    char *buf = malloc(CAP);
    size_t n = buf ? fread(buf, 1, CAP - 1, f) : 0;
    fclose(f);
    if (!buf || n == CAP - 1) {
        snprintf(err, errcap, "settings: %s is larger than 1 MiB", path);
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    int rc = train_config_parse(buf, c, err, errcap);
    free(buf);
    return rc;
}
