/* rft_run.c - reinforcement fine-tuning's loop (rft_run.h). */
#include "train/run/rft_run.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/grader.h"
#include "core/grader_python.h"
#include "core/job_hyper.h"
#include "core/rng.h"
#include "train/data/data.h"
#include "train/formats/checkpoint.h"
#include "train/kernels/cpu_path.h"
#include "train/kernels/gemm.h"
#include "train/model/grpo.h"
#include "train/model/grpo_pass.h"
#include "train/model/model.h"
#include "train/model/optim.h"
#include "train/run/generate.h"
#include "train/run/rollout.h"
#include "train/run/run_load.h"
#include "train/run/side_work.h"
#include "train/run/train_events.h"
#include "train/run/trainer.h"

#define RFT_MAX_JUDGES 8
#define RFT_STREAM 0x5f7            /* the rng streams of the rollouts */
/* "one-at-a-time" decodes the answers one after another instead of
 * together (bench/train/rft.sh compares the two) */
#define RFT_ROLLOUT_ENV "ALALLO_RFT_ROLLOUT"
/* "inline" grades a step's answers after its rollouts instead of beside
 * them (bench/train/rft.sh compares the two) */
#define RFT_GRADING_ENV "ALALLO_RFT_GRADING"

struct judge {
    char name[256];
    struct generator *g;
};

struct rft {
    const struct train_config *c;
    struct run_text text; /* the tokenizer, the chat template, the context */
    struct model *m;
    struct model_acts *a;
    struct optim opt;
    json_t *grader, *models;
    json_t *train, *valid; /* arrays of data lines */
    struct generator *gen;
    struct judge judges[RFT_MAX_JUDGES];
    int n_judges;
    bool batched; /* rollouts through the batcher, else one answer at a time */
    bool beside;  /* a step's answers graded in a thread as the rollouts finish them */
    int seq, rows;
    int32_t *ids;
    uint8_t *mask;
    double *nll, *ref;
    float *w;
    long grade_errors;
    char err[600];
};

/* A stop asked for (SIGTERM: a cancel, a move, a preemption): the step
 * under way ends, a checkpoint of it is written and the run stops, so the
 * attempt that takes the job over goes on at the next step. A checkpoint
 * asked for (SIGUSR1): written at the end of the step under way, and the
 * run goes on (docs/rft.md, "Checkpoints and resume"). */
static volatile sig_atomic_t g_stop, g_ckpt;

static void on_signal(int sig)
{
    if (sig == SIGTERM)
        g_stop = 1;
    else if (sig == SIGUSR1)
        g_ckpt = 1;
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

/* ------------------------------------------------------------ data */

/* The lines of a prompts file (checked at upload) as an array. */
static json_t *read_prompts(const char *path, const char *name, char *err, size_t cap)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, cap, "%s: cannot be read", name);
        return NULL;
    }
    json_t *out = json_array();
    char *line = NULL;
    size_t linecap = 0;
    ssize_t n;
    long no = 0;
    while ((n = getline(&line, &linecap, f)) >= 0) {
        no++;
        json_t *o = json_loadb(line, (size_t)n, JSON_DECODE_ANY, NULL);
        if (!o)
            continue; /* a blank line */
        json_t *msgs = json_object_get(o, "messages");
        if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
            snprintf(err, cap, "line %ld of %s: a prompt has \"messages\", the user's last", no,
                     name);
            json_decref(o);
            json_decref(out);
            out = NULL;
            break;
        }
        json_array_append_new(out, o);
    }
    free(line);
    fclose(f);
    if (out && json_array_size(out) == 0) {
        snprintf(err, cap, "%s: the file has no prompts", name);
        json_decref(out);
        out = NULL;
    }
    return out;
}

/* The text of the user's last message of a prompt (for sample events). */
static const char *last_user(const json_t *item)
{
    const json_t *msgs = json_object_get(item, "messages");
    const char *s = json_string_value(
        json_object_get(json_array_get(msgs, json_array_size(msgs) - 1), "content"));
    return s ? s : "";
}

/* ------------------------------------------------------------ graders */

/* The models the grader asks (score_model graders, alone or in a multi),
 * each a generator over its folder opened once when the run loads, so
 * that grading, in the loop's thread or the grading thread, only reads
 * r->judges. Each judge is asked by one thread at a time: the grading
 * thread during a step's rollouts, the loop's thread at a validation. */
static bool open_judge(void *ctx, const struct grader_ask *a)
{
    struct rft *r = ctx;
    for (int i = 0; i < r->n_judges; i++)
        if (strcmp(r->judges[i].name, a->model) == 0)
            return true;
    const char *dir = json_string_value(json_object_get(r->models, a->model));
    if (!dir) {
        snprintf(r->err, sizeof r->err, "the grader's model %.200s is not at hand", a->model);
        return false;
    }
    if (r->n_judges == RFT_MAX_JUDGES) {
        snprintf(r->err, sizeof r->err, "the grader asks more than %d models", RFT_MAX_JUDGES);
        return false;
    }
    struct judge *j = &r->judges[r->n_judges];
    snprintf(j->name, sizeof j->name, "%s", a->model);
    char why[400];
    j->g = gen_open(dir, NULL, why, sizeof why);
    if (!j->g) {
        snprintf(r->err, sizeof r->err, "the grader's model %.100s cannot be loaded: %s",
                 a->model, why);
        return false;
    }
    r->n_judges++;
    return true;
}

/* A score_model grader's question to its model (opened by open_judge). */
static int ask_judge(void *ctx, const char *model, const json_t *messages,
                     const json_t *sampling, char **reply, char *err, size_t errcap)
{
    struct rft *r = ctx;
    struct judge *j = NULL;
    for (int i = 0; i < r->n_judges && !j; i++)
        if (strcmp(r->judges[i].name, model) == 0)
            j = &r->judges[i];
    if (!j) {
        snprintf(err, errcap, "the grader's model %s is not at hand", model);
        return -1;
    }
    const json_t *mt = json_object_get(sampling, "max_completions_tokens");
    const json_t *t = json_object_get(sampling, "temperature");
    const json_t *p = json_object_get(sampling, "top_p");
    const json_t *seed = json_object_get(sampling, "seed");
    struct gen_opts o = {.max_tokens = json_is_integer(mt) ? (int)json_integer_value(mt)
                                                         : GRADER_MODEL_DEFAULT_TOKENS,
                         .temperature = json_is_number(t) ? (float)json_number_value(t) : 0.0f,
                         .top_p = json_is_number(p) ? (float)json_number_value(p) : 1.0f,
                         .seed = json_is_integer(seed) ? (uint64_t)json_integer_value(seed) : 0};
    struct gen_result res;
    if (gen_run_chat(j->g, messages, NULL, &o, &res, err, errcap) != 0)
        return -1;
    *reply = strdup(res.text ? res.text : "");
    gen_result_free(&res);
    return *reply ? 0 : -1;
}

/* The reward of one answer; a grader that fails on it gives 0 (counted,
 * the first said in the log). subs, when not NULL, adds a multi's scores. */
static double grade(struct rft *r, const json_t *item, const char *answer, json_t *subs)
{
    struct grader_model mdl = {ask_judge, r};
    struct grader_result g;
    char err[400];
    if (!grader_run(r->grader, answer, item, &mdl, &g, err, sizeof err)) {
        if (r->grade_errors++ == 0)
            tev_warn("the grader failed on an answer, which scores 0: %s", err);
        return 0;
    }
    const char *k;
    json_t *v;
    json_object_foreach(g.sub_rewards, k, v)
    {
        json_t *had = json_object_get(subs, k);
        if (subs)
            json_object_set_new(subs, k,
                                json_real(json_number_value(had) + json_number_value(v)));
    }
    json_decref(g.sub_rewards);
    return g.reward;
}

/* The answers to req[0..n) from the current policy, batched or one at a
 * time as the run chose, into texts. 0, or -1 with r->err (a prompt the
 * model cannot answer: GEN_TOO_LONG and the like). */
static int roll(struct rft *r, const struct rollout_req *req, int n, char **texts)
{
    char why[400];
    if (rollout_run(r->gen, req, n, r->batched, texts, NULL, why, sizeof why) != 0) {
        snprintf(r->err, sizeof r->err, "a prompt cannot be answered: %s", why);
        return -1;
    }
    return 0;
}

/* What answer b of prompt item is asked with. */
static struct rollout_req ask(const struct rft *r, const json_t *item, float temperature,
                              uint64_t seed)
{
    return (struct rollout_req){.messages = json_object_get(item, "messages"),
                                .tools = json_object_get(item, "tools"),
                                .opts = {.max_tokens = r->c->rft_answer_tokens,
                                         .temperature = temperature, .top_p = 1.0f,
                                         .seed = seed}};
}

/* ------------------------------------------------------------ a step */

/* Lays the answers out as training rows, as a chat file is: each prompt's
 * messages and the answer as the assistant's turn, the loss on the answer. */
static struct dataset *layout(struct rft *r, const json_t *const *items, char *const *answers,
                              int n)
{
    size_t len = 0, cap = 0;
    char *buf = NULL;
    for (int i = 0; i < n; i++) {
        json_t *msgs = json_deep_copy(json_object_get(items[i], "messages"));
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "assistant", "content",
                                              answers[i]));
        json_t *line = json_pack("{s:o}", "messages", msgs);
        json_t *tools = json_object_get(items[i], "tools");
        if (tools)
            json_object_set(line, "tools", tools);
        char *s = json_dumps(line, JSON_COMPACT);
        json_decref(line);
        size_t sl = s ? strlen(s) : 0;
        if (!s || len + sl + 2 > cap) {
            cap = (len + sl + 2) * 2;
            char *b2 = s ? realloc(buf, cap) : NULL;
            if (!b2) {
                free(s);
                free(buf);
                snprintf(r->err, sizeof r->err, "out of memory laying out the answers");
                return NULL;
            }
            buf = b2;
        }
        memcpy(buf + len, s, sl);
        len += sl;
        buf[len++] = '\n';
        free(s);
    }
    struct dataset *d = dataset_from_buffer(buf, len, "the answers", r->text.tok, r->text.fmt,
                                            run_text_why_no_format(&r->text), (size_t)r->seq,
                                            r->err, sizeof r->err);
    free(buf);
    return d;
}

struct step_stats {
    double reward, spread, length, kl, loss, tokens;
    json_t *subs; /* a multi's mean scores */
    /* where the step's time went (bench/train/rft.sh) */
    double rollout_s, grade_s, update_s, answer_tokens;
    double grade_busy_s;  /* grading's own time, beside the rollouts or not */
    double rollout_cpu_s; /* the rollouts' CPU seconds, all threads */
};

/* A step's answers being graded: answer b's reward and, for a multi
 * grader, its graders' scores, each in its own place, so that the sums
 * made afterwards in answer order are the same whenever each was graded. */
struct grading {
    struct rft *r;
    const json_t **rows;
    char **answers;
    double *reward;
    json_t **subs;
    double busy_s; /* the time spent grading, wherever it ran */
};

static void grade_answer(void *ctx, int b)
{
    struct grading *g = ctx;
    /* a model grader's products split over the job's threads in this
     * thread as in the loop's, so its answers are the same bits */
    gemm_set_threads(g->r->c->threads);
    double t0 = tev_now();
    g->reward[b] = grade(g->r, g->rows[b], g->answers[b], g->subs[b]);
    g->busy_s += tev_now() - t0;
}

static void answer_done(void *ctx, int b)
{
    side_work_push(ctx, b);
}

/* One step over prompts items[0..n). 0, or -1 with r->err. */
static int step(struct rft *r, const json_t *const *items, int n, uint64_t at, float lr,
                struct step_stats *st)
{
    const struct train_config *c = r->c;
    int G = c->rft_group, B = n * G;
    const json_t **rows = calloc((size_t)B, sizeof *rows);
    struct rollout_req *req = calloc((size_t)B, sizeof *req);
    char **answers = calloc((size_t)B, sizeof *answers);
    double *reward = calloc((size_t)B, sizeof *reward), *adv = calloc((size_t)B, sizeof *adv);
    json_t **subs = calloc((size_t)B, sizeof *subs);
    int rc = -1;
    struct dataset *d = NULL;
    if (!rows || !req || !answers || !reward || !adv || !subs) {
        snprintf(r->err, sizeof r->err, "out of memory for the answers");
        goto out;
    }
    memset(st, 0, sizeof *st);
    st->subs = json_object();
    for (int b = 0; b < B; b++) {
        rows[b] = items[b / G];
        req[b] = ask(r, rows[b], 1.0f, rng_derive(c->seed, RFT_STREAM + at * 4096u + (uint64_t)b));
    }
    for (int b = 0; b < B; b++)
        if (!(subs[b] = json_object())) {
            snprintf(r->err, sizeof r->err, "out of memory for the answers");
            goto out;
        }
    /* beside: each answer is graded as the rollouts finish it, in a
     * thread beside them, and grading's time in the step is what is left
     * when the rollouts are done; inline: all of them after the rollouts */
    struct grading gr = {r, rows, answers, reward, subs, 0};
    struct side_work *side = NULL;
    if (r->beside && !(side = side_work_start(grade_answer, &gr, B, true))) {
        snprintf(r->err, sizeof r->err, "out of memory for the answers");
        goto out;
    }
    double t0 = tev_now(), cpu0 = clock_cpu_s();
    char why[400];
    int rolled = rollout_run_each(r->gen, req, B, r->batched, answers, NULL,
                                  side ? answer_done : NULL, side, why, sizeof why);
    double t1 = tev_now();
    st->rollout_s = t1 - t0;
    st->rollout_cpu_s = clock_cpu_s() - cpu0;
    if (side)
        side_work_finish(side, &st->grade_s);
    if (rolled != 0) {
        snprintf(r->err, sizeof r->err, "a prompt cannot be answered: %s", why);
        goto out;
    }
    if (!side) {
        for (int b = 0; b < B; b++)
            grade_answer(&gr, b);
        st->grade_s = tev_now() - t1;
    }
    st->grade_busy_s = gr.busy_s;
    for (int b = 0; b < B; b++) {
        st->reward += reward[b];
        const char *k;
        json_t *v;
        json_object_foreach(subs[b], k, v)
            json_object_set_new(st->subs, k, json_real(json_number_value(json_object_get(
                                                           st->subs, k)) +
                                                       json_number_value(v)));
    }
    double t_update = tev_now();
    st->reward /= B;
    for (int b = 0; b < B; b++)
        st->spread += (reward[b] - st->reward) * (reward[b] - st->reward);
    st->spread = sqrt(st->spread / B);
    for (int i = 0; i < n; i++)
        grpo_advantages(G, reward + i * G, adv + i * G);
    d = layout(r, (const json_t *const *)rows, answers, B);
    if (!d)
        goto out;
    int T = 2;
    for (size_t i = 0; i < d->n; i++)
        T = (int)d->ex[i].len > T ? (int)d->ex[i].len : T;
    memset(r->ids, 0, (size_t)B * T * sizeof *r->ids);
    memset(r->mask, 0, (size_t)B * T);
    for (int b = 0; b < B; b++) {
        memcpy(r->ids + (size_t)b * T, d->ex[b].ids, d->ex[b].len * sizeof *r->ids);
        memcpy(r->mask + (size_t)b * T, d->ex[b].mask, d->ex[b].len);
        st->tokens += (double)d->ex[b].len;
    }
    size_t targets = model_count_targets(r->mask, B, T);
    st->length = (double)targets / B;
    st->answer_tokens = (double)targets;
    bool kl = c->rft_kl > 0 && !c->full;
    if (kl && grpo_base_token_losses(r->m, r->a, r->ids, r->mask, B, T, r->ref)) {
        snprintf(r->err, sizeof r->err, "out of memory for the reference");
        goto out;
    }
    struct grpo_batch gb = {.B = B, .T = T, .mask = r->mask, .adv = adv,
                            .ref_nll = kl ? r->ref : NULL, .beta = c->rft_kl, .eps = GRPO_CLIP};
    grpo_gradients(r->m, r->a, r->ids, &gb, r->nll, r->w);
    st->loss = gb.loss;
    st->kl = gb.kl;
    double norm = optim_grad_norm(r->m->grad, r->m->n_train);
    if (!isfinite(norm) || !isfinite(gb.loss)) {
        snprintf(r->err, sizeof r->err,
                 "the loss became NaN at step %" PRIu64 "; try a lower learning rate", at + 1);
        goto out;
    }
    optim_adamw_step(&r->opt, r->m->train, r->m->grad, optim_clip_factor(norm, c->max_grad_norm),
                     lr);
    st->update_s = tev_now() - t_update;
    const char *k;
    json_t *v;
    json_object_foreach(st->subs, k, v)
        json_object_set_new(st->subs, k, json_real(json_number_value(v) / B));
    rc = 0;
out:
    for (int b = 0; answers && b < B; b++)
        free(answers[b]);
    for (int b = 0; subs && b < B; b++)
        json_decref(subs[b]);
    free(subs);
    free(answers);
    free(req);
    free(rows);
    free(reward);
    free(adv);
    dataset_free(d);
    return rc;
}

/* The validation reward: eval_samples answers to each validation prompt
 * (greedy when one, sampled when more), graded. -1 with r->err. */
static int validate(struct rft *r, uint64_t at, double *mean)
{
    const json_t *set = r->valid ? r->valid : r->train;
    size_t n = json_array_size(set);
    if (!r->valid && n > JOB_HYPER_RFT_VALID_FROM_TRAIN)
        n = JOB_HYPER_RFT_VALID_FROM_TRAIN;
    int S = r->c->rft_eval_samples, N = (int)n * S;
    struct rollout_req *req = calloc((size_t)N, sizeof *req);
    char **texts = calloc((size_t)N, sizeof *texts);
    int rc = -1;
    if (!req || !texts) {
        snprintf(r->err, sizeof r->err, "out of memory for the validation answers");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        for (int s = 0; s < S; s++) {
            uint64_t seed = rng_derive(r->c->seed, RFT_STREAM + 0x7fffffffu + i * 64 + (size_t)s);
            req[i * (size_t)S + (size_t)s] =
                ask(r, json_array_get(set, i), S == 1 ? 0.0f : 1.0f, seed);
        }
    if (roll(r, req, N, texts))
        goto out;
    double sum = 0;
    for (int k = 0; k < N; k++) {
        const json_t *item = json_array_get(set, (size_t)(k / S));
        if (k > 0) {
            sum += grade(r, item, texts[k], NULL);
            continue;
        }
        /* the first prompt's first answer is the job's sample, with its
         * score and, for a multi grader, each of its graders' */
        json_t *subs = json_object();
        double score = grade(r, item, texts[k], subs);
        sum += score;
        bool multi = json_object_size(subs) > 0;
        tev_sample_graded(at, at == 0, last_user(item), texts[k], score, multi ? subs : NULL);
        json_decref(subs);
    }
    *mean = sum / (double)N;
    rc = 0;
out:
    for (int k = 0; texts && k < N; k++)
        free(texts[k]);
    free(texts);
    free(req);
    return rc;
}

/* ------------------------------------------------------------ checkpoints */

/* A checkpoint after step `done` (the trainable block, AdamW's state, the
 * meta.json every checkpoint has, and the validation reward in
 * train_loss's place is not kept: the step's loss is). Everything else a
 * step draws is a function of the seed and the step, so a run resumed
 * from it answers, grades and updates as an unbroken one. 0, or -1 with
 * r->err. */
static int save(struct rft *r, uint64_t done, double loss, const struct tev_metrics *m)
{
    char *meta = trainer_meta_json(r->c, r->m->n_train);
    if (!meta) {
        snprintf(r->err, sizeof r->err, "out of memory writing a checkpoint");
        return -1;
    }
    struct ckpt k = {.step = done, .opt_t = r->opt.t, .train_loss = loss, .n = r->m->n_train,
                     .params = r->m->train, .m = r->opt.m, .v = r->opt.v, .meta_json = meta};
    char path[CKPT_MAX_PATH];
    int rc = ckpt_write(r->c->checkpoint_dir, &k, path, sizeof path, r->err, sizeof r->err);
    free(meta);
    if (rc)
        return -1;
    tev_checkpoint(done, path, loss, m);
    tev_log("saved checkpoint at step %" PRIu64, done);
    ckpt_prune(r->c->checkpoint_dir, r->c->keep_checkpoints, 0);
    return 0;
}

/* Resumes from resume_from, or from the newest complete checkpoint of
 * checkpoint_dir at most resume_step (any without it). The step resumed
 * from in *step; 1 resumed, 0 none, -1 with r->err. */
static int resume(struct rft *r, uint64_t *step)
{
    const struct train_config *c = r->c;
    char path[CKPT_MAX_PATH];
    if (c->resume_step == 0)
        return 0;
    if (c->resume_from[0]) {
        snprintf(path, sizeof path, "%s", c->resume_from);
    } else {
        uint64_t upto = c->resume_step > 0 ? (uint64_t)c->resume_step : UINT64_MAX, at;
        int found = ckpt_latest_at_most(c->checkpoint_dir, upto, path, sizeof path, &at, r->err,
                                        sizeof r->err);
        if (found <= 0)
            return found;
    }
    struct ckpt k;
    if (trainer_read_checkpoint(path, r->m, c->max_steps, &k, r->err, sizeof r->err))
        return -1;
    memcpy(r->m->train, k.params, k.n * sizeof(float));
    memcpy(r->opt.m, k.m, k.n * sizeof(float));
    memcpy(r->opt.v, k.v, k.n * sizeof(float));
    r->opt.t = k.opt_t;
    *step = k.step;
    ckpt_release(&k);
    return 1;
}

/* ------------------------------------------------------------ the run */

static int load(struct rft *r)
{
    const struct train_config *c = r->c;
    int rc = run_load_text(c, &r->text, r->err, sizeof r->err);
    r->seq = r->text.seq;
    if (rc != TRAIN_OK)
        return rc;
    r->grader = json_loads(c->rft_grader, 0, NULL);
    r->models = json_loads(c->rft_models, 0, NULL);
    r->train = read_prompts(c->train_file, c->train_file_name, r->err, sizeof r->err);
    if (!r->train)
        return TRAIN_USER;
    if (c->validation_file[0]) {
        const char *slash = strrchr(c->validation_file, '/');
        r->valid = read_prompts(c->validation_file, slash ? slash + 1 : c->validation_file,
                                r->err, sizeof r->err);
        if (!r->valid)
            return TRAIN_USER;
    }
    r->m = run_load_model(c, &rc, r->err, sizeof r->err);
    if (!r->m)
        return rc;
    r->rows = c->batch_size * c->rft_group;
    size_t cells = (size_t)r->rows * (size_t)r->seq;
    r->a = model_acts_create(r->m, r->rows, r->seq);
    r->ids = malloc(cells * sizeof *r->ids);
    r->mask = malloc(cells);
    r->nll = malloc(cells * sizeof *r->nll);
    r->ref = malloc(cells * sizeof *r->ref);
    r->w = malloc(cells * sizeof *r->w);
    r->gen = gen_borrow(r->m, r->text.tok, c->model_dir);
    if (!r->a || !r->ids || !r->mask || !r->nll || !r->ref || !r->w || !r->gen ||
        !r->grader || !r->models || model_rope_ensure(r->m, r->seq) ||
        optim_init(&r->opt, r->m->n_train, r->m->n_decay, c->weight_decay)) {
        snprintf(r->err, sizeof r->err, "out of memory (%d answers of %d tokens a step)",
                 r->rows, r->seq);
        return TRAIN_INTERNAL;
    }
    /* the grader's models, loaded now: a fixed cost of the attempt, as the
     * estimate counts it (docs/estimator.md) */
    if (!grader_each_model(r->grader, "grader", open_judge, r))
        return strstr(r->err, "cannot be loaded") ? TRAIN_INTERNAL : TRAIN_USER;
    /* a python grader's sandbox, tried now: a worker without one ends the
     * attempt with the reason rather than scoring every answer 0
     * (docs/rft.md) */
    char param[256], msg[480];
    if (!grader_python_ready(r->grader, "grader", param, sizeof param, msg, sizeof msg)) {
        snprintf(r->err, sizeof r->err, "the python grader cannot run on this worker: %s", msg);
        return strstr(param, ".source") ? TRAIN_USER : TRAIN_INTERNAL;
    }
    return TRAIN_OK;
}

static void unload(struct rft *r)
{
    gen_close(r->gen);
    for (int i = 0; i < r->n_judges; i++)
        gen_close(r->judges[i].g);
    model_acts_free(r->a);
    optim_free(&r->opt);
    model_free(r->m);
    run_text_free(&r->text);
    json_decref(r->grader);
    json_decref(r->models);
    json_decref(r->train);
    json_decref(r->valid);
    free(r->ids);
    free(r->mask);
    free(r->nll);
    free(r->ref);
    free(r->w);
}

static int fail(struct rft *r, int rc)
{
    tev_error(rc == TRAIN_USER, r->err);
    unload(r);
    return rc;
}

/* The prompts of step `at`: batch_size of them, in an order shuffled anew
 * each epoch from the seed. */
static void pick(const struct rft *r, uint64_t at, const json_t **out)
{
    size_t n = json_array_size(r->train);
    int bs = r->c->batch_size;
    for (int k = 0; k < bs; k++) {
        uint64_t pos = at * (uint64_t)bs + (uint64_t)k, epoch = pos / n;
        /* a shuffle of the epoch as a permutation by Fisher-Yates from its seed */
        struct rng g;
        rng_seed(&g, rng_derive(r->c->seed, RFT_STREAM + 0x100000000ull + epoch));
        size_t idx = pos % n, slot = idx;
        size_t *perm = malloc(n * sizeof *perm);
        if (perm) {
            for (size_t i = 0; i < n; i++)
                perm[i] = i;
            for (size_t i = n - 1; i > 0; i--) {
                size_t j = (size_t)rng_below(&g, i + 1), t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
            slot = perm[idx];
            free(perm);
        }
        out[k] = json_array_get(r->train, slot);
    }
}

int rft_run(const struct train_config *c)
{
    install_signals();
    gemm_set_threads(c->threads);
    struct rft r;
    memset(&r, 0, sizeof r);
    r.c = c;
    char perr[256];
    if (cpu_path_init(NULL, perr, sizeof perr)) {
        snprintf(r.err, sizeof r.err, "%s", perr);
        return fail(&r, TRAIN_INTERNAL);
    }
    const char *how = getenv(RFT_ROLLOUT_ENV);
    r.batched = !how || !how[0] || strcmp(how, "batched") == 0;
    if (!r.batched && strcmp(how, "one-at-a-time") != 0) {
        snprintf(r.err, sizeof r.err, "%s is \"%.40s\": it is \"batched\" or \"one-at-a-time\"",
                 RFT_ROLLOUT_ENV, how);
        return fail(&r, TRAIN_USER);
    }
    const char *grading = getenv(RFT_GRADING_ENV);
    r.beside = !grading || !grading[0] || strcmp(grading, "beside") == 0;
    if (!r.beside && strcmp(grading, "inline") != 0) {
        snprintf(r.err, sizeof r.err, "%s is \"%.40s\": it is \"beside\" or \"inline\"",
                 RFT_GRADING_ENV, grading);
        return fail(&r, TRAIN_USER);
    }
    int rc = load(&r);
    if (rc != TRAIN_OK)
        return fail(&r, rc);
    size_t prompts = json_array_size(r.train);
    uint64_t from = 0;
    int resumed = resume(&r, &from);
    if (resumed < 0)
        return fail(&r, TRAIN_INTERNAL);
    tev_started(from, c->max_steps, prompts, 0, resumed ? (int64_t)from : -1,
                cpu_path_name(cpu_path_current()));
    if (resumed)
        tev_log("resumed from checkpoint at step %" PRIu64, from);
    tev_log("reinforcement fine-tuning started: %" PRIu64 " steps of %d prompts, %d answers "
            "each of at most %d tokens (%s), %s%s",
            c->max_steps, c->batch_size, c->rft_group, c->rft_answer_tokens,
            r.batched ? (r.beside ? "decoded together, graded beside"
                                  : "decoded together, graded after them")
                      : (r.beside ? "decoded one at a time, graded beside"
                                  : "decoded one at a time, graded after them"),
            c->full ? "full fine-tuning (fp32)"
            : c->four_bit ? "LoRA on a 4-bit (NF4) base"
                          : "LoRA on a 16-bit (bf16) base",
            c->rft_kl > 0 && !c->full ? ", KL penalty to the base" : "");
    if (c->rft_kl > 0 && c->full)
        tev_warn("the KL penalty needs LoRA (the reference is the base with the adapters off); "
                 "full fine-tuning runs without it");
    uint64_t every = c->rft_eval_interval > 0 ? (uint64_t)c->rft_eval_interval
                                               : JOB_HYPER_RFT_EVAL_EVERY(c->max_steps);
    struct lr_schedule sched = {(enum lr_kind)c->lr_schedule, c->learning_rate, c->warmup_steps,
                                c->max_steps, 0.0f};
    /* a resumed run measured its start in the attempt that began it */
    double valid = NAN, first_valid = NAN;
    if (!resumed) {
        if (validate(&r, from, &valid))
            return fail(&r, TRAIN_USER);
        first_valid = valid;
        tev_log("validation reward before training: %.4f", valid);
    }
    uint64_t saved = from; /* the step of the newest checkpoint, or the start */
    uint64_t reported_rss = 0;
    const json_t **items = calloc((size_t)c->batch_size, sizeof *items);
    if (!items) {
        snprintf(r.err, sizeof r.err, "out of memory");
        return fail(&r, TRAIN_INTERNAL);
    }
    struct step_stats st = {0};
    double roll_s = 0, grade_s = 0, update_s = 0, answer_toks = 0, update_toks = 0, busy_s = 0;
    double roll_cpu_s = 0;
    for (uint64_t at = from; at < c->max_steps; at++) {
        if (g_stop && at == from) { /* before any step: nothing to save */
            tev_log("stopped at step %" PRIu64 " on request", at);
            free(items);
            json_decref(st.subs);
            unload(&r);
            return TRAIN_STOPPED;
        }
        double t0 = tev_now();
        pick(&r, at, items);
        float lr = optim_lr(&sched, at);
        json_decref(st.subs);
        st.subs = NULL;
        if (step(&r, items, c->batch_size, at, lr, &st)) {
            free(items);
            json_decref(st.subs);
            return fail(&r, strstr(r.err, "cannot be answered") ? TRAIN_USER : TRAIN_INTERNAL);
        }
        roll_s += st.rollout_s;
        roll_cpu_s += st.rollout_cpu_s;
        grade_s += st.grade_s;
        busy_s += st.grade_busy_s;
        update_s += st.update_s;
        answer_toks += st.answer_tokens;
        update_toks += st.tokens;
        uint64_t done = at + 1;
        bool eval = done % every == 0 || done == c->max_steps;
        if (eval && validate(&r, done, &valid)) {
            free(items);
            json_decref(st.subs);
            return fail(&r, TRAIN_USER);
        }
        struct tev_metrics m;
        tev_metrics_clear(&m);
        m.v[TPROTO_METRIC_TRAIN_LOSS] = st.loss;
        m.v[TPROTO_METRIC_TRAIN_REWARD] = st.reward;
        if (eval)
            m.v[TPROTO_METRIC_VALID_REWARD] = valid;
        double dt = tev_now() - t0;
        struct tev_step_extra x = {.packing_efficiency = -1, .metrics = &m};
        tev_step_with(done, st.loss, lr, dt > 0 ? st.tokens / dt : 0, &x);
        /* the memory measured, as every trainer reports it: after the first
         * step and whenever it grew by a tenth (a job that outgrows its
         * worker is moved, docs/operations.md) */
        uint64_t rss = tev_peak_rss();
        if (rss > reported_rss + reported_rss / 10) {
            tev_memory(rss, 0);
            reported_rss = rss;
        }
        /* a checkpoint at each validation (the last step's model is saved
         * whole) and when one is asked for */
        bool asked = g_ckpt;
        g_ckpt = 0;
        if ((eval || asked) && done < c->max_steps) {
            if (save(&r, done, st.loss, &m)) {
                free(items);
                json_decref(st.subs);
                return fail(&r, TRAIN_INTERNAL);
            }
            saved = done;
        }
        char subs[512] = "";
        const char *k;
        json_t *v;
        json_object_foreach(st.subs, k, v)
        {
            size_t len = strlen(subs);
            snprintf(subs + len, sizeof subs - len, "%s%s %.3f", len ? ", " : "; graders: ", k,
                     json_number_value(v));
        }
        char vtext[64] = "";
        if (eval)
            snprintf(vtext, sizeof vtext, ", validation reward %.4f", valid);
        tev_log("step %" PRIu64 "/%" PRIu64 ": reward %.4f (spread %.4f), answers %.1f tokens, "
                "KL %.4f%s%s",
                done, c->max_steps, st.reward, st.spread, st.length, st.kl, vtext, subs);
        if (g_stop && done < c->max_steps) {
            /* stopped: the step just done is saved, so the next attempt
             * repeats no step (a stop that comes later than this check
             * ends the next step the same way) */
            int bad = saved != done && save(&r, done, st.loss, &m);
            free(items);
            json_decref(st.subs);
            if (bad)
                return fail(&r, TRAIN_INTERNAL);
            tev_log("stopped at step %" PRIu64 " on request", done);
            unload(&r);
            return TRAIN_STOPPED;
        }
    }
    free(items);
    json_decref(st.subs);
    if (resumed)
        tev_log("validation reward %.4f", valid);
    else
        tev_log("validation reward %.4f (%.4f before training)", valid, first_valid);
    double all = roll_s + grade_s + update_s;
    size_t answers_n = (size_t)c->max_steps * (size_t)c->batch_size * (size_t)c->rft_group;
    tev_log("where the steps' time went: rollouts %.1f s (%.0f answer tokens, %.1f tokens/s, "
            "%.0f%%; %.1f s of CPU, %.1f tokens per CPU second), grading %.3f ms per answer "
            "(%s; %.3f ms waited for after the rollouts, %.1f%%), updates %.1f s (%.0f tokens, "
            "%.1f tokens/s, %.0f%%)",
            roll_s, answer_toks, roll_s > 0 ? answer_toks / roll_s : 0,
            all > 0 ? 100 * roll_s / all : 0, roll_cpu_s,
            roll_cpu_s > 0 ? answer_toks / roll_cpu_s : 0, answers_n ? 1000 * busy_s / answers_n : 0,
            r.beside ? "beside the rollouts" : "after them",
            answers_n ? 1000 * grade_s / answers_n : 0,
            all > 0 ? 100 * grade_s / all : 0, update_s, update_toks,
            update_s > 0 ? update_toks / update_s : 0, all > 0 ? 100 * update_s / all : 0);
    char model_out[TRAIN_MAX_PATH + 16], adapter_out[TRAIN_MAX_PATH + 16];
    gen_close(r.gen);
    r.gen = NULL;
    model_acts_free(r.a);
    r.a = NULL;
    if (trainer_save_output(c, &r.m, model_out, adapter_out, sizeof model_out, r.err,
                            sizeof r.err))
        return fail(&r, TRAIN_INTERNAL);
    tev_log("training finished: %" PRIu64 " steps, final reward %.4f", c->max_steps, st.reward);
    tev_done(c->max_steps, st.loss, model_out, c->full ? NULL : adapter_out);
    unload(&r);
    return TRAIN_OK;
}
