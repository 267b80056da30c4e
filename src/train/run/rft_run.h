/* rft_run.h - reinforcement fine-tuning's training loop (docs/rft.md,
 * "The algorithm"): each step takes batch_size prompts, samples rft_group
 * answers to each from the current policy through the generation path
 * (generate.h, the KV cache), grades them (core/grader.h), normalises the
 * rewards within each prompt's group and takes one step of GRPO's clipped
 * objective (train/model/grpo.h), with the KL penalty to the reference
 * (the base: LoRA switched off, no second copy of the weights) when
 * rft_kl > 0. Every rft_eval_interval steps the validation prompts are
 * answered greedily and graded. Events as the other methods' (step,
 * with train_reward_mean and valid_reward_mean among the metrics; log
 * lines; samples; done), the final model as trainer_save_output writes it.
 */
#ifndef ALALLO_TRAIN_RFT_RUN_H
#define ALALLO_TRAIN_RFT_RUN_H

#include "train/run/train_config.h"

/* Runs c (c->rft set) on the CPU. TRAIN_OK, TRAIN_USER or TRAIN_INTERNAL
 * (trainer.h), the error sent as an event. */
int rft_run(const struct train_config *c);

#endif
