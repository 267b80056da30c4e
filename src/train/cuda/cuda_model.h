/* cuda_model.h - a device copy of a struct model and its training pass on
 * the GPU: the twin of model_pass.c, with the same activations, the same
 * arithmetic order of layers and the same meaning of every argument.
 *
 * One model definition: train/model.h. The device copy mirrors the host
 * model's blocks as they are laid out there (trainable fp32 parameters,
 * their gradients, frozen fp32 values, frozen bf16 values), so every host
 * pointer of a struct linear or a norm maps to the device by its offset in
 * its block. On top of that the device holds, per mode:
 *  - full fine-tuning: a bf16 copy of the matrices ([0, n_decay) of the
 *    trainable block) that every product reads; the fp32 master weights
 *    are what AdamW updates (cuda_model_params_changed refreshes the copy);
 *  - LoRA on a bf16 base: the bf16 block as it is;
 *  - LoRA (either base): a bf16 copy of the adapters' A and B ([0, n_decay)
 *    of the trainable block, refreshed by cuda_model_params_changed as in
 *    full fine-tuning) that LoRA's products read; AdamW updates the fp32;
 *  - QLoRA (NF4 base): each matrix's NF4 arrays (struct cuda_nf4), decoded
 *    to bf16 into one scratch matrix just before each product; the
 *    embedding alone is decoded once at upload and kept as bf16, because
 *    the lookup reads scattered rows (and the tied head reads it too).
 * A frozen fp32 base (LoRA with base_kind WK_F32) is refused: the GPU
 * products read bf16 (cuda_model_check says so in a sentence).
 *
 * Products: bf16 inputs with fp32 accumulation (cuda_gemm_bf16); the
 * kernel that makes a product's input (a norm, the gated activation,
 * attention, rotary positions' backward, a norm's backward) writes its
 * bf16 copy beside the fp32 output (cuda_ops.h, "bf16 copies"); only
 * dv, the head's rows and a soft-capped head's dlogits are converted by a
 * pass of their own. The
 * outputs stay fp32 but gate's and up's, which their products write as
 * bf16 and the pass keeps so for the gated activation and its backward
 * (change 1g: where the CPU keeps them fp32; docs/trainer.md), and the
 * head's logits, which its product writes as bf16 and the loss kernel
 * reads, writing dlogits over them as bf16 (change 1h; a soft-capped
 * head's stay fp32), and q's, k's and v's, kept as bf16 for rotary
 * positions and attention, which reads dO's bf16 too (change 1i); the
 * residual stream is bf16 (change 1j; its gradient fp32), which o's and
 * down's products add into in their epilogue where one product makes
 * their output (change 1m), and so is attention's output, written and
 * kept so alone (change 1k); the gated
 * backward writes dg and du as bf16 alone (change 1f).
 * LoRA's rank-r products read bf16 too, on the tensor cores with fp32
 * accumulation: x' A^T from the base product's bf16 input (its dropped
 * copy with dropout), kept as bf16 for the backward; on a bf16 base it is
 * folded into the base product (x' A^T in columns beside x, scale B in
 * columns beside W: one product makes x W^T + scale x' A^T B^T; the
 * folded matrices live padded, out of the bf16 block's device copy;
 * ALALLO_CUDA_LORA=each keeps (x' A^T) B^T a product of its own, as on an
 * NF4 base); dy B rounded to bf16 once; dA and dB add into the fp32
 * gradients. The
 * head is fused with the loss in blocks of rows that have a target, so
 * (N, V) logits never exist.
 *
 * Errors: every function that can fail returns 0 or -1 (NULL for the
 * constructors) with the reason in cuda_ctx_error() or `err`. The context
 * (cuda_ctx.h) must be open before any of these is called.
 *
 * Ownership: cuda_model_upload copies what it needs from the host model
 * and keeps no pointer into it; the caller keeps the host model (the
 * checkpoint's source and target). The device model owns all its device
 * memory; the acts own theirs.
 */
#ifndef ALALLO_TRAIN_CUDA_MODEL_H
#define ALALLO_TRAIN_CUDA_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "train/cuda/cuda_graph.h"
#include "train/model/model.h"

struct cuda_model;
struct cuda_acts;

/* 0 when the GPU pass computes model m; -1 with a sentence naming what it
 * does not (a frozen fp32 base, a head dimension over 256, Qwen3's q/k
 * norms, SmolLM3's layers without rotary positions). */
int cuda_model_check(const struct model *m, char *err, size_t errcap);

/* Copies model m to the device: every block, the NF4 arrays, the rotary
 * tables (m->rope_len positions: call model_rope_ensure for the context
 * first). Gradients start at zero. NULL with a reason. */
struct cuda_model *cuda_model_upload(const struct model *m, char *err, size_t errcap);
void cuda_model_free(struct cuda_model *cm); /* NULL is fine */
/* Device bytes the model holds (parameters, gradients, copies). */
size_t cuda_model_bytes(const struct cuda_model *cm);
/* The adapted projections whose LoRA is folded into the base products
 * (0 with ALALLO_CUDA_LORA=each, on an NF4 base, or in full fine-tuning). */
int cuda_model_lora_folded(const struct cuda_model *cm);

/* The trainable block and its gradients on the device (n_train floats). */
float *cuda_model_params(struct cuda_model *cm);
float *cuda_model_grads(struct cuda_model *cm);
size_t cuda_model_n_train(const struct cuda_model *cm);
size_t cuda_model_n_decay(const struct cuda_model *cm);
/* Sets every gradient to zero (callers do, once per step, as on the CPU). */
void cuda_model_zero_grads(struct cuda_model *cm);
/* Call after the trainable block changed on the device (an optimizer
 * step, an upload): refreshes the bf16 copy the products read (full
 * fine-tuning's matrices, LoRA's A and B; nothing in inference). */
void cuda_model_params_changed(struct cuda_model *cm);

/* Host <-> device for the trainable block: put uploads m->train (after a
 * resume) and refreshes the copies; get downloads into m->train (for a
 * checkpoint or the final model); get_grads into m->grad (tests).
 * m must be the model the device copy was made from. 0 or -1. */
int cuda_model_put_params(struct cuda_model *cm, const struct model *m);
int cuda_model_get_params(const struct cuda_model *cm, struct model *m);
int cuda_model_get_grads(const struct cuda_model *cm, struct model *m);

/* Activations and scratch on the device for batches up to B x T (as
 * model_acts_create; unset, the products' bf16 inputs are kept too, so
 * the backward pass reads what it would make again: change 1n). recompute
 * set: only each layer's input is kept
 * through the forward pass, with one layer's other activations, and the
 * backward pass runs each layer's forward again before its backward
 * (activation checkpointing per layer: about a third more work for the
 * products, and the same bits of loss and gradients as without, since the
 * same kernels run on the same inputs). NULL with a reason (too large, T
 * beyond the uploaded rotary tables, out of device memory). */
struct cuda_acts *cuda_acts_create(const struct cuda_model *cm, int B, int T, int recompute,
                                   char *err, size_t errcap);
void cuda_acts_free(struct cuda_acts *a); /* NULL is fine */
size_t cuda_acts_bytes(const struct cuda_acts *a);
/* LoRA dropout of the passes from now on, as model_acts_dropout (the same
 * masks bit for bit: cuda_dropout draws what linear_dropout_keep draws).
 * With p > 0 it uploads each projection's seed (a sync: call it between
 * passes), which the kernels read on the device. 0, or -1 for p outside
 * [0, 1) or out of device memory (no dropout then). */
int cuda_acts_dropout(struct cuda_acts *a, float p, uint64_t seed);
/* A pass over rows [r, r + B) of a step that runs as micro-batches: tok0
 * = r x T, the first token's index in the step, so that LoRA dropout
 * draws each token's mask as the whole step's pass would (0 by default). */
void cuda_acts_offset(struct cuda_acts *a, size_t tok0);
/* The rows (B) the activations were made for. */
int cuda_acts_rows(const struct cuda_acts *a);
/* Of the last pass's targets, how many the model predicted (arg-max). */
size_t cuda_acts_hits(const struct cuda_acts *a);
/* The passes' layers as CUDA graphs where their launches repeat
 * (cuda_graph.h): on, the forward's embedding, layers and final norm and
 * the backward's final norm, layers and embedding each run through a set
 * of graphs (the head stays eager: its rows change with the targets);
 * off (the default) runs everything eagerly. The same bits either way.
 * 0, or -1 out of memory (graphs stay off). */
int cuda_acts_graphs(struct cuda_acts *a, int on);
/* The two sets' counts added up (zeros when off; off copies a set's
 * reason for stopping, "" if none). */
void cuda_acts_graph_stats(const struct cuda_acts *a, struct cuda_graph_stats *out /* OUT */);

/* model_forward_backward_packed on the GPU: ids, mask and seg (B,T) are
 * host arrays (seg NULL: one example per row). *loss OUT gets the summed
 * loss over targets (natural log, summed on the host in row order);
 * with backward set, dscale * d(sum)/d(param) is added into the device
 * gradients. Returns 0, or -1 with the reason in cuda_ctx_error() (the
 * gradients are then undefined). */
int cuda_model_forward_backward_packed(struct cuda_model *cm, struct cuda_acts *a,
                                       const int32_t *ids, const uint8_t *mask,
                                       const int32_t *seg, int B, int T, float dscale,
                                       int backward, double *loss /* OUT */,
                                       size_t *n_targets /* OUT */);

/* model_token_losses on the GPU: forward only; tok_loss (host, B*T) OUT
 * gets each target's loss at the position before it, 0 elsewhere; *loss
 * OUT their sum. 0 or -1. */
int cuda_model_token_losses(struct cuda_model *cm, struct cuda_acts *a, const int32_t *ids,
                            const uint8_t *mask, const int32_t *seg, int B, int T,
                            double *tok_loss /* OUT */, double *loss /* OUT */,
                            size_t *n_targets /* OUT */);

/* model_forward_backward_weighted on the GPU (DPO's pass): the forward
 * and the head give tok_loss (host, B*T) OUT, fn turns it into tok_w
 * (host, B*T) OUT, and sum_i tok_w[i] d(tok_loss[i])/d(param) is added into
 * the device gradients (the head's logits are computed again for it).
 * *loss OUT is the sum of tok_loss. 0 or -1. */
int cuda_model_forward_backward_weighted(struct cuda_model *cm, struct cuda_acts *a,
                                         const int32_t *ids, const uint8_t *mask,
                                         const int32_t *seg, int B, int T, model_weights_fn fn,
                                         void *ctx, double *tok_loss /* OUT */,
                                         float *tok_w /* OUT */, double *loss /* OUT */,
                                         size_t *n_targets /* OUT */);

#endif
