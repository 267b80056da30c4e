/* trainer.c - the training loop of one attempt (see trainer.h).
 *
 * Order of work: settings -> tokenizer -> data (errors name file and line)
 * -> model -> resume from the latest complete checkpoint -> steps -> final
 * model. Each step takes the next batch_size examples of the epoch's
 * shuffled order (a permutation drawn from the seed and the epoch number,
 * so a resume needs only the cursor), pads them to the longest, runs
 * forward and backward, clips, and applies AdamW at the scheduled rate.
 * Nothing in a step depends on wall time or thread timing, so a resumed
 * run repeats the same bits as one that never stopped.
 */
#include "train/run/trainer.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fs.h"
#include "core/sample_prompts.h"
#include "train/formats/checkpoint.h"
#include "train/kernels/cpu_path.h"
#include "train/kernels/gemm.h"
#include "train/run/generate.h"
#include "train/tokenizer/chat_format.h"
#include "train/data/data.h"
#include "train/model/model.h"
#include "train/formats/modelio.h"
#include "train/model/ops.h"
#include "train/model/optim.h"
#include "train/model/dpo.h"
#include "train/run/rft_run.h"
#include "train/run/rollout.h"
#include "train/run/run_load.h"
#include "train/data/pack.h"
#include "core/rng.h"
#include "train/tokenizer/tokenizer.h"
#include "train/run/train_events.h"
#ifdef ALALLO_HAVE_CUDA
#include "train/cuda/cuda_train.h"
#endif

#define ERRCAP 2048
/* Steps between step events and log lines. */
#define REPORT_EVERY 10
/* rng_derive streams of the LoRA dropout masks: this plus the step */
#define LORA_DROPOUT_STREAM 0xd40900000000ULL

/* Sample answers: the job's own prompts, or the first prompts of the
 * validation set, greedy, this many tokens at most (docs/trainer.md,
 * "Sample answers"). */
#define SAMPLE_PROMPTS SAMPLE_PROMPTS_FROM_VALIDATION
#define SAMPLE_TOKENS SAMPLE_ANSWER_TOKENS

static volatile sig_atomic_t g_term, g_usr1;

static void on_signal(int sig)
{
    if (sig == SIGTERM)
        g_term = 1;
    else if (sig == SIGUSR1)
        g_usr1 = 1;
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

struct run {
    const struct train_config *c;
    struct tokenizer *tok;
    struct dataset *ds, *val;
    struct model *m;
    struct model_acts *a;     /* NULL on the GPU */
    struct optim opt;
    struct cuda_train *gpu;   /* the GPU's pass and optimizer (trainer_run_gpu), or NULL */
    int on_gpu;
    struct rng rng;
    struct lr_schedule sched;
    uint64_t step, epoch, cursor;
    uint64_t perm_epoch;
    int seq;                  /* the context: seq_len capped by the model's */
    uint32_t *perm;
    int32_t *ids, *seg;
    uint8_t *mask;
    /* the step's layout: example i of the step at row prow[i], offset poff[i] */
    int prow[PACK_MAX_EXAMPLES];
    size_t poff[PACK_MAX_EXAMPLES], plen[PACK_MAX_EXAMPLES];
    int pn, pT;
    size_t step_ex[PACK_MAX_EXAMPLES]; /* DPO: the data set index of each */
    /* DPO: the reference's log-probability of every example (ds->ex order),
     * computed once from the frozen base before training */
    double *ref_logp;
    double *tok_loss;
    float *tok_w;
    struct dpo_stats dpo;
    struct dpo_watch watch;    /* DPO: both answers' log-probabilities falling */
    size_t real_tokens, row_tokens; /* this attempt's, for the packing efficiency */
    double loss;
    double aux;               /* a mixture of experts' auxiliary term of the last step */
    uint64_t ckpt_step;
    uint64_t resumed_step;   /* the checkpoint resumed from; 0 none (kept by pruning) */
    double ckpt_t;
    /* watching it learn (docs/trainer.md, "Validation and early stopping") */
    struct tev_metrics metrics; /* the latest of each; what checkpoints carry */
    size_t val_cursor;          /* the next validation example of the batch check */
    double best_full;           /* the lowest full validation loss; INFINITY: none */
    uint64_t best_step;         /* its step, whose checkpoint is kept; 0 none */
    char best_path[TRAIN_MAX_PATH + 32]; /* that checkpoint's folder: this attempt's, or
                                    an earlier attempt's (carried through a resume) */
    int bad_epochs;             /* epochs ended since best_full last improved */
    json_t *samples;            /* the job's own sample prompts (c->sample_prompts); NULL none */
    char *meta;
    char path_note[320]; /* a resume on another CPU path, or "" */
    char err[ERRCAP];
};

#ifdef ALALLO_HAVE_CUDA
/* The GPU's side of a step (cuda_train.h); each 0, or -1 with r->err. */
static int gpu_failed(struct run *r)
{
    snprintf(r->err, sizeof r->err, "on the GPU: %s", cuda_ctx_error());
    return -1;
}

static int gpu_pass(struct run *r, struct pack_layout p, float dscale, int backward, float drop,
                    uint64_t seed, double *sum, size_t *got, size_t *hits)
{
    if (cuda_train_pass(r->gpu, r->ids, r->mask, r->seg, p.rows, p.T, dscale, backward, drop,
                        seed, sum, got, hits))
        return gpu_failed(r);
    return 0;
}

static int gpu_norm(struct run *r, double *norm)
{
    return cuda_train_grad_norm(r->gpu, norm) ? gpu_failed(r) : 0;
}

/* DPO's passes: the reference's token losses, and the weighted step. */
static int gpu_token_losses(struct run *r, struct pack_layout p, size_t *nt)
{
    if (cuda_train_token_losses(r->gpu, r->ids, r->mask, r->seg, p.rows, p.T, r->tok_loss, nt))
        return gpu_failed(r);
    return 0;
}

static int gpu_pass_weighted(struct run *r, struct pack_layout p, struct dpo_batch *b,
                             float drop, uint64_t seed, size_t *got)
{
    if (cuda_train_pass_weighted(r->gpu, r->ids, r->mask, r->seg, p.rows, p.T,
                                 dpo_batch_weights, b, r->tok_loss, r->tok_w, drop, seed, got))
        return gpu_failed(r);
    return 0;
}

/* The host model and optimizer (a resume's) onto the GPU. */
static int gpu_from_host(struct run *r)
{
    return cuda_train_from_host(r->gpu, r->m, &r->opt) ? gpu_failed(r) : 0;
}

static int gpu_adamw(struct run *r, float gscale, float lr)
{
    return cuda_train_adamw(r->gpu, gscale, lr) ? gpu_failed(r) : 0;
}

/* The host model and optimizer made the GPU's, before anything reads them. */
static int gpu_to_host(struct run *r)
{
    if (r->gpu && cuda_train_to_host(r->gpu, r->m, &r->opt))
        return gpu_failed(r);
    return 0;
}
#else
/* A CPU-only build never has r->gpu set: these are never reached. */
static int gpu_pass(struct run *r, struct pack_layout p, float dscale, int backward, float drop,
                    uint64_t seed, double *sum, size_t *got, size_t *hits)
{
    abort();
}
static int gpu_norm(struct run *r, double *norm)
{
    abort();
}
static int gpu_token_losses(struct run *r, struct pack_layout p, size_t *nt)
{
    abort();
}
static int gpu_pass_weighted(struct run *r, struct pack_layout p, struct dpo_batch *b,
                             float drop, uint64_t seed, size_t *got)
{
    abort();
}
static int gpu_from_host(struct run *r)
{
    abort();
}
static int gpu_adamw(struct run *r, float gscale, float lr)
{
    abort();
}
static int gpu_to_host(struct run *r)
{
    return 0;
}
#endif

static void run_free(struct run *r)
{
#ifdef ALALLO_HAVE_CUDA
    cuda_train_close(r->gpu);
#endif
    model_acts_free(r->a);
    model_free(r->m);
    optim_free(&r->opt);
    dataset_free(r->ds);
    dataset_free(r->val);
    tokenizer_free(r->tok);
    free(r->perm);
    free(r->ids);
    free(r->seg);
    free(r->ref_logp);
    free(r->tok_loss);
    free(r->tok_w);
    free(r->mask);
    free(r->meta);
    json_decref(r->samples);
}

static int fail(int user, const char *line)
{
    tev_error(user, line);
    return user ? TRAIN_USER : TRAIN_INTERNAL;
}

/* ------------------------------------------------------------ settings */

/* What the trainable block means; stored in each checkpoint's meta.json
 * and compared on resume. */
static char *meta_json(const struct train_config *c, size_t n_params)
{
    json_t *t = json_array();
    for (int p = 0; p < PROJ_COUNT; p++)
        if (c->lora_targets & (1u << p))
            json_array_append_new(t, json_string(model_proj_name(p)));
    json_t *o = json_pack("{ss ss ss s{si sf so} sI ss si si sI ss si}", "format",
                          "alallo-checkpoint",
                          "adapter", c->full ? "full" : "lora", "precision",
                          c->four_bit ? "4-bit" : "16-bit", "lora", "r", c->lora_r, "alpha",
                          (double)c->lora_alpha, "targets", t, "n_params", (json_int_t)n_params,
                          "model_dir", c->model_dir, "seq_len", c->seq_len, "batch_size",
                          c->batch_size, "seed", (json_int_t)c->seed, "cpu_path",
                          cpu_path_name(cpu_path_current()), "threads", c->threads);
    if (o && cpu_path_detail()[0]) /* what runs the products on onednn: its isa */
        json_object_set_new(o, "cpu_path_detail", json_string(cpu_path_detail()));
    char *s = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    return s;
}

static int meta_opts(const char *meta, struct model_opts *o, size_t *n_params, char *err,
                     size_t errcap);

char *trainer_meta_json(const struct train_config *c, size_t n_params)
{
    return meta_json(c, n_params);
}

int trainer_read_checkpoint(const char *path, const struct model *m, uint64_t max_steps,
                            struct ckpt *k, char *err, size_t errcap)
{
    if (ckpt_read(path, k, err, errcap))
        return -1;
    struct model_opts o;
    size_t n;
    if (meta_opts(k->meta_json, &o, &n, err, errcap))
        goto bad;
    if (k->n != m->n_train || n != m->n_train || o.full != m->opts.full ||
        (!o.full && (o.lora_r != m->opts.lora_r || o.lora_alpha != m->opts.lora_alpha ||
                     o.lora_targets != m->opts.lora_targets)) ||
        !k->m || !k->v || k->step > max_steps) {
        snprintf(err, errcap, "checkpoint at step %" PRIu64
                 " was made with other settings than this attempt's", k->step);
        goto bad;
    }
    return 0;
bad:
    ckpt_release(k);
    return -1;
}

/* Reads the model options a checkpoint was made with. */
static int meta_opts(const char *meta, struct model_opts *o, size_t *n_params, char *err,
                     size_t errcap)
{
    json_error_t je;
    json_t *j = json_loads(meta, 0, &je);
    const char *adapter = j ? json_string_value(json_object_get(j, "adapter")) : NULL;
    json_t *l = j ? json_object_get(j, "lora") : NULL;
    json_t *t = l ? json_object_get(l, "targets") : NULL;
    if (!adapter || !json_is_object(l) || !json_is_array(t)) {
        snprintf(err, errcap, "checkpoint meta.json is unreadable");
        json_decref(j);
        return -1;
    }
    memset(o, 0, sizeof *o);
    o->full = strcmp(adapter, "full") == 0;
    o->base_kind = WK_F32;
    if (!o->full) {
        o->lora_r = (int)json_integer_value(json_object_get(l, "r"));
        o->lora_alpha = (float)json_number_value(json_object_get(l, "alpha"));
        size_t i;
        json_t *v;
        json_array_foreach(t, i, v)
        {
            int p = model_proj_parse(json_string_value(v) ? json_string_value(v) : "");
            if (p >= 0)
                o->lora_targets |= 1u << p;
        }
    }
    *n_params = (size_t)json_integer_value(json_object_get(j, "n_params"));
    json_decref(j);
    return 0;
}

/* ------------------------------------------------------------ data order */

/* What the epoch's order shuffles: examples, or DPO's pairs. */
static size_t units(const struct run *r)
{
    return r->c->dpo ? r->ds->n / 2 : r->ds->n;
}

static int ensure_perm(struct run *r)
{
    size_t n = units(r);
    if (r->perm && r->perm_epoch == r->epoch)
        return 0;
    if (!r->perm && !(r->perm = malloc(n * sizeof *r->perm)))
        return -1;
    for (size_t i = 0; i < n; i++)
        r->perm[i] = (uint32_t)i;
    struct rng g;
    rng_seed(&g, rng_derive(r->c->seed, 0x5eed0000ULL + r->epoch));
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)rng_below(&g, (uint64_t)i + 1);
        uint32_t t = r->perm[i];
        r->perm[i] = r->perm[j];
        r->perm[j] = t;
    }
    r->perm_epoch = r->epoch;
    return 0;
}

/* Lays examples ex[0..n) out as rows of ids/mask/seg (pack.h): pads with
 * id 0 and mask 0, clears the mask at each example's first position (no
 * earlier token of the example predicts it) and sets seg to where each
 * example starts. Returns the layout, or rows 0 on a bad argument. */
static struct pack_layout lay_out(struct run *r, const struct example *const *ex, int n,
                                  size_t cap, int packing)
{
    size_t len[PACK_MAX_EXAMPLES], off[PACK_MAX_EXAMPLES];
    int *row = r->prow;
    struct pack_layout p = {0};
    for (int i = 0; i < n; i++)
        len[i] = r->plen[i] = ex[i]->len;
    if (pack_rows(len, n, cap, packing, row, off, &p))
        return (struct pack_layout){0};
    memcpy(r->poff, off, (size_t)n * sizeof *off);
    r->pn = n;
    r->pT = p.T;
    size_t T = (size_t)p.T;
    memset(r->ids, 0, (size_t)p.rows * T * sizeof *r->ids);
    memset(r->mask, 0, (size_t)p.rows * T);
    for (size_t i = 0; i < (size_t)p.rows * T; i++)
        r->seg[i] = (int32_t)(i % T); /* padding attends to itself alone */
    for (int i = 0; i < n; i++) {
        size_t at = (size_t)row[i] * T + off[i];
        memcpy(r->ids + at, ex[i]->ids, len[i] * sizeof *r->ids);
        memcpy(r->mask + at, ex[i]->mask, len[i]);
        r->mask[at] = 0;
        for (size_t t = 0; t < len[i]; t++)
            r->seg[at + t] = (int32_t)off[i];
    }
    return p;
}

/* Fills ids/mask/seg with the next batch_size examples of the epoch's
 * order; returns their layout (rows 0 on failure) and adds the real token
 * count to *tokens. */
static struct pack_layout next_batch(struct run *r, size_t *tokens)
{
    int B = r->c->batch_size, n = 0;
    const struct example *ex[PACK_MAX_EXAMPLES];
    for (int b = 0; b < B; b++) {
        if (ensure_perm(r))
            return (struct pack_layout){0};
        size_t u = r->perm[r->cursor];
        if (r->c->dpo) { /* a pair: its preferred example, then the other */
            r->step_ex[n] = 2 * u;
            ex[n++] = &r->ds->ex[2 * u];
            r->step_ex[n] = 2 * u + 1;
            ex[n++] = &r->ds->ex[2 * u + 1];
        } else {
            ex[n++] = &r->ds->ex[u];
        }
        if (++r->cursor == units(r)) {
            r->cursor = 0;
            r->epoch++;
        }
    }
    struct pack_layout p = lay_out(r, ex, n, (size_t)r->seq, r->c->packing);
    *tokens += p.real;
    return p;
}

/* ------------------------------------------------------------ DPO */

/* The step's layout as dpo.h reads it; ref: the reference's log-probability
 * of each of the step's examples (NULL while computing them). */
static struct dpo_batch dpo_batch_of(const struct run *r, const double *ref)
{
    return (struct dpo_batch){.n_ex = r->pn, .row = r->prow, .off = r->poff, .len = r->plen,
                              .T = r->pT, .ref = ref, .mask = r->mask,
                              .beta = r->c->dpo_beta};
}

/* The frozen reference's log-probability of every example, once, before
 * training changes anything: the base model as loaded (LoRA's B starts at
 * zero, so the adapters add nothing; full fine-tuning has not stepped yet),
 * on the GPU when the attempt has one (before a resume is copied up).
 * No second copy of the weights is kept (docs/trainer.md, "DPO").
 * 0, or -1 with r->err. */
static int reference_logps(struct run *r)
{
    const struct dataset *d = r->ds;
    r->ref_logp = malloc(d->n * sizeof *r->ref_logp);
    if (!r->ref_logp) {
        snprintf(r->err, sizeof r->err, "out of memory for the reference's log-probabilities");
        return -1;
    }
    int chunk = 2 * r->c->batch_size;
    for (size_t i = 0; i < d->n; i += (size_t)chunk) {
        int nb = (int)(d->n - i < (size_t)chunk ? d->n - i : (size_t)chunk);
        const struct example *ex[PACK_MAX_EXAMPLES];
        for (int b = 0; b < nb; b++)
            ex[b] = &d->ex[i + b];
        struct pack_layout p = lay_out(r, ex, nb, (size_t)r->seq, r->c->packing);
        size_t nt;
        if (r->gpu) {
            if (gpu_token_losses(r, p, &nt))
                return -1;
        } else {
            model_token_losses(r->m, r->a, r->ids, r->mask, r->seg, p.rows, p.T, r->tok_loss,
                               &nt);
        }
        struct dpo_batch b = dpo_batch_of(r, NULL);
        dpo_example_logps(&b, r->tok_loss, r->ref_logp + i);
    }
    return 0;
}

/* ------------------------------------------------------------ checkpoints */

/* Whether early stopping's best checkpoint is in this attempt's own folder. */
static int best_is_own(const struct run *r)
{
    size_t n = strlen(r->c->checkpoint_dir);
    return r->best_step && strncmp(r->best_path, r->c->checkpoint_dir, n) == 0 &&
           r->best_path[n] == '/';
}

/* A checkpoint's meta.json: the run's settings and, with early stopping,
 * where its count stands (the best full validation loss, its step and
 * checkpoint, the epochs since), so that an attempt resuming from it goes
 * on counting as an unbroken run would (docs/trainer.md). malloc'd; NULL on
 * out of memory. */
static char *checkpoint_meta(const struct run *r)
{
    json_t *o = json_loads(r->meta, 0, NULL);
    if (o && r->c->early_stopping_patience > 0 && r->best_step)
        json_object_set_new(o, "early_stopping",
                            json_pack("{sf sI ss si}", "best_full_valid_loss", r->best_full,
                                      "best_step", (json_int_t)r->best_step, "best_path",
                                      r->best_path, "bad_epochs", r->bad_epochs));
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    return text;
}

/* Takes early stopping's count from the meta.json of the checkpoint
 * resumed from, when it has one whose best checkpoint is still there. */
static void resume_early_stopping(struct run *r, const char *meta)
{
    json_t *o = json_loads(meta, 0, NULL);
    json_t *es = json_object_get(o, "early_stopping");
    json_t *loss = json_object_get(es, "best_full_valid_loss");
    json_int_t best = json_integer_value(json_object_get(es, "best_step"));
    json_int_t bad = json_integer_value(json_object_get(es, "bad_epochs"));
    const char *path = json_string_value(json_object_get(es, "best_path"));
    char why[200];
    if (r->c->early_stopping_patience > 0 && json_is_number(loss) && best > 0 &&
        (uint64_t)best <= r->step && bad >= 0 && path &&
        strlen(path) < sizeof r->best_path) {
        if (ckpt_verify(path, why, sizeof why) == 0) {
            r->best_full = json_number_value(loss);
            r->best_step = (uint64_t)best;
            r->bad_epochs = (int)bad;
            snprintf(r->best_path, sizeof r->best_path, "%s", path);
        } else {
            fprintf(stderr,
                    "alallo train: early stopping's best checkpoint %s is gone (%s); "
                    "counting patience afresh\n",
                    path, why);
        }
    }
    json_decref(o);
}

static int save_checkpoint(struct run *r)
{
    if (gpu_to_host(r))
        return -1;
    char *meta = checkpoint_meta(r);
    if (!meta) {
        snprintf(r->err, sizeof r->err, "out of memory writing a checkpoint");
        return -1;
    }
    struct ckpt k = {
        .step = r->step, .opt_t = r->opt.t, .epoch = r->epoch, .cursor = r->cursor,
        .rng = r->rng, .train_loss = r->loss, .n = r->m->n_train, .params = r->m->train,
        .m = r->opt.m, .v = r->opt.v, .meta_json = meta,
    };
    char path[CKPT_MAX_PATH];
    int rc = ckpt_write(r->c->checkpoint_dir, &k, path, sizeof path, r->err, sizeof r->err);
    free(meta);
    if (rc)
        return -1;
    r->ckpt_step = r->step;
    r->ckpt_t = tev_now();
    tev_checkpoint(r->step, path, r->loss, r->val && !r->c->dpo ? &r->metrics : NULL);
    tev_log("saved checkpoint at step %" PRIu64, r->step);
    /* Early stopping's best checkpoint outlives `keep`: it becomes the model.
     * (One in an earlier attempt's folder is never pruned from here.) */
    ckpt_prune(r->c->checkpoint_dir, r->c->keep_checkpoints,
               best_is_own(r) ? r->best_step : r->resumed_step);
    return 0;
}

/* Resumes from the checkpoint the settings name (resume_step: exactly
 * that one, or the newest complete one below it when it is missing or
 * damaged; checkpoints above it are removed from this attempt's own
 * folder, see ckpt_drop_after, and left in another's, resume_from), or,
 * without resume_step, from the latest complete one. Returns 1 resumed,
 * 0 none, -1 error (in r->err). */
/* Keeps the CPU path (and thread count) the checkpoint was written on,
 * when they differ from this attempt's: a resume on another path goes on,
 * and the log says so (train/cpu_path.h). */
static void note_path(struct run *r, const char *meta)
{
    json_t *j = json_loads(meta, 0, NULL);
    const char *was = j ? json_string_value(json_object_get(j, "cpu_path")) : NULL;
    json_int_t threads = j ? json_integer_value(json_object_get(j, "threads")) : 0;
    const char *was_detail = j ? json_string_value(json_object_get(j, "cpu_path_detail")) : NULL;
    cpu_path_resume_note(was, was_detail, (int)threads, r->c->threads, r->path_note,
                         sizeof r->path_note);
    json_decref(j);
}

static int resume(struct run *r)
{
    char path[CKPT_MAX_PATH];
    uint64_t step, upto = UINT64_MAX;
    /* resume_from: another attempt's checkpoint, in that attempt's folder,
     * read and never changed (this attempt writes only its own, empty
     * folder, so a stale attempt elsewhere cannot change what this one
     * resumes from). A damaged one: the newest complete one below it in
     * the same folder, as for this attempt's own folder. */
    char root[CKPT_MAX_PATH];
    bool foreign = r->c->resume_from[0] != '\0';
    snprintf(root, sizeof root, "%s", foreign ? r->c->resume_from : r->c->checkpoint_dir);
    if (foreign) {
        char *slash = strrchr(root, '/');
        if (!slash || slash == root) {
            snprintf(r->err, sizeof r->err, "resume_from %s is not a checkpoint folder's path",
                     r->c->resume_from);
            return -1;
        }
        *slash = '\0';
    }
    if (r->c->resume_step >= 0) {
        upto = (uint64_t)r->c->resume_step;
        if (foreign)
            ckpt_note_after(root, upto);
        else
            ckpt_drop_after(root, upto);
        if (upto == 0)
            return 0;
    }
    int found = ckpt_latest_at_most(root, upto, path, sizeof path, &step,
                                    r->err, sizeof r->err);
    if (found <= 0)
        return found;
    if (upto != UINT64_MAX && step != upto)
        fprintf(stderr,
                "alallo train: the checkpoint at step %" PRIu64 " is missing or damaged; "
                "resuming from step %" PRIu64 "\n",
                upto, step);
    struct ckpt k;
    if (trainer_read_checkpoint(path, r->m, r->c->max_steps, &k, r->err, sizeof r->err))
        return -1;
    note_path(r, k.meta_json);
    memcpy(r->m->train, k.params, k.n * sizeof(float));
    memcpy(r->opt.m, k.m, k.n * sizeof(float));
    memcpy(r->opt.v, k.v, k.n * sizeof(float));
    r->opt.t = k.opt_t;
    r->step = k.step;
    r->epoch = k.epoch;
    r->cursor = k.cursor % units(r);
    r->rng = k.rng;
    r->loss = k.train_loss;
    r->ckpt_step = k.step;
    r->resumed_step = k.step;
    resume_early_stopping(r, k.meta_json);
    ckpt_release(&k);
    return 1;
}

/* ------------------------------------------------------------ final model */

/* Loads base_dir with adapters per `o` (its base as trained: bf16 or NF4,
 * not fp32), sets the trainable block from params (same layout as
 * training), and writes the merged folder from base_dir's published
 * weights plus the adapters, one tensor at a time. */
static int materialize_params(const struct model_opts *o, const float *params, size_t n,
                              const char *base_dir, const char *out_dir, char *err,
                              size_t errcap)
{
    struct model *m = modelio_load(base_dir, o, err, errcap);
    if (!m)
        return -1;
    if (m->n_train != n) {
        snprintf(err, errcap, "the checkpoint does not fit the base model %s", base_dir);
        model_free(m);
        return -1;
    }
    memcpy(m->train, params, n * sizeof(float));
    int rc = o->full ? modelio_save_merged(m, out_dir, base_dir, err, errcap)
                     : modelio_save_merged_onto(m, base_dir, out_dir, err, errcap);
    model_free(m);
    return rc;
}

int trainer_materialize(const char *ckpt_dir, const char *base_dir, const char *out_dir,
                        const char *adapter_dir, char *err, size_t errcap)
{
    if (ckpt_verify(ckpt_dir, err, errcap))
        return -1;
    struct ckpt k;
    if (ckpt_read(ckpt_dir, &k, err, errcap))
        return -1;
    struct model_opts o;
    size_t n;
    int rc = meta_opts(k.meta_json, &o, &n, err, errcap);
    if (!rc)
        rc = materialize_params(&o, k.params, k.n, base_dir, out_dir, err, errcap);
    if (!rc && adapter_dir && !o.full) {
        struct model *m = modelio_load(base_dir, &(struct model_opts){0, WK_BF16, o.lora_r,
                                                                      o.lora_alpha,
                                                                      o.lora_targets},
                                       err, errcap);
        rc = m ? 0 : -1;
        if (m) {
            memcpy(m->train, k.params, k.n * sizeof(float));
            rc = modelio_save_peft(m, adapter_dir, base_dir, err, errcap);
            model_free(m);
        }
    }
    ckpt_release(&k);
    return rc;
}

int trainer_save_output(const struct train_config *c, struct model **mp, char *model_out,
                        char *adapter_out, size_t cap, char *err, size_t errcap)
{
    snprintf(model_out, cap, "%s/model", c->out_dir);
    snprintf(adapter_out, cap, "%s/adapter", c->out_dir);
    if (fs_mkdirs(c->out_dir, 0755) != 0) {
        snprintf(err, errcap, "cannot create %s: %s", c->out_dir, strerror(errno));
        return -1;
    }
    struct model *m = *mp;
    if (c->full)
        return modelio_save_merged(m, model_out, c->model_dir, err, errcap);
    if (modelio_save_peft(m, adapter_out, c->model_dir, err, errcap))
        return -1;
    /* The merged model folds the adapters into the base as published (not
     * into its bf16 or NF4 copy), read from the base folder a tensor at a
     * time beside the trained model: no second copy of the model. */
    return modelio_save_merged_onto(m, c->model_dir, model_out, err, errcap);
}

static int save_final(struct run *r, char *model_out, char *adapter_out, size_t cap)
{
    if (gpu_to_host(r))
        return -1;
    if (!r->c->full) { /* room for the merge */
        model_acts_free(r->a);
        r->a = NULL;
        optim_free(&r->opt);
    }
    return trainer_save_output(r->c, &r->m, model_out, adapter_out, cap, r->err, sizeof r->err);
}

/* ------------------------------------------------------------ the run */

/* The current model's loss and token accuracy on n validation examples
 * from `from` on (wrapping around), in batches of batch_size: the mean
 * over all their targets, not over batches. Forward only. */
static void evaluate(struct run *r, size_t from, size_t n, double *loss /* OUT */,
                     double *accuracy /* OUT */)
{
    const struct dataset *v = r->val;
    int B = r->c->batch_size;
    double sum = 0.0;
    size_t count = 0, hits = 0;
    for (size_t i = 0; i < n; i += (size_t)B) {
        int nb = (int)(n - i < (size_t)B ? n - i : (size_t)B);
        const struct example *ex[PACK_MAX_EXAMPLES];
        for (int b = 0; b < nb; b++)
            ex[b] = &v->ex[(from + i + (size_t)b) % v->n];
        struct pack_layout p = lay_out(r, ex, nb, (size_t)r->seq, r->c->packing);
        size_t nt, h;
        double s = 0.0;
        if (r->gpu) {
            /* a GPU failure is sticky: the next step or save reports it */
            if (gpu_pass(r, p, 1.0f, 0, 0.0f, 0, &s, &nt, &h)) {
                *loss = *accuracy = NAN;
                return;
            }
        } else {
            s = model_forward_backward_packed(r->m, r->a, r->ids, r->mask, r->seg, p.rows, p.T,
                                              1.0f, 0, &nt);
            h = model_last_hits(r->a);
        }
        sum += s;
        count += nt;
        hits += h;
    }
    *loss = count ? sum / (double)count : 0.0;
    *accuracy = count ? (double)hits / (double)count : 0.0;
}

/* The validation loss on the next batch_size examples (every
 * valid_every_steps steps). */
static void validate_batch(struct run *r)
{
    size_t n = (size_t)r->c->batch_size < r->val->n ? (size_t)r->c->batch_size : r->val->n;
    evaluate(r, r->val_cursor, n, &r->metrics.v[TPROTO_METRIC_VALID_LOSS],
             &r->metrics.v[TPROTO_METRIC_VALID_ACCURACY]);
    r->val_cursor = (r->val_cursor + n) % r->val->n;
}

/* The full validation loss at an epoch's end, and early stopping's count:
 * returns 1 when patience ran out (the run stops after this step's
 * checkpoint). */
static int validate_epoch(struct run *r)
{
    double *loss = &r->metrics.v[TPROTO_METRIC_FULL_VALID_LOSS];
    evaluate(r, 0, r->val->n, loss, &r->metrics.v[TPROTO_METRIC_FULL_VALID_ACCURACY]);
    tev_log("step %" PRIu64 ": full validation loss %.4f, token accuracy %.4f", r->step, *loss,
            r->metrics.v[TPROTO_METRIC_FULL_VALID_ACCURACY]);
    if (r->c->early_stopping_patience <= 0)
        return 0;
    if (*loss < r->best_full - r->c->early_stopping_min_delta) {
        r->best_full = *loss;
        r->best_step = r->step;
        /* the checkpoint this step's epoch end writes next */
        snprintf(r->best_path, sizeof r->best_path, "%s/step-%08" PRIu64,
                 r->c->checkpoint_dir, r->step);
        r->bad_epochs = 0;
        return 0;
    }
    r->bad_epochs++;
    tev_log("no better full validation loss for %d epoch%s (best %.4f at step %" PRIu64 ")",
            r->bad_epochs, r->bad_epochs == 1 ? "" : "s", r->best_full, r->best_step);
    return r->bad_epochs >= r->c->early_stopping_patience;
}

/* How the sample answers are decoded: "batched", together through the
 * batcher (the default), or "one-at-a-time"; any other value is refused
 * at the start. Set, the time they took goes to stderr
 * (bench/train/samples_batched.sh compares the two). */
#define SAMPLE_ANSWERS_ENV "ALALLO_SAMPLE_ANSWERS"

/* Whether this run answers sample prompts: its own, or (supervised, with
 * validation data) the validation set's first ones. */
static int has_samples(const struct run *r)
{
    return r->samples || (r->val && !r->c->dpo);
}

/* A sample prompt the model cannot answer (too long): the job's own are
 * named in the log once, before training; the validation set's are left
 * out silently. */
struct sample_skip {
    const struct run *r;
    int base;
};

static void sample_skipped(void *ctx, int i, int rc, const char *why)
{
    const struct sample_skip *k = ctx;
    (void)rc;
    if (k->r->samples && k->base)
        tev_log("sample prompt %d cannot be answered: %s", i + 1, why);
}

/* The greedy answers of the current model to the job's own prompts (laid
 * out as generation lays them out: a string as a prompt/completion prompt,
 * a conversation by the model's chat template or the plain layout) or,
 * without them, to the first SAMPLE_PROMPTS prompts of the validation set
 * (an example's tokens before its first target), as `sample` events; base:
 * before any step. All decoded together through the batcher (rollout.h),
 * as the engine decodes requests. A prompt the model cannot answer (too
 * long) is left out. */
static void sample_answers(struct run *r, int base)
{
    if (gpu_to_host(r)) /* a GPU failure is sticky: the next step reports it */
        return;
    /* the model's chat template only for conversations of the job's own */
    struct generator *g = gen_borrow(r->m, r->tok, r->samples ? r->c->model_dir : NULL);
    if (!g)
        return;
    struct rollout_req req[SAMPLE_PROMPTS_MAX > SAMPLE_PROMPTS ? SAMPLE_PROMPTS_MAX
                                                               : SAMPLE_PROMPTS];
    char *prompts[sizeof req / sizeof req[0]], *texts[sizeof req / sizeof req[0]];
    int n = 0;
    const size_t cap = sizeof req / sizeof req[0];
    const struct gen_opts o = {.max_tokens = SAMPLE_TOKENS, .temperature = 0.0f, .top_p = 1.0f};
    if (r->samples) {
        for (size_t i = 0; i < json_array_size(r->samples) && (size_t)n < cap; i++) {
            const json_t *p = json_array_get(r->samples, i);
            req[n] = (struct rollout_req){.opts = o};
            if (json_is_string(p))
                req[n].text = json_string_value(p);
            else
                req[n].messages = p;
            prompts[n++] = strdup(sample_prompt_text(p));
        }
    } else {
        size_t m = r->val->n < SAMPLE_PROMPTS ? r->val->n : SAMPLE_PROMPTS;
        for (size_t i = 0; i < m && (size_t)n < cap; i++) {
            const struct example *e = &r->val->ex[i];
            size_t p = 0;
            while (p < e->len && !e->mask[p])
                p++;
            if (p == 0 || p >= e->len)
                continue;
            req[n] = (struct rollout_req){.ids = e->ids, .n_ids = (int)p, .opts = o};
            prompts[n++] = tokenizer_decode(r->tok, e->ids, p, 1);
        }
    }
    const char *how = getenv(SAMPLE_ANSWERS_ENV);
    bool batched = !how || strcmp(how, "one-at-a-time") != 0;
    struct sample_skip k = {.r = r, .base = base};
    char err[200];
    double t0 = tev_now();
    int rc = n > 0 ? rollout_run_some(g, req, n, batched, texts, NULL, sample_skipped, &k,
                                      err, sizeof err)
                   : 0;
    double took = tev_now() - t0;
    for (int i = 0; i < n; i++) {
        if (rc == 0 && texts[i] && prompts[i])
            tev_sample(r->step, base, prompts[i], texts[i]);
        free(texts[i]); /* NULL when left out, and all after a failure */
        free(prompts[i]);
    }
    if (rc != 0)
        tev_log("the sample answers at step %" PRIu64 " were left out: %s", r->step, err);
    /* The time they took, for bench/train/samples_batched.sh, which names the way
     * (never otherwise: a crash's reason is the trainer's last stderr line). */
    if (how)
        fprintf(stderr, "alallo train: sample answers at step %" PRIu64 ": %d in %.4f s, %s\n",
                r->step, n, took, batched ? "batched" : "one at a time");
    gen_close(g);
}

/* Early stopping's model: the best checkpoint made into out_dir's model
 * (and adapter) folders; frees the training state first. */
static int save_best(struct run *r, char *model_out, char *adapter_out, size_t cap)
{
    const struct train_config *c = r->c;
    snprintf(model_out, cap, "%s/model", c->out_dir);
    snprintf(adapter_out, cap, "%s/adapter", c->out_dir);
    if (fs_mkdirs(c->out_dir, 0755) != 0) {
        snprintf(r->err, sizeof r->err, "cannot create %s: %s", c->out_dir, strerror(errno));
        return -1;
    }
    model_acts_free(r->a);
    r->a = NULL;
    optim_free(&r->opt);
    model_free(r->m);
    r->m = NULL;
    return trainer_materialize(r->best_path, c->model_dir, model_out,
                               c->full ? NULL : adapter_out, r->err, sizeof r->err);
}

/* train_on_inputs: every token but an example's first becomes a target. */
static void train_all_tokens(struct dataset *d)
{
    for (size_t i = 0; d && i < d->n; i++)
        memset(d->ex[i].mask + 1, 1, d->ex[i].len > 1 ? d->ex[i].len - 1 : 0);
}

static int load_everything(struct run *r)
{
    const struct train_config *c = r->c;
    struct run_text text;
    int rc = run_load_text(c, &text, r->err, sizeof r->err);
    r->tok = text.tok; /* the run's to free */
    text.tok = NULL;
    if (rc != TRAIN_OK) {
        run_text_free(&text);
        return rc;
    }
    int seq = text.seq;
    r->seq = seq;
    const struct chat_format *fmt = text.fmt;
    const char *why_no_fmt = run_text_why_no_format(&text);
    r->ds = dataset_load_chat(c->train_file, c->train_file_name, r->tok, fmt, why_no_fmt,
                              (size_t)seq, r->err, sizeof r->err);
    if (!r->ds) {
        run_text_free(&text);
        return TRAIN_USER;
    }
    if (r->ds->n == 0) {
        run_text_free(&text);
        snprintf(r->err, sizeof r->err, "%s: the file has no examples", c->train_file_name);
        return TRAIN_USER;
    }
    if (c->validation_file[0]) {
        const char *slash = strrchr(c->validation_file, '/');
        r->val = dataset_load_chat(c->validation_file, slash ? slash + 1 : c->validation_file,
                                   r->tok, fmt, why_no_fmt, (size_t)seq, r->err,
                                   sizeof r->err);
    }
    run_text_free(&text);
    if (c->validation_file[0] && !r->val)
        return TRAIN_USER;
    if (!r->val && c->validation_split > 0.0 && !c->dpo) {
        r->val = dataset_split_off(r->ds, c->validation_split, c->seed);
        if (!r->val) {
            snprintf(r->err, sizeof r->err,
                     "%s: validation_split needs at least 2 examples to hold some out",
                     c->train_file_name);
            return r->ds->n < 2 ? TRAIN_USER : TRAIN_INTERNAL;
        }
    }
    if (r->ds->pairs != c->dpo) {
        snprintf(r->err, sizeof r->err,
                 c->dpo ? "%s: DPO needs preference pairs (input, preferred_output, "
                          "non_preferred_output)"
                        : "%s holds preference pairs: train on it with DPO",
                 c->train_file_name);
        return TRAIN_USER;
    }
    if (c->train_on_inputs) {
        train_all_tokens(r->ds);
        train_all_tokens(r->val);
    }
    r->m = run_load_model(c, &rc, r->err, sizeof r->err);
    if (!r->m)
        return rc;
    if (optim_init(&r->opt, r->m->n_train, r->m->n_decay, c->weight_decay)) {
        snprintf(r->err, sizeof r->err, "out of memory for the optimizer state");
        return TRAIN_INTERNAL;
    }
    /* rows: one per example at most; a DPO step holds two per pair */
    int rows = c->dpo ? 2 * c->batch_size : c->batch_size;
    r->a = r->on_gpu ? NULL : model_acts_create(r->m, rows, seq); /* the GPU has its own */
    r->ids = malloc((size_t)rows * seq * sizeof *r->ids);
    r->mask = malloc((size_t)rows * seq);
    r->seg = malloc((size_t)rows * seq * sizeof *r->seg);
    if (c->dpo) {
        r->tok_loss = malloc((size_t)rows * seq * sizeof *r->tok_loss);
        r->tok_w = malloc((size_t)rows * seq * sizeof *r->tok_w);
    }
    r->meta = meta_json(c, r->m->n_train);
    if ((!r->a && !r->on_gpu) || !r->ids || !r->mask || !r->seg ||
        (c->dpo && (!r->tok_loss || !r->tok_w)) || !r->meta || model_rope_ensure(r->m, seq)) {
        snprintf(r->err, sizeof r->err, "out of memory for activations (batch %d x %d tokens)",
                 c->batch_size, seq);
        return TRAIN_INTERNAL;
    }
    /* on the GPU: once it is open (run_attempt) */
    if (c->dpo && !r->on_gpu && reference_logps(r))
        return TRAIN_INTERNAL;
    return TRAIN_OK;
}

/* The attempt, on the CPU or (gpu set) on the GPU whose context is open. */
static int run_attempt(const struct train_config *c, int gpu)
{
    install_signals();
    gemm_set_threads(c->threads);
    char perr[256];
    if (cpu_path_init(NULL, perr, sizeof perr))
        return fail(0, perr);
    struct run r;
    memset(&r, 0, sizeof r);
    r.c = c;
    r.on_gpu = gpu;
    rng_seed(&r.rng, c->seed);
    tev_metrics_clear(&r.metrics);
    r.best_full = INFINITY;
    const char *how = getenv(SAMPLE_ANSWERS_ENV);
    if (how && how[0] && strcmp(how, "batched") != 0 && strcmp(how, "one-at-a-time") != 0) {
        char why[160];
        snprintf(why, sizeof why, "%s is \"%.40s\": it is \"batched\" or \"one-at-a-time\"",
                 SAMPLE_ANSWERS_ENV, how);
        return fail(1, why);
    }
    if (c->sample_prompts[0]) {
        r.samples = json_loads(c->sample_prompts, 0, NULL);
        if (!r.samples)
            return fail(0, "out of memory reading the sample prompts");
    }
    int rc = load_everything(&r);
    if (rc != TRAIN_OK) {
        rc = fail(rc == TRAIN_USER, r.err);
        run_free(&r);
        return rc;
    }
#ifdef ALALLO_HAVE_CUDA
    if (gpu) { /* the model as loaded, copied up; a resume's state follows it */
        int user = 0;
        r.gpu = cuda_train_open(0, r.m, &r.opt, c->dpo ? 2 * c->batch_size : c->batch_size,
                                r.seq, r.err, sizeof r.err, &user);
        if (!r.gpu || (c->dpo && reference_logps(&r))) {
            rc = fail(user, r.err);
            run_free(&r);
            return rc;
        }
    }
#endif
    int resumed = resume(&r);
    if (resumed < 0 || (resumed && r.gpu && gpu_from_host(&r))) {
        rc = fail(0, r.err);
        run_free(&r);
        return rc;
    }
    r.sched = (struct lr_schedule){(enum lr_kind)c->lr_schedule, c->learning_rate,
                                   c->warmup_steps, c->max_steps, 0.0f};
    /* examples: what a step counts (DPO: pairs) */
    tev_started(r.step, c->max_steps, units(&r), r.ds->n_tokens, resumed ? (int64_t)r.step : -1,
                cpu_path_name(cpu_path_current()));
#ifdef ALALLO_HAVE_CUDA
    if (r.gpu) {
        const struct cuda_device_info *d = cuda_train_device(r.gpu);
        int rows = c->dpo ? 2 * c->batch_size : c->batch_size;
        if (cuda_train_micro_rows(r.gpu) < rows)
            tev_log("a step's %d rows do not fit in GPU memory at once: each step runs as %d "
                    "micro-batches of %d rows, their gradients added up",
                    rows, rows / cuda_train_micro_rows(r.gpu), cuda_train_micro_rows(r.gpu));
        tev_log("matrix products on the GPU (GPU %d: %s, %.1f GiB, %.2f GiB of it holding the "
                "model, the optimizer state and the activations; the passes and AdamW run "
                "there, attention on the %s kernels%s), and on the %s path on the CPU for "
                "sample answers (CPU flags: %s)",
                d->index, d->name, (double)d->total_bytes / (1u << 30),
                (double)cuda_train_peak_bytes(r.gpu) / (1u << 30), cuda_train_attention(r.gpu),
                cuda_train_recompute(r.gpu) ? ", each layer's activations recomputed in the "
                                              "backward pass to save memory"
                                            : "",
                cpu_path_name(cpu_path_current()), cpu_path_flags());
    } else
#endif
        tev_log("matrix products on the %s path (%s%sCPU flags: %s)",
                cpu_path_name(cpu_path_current()), cpu_path_detail(),
                cpu_path_detail()[0] ? "; " : "", cpu_path_flags());
    if (resumed)
        tev_log("resumed from checkpoint at step %" PRIu64, r.step);
    else
        tev_log("training started: %" PRIu64 " steps, %zu %s, %zu tokens, context %d%s, %s%s",
                c->max_steps, units(&r), c->dpo ? "preference pairs" : "examples",
                r.ds->n_tokens, r.seq, c->packing ? " packed" : "", c->dpo ? "DPO, " : "",
                c->full       ? "full fine-tuning (fp32)"
                : c->four_bit ? "LoRA on a 4-bit (NF4) base"
                              : "LoRA on a 16-bit (bf16) base");
    if (r.path_note[0])
        tev_log("%s", r.path_note);
    if (resumed && r.best_step)
        tev_log("early stopping goes on: best full validation loss %.4f at step %" PRIu64
                ", %d epoch%s without a better one since",
                r.best_full, r.best_step, r.bad_epochs, r.bad_epochs == 1 ? "" : "s");
    if (r.val && !c->dpo && !resumed)
        tev_log("validating on %zu examples%s", r.val->n,
                c->validation_file[0] ? "" : " held out of the training file");
    if (has_samples(&r) && !resumed)
        sample_answers(&r, 1);
    if (r.ds->n_truncated && !resumed)
        tev_log("%zu examples longer than %d tokens were cut to fit the context",
                r.ds->n_truncated, r.seq);
    r.ckpt_t = tev_now();
    uint64_t first = r.step, reported_rss = 0, reported_gpu = 0;
    int stop_early = 0;
    /* What this run watches (DPO has no token loss to validate on). */
    const struct dataset *watch = c->dpo ? NULL : r.val;
    size_t window_tokens = 0;
    double window_t = tev_now();
    while (r.step < c->max_steps) {
        size_t tokens = 0;
        uint64_t epoch_before = r.epoch;
        struct pack_layout p = next_batch(&r, &tokens);
        if (p.rows == 0) {
            rc = fail(0, "out of memory ordering the data");
            goto out;
        }
        r.real_tokens += p.real;
        r.row_tokens += (size_t)p.rows * p.T;
        if (!r.gpu) /* the GPU's pass zeroes its own */
            model_grad_begin(r.m);
        size_t nt = model_count_targets(r.mask, p.rows, p.T);
        size_t got, hits = 0;
        double sum;
        /* LoRA dropout in this step's pass only (validation and the DPO
         * reference never drop): masks from the seed and the step, so a
         * resumed run draws what an unbroken one would */
        uint64_t drop_seed = rng_derive(c->seed, LORA_DROPOUT_STREAM + r.step);
        if (!r.gpu && c->lora_dropout > 0.0f &&
            model_acts_dropout(r.a, r.m, c->lora_dropout, drop_seed)) {
            rc = fail(0, "out of memory for LoRA dropout");
            goto out;
        }
        if (c->dpo) {
            double ref[PACK_MAX_EXAMPLES];
            for (int i = 0; i < r.pn; i++)
                ref[i] = r.ref_logp[r.step_ex[i]];
            struct dpo_batch b = dpo_batch_of(&r, ref);
            if (r.gpu) {
                if (gpu_pass_weighted(&r, p, &b, c->lora_dropout, drop_seed, &got)) {
                    rc = fail(0, r.err);
                    goto out;
                }
            } else {
                model_forward_backward_weighted(r.m, r.a, r.ids, r.mask, r.seg, p.rows, p.T,
                                                dpo_batch_weights, &b, r.tok_loss, r.tok_w,
                                                &got);
            }
            r.dpo = b.st;
            dpo_watch_add(&r.watch, &r.dpo);
            sum = r.dpo.loss * (double)nt; /* the mean below is DPO's loss */
        } else if (r.gpu) {
            if (gpu_pass(&r, p, nt ? 1.0f / (float)nt : 0.0f, 1, c->lora_dropout, drop_seed,
                         &sum, &got, &hits)) {
                rc = fail(0, r.err);
                goto out;
            }
        } else {
            sum = model_forward_backward_packed(r.m, r.a, r.ids, r.mask, r.seg, p.rows, p.T,
                                                nt ? 1.0f / (float)nt : 0.0f, 1, &got);
            hits = model_last_hits(r.a);
            /* the loss is the objective: a mixture of experts adds its
             * auxiliary term (docs/models.md) */
            r.aux = model_last_aux(r.a);
            sum += r.aux * (double)nt;
        }
        if (!r.gpu && c->lora_dropout > 0.0f)
            model_acts_dropout(r.a, r.m, 0.0f, 0);
        float lr = optim_lr(&r.sched, r.step);
        if (nt) {
            r.loss = sum / (double)nt;
            r.metrics.v[TPROTO_METRIC_TRAIN_LOSS] = r.loss;
            if (!c->dpo)
                r.metrics.v[TPROTO_METRIC_TRAIN_ACCURACY] = (double)hits / (double)nt;
            double norm = 0.0;
            if (!r.gpu) {
                norm = optim_grad_norm(r.m->grad, r.m->n_train);
            } else if (gpu_norm(&r, &norm)) {
                rc = fail(0, r.err);
                goto out;
            }
            if (!isfinite(r.loss) || !isfinite(norm)) {
                snprintf(r.err, sizeof r.err,
                         "the loss became %s at step %" PRIu64 "; try a lower learning rate",
                         isfinite(r.loss) ? "infinite" : "NaN", r.step + 1);
                rc = fail(1, r.err);
                goto out;
            }
            if (!r.gpu) {
                optim_adamw_step(&r.opt, r.m->train, r.m->grad,
                                 optim_clip_factor(norm, c->max_grad_norm), lr);
            } else if (gpu_adamw(&r, optim_clip_factor(norm, c->max_grad_norm), lr)) {
                rc = fail(0, r.err);
                goto out;
            }
        }
        r.step++;
        window_tokens += tokens;
        if (r.step == first + 1 || r.step % REPORT_EVERY == 0) {
            uint64_t rss = tev_peak_rss(), gpu_bytes = 0;
#ifdef ALALLO_HAVE_CUDA
            if (r.gpu)
                gpu_bytes = cuda_train_peak_bytes(r.gpu);
#endif
            if (rss > reported_rss + reported_rss / 10 ||
                gpu_bytes > reported_gpu + reported_gpu / 10) {
                tev_memory(rss, gpu_bytes);
                reported_rss = rss;
                reported_gpu = gpu_bytes;
            }
        }
        /* An epoch ends in the step whose batch took the data set's last
         * example; the last step ends the run (a model each, docs/trainer.md). */
        int epoch_done = r.epoch != epoch_before || r.step == c->max_steps;
        int valid_due = watch && c->valid_every_steps && r.step % c->valid_every_steps == 0;
        if (valid_due)
            validate_batch(&r);
        if (watch && epoch_done)
            stop_early = validate_epoch(&r);
        if (epoch_done && has_samples(&r))
            sample_answers(&r, 0);
        int report = r.step % REPORT_EVERY == 0 || r.step == c->max_steps;
        if (report || valid_due || (watch && epoch_done)) {
            double now = tev_now();
            double tps = now > window_t ? (double)window_tokens / (now - window_t) : 0.0;
            if (report && valid_due)
                tev_log("step %" PRIu64 "/%" PRIu64 ": loss %.4f, validation loss %.4f", r.step,
                        c->max_steps, r.loss, r.metrics.v[TPROTO_METRIC_VALID_LOSS]);
            else if (report || valid_due)
                tev_log("step %" PRIu64 "/%" PRIu64 ": loss %.4f", r.step, c->max_steps, r.loss);
            /* Each metric goes out once, in the step event of the step it
             * was measured at (the checkpoints keep the latest). */
            struct tev_metrics sent;
            tev_metrics_clear(&sent);
            sent.v[TPROTO_METRIC_TRAIN_LOSS] = r.loss;
            sent.v[TPROTO_METRIC_TRAIN_ACCURACY] = r.metrics.v[TPROTO_METRIC_TRAIN_ACCURACY];
            for (int k = TPROTO_METRIC_VALID_LOSS; k <= TPROTO_METRIC_VALID_ACCURACY && valid_due; k++)
                sent.v[k] = r.metrics.v[k];
            for (int k = TPROTO_METRIC_FULL_VALID_LOSS; watch && epoch_done && k <= TPROTO_METRIC_FULL_VALID_ACCURACY; k++)
                sent.v[k] = r.metrics.v[k];
            struct tev_step_extra x = {
                .packing_efficiency = r.row_tokens ? (double)r.real_tokens / r.row_tokens : -1,
                .dpo = c->dpo, .reward_margin = r.dpo.reward_margin,
                .reward_accuracy = r.dpo.reward_accuracy, .chosen_logp = r.dpo.chosen_logp,
                .rejected_logp = r.dpo.rejected_logp, .metrics = c->dpo ? NULL : &sent,
                .moe = r.m->cfg.n_experts > 0 && !c->dpo, .aux_loss = r.aux};
            tev_step_with(r.step, r.loss, lr, tps, &x);
            double drop_c, drop_r;
            if (c->dpo && report && dpo_watch_collapsed(&r.watch, &drop_c, &drop_r))
                tev_warn("DPO is lowering both answers: by step %" PRIu64 " the preferred "
                         "answers' log-probability fell %.2f nats per token below the "
                         "reference's and the other answers' %.2f, so the model is losing "
                         "both; try a lower learning rate or fewer epochs",
                         r.step, drop_c, drop_r);
            r.real_tokens = r.row_tokens = 0;
            window_tokens = 0;
            window_t = now;
        }
        /* Early stopping needs a checkpoint at each epoch's end: the best
         * one becomes the model. */
        int epoch_end = (c->checkpoint_each_epoch || (watch && c->early_stopping_patience)) &&
                        epoch_done;
        int due = (c->checkpoint_every_steps && r.step % c->checkpoint_every_steps == 0) ||
                  (c->checkpoint_every_s > 0 && tev_now() - r.ckpt_t >= c->checkpoint_every_s) ||
                  epoch_end;
        if (g_usr1 || g_term || due) {
            g_usr1 = 0;
            if (r.step != r.ckpt_step && save_checkpoint(&r)) {
                rc = fail(0, r.err);
                goto out;
            }
            if (g_term) {
                tev_log("stopped at step %" PRIu64 " on request", r.step);
                rc = TRAIN_STOPPED;
                goto out;
            }
        }
        if (stop_early && r.step < c->max_steps)
            break;
    }
    if (g_term) {
        /* Stopped before any step ran (or right at the end). */
        if (r.step != r.ckpt_step && save_checkpoint(&r)) {
            rc = fail(0, r.err);
            goto out;
        }
        rc = TRAIN_STOPPED;
        goto out;
    }
    if (r.val && c->dpo)
        tev_log("validation loss is not computed for DPO");
    else if (r.val)
        tev_log("validation loss %.4f", r.metrics.v[TPROTO_METRIC_FULL_VALID_LOSS]);
    char model_out[TRAIN_MAX_PATH + 16], adapter_out[TRAIN_MAX_PATH + 16];
    double final_loss = r.loss;
    uint64_t final_step = r.step;
    int early = stop_early && r.step < c->max_steps;
    if (early ? save_best(&r, model_out, adapter_out, sizeof model_out)
              : save_final(&r, model_out, adapter_out, sizeof model_out)) {
        rc = fail(0, r.err);
        goto out;
    }
    if (early) {
        tev_log("stopped early at step %" PRIu64 " of %" PRIu64 ": the full validation loss did "
                "not improve by more than %g for %d epochs; the model is the checkpoint at step "
                "%" PRIu64 " (full validation loss %.4f)",
                final_step, c->max_steps, c->early_stopping_min_delta,
                c->early_stopping_patience, r.best_step, r.best_full);
        tev_done_early(final_step, final_loss, model_out, c->full ? NULL : adapter_out,
                       r.best_step);
        rc = TRAIN_OK;
        goto out;
    }
    tev_log("training finished: %" PRIu64 " steps, final loss %.4f", final_step, final_loss);
    tev_done(final_step, final_loss, model_out, c->full ? NULL : adapter_out);
    rc = TRAIN_OK;
out:
    run_free(&r);
    return rc;
}

int trainer_run(const struct train_config *c)
{
    if (c->rft) /* reinforcement fine-tuning: its own loop (rft_run.h) */
        return rft_run(c);
    return run_attempt(c, 0);
}

#ifdef ALALLO_HAVE_CUDA
int trainer_run_gpu(const struct train_config *c)
{
    if (c->rft) {
        tev_log("reinforcement fine-tuning runs on the CPU in this version (docs/rft.md)");
        return rft_run(c);
    }
    return run_attempt(c, 1);
}
#endif
