/* dpo.h - the loss of direct preference optimization (Rafailov et al.,
 * 2023) over a batch of preference pairs, and its gradient with respect to
 * each sequence's log-probability (docs/trainer.md, "DPO").
 *
 * For pair i, with pc/pr the policy's log-probabilities of the preferred
 * and the other answer (summed over the answer's tokens) and rc/rr the
 * frozen reference's:
 *   z_i    = beta * ((pc_i - rc_i) - (pr_i - rr_i))
 *   loss   = mean_i -log sigmoid(z_i)
 *   reward = beta * (p - r) for each answer; margin = chosen - rejected;
 *   accuracy = the share of pairs whose margin is positive.
 * Pure: no allocation, no I/O; sums in double, in pair order.
 */
#ifndef ALALLO_TRAIN_DPO_H
#define ALALLO_TRAIN_DPO_H

struct dpo_stats {
    double loss;            /* the mean loss */
    double reward_margin;   /* mean chosen - rejected reward */
    double reward_accuracy; /* share of pairs with a positive margin, 0..1 */
    double chosen_reward, rejected_reward; /* means */
    /* dpo_batch_weights with a mask: the policy's and the reference's mean
     * log-probability per answer token over the step's preferred (chosen)
     * and other (rejected) answers; 0 without a mask */
    double chosen_logp, rejected_logp, chosen_ref_logp, rejected_ref_logp;
};

/* n pairs (n >= 1). dpc/dpr OUT (n): d(loss)/d(pc_i) and d(loss)/d(pr_i).
 * Returns the mean loss (also in st). */
double dpo_loss(int n, const double *pc, const double *pr, const double *rc, const double *rr,
                double beta, double *dpc /* OUT */, double *dpr /* OUT */,
                struct dpo_stats *st /* OUT */);

#include <stddef.h>

/* One step's pairs laid out in rows (train/pack.h): example i at row
 * row[i], offset off[i], len[i] tokens, rows of T; examples 2k and 2k+1
 * are pair k's preferred and other answer. ref[i] is the reference's
 * log-probability of example i. */
struct dpo_batch {
    int n_ex;          /* 2 * pairs, at most DPO_MAX_EXAMPLES */
    const int *row;
    const size_t *off, *len;
    int T;
    const double *ref;
    const unsigned char *mask; /* the rows' target marks (B*T), or NULL: no
                                  per-token log-probabilities in st */
    double beta;
    struct dpo_stats st; /* OUT: the step's, set by dpo_batch_weights */
};

#define DPO_MAX_EXAMPLES 1024

/* The log-probability of each example from per-token losses (B*T, as
 * model_token_losses writes them): minus their sum over the example's
 * positions. out: n_ex values. */
void dpo_example_logps(const struct dpo_batch *b, const double *tok_loss, double *out /* OUT */);

/* A model_weights_fn (train/model.h) with ctx a struct dpo_batch: the DPO
 * loss of the pairs, and every answer token's weight d(loss)/d(tok_loss). */
void dpo_batch_weights(void *ctx, const double *tok_loss, float *w /* OUT */);

/* ---- the collapse watch ----------------------------------------------
 * DPO can lower both answers' log-probabilities while it widens their gap:
 * the margin grows, the loss falls, and the model forgets how to write
 * either answer (at a learning rate fit for memorising, every answer became
 * a repeated fragment). The watch sums a report window's per-token
 * log-probabilities and calls it a collapse when the policy's mean per
 * answer token has fallen more than DPO_COLLAPSE_DROP nats below the
 * reference's, on the same answers, for the preferred answers and the other
 * ones alike (docs/trainer.md, "DPO"). A healthy run lowers the other
 * answers and keeps the preferred ones near where they were. */
#define DPO_COLLAPSE_DROP 0.5

struct dpo_watch {
    double sum_c, sum_r, sum_rc, sum_rr; /* the window's per-token means, summed */
    int n;                               /* steps in the window */
    int warned;                          /* 1 once a collapse was reported */
};

/* Adds one step's statistics (st from dpo_batch_weights with a mask). */
void dpo_watch_add(struct dpo_watch *w, const struct dpo_stats *st);

/* At a report: whether the window shows a collapse not reported before
 * (then *drop_c and *drop_r, OUT, are how far the preferred and the other
 * answers fell, nats per token). Starts a new window either way. */
int dpo_watch_collapsed(struct dpo_watch *w, double *drop_c /* OUT */, double *drop_r /* OUT */);

#endif
