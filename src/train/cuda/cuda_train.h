/* cuda_train.h - the seam between the trainer (trainer.c) and the GPU: the
 * trainer keeps its loop, data, events, validation and checkpoints, and
 * calls these in place of the CPU pass and optimizer when the attempt runs
 * on a GPU (trainer_run_gpu).
 *
 *   open          after load_everything and resume: opens the GPU, copies
 *                 the model, the optimizer state and room for the batch up
 *   pass          in place of ops_zero + model_forward_backward_packed
 *                 (and, with backward 0, in evaluate)
 *   token_losses  in place of model_token_losses (DPO's reference)
 *   pass_weighted in place of model_forward_backward_weighted (DPO's step)
 *   grad_norm     in place of optim_grad_norm
 *   adamw         in place of optim_adamw_step
 *   to_host       before anything reads the host model or optimizer: a
 *                 checkpoint, sample answers, the final model
 *   grads_to_host the gradients, for the PyTorch comparison's dump only
 *   from_host     after the host state changed (a resume once open)
 *
 * What the GPU does not run is refused at open with a sentence: a frozen
 * fp32 base (cuda_model_check).
 *
 * Ownership: the trainer keeps the host struct model and struct optim;
 * the struct cuda_train holds only device copies (and the context when it
 * opened it), and cuda_train_close releases them.
 */
#ifndef ALALLO_TRAIN_CUDA_TRAIN_H
#define ALALLO_TRAIN_CUDA_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "train/cuda/cuda_ctx.h"
#include "train/cuda/cuda_graph.h"
#include "train/model/model.h"
#include "train/model/optim.h"

struct cuda_train;

/* Opens GPU `device` (a CUDA ordinal after CUDA_VISIBLE_DEVICES; a context
 * already open, train_device_prepare's, is used as it is and left open by
 * close) and copies model m and optimizer o up, with activations for
 * batches of B x T (rows x context: a DPO step's rows are two per pair).
 * NULL with a reason in err; *user OUT is 1 when the reason is the attempt's (nothing the GPU
 * can run), 0 when it is the machine's (no GPU, out of memory). */
struct cuda_train *cuda_train_open(int device, const struct model *m, const struct optim *o,
                                   int B, int T, char *err, size_t errcap,
                                   int *user /* OUT */);
void cuda_train_close(struct cuda_train *t); /* NULL is fine */
/* The GPU in use (for the log and the started event). */
const struct cuda_device_info *cuda_train_device(const struct cuda_train *t);
/* Which attention kernels the passes run: "bf16" (tensor cores) or "fp32"
 * (the reference), from ALALLO_CUDA_ATTENTION (bf16 when unset; any other
 * value is refused at open) and the model's head dimension (cuda_ops.h). */
const char *cuda_train_attention(const struct cuda_train *t);
/* How LoRA's products run: "folded" into the base products (a 16-bit
 * base, the default), "each" (apart: ALALLO_CUDA_LORA=each, or an NF4
 * base), or NULL without adapters (cuda_model.h). */
const char *cuda_train_lora(const struct cuda_train *t);
/* How the passes' layers ran: through CUDA graphs where they repeat
 * (cuda_graph.h; ALALLO_CUDA_GRAPHS=on, the default) or eagerly (off, or
 * a refused capture: off says why). Zeros when off from the start. */
void cuda_train_graph_stats(const struct cuda_train *t, struct cuda_graph_stats *out /* OUT */);
/* The rows one pass holds: the largest divisor of open's B whose
 * activations fit in GPU memory (and at most ALALLO_CUDA_MAX_ROWS, an
 * operator's cap; a value that is not a whole number from 1 is refused at
 * open). Below B, a step runs as B / micro passes of that many rows in
 * order, each adding its gradients (micro-batches, as the planner's
 * planner_gpu_batch expects); the same bits run after run for the same
 * micro, close to but not the bits of one pass (sums in another order). */
int cuda_train_micro_rows(const struct cuda_train *t);
/* Whether the backward pass recomputes each layer's activations from its
 * kept input (cuda_model.h, cuda_acts_create): ALALLO_CUDA_RECOMPUTE "on"
 * or "off", else, and for "auto", cuda_train_recompute_auto's choice (any
 * other value is refused at open). */
int cuda_train_recompute(const struct cuda_train *t);
/* The default: 1 for LoRA on a 4-bit (NF4) base, the method people pick to
 * fit in less memory, as QLoRA setups turn activation checkpointing on;
 * 0 for 16-bit LoRA and full fine-tuning, which keep every activation and
 * so skip the extra forward. The planner's GPU memory model
 * (sched/planner.c) counts the same. */
int cuda_train_recompute_auto(const struct model *m);
/* Device bytes at most since open (the memory the events report). */
size_t cuda_train_peak_bytes(const struct cuda_train *t);

/* One step's pass, as model_forward_backward_packed (as micro-batches of
 * cuda_train_micro_rows rows when B is more): with backward set the
 * gradients are zeroed first, then dscale * d(sum)/d(param) lands in
 * them. LoRA dropout drop_p (0 none) with masks from drop_seed, as
 * model_acts_dropout. *loss OUT the summed loss, *n_targets, *hits OUT
 * (hits may be NULL). 0, or -1 with a reason in cuda_ctx_error(). */
int cuda_train_pass(struct cuda_train *t, const int32_t *ids, const uint8_t *mask,
                    const int32_t *seg, int B, int T, float dscale, int backward, float drop_p,
                    uint64_t drop_seed, double *loss /* OUT */, size_t *n_targets /* OUT */,
                    size_t *hits /* OUT */);
/* The frozen reference's pass of DPO, as model_token_losses: forward only,
 * tok_loss (host, B*T) OUT each target's loss at the position before it.
 * 0, or -1 with a reason in cuda_ctx_error(). */
int cuda_train_token_losses(struct cuda_train *t, const int32_t *ids, const uint8_t *mask,
                            const int32_t *seg, int B, int T, double *tok_loss /* OUT */,
                            size_t *n_targets /* OUT */);
/* DPO's step pass, as model_forward_backward_weighted (fn turns tok_loss
 * into tok_w, host buffers of B*T), with the gradients zeroed first and
 * LoRA dropout as cuda_train_pass. The whole step in one pass: with
 * micro-batches (B above cuda_train_micro_rows) it fails, saying so. 0, or
 * -1 with a reason in cuda_ctx_error(). */
int cuda_train_pass_weighted(struct cuda_train *t, const int32_t *ids, const uint8_t *mask,
                             const int32_t *seg, int B, int T, model_weights_fn fn, void *ctx,
                             double *tok_loss /* OUT */, float *tok_w /* OUT */, float drop_p,
                             uint64_t drop_seed, size_t *n_targets /* OUT */);
/* The gradients' global norm (optim_grad_norm's meaning). 0 or -1. */
int cuda_train_grad_norm(struct cuda_train *t, double *norm /* OUT */);
/* One AdamW update with gradient gscale * g (gscale: optim_clip_factor)
 * at rate lr, then the copies the products read are refreshed. 0 or -1. */
int cuda_train_adamw(struct cuda_train *t, float gscale, float lr);
/* Device parameters and moments into m->train and o (m, o: the ones open
 * was given). 0 or -1. */
int cuda_train_to_host(const struct cuda_train *t, struct model *m, struct optim *o);
/* The last pass's gradients into m->grad (m: the one open was given), for
 * `alallo train --dump-grads --device cuda` (tests/gpu/test_cuda_torch.c);
 * the trainer itself never reads them on the host. 0 or -1. */
int cuda_train_grads_to_host(const struct cuda_train *t, struct model *m);
/* m->train and o onto the device. 0 or -1. */
int cuda_train_from_host(struct cuda_train *t, const struct model *m, const struct optim *o);

#endif
