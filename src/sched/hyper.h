/* hyper.h - the hyper-parameters a job gets when its request says "auto"
 * or leaves one out, and whether a finished job's loss went down enough
 * to say it learned (docs/api.md, "Hyper-parameters"). Pure functions of
 * the data set's size and the model; no I/O.
 *
 * The rule aims a small data set at about HYPER_TARGET_STEPS optimizer
 * steps: a model that sees too few steps, or steps too small, keeps the
 * base model's loss and learns nothing (40 pairs of the sample task with
 * alallo's former fixed defaults, 3 epochs of batch 8 at 2e-4, ended at a
 * loss near 4 and completed none of its training prompts). */
#ifndef ALALLO_SCHED_HYPER_H
#define ALALLO_SCHED_HYPER_H

#include <stdbool.h>
#include <stdint.h>

#define HYPER_TARGET_EXAMPLES 2000 /* examples seen in all, when the set allows */
#define HYPER_MAX_EPOCHS 25
#define HYPER_MAX_BATCH 8
#define HYPER_SMALL_MODEL_PARAMS 100000000 /* below: the higher learning rate */

/* What the request asked for: a value, or 0 for "auto" (or left out). */
struct hyper_params {
    int n_epochs;
    int batch_size;
    double lr_multiplier;
};

/* Fills the fields of *h that are 0 from the data set's size (`examples`,
 * at least 1 counted) and the model's parameter count (`model_params`, 0
 * when unknown: treated as small). Fields already set are kept.
 *
 *   batch_size     examples / 10, between 1 and HYPER_MAX_BATCH: at least
 *                  about ten steps an epoch;
 *   n_epochs       ceil(HYPER_TARGET_EXAMPLES / examples), between 1 and
 *                  HYPER_MAX_EPOCHS: many passes over a tiny set, one over
 *                  a large one;
 *   lr_multiplier  10 for a model under HYPER_SMALL_MODEL_PARAMS, else 1
 *                  (the base rates, 2e-4 for LoRA and 2e-5 for full
 *                  fine-tuning, suit models of a billion parameters; a
 *                  small model's low-rank update needs larger steps). */
void hyper_auto(long examples, int64_t model_params, struct hyper_params *h /* IN/OUT */);

/* DPO's "auto" (docs/api.md, 'Hyper-parameters chosen by "auto"'). DPO
 * moves a model that already writes both answers from one toward the
 * other; how far it moves goes with the learning rate times the steps, and
 * past a point it lowers both answers until the model writes neither.
 * Measured on the built-in model (bench/train/dpo_defaults.mjs, 30 pairs
 * after a supervised run that answers the other way 2 to 1): the
 * supervised rule's 250 steps at 10x left every answer a repeated
 * fragment, 0 of 10 preferred; 30 steps at 1x moved none; 50 steps at 1x
 * and 100 at 0.5x moved all 10; 100 at 1x moved 7 to 9, the rest drifting
 * to another question's words. */
#define HYPER_DPO_TARGET_STEPS 100 /* optimizer steps in all, when the set allows */
#define HYPER_DPO_MAX_EPOCHS 10

/* As hyper_auto, for a DPO job of `pairs` preference pairs:
 *
 *   batch_size     pairs / 10, between 1 and HYPER_MAX_BATCH, as for
 *                  supervised training;
 *   n_epochs       enough for HYPER_DPO_TARGET_STEPS steps of that batch
 *                  (given or chosen), between 1 and HYPER_DPO_MAX_EPOCHS;
 *   lr_multiplier  a twentieth of supervised training's: 0.5 for a model
 *                  under HYPER_SMALL_MODEL_PARAMS, else 0.05 (1e-5 for LoRA
 *                  and 1e-6 for full fine-tuning, where DPO's usual rates
 *                  lie). */
void hyper_auto_dpo(long pairs, int64_t model_params, struct hyper_params *h /* IN/OUT */);

/* Reinforcement fine-tuning's "auto" (docs/rft.md). Each step samples a
 * group of answers to batch_size prompts, so a step holds far more work
 * than a supervised one and a run needs fewer of them. Measured on the
 * built-in model (tests/integration/rft_learns.test.mjs: 8 prompts, 4 a
 * step, 4 answers each, a string_check grader): at 2e-3 the validation
 * reward went from 0.31 to 0.81 in 5 steps and 1.0 in 10. */
#define HYPER_RFT_TARGET_STEPS 20 /* optimizer steps in all, when the set allows */

/* As hyper_auto, for a reinforcement job of `prompts` prompts:
 *
 *   batch_size     prompts / 2, between 1 and HYPER_MAX_BATCH;
 *   n_epochs       enough for HYPER_RFT_TARGET_STEPS steps of that batch,
 *                  between 1 and HYPER_MAX_EPOCHS;
 *   lr_multiplier  10 for a model under HYPER_SMALL_MODEL_PARAMS (2e-3 for
 *                  LoRA, the rate measured), else 0.25 (5e-5 for LoRA, 5e-6 for
 *                  full fine-tuning, where GRPO's usual rates lie). */
void hyper_auto_rft(long prompts, int64_t model_params, struct hyper_params *h /* IN/OUT */);

/* Whether a job's training loss went down meaningfully: the last reported
 * loss is at most HYPER_LEARNED_RATIO times the first. A job that trained
 * and did not is told so (docs/lifecycle.md). False when either loss is
 * not a positive finite number (nothing to compare). */
#define HYPER_LEARNED_RATIO 0.9
bool hyper_loss_went_down(double first_loss, double last_loss);

/* Whether it can be judged: both losses positive and finite. */
bool hyper_loss_known(double first_loss, double last_loss);

#endif
