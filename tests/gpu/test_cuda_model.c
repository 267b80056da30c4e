/* test_cuda_model.c - the training pass on the GPU against the CPU pass
 * (model_pass.c) on the same weights and batch, for LoRA on a bf16 base,
 * QLoRA (NF4 base) and full fine-tuning, on four tiny families: llama
 * (tied head), qwen2 (q/k/v biases), mistral (untied head) and gemma2
 * (GeGLU, post-norms, soft-caps, embedding scale, 1 + w norms).
 *
 * Each case checks, on one packed batch (two examples in one row):
 *  - the loss and every gradient against the CPU within bf16 tolerance
 *    (TOL_LOSS, TOL_GRAD below: the GPU rounds every product's inputs to
 *    bf16, the CPU keeps fp32 activations);
 *  - two passes on the GPU give the same bits, and so does the pass that
 *    recomputes each layer in the backward (with dropout too), in fewer
 *    bytes;
 *  - three AdamW steps: the GPU optimizer against optim_adamw_step on the
 *    same (downloaded) gradients (fp32 elementwise, TOL_ADAM), and the
 *    GPU's updates against the CPU trainer's own three steps (same
 *    direction, TOL_COS);
 *  - download, then upload into a fresh device copy: the parameters and
 *    moments come back bit for bit, and the next pass and step on both
 *    copies agree bit for bit (resume on the same GPU is exact).
 * And LoRA dropout draws the CPU's masks (gradients within TOL_GRAD with
 * dropout on both sides, far apart from the pass without it); LoRA's six
 * products per adapted projection go through the bf16 tensor-core
 * products (counted per kind, cuda_gemm_calls); the
 * trainer's seam (cuda_train.h) resumes from the host state bit for bit;
 * a batch of 2 x 200 tokens takes every tile path of the pass; the
 * layers replayed as CUDA graphs (cuda_graph.h) give the eager passes'
 * bits step by step while the batch, the weights and dropout's masks
 * move, and fall back to eager where the capture is refused.
 *
 * Without a GPU it prints one `skip:` line and exits 77.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "train/cuda/cuda_ctx.h"
#include "train/cuda/cuda_gemm.h"
#include "train/cuda/cuda_model.h"
#include "train/cuda/cuda_ops.h"
#include "train/cuda/cuda_optim.h"
#include "train/cuda/cuda_train.h"
#include "train/model/dpo.h"
#include "train/model/model.h"
#include "train/model/ops.h"
#include "train/model/optim.h"

/* The tolerances below were sized by running this file's logic on the CPU
 * with every GPU call replaced by its CPU twin plus the GPU's bf16
 * rounding of product inputs (a harness outside the repository): the
 * loss came within 7e-5 relative and the gradients within 9e-3 relative
 * L2 on every case, the update cosine above 0.995; each bound leaves
 * 3x or more for the GPU's other summation orders. LoRA's rank-r
 * products moved to bf16 too (A, B, x' A^T and dy B rounded, sums in
 * fp32) with these bounds unchanged, not loosened: on the emulator in its
 * shuffled mode the LoRA cases then came within 9e-5 relative in the
 * loss (against 2e-3) and 5.4e-3 to 1.1e-2 relative L2 in the gradients
 * (against 3e-2), the update cosine above 0.997.
 * Relative error of the summed loss. */
#define TOL_LOSS 2e-3
/* Relative L2 error of the whole gradient block: ||g_gpu - g_cpu|| /
 * ||g_cpu||. bf16 keeps 8 significant bits (a relative step of 2^-8),
 * and every product's inputs carry that rounding. */
#define TOL_GRAD 3e-2
/* AdamW on the GPU against the CPU's on the same gradients, elementwise:
 * |p_gpu - p_cpu| <= TOL_ADAM_REL |p| + TOL_ADAM_LR lr. */
#define TOL_ADAM_REL 1e-6
#define TOL_ADAM_LR 1e-3
/* Cosine between the GPU's and the CPU's three-step updates: Adam's first
 * steps are close to lr * sign(g), so gradient elements inside the bf16
 * noise may flip; a percent of them leaves the cosine above this. */
#define TOL_COS 0.98

enum { VOCAB = 256, BATCH = 2, SEQ = 24, SPLIT = 10, RANK = 4, STEPS = 3 };
#define LR 1e-2f
#define MAX_NORM 1.0f

struct mode {
    const char *name;
    int full;
    enum wkind kind;
};
static const struct mode modes[] = {
    {"lora-bf16", 0, WK_BF16}, {"qlora-nf4", 0, WK_NF4}, {"full", 1, WK_F32}};

struct batch {
    int32_t ids[BATCH * SEQ], seg[BATCH * SEQ];
    uint8_t mask[BATCH * SEQ];
    size_t nt;
};

/* Row 0 one example, row 1 two (the second from SPLIT on), a few
 * positions without a target. */
static void make_batch(struct batch *b, uint64_t seed)
{
    struct rng r;
    rng_seed(&r, seed);
    for (int i = 0; i < BATCH * SEQ; i++) {
        int t = i % SEQ;
        b->ids[i] = (int32_t)(rng_next(&r) % VOCAB);
        b->seg[i] = i >= SEQ && t >= SPLIT ? SPLIT : 0;
        b->mask[i] = t != 0 && !(i >= SEQ && t == SPLIT) && t != 5;
    }
    b->nt = model_count_targets(b->mask, BATCH, SEQ);
}

static void fill_normal(float *x, size_t n, uint64_t seed, float std)
{
    struct rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = std * (float)rng_normal(&r);
}

/* A tiny model of family fam in mode md, far from uniform: weights of
 * std 0.05, jittered norms, biases and LoRA B nonzero. */
static struct model *make_model(int fam, const struct mode *md)
{
    struct model_config c;
    assert_int_equal(model_config_family_tiny(fam, VOCAB, &c), 0);
    struct model_opts o = {.full = md->full, .base_kind = md->kind};
    if (!md->full) {
        o.lora_r = RANK;
        o.lora_alpha = 8.0f;
        o.lora_targets = MODEL_ALL_PROJ;
    }
    char err[256];
    struct model *m = model_create(&c, &o, err, sizeof err);
    if (!m)
        fail_msg("model_create: %s", err);
    assert_int_equal(model_init_random_std(m, 7 + (uint64_t)fam, 0.05f, 0.1f), 0);
    for (int i = 0; i < m->n_tensors; i++) {
        struct model_tensor *t = &m->tensors[i];
        if (t->vec && strstr(t->name, "bias")) {
            float b[1024];
            assert_true((size_t)t->cols <= sizeof b / sizeof b[0]);
            fill_normal(b, (size_t)t->cols, 100 + (uint64_t)i, 0.1f);
            assert_int_equal(model_set_tensor(m, i, b), 0);
        }
    }
    if (!md->full)
        fill_normal(m->train, m->n_train, 55, 0.05f); /* A and B both nonzero */
    assert_int_equal(model_rope_ensure(m, SEQ), 0);
    return m;
}

static double l2(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (b ? (double)b[i] : 0.0);
        s += d * d;
    }
    return sqrt(s);
}

static double cosine(const float *a, const float *b, size_t n)
{
    double ab = 0.0, aa = 0.0, bb = 0.0;
    for (size_t i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return ab / (sqrt(aa * bb) + 1e-300);
}

/* One CPU pass with gradients; returns the loss, gradients in m->grad. */
static double cpu_pass(struct model *m, struct model_acts *a, const struct batch *b)
{
    size_t nt;
    ops_zero(m->grad, m->n_train);
    double loss = model_forward_backward_packed(m, a, b->ids, b->mask, b->seg, BATCH, SEQ,
                                                1.0f / (float)b->nt, 1, &nt);
    assert_int_equal(nt, b->nt);
    return loss;
}

static double gpu_pass(struct cuda_model *cm, struct cuda_acts *a, const struct batch *b)
{
    double loss;
    size_t nt;
    cuda_model_zero_grads(cm);
    if (cuda_model_forward_backward_packed(cm, a, b->ids, b->mask, b->seg, BATCH, SEQ,
                                           1.0f / (float)b->nt, 1, &loss, &nt))
        fail_msg("GPU pass: %s", cuda_ctx_error());
    assert_int_equal(nt, b->nt);
    return loss;
}

static struct cuda_model *upload(const struct model *m)
{
    char err[256];
    struct cuda_model *cm = cuda_model_upload(m, err, sizeof err);
    if (!cm)
        fail_msg("upload: %s", err);
    return cm;
}

static struct cuda_acts *acts_made(const struct cuda_model *cm, int recompute)
{
    char err[256];
    struct cuda_acts *a = cuda_acts_create(cm, BATCH, SEQ, recompute, err, sizeof err);
    if (!a)
        fail_msg("acts: %s", err);
    return a;
}

static struct cuda_acts *acts(const struct cuda_model *cm)
{
    return acts_made(cm, 0);
}

/* The pass that recomputes each layer in the backward gives the same bits
 * as the one that keeps every activation (loss and gradients, given in
 * loss and g; LoRA dropout drop_p from seed on both), in fewer bytes. m
 * receives the gradients. */
static void recompute_same_bits(struct model *m, struct cuda_model *cm, const struct cuda_acts *ga,
                                const struct batch *b, float drop_p, uint64_t seed, double loss,
                                const float *g)
{
    struct cuda_acts *rc = acts_made(cm, 1);
    assert_int_equal(cuda_acts_dropout(rc, drop_p, seed), 0);
    double lr = gpu_pass(cm, rc, b);
    assert_int_equal(cuda_model_get_grads(cm, m), 0);
    assert_memory_equal(&lr, &loss, sizeof loss);
    assert_memory_equal(m->grad, g, m->n_train * sizeof(float));
    printf("recompute: the same bits in %zu bytes of activations, not %zu\n",
           cuda_acts_bytes(rc), cuda_acts_bytes(ga));
    assert_true(cuda_acts_bytes(rc) < cuda_acts_bytes(ga));
    cuda_acts_free(rc);
}

static void gpu_step(struct cuda_model *cm, struct cuda_optim *o, double *norm)
{
    assert_int_equal(cuda_optim_grad_norm(o, cuda_model_grads(cm), norm), 0);
    cuda_optim_step(o, cuda_model_params(cm), cuda_model_grads(cm),
                    optim_clip_factor(*norm, MAX_NORM), LR);
    cuda_model_params_changed(cm);
    assert_int_equal(cuda_ctx_sync(), 0);
}

static void run_case(int fam, const struct mode *md)
{
    struct model *m = make_model(fam, md);
    size_t n = m->n_train;
    const char *tag = model_family_name(fam);
    struct batch b;
    make_batch(&b, 99);
    float *p0 = malloc(n * sizeof(float)), *gc = malloc(n * sizeof(float));
    float *gg = malloc(n * sizeof(float)), *ph = malloc(n * sizeof(float));
    float *pc = malloc(n * sizeof(float)), *back = malloc(n * sizeof(float));
    assert_non_null(p0 && gc && gg && ph && pc && back);
    memcpy(p0, m->train, n * sizeof(float));

    /* the CPU pass */
    struct model_acts *ca = model_acts_create(m, BATCH, SEQ);
    assert_non_null(ca);
    double lc = cpu_pass(m, ca, &b);
    memcpy(gc, m->grad, n * sizeof(float));
    double gnorm = l2(gc, NULL, n);
    assert_true(gnorm > 0.0);

    /* the GPU pass on the same weights and batch */
    struct cuda_model *cm = upload(m);
    struct cuda_acts *ga = acts(cm);
    double lg = gpu_pass(cm, ga, &b);
    assert_int_equal(cuda_model_get_grads(cm, m), 0);
    memcpy(gg, m->grad, n * sizeof(float));
    double gerr = l2(gg, gc, n) / gnorm;
    printf("%s %s: loss cpu %.6f gpu %.6f; gradient rel L2 %.2e (n %zu)\n", tag, md->name, lc,
           lg, gerr, n);
    assert_true(fabs(lg - lc) <= TOL_LOSS * fabs(lc));
    assert_true(gerr <= TOL_GRAD);

    /* the same bits twice */
    double lg2 = gpu_pass(cm, ga, &b);
    assert_int_equal(cuda_model_get_grads(cm, m), 0);
    assert_memory_equal(&lg2, &lg, sizeof lg);
    assert_memory_equal(m->grad, gg, n * sizeof(float));
    recompute_same_bits(m, cm, ga, &b, 0.0f, 0, lg, gg);

    /* three AdamW steps on each side */
    struct optim oh, oc;
    assert_int_equal(optim_init(&oh, n, m->n_decay, 0.01f), 0);
    assert_int_equal(optim_init(&oc, n, m->n_decay, 0.01f), 0);
    struct cuda_optim go;
    assert_int_equal(cuda_optim_init(&go, &oh), 0);
    memcpy(ph, p0, n * sizeof(float));
    for (int s = 0; s < STEPS; s++) {
        struct batch bs;
        make_batch(&bs, 200 + (uint64_t)s);
        gpu_pass(cm, ga, &bs);
        assert_int_equal(cuda_model_get_grads(cm, m), 0);
        double norm, hnorm = optim_grad_norm(m->grad, n);
        gpu_step(cm, &go, &norm);
        assert_true(fabs(norm - hnorm) <= 1e-5 * hnorm);
        optim_adamw_step(&oh, ph, m->grad, optim_clip_factor(hnorm, MAX_NORM), LR);
    }
    assert_int_equal(cuda_model_get_params(cm, m), 0);
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(m->train[i] - ph[i]) <= TOL_ADAM_REL * fabsf(ph[i]) + TOL_ADAM_LR * LR))
            fail_msg("%s %s: AdamW parameter %zu gpu %.9g cpu %.9g", tag, md->name, i,
                     m->train[i], ph[i]);
    /* the CPU trainer's own three steps from the same start */
    memcpy(back, m->train, n * sizeof(float)); /* the GPU's parameters */
    memcpy(m->train, p0, n * sizeof(float));
    for (int s = 0; s < STEPS; s++) {
        struct batch bs;
        make_batch(&bs, 200 + (uint64_t)s);
        cpu_pass(m, ca, &bs);
        optim_adamw_step(&oc, m->train, m->grad,
                         optim_clip_factor(optim_grad_norm(m->grad, n), MAX_NORM), LR);
    }
    for (size_t i = 0; i < n; i++) {
        pc[i] = m->train[i] - p0[i];
        ph[i] = back[i] - p0[i];
    }
    double cs = cosine(ph, pc, n);
    printf("%s %s: %d steps, update cosine gpu/cpu %.4f\n", tag, md->name, STEPS, cs);
    assert_true(cs >= TOL_COS);

    /* download, upload into a fresh copy: bit for bit, and the same next step */
    memcpy(m->train, back, n * sizeof(float));
    struct optim od;
    assert_int_equal(optim_init(&od, n, m->n_decay, 0.01f), 0);
    assert_int_equal(cuda_optim_download(&go, &od), 0);
    assert_int_equal(od.t, (uint64_t)STEPS);
    struct cuda_model *cm2 = upload(m);
    struct cuda_acts *ga2 = acts(cm2);
    struct cuda_optim go2;
    assert_int_equal(cuda_optim_init(&go2, &od), 0);
    float *mv = malloc(2 * n * sizeof(float));
    assert_non_null(mv);
    assert_int_equal(cuda_model_get_params(cm2, m), 0);
    assert_memory_equal(m->train, back, n * sizeof(float));
    assert_int_equal(cuda_download(mv, go2.m, n * sizeof(float)), 0);
    assert_int_equal(cuda_download(mv + n, go2.v, n * sizeof(float)), 0);
    assert_memory_equal(mv, od.m, n * sizeof(float));
    assert_memory_equal(mv + n, od.v, n * sizeof(float));
    double la = gpu_pass(cm, ga, &b), lb = gpu_pass(cm2, ga2, &b);
    assert_memory_equal(&la, &lb, sizeof la);
    double na, nb;
    gpu_step(cm, &go, &na);
    gpu_step(cm2, &go2, &nb);
    assert_memory_equal(&na, &nb, sizeof na);
    assert_int_equal(cuda_model_get_params(cm, m), 0);
    memcpy(back, m->train, n * sizeof(float));
    assert_int_equal(cuda_model_get_params(cm2, m), 0);
    assert_memory_equal(m->train, back, n * sizeof(float));

    free(mv);
    cuda_optim_free(&go2);
    cuda_acts_free(ga2);
    cuda_model_free(cm2);
    optim_free(&od);
    cuda_optim_free(&go);
    optim_free(&oh);
    optim_free(&oc);
    cuda_acts_free(ga);
    cuda_model_free(cm);
    model_acts_free(ca);
    model_free(m);
    free(p0);
    free(gc);
    free(gg);
    free(ph);
    free(pc);
    free(back);
}

static void llama_lora(void **s) { (void)s; run_case(FAM_LLAMA, &modes[0]); }
static void llama_qlora(void **s) { (void)s; run_case(FAM_LLAMA, &modes[1]); }
static void llama_full(void **s) { (void)s; run_case(FAM_LLAMA, &modes[2]); }
static void qwen2_lora(void **s) { (void)s; run_case(FAM_QWEN2, &modes[0]); }
static void qwen2_qlora(void **s) { (void)s; run_case(FAM_QWEN2, &modes[1]); }
static void qwen2_full(void **s) { (void)s; run_case(FAM_QWEN2, &modes[2]); }
static void mistral_lora(void **s) { (void)s; run_case(FAM_MISTRAL, &modes[0]); }
static void mistral_qlora(void **s) { (void)s; run_case(FAM_MISTRAL, &modes[1]); }
static void mistral_full(void **s) { (void)s; run_case(FAM_MISTRAL, &modes[2]); }
static void gemma2_lora(void **s) { (void)s; run_case(FAM_GEMMA2, &modes[0]); }
static void gemma2_qlora(void **s) { (void)s; run_case(FAM_GEMMA2, &modes[1]); }
static void gemma2_full(void **s) { (void)s; run_case(FAM_GEMMA2, &modes[2]); }

/* LoRA dropout: the GPU draws the CPU's masks. */
static void lora_dropout(void **state)
{
    (void)state;
    struct model *m = make_model(FAM_LLAMA, &modes[0]);
    size_t n = m->n_train;
    struct batch b;
    make_batch(&b, 31);
    float *gc = malloc(n * sizeof(float)), *g0 = malloc(n * sizeof(float));
    assert_non_null(gc && g0);
    struct model_acts *ca = model_acts_create(m, BATCH, SEQ);
    assert_non_null(ca);
    assert_int_equal(model_acts_dropout(ca, m, 0.2f, 4242), 0);
    double lc = cpu_pass(m, ca, &b);
    memcpy(gc, m->grad, n * sizeof(float));
    struct cuda_model *cm = upload(m);
    struct cuda_acts *ga = acts(cm);
    double l0 = gpu_pass(cm, ga, &b);
    assert_int_equal(cuda_model_get_grads(cm, m), 0);
    memcpy(g0, m->grad, n * sizeof(float));
    assert_int_equal(cuda_acts_dropout(ga, 0.2f, 4242), 0);
    double lg = gpu_pass(cm, ga, &b);
    assert_int_equal(cuda_model_get_grads(cm, m), 0);
    float *gd = malloc(n * sizeof(float));
    assert_non_null(gd);
    memcpy(gd, m->grad, n * sizeof(float));
    recompute_same_bits(m, cm, ga, &b, 0.2f, 4242, lg, gd); /* the same masks drawn again */
    free(gd);
    double gnorm = l2(gc, NULL, n);
    double err = l2(m->grad, gc, n) / gnorm, apart = l2(g0, gc, n) / gnorm;
    printf("dropout: loss cpu %.6f gpu %.6f (none %.6f); gradient rel L2 %.2e, without "
           "dropout %.2e\n", lc, lg, l0, err, apart);
    assert_true(fabs(lg - lc) <= TOL_LOSS * fabs(lc));
    assert_true(err <= TOL_GRAD);
    assert_true(apart > 5 * TOL_GRAD); /* the masks matter: the check can fail */
    cuda_acts_free(ga);
    cuda_model_free(cm);
    model_acts_free(ca);
    model_free(m);
    free(gc);
    free(g0);
}

/* DPO's passes on the GPU against the CPU's: the reference's token losses
 * (model_token_losses) and the weighted pass (model_forward_backward_weighted
 * with dpo_batch_weights) on one pair, row 0 preferred and the first
 * example of row 1 not, for LoRA on a 4-bit base and full fine-tuning. */
static void dpo_case(const struct mode *md)
{
    struct model *m = make_model(FAM_LLAMA, md);
    size_t n = m->n_train, bt = (size_t)BATCH * SEQ;
    struct batch b;
    make_batch(&b, 41);
    double *tc = malloc(bt * sizeof(double)), *tg = malloc(bt * sizeof(double));
    float *wc = malloc(bt * sizeof(float)), *wg = malloc(bt * sizeof(float));
    float *gc = malloc(n * sizeof(float));
    assert_non_null(tc && tg && wc && wg && gc);
    struct model_acts *ca = model_acts_create(m, BATCH, SEQ);
    assert_non_null(ca);
    struct cuda_model *cm = upload(m);
    struct cuda_acts *ga = acts(cm);

    /* the reference's token losses: the same positions, close values */
    size_t ntc, ntg;
    double sc = model_token_losses(m, ca, b.ids, b.mask, b.seg, BATCH, SEQ, tc, &ntc), sg;
    if (cuda_model_token_losses(cm, ga, b.ids, b.mask, b.seg, BATCH, SEQ, tg, &sg, &ntg))
        fail_msg("GPU token losses: %s", cuda_ctx_error());
    assert_int_equal(ntg, ntc);
    for (size_t i = 0; i < bt; i++) {
        assert_true((tc[i] == 0.0) == (tg[i] == 0.0));
        assert_true(fabs(tg[i] - tc[i]) <= 2e-2 * fabs(tc[i]) + 1e-3);
    }
    assert_true(fabs(sg - sc) <= TOL_LOSS * fabs(sc));

    /* the weighted pass with DPO's weights */
    int row[2] = {0, 1};
    size_t off[2] = {0, 0}, len[2] = {SEQ, SPLIT};
    double ref[2] = {-sc / 3.0, -sc / 5.0};
    struct dpo_batch dc = {.n_ex = 2, .row = row, .off = off, .len = len, .T = SEQ, .ref = ref,
                           .beta = 0.1};
    struct dpo_batch dg = dc;
    /* dpo_batch_weights writes the pair's positions only: row 1's second
     * example (not in the pair) keeps weight 0 */
    memset(wc, 0, bt * sizeof(float));
    memset(wg, 0, bt * sizeof(float));
    ops_zero(m->grad, n);
    model_forward_backward_weighted(m, ca, b.ids, b.mask, b.seg, BATCH, SEQ, dpo_batch_weights,
                                    &dc, tc, wc, &ntc);
    memcpy(gc, m->grad, n * sizeof(float));
    double lg;
    cuda_model_zero_grads(cm);
    if (cuda_model_forward_backward_weighted(cm, ga, b.ids, b.mask, b.seg, BATCH, SEQ,
                                             dpo_batch_weights, &dg, tg, wg, &lg, &ntg))
        fail_msg("GPU weighted pass: %s", cuda_ctx_error());
    assert_int_equal(cuda_model_get_grads(cm, m), 0);
    double gnorm = l2(gc, NULL, n), gerr = l2(m->grad, gc, n) / gnorm;
    printf("dpo %s: loss cpu %.6f gpu %.6f, margin cpu %.4f gpu %.4f; gradient rel L2 %.2e\n",
           md->name, dc.st.loss, dg.st.loss, dc.st.reward_margin, dg.st.reward_margin, gerr);
    assert_true(gnorm > 0.0);
    assert_true(fabs(dg.st.loss - dc.st.loss) <= TOL_LOSS * fabs(dc.st.loss) + 1e-4);
    assert_true(gerr <= TOL_GRAD);
    size_t weighted = 0;
    for (size_t i = 0; i < bt; i++) {
        assert_true((wc[i] == 0.0f) == (wg[i] == 0.0f));
        weighted += wc[i] != 0.0f;
    }
    assert_true(weighted > 0);

    cuda_acts_free(ga);
    cuda_model_free(cm);
    model_acts_free(ca);
    model_free(m);
    free(tc);
    free(tg);
    free(wc);
    free(wg);
    free(gc);
}

static void dpo_qlora(void **s) { (void)s; dpo_case(&modes[1]); }
static void dpo_full(void **s) { (void)s; dpo_case(&modes[2]); }

/* One step through the seam on model m: its loss, targets, hits, the
 * gradients into g, the device bytes in use once open and the rows a pass
 * held. LoRA dropout 0.2. */
struct seam_step {
    double loss;
    size_t nt, hits, bytes;
    int micro;
};

static struct seam_step seam_step(struct model *m, const struct batch *b, float *g)
{
    struct optim o;
    assert_int_equal(optim_init(&o, m->n_train, m->n_decay, 0.01f), 0);
    char err[256];
    int user;
    struct cuda_train *t = cuda_train_open(0, m, &o, BATCH, SEQ, err, sizeof err, &user);
    if (!t)
        fail_msg("cuda_train_open: %s", err);
    struct seam_step r = {.bytes = cuda_mem_in_use(), .micro = cuda_train_micro_rows(t)};
    if (cuda_train_pass(t, b->ids, b->mask, b->seg, BATCH, SEQ, 1.0f / (float)b->nt, 1, 0.2f,
                        99, &r.loss, &r.nt, &r.hits))
        fail_msg("pass: %s", cuda_ctx_error());
    assert_int_equal(cuda_train_grads_to_host(t, m), 0);
    memcpy(g, m->grad, m->n_train * sizeof(float));
    cuda_train_close(t);
    optim_free(&o);
    return r;
}

/* Micro-batches: a step whose rows do not all fit runs as passes of fewer
 * rows, their gradients added up; the loss, targets, hits and gradients
 * are the whole pass's within summation-order rounding, and LoRA dropout
 * draws the same masks (a mask shifted by a row would be 0.5 apart, as
 * lora_dropout shows). Forced by ALALLO_CUDA_MAX_ROWS=1, and, on the
 * emulator, by a GPU too small for two rows (ALALLO_EMU_GPU_BYTES). */
/* An NF4 base's products decode a chunk of rows at a time (the scratch
 * never holds a whole matrix): with a scratch of NF4_BLOCK rows of the
 * widest input, gate/up (172 rows) and the untied head (256) take two
 * chunks each, and the loss is the same bits (each output column is the
 * same sum), the gradients the same within rounding (dx adds the chunks'
 * parts in another order, and a last-bit change of dx can move its bf16
 * rounding for the products after it: 4.4e-4 rel L2 here, against the
 * 3e-2 the GPU may differ from the CPU by). ALALLO_CUDA_NF4=fused reads the NF4 arrays inside the product
 * (cuda_nf4_gemm) and agrees too; a value of neither is refused. */
static void nf4_chunks_and_fused(void **state)
{
    (void)state;
    struct model *m = make_model(FAM_MISTRAL, &modes[1]);
    size_t n = m->n_train;
    struct batch b;
    make_batch(&b, 77);
    float *g0 = malloc(n * sizeof(float)), *g1 = malloc(n * sizeof(float));
    assert_non_null(g0 && g1);
    struct cuda_model *cm = upload(m);
    struct cuda_acts *ga = acts(cm);
    double l0 = gpu_pass(cm, ga, &b);
    assert_int_equal(cuda_model_get_grads(cm, m), 0);
    memcpy(g0, m->grad, n * sizeof(float));
    double gnorm = l2(g0, NULL, n);
    cuda_acts_free(ga);
    static const char *const env[][2] = {{"ALALLO_CUDA_DEQ_FLOATS", "1"},
                                         {"ALALLO_CUDA_NF4", "fused"}};
    for (int k = 0; k < 2; k++) {
        setenv(env[k][0], env[k][1], 1);
        ga = acts(cm);
        unsetenv(env[k][0]);
        double l = gpu_pass(cm, ga, &b);
        assert_int_equal(cuda_model_get_grads(cm, m), 0);
        memcpy(g1, m->grad, n * sizeof(float));
        double gerr = l2(g1, g0, n) / gnorm;
        printf("NF4 %s=%s: loss %.9f against %.9f, gradient rel L2 %.2e\n", env[k][0],
               env[k][1], l, l0, gerr);
        if (k == 0)
            assert_memory_equal(&l, &l0, sizeof l);
        assert_true(fabs(l - l0) <= 1e-6 * fabs(l0));
        assert_true(gerr <= 2e-3);
        cuda_acts_free(ga);
    }
    char err[256];
    setenv("ALALLO_CUDA_NF4", "tiles", 1);
    assert_null(cuda_acts_create(cm, BATCH, SEQ, 0, err, sizeof err));
    assert_non_null(strstr(err, "ALALLO_CUDA_NF4=tiles"));
    unsetenv("ALALLO_CUDA_NF4");
    setenv("ALALLO_CUDA_DEQ_FLOATS", "0", 1);
    assert_null(cuda_acts_create(cm, BATCH, SEQ, 0, err, sizeof err));
    unsetenv("ALALLO_CUDA_DEQ_FLOATS");
    cuda_model_free(cm);
    model_free(m);
    free(g0);
    free(g1);
}

/* LoRA folded into the base product (the default on a bf16 base) against
 * LoRA's products on their own (ALALLO_CUDA_LORA=each), on llama with every
 * projection adapted, on gemma2 (GeGLU, post-norms) and on llama with q
 * and v only (a group whose k is not folded, groups with none): a pass,
 * then new parameters put on both (scale B's columns must follow them)
 * and a second pass, each within bf16 rounding of the other (each rounds
 * the outputs kept as bf16, q, k, v, gate and up, twice, the base's and
 * then with LoRA's product added, as peft does; folded, once: up to
 * 1.45e-2 of gradient seen, on gemma2, 2e-2 allowed); the folded model
 * does not keep its matrices twice; a bad value is refused. */
/* A tiny LoRA model of family fam on a bf16 base adapting the
 * projections in targets, its weights drawn from seed. */
static struct model *lora_model_r(int fam, unsigned targets, uint64_t seed, int rank)
{
    struct model_config c;
    assert_int_equal(model_config_family_tiny(fam, VOCAB, &c), 0);
    struct model_opts o = {.base_kind = WK_BF16, .lora_r = rank, .lora_alpha = 8.0f,
                           .lora_targets = targets};
    char err[256];
    struct model *m = model_create(&c, &o, err, sizeof err);
    if (!m)
        fail_msg("model_create: %s", err);
    assert_int_equal(model_init_random_std(m, seed, 0.05f, 0.1f), 0);
    assert_int_equal(model_rope_ensure(m, SEQ), 0);
    return m;
}

static struct model *lora_model(int fam, unsigned targets, uint64_t seed)
{
    return lora_model_r(fam, targets, seed, RANK);
}

static void fold_case(int fam, unsigned targets)
{
    char err[256];
    struct model *m = lora_model(fam, targets, 11);
    fill_normal(m->train, m->n_train, 57, 0.05f);
    size_t n = m->n_train;
    struct batch b;
    make_batch(&b, 23);
    setenv("ALALLO_CUDA_LORA", "each", 1);
    struct cuda_model *ce = upload(m);
    unsetenv("ALALLO_CUDA_LORA");
    struct cuda_model *cf = upload(m);
    printf("%s targets 0x%x: %zu bytes folded, %zu each (bf16 block %zu)\n",
           model_family_name(fam), targets, cuda_model_bytes(cf), cuda_model_bytes(ce),
           m->n_bf * sizeof(uint16_t));
    assert_true(cuda_model_bytes(cf) < cuda_model_bytes(ce) + m->n_bf);
    struct cuda_acts *ae = acts(ce), *af = acts(cf);
    float *ge = malloc(n * sizeof(float)), *gf = malloc(n * sizeof(float));
    assert_non_null(ge && gf);
    for (int round = 0; round < 2; round++) {
        if (round == 1) { /* new A and B, as after a step: B's columns follow */
            fill_normal(m->train, n, 58, 0.08f);
            assert_int_equal(cuda_model_put_params(ce, m), 0);
            assert_int_equal(cuda_model_put_params(cf, m), 0);
        }
        double le = gpu_pass(ce, ae, &b);
        assert_int_equal(cuda_model_get_grads(ce, m), 0);
        memcpy(ge, m->grad, n * sizeof(float));
        double lf = gpu_pass(cf, af, &b);
        assert_int_equal(cuda_model_get_grads(cf, m), 0);
        memcpy(gf, m->grad, n * sizeof(float));
        double gerr = l2(gf, ge, n) / l2(ge, NULL, n);
        printf("  round %d: loss folded %.6f each %.6f; gradient rel L2 %.2e\n", round, lf, le,
               gerr);
        assert_true(fabs(lf - le) <= 5e-4 * fabs(le));
        assert_true(gerr <= 2e-2);
    }
    cuda_acts_free(ae);
    cuda_acts_free(af);
    cuda_model_free(ce);
    cuda_model_free(cf);
    setenv("ALALLO_CUDA_LORA", "sideways", 1);
    assert_null(cuda_model_upload(m, err, sizeof err));
    unsetenv("ALALLO_CUDA_LORA");
    assert_non_null(strstr(err, "ALALLO_CUDA_LORA=sideways"));
    model_free(m);
    free(ge);
    free(gf);
}

static void lora_fold_and_each(void **state)
{
    (void)state;
    fold_case(FAM_LLAMA, MODEL_ALL_PROJ);
    fold_case(FAM_GEMMA2, MODEL_ALL_PROJ);
    fold_case(FAM_LLAMA, (1u << PROJ_Q) | (1u << PROJ_V));
}

static void micro_batches(void **state)
{
    (void)state;
    struct model *m = make_model(FAM_QWEN2, &modes[1]);
    size_t n = m->n_train;
    struct batch b;
    make_batch(&b, 51);
    float *g1 = malloc(n * sizeof(float)), *g2 = malloc(n * sizeof(float));
    assert_non_null(g1 && g2);
    struct seam_step whole = seam_step(m, &b, g1);
    assert_int_equal(whole.micro, BATCH);
    setenv("ALALLO_CUDA_MAX_ROWS", "1", 1);
    struct seam_step one = seam_step(m, &b, g2);
    unsetenv("ALALLO_CUDA_MAX_ROWS");
    assert_int_equal(one.micro, 1);
    double gerr = l2(g2, g1, n) / l2(g1, NULL, n);
    printf("micro-batches of 1 row: loss %.9f against %.9f, gradient rel L2 %.2e\n", one.loss,
           whole.loss, gerr);
    assert_int_equal(one.nt, whole.nt);
    assert_int_equal(one.hits, whole.hits);
    assert_true(fabs(one.loss - whole.loss) <= 1e-5 * fabs(whole.loss));
    assert_true(gerr <= 1e-4);
    if (strcmp(cuda_ctx_device()->name, "CPU emulator") == 0) {
        char lim[32];
        snprintf(lim, sizeof lim, "%zu", one.bytes + (whole.bytes - one.bytes) / 2);
        setenv("ALALLO_EMU_GPU_BYTES", lim, 1);
        struct seam_step fit = seam_step(m, &b, g2);
        unsetenv("ALALLO_EMU_GPU_BYTES");
        printf("a GPU of %s bytes (two rows need %zu): micro-batches of %d row\n", lim,
               whole.bytes, fit.micro);
        assert_int_equal(fit.micro, 1);
        assert_memory_equal(&fit.loss, &one.loss, sizeof one.loss);
    } else {
        printf("micro-batches forced by GPU memory: checked on the emulator only\n");
    }
    setenv("ALALLO_CUDA_MAX_ROWS", "none", 1); /* the machine's setting, refused */
    struct optim o;
    assert_int_equal(optim_init(&o, n, m->n_decay, 0.01f), 0);
    char err[256];
    int user = -1;
    assert_null(cuda_train_open(0, m, &o, BATCH, SEQ, err, sizeof err, &user));
    unsetenv("ALALLO_CUDA_MAX_ROWS");
    assert_int_equal(user, 0);
    assert_non_null(strstr(err, "ALALLO_CUDA_MAX_ROWS"));
    optim_free(&o);
    model_free(m);
    free(g1);
    free(g2);
}

/* A frozen fp32 base is refused with a sentence. */
static void refuses_fp32_base(void **state)
{
    (void)state;
    struct model *m = make_model(FAM_LLAMA, &(struct mode){"lora-f32", 0, WK_F32});
    char err[256] = "";
    assert_null(cuda_model_upload(m, err, sizeof err));
    assert_non_null(strstr(err, "fp32"));
    model_free(m);
}

/* Phi-3's partial rotary positions and longrope are refused by name: the
 * GPU pass turns every dim of each head with unscaled tables. */
static void refuses_phi3_rotary(void **state)
{
    (void)state;
    struct model *m = make_model(FAM_PHI3, &modes[1]);
    char err[256] = "";
    assert_null(cuda_model_upload(m, err, sizeof err));
    assert_string_equal(err, "the GPU trainer does not compute phi3's partial rotary positions "
                             "or longrope scaling yet: train it on the CPU");
    model_free(m);
}

/* The trainer's seam: three steps through cuda_train, down to the host
 * (what a checkpoint writes), closed, opened again from the host state
 * (what a resume does): the next step is the one an unbroken run takes,
 * bit for bit (the run recomputing activations, 4-bit LoRA's default; the
 * unbroken one not, ALALLO_CUDA_RECOMPUTE=off). The context stays open throughout, as train_device_prepare
 * leaves it for the trainer. */
static void train_seam_resume(void **state)
{
    (void)state;
    struct model *m = make_model(FAM_QWEN2, &modes[1]);
    size_t n = m->n_train;
    struct optim o;
    assert_int_equal(optim_init(&o, n, m->n_decay, 0.01f), 0);
    char err[256];
    int user = -1;
    setenv("ALALLO_CUDA_RECOMPUTE", "sometimes", 1); /* the machine's setting, refused */
    assert_null(cuda_train_open(0, m, &o, BATCH, SEQ, err, sizeof err, &user));
    assert_int_equal(user, 0);
    assert_non_null(strstr(err, "ALALLO_CUDA_RECOMPUTE"));
    unsetenv("ALALLO_CUDA_RECOMPUTE");
    struct cuda_train *t = cuda_train_open(0, m, &o, BATCH, SEQ, err, sizeof err, &user);
    if (!t)
        fail_msg("cuda_train_open: %s", err);
    assert_int_equal(cuda_train_recompute(t), 1); /* 4-bit LoRA: by default */
    double loss[STEPS + 1], norm;
    size_t nt, hits;
    for (int s = 0; s <= STEPS; s++) {
        struct batch b;
        make_batch(&b, 300 + (uint64_t)s);
        if (s == STEPS) { /* the checkpoint, and a new process resuming from it */
            assert_int_equal(cuda_train_to_host(t, m, &o), 0);
            assert_int_equal(o.t, (uint64_t)STEPS);
            cuda_train_close(t);
            t = cuda_train_open(0, m, &o, BATCH, SEQ, err, sizeof err, &user);
            if (!t)
                fail_msg("cuda_train_open again: %s", err);
        }
        assert_int_equal(cuda_train_pass(t, b.ids, b.mask, b.seg, BATCH, SEQ,
                                         1.0f / (float)b.nt, 1, 0.1f, 77 + (uint64_t)s,
                                         &loss[s], &nt, &hits),
                         0);
        assert_int_equal(nt, b.nt);
        assert_true(hits <= nt);
        assert_int_equal(cuda_train_grad_norm(t, &norm), 0);
        assert_true(norm > 0.0 && isfinite(norm));
        assert_int_equal(cuda_train_adamw(t, optim_clip_factor(norm, MAX_NORM), LR), 0);
    }
    assert_int_equal(cuda_train_to_host(t, m, &o), 0);
    float *resumed = malloc(n * sizeof(float));
    assert_non_null(resumed);
    memcpy(resumed, m->train, n * sizeof(float));
    cuda_train_close(t);

    /* the unbroken run from the same start, keeping every activation: the
     * same bits as the run that recomputed them */
    struct model *u = make_model(FAM_QWEN2, &modes[1]);
    struct optim ou;
    assert_int_equal(optim_init(&ou, n, u->n_decay, 0.01f), 0);
    setenv("ALALLO_CUDA_RECOMPUTE", "off", 1);
    t = cuda_train_open(0, u, &ou, BATCH, SEQ, err, sizeof err, &user);
    unsetenv("ALALLO_CUDA_RECOMPUTE");
    if (!t)
        fail_msg("cuda_train_open: %s", err);
    assert_int_equal(cuda_train_recompute(t), 0);
    for (int s = 0; s <= STEPS; s++) {
        struct batch b;
        make_batch(&b, 300 + (uint64_t)s);
        double l;
        assert_int_equal(cuda_train_pass(t, b.ids, b.mask, b.seg, BATCH, SEQ,
                                         1.0f / (float)b.nt, 1, 0.1f, 77 + (uint64_t)s, &l,
                                         &nt, NULL),
                         0);
        assert_memory_equal(&l, &loss[s], sizeof l);
        assert_int_equal(cuda_train_grad_norm(t, &norm), 0);
        assert_int_equal(cuda_train_adamw(t, optim_clip_factor(norm, MAX_NORM), LR), 0);
    }
    assert_int_equal(cuda_train_to_host(t, u, &ou), 0);
    assert_memory_equal(u->train, resumed, n * sizeof(float));
    assert_memory_equal(ou.m, o.m, n * sizeof(float));
    assert_memory_equal(ou.v, o.v, n * sizeof(float));
    printf("seam: loss %.6f -> %.6f over %d steps, resumed at step %d bit for bit\n", loss[0],
           loss[STEPS], STEPS + 1, STEPS);
    cuda_train_close(t);
    free(resumed);
    optim_free(&o);
    optim_free(&ou);
    model_free(m);
    model_free(u);
    assert_non_null(cuda_ctx_device()); /* left open: not the seam's to close */
}

/* The products of one pass (with gradients, LoRA dropout p) of a llama
 * LoRA model adapting the projections in targets, per kind; *adapted OUT
 * the number of adapted projections, *layers OUT the model's layers. */
static void count_pass(unsigned targets, float p, unsigned long d[CUDA_GEMM_KINDS],
                       int *adapted, int *layers)
{
    struct model *m = lora_model(FAM_LLAMA, targets, 5);
    *adapted = 0;
    *layers = m->cfg.n_layers;
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int q = 0; q < PROJ_COUNT; q++)
            *adapted += m->layers[l].proj[q].r > 0;
    struct batch b;
    make_batch(&b, 17);
    struct cuda_model *cm = upload(m);
    struct cuda_acts *ga = acts(cm);
    assert_int_equal(cuda_acts_dropout(ga, p, 99), 0);
    unsigned long before[CUDA_GEMM_KINDS];
    for (int k = 0; k < CUDA_GEMM_KINDS; k++)
        before[k] = cuda_gemm_calls((enum cuda_gemm_kind)k);
    gpu_pass(cm, ga, &b);
    for (int k = 0; k < CUDA_GEMM_KINDS; k++)
        d[k] = cuda_gemm_calls((enum cuda_gemm_kind)k) - before[k];
    cuda_acts_free(ga);
    cuda_model_free(cm);
    model_free(m);
}

/* LoRA's products run on the tensor cores in bf16: per adapted projection,
 * x A^T and dy B (bf16 out, read again as bf16), dB and dA (fp32 out); with
 * ALALLO_CUDA_LORA=each also (xA) B^T and (dy B) A (fp32 out), while folded
 * into the base products (the default) they are none, but (dy B) A with
 * dropout (its mask is LoRA's alone); adapting all seven or all but down
 * (whose dx every layer needs, unlike layer 0's q, k and v) differs by
 * exactly those, with dropout or without. Gate's and up's base products
 * write bf16 (change 1g), and so do q's, k's and v's (change 1i), and
 * (xA) B^T adding into them with ALALLO_CUDA_LORA=each: five, or ten,
 * bf16-out products a layer more; and the head's logits (change 1h): one
 * more, the batch's targets being one block of rows; and down's dX where
 * one product makes it (change 1l: down folded without dropout, or not
 * adapted), one a layer, which is otherwise an fp32-out product; and o's
 * and down's forward products where they add the residual stream in
 * their epilogue (change 1m: folded or not adapted), two a layer. */
static void lora_products_bf16(void **state)
{
    (void)state;
    for (int k = 0; k < 4; k++) {
        int drop = k & 1, each = k >> 1;
        if (each)
            setenv("ALALLO_CUDA_LORA", "each", 1);
        float p = drop ? 0.2f : 0.0f;
        unsigned long all[CUDA_GEMM_KINDS], one[CUDA_GEMM_KINDS];
        int n_all, n_one, layers;
        count_pass(MODEL_ALL_PROJ, p, all, &n_all, &layers);
        count_pass(MODEL_ALL_PROJ & ~(1u << PROJ_DOWN), p, one, &n_one, &layers);
        unsigned long gated = (each ? 10ul : 5ul) * (unsigned long)layers + 1ul;
        printf("products, %s, dropout %.1f: %d adapted: %lu bf16, %lu bf16-out; %d adapted: %lu "
               "bf16, %lu bf16-out; fp32 %lu, %lu\n", each ? "each" : "folded", p, n_all,
               all[CUDA_GEMM_BF16_F32],
               all[CUDA_GEMM_BF16_BF16], n_one, one[CUDA_GEMM_BF16_F32],
               one[CUDA_GEMM_BF16_BF16], all[CUDA_GEMM_F32_F32], one[CUDA_GEMM_F32_F32]);
        assert_true(n_all > n_one && n_one > 0);
        assert_int_equal(all[CUDA_GEMM_F32_F32], 0); /* nothing on CUDA cores */
        assert_int_equal(one[CUDA_GEMM_F32_F32], 0);
        unsigned long dh_all = !each && !drop ? (unsigned long)layers : 0ul;
        unsigned long dh_one = (unsigned long)layers; /* down not adapted */
        unsigned long res_all = each ? 0ul : 2ul * (unsigned long)layers;
        unsigned long res_one = each ? (unsigned long)layers : 2ul * (unsigned long)layers;
        /* x A: one a projection, or (folded, no dropout: 2c) one a group
         * (q, k, v; o; gate, up; down); dy B and dB are no products but
         * one pass of cuda_lora_dbt (2e) */
        unsigned long xa_all = each || drop ? (unsigned long)n_all : 4ul * (unsigned long)layers;
        unsigned long xa_one = each || drop ? (unsigned long)n_one : 3ul * (unsigned long)layers;
        assert_int_equal(all[CUDA_GEMM_BF16_BF16],
                         xa_all + gated + dh_all + res_all);
        assert_int_equal(one[CUDA_GEMM_BF16_BF16], xa_one + gated + dh_one + res_one);
        assert_int_equal(all[CUDA_GEMM_BF16_F32] - one[CUDA_GEMM_BF16_F32],
                         (each ? 3ul : drop ? 2ul : 1ul) * (unsigned long)(n_all - n_one) +
                             (dh_one - dh_all) + (res_one - res_all));
        /* k not adapted: unfolded, its dX's LoRA product goes (but for
         * the first layer's, whose q, k and v need no dx: nothing before
         * them trains); with dropout its dA product goes, without it q, k
         * and v make their dA in one product (2d), which q and v still
         * need */
        unsigned long nok[CUDA_GEMM_KINDS];
        int n_nok;
        count_pass(MODEL_ALL_PROJ & ~(1u << PROJ_K), p, nok, &n_nok, &layers);
        printf("  k not adapted: %lu bf16 products\n", nok[CUDA_GEMM_BF16_F32]);
        assert_int_equal(all[CUDA_GEMM_BF16_F32] - nok[CUDA_GEMM_BF16_F32],
                         (each || drop ? (unsigned long)layers - 1ul : 0ul) +
                             (drop ? (unsigned long)layers : 0ul));
        unsetenv("ALALLO_CUDA_LORA");
    }
}

/* A batch large enough for every tile path of the pass (2 rows of 200
 * tokens, the second two examples): attention over four 64-row tiles,
 * the last part-filled; LoRA's one pass for dB and dy B (2e) over two
 * blocks of rows (the second part-filled) and, for gate and up (172
 * wide), three slices of a column tile each, the last part-filled; a
 * group's dA (2d) and x A (2c) on it. The loss and gradients against the
 * CPU's, as the tiny batch's. */
static void larger_batch(void **state)
{
    (void)state;
    enum { B = 2, T = 200, CUT = 90 };
    struct model *m = make_model(FAM_LLAMA, &modes[0]);
    assert_int_equal(model_rope_ensure(m, T), 0);
    size_t n = m->n_train;
    int32_t *ids = malloc(B * T * sizeof *ids), *seg = malloc(B * T * sizeof *seg);
    uint8_t *mask = malloc(B * T);
    float *gc = malloc(n * sizeof(float));
    assert_non_null(ids && seg && mask && gc);
    struct rng r;
    rng_seed(&r, 321);
    for (int i = 0; i < B * T; i++) {
        int t = i % T;
        ids[i] = (int32_t)(rng_next(&r) % VOCAB);
        seg[i] = i >= T && t >= CUT ? CUT : 0;
        mask[i] = t != 0 && !(i >= T && t == CUT);
    }
    size_t nt = model_count_targets(mask, B, T), got;
    float dscale = 1.0f / (float)nt;
    struct model_acts *ca = model_acts_create(m, B, T);
    assert_non_null(ca);
    ops_zero(m->grad, n);
    double lc = model_forward_backward_packed(m, ca, ids, mask, seg, B, T, dscale, 1, &got);
    assert_int_equal(got, nt);
    memcpy(gc, m->grad, n * sizeof(float));
    struct cuda_model *cm = upload(m);
    char err[256];
    struct cuda_acts *ga = cuda_acts_create(cm, B, T, 0, err, sizeof err);
    if (!ga)
        fail_msg("acts: %s", err);
    double lg;
    cuda_model_zero_grads(cm);
    if (cuda_model_forward_backward_packed(cm, ga, ids, mask, seg, B, T, dscale, 1, &lg, &got))
        fail_msg("GPU pass: %s", cuda_ctx_error());
    assert_int_equal(got, nt);
    assert_int_equal(cuda_model_get_grads(cm, m), 0);
    double err2 = l2(m->grad, gc, n) / l2(gc, NULL, n);
    printf("%d x %d tokens: loss cpu %.6f gpu %.6f; gradient rel L2 %.2e\n", B, T, lc, lg,
           err2);
    assert_true(fabs(lg - lc) <= TOL_LOSS * fabs(lc));
    assert_true(err2 <= TOL_GRAD);
    cuda_acts_free(ga);
    cuda_model_free(cm);
    model_acts_free(ca);
    model_free(m);
    free(ids), free(seg), free(mask), free(gc);
}

/* A rank past cuda_lora_dbt's (change 2e) keeps dy B and dB as two
 * products each (one bf16-out, one fp32-out a projection more than at
 * rank RANK), and still matches the CPU. */
static void lora_rank_past_one_pass(void **state)
{
    (void)state;
    int rank = CUDA_LORA_DBT_MAX_R + 16;
    struct model *m = lora_model_r(FAM_LLAMA, MODEL_ALL_PROJ, 9, rank);
    fill_normal(m->train, m->n_train, 59, 0.05f);
    size_t n = m->n_train;
    int adapted = m->cfg.n_layers * PROJ_COUNT;
    struct batch b;
    make_batch(&b, 29);
    struct model_acts *ca = model_acts_create(m, BATCH, SEQ);
    assert_non_null(ca);
    double lc = cpu_pass(m, ca, &b);
    float *gc = malloc(n * sizeof(float));
    assert_non_null(gc);
    memcpy(gc, m->grad, n * sizeof(float));
    struct cuda_model *cm = upload(m);
    struct cuda_acts *ga = acts(cm);
    unsigned long before[CUDA_GEMM_KINDS], d[CUDA_GEMM_KINDS];
    for (int k = 0; k < CUDA_GEMM_KINDS; k++)
        before[k] = cuda_gemm_calls((enum cuda_gemm_kind)k);
    double lg = gpu_pass(cm, ga, &b);
    for (int k = 0; k < CUDA_GEMM_KINDS; k++)
        d[k] = cuda_gemm_calls((enum cuda_gemm_kind)k) - before[k];
    assert_int_equal(cuda_model_get_grads(cm, m), 0);
    double err = l2(m->grad, gc, n) / l2(gc, NULL, n);
    printf("rank %d: loss cpu %.6f gpu %.6f; gradient rel L2 %.2e; %lu bf16-out products\n",
           rank, lc, lg, err, d[CUDA_GEMM_BF16_BF16]);
    assert_true(fabs(lg - lc) <= TOL_LOSS * fabs(lc));
    assert_true(err <= TOL_GRAD);
    /* dy B a projection, x A a group (2c), gated's, dh and the adds (1l, 1m) */
    unsigned long layers = (unsigned long)m->cfg.n_layers;
    assert_int_equal(d[CUDA_GEMM_BF16_BF16],
                     (unsigned long)adapted + 4ul * layers + 5ul * layers + 1ul + 3ul * layers);
    cuda_acts_free(ga);
    cuda_model_free(cm);
    model_acts_free(ca);
    model_free(m);
    free(gc);
}

/* ---- CUDA graphs (cuda_graph.h) */

enum { GRAPH_STEPS = 5 };

/* One trajectory of steps (a fresh model of family fam in mode md): each step a new
 * batch (so a replay must read the new ids), a pass and an AdamW step
 * (so it must read the new weights); its losses and gradients into loss
 * and g (steps x n). dropout_from: the steps from there on drop LoRA's
 * inputs, each with a seed of its own (launches that never repeat). */
static void graph_steps(int fam, const struct mode *md, int recompute, int graphs,
                        int dropout_from, double *loss, float *g, struct cuda_graph_stats *st)
{
    struct model *m = make_model(fam, md);
    size_t n = m->n_train;
    struct cuda_model *cm = upload(m);
    struct cuda_acts *a = acts_made(cm, recompute);
    assert_int_equal(cuda_acts_graphs(a, graphs), 0);
    struct optim h;
    assert_int_equal(optim_init(&h, n, m->n_decay, 0.01f), 0);
    struct cuda_optim o;
    assert_int_equal(cuda_optim_init(&o, &h), 0);
    for (int k = 0; k < GRAPH_STEPS; k++) {
        struct batch b;
        make_batch(&b, 900 + (uint64_t)k);
        float p = k >= dropout_from ? 0.1f : 0.0f;
        assert_int_equal(cuda_acts_dropout(a, p, 70 + (uint64_t)k), 0);
        loss[k] = gpu_pass(cm, a, &b);
        assert_int_equal(cuda_model_get_grads(cm, m), 0);
        memcpy(g + (size_t)k * n, m->grad, n * sizeof(float));
        double norm;
        gpu_step(cm, &o, &norm);
    }
    cuda_acts_graph_stats(a, st);
    cuda_optim_free(&o);
    optim_free(&h);
    cuda_acts_free(a);
    cuda_model_free(cm);
    model_free(m);
}

static void graph_case(int fam, const struct mode *md, int recompute)
{
    struct model *m = make_model(fam, md);
    size_t n = m->n_train, gn = GRAPH_STEPS * n;
    double le[GRAPH_STEPS], lg[GRAPH_STEPS];
    float *ge = malloc(gn * sizeof(float)), *gg = malloc(gn * sizeof(float));
    assert_non_null(ge && gg);
    struct cuda_graph_stats se, sg;
    graph_steps(fam, md, recompute, 0, GRAPH_STEPS, le, ge, &se);
    graph_steps(fam, md, recompute, 1, GRAPH_STEPS, lg, gg, &sg);
    printf("graphs (%s, %s%s): %lu eager, %lu captured, %lu replayed; losses %.9f .. %.9f\n",
           model_family_name(fam), md->name, recompute ? ", recompute" : "", sg.eager,
           sg.captures, sg.replays, lg[0], lg[GRAPH_STEPS - 1]);
    assert_int_equal(se.eager + se.captures + se.replays, 0); /* off: nothing counted */
    /* the same bits, step by step, though the weights and the batch move */
    assert_memory_equal(lg, le, sizeof le);
    assert_memory_equal(gg, ge, gn * sizeof(float));
    /* forward: eager, captured, then replayed; backward: its two graphs
     * (dres and dres2 swap each pass) eager twice, captured twice, then
     * replayed */
    assert_string_equal(sg.off, "");
    assert_int_equal(sg.eager, 3);
    assert_int_equal(sg.captures, 3);
    assert_int_equal(sg.replays, 2 * GRAPH_STEPS - 3);
    assert_true(fabs(le[GRAPH_STEPS - 1] - le[0]) > 0.0); /* the weights did move */
    /* LoRA dropout on every step, each with a seed of its own: the seeds
     * are read on the device, so the launches repeat and replay, with the
     * eager passes' bits (new masks every step: a replay must draw them) */
    double l_nodrop = le[GRAPH_STEPS - 1];
    graph_steps(fam, md, recompute, 0, 0, le, ge, &se);
    graph_steps(fam, md, recompute, 1, 0, lg, gg, &sg);
    if (!md->full) /* the masks matter (full fine-tuning has none to draw) */
        assert_true(le[GRAPH_STEPS - 1] != l_nodrop);
    assert_memory_equal(lg, le, sizeof le);
    assert_memory_equal(gg, ge, gn * sizeof(float));
    assert_int_equal(sg.eager, 3);
    assert_int_equal(sg.captures, 3);
    assert_int_equal(sg.replays, 2 * GRAPH_STEPS - 3);
    free(ge);
    free(gg);
    model_free(m);
}

static void graphs_lora(void **s) { (void)s; graph_case(FAM_LLAMA, &modes[0], 0); }
static void graphs_qlora_recompute(void **s) { (void)s; graph_case(FAM_QWEN2, &modes[1], 1); }
static void graphs_full(void **s) { (void)s; graph_case(FAM_GEMMA2, &modes[2], 0); }

/* A capture the driver refuses (the emulator's ALALLO_EMU_CAPTURE=fail):
 * graphs stop with the reason, the pass runs eagerly, the same bits. */
static void graphs_refused(void **state)
{
    (void)state;
    if (strcmp(cuda_ctx_device()->name, "CPU emulator") != 0) {
        printf("a refused capture: checked on the emulator only\n");
        return;
    }
    struct model *m = make_model(FAM_LLAMA, &modes[0]);
    size_t n = m->n_train, gn = GRAPH_STEPS * n;
    double le[GRAPH_STEPS], lg[GRAPH_STEPS];
    float *ge = malloc(gn * sizeof(float)), *gg = malloc(gn * sizeof(float));
    assert_non_null(ge && gg);
    struct cuda_graph_stats se, sg;
    graph_steps(FAM_LLAMA, &modes[0], 0, 0, GRAPH_STEPS, le, ge, &se);
    setenv("ALALLO_EMU_CAPTURE", "fail", 1);
    graph_steps(FAM_LLAMA, &modes[0], 0, 1, GRAPH_STEPS, lg, gg, &sg);
    unsetenv("ALALLO_EMU_CAPTURE");
    printf("a refused capture: %s; %lu eager\n", sg.off, sg.eager);
    assert_non_null(strstr(sg.off, "capture failed"));
    assert_int_equal(sg.captures + sg.replays, 0);
    assert_int_equal(sg.eager, 2 * GRAPH_STEPS);
    assert_memory_equal(lg, le, sizeof le);
    assert_memory_equal(gg, ge, gn * sizeof(float));
    free(ge);
    free(gg);
    model_free(m);
}

/* The trainer's seam: graphs on by default, off with ALALLO_CUDA_GRAPHS=off,
 * any other value refused at open with a sentence naming the setting. */
static void graphs_setting(void **state)
{
    (void)state;
    struct model *m = make_model(FAM_LLAMA, &modes[0]);
    struct batch b;
    make_batch(&b, 61);
    struct optim o;
    assert_int_equal(optim_init(&o, m->n_train, m->n_decay, 0.01f), 0);
    char err[256];
    int user = -1;
    const char *values[] = {NULL, "on", "off"};
    for (int v = 0; v < 3; v++) {
        if (values[v])
            setenv("ALALLO_CUDA_GRAPHS", values[v], 1);
        struct cuda_train *t = cuda_train_open(0, m, &o, BATCH, SEQ, err, sizeof err, &user);
        if (!t)
            fail_msg("open: %s", err);
        for (int k = 0; k < 3; k++) {
            double loss;
            size_t nt;
            assert_int_equal(cuda_train_pass(t, b.ids, b.mask, b.seg, BATCH, SEQ,
                                             1.0f / (float)b.nt, 1, 0.0f, 0, &loss, &nt, NULL),
                             0);
        }
        struct cuda_graph_stats st;
        cuda_train_graph_stats(t, &st);
        printf("ALALLO_CUDA_GRAPHS %s: %lu eager, %lu captured, %lu replayed\n",
               values[v] ? values[v] : "unset", st.eager, st.captures, st.replays);
        if (v == 2)
            assert_int_equal(st.eager + st.captures + st.replays, 0);
        else
            assert_true(st.replays >= 1 && st.captures >= 1);
        cuda_train_close(t);
        unsetenv("ALALLO_CUDA_GRAPHS");
    }
    setenv("ALALLO_CUDA_GRAPHS", "yes", 1);
    assert_null(cuda_train_open(0, m, &o, BATCH, SEQ, err, sizeof err, &user));
    unsetenv("ALALLO_CUDA_GRAPHS");
    assert_int_equal(user, 0); /* the machine's setting, not the attempt's fault */
    assert_non_null(strstr(err, "ALALLO_CUDA_GRAPHS is \"yes\""));
    optim_free(&o);
    model_free(m);
}

int main(void)
{
    if (cuda_device_count() == 0) {
        printf("skip: no GPU visible (cuda_device_count() is 0): test_cuda_model needs one\n");
        return 77;
    }
    if (cuda_ctx_open(0)) {
        printf("cannot open GPU 0: %s\n", cuda_ctx_error());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llama_lora),    cmocka_unit_test(llama_qlora),
        cmocka_unit_test(llama_full),    cmocka_unit_test(qwen2_lora),
        cmocka_unit_test(qwen2_qlora),   cmocka_unit_test(qwen2_full),
        cmocka_unit_test(mistral_lora),  cmocka_unit_test(mistral_qlora),
        cmocka_unit_test(mistral_full),  cmocka_unit_test(gemma2_lora),
        cmocka_unit_test(gemma2_qlora),  cmocka_unit_test(gemma2_full),
        cmocka_unit_test(lora_dropout),  cmocka_unit_test(lora_products_bf16),
        cmocka_unit_test(lora_fold_and_each),
        cmocka_unit_test(lora_rank_past_one_pass),
        cmocka_unit_test(larger_batch),
        cmocka_unit_test(dpo_qlora),     cmocka_unit_test(nf4_chunks_and_fused),
        cmocka_unit_test(dpo_full),      cmocka_unit_test(micro_batches),
        cmocka_unit_test(refuses_fp32_base),
        cmocka_unit_test(refuses_phi3_rotary),
        cmocka_unit_test(train_seam_resume),
        cmocka_unit_test(graphs_lora),   cmocka_unit_test(graphs_qlora_recompute),
        cmocka_unit_test(graphs_full),   cmocka_unit_test(graphs_refused),
        cmocka_unit_test(graphs_setting),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    cuda_ctx_close();
    return rc;
}
