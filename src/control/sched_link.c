/* sched_link.c - the server's side of the scheduler modules (see the
 * header). Conversions from the store's rows to the sched structs, the
 * texts kept per job, the calibration history and the scheduling pass. */
#include "control/sched_link.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "control/job_move.h"
#include "control/leadership.h"
#include "core/bench_speed.h"
#include "core/job_hyper.h"
#include "core/text.h"

/* Loading before the first step, nominal: starting a process and reading
 * the weights at about 200 MB/s. Calibration learns the rest. */

/* Estimates read the queue and the fleet through a snapshot at most
 * SNAPSHOT_TTL_S old, so that a burst of job creations does not read every
 * waiting job once per creation. Passes always read afresh. */
#define SNAPSHOT_TTL_S 1.0
/* Jobs created since the snapshot was read are added to it (up to this
 * many), so that a burst of creations sees each other in the queue. */
#define SNAPSHOT_ADDED_MAX 256

struct queue {
    struct sched_job *jobs;
    char (*ids)[IDS_MAX];
    bool *queued; /* status queued (not re-scheduling) */
    char (*message)[48];
    size_t n;
    size_t cap; /* room in jobs, ids, queued, message */
    struct sched_account_load *loads;
    size_t n_loads;
    /* per account: jobs running + jobs in `jobs` (the fair order's count
     * once all of them are placed) */
    struct sched_account_load *totals;
    size_t n_totals;
    /* For estimates (the snapshot only): when each worker is free once
     * every job in `jobs` is placed; valid while full_valid. */
    double *full_free_at;
    bool full_valid;
};

static void queue_free(struct queue *q);
static bool plan_for_pass(const char *text, struct sched_plan *out);
static bool read_time_left(const char *text, struct sched_state *out);

/* How fast one model trains against the FLOPs model: the worker's
 * measured FLOP/s come from one benchmark shape, and small models use them
 * worse than large ones (per-step overheads), so each model's own ratio of
 * actual to nominal training time is learnt from its finished attempts and
 * applied before the estimator sees the nominal; the estimator's bands then
 * calibrate what remains. */
#define MODELS_MAX 1024
#define MODEL_RATIO_MIN 0.02
#define MODEL_RATIO_MAX 50.0

struct model_speed {
    char model[STORE_NAME_MAX];
    double log_ratio; /* exponentially weighted mean of log(actual/nominal) */
    int n;
};

struct sched_link {
    pthread_mutex_t mu;
    struct est_history history;
    /* The goal finish_by's factors (est_finish_by_factors) per method, from
     * the history: made again under mu whenever it changes, read by the
     * queue's loads (which may not take mu) under fb_mu. */
    pthread_mutex_t fb_mu;
    float fb_hi[PLAN_METHOD_COUNT][2][WORKER_CLASS_COUNT][SCHED_FINISH_SHARES];
    pthread_mutex_t model_mu; /* owns models[] */
    struct model_speed models[MODELS_MAX];
    int n_models;
    pthread_mutex_t snap_mu; /* owns the snapshot below */
    struct queue snap_queue; /* with one free slot at the end */
    struct sched_worker snap_workers[SCHED_LINK_WORKERS];
    int snap_n_workers;
    double snap_at;    /* when it was read; 0: none yet; -1: stale, still usable */
    bool snap_loading; /* one estimate is reading a new one, without the lock */
    unsigned long snap_gen; /* bumped by every invalidation: one while a
                               snapshot was read makes it stale at once */
    /* The assignments of the latest pass not yet taken: a worker claiming
     * within cfg.pass_reuse_s of it takes its job from here instead of
     * running a pass of its own (a fleet starting up claims all at once).
     * A job created or a change of the fleet clears it. */
    pthread_mutex_t memo_mu; /* owns the memo */
    double memo_at;          /* when that pass ran; 0: none */
    int memo_n;
    struct memo_entry {
        char worker[CAPACITY_NAME_MAX];
        char job[IDS_MAX];
    } memo[SCHED_LINK_WORKERS];
};

static void memo_clear(struct sched_link *l);

/* Makes fb_hi again from the history; the caller holds l->mu. */
static void finish_by_refresh_locked(struct sched_link *l)
{
    float hi[PLAN_METHOD_COUNT][2][WORKER_CLASS_COUNT][SCHED_FINISH_SHARES];
    for (int m = 0; m < PLAN_METHOD_COUNT; m++)
        est_finish_by_factors(&l->history, (enum plan_method)m, hi[m]);
    pthread_mutex_lock(&l->fb_mu);
    memcpy(l->fb_hi, hi, sizeof hi);
    pthread_mutex_unlock(&l->fb_mu);
}

void sched_link_finish_by_factors(struct sched_link *l, enum plan_method m,
                                  float out[2][WORKER_CLASS_COUNT][SCHED_FINISH_SHARES])
{
    pthread_mutex_lock(&l->fb_mu);
    memcpy(out, l->fb_hi[(int)m >= 0 && m < PLAN_METHOD_COUNT ? m : 0],
           sizeof l->fb_hi[0]);
    pthread_mutex_unlock(&l->fb_mu);
}

struct sched_link *sched_link_new(void)
{
    struct sched_link *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    pthread_mutex_init(&l->mu, NULL);
    pthread_mutex_init(&l->snap_mu, NULL);
    pthread_mutex_init(&l->model_mu, NULL);
    pthread_mutex_init(&l->memo_mu, NULL);
    pthread_mutex_init(&l->fb_mu, NULL);
    est_history_init(&l->history);
    finish_by_refresh_locked(l);
    return l;
}

void sched_link_free(struct sched_link *l)
{
    if (!l)
        return;
    queue_free(&l->snap_queue);
    pthread_mutex_destroy(&l->mu);
    pthread_mutex_destroy(&l->snap_mu);
    pthread_mutex_destroy(&l->model_mu);
    pthread_mutex_destroy(&l->memo_mu);
    pthread_mutex_destroy(&l->fb_mu);
    free(l);
}

static void add_model(struct sched_link *l, const struct store_calibration *k)
{
    if (!(k->actual_a > 0) || !(k->nominal_a > 0) || !k->model[0])
        return;
    double x = log(k->actual_a / k->nominal_a);
    if (!isfinite(x))
        return;
    pthread_mutex_lock(&l->model_mu);
    struct model_speed *m = NULL;
    for (int i = 0; i < l->n_models; i++)
        if (strcmp(l->models[i].model, k->model) == 0)
            m = &l->models[i];
    if (!m) {
        /* Full: the slot learnt from least is reused. */
        int slot = l->n_models < MODELS_MAX ? l->n_models++ : 0;
        for (int i = 1; slot == 0 && i < l->n_models; i++)
            if (l->models[i].n < l->models[slot].n)
                slot = i;
        m = &l->models[slot];
        memset(m, 0, sizeof *m);
        text_copy(m->model, sizeof m->model, k->model);
    }
    m->n++;
    /* A worker's offsets are a long mean, a factor a short one. */
    bool worker = strncmp(k->model, SCHED_LINK_WORKER_SPEED_PREFIX,
                          strlen(SCHED_LINK_WORKER_SPEED_PREFIX)) == 0;
    m->log_ratio = est_mean_step(m->log_ratio, m->n, x,
                                 worker ? EST_WORKER_MEMORY : EST_FACTOR_MEMORY);
    pthread_mutex_unlock(&l->model_mu);
}

static double clamp_factor(double f)
{
    return f < MODEL_RATIO_MIN ? MODEL_RATIO_MIN : f > MODEL_RATIO_MAX ? MODEL_RATIO_MAX : f;
}

/* The factor learnt under `key`; false when none was. */
static bool factor_of(struct sched_link *l, const char *key, double *out)
{
    bool found = false;
    pthread_mutex_lock(&l->model_mu);
    for (int i = 0; i < l->n_models && !found; i++)
        if (l->models[i].n > 0 && strcmp(l->models[i].model, key) == 0) {
            *out = clamp_factor(exp(l->models[i].log_ratio));
            found = true;
        }
    pthread_mutex_unlock(&l->model_mu);
    return found;
}

void sched_link_shape_key(const struct store_job *j, const char *part, char *out, size_t cap)
{
    struct job_hyper h;
    job_hyper_parse(j->hyper, &h);
    /* A model name too long for the key is cut: its shape still keys. */
    if (!text_printf(out, cap, "%s:%s|%s|%s|%s|b%d|s%d", part, j->model, j->precision,
                     j->adapter, j->method, j->batch_size, h.max_seq_len) && cap)
        out[cap - 1] = '\0';
}

/* Reads a shape key ("part:model|precision|adapter|method|bB|sS") into
 * *out; false when `key` is not one of `part`. */
static bool shape_of_key(const char *key, const char *part, struct est_shape *out)
{
    size_t n = strlen(part);
    if (strncmp(key, part, n) != 0 || key[n] != ':')
        return false;
    memset(out, 0, sizeof *out);
    char fmt[96];
    snprintf(fmt, sizeof fmt, "%%%zu[^|]|%%%zu[^|]|%%%zu[^|]|%%%zu[^|]|b%%d|s%%d",
             sizeof out->model - 1, sizeof out->precision - 1, sizeof out->adapter - 1,
             sizeof out->method - 1);
    return sscanf(key + n + 1, fmt, out->model, out->precision, out->adapter, out->method,
                  &out->batch, &out->seq_len) == 6;
}

/* The factor of j's nearest learnt neighbour under part (est_shape_nearest:
 * the same model and precision, another batch, context, adapter or
 * method); false when there is none. */
static bool neighbour_factor(struct sched_link *l, const struct store_job *j, const char *part,
                             double *out)
{
    char key[STORE_NAME_MAX];
    struct est_shape want;
    sched_link_shape_key(j, part, key, sizeof key);
    if (!shape_of_key(key, part, &want))
        return false;
    bool found = false;
    pthread_mutex_lock(&l->model_mu);
    struct est_shape *known = malloc((size_t)(l->n_models ? l->n_models : 1) * sizeof *known);
    int *at = malloc((size_t)(l->n_models ? l->n_models : 1) * sizeof *at);
    int n = 0;
    for (int i = 0; known && at && i < l->n_models; i++)
        if (l->models[i].n > 0 && shape_of_key(l->models[i].model, part, &known[n]))
            at[n++] = i;
    int best = known && at ? est_shape_nearest(&want, known, n) : -1;
    if (best >= 0) {
        *out = clamp_factor(exp(l->models[at[best]].log_ratio));
        found = true;
    }
    free(known);
    free(at);
    pthread_mutex_unlock(&l->model_mu);
    return found;
}

/* The fleet's own factor: the mean in logs of the factors learnt per
 * worker (under "worker:NAME", from every attempt each ran); false when
 * none is learnt. */
static bool fleet_factor(struct sched_link *l, double *out)
{
    double sum = 0;
    int n = 0;
    pthread_mutex_lock(&l->model_mu);
    for (int i = 0; i < l->n_models; i++)
        if (l->models[i].n > 0 && strncmp(l->models[i].model, "worker:", 7) == 0) {
            sum += l->models[i].log_ratio;
            n++;
        }
    pthread_mutex_unlock(&l->model_mu);
    if (n)
        *out = clamp_factor(exp(sum / n));
    return n > 0;
}

double sched_link_speed(struct sched_link *l, const struct store_job *j,
                        enum sched_link_basis *basis)
{
    char key[STORE_NAME_MAX];
    double f = 1.0;
    enum sched_link_basis b = SCHED_SHAPE_BORROWED;
    sched_link_shape_key(j, "speed", key, sizeof key);
    if (factor_of(l, key, &f))
        b = SCHED_SHAPE_OWN;
    else if (!neighbour_factor(l, j, "speed", &f) && !factor_of(l, j->model, &f) &&
             !fleet_factor(l, &f)) {
        f = 1.0;
        b = SCHED_SHAPE_NONE;
    }
    if (basis)
        *basis = b;
    return f;
}

double sched_link_speed_factor(struct sched_link *l, const struct store_job *j)
{
    return sched_link_speed(l, j, NULL);
}

bool sched_link_shape_known(struct sched_link *l, const struct store_job *j, const char *part)
{
    char key[STORE_NAME_MAX];
    double f;
    sched_link_shape_key(j, part, key, sizeof key);
    return factor_of(l, key, &f);
}

double sched_link_startup_factor(struct sched_link *l, const struct store_job *j)
{
    char key[STORE_NAME_MAX];
    double f;
    sched_link_shape_key(j, "start", key, sizeof key);
    return factor_of(l, key, &f) || neighbour_factor(l, j, "start", &f) ? f : 1.0;
}

double sched_link_model_factor(struct sched_link *l, const char *model)
{
    double f = 1.0;
    pthread_mutex_lock(&l->model_mu);
    for (int i = 0; i < l->n_models; i++)
        if (strcmp(l->models[i].model, model) == 0)
            f = exp(l->models[i].log_ratio);
    pthread_mutex_unlock(&l->model_mu);
    return clamp_factor(f);
}

static void add_locked(struct sched_link *l, const struct store_calibration *k)
{
    if (strcmp(k->kind, SCHED_LINK_FACTOR_KIND) == 0) {
        add_model(l, k);
        return;
    }
    if (k->method < 0 || k->method >= PLAN_METHOD_COUNT || k->class_ < 0 ||
        k->class_ >= WORKER_CLASS_COUNT || k->goal < 0 || k->goal >= SCHED_GOAL_COUNT)
        return;
    if (strcmp(k->kind, "train") == 0)
        est_history_add_train(&l->history, (enum plan_method)k->method,
                              (enum worker_class)k->class_, k->actual_a, k->nominal_a);
    else if (strcmp(k->kind, "start") == 0)
        est_history_add_start(&l->history, (enum plan_method)k->method,
                              (enum worker_class)k->class_, k->actual_a, k->nominal_a);
    else if (strcmp(k->kind, "borrow") == 0)
        est_history_add_borrowed(&l->history, (enum plan_method)k->method,
                                 (enum worker_class)k->class_, k->actual_a, k->nominal_a);
    else if (strcmp(k->kind, "spread") == 0)
        est_history_add_spread(&l->history, k->waited, log(k->actual_a / k->nominal_a));
    else if (strcmp(k->kind, "price") == 0 && k->waited == SCHED_LINK_PRICE_HIGH)
        est_history_add_price_high_spread(&l->history, log(k->actual_a / k->nominal_a));
    else if (strcmp(k->kind, "price") == 0 && k->waited == SCHED_LINK_PRICE_LOW)
        est_history_add_price_spread(&l->history, log(k->actual_a / k->nominal_a));
    else if (strcmp(k->kind, "tl") == 0) /* time left: cell, side in goal */
        est_history_add_tl_spread(&l->history, k->waited, k->goal, log(k->actual_a / k->nominal_a));
    else if (strcmp(k->kind, "job") == 0)
        est_history_add_job(&l->history, (enum plan_method)k->method,
                            (enum worker_class)k->class_, k->waited != 0,
                            (enum sched_goal)k->goal, k->actual_a, k->nominal_a, k->actual_b,
                            k->nominal_b);
}

enum alallo_err sched_link_load_history(struct sched_link *l, struct store *s)
{
    struct store_calibration *rows = calloc(SCHED_LINK_CALIBRATION, sizeof *rows);
    if (!rows)
        return ERR_NOMEM;
    int n = 0;
    enum alallo_err e = store_calibration_list(s, SCHED_LINK_CALIBRATION, rows, &n);
    pthread_mutex_lock(&l->mu);
    for (int i = 0; !e && i < n; i++)
        add_locked(l, &rows[i]);
    finish_by_refresh_locked(l);
    pthread_mutex_unlock(&l->mu);
    free(rows);
    return e;
}

enum alallo_err sched_link_reload(struct sched_link *l, struct store *s)
{
    pthread_mutex_lock(&l->mu);
    est_history_init(&l->history);
    pthread_mutex_unlock(&l->mu);
    pthread_mutex_lock(&l->model_mu);
    l->n_models = 0;
    pthread_mutex_unlock(&l->model_mu);
    pthread_mutex_lock(&l->snap_mu);
    l->snap_gen++;
    if (l->snap_at > 0)
        l->snap_at = -1; /* stale: the next estimate reads the store */
    pthread_mutex_unlock(&l->snap_mu);
    memo_clear(l);
    return sched_link_load_history(l, s);
}

double sched_link_worker_offset(struct sched_link *l, int method, int class_, bool borrowed,
                                double actual_s, double predicted_s, double applied)
{
    if (method < 0 || method >= PLAN_METHOD_COUNT || class_ < 0 || class_ >= WORKER_CLASS_COUNT)
        return NAN;
    pthread_mutex_lock(&l->mu);
    double off = est_worker_offset(&l->history, (enum plan_method)method,
                                   (enum worker_class)class_, borrowed, actual_s, predicted_s,
                                   applied);
    pthread_mutex_unlock(&l->mu);
    return off;
}

void sched_link_calibrate(struct sched_link *l, const struct store_calibration *k)
{
    pthread_mutex_lock(&l->mu);
    add_locked(l, k);
    finish_by_refresh_locked(l);
    pthread_mutex_unlock(&l->mu);
}

/* ---- conversions ------------------------------------------------------ */

static double train_tokens(int64_t tokens, long examples, long max_steps, int batch_size,
                           int n_epochs)
{
    int epochs = n_epochs > 0 ? n_epochs : 1;
    if (examples <= 0 || max_steps <= 0 || batch_size <= 0)
        return (double)tokens * epochs;
    return (double)tokens / (double)examples * (double)max_steps * batch_size;
}

double sched_link_train_tokens(const struct store_job *j)
{
    return train_tokens(j->tokens, j->examples, j->max_steps, j->batch_size, j->n_epochs);
}

double sched_link_reference_tokens(const struct store_job *j)
{
    return strcmp(j->method, "dpo") == 0 && j->tokens > 0 ? (double)j->tokens : 0;
}

void sched_link_plan_job(const struct catalog_model *m, const struct store_job *j,
                         struct plan_job *out)
{
    memset(out, 0, sizeof *out);
    out->model = (struct plan_model){.params = m->params,
                                     .layers = m->layers,
                                     .hidden = m->hidden,
                                     .intermediate = m->intermediate,
                                     .heads = m->heads,
                                     .kv_heads = m->kv_heads,
                                     .vocab = m->vocab,
                                     .tied = m->tied,
                                     .head_dim = m->head_dim,
                                     .post_norms = m->post_norms,
                                     .attn_softcap = m->attn_softcap,
                                     .final_softcap = m->final_softcap,
                                     .qk_norm = m->qk_norm,
                                     .experts = m->experts,
                                     .experts_used = m->experts_used,
                                     .moe_intermediate = m->moe_intermediate,
                                     .sparse_layers = m->sparse_layers};
    if (!planner_precision_parse(j->precision, &out->precision))
        out->precision = PLAN_16BIT;
    if (!planner_adapter_parse(j->adapter, &out->adapter))
        out->adapter = PLAN_LORA;
    struct job_hyper h;
    job_hyper_parse(j->hyper, &h);
    out->lora_rank = h.lora_rank;
    out->lora_targets = h.lora_targets; /* the same bit order as PLAN_T_* */
    out->batch = j->batch_size > 0 ? j->batch_size : 1;
    /* a DPO step holds two rows per pair (the preferred answer and the
     * other), and the trainer's activations are sized for them */
    if (strcmp(j->method, "dpo") == 0)
        out->batch *= 2;
    /* a reinforcement step trains on every answer of each prompt's group,
     * and its score_model graders' models are loaded beside the policy */
    if (strcmp(j->method, "reinforcement") == 0 && h.rft_group > 0)
        out->batch *= h.rft_group;
    if (strcmp(j->method, "reinforcement") == 0) {
        int64_t bytes;
        job_hyper_grader_weights(j->hyper, &out->grader_params, &bytes);
    }
    int seq = h.max_seq_len;
    if (m->max_positions > 0 && m->max_positions < seq)
        seq = m->max_positions;
    out->seq_len = seq;
}

static void to_sched_worker(const struct store_worker *w, double now, struct sched_worker *out)
{
    memset(out, 0, sizeof *out);
    double heard = (double)w->last_heartbeat_ms / 1000.0;
    out->silent_s = now > heard ? now - heard : 0;
    text_copy(out->name, sizeof out->name, w->name);
    out->cpus = w->cpus;
    out->mem_bytes = w->mem_bytes;
    if (!capacity_class_parse(w->class_, &out->class_))
        out->class_ = WORKER_ON_DEMAND;
    out->price_per_hour = w->price_per_hour;
    out->flops = w->flops;
    /* the bench's second point (bench_speed.h), kept in the speed */
    json_t *speed = json_loads(w->speed, 0, NULL);
    struct bench_speed measured;
    bench_speed_from_json(speed, &measured);
    json_decref(speed);
    out->bench_params = measured.params;
    out->small_params = measured.small_params;
    out->small_flops = measured.small_flops;
    if (!worker_state_parse(w->state, &out->state))
        out->state = WORKER_ACTIVE;
    /* GPUs live in the declaration (resources), validated at registration. */
    json_t *res = json_loads(w->resources, 0, NULL);
    json_t *g = json_object_get(res, "gpus");
    json_int_t count = json_integer_value(json_object_get(g, "count"));
    json_int_t mem = json_integer_value(json_object_get(g, "mem_bytes"));
    const char *kind = json_string_value(json_object_get(g, "kind"));
    if (count > 0 && mem > 0 && kind) {
        out->gpus = (int)count;
        out->gpu_mem_bytes = (int64_t)mem;
        text_copy(out->gpu_kind, sizeof out->gpu_kind, kind);
    }
    json_decref(res);
}

/* When the job of attempt a is expected to end, from its time left as its
 * own page shows it (tl_value_of_job: before the pace, never under its
 * estimate less the time since), with that range in *low and *high (0:
 * none). */
static double busy_until(struct control *ctl, const struct store_attempt *a, double now,
                         double *low, double *high)
{
    struct store_job *j = malloc(sizeof *j);
    double until = now + 60.0;
    *low = *high = 0;
    if (j && store_job_get(ctl->store, NULL, a->job, j) == ERR_OK) {
        struct sched_state *st = malloc(sizeof *st);
        if (st) {
            if (read_time_left(j->ledger_state, st)) {
                struct tl_value v;
                tl_value_of_job(&st->tl, now, j->est_low_s, j->est_high_s,
                                now - (double)j->created_ms / 1000.0, &v);
                until = now + v.mid_s;
                *low = now + v.low_s;
                *high = now + v.high_s;
            } else if (j->est_train_high_s > 0) {
                until = now + j->est_train_high_s;
            }
            free(st);
        }
    }
    free(j);
    return until;
}

void sched_link_correct_speeds(struct sched_link *l, struct sched_worker *w, int n)
{
    if (n <= 0)
        return;
    double *mean = calloc((size_t)n, sizeof *mean);
    long *count = calloc((size_t)n, sizeof *count);
    double *logs = calloc((size_t)n, sizeof *logs);
    if (mean && count && logs) {
        char key[STORE_NAME_MAX];
        pthread_mutex_lock(&l->model_mu);
        for (int i = 0; i < n; i++) {
            if (!text_printf(key, sizeof key, "%s%s", SCHED_LINK_WORKER_SPEED_PREFIX, w[i].name))
                continue;
            for (int m = 0; m < l->n_models; m++)
                if (l->models[m].n > 0 && strcmp(l->models[m].model, key) == 0) {
                    mean[i] = l->models[m].log_ratio;
                    count[i] = l->models[m].n;
                }
        }
        pthread_mutex_unlock(&l->model_mu);
        est_worker_speed_logs(mean, count, (size_t)n, logs);
        for (int i = 0; i < n; i++)
            capacity_correct_speed(&w[i], logs[i]);
    }
    free(mean);
    free(count);
    free(logs);
}

/* sched_link_workers, and the jobs of the open attempts it read into
 * running[] (room for SCHED_LINK_WORKERS; NULL: not wanted), their number
 * in *n_running. */
static int workers_read(struct control *ctl, double now, struct sched_worker *out, int cap,
                        char (*running)[IDS_MAX], int *n_running)
{
    if (n_running)
        *n_running = 0;
    struct store_worker *all = calloc(SCHED_LINK_WORKERS, sizeof *all);
    int n = 0, k = 0;
    if (!all || store_worker_list(ctl->store, all, SCHED_LINK_WORKERS, &n)) {
        free(all);
        return 0;
    }
    /* Every open attempt in one read, by worker name like the workers. */
    struct store_attempt *open = calloc(SCHED_LINK_WORKERS, sizeof *open);
    int n_open = 0;
    if (!open || store_attempt_list_open(ctl->store, "", open, SCHED_LINK_WORKERS, &n_open))
        n_open = 0;
    for (int i = 0; running && n_running && i < n_open; i++)
        text_copy(running[(*n_running)++], IDS_MAX, open[i].job);
    int cursor = 0;
    for (int i = 0; i < n && k < cap; i++) {
        struct sched_worker *w = &out[k++];
        to_sched_worker(&all[i], now, w);
        const struct store_attempt *a = sched_link_attempt_of(open, n_open, &cursor, all[i].name);
        if (a) {
            w->running_attempt = a->fence > 0 ? a->fence : 1;
            w->busy_until_s = busy_until(ctl, a, now, &w->busy_low_s, &w->busy_high_s);
        }
    }
    free(open);
    free(all);
    est_gpu_fill_speed(out, (size_t)k);
    sched_link_correct_speeds(ctl->sched, out, k);
    return k;
}

int sched_link_workers(struct control *ctl, double now, struct sched_worker *out, int cap)
{
    return workers_read(ctl, now, out, cap, NULL, NULL);
}

static uint64_t account_key(const char *account)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a: any stable number per account */
    for (const unsigned char *p = (const unsigned char *)account; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    return h;
}

double sched_link_loading_s(const struct catalog_model *m, const struct store_job *j)
{
    int64_t params, bytes;
    job_hyper_grader_weights(j->hyper, &params, &bytes);
    return est_loading_s((double)m->bytes, (double)bytes);
}

bool sched_link_waiting_job(struct sched_link *l, const struct store_waiting *j, int64_t id,
                            struct sched_job *out)
{
    struct sched_plan p;
    if (!plan_for_pass(j->plan, &p))
        return false;
    double left = j->max_steps > 0 ? (double)(j->max_steps - j->steps_done) / j->max_steps : 1;
    if (left < 0)
        left = 0;
    *out = (struct sched_job){.id = id,
                              .account = account_key(j->account),
                              .created_s = (double)j->created_ms / 1000.0,
                              .goal = p.goal,
                              .mem_bytes = j->memory_bytes,
                              .gpu_mem_bytes = p.gpu_need,
                              /* what runs between its steps (validation,
                               * sample answers) runs at the worker's speed
                               * as the steps do; its python graders' seconds
                               * at any worker's, beside the loading */
                              .params = p.params,
                              .work_flops = left *
                                            train_tokens(j->tokens, j->examples, j->max_steps,
                                                         j->batch_size, j->n_epochs) *
                                            p.flops_per_token *
                                            sched_link_model_factor(l, j->model) *
                                            (1.0 + p.between_share),
                              .startup_s = p.startup_s + left * p.python_s,
                              .deadline_s = j->est_high_s > 0
                                                ? (double)j->created_ms / 1000.0 + j->est_high_s
                                                : 0};
    if (p.goal == SCHED_FINISH_BY) {
        out->finish_by_s = p.finish_by_s;
        sched_link_finish_by_factors(l, p.method, out->finish_hi);
    }
    if (!(out->work_flops > 0))
        out->work_flops = 1;
    return true;
}

static void queue_free(struct queue *q)
{
    free(q->jobs);
    free(q->ids);
    free(q->queued);
    free(q->message);
    free(q->loads);
    free(q->totals);
    free(q->full_free_at);
    memset(q, 0, sizeof *q);
}

/* Adds one to account k's count in list[*n] (room for cap). */
static void count_up(struct sched_account_load *list, size_t *n, size_t cap, uint64_t k)
{
    for (size_t i = 0; i < *n; i++)
        if (list[i].account == k) {
            list[i].running++;
            return;
        }
    if (*n < cap)
        list[(*n)++] = (struct sched_account_load){.account = k, .running = 1};
}

static void add_load(struct queue *q, const char *account)
{
    uint64_t k = account_key(account);
    count_up(q->loads, &q->n_loads, SCHED_LINK_QUEUE, k);
    count_up(q->totals, &q->n_totals, SCHED_LINK_QUEUE, k);
}

/* Whether a new job of account k comes last in the fair order of the
 * queue q plus that job: every other account's jobs, running and queued,
 * are no more than k's, so all of them are placed before its turn (with
 * room for any tie). Then its horizon is q's full placement. */
static bool comes_last(const struct queue *q, uint64_t k)
{
    int mine = 0, most_other = 0;
    for (size_t i = 0; i < q->n_totals; i++) {
        if (q->totals[i].account == k)
            mine = q->totals[i].running;
        else if (q->totals[i].running > most_other)
            most_other = q->totals[i].running;
    }
    return q->n_totals < SCHED_LINK_QUEUE && most_other <= mine;
}

static bool queue_alloc(struct queue *q, size_t extra)
{
    size_t cap = SCHED_LINK_QUEUE + extra;
    q->cap = cap;
    q->jobs = calloc(cap, sizeof *q->jobs);
    q->ids = calloc(cap, sizeof *q->ids);
    q->queued = calloc(cap, sizeof *q->queued);
    q->message = calloc(cap, sizeof *q->message);
    q->loads = calloc(SCHED_LINK_QUEUE, sizeof *q->loads);
    q->totals = calloc(SCHED_LINK_QUEUE, sizeof *q->totals);
    q->full_free_at = calloc(SCHED_LINK_WORKERS, sizeof *q->full_free_at);
    q->full_valid = false;
    return q->jobs && q->ids && q->queued && q->message && q->loads && q->totals &&
           q->full_free_at;
}

struct load_ctx {
    struct sched_link *l;
    struct queue *q;
};

static void add_waiting(struct sched_link *l, struct queue *q, const struct store_waiting *j)
{
    if (q->n + 1 >= q->cap || !sched_link_waiting_job(l, j, (int64_t)q->n, &q->jobs[q->n]))
        return;
    text_copy(q->ids[q->n], IDS_MAX, j->id);
    q->queued[q->n] = j->status == JOB_QUEUED;
    text_copy(q->message[q->n], sizeof q->message[q->n], j->message);
    q->n++;
    count_up(q->totals, &q->n_totals, SCHED_LINK_QUEUE, account_key(j->account));
}

static void load_one(const struct store_waiting *j, void *vctx)
{
    struct load_ctx *c = vctx;
    if (j->running)
        add_load(c->q, j->account);
    else if ((j->status == JOB_QUEUED || j->status == JOB_RESCHEDULING) && !j->stop_reason[0] &&
             c->q->n < SCHED_LINK_QUEUE)
        add_waiting(c->l, c->q, j);
}

/* Reads the waiting jobs (and the running ones, for the accounts' loads)
 * in one query, with room for `extra` more. */
static enum alallo_err load_queue(struct control *ctl, struct queue *q, size_t extra)
{
    if (!queue_alloc(q, extra))
        return ERR_NOMEM;
    struct load_ctx c = {.l = ctl->sched, .q = q};
    return store_waiting_each(ctl->store, SCHED_LINK_QUEUE + SCHED_LINK_WORKERS, load_one, &c);
}

/* Takes out of q the jobs that are running[] (their attempts open): a
 * job claimed between the queue's read and the workers' is then counted
 * once, on its worker, as running. */
static void queue_drop_running(struct queue *q, char (*running)[IDS_MAX], int n_running)
{
    size_t k = 0;
    for (size_t i = 0; i < q->n; i++) {
        bool runs = false;
        for (int r = 0; r < n_running && !runs; r++)
            runs = strcmp(q->ids[i], running[r]) == 0;
        if (runs) {
            count_up(q->loads, &q->n_loads, SCHED_LINK_QUEUE, q->jobs[i].account);
            continue;
        }
        if (k != i) {
            q->jobs[k] = q->jobs[i];
            memcpy(q->ids[k], q->ids[i], IDS_MAX);
            q->queued[k] = q->queued[i];
            memcpy(q->message[k], q->message[i], sizeof q->message[k]);
        }
        q->jobs[k].id = (int64_t)k; /* ids are places in q */
        k++;
    }
    q->n = k;
}

/* Takes snap_mu, with the snapshot of the queue and the capacity read
 * afresh when older than SNAPSHOT_TTL_S at `now` (or invalidated). Returns
 * with snap_mu held, whatever it returns. */
static enum alallo_err snapshot_lock_fresh(struct control *ctl, double now)
{
    struct sched_link *l = ctl->sched;
    pthread_mutex_lock(&l->snap_mu);
    bool stale = l->snap_at <= 0 || now - l->snap_at > SNAPSHOT_TTL_S || now < l->snap_at;
    /* One estimate reads a new snapshot; while it does, the others use the
     * old one (a stale one is at most a few reads old), except before the
     * first, which everyone waits for. */
    while (stale && (!l->snap_loading || l->snap_at == 0)) {
        if (l->snap_loading) {
            pthread_mutex_unlock(&l->snap_mu);
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            pthread_mutex_lock(&l->snap_mu);
            stale = l->snap_at <= 0;
            continue;
        }
        l->snap_loading = true;
        unsigned long gen = l->snap_gen;
        pthread_mutex_unlock(&l->snap_mu);
        /* The queue first, then the workers with their open attempts: a
         * job claimed in between is seen both queued and running, and
         * counted once (queue_drop_running). Read the other way, it was
         * seen in neither, and a worker busy with it read as free. */
        struct queue nq = {0};
        struct sched_worker *nw = calloc(SCHED_LINK_WORKERS, sizeof *nw);
        char(*running)[IDS_MAX] = calloc(SCHED_LINK_WORKERS, sizeof *running);
        enum alallo_err le = nw && running ? load_queue(ctl, &nq, SNAPSHOT_ADDED_MAX + 1)
                                           : ERR_NOMEM;
        int nn = 0, n_running = 0;
        if (!le)
            nn = workers_read(ctl, now, nw, SCHED_LINK_WORKERS, running, &n_running);
        if (!le && nn > 0) {
            queue_drop_running(&nq, running, n_running);
        } else if (!le) {
            /* With no capacity known there is no wait to estimate: no
             * queue. */
            queue_free(&nq);
            le = queue_alloc(&nq, SNAPSHOT_ADDED_MAX + 1) ? ERR_OK : ERR_NOMEM;
        }
        free(running);
        pthread_mutex_lock(&l->snap_mu);
        l->snap_loading = false;
        if (le) {
            queue_free(&nq);
            free(nw);
            return le;
        }
        queue_free(&l->snap_queue);
        l->snap_queue = nq;
        memcpy(l->snap_workers, nw, sizeof l->snap_workers);
        l->snap_n_workers = nn;
        /* A change of the fleet while it was read (a claim, an attempt's
         * end) may be half in it: this estimate uses it, the next reads
         * afresh. */
        l->snap_at = l->snap_gen == gen ? now : -1;
        free(nw);
        stale = false;
    }
    return ERR_OK;
}

int sched_link_fleet(struct control *ctl, double now, struct sched_worker *out, int cap)
{
    struct sched_link *l = ctl->sched;
    int n = 0;
    if (snapshot_lock_fresh(ctl, now) == ERR_OK) {
        n = l->snap_n_workers < cap ? l->snap_n_workers : cap;
        memcpy(out, l->snap_workers, (size_t)n * sizeof *out);
    }
    pthread_mutex_unlock(&l->snap_mu);
    return n;
}

const struct store_attempt *sched_link_attempt_of(const struct store_attempt *open, int n,
                                                  int *cursor, const char *name)
{
    while (*cursor < n && strcmp(open[*cursor].worker, name) < 0)
        (*cursor)++;
    return *cursor < n && strcmp(open[*cursor].worker, name) == 0 ? &open[*cursor] : NULL;
}

/* ---- estimate --------------------------------------------------------- */

enum alallo_err sched_link_estimate(struct control *ctl, const struct catalog_model *m,
                                    const struct store_job *j, double now, struct estimate *out,
                                    char *why, size_t whycap)
{
    struct est_request req = {.now = now, .currency = "USD",
                              .startup_s = sched_link_loading_s(m, j) *
                                           sched_link_startup_factor(ctl->sched, j)};
    sched_link_plan_job(m, j, &req.job);
    req.train_tokens = sched_link_train_tokens(j);
    req.reference_tokens = sched_link_reference_tokens(j);
    if (!sched_goal_parse(j->goal, &req.goal))
        req.goal = SCHED_LOWEST_COST;
    if (req.goal == SCHED_FINISH_BY)
        req.finish_by_s = job_hyper_finish_by(j->hyper);
    double *free_at = calloc(SCHED_LINK_WORKERS, sizeof *free_at);
    struct sched_link *l = ctl->sched;
    enum alallo_err e = ERR_NOMEM;
    if (!free_at)
        return e;
    e = snapshot_lock_fresh(ctl, now);
    if (e)
        goto out;
    struct queue q = l->snap_queue;
    const struct sched_worker *w = l->snap_workers; /* read under snap_mu */
    int n = l->snap_n_workers;
    enum sched_link_basis basis;
    req.work_factor = sched_link_speed(l, j, &basis);
    req.new_shape = basis == SCHED_SHAPE_NONE;
    req.borrowed_shape = basis == SCHED_SHAPE_BORROWED;
    /* The job itself, last in its account's order: where it would stand. */
    struct plan_job pj;
    char tmp[200];
    struct plan_memory mem;
    if (planner_normalize(&req.job, &pj, tmp, sizeof tmp) == ERR_OK &&
        planner_memory(&pj, &mem, tmp, sizeof tmp) == ERR_OK) {
        q.jobs[q.n] = (struct sched_job){.id = (int64_t)q.n,
                                         .account = account_key(j->account),
                                         .created_s = now,
                                         .goal = req.goal,
                                         .mem_bytes = mem.total,
                                         .gpu_mem_bytes = planner_gpu_need(&pj),
                                         .params = (double)planner_active_params(&pj),
                                         .work_flops = planner_work_flops(
                                                           &pj, req.train_tokens,
                                                           req.reference_tokens) *
                                                       req.work_factor,
                                         .startup_s = req.startup_s,
                                         .finish_by_s = req.finish_by_s};
        if (req.goal == SCHED_FINISH_BY)
            sched_link_finish_by_factors(l, planner_method(pj.precision, pj.adapter),
                                         q.jobs[q.n].finish_hi);
        /* A job that comes last in the fair order sees the queue's full
         * placement, kept between estimates (a burst from one account is
         * one placement, then one job more each); any other is placed by
         * a dry run up to its turn. */
        bool last = comes_last(&q, q.jobs[q.n].account);
        if (last && l->snap_queue.full_valid) {
            memcpy(free_at, q.full_free_at, (size_t)n * sizeof *free_at);
        } else if (sched_horizon_before(q.jobs, q.n + 1, q.n, w, (size_t)n, q.loads, q.n_loads,
                                        now, free_at) != ERR_OK) {
            free(free_at);
            free_at = NULL;
        } else if (last) {
            memcpy(l->snap_queue.full_free_at, free_at, (size_t)n * sizeof *free_at);
            l->snap_queue.full_valid = true;
        }
    }
    pthread_mutex_lock(&ctl->sched->mu);
    e = est_estimate(&req, w, (size_t)n, free_at, &ctl->sched->history, out, why, whycap);
    pthread_mutex_unlock(&ctl->sched->mu);
    if (!e && n == 0) {
        /* No capacity known at all: the job waits for a worker to join,
         * with the planner's figures and no ranges. */
        struct plan_job norm;
        struct plan_memory need = {0};
        if (planner_normalize(&req.job, &norm, why, whycap) == ERR_OK &&
            planner_memory(&norm, &need, why, whycap) == ERR_OK) {
            out->memory_bytes = need.total;
            out->flops_per_token = planner_flops_per_token(&norm);
            out->work_flops =
                planner_work_flops(&norm, req.train_tokens, req.reference_tokens);
            out->reference_flops = out->work_flops - req.train_tokens * out->flops_per_token;
        }
        out->method = planner_method(req.job.precision, req.job.adapter);
        out->startup_s = req.startup_s;
        out->fit = PLAN_FITS;
        out->fail_message = MSG_NONE;
        out->message = EST_NO_CAPACITY_MESSAGE;
        out->worker = -1;
        out->waits = true;
    }
out:
    pthread_mutex_unlock(&l->snap_mu);
    free(free_at);
    return e;
}

static void memo_clear(struct sched_link *l)
{
    pthread_mutex_lock(&l->memo_mu);
    l->memo_at = 0;
    l->memo_n = 0;
    pthread_mutex_unlock(&l->memo_mu);
}

/* The job the latest pass assigned to `worker`, if that pass is recent:
 * taken out of the memo. */
static bool memo_take(struct sched_link *l, const char *worker, double now, double reuse_s,
                      char job[IDS_MAX])
{
    bool found = false;
    pthread_mutex_lock(&l->memo_mu);
    if (l->memo_at > 0 && now >= l->memo_at && now - l->memo_at <= reuse_s)
        for (int i = 0; i < l->memo_n && !found; i++)
            if (strcmp(l->memo[i].worker, worker) == 0) {
                text_copy(job, IDS_MAX, l->memo[i].job);
                l->memo[i] = l->memo[--l->memo_n];
                found = true;
            }
    pthread_mutex_unlock(&l->memo_mu);
    return found;
}

void sched_link_note_queued(struct control *ctl, const struct store_job *j)
{
    struct sched_link *l = ctl->sched;
    memo_clear(l); /* the new job may come before the ones assigned */
    pthread_mutex_lock(&l->snap_mu);
    struct queue *q = &l->snap_queue;
    if (l->snap_at > 0 && q->jobs) {
        /* One slot stays free for the job being estimated. */
        struct store_waiting *sw = calloc(1, sizeof *sw);
        size_t before = q->n;
        if (sw) {
            text_copy(sw->id, sizeof sw->id, j->id);
            text_copy(sw->account, sizeof sw->account, j->account);
            text_copy(sw->model, sizeof sw->model, j->model);
            sw->status = j->status;
            text_copy(sw->message, sizeof sw->message, j->message);
            sw->created_ms = j->created_ms;
            sw->memory_bytes = j->memory_bytes;
            sw->tokens = j->tokens;
            sw->examples = j->examples;
            sw->max_steps = j->max_steps;
            sw->n_epochs = j->n_epochs;
            sw->batch_size = j->batch_size;
            text_copy(sw->plan, sizeof sw->plan, j->plan);
            /* The full placement stays true if the new job comes last:
             * it is placed after all the others. */
            bool last = q->full_valid && comes_last(q, account_key(j->account));
            add_waiting(l, q, sw);
            if (q->n > before && last) {
                struct sched_choice c;
                if (sched_choose(&q->jobs[q->n - 1], l->snap_workers,
                                 (size_t)l->snap_n_workers, q->full_free_at,
                                 (double)j->created_ms / 1000.0, &c))
                    q->full_free_at[c.worker] = c.finish_s;
            } else {
                q->full_valid = false;
            }
            free(sw);
        }
        if (q->n == before)
            l->snap_at = -1; /* full: the next estimate reads afresh */
    }
    pthread_mutex_unlock(&l->snap_mu);
}

void sched_link_forget_pass(struct sched_link *l)
{
    memo_clear(l);
}

void sched_link_invalidate(struct sched_link *l)
{
    pthread_mutex_lock(&l->snap_mu);
    l->snap_gen++;
    if (l->snap_at != 0)
        l->snap_at = -1;
    pthread_mutex_unlock(&l->snap_mu);
}

#define PLAN_FORMAT                                                                                \
    "{\"fpt\":%.17g,\"method\":%d,\"class\":%d,\"waits\":%d,\"goal\":%d,"                         \
    "\"start_s\":%.17g,\"train_s\":%.17g,\"startup_s\":%.17g,\"mf\":%.17g,\"gpu\":%lld,"  \
    "\"by\":%.17g,\"sf\":%.17g,\"rm\":%.17g,\"ns\":%d,\"vs\":%.17g,\"py\":%.17g,"       \
    "\"pl\":%.17g,\"pm\":%.17g,\"pu\":%.17g,\"np\":%.17g}"

/* Reads one `"key":number` of the plan's own format at *p; false when the
 * text is not that. */
static bool plan_number(const char **p, const char *key, double *out /* NULL: skip it */)
{
    size_t n = strlen(key);
    if (strncmp(*p, key, n) != 0)
        return false;
    if (!out) {
        size_t len = strspn(*p + n, "0123456789+-.eE");
        *p += n + len;
        return len > 0;
    }
    char *end;
    *out = strtod(*p + n, &end);
    if (end == *p + n || !isfinite(*out))
        return false;
    *p = end;
    return true;
}

bool sched_plan_write(const struct estimate *e, enum sched_goal goal, double model_factor,
                      double startup_factor, char *out, size_t cap)
{
    return text_printf(out, cap, PLAN_FORMAT, e->flops_per_token, (int)e->method,
                       (int)e->worker_class, e->waits ? 1 : 0,
                       (int)goal, e->wait_s + e->startup_s, e->train_s, e->startup_s,
                       model_factor, (long long)e->gpu_need_bytes,
                       goal == SCHED_FINISH_BY ? e->finish_by_s : 0.0,
                       startup_factor > 0 ? startup_factor : 1.0,
                       isfinite(e->range_margin) ? e->range_margin : 0.0, e->new_shape ? 1 : 0,
                       e->between_share > 0 && isfinite(e->between_share) ? e->between_share
                                                                            : 0.0,
                       e->python_s > 0 && isfinite(e->python_s) ? e->python_s : 0.0,
                       (double)e->price_low_micros / 1e6,
                       isfinite(e->price_margin) ? e->price_margin : 0.0,
                       e->price_high_nominal > 0 && isfinite(e->price_high_nominal)
                           ? e->price_high_nominal
                           : 0.0,
                       e->params > 0 && isfinite(e->params) ? e->params : 0.0);
}

/* A small index of the plan (method, class, goal); -1 unless an integer
 * from 0 to 63. */
static int plan_index(const json_t *v)
{
    json_int_t i = json_is_integer(v) ? json_integer_value(v) : -1;
    return i >= 0 && i < 64 ? (int)i : -1;
}

static bool plan_valid(struct sched_plan *out, int method, int class_, int goal)
{
    if (method < 0 || method >= PLAN_METHOD_COUNT || class_ < 0 || class_ >= WORKER_CLASS_COUNT ||
        goal < 0 || goal >= SCHED_GOAL_COUNT || !(out->flops_per_token > 0))
        return false;
    out->method = (enum plan_method)method;
    out->class_ = (enum worker_class)class_;
    out->goal = (enum sched_goal)goal;
    return true;
}

/* The plan as sched_plan_write wrote it, read without a JSON parser (a
 * pass reads one per waiting job). With all false, start_s, train_s and
 * model_factor are skipped (a pass needs none of them). False when the
 * text is not in that exact format. */
static bool plan_fast(const char *text, struct sched_plan *out, bool all)
{
    double m, c, w, g, gpu = 0, by = 0, sf = 1, rm = 0, ns = 0, vs = 0, py = 0, pl = 0, pm = 0,
           pu = 0, np = 0;
    const char *p = text;
    if (!(plan_number(&p, "{\"fpt\":", &out->flops_per_token) &&
          plan_number(&p, ",\"method\":", &m) && plan_number(&p, ",\"class\":", &c) &&
          plan_number(&p, ",\"waits\":", &w) && plan_number(&p, ",\"goal\":", &g) &&
          plan_number(&p, ",\"start_s\":", all ? &out->start_s : NULL) &&
          plan_number(&p, ",\"train_s\":", all ? &out->train_s : NULL) &&
          plan_number(&p, ",\"startup_s\":", &out->startup_s) &&
          plan_number(&p, ",\"mf\":", all ? &out->model_factor : NULL) &&
          (plan_number(&p, ",\"gpu\":", &gpu) || true) &&
          (plan_number(&p, ",\"by\":", &by) || true) &&
          (plan_number(&p, ",\"sf\":", &sf) || true) &&
          (plan_number(&p, ",\"rm\":", &rm) || true) &&
          (plan_number(&p, ",\"ns\":", &ns) || true) &&
          (plan_number(&p, ",\"vs\":", &vs) || true) &&
          (plan_number(&p, ",\"py\":", &py) || true) &&
          (plan_number(&p, ",\"pl\":", &pl) || true) &&
          (plan_number(&p, ",\"pm\":", &pm) || true) &&
          (plan_number(&p, ",\"pu\":", &pu) || true) &&
          (plan_number(&p, ",\"np\":", &np) || true) && strcmp(p, "}") == 0 &&
          m >= 0 && m < 64 && m == (int)m && c >= 0 && c < 64 && c == (int)c && g >= 0 &&
          g < 64 && g == (int)g))
        return false;
    out->waits = w != 0;
    out->startup_factor = sf > 0 ? sf : 1.0;
    out->range_margin = rm;
    out->new_shape = ns != 0;
    out->between_share = vs > 0 ? vs : 0;
    out->python_s = py > 0 ? py : 0;
    out->price_low = pl > 0 ? pl : 0;
    out->price_margin = pm;
    out->price_high_nominal = pu > 0 ? pu : 0;
    out->params = np > 0 ? np : 0;
    if (!(out->model_factor > 0) || !isfinite(out->model_factor))
        out->model_factor = 1.0;
    out->gpu_need = gpu > 0 && gpu < 9e18 ? (int64_t)gpu : 0;
    out->finish_by_s = by > 0 ? by : 0;
    return plan_valid(out, (int)m, (int)c, (int)g);
}

/* What a pass needs of a plan: the goal, FLOPs per token and loading. */
static bool plan_for_pass(const char *text, struct sched_plan *out)
{
    memset(out, 0, sizeof *out);
    if (text && plan_fast(text, out, false))
        return true;
    return sched_plan_read(text, out);
}

bool sched_plan_read(const char *text, struct sched_plan *out)
{
    memset(out, 0, sizeof *out);
    if (!text || !text[0])
        return false;
    if (plan_fast(text, out, true))
        return true;
    int method = -1, class_ = -1, goal = -1;
    memset(out, 0, sizeof *out);
    json_t *o = json_loads(text, 0, NULL);
    if (!json_is_object(o)) {
        json_decref(o);
        return false;
    }
    out->flops_per_token = json_number_value(json_object_get(o, "fpt"));
    method = plan_index(json_object_get(o, "method"));
    class_ = plan_index(json_object_get(o, "class"));
    goal = plan_index(json_object_get(o, "goal"));
    out->waits = json_integer_value(json_object_get(o, "waits")) != 0;
    out->start_s = json_number_value(json_object_get(o, "start_s"));
    out->train_s = json_number_value(json_object_get(o, "train_s"));
    out->startup_s = json_number_value(json_object_get(o, "startup_s"));
    out->model_factor = json_number_value(json_object_get(o, "mf"));
    if (!(out->model_factor > 0))
        out->model_factor = 1.0; /* plans written before the factor */
    out->startup_factor = json_number_value(json_object_get(o, "sf"));
    if (!(out->startup_factor > 0))
        out->startup_factor = 1.0; /* plans written before it */
    out->range_margin = json_number_value(json_object_get(o, "rm")); /* 0 in older plans */
    out->new_shape = json_integer_value(json_object_get(o, "ns")) != 0;
    double vs = json_number_value(json_object_get(o, "vs"));
    out->between_share = vs > 0 && isfinite(vs) ? vs : 0; /* 0 in older plans */
    double py = json_number_value(json_object_get(o, "py"));
    out->python_s = py > 0 && isfinite(py) ? py : 0; /* 0 in older plans */
    double pl = json_number_value(json_object_get(o, "pl"));
    out->price_low = pl > 0 && isfinite(pl) ? pl : 0; /* 0 in older plans */
    double pm = json_number_value(json_object_get(o, "pm"));
    out->price_margin = isfinite(pm) ? pm : 0;
    double pu = json_number_value(json_object_get(o, "pu"));
    out->price_high_nominal = pu > 0 && isfinite(pu) ? pu : 0; /* 0 in older plans */
    double np = json_number_value(json_object_get(o, "np"));
    out->params = np > 0 && isfinite(np) ? np : 0; /* 0 in older plans */
    double gpu = json_number_value(json_object_get(o, "gpu"));
    out->gpu_need = gpu > 0 && gpu < 9e18 ? (int64_t)gpu : 0; /* 0: before GPUs */
    double by = json_number_value(json_object_get(o, "by"));
    out->finish_by_s = by > 0 ? by : 0; /* 0: no deadline */
    json_decref(o);
    return plan_valid(out, method, class_, goal);
}

/* ---- the ledger-state text -------------------------------------------- */

/* Format, one record a line, numbers separated by spaces:
 *   S1 created time_high train_high price_high fence latest n charged refunded closed
 *   A id fence rate start done kept train_s began ended_s ended billed_to billed_micros
 *   C from cancel_s cancel_step cancel_micros     (only once a cancel was priced)
 *   T max start switch est_low est_high startup begin have_ref last_step last_t samples
 *     ewma ewma_var nominal_step_s class model_factor [ref_step ref_t
 *     [margin_below margin_above] x EST_TL_CELLS [tail [warm block_steps
 *     blk_step blk_t [speed_log]]]]]
 *     (only while an attempt runs; lines written before ref_step and ref_t
 *     were kept read them as the attempt's start, before the margins as 0,
 *     before the tail as 0, before the pace samples' blocks as samples of
 *     every report from the last one, before the worker's correction as 0)
 *   N cell t low high     (the time-left band first shown in each share-done
 *                          cell, over the job's attempts: tl_note_shown)
 * Doubles are written with %.17g so a round trip is exact. */

bool sched_state_write(const struct sched_state *st, char *out, size_t cap)
{
    const struct ledger_job *j = &st->ledger;
    size_t len = 0;
    int n = snprintf(out, cap, "S1 %.17g %.17g %.17g %" PRId64 " %" PRIu64 " %ld %d %" PRId64
                               " %" PRId64 " %d\n",
                     j->created_s, j->time_high_s, j->train_high_s, j->price_high_micros,
                     j->fence, j->latest_checkpoint, j->n_attempts, j->charged_micros,
                     j->refunded_micros, j->closed ? 1 : 0);
    if (n < 0 || (size_t)n >= cap)
        return false;
    len = (size_t)n;
    for (int i = 0; i < j->n_attempts; i++) {
        const struct ledger_attempt *a = &j->attempts[i];
        n = snprintf(out + len, cap - len,
                     "A %" PRId64 " %" PRIu64 " %.17g %ld %ld %ld %.17g %.17g %.17g %d %ld %" PRId64
                     "\n",
                     a->id, a->fence, a->rate_per_hour, a->start_step, a->done_step, a->kept_step,
                     a->train_s, a->began_s, a->ended_s, a->ended ? 1 : 0, a->billed_to,
                     a->billed_micros);
        if (n < 0 || (size_t)n >= cap - len)
            return false;
        len += (size_t)n;
    }
    if (j->cancel_fixed) {
        n = snprintf(out + len, cap - len, "C %d %.17g %ld %" PRId64 "\n", (int)j->cancel_from,
                     j->cancel_s, j->cancel_step, j->cancel_micros);
        if (n < 0 || (size_t)n >= cap - len)
            return false;
        len += (size_t)n;
    }
    if (st->has_tl) {
        const struct tl_state *t = &st->tl;
        n = snprintf(out + len, cap - len,
                     "T %ld %ld %ld %.17g %.17g %.17g %.17g %d %ld %.17g %d %.17g %.17g %.17g %d %.17g"
                     " %ld %.17g",
                     t->max_steps, t->start_step, t->switch_after, t->est_low_s, t->est_high_s,
                     t->startup_s, t->begin_t, t->have_ref ? 1 : 0, t->last_step, t->last_t,
                     t->samples, t->ewma_s, t->ewma_var, st->nominal_step_s, st->worker_class,
                     st->model_factor, t->ref_step, t->ref_t);
        if (n < 0 || (size_t)n >= cap - len)
            return false;
        len += (size_t)n;
        /* the margins (tl_calibrate), cell by cell, below and above */
        for (int c = 0; c < EST_TL_CELLS; c++) {
            n = snprintf(out + len, cap - len, " %.17g %.17g", t->margin[c][0], t->margin[c][1]);
            if (n < 0 || (size_t)n >= cap - len)
                return false;
            len += (size_t)n;
        }
        /* then the tail (tl_set_tail) and the pace sample being gathered */
        n = snprintf(out + len, cap - len, " %.17g %d %ld %ld %.17g %.17g\n", t->tail_s,
                     t->warm ? 1 : 0, t->block_steps, t->blk_step, t->blk_t, st->speed_log);
        if (n < 0 || (size_t)n >= cap - len)
            return false;
        len += (size_t)n;
    }
    for (int c = 0; c < EST_TL_CELLS; c++) {
        const struct tl_shown *sh = &st->tl_shown[c];
        if (!sh->set)
            continue;
        n = snprintf(out + len, cap - len, "N %d %.17g %.17g %.17g\n", c, sh->t, sh->low_s,
                     sh->high_s);
        if (n < 0 || (size_t)n >= cap - len)
            return false;
        len += (size_t)n;
    }
    return true;
}

/* The "T" line at `line` (see the format above) into out's time-left
 * fields; false unless it has all of them. */
static bool read_tl_line(const char *line, struct sched_state *out)
{
    struct tl_state *t = &out->tl;
    int have_ref = 0;
    /* sscanf measures its whole input: give it this line alone. */
    char buf[1024];
    size_t len = strcspn(line, "\n");
    if (len >= sizeof buf)
        return false;
    memcpy(buf, line, len);
    buf[len] = '\0';
    t->ref_step = -1;
    int got = sscanf(buf, "T %ld %ld %ld %lf %lf %lf %lf %d %ld %lf %d %lf %lf %lf %d %lf %ld %lf",
                     &t->max_steps, &t->start_step, &t->switch_after, &t->est_low_s,
                     &t->est_high_s, &t->startup_s, &t->begin_t, &have_ref, &t->last_step,
                     &t->last_t, &t->samples, &t->ewma_s, &t->ewma_var, &out->nominal_step_s,
                     &out->worker_class, &out->model_factor, &t->ref_step, &t->ref_t);
    if (got != 16 && got != 18)
        return false;
    if (got == 16) { /* written before the reference was kept */
        t->ref_step = t->start_step;
        t->ref_t = t->begin_t;
    }
    /* The margins follow; a line written before them has none (0). */
    const char *m = buf;
    for (int field = 0; got == 18 && field < 19 && m; field++) {
        m = strchr(m, ' ');
        m = m ? m + 1 : NULL;
    }
    for (int c = 0; m && c < EST_TL_CELLS; c++) {
        int used = 0;
        if (sscanf(m, "%lf %lf%n", &t->margin[c][0], &t->margin[c][1], &used) != 2)
            return false;
        m += used;
    }
    /* The tail follows; a line written before it has none (0). Then the
     * pace sample being gathered; a line written before has a sample a
     * report, from the last one. */
    t->tail_s = 0;
    int warm = 0, used = 0;
    long block = 0, blk_step = 0;
    double blk_t = NAN;
    if (m && sscanf(m, " %lf%n", &t->tail_s, &used) != 1)
        t->tail_s = 0;
    else if (m && sscanf(m + used, " %d %ld %ld %lf %lf", &warm, &block, &blk_step, &blk_t,
                         &out->speed_log) < 4)
        block = 0;
    if (!isfinite(out->speed_log))
        out->speed_log = 0;
    if (!(t->tail_s > 0) || !isfinite(t->tail_s))
        t->tail_s = 0;
    bool blocks = block >= 1 && blk_step <= t->last_step && isfinite(blk_t);
    t->warm = blocks && warm != 0;
    t->block_steps = blocks ? block : 1;
    t->blk_step = blocks ? blk_step : t->last_step;
    t->blk_t = blocks ? blk_t : t->last_t;
    t->have_ref = have_ref != 0;
    out->has_tl = true;
    return true;
}

/* The time left of a running job from its ledger-state text alone, without
 * reading its attempts: false when it has none. */
static bool read_time_left(const char *text, struct sched_state *out)
{
    memset(out, 0, sizeof *out);
    if (!text || strncmp(text, "S1 ", 3) != 0)
        return false;
    const char *p = strstr(text, "\nT ");
    return p && read_tl_line(p + 1, out);
}

bool sched_state_read(const char *text, struct sched_state *out)
{
    memset(out, 0, sizeof *out);
    if (!text || strncmp(text, "S1 ", 3) != 0)
        return false;
    struct ledger_job *j = &out->ledger;
    int closed = 0, consumed = 0;
    if (sscanf(text, "S1 %lf %lf %lf %" SCNd64 " %" SCNu64 " %ld %d %" SCNd64 " %" SCNd64 " %d%n",
               &j->created_s, &j->time_high_s, &j->train_high_s, &j->price_high_micros, &j->fence,
               &j->latest_checkpoint, &j->n_attempts, &j->charged_micros, &j->refunded_micros,
               &closed, &consumed) != 10 ||
        j->n_attempts < 0 || j->n_attempts > LEDGER_MAX_ATTEMPTS)
        return false;
    j->closed = closed != 0;
    const char *p = strchr(text, '\n');
    for (int i = 0; i < j->n_attempts; i++) {
        if (!p)
            return false;
        p++;
        struct ledger_attempt *a = &j->attempts[i];
        int ended = 0;
        if (sscanf(p,
                   "A %" SCNd64 " %" SCNu64 " %lf %ld %ld %ld %lf %lf %lf %d %ld %" SCNd64,
                   &a->id, &a->fence, &a->rate_per_hour, &a->start_step, &a->done_step,
                   &a->kept_step, &a->train_s, &a->began_s, &a->ended_s, &ended, &a->billed_to,
                   &a->billed_micros) != 12)
            return false;
        a->ended = ended != 0;
        p = strchr(p, '\n');
    }
    if (p && p[1] == 'C') {
        int from = 0;
        if (sscanf(p + 1, "C %d %lf %ld %" SCNd64, &from, &j->cancel_s, &j->cancel_step,
                   &j->cancel_micros) != 4 ||
            from < 0 || from >= JOB_STATUS_COUNT)
            return false;
        j->cancel_from = (enum job_status)from;
        j->cancel_fixed = true;
        p = strchr(p + 1, '\n');
    }
    if (p && p[1] == 'T') {
        if (!read_tl_line(p + 1, out))
            return false;
        p = strchr(p + 1, '\n');
    }
    /* The time-left bands shown, one line per share-done cell. */
    while (p && p[1] == 'N') {
        int c = -1;
        struct tl_shown sh = {.set = true};
        if (sscanf(p + 1, "N %d %lf %lf %lf", &c, &sh.t, &sh.low_s, &sh.high_s) != 4 || c < 0 ||
            c >= EST_TL_CELLS)
            return false;
        out->tl_shown[c] = sh;
        p = strchr(p + 1, '\n');
    }
    return true;
}

void sched_state_of_job(const struct store_job *j, struct sched_state *out)
{
    if (sched_state_read(j->ledger_state, out))
        return;
    memset(out, 0, sizeof *out);
    ledger_job_init(&out->ledger, (double)j->created_ms / 1000.0, j->est_high_s,
                    j->est_train_high_s, (int64_t)llround(j->est_price_high * 1e6));
}

double sched_link_money(int64_t micros)
{
    return (double)micros / 1e6;
}

void sched_link_calibrate_time_left(struct sched_link *l, struct tl_state *t)
{
    pthread_mutex_lock(&l->mu);
    tl_calibrate(t, &l->history);
    pthread_mutex_unlock(&l->mu);
}

double sched_link_price_margin(struct sched_link *l, int end)
{
    pthread_mutex_lock(&l->mu);
    double m = end == 1 ? est_price_high_margin(&l->history) : est_price_margin(&l->history);
    pthread_mutex_unlock(&l->mu);
    return m;
}

double sched_link_python_s(const struct store_job *j, long steps)
{
    double answer_s = job_hyper_python_answer_s(j->hyper);
    if (!(answer_s > 0))
        return 0; /* most jobs: no parse */
    struct job_hyper h;
    job_hyper_parse(j->hyper, &h);
    return est_rft_python_s(answer_s, steps, j->batch_size, h.rft_group);
}

void sched_link_train_range(struct sched_link *l, const struct store_job *j,
                            const struct sched_worker *w, long steps_left, double *low_s,
                            double *high_s)
{
    struct sched_plan p;
    double fpt = sched_plan_read(j->plan, &p) ? p.flops_per_token : 0;
    enum plan_method m = fpt > 0 ? p.method : PLAN_METHOD_LORA_16;
    double share = j->max_steps > 0 ? (double)steps_left / (double)j->max_steps : 1;
    /* the steps at the learnt speed, what runs between them (validation,
     * sample answers) and the python graders' seconds, as the estimate */
    double nominal =
        capacity_train_seconds(share * sched_link_train_tokens(j) * fpt, p.params, w) *
        sched_link_speed_factor(l, j);
    if (!(nominal > 0))
        nominal = j->est_train_high_s > 0 ? j->est_train_high_s * share : 60;
    else
        nominal = nominal * (1.0 + p.between_share) + sched_link_python_s(j, steps_left);
    pthread_mutex_lock(&l->mu);
    est_train_range(&l->history, m, w->class_, nominal, low_s, high_s);
    pthread_mutex_unlock(&l->mu);
}

double sched_link_tail_s(struct sched_link *l, const struct store_job *j,
                         const struct sched_worker *w)
{
    struct sched_plan p;
    struct job_hyper h;
    if (!sched_plan_read(j->plan, &p) || !(p.flops_per_token > 0) || !(p.between_share > 0) ||
        j->max_steps <= 0)
        return 0;
    job_hyper_parse(j->hyper, &h);
    if (h.rft_group <= 0)
        return 0;
    double rounds =
        est_rft_validation_rounds(j->max_steps, job_hyper_rft_eval_every(&h, j->max_steps));
    double steps_s =
        capacity_train_seconds(sched_link_train_tokens(j) * p.flops_per_token, p.params, w) *
        sched_link_speed_factor(l, j);
    return steps_s > 0 ? steps_s * p.between_share / rounds : 0;
}

/* ---- the pass --------------------------------------------------------- */

struct message_ctx {
    enum job_message message;
    enum job_message fail;
    int64_t now;
};

/* The message of a waiting job that no worker can run any more: the
 * planner's rule (planner_fit_for_need), as at creation, so a 16-bit job
 * that 4-bit would fit gets "Not available right now. Choose a lower
 * precision." A job whose model is gone gets "Not available right now." */
static enum job_message no_fit_message(struct control *ctl, const char *id, int64_t need,
                                       const struct sched_worker *w, size_t n)
{
    struct store_job j;
    struct catalog_model m;
    struct plan_job pj, norm;
    if (store_job_get(ctl->store, NULL, id, &j) || !catalog_find(ctl->catalog, j.model, &m))
        return MSG_NOT_AVAILABLE;
    sched_link_plan_job(&m, &j, &pj);
    if (planner_normalize(&pj, &norm, NULL, 0))
        return MSG_NOT_AVAILABLE;
    enum job_message msg = planner_fit_message(planner_fit_for_need(&norm, need, w, n));
    return msg == MSG_NONE ? MSG_NOT_AVAILABLE : msg;
}

/* Writes a waiting job's pass message, or fails a job nothing can run. */
static enum alallo_err message_cb(struct store_job *j, struct store_attempt *unused,
                                  struct store_writes *w, void *vctx)
{
    const struct message_ctx *c = vctx;
    (void)unused;
    if (j->active_attempt[0] || j->stop_reason[0] ||
        (j->status != JOB_QUEUED && j->status != JOB_RESCHEDULING))
        return ERR_CONFLICT;
    if (c->fail != MSG_NONE) {
        if (j->steps_done > 0)
            return ERR_CONFLICT; /* a job that trained keeps waiting for its capacity */
        enum alallo_err e = job_move_to(j, JOB_FAILED, c->fail);
        if (e)
            return e;
        j->finished_ms = c->now;
        return store_writes_event(w, c->now, "error", "message", j->message, NULL);
    }
    if (j->status != JOB_QUEUED)
        return ERR_CONFLICT;
    const char *text = job_message_text(c->message);
    if (strcmp(j->message, text) == 0)
        return ERR_CONFLICT;
    return job_move_to(j, JOB_QUEUED, c->message);
}

static long micros_since(clockid_t clock, const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(clock, &t1);
    return (long)((t1.tv_sec - t0->tv_sec) * 1000000L + (t1.tv_nsec - t0->tv_nsec) / 1000);
}

/* Counts a pass begun at t0 (wall) and c0 (its thread's CPU time) that
 * read n waiting jobs in /metrics. */
static void note_pass(struct control *ctl, const struct timespec *t0,
                      const struct timespec *c0, size_t n)
{
    long us = micros_since(CLOCK_MONOTONIC, t0);
    long cpu_us = micros_since(CLOCK_THREAD_CPUTIME_ID, c0);
    struct control_metrics *m = &ctl->metrics;
    atomic_fetch_add(&m->pass_cpu_us_sum, cpu_us);
    atomic_store(&m->pass_cpu_us_last, cpu_us);
    atomic_fetch_add(&m->passes, 1);
    atomic_fetch_add(&m->pass_us_sum, us);
    atomic_store(&m->pass_us_last, us);
    atomic_store(&m->pass_jobs_last, (long)n);
    long max = atomic_load(&m->pass_us_max);
    while (us > max && !atomic_compare_exchange_weak(&m->pass_us_max, &max, us))
        ;
}

enum alallo_err sched_link_pass(struct control *ctl, const char *claimer,
                                char job_out[IDS_MAX])
{
    if (job_out)
        job_out[0] = '\0';
    if (!control_leads(ctl))
        return ERR_UNAVAILABLE; /* only the leader places jobs (leadership.h) */
    struct timespec t0, c0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    double now = (double)clock_now_ms() / 1000.0;
    if (claimer && job_out &&
        memo_take(ctl->sched, claimer, now, ctl->cfg.pass_reuse_s, job_out))
        return ERR_OK;
    struct sched_worker *w = calloc(SCHED_LINK_WORKERS, sizeof *w);
    struct queue q = {0};
    struct sched_assignment *as = calloc(SCHED_LINK_WORKERS, sizeof *as);
    enum job_message *msgs = NULL;
    enum alallo_err e = ERR_NOMEM;
    if (!w || !as)
        goto out;
    pthread_mutex_lock(&ctl->sched->mu);
    int n = sched_link_workers(ctl, now, w, SCHED_LINK_WORKERS);
    if (n == 0) {
        /* No capacity known: nothing to place, and jobs created meanwhile
         * already say they wait for capacity. */
        pthread_mutex_unlock(&ctl->sched->mu);
        e = ERR_OK;
        goto out;
    }
    e = load_queue(ctl, &q, 0);
    msgs = calloc(q.n ? q.n : 1, sizeof *msgs);
    if (!e && !msgs)
        e = ERR_NOMEM;
    if (e || q.n == 0) {
        pthread_mutex_unlock(&ctl->sched->mu);
        goto out;
    }
    struct sched_pass_out po = {.assignments = as, .messages = msgs};
    e = sched_pass(q.jobs, q.n, w, (size_t)n, q.loads, q.n_loads, now, &po);
    pthread_mutex_unlock(&ctl->sched->mu);
    if (e)
        goto out;
    int me = -1;
    for (int i = 0; claimer && i < n; i++)
        if (strcmp(w[i].name, claimer) == 0)
            me = i;
    if (me >= 0 && job_out) {
        long k = sched_assigned_job(&po, (size_t)me);
        if (k >= 0)
            text_copy(job_out, IDS_MAX, q.ids[k]);
    }
    /* The other idle workers' jobs wait in the memo for their claims. */
    struct sched_link *l = ctl->sched;
    pthread_mutex_lock(&l->memo_mu);
    l->memo_n = 0;
    for (size_t i = 0; i < po.n_assignments && l->memo_n < SCHED_LINK_WORKERS; i++) {
        if ((int)po.assignments[i].worker == me)
            continue;
        struct memo_entry *m = &l->memo[l->memo_n++];
        text_copy(m->worker, sizeof m->worker, w[po.assignments[i].worker].name);
        text_copy(m->job, sizeof m->job, q.ids[po.assignments[i].job]);
    }
    l->memo_at = now;
    pthread_mutex_unlock(&l->memo_mu);
    /* The most memory a worker that may run jobs offers (capacity_may_run:
     * one lost a moment ago may come back): a job that needs more fits
     * nowhere any more (the workers that could run it left). */
    int64_t most_mem = -1;
    for (int k = 0; k < n; k++)
        if (capacity_may_run(&w[k]) && w[k].mem_bytes > most_mem)
            most_mem = w[k].mem_bytes;
    for (size_t i = 0; i < q.n; i++) {
        struct message_ctx c = {.message = msgs[i], .fail = MSG_NONE, .now = clock_now_ms()};
        bool fits = q.jobs[i].mem_bytes <= most_mem;
        if (!fits && n > 0)
            c.fail = no_fit_message(ctl, q.ids[i], q.jobs[i].mem_bytes, w, (size_t)n);
        else if (!q.queued[i] || strcmp(q.message[i], job_message_text(msgs[i])) == 0)
            continue;
        store_job_update(ctl->store, q.ids[i], NULL, message_cb, &c);
    }
out:
    note_pass(ctl, &t0, &c0, q.n);
    queue_free(&q);
    free(msgs);
    free(as);
    free(w);
    return e;
}
