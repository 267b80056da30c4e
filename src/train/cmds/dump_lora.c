/* dump_lora.c - the adapters of a LoRA model and their gradients as
 * dump entries (dump_lora.h). */
#include "train/cmds/dump_lora.h"

#include <stdio.h>

int dump_lora_adapters(const struct model *m, struct st_tensor *ts, int k, float *scale)
{
    *scale = m->layers[0].proj[0].scale;
    ts[k++] = (struct st_tensor){.name = "lora_scale", .dtype = ST_F32, .ndim = 1, .shape = {1},
                                 .data = scale, .nbytes = 4};
    for (int l = 0; l < m->cfg.n_layers; l++) {
        for (int p = 0; p < PROJ_COUNT; p++) {
            const struct linear *ln = &m->layers[l].proj[p];
            if (ln->r == 0)
                continue; /* a sparse layer's MLP (its experts are frozen) */
            const float *vals[4] = {ln->la, ln->lb, m->grad + (ln->la - m->train),
                                    m->grad + (ln->lb - m->train)};
            for (int j = 0; j < 4; j++) {
                struct st_tensor *t = &ts[k++];
                snprintf(t->name, sizeof t->name, "%slora.%d.%s.%c", j >= 2 ? "grad." : "", l,
                         model_proj_name(p), j % 2 ? 'B' : 'A');
                t->dtype = ST_F32;
                t->ndim = 2;
                t->shape[0] = j % 2 ? ln->out : ln->r;
                t->shape[1] = j % 2 ? ln->r : ln->in;
                t->data = vals[j];
                t->nbytes = (size_t)t->shape[0] * t->shape[1] * 4;
            }
        }
    }
    return k;
}

