/* adapter.c - a LoRA adapter apart from its base (see adapter.h). */
#include "train/serve/adapter.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "train/formats/modelio.h"

static struct linear *adapter_at(void *ctx, int layer, int proj)
{
    struct decode_adapter *d = ctx;
    return &d->lin[layer * PROJ_COUNT + proj];
}

/* Whether projection p of layer l carries the adapter: a target, and not
 * the empty MLP of a sparse layer (its experts carry none, docs/models.md). */
static bool adapted(const struct model *base, const struct model_opts *o, int l, int p)
{
    return (o->lora_targets & (1u << p)) && base->layers[l].proj[p].out > 0;
}

struct serve_adapter *serve_adapter_load(const struct model *base, const char *dir, char *err,
                                         size_t errcap)
{
    struct model_opts o = {0};
    if (modelio_peft_opts(dir, &o, err, errcap))
        return NULL;
    int L = base->cfg.n_layers;
    struct serve_adapter *a = calloc(1, sizeof *a);
    struct linear *lin = calloc((size_t)L * PROJ_COUNT, sizeof *lin);
    size_t floats = 0;
    for (int l = 0; lin && l < L; l++)
        for (int p = 0; p < PROJ_COUNT; p++)
            if (adapted(base, &o, l, p)) {
                const struct linear *b = &base->layers[l].proj[p];
                floats += (size_t)o.lora_r * (size_t)(b->in + b->out);
            }
    float *mem = lin ? malloc(sizeof *mem * (floats ? floats : 1)) : NULL;
    if (!a || !lin || !mem) {
        free(a);
        free(lin);
        free(mem);
        snprintf(err, errcap, "out of memory loading the adapter");
        return NULL;
    }
    size_t off = 0;
    for (int l = 0; l < L; l++)
        for (int p = 0; p < PROJ_COUNT; p++) {
            if (!adapted(base, &o, l, p))
                continue;
            const struct linear *b = &base->layers[l].proj[p];
            struct linear *x = &lin[l * PROJ_COUNT + p];
            x->in = b->in;
            x->out = b->out;
            x->r = o.lora_r;
            x->scale = o.lora_alpha / (float)o.lora_r;
            x->la = mem + off;
            off += (size_t)o.lora_r * b->in;
            x->lb = mem + off;
            off += (size_t)o.lora_r * b->out;
        }
    a->d = (struct decode_adapter){L, lin};
    a->mem = mem;
    a->bytes = floats * sizeof(float) + sizeof *lin * (size_t)L * PROJ_COUNT;
    if (modelio_peft_fill(dir, L, adapter_at, &a->d, err, errcap)) {
        serve_adapter_free(a);
        return NULL;
    }
    return a;
}

void serve_adapter_free(struct serve_adapter *a)
{
    if (!a)
        return;
    free(a->d.lin);
    free(a->mem);
    free(a);
}
