/* gguf_moe.c - a mixture of experts as llama.cpp's qwen3moe (contract in
 * gguf_moe.h). */
#include "train/formats/gguf_moe.h"

#include <stdint.h>
#include <stdio.h>

#include "core/text.h"
#include "train/formats/gguf.h"
#include "train/model/model.h"
#include "train/model/moe.h"

int gguf_moe_refusal(const struct model_config *c, char *err, size_t errcap)
{
    int dense = -1;
    for (int l = 0; l < c->n_layers && dense < 0; l++)
        if (!moe_layer_sparse(c, l))
            dense = l;
    if (dense >= 0)
        text_error(err, errcap,
                   "llama.cpp's %s makes every layer's MLP the experts; this model's layer %d "
                   "keeps a dense MLP (decoder_sparse_step %d, mlp_only_layers), so its GGUF "
                   "would not compute as it does",
                   GGUF_MOE_ARCH, dense, c->sparse_step);
    else if (!c->norm_topk_prob)
        text_error(err, errcap,
                   "llama.cpp's %s divides the chosen experts' weights by their sum; this "
                   "model's norm_topk_prob is false, so its GGUF would not compute as it does",
                   GGUF_MOE_ARCH);
    else if (c->qkv_bias)
        text_error(err, errcap,
                   "llama.cpp's %s reads no q/k/v biases; this model's attention_bias is true, "
                   "so its GGUF would not compute as it does",
                   GGUF_MOE_ARCH);
    else
        return 0;
    return -1;
}

static int set_u32(struct gguf_writer *w, const char *arch, const char *key, int v)
{
    char k[96];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return gguf_set_u32(w, k, (uint32_t)v);
}

int gguf_moe_set_keys(struct gguf_writer *w, const char *arch, const struct model_config *c)
{
    return set_u32(w, arch, "expert_count", c->n_experts) ||
                   set_u32(w, arch, "expert_used_count", c->n_experts_used) ||
                   set_u32(w, arch, "expert_feed_forward_length", c->moe_intermediate)
               ? -1
               : 0;
}

const char *gguf_moe_stack_name(int proj)
{
    static const char *const names[MOE_PROJ_COUNT] = {
        [MOE_GATE] = "ffn_gate_exps", [MOE_UP] = "ffn_up_exps", [MOE_DOWN] = "ffn_down_exps"};
    return proj >= 0 && proj < MOE_PROJ_COUNT ? names[proj] : NULL;
}
