/* grpo_pass.c - GRPO's passes on the model (grpo_pass.h). */
#include "train/model/grpo_pass.h"

#include <stdlib.h>

int grpo_base_token_losses(struct model *m, struct model_acts *a, const int32_t *ids,
                           const uint8_t *mask, int B, int T, double *ref)
{
    size_t n = (size_t)m->cfg.n_layers * PROJ_COUNT, k = 0;
    float *keep = malloc(n * sizeof *keep);
    if (!keep)
        return -1;
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int p = 0; p < PROJ_COUNT; p++, k++) {
            keep[k] = m->layers[l].proj[p].scale;
            m->layers[l].proj[p].scale = 0;
        }
    size_t nt;
    model_token_losses(m, a, ids, mask, NULL, B, T, ref, &nt);
    k = 0;
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int p = 0; p < PROJ_COUNT; p++, k++)
            m->layers[l].proj[p].scale = keep[k];
    free(keep);
    return 0;
}

void grpo_gradients(struct model *m, struct model_acts *a, const int32_t *ids,
                    struct grpo_batch *gb, double *nll, float *w)
{
    size_t got;
    model_grad_begin(m);
    model_forward_backward_weighted(m, a, ids, gb->mask, NULL, gb->B, gb->T, grpo_weights, gb,
                                    nll, w, &got);
}
