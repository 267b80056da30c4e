/* grpo.c - GRPO's loss and its weights (grpo.h). */
#include "train/model/grpo.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

void grpo_advantages(int n, const double *reward, double *adv)
{
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++)
        mean += reward[i];
    mean /= n > 0 ? n : 1;
    for (int i = 0; i < n; i++)
        var += (reward[i] - mean) * (reward[i] - mean);
    double sd = sqrt(var / (n > 0 ? n : 1));
    for (int i = 0; i < n; i++)
        adv[i] = sd > 1e-9 ? (reward[i] - mean) / (sd + 1e-4) : 0.0;
}

void grpo_weights(void *ctx, const double *nll, float *w)
{
    struct grpo_batch *b = ctx;
    size_t T = (size_t)b->T;
    double loss = 0, kl = 0, clipped = 0, tokens = 0;
    memset(w, 0, (size_t)b->B * T * sizeof *w);
    for (int r = 0; r < b->B; r++) {
        const uint8_t *m = b->mask + (size_t)r * T;
        size_t L = 0;
        for (size_t t = 1; t < T; t++)
            L += m[t] != 0;
        if (L == 0)
            continue;
        double A = b->adv[r], per = 1.0 / ((double)b->B * (double)L);
        for (size_t t = 0; t + 1 < T; t++) {
            if (!m[t + 1])
                continue;
            size_t i = (size_t)r * T + t;
            double old = b->old_nll ? b->old_nll[i] : nll[i];
            double ratio = exp(old - nll[i]);
            double lo = 1 - b->eps, hi = 1 + b->eps;
            double cr = ratio < lo ? lo : ratio > hi ? hi : ratio;
            bool clip = A >= 0 ? ratio > hi : ratio < lo;
            double surrogate = clip ? cr * A : ratio * A;
            double g = clip ? 0 : ratio * A;
            double k = 0;
            if (b->ref_nll && b->beta > 0) {
                double d = nll[i] - b->ref_nll[i];
                k = exp(d) - d - 1;
                g += b->beta * (exp(d) - 1);
            }
            loss += per * (-surrogate + b->beta * k);
            kl += k;
            clipped += clip;
            tokens += 1;
            w[i] = (float)(per * g);
        }
    }
    b->loss = loss;
    b->kl = tokens > 0 ? kl / tokens : 0;
    b->clipped = tokens > 0 ? clipped / tokens : 0;
}
