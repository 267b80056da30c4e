/* hyper.c - the "auto" hyper-parameters and the did-it-learn test
 * (hyper.h, docs/api.md). */
#include "sched/hyper.h"

#include <math.h>

static long clamp_long(long x, long lo, long hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}

void hyper_auto(long examples, int64_t model_params, struct hyper_params *h)
{
    long n = examples > 0 ? examples : 1;
    if (h->batch_size <= 0)
        h->batch_size = (int)clamp_long(n / 10, 1, HYPER_MAX_BATCH);
    if (h->n_epochs <= 0)
        h->n_epochs =
            (int)clamp_long((HYPER_TARGET_EXAMPLES + n - 1) / n, 1, HYPER_MAX_EPOCHS);
    if (!(h->lr_multiplier > 0))
        h->lr_multiplier = model_params < HYPER_SMALL_MODEL_PARAMS ? 10.0 : 1.0;
}

/* A rule that aims at a number of steps: what is not given of *h from n
 * units (pairs, prompts), a batch of n / per_batch, enough epochs for
 * `steps` steps (at most max_epochs), and the rate small or large by the
 * model's size. */
struct steps_rule {
    long per_batch, steps, max_epochs;
    double lr_small, lr_large;
};

static void auto_by_steps(long units, int64_t model_params, const struct steps_rule *r,
                          struct hyper_params *h)
{
    long n = units > 0 ? units : 1;
    if (!(h->lr_multiplier > 0))
        h->lr_multiplier = model_params < HYPER_SMALL_MODEL_PARAMS ? r->lr_small : r->lr_large;
    if (h->batch_size <= 0)
        h->batch_size = (int)clamp_long(n / r->per_batch, 1, HYPER_MAX_BATCH);
    if (h->n_epochs <= 0) {
        long per_epoch = (n + h->batch_size - 1) / h->batch_size;
        h->n_epochs = (int)clamp_long((r->steps + per_epoch - 1) / per_epoch, 1, r->max_epochs);
    }
}

void hyper_auto_dpo(long pairs, int64_t model_params, struct hyper_params *h)
{
    static const struct steps_rule dpo = {10, HYPER_DPO_TARGET_STEPS, HYPER_DPO_MAX_EPOCHS, 0.5,
                                          0.05};
    auto_by_steps(pairs, model_params, &dpo, h);
}

void hyper_auto_rft(long prompts, int64_t model_params, struct hyper_params *h)
{
    static const struct steps_rule rft = {2, HYPER_RFT_TARGET_STEPS, HYPER_MAX_EPOCHS, 10.0,
                                          0.25};
    auto_by_steps(prompts, model_params, &rft, h);
}

bool hyper_loss_known(double first_loss, double last_loss)
{
    return isfinite(first_loss) && isfinite(last_loss) && first_loss > 0 && last_loss > 0;
}

bool hyper_loss_went_down(double first_loss, double last_loss)
{
    return hyper_loss_known(first_loss, last_loss) &&
           last_loss <= HYPER_LEARNED_RATIO * first_loss;
}
