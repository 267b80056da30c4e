/* dpo.c - DPO's loss and its gradient (dpo.h). */
#include "train/model/dpo.h"

#include <math.h>
#include <string.h>

/* log(1 + e^x) without overflow. */
static double softplus(double x)
{
    return (x > 0 ? x : 0) + log1p(exp(-fabs(x)));
}

/* 1 / (1 + e^-x) without overflow. */
static double sigmoid(double x)
{
    if (x >= 0)
        return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

double dpo_loss(int n, const double *pc, const double *pr, const double *rc, const double *rr,
                double beta, double *dpc, double *dpr, struct dpo_stats *st)
{
    double loss = 0, margin = 0, acc = 0, ch = 0, rj = 0;
    for (int i = 0; i < n; i++) {
        double c = beta * (pc[i] - rc[i]), r = beta * (pr[i] - rr[i]);
        double z = c - r;
        loss += softplus(-z);
        /* d softplus(-z)/dz = -sigmoid(-z); dz/dpc = beta, dz/dpr = -beta */
        double g = -sigmoid(-z) / n;
        dpc[i] = beta * g;
        dpr[i] = -beta * g;
        margin += z;
        acc += z > 0;
        ch += c;
        rj += r;
    }
    st->loss = loss / n;
    st->reward_margin = margin / n;
    st->reward_accuracy = acc / n;
    st->chosen_reward = ch / n;
    st->rejected_reward = rj / n;
    return st->loss;
}

void dpo_example_logps(const struct dpo_batch *b, const double *tok_loss, double *out)
{
    for (int i = 0; i < b->n_ex; i++) {
        const double *l = tok_loss + (size_t)b->row[i] * b->T + b->off[i];
        double sum = 0;
        for (size_t t = 0; t < b->len[i]; t++)
            sum += l[t];
        out[i] = -sum;
    }
}

/* The mean log-probability per target token of the chosen and rejected
 * answers, the policy's (pc, pr) and the reference's (rc, rr), into st. */
static void per_token_logps(const struct dpo_batch *b, const double *pc, const double *pr,
                            const double *rc, const double *rr, struct dpo_stats *st)
{
    double tok[2] = {0, 0}, pol[2] = {0, 0}, ref[2] = {0, 0};
    for (int i = 0; i < b->n_ex; i++) {
        const unsigned char *m = b->mask + (size_t)b->row[i] * b->T + b->off[i];
        size_t n = 0;
        for (size_t t = 0; t < b->len[i]; t++)
            n += m[t] != 0;
        int k = i % 2; /* 0: chosen, 1: rejected */
        tok[k] += (double)n;
        pol[k] += k ? pr[i / 2] : pc[i / 2];
        ref[k] += k ? rr[i / 2] : rc[i / 2];
    }
    st->chosen_logp = tok[0] > 0 ? pol[0] / tok[0] : 0;
    st->rejected_logp = tok[1] > 0 ? pol[1] / tok[1] : 0;
    st->chosen_ref_logp = tok[0] > 0 ? ref[0] / tok[0] : 0;
    st->rejected_ref_logp = tok[1] > 0 ? ref[1] / tok[1] : 0;
}

void dpo_batch_weights(void *ctx, const double *tok_loss, float *w)
{
    struct dpo_batch *b = ctx;
    int n = b->n_ex / 2;
    memset(&b->st, 0, sizeof b->st);
    if (n < 1 || b->n_ex > DPO_MAX_EXAMPLES)
        return; /* callers lay out 1..DPO_MAX_EXAMPLES / 2 pairs */
    double lp[DPO_MAX_EXAMPLES], pc[DPO_MAX_EXAMPLES / 2], pr[DPO_MAX_EXAMPLES / 2];
    double rc[DPO_MAX_EXAMPLES / 2], rr[DPO_MAX_EXAMPLES / 2];
    double dpc[DPO_MAX_EXAMPLES / 2], dpr[DPO_MAX_EXAMPLES / 2];
    dpo_example_logps(b, tok_loss, lp);
    for (int i = 0; i < n; i++) {
        pc[i] = lp[2 * i];
        pr[i] = lp[2 * i + 1];
        rc[i] = b->ref[2 * i];
        rr[i] = b->ref[2 * i + 1];
    }
    dpo_loss(n, pc, pr, rc, rr, b->beta, dpc, dpr, &b->st);
    if (b->mask)
        per_token_logps(b, pc, pr, rc, rr, &b->st);
    for (int i = 0; i < b->n_ex; i++) {
        /* d loss / d tok_loss = -(d loss / d logp); only target positions
         * are read, and those lie inside the example */
        float g = (float)-(i % 2 ? dpr[i / 2] : dpc[i / 2]);
        float *wr = w + (size_t)b->row[i] * b->T + b->off[i];
        for (size_t t = 0; t < b->len[i]; t++)
            wr[t] = g;
    }
}

void dpo_watch_add(struct dpo_watch *w, const struct dpo_stats *st)
{
    w->sum_c += st->chosen_logp;
    w->sum_r += st->rejected_logp;
    w->sum_rc += st->chosen_ref_logp;
    w->sum_rr += st->rejected_ref_logp;
    w->n++;
}

int dpo_watch_collapsed(struct dpo_watch *w, double *drop_c, double *drop_r)
{
    int n = w->n;
    double dc = n ? (w->sum_rc - w->sum_c) / n : 0, dr = n ? (w->sum_rr - w->sum_r) / n : 0;
    int warned = w->warned;
    *w = (struct dpo_watch){.warned = warned};
    if (warned || n == 0 || !(dc > DPO_COLLAPSE_DROP && dr > DPO_COLLAPSE_DROP))
        return 0;
    w->warned = 1;
    *drop_c = dc;
    *drop_r = dr;
    return 1;
}
