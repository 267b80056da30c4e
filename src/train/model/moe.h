/* moe.h - the mixture-of-experts MLP of a decoder layer (Qwen3-MoE,
 * model_type "qwen3_moe"; docs/models.md): its config keys, its weights,
 * and its training forward and backward.
 *
 * For the layer's normalized input x (N,C):
 *   router logits z = x Wr^T (N,E)        (mlp.gate.weight, no bias)
 *   p = softmax(z) per token; the top k experts by p, their weights w = p
 *   (divided by their sum when norm_topk_prob);
 *   out[n] = sum over the chosen e of w[n,e] down_e(silu(gate_e x) * up_e x).
 * Tokens are grouped by expert (a counting sort, stable in token order), so
 * each expert is one product over all its tokens, never one per token.
 *
 * The load-balancing auxiliary loss, over the sparse layers of one pass
 * taken together (Ls of them) and its N tokens, as Hugging Face computes it:
 *   aux = E * sum_e f_e P_e,  f_e = (times e was chosen) / (Ls N),
 *   P_e = (sum of p[.,e] over layers and tokens) / (Ls N);
 * the objective adds router_aux_coef * aux. f takes no gradient.
 *
 * Which layers are sparse: with num_experts > 0, layer l is, unless it is in
 * mlp_only_layers, when (l + 1) % decoder_sparse_step == 0; the others keep
 * the dense MLP (intermediate_size).
 *
 * Ownership: a struct moe_layer lives in its model (model_create allocates
 * it, model_free releases it; its linears point into the model's blocks).
 * struct moe_acts belongs to the model_acts that made it.
 */
#ifndef ALALLO_TRAIN_MOE_H
#define ALALLO_TRAIN_MOE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "train/model/linear.h"

struct model;
struct model_config;

#define MOE_MAX_EXPERTS 1024

/* The experts' projections, in the order each expert's three are kept. */
enum moe_proj { MOE_GATE = 0, MOE_UP, MOE_DOWN, MOE_PROJ_COUNT };

struct moe_layer {
    struct linear router;   /* (E, C) */
    struct linear *experts; /* (E * MOE_PROJ_COUNT): expert e's at e*3 + enum moe_proj */
};

/* Reads the keys of a qwen3_moe config.json into c (num_experts,
 * num_experts_per_tok, moe_intermediate_size, norm_topk_prob,
 * router_aux_loss_coef, decoder_sparse_step, mlp_only_layers). 0, or -1
 * with a reason naming the key. */
int moe_config_parse(json_t *o, struct model_config *c, char *err, size_t errcap);
/* Checks the expert fields of c (nothing to check when n_experts is 0). */
int moe_config_check(const struct model_config *c, char *err, size_t errcap);
/* Writes the keys moe_config_parse reads into o. */
void moe_config_to_json(const struct model_config *c, json_t *o);
/* Whether layer l's MLP is the experts (0 for a dense model). */
int moe_layer_sparse(const struct model_config *c, int l);
/* Number of sparse layers. */
int moe_sparse_layers(const struct model_config *c);
/* Parameters of one sparse layer's MLP: router and every expert (active 0),
 * or router and the k experts a token goes through (active 1). */
size_t moe_layer_params(const struct model_config *c, int active);

/* Calls fn on the router and every expert linear of every sparse layer. */
void moe_each_linear(struct model *m, void (*fn)(struct linear *, void *), void *ctx);

/* Saved routing and expert activations for passes of up to N tokens, and
 * one layer's scratch. NULL on allocation failure. */
struct moe_acts;
struct moe_acts *moe_acts_create(const struct model *m, size_t N);
void moe_acts_free(struct moe_acts *a); /* NULL is fine */
size_t moe_acts_bytes(const struct moe_acts *a);

/* Starts a pass: clears the auxiliary loss's counts. */
void moe_begin(struct moe_acts *a);
/* Sparse layer l: out (N,C) = the experts' mixture of x (N,C); keeps what
 * the backward pass needs and adds to the auxiliary loss's counts. */
void moe_forward(struct model *m, struct moe_acts *a, int l, float *out, const float *x, int N,
                 struct linear_scratch *ls);
/* The auxiliary loss (unscaled, `aux` above) of the pass so far; 0 when
 * no sparse layer ran. */
double moe_aux_loss(const struct model *m, const struct moe_acts *a);
/* Sparse layer l, after the whole forward pass: given dout (N,C) =
 * d(objective)/d(out), adds d/dx into dx (N,C) and accumulates the router's
 * and the experts' gradients. aux_w is the weight of router_aux_coef * aux
 * in the objective (0: the auxiliary loss takes no part). */
void moe_backward(struct model *m, struct moe_acts *a, int l, float *dx, const float *dout,
                  const float *x, int N, float aux_w, struct linear_scratch *ls);

#endif
