/* cuda_train.c - the trainer's seam to the GPU (contract in cuda_train.h). */
#include "train/cuda/cuda_train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/cuda/cuda_model.h"
#include "train/cuda/cuda_ops.h"
#include "train/cuda/cuda_optim.h"

struct cuda_train {
    int owns_ctx; /* opened the context (else the caller had: train_device.h) */
    int head_dim; /* the model's, for which attention kernels run */
    int recompute; /* the backward pass recomputes each layer (cuda_model.h) */
    int rows;      /* the step's rows the open asked for */
    int micro;     /* rows a pass holds: a divisor of rows (micro-batches below it) */
    int lora;      /* the model has adapters */
    struct cuda_model *cm;
    struct cuda_acts *a;
    struct cuda_optim opt;
};

int cuda_train_recompute_auto(const struct model *m)
{
    return !m->opts.full && m->opts.base_kind == WK_NF4;
}

struct cuda_train *cuda_train_open(int device, const struct model *m, const struct optim *o,
                                   int B, int T, char *err, size_t errcap, int *user)
{
    *user = 1;
    if (cuda_model_check(m, err, errcap))
        return NULL;
    for (int l = 0; l < m->cfg.n_layers; l++)
        if (model_layer_window(&m->cfg, l) > 0 && T > m->cfg.sliding_window) {
            snprintf(err, errcap, "the GPU attention has no sliding window yet: train %s with "
                                  "sequences of at most its window (%d tokens), or on the CPU",
                     model_family_name(m->cfg.family), m->cfg.sliding_window);
            return NULL;
        }
    *user = 0;
    /* the machine's setting, so not the attempt's fault when it is wrong */
    const char *attn = getenv("ALALLO_CUDA_ATTENTION");
    if (attn && *attn && strcmp(attn, "bf16") != 0 && strcmp(attn, "fp32") != 0) {
        snprintf(err, errcap, "ALALLO_CUDA_ATTENTION is \"%s\": it takes bf16 (the default: "
                              "tensor cores) or fp32 (the reference kernels)", attn);
        return NULL;
    }
    cuda_attention_use(attn && strcmp(attn, "fp32") == 0 ? CUDA_ATTN_FP32 : CUDA_ATTN_BF16);
    const char *rec = getenv("ALALLO_CUDA_RECOMPUTE");
    if (rec && *rec && strcmp(rec, "auto") != 0 && strcmp(rec, "on") != 0 &&
        strcmp(rec, "off") != 0) {
        snprintf(err, errcap, "ALALLO_CUDA_RECOMPUTE is \"%s\": it takes auto (the default: "
                              "4-bit LoRA recomputes), on or off", rec);
        return NULL;
    }
    int recompute = rec && strcmp(rec, "on") == 0    ? 1
                    : rec && strcmp(rec, "off") == 0 ? 0
                                                     : cuda_train_recompute_auto(m);
    const char *graphs = getenv("ALALLO_CUDA_GRAPHS");
    if (graphs && *graphs && strcmp(graphs, "on") != 0 && strcmp(graphs, "off") != 0) {
        snprintf(err, errcap, "ALALLO_CUDA_GRAPHS is \"%s\": it takes on (the default: the "
                              "layers replayed as CUDA graphs where they repeat) or off",
                 graphs);
        return NULL;
    }
    const char *cap_s = getenv("ALALLO_CUDA_MAX_ROWS");
    int cap = B;
    if (cap_s && *cap_s) {
        char *end;
        long v = strtol(cap_s, &end, 10);
        if (*end || v < 1 || v > 1 << 20) {
            snprintf(err, errcap, "ALALLO_CUDA_MAX_ROWS is \"%s\": it takes a whole number of "
                                  "rows from 1", cap_s);
            return NULL;
        }
        cap = v < B ? (int)v : B;
    }
    int open = cuda_ctx_device() == NULL;
    if (open && cuda_ctx_open(device)) {
        snprintf(err, errcap, "%s", cuda_ctx_error());
        return NULL;
    }
    struct cuda_train *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errcap, "out of memory");
        if (open)
            cuda_ctx_close();
        return NULL;
    }
    t->owns_ctx = open;
    t->head_dim = m->cfg.head_dim;
    t->recompute = recompute;
    t->lora = !m->opts.full && m->opts.lora_r > 0;
    t->rows = B;
    t->cm = cuda_model_upload(m, err, errcap);
    /* the largest divisor of the rows whose activations fit (and at most
     * the cap): the step runs as rows / micro passes, gradients added up */
    for (int d = cap; t->cm && !t->a && d >= 1; d--) {
        if (B % d)
            continue;
        t->a = cuda_acts_create(t->cm, d, T, recompute, err, errcap);
        t->micro = d;
    }
    if (t->a && cuda_optim_init(&t->opt, o))
        snprintf(err, errcap, "the optimizer state on the GPU: %s", cuda_ctx_error());
    else if (t->a && !(graphs && strcmp(graphs, "off") == 0) && cuda_acts_graphs(t->a, 1))
        snprintf(err, errcap, "out of memory");
    else if (t->a)
        return t;
    cuda_train_close(t);
    return NULL;
}

void cuda_train_close(struct cuda_train *t)
{
    if (!t)
        return;
    cuda_optim_free(&t->opt);
    cuda_acts_free(t->a);
    cuda_model_free(t->cm);
    if (t->owns_ctx)
        cuda_ctx_close();
    free(t);
}

const struct cuda_device_info *cuda_train_device(const struct cuda_train *t)
{
    (void)t;
    return cuda_ctx_device();
}

const char *cuda_train_attention(const struct cuda_train *t)
{
    return cuda_attention_kind(t->head_dim) == CUDA_ATTN_BF16 ? "bf16" : "fp32";
}

void cuda_train_graph_stats(const struct cuda_train *t, struct cuda_graph_stats *out)
{
    cuda_acts_graph_stats(t->a, out);
}

const char *cuda_train_lora(const struct cuda_train *t)
{
    if (cuda_model_lora_folded(t->cm))
        return "folded";
    return t->lora ? "each" : NULL;
}

int cuda_train_recompute(const struct cuda_train *t)
{
    return t->recompute;
}

size_t cuda_train_peak_bytes(const struct cuda_train *t)
{
    (void)t;
    return cuda_mem_peak();
}

int cuda_train_micro_rows(const struct cuda_train *t)
{
    return t->micro;
}

int cuda_train_pass(struct cuda_train *t, const int32_t *ids, const uint8_t *mask,
                    const int32_t *seg, int B, int T, float dscale, int backward, float drop_p,
                    uint64_t drop_seed, double *loss, size_t *n_targets, size_t *hits)
{
    *loss = 0.0;
    *n_targets = 0;
    if (hits)
        *hits = 0;
    if (backward)
        cuda_model_zero_grads(t->cm);
    if (cuda_acts_dropout(t->a, drop_p, drop_seed))
        return -1;
    int rc = 0;
    /* micro-batches of rows in order; each adds its gradients, scaled by
     * the step's dscale, so their sum is the whole step's */
    for (int r0 = 0; r0 < B && !rc; r0 += t->micro) {
        int nr = B - r0 < t->micro ? B - r0 : t->micro;
        size_t at = (size_t)r0 * T, nt;
        double l;
        cuda_acts_offset(t->a, at);
        rc = cuda_model_forward_backward_packed(t->cm, t->a, ids + at, mask + at,
                                                seg ? seg + at : NULL, nr, T, dscale, backward,
                                                &l, &nt);
        *loss += l;
        *n_targets += nt;
        if (hits)
            *hits += cuda_acts_hits(t->a);
    }
    cuda_acts_offset(t->a, 0);
    cuda_acts_dropout(t->a, 0.0f, 0);
    return rc;
}

int cuda_train_token_losses(struct cuda_train *t, const int32_t *ids, const uint8_t *mask,
                            const int32_t *seg, int B, int T, double *tok_loss,
                            size_t *n_targets)
{
    *n_targets = 0;
    for (int r0 = 0; r0 < B; r0 += t->micro) {
        int nr = B - r0 < t->micro ? B - r0 : t->micro;
        size_t at = (size_t)r0 * T, nt;
        double loss;
        if (cuda_model_token_losses(t->cm, t->a, ids + at, mask + at, seg ? seg + at : NULL, nr,
                                    T, tok_loss + at, &loss, &nt))
            return -1;
        *n_targets += nt;
    }
    return 0;
}

int cuda_train_pass_weighted(struct cuda_train *t, const int32_t *ids, const uint8_t *mask,
                             const int32_t *seg, int B, int T, model_weights_fn fn, void *ctx,
                             double *tok_loss, float *tok_w, float drop_p, uint64_t drop_seed,
                             size_t *n_targets)
{
    if (B > t->micro) /* DPO's weights need every pair's log-probabilities first */
        return cuda_ctx_fail("DPO on the GPU runs a step's %d rows in one pass, and only %d "
                             "fit in GPU memory: choose a smaller batch size", B, t->micro);
    cuda_model_zero_grads(t->cm);
    if (cuda_acts_dropout(t->a, drop_p, drop_seed))
        return -1;
    double loss;
    int rc = cuda_model_forward_backward_weighted(t->cm, t->a, ids, mask, seg, B, T, fn, ctx,
                                                  tok_loss, tok_w, &loss, n_targets);
    cuda_acts_dropout(t->a, 0.0f, 0);
    return rc;
}

int cuda_train_grad_norm(struct cuda_train *t, double *norm)
{
    return cuda_optim_grad_norm(&t->opt, cuda_model_grads(t->cm), norm);
}

int cuda_train_adamw(struct cuda_train *t, float gscale, float lr)
{
    cuda_optim_step(&t->opt, cuda_model_params(t->cm), cuda_model_grads(t->cm), gscale, lr);
    cuda_model_params_changed(t->cm);
    return cuda_ctx_sync();
}

int cuda_train_to_host(const struct cuda_train *t, struct model *m, struct optim *o)
{
    if (cuda_model_get_params(t->cm, m) || cuda_optim_download(&t->opt, o))
        return -1;
    return 0;
}

int cuda_train_grads_to_host(const struct cuda_train *t, struct model *m)
{
    return cuda_model_get_grads(t->cm, m) ? -1 : 0;
}

int cuda_train_from_host(struct cuda_train *t, const struct model *m, const struct optim *o)
{
    if (cuda_model_put_params(t->cm, m) || cuda_optim_upload(&t->opt, o))
        return -1;
    return 0;
}
