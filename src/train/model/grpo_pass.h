/* grpo_pass.h - the passes of one GRPO step on the model, as reinforcement
 * fine-tuning's loop (train/run/rft_run.c) takes them and as `alallo train
 * --dump-grpo` dumps them for the PyTorch check (tests/torch/
 * grpo_reference.py): the reference's per-token losses from the base with
 * the adapters off, and the policy's gradient of grpo.h's loss. The
 * caller owns the model, its activations and every buffer; these own
 * nothing. */
#ifndef ALALLO_TRAIN_GRPO_PASS_H
#define ALALLO_TRAIN_GRPO_PASS_H

#include "train/model/grpo.h"
#include "train/model/model.h"

/* The base model's per-token losses (model_token_losses' layout) for rows
 * ids/mask (B,T): the policy's pass with every LoRA adapter scaled to
 * zero, then the scales put back, so no second copy of the weights is
 * held. 0, or -1 out of memory. */
int grpo_base_token_losses(struct model *m, struct model_acts *a, const int32_t *ids,
                           const uint8_t *mask, int B, int T, double *ref /* OUT (B*T) */);

/* The gradient of gb's loss (gb->B, gb->T, gb->mask over the same rows as
 * ids) into m->grad, started afresh (model_grad_begin); nll and w are
 * (B*T) scratch, nll OUT the policy's per-token losses. Sets gb's loss,
 * kl and clipped (grpo_weights). */
void grpo_gradients(struct model *m, struct model_acts *a, const int32_t *ids,
                    struct grpo_batch *gb, double *nll /* OUT */, float *w);

#endif
