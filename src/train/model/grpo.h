/* grpo.h - the loss of group-relative policy optimization (GRPO) as
 * reinforcement fine-tuning trains with it (docs/rft.md, "The algorithm"):
 * advantages normalised within each prompt's group of answers, a clipped
 * policy-gradient objective and an optional KL penalty to the reference,
 * written as weights on the per-token losses (model.h's model_weights_fn),
 * like DPO's (dpo.h). Pure.
 *
 * One answer per row: row b holds a prompt and its answer, mask[b*T + t]
 * set on the answer's tokens (position t-1 predicts t). With L_b the
 * answer's tokens, B the rows, nll the policy's per-token loss, old the
 * policy's when the answer was sampled, ref the reference's:
 *   ratio = exp(old - nll), d = nll - ref
 *   loss  = 1/B sum_b 1/L_b sum_t [ -min(ratio A_b, clip(ratio, 1-eps,
 *           1+eps) A_b) + beta (e^d - d - 1) ]
 * (the KL term is the k3 estimator; 0 when ref is NULL or beta is 0).
 */
#ifndef ALALLO_TRAIN_GRPO_H
#define ALALLO_TRAIN_GRPO_H

#include <stddef.h>
#include <stdint.h>

#define GRPO_CLIP 0.2

/* Advantages of a group's n rewards: (r - mean) / (std + 1e-4), the
 * population standard deviation; all 0 when every reward is the same (a spread below 1e-9). */
void grpo_advantages(int n, const double *reward, double *adv /* OUT */);

struct grpo_batch {
    int B, T;
    const uint8_t *mask;   /* (B, T) */
    const double *adv;     /* (B) */
    const double *old_nll; /* (B*T) or NULL: the policy's own (ratio 1) */
    const double *ref_nll; /* (B*T) or NULL: no KL */
    double beta, eps;
    /* OUT, set by grpo_weights */
    double loss;           /* the loss above */
    double kl;             /* mean KL per answer token */
    double clipped;        /* share of answer tokens whose ratio was clipped */
};

/* A model_weights_fn with ctx a struct grpo_batch: w = d loss / d nll. */
void grpo_weights(void *ctx, const double *tok_loss, float *w /* OUT */);

#endif
