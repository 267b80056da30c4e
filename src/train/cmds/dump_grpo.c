/* dump_grpo.c - `alallo train --dump-grpo`: one GRPO step on given answers,
 * rewards and old log-probabilities, dumped for tests/torch/
 * grpo_reference.py to recompute in PyTorch (docs/rft.md, "Checked against
 * PyTorch").
 *
 *   alallo train --dump-grpo --model-dir DIR [--lora-rank R | --ref-dir DIR]
 *                --samples P/A;P/A;... --group G --rewards R,R,...
 *                --old-shift S,S,... --beta B --out FILE.safetensors
 *
 * P and A are comma-separated token ids: a prompt and its answer, one row
 * each as reinforcement fine-tuning lays them out (the loss on the answer's
 * tokens); every G consecutive samples are one prompt's group, and R is
 * each sample's reward. The policy's log-probabilities when the answers
 * were sampled ("old") are the current ones plus S, the k-th answer token
 * of the batch (row by row) taking the k-th shift, cycled: ratios of
 * e^-S, so a shift beyond the clip's range puts that token outside it.
 * The KL's reference (beta > 0): with LoRA, the base with the adapters
 * off, as the run has it; in full fine-tuning, the model of --ref-dir (the
 * run has no reference there; the check still covers the penalty's
 * gradient). LoRA starts as PEFT does with B random (as --dump-grads), so
 * the adapters change the answers. The step's passes are the run's own
 * (grpo_pass.h). Written, all F32: "loss", "kl", "clipped" (1 each),
 * "adv" (one per sample), "logp", "old_logp" and with a reference
 * "ref_logp" (one per answer token), and the gradients: "grad.<tensor>"
 * of every tensor in full fine-tuning, else the adapters with theirs.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "train/cmds/cmd_args.h"
#include "train/cmds/dump_lora.h"
#include "train/cmds/train_cmds.h"
#include "train/formats/modelio.h"
#include "train/formats/safetensors.h"
#include "train/model/grpo.h"
#include "train/model/grpo_pass.h"
#include "train/model/model.h"

#define MAX_SAMPLES 64
#define MAX_SEQ 512
#define MAX_LIST 256

struct sample {
    int32_t ids[MAX_SEQ];
    uint8_t mask[MAX_SEQ];
    int len;
};

/* Appends comma-separated ids from s up to `stop`, ';' or the end, each
 * with mask `target`. The rest of s, or NULL (none, too many, outside the
 * vocabulary). */
static const char *parse_part(const char *s, char stop, struct sample *e, uint8_t target,
                              int vocab)
{
    int start = e->len;
    while (*s && *s != stop && *s != ';') {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v >= vocab || e->len == MAX_SEQ)
            return NULL;
        e->ids[e->len] = (int32_t)v;
        e->mask[e->len++] = target;
        s = *end == ',' ? end + 1 : end;
    }
    return e->len > start ? s : NULL;
}

/* "P/A;P/A..." into samples. The count, or -1. */
static int parse_samples(const char *s, struct sample *out, int vocab)
{
    int n = 0;
    while (*s) {
        if (n == MAX_SAMPLES)
            return -1;
        struct sample *e = &out[n];
        e->len = 0;
        const char *p = parse_part(s, '/', e, 0, vocab);
        if (!p || *p != '/')
            return -1;
        p = parse_part(p + 1, '/', e, 1, vocab);
        if (!p || *p == '/')
            return -1;
        s = *p == ';' ? p + 1 : p;
        n++;
    }
    return n > 0 ? n : -1;
}

/* "1,0.5,..." into v (at most cap). The count, or -1. */
static int parse_numbers(const char *s, double *v, int cap)
{
    int n = 0;
    while (*s) {
        char *end;
        double x = strtod(s, &end);
        if (end == s || n == cap || (*end && *end != ','))
            return -1;
        v[n++] = x;
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

struct args {
    const char *dir, *ref_dir, *out;
    int lora_rank, group, n, n_reward, n_shift;
    double beta;
    double reward[MAX_LIST], shift[MAX_LIST];
};

/* The model as the run trains it: full, or LoRA on an fp32 base with the
 * adapters moved off PEFT's start (B zero would make them vanish). */
static struct model *load_policy(const struct args *g, char *err, size_t cap)
{
    struct model_opts o = {.full = g->lora_rank == 0, .base_kind = WK_F32,
                           .lora_r = g->lora_rank, .lora_alpha = 2.0f * (float)g->lora_rank,
                           .lora_targets = MODEL_ALL_PROJ};
    struct model *m = modelio_load(g->dir, &o, err, cap);
    if (m && g->lora_rank) {
        model_lora_init(m, 1);
        struct rng r;
        rng_seed(&r, 2);
        for (size_t i = 0; i < m->n_train; i++)
            m->train[i] += 0.05f * rng_normal(&r);
    }
    return m;
}

/* The answer tokens' values of a (B*T) per-token block, row by row, as
 * log-probabilities (the negated losses) into out; the count. */
static int answer_logps(const uint8_t *mask, int B, int T, const double *nll, float *out)
{
    int k = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t + 1 < T; t++)
            if (mask[(size_t)b * T + t + 1])
                out[k++] = (float)-nll[(size_t)b * T + t];
    return k;
}

static int dump(struct args *g, const char *samples, struct sample *s)
{
    char err[1024];
    int rc = 1, B = 0, T = 2, n_tok = 0;
    struct model *m = load_policy(g, err, sizeof err);
    struct model *ref = NULL;
    struct model_acts *a = NULL, *ra = NULL;
    int32_t *ids = NULL;
    uint8_t *mask = NULL;
    double *nll = NULL, *old = NULL, *refl = NULL, adv[MAX_SAMPLES];
    float *w = NULL, *logp = NULL, *oldp = NULL, *refp = NULL;
    struct st_tensor *ts = NULL;
    if (!m || (g->ref_dir && !(ref = modelio_load(g->ref_dir, &(struct model_opts){.full = 1},
                                                  err, sizeof err)))) {
        fprintf(stderr, "alallo train: %s\n", err);
        goto out;
    }
    B = g->n = parse_samples(samples, s, m->cfg.vocab);
    if (B < 0 || B % g->group != 0 || g->n_reward != B || g->n_shift < 1) {
        fputs("alallo train: --samples needs P/A;... of token ids in the vocabulary, a whole "
              "number of groups of --group, one --rewards value per sample and at least one "
              "--old-shift\n",
              stderr);
        goto out;
    }
    for (int b = 0; b < B; b++)
        T = s[b].len > T ? s[b].len : T;
    if (T > m->cfg.max_pos || model_rope_ensure(m, T) || (ref && model_rope_ensure(ref, T))) {
        fputs("alallo train: a sample does not fit the model's context\n", stderr);
        goto out;
    }
    size_t N = (size_t)B * T;
    ids = calloc(N, sizeof *ids);
    mask = calloc(N, 1);
    nll = calloc(N, sizeof *nll);
    old = calloc(N, sizeof *old);
    refl = calloc(N, sizeof *refl);
    w = calloc(N, sizeof *w);
    logp = calloc(N, sizeof *logp);
    oldp = calloc(N, sizeof *oldp);
    refp = calloc(N, sizeof *refp);
    ts = calloc(8 + (size_t)m->n_tensors + 1 + 4 * (size_t)m->cfg.n_layers * PROJ_COUNT,
                sizeof *ts);
    a = model_acts_create(m, B, T);
    ra = ref ? model_acts_create(ref, B, T) : NULL;
    if (!ids || !mask || !nll || !old || !refl || !w || !logp || !oldp || !refp || !ts || !a ||
        (ref && !ra)) {
        fputs("alallo train: out of memory\n", stderr);
        goto out;
    }
    for (int b = 0; b < B; b++) {
        memcpy(ids + (size_t)b * T, s[b].ids, (size_t)s[b].len * sizeof *ids);
        memcpy(mask + (size_t)b * T, s[b].mask, (size_t)s[b].len);
    }
    for (int i = 0; i < B; i += g->group)
        grpo_advantages(g->group, g->reward + i, adv + i);
    /* the old policy: today's log-probabilities moved by the shifts */
    size_t nt;
    model_token_losses(m, a, ids, mask, NULL, B, T, nll, &nt);
    for (int b = 0, k = 0; b < B; b++)
        for (int t = 0; t + 1 < T; t++) {
            size_t i = (size_t)b * T + t;
            if (mask[i + 1])
                old[i] = nll[i] - g->shift[k++ % g->n_shift];
        }
    bool kl = g->beta > 0;
    if (kl && ref)
        model_token_losses(ref, ra, ids, mask, NULL, B, T, refl, &nt);
    else if (kl && grpo_base_token_losses(m, a, ids, mask, B, T, refl)) {
        fputs("alallo train: out of memory\n", stderr);
        goto out;
    }
    struct grpo_batch gb = {.B = B, .T = T, .mask = mask, .adv = adv, .old_nll = old,
                            .ref_nll = kl ? refl : NULL, .beta = g->beta, .eps = GRPO_CLIP};
    grpo_gradients(m, a, ids, &gb, nll, w);
    n_tok = answer_logps(mask, B, T, nll, logp);
    answer_logps(mask, B, T, old, oldp);
    answer_logps(mask, B, T, refl, refp);
    float loss = (float)gb.loss, klv = (float)gb.kl, clipped = (float)gb.clipped, fadv[MAX_SAMPLES];
    for (int b = 0; b < B; b++)
        fadv[b] = (float)adv[b];
    int k = 0;
    ts[k++] = (struct st_tensor){.name = "loss", .dtype = ST_F32, .ndim = 1, .shape = {1},
                                 .data = &loss, .nbytes = 4};
    ts[k++] = (struct st_tensor){.name = "kl", .dtype = ST_F32, .ndim = 1, .shape = {1},
                                 .data = &klv, .nbytes = 4};
    ts[k++] = (struct st_tensor){.name = "clipped", .dtype = ST_F32, .ndim = 1, .shape = {1},
                                 .data = &clipped, .nbytes = 4};
    ts[k++] = (struct st_tensor){.name = "adv", .dtype = ST_F32, .ndim = 1, .shape = {B},
                                 .data = fadv, .nbytes = (size_t)B * 4};
    ts[k++] = (struct st_tensor){.name = "logp", .dtype = ST_F32, .ndim = 1, .shape = {n_tok},
                                 .data = logp, .nbytes = (size_t)n_tok * 4};
    ts[k++] = (struct st_tensor){.name = "old_logp", .dtype = ST_F32, .ndim = 1,
                                 .shape = {n_tok}, .data = oldp, .nbytes = (size_t)n_tok * 4};
    if (kl)
        ts[k++] = (struct st_tensor){.name = "ref_logp", .dtype = ST_F32, .ndim = 1,
                                     .shape = {n_tok}, .data = refp,
                                     .nbytes = (size_t)n_tok * 4};
    float scale;
    if (g->lora_rank) {
        k = dump_lora_adapters(m, ts, k, &scale);
    } else {
        modelio_grad_tensors(m, ts + k);
        k += m->n_tensors;
    }
    if (st_write(g->out, ts, (size_t)k, NULL, err, sizeof err)) {
        fprintf(stderr, "alallo train: %s\n", err);
        goto out;
    }
    printf("%d answers of %d tokens in groups of %d: loss %.6f, KL %.6f, %.0f%% of the answer "
           "tokens clipped\n",
           B, n_tok, g->group, gb.loss, gb.kl, 100 * gb.clipped);
    rc = 0;
out:
    free(ids);
    free(mask);
    free(nll);
    free(old);
    free(refl);
    free(w);
    free(logp);
    free(oldp);
    free(refp);
    free(ts);
    model_acts_free(a);
    model_acts_free(ra);
    model_free(ref);
    model_free(m);
    return rc;
}

int cmd_train_dump_grpo(int argc, char **argv)
{
    static struct args g;
    static struct sample s[MAX_SAMPLES];
    memset(&g, 0, sizeof g);
    g.dir = cmd_arg_value(argc, argv, "--model-dir");
    g.ref_dir = cmd_arg_value(argc, argv, "--ref-dir");
    g.out = cmd_arg_value(argc, argv, "--out");
    const char *samples = cmd_arg_value(argc, argv, "--samples");
    const char *rewards = cmd_arg_value(argc, argv, "--rewards");
    const char *shifts = cmd_arg_value(argc, argv, "--old-shift");
    const char *beta = cmd_arg_value(argc, argv, "--beta");
    char *end = NULL;
    g.beta = beta ? strtod(beta, &end) : 0;
    if (!g.dir || !g.out || !samples || !rewards || !shifts || (beta && (*end || g.beta < 0)) ||
        cmd_int_opt("alallo train", argc, argv, "--lora-rank", 1, 64, &g.lora_rank) ||
        cmd_int_opt("alallo train", argc, argv, "--group", 1, MAX_SAMPLES, &g.group) ||
        g.group == 0) {
        fputs("usage: alallo train --dump-grpo --model-dir DIR [--lora-rank R | --ref-dir DIR] "
              "--samples P/A;... --group G --rewards R,... --old-shift S,... --beta B "
              "--out FILE\n",
              stderr);
        return 2;
    }
    if (g.lora_rank && g.ref_dir) {
        fputs("alallo train: with --lora-rank the reference is the base with the adapters "
              "off; --ref-dir is for full fine-tuning\n",
              stderr);
        return 2;
    }
    if (!g.lora_rank && g.beta > 0 && !g.ref_dir) {
        fputs("alallo train: full fine-tuning with --beta above 0 needs --ref-dir\n", stderr);
        return 2;
    }
    g.n_reward = parse_numbers(rewards, g.reward, MAX_LIST);
    g.n_shift = parse_numbers(shifts, g.shift, MAX_LIST);
    return dump(&g, samples, s);
}
