/* model.h - a Llama-style decoder: configuration, parameters, and the
 * training forward/backward pass.
 *
 * Layers: token embedding -> L x [RMSNorm, grouped-query causal attention
 * with rotary positions (rotate-half), residual; RMSNorm, SwiGLU MLP,
 * residual] -> RMSNorm -> output head (tied to the embedding or not).
 *
 * Families (docs/models.md) are this one decoder with switches in the
 * config: Llama 3's rotary frequency scaling, Qwen2's q/k/v biases, and
 * Gemma's GeGLU (GELU-tanh), embeddings scaled by sqrt(hidden), norms that
 * scale by (1 + weight) and, for Gemma 2, norms after attention and after
 * the MLP and tanh soft-capping of attention scores and logits; Qwen3's
 * RMSNorm of each head of q and of k before the rotation (q_norm, k_norm,
 * one scale of head_dim per layer, shared by the heads); SmolLM3's layers
 * without rotary positions (no_rope_layers); Gemma 3 (gemma3_text): Gemma 2's
 * norms with Gemma-style q/k norms, exact sliding-window attention on its
 * local layers with their own rotary base, linear rotary scaling on the
 * global ones; Phi-3 (Phi-4-mini): rotary positions on part of each head
 * and longrope's scaled frequencies, its checkpoints' fused qkv_proj and
 * gate_up_proj tensors split into q/k/v and gate/up on load and fused again
 * on the way out (a model_tensor with parts).
 * A Gemma norm is held as its effective scale (1 + the stored weight):
 * loading adds the tensor's `offset`, reading back subtracts it, so the
 * pass, the gradients and llama.cpp all see the plain RMSNorm scale.
 *
 * Storage modes (struct model_opts):
 *  - full: every parameter is an fp32 master weight that trains;
 *  - LoRA: the base is frozen as fp32, bf16 or NF4 (base_kind) and only the
 *    adapters' A and B train (norms and biases stay frozen in fp32);
 *  - inference: LoRA mode with rank 0 (nothing trains).
 * All trainable parameters live in one fp32 block (`train`, matrices first,
 * then vectors, so weight decay applies to [0, n_decay)); their gradients in
 * another of the same size; frozen fp32 values in a third and frozen bf16 in
 * a fourth. NF4 tensors are allocated one per matrix.
 *
 * Ownership: the model owns all its memory; model_free releases it.
 */
#ifndef ALALLO_TRAIN_MODEL_H
#define ALALLO_TRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "train/model/linear.h"
#include "core/rng.h"

struct moe_layer;

#define MODEL_MAX_LAYERS 256
#define MODEL_MAX_HIDDEN 16384
#define MODEL_MAX_VOCAB 1048576
#define MODEL_MAX_ROPE_FACTORS 512 /* rotary dims / 2 at head_dim 1024 */

/* Hugging Face's model_type values alallo reads. */
enum model_family {
    FAM_LLAMA,
    FAM_MISTRAL,
    FAM_QWEN2,
    FAM_GEMMA,
    FAM_GEMMA2,
    FAM_QWEN3_MOE,
    FAM_QWEN3,
    FAM_SMOLLM3,
    FAM_GEMMA3,
    FAM_PHI3,
    FAM_COUNT
};

struct model_config {
    int family;        /* enum model_family */
    int hidden;        /* C */
    int intermediate;  /* I */
    int n_layers;      /* L */
    int n_heads;       /* H */
    int n_kv_heads;    /* KV, divides H */
    int head_dim;      /* hd (even); C / H unless the config says */
    int vocab;         /* V */
    int max_pos;       /* max_position_embeddings */
    float rms_eps;
    float rope_theta;
    int tied;          /* lm_head shares the embedding */
    int qkv_bias;      /* q/k/v projections carry a bias */
    int bos_id, eos_id; /* -1 when absent */
    /* Llama 3 rotary scaling (rope_scaling.rope_type "llama3"); factor 0 = none */
    float rope_factor, rope_low_freq, rope_high_freq;
    int rope_orig_max;
    int gelu;          /* MLP is GeGLU with GELU-tanh (Gemma), not SwiGLU */
    int norm_plus_one; /* stored norm weights w scale by (1 + w) (Gemma) */
    int embed_scale;   /* embeddings times sqrt(hidden) (Gemma) */
    int post_norms;    /* Gemma 2: norms after attention and after the MLP */
    float query_scalar;   /* scores scale by query_scalar^-0.5 (head_dim unless set) */
    float attn_softcap;   /* scores -> cap * tanh(s / cap); 0 = none */
    float final_softcap;  /* logits likewise; 0 = none */
    int sliding_window;   /* as in config.json; 0 = none. Without swa layers (Mistral,
                           * Qwen2) max_pos is capped to it */
    uint8_t swa[MODEL_MAX_LAYERS]; /* Gemma 2/3: 1 = layer l attends to the last
                                    * sliding_window positions only (exact) */
    float rope_local_theta; /* Gemma 3: the rotary base of the swa layers (no scaling
                             * there); 0 = every layer uses rope_theta */
    int rope_linear;      /* rope_scaling "linear": every frequency divided by rope_factor */
    int multimodal;       /* read from a "gemma3" config's text_config: the vision tower
                           * in the weights is not loaded */
    int max_pos_config;   /* max_position_embeddings as written (max_pos may be less) */
    int qk_norm;          /* Qwen3: RMSNorm of each q and k head before the rotation */
    uint8_t no_rope[MODEL_MAX_LAYERS]; /* SmolLM3: 1 = layer l has no rotary positions */
    /* mixture of experts (Qwen3-MoE, train/model/moe.h); n_experts 0 = dense */
    int n_experts;        /* num_experts (E) */
    int n_experts_used;   /* num_experts_per_tok (k) */
    int moe_intermediate; /* moe_intermediate_size: each expert's width */
    int norm_topk_prob;   /* the k chosen weights divided by their sum */
    float router_aux_coef; /* router_aux_loss_coef: the auxiliary loss's weight */
    int sparse_step;      /* decoder_sparse_step */
    uint32_t mlp_only[MODEL_MAX_LAYERS / 32]; /* mlp_only_layers, a bit per layer */
    /* Phi-3 / Phi-4-mini: rotary positions on the first rot_dim dims of each
     * head only (partial_rotary_factor; 0 = all), and "longrope" scaling:
     * frequency i divided by rope_short[i] (the short factors: alallo's
     * context never passes original_max_position_embeddings, rope_orig_max),
     * cos and sin times the attention factor (rope_attn; 0 = from max_pos) */
    float partial_rotary;
    int longrope;
    int n_rope_factors;   /* entries of rope_short and rope_long: rot_dim / 2 */
    float rope_short[MODEL_MAX_ROPE_FACTORS], rope_long[MODEL_MAX_ROPE_FACTORS];
    float rope_attn;      /* rope_scaling.attention_factor as given; 0 = unset */
};

/* Fills longrope's factors of a test config (model init): rot_dim/2 short
 * factors between 1 and 2 and long ones up to 23.5, all different enough
 * that a wrong index shows. */
void model_config_longrope_factors(struct model_config *c);
/* The dimensions of each head that rotate: head_dim * partial_rotary_factor
 * (all of head_dim without one). */
int model_rot_dim(const struct model_config *c);
/* What cos and sin are multiplied by: longrope's attention factor
 * (rope_scaling.attention_factor, else sqrt(1 + ln(s) / ln(orig)) with
 * s = max_position_embeddings / original_max_position_embeddings when s > 1),
 * 1 otherwise. */
float model_rope_attn_factor(const struct model_config *c);

/* "llama", "mistral", ... (Hugging Face model_type); NULL when out of range. */
const char *model_family_name(int family);
/* Looks a family up by model_type; -1 if unknown. */
int model_family_parse(const char *name);
/* Fills `c` with a tiny random-test config of `family` (vocabulary `vocab`):
 * the family's switches as its published configs set them, at the tiny
 * shape (hidden 64, 2 layers). 0, or -1 if unknown. */
int model_config_family_tiny(int family, int vocab, struct model_config *c /* OUT */);
/* Per-frequency divisors of the rotary angles, (rot_dim/2) values: all 1
 * without scaling; Llama 3's smooth ramp between low and high frequency
 * (the factors llama.cpp reads as rope_freqs.weight); longrope's short
 * factors. */
void model_rope_freq_div(const struct model_config *c, float *div /* OUT: hd/2 */);

/* Parses a Hugging Face config.json text: model_type llama (also when
 * absent), mistral, qwen2, gemma, gemma2, gemma3_text, qwen3, qwen3_moe,
 * smollm3 or phi3, or gemma3 (its text_config read as gemma3_text, `multimodal`
 * set). Refuses, naming the key, what the pass does not compute: other
 * model types, rope_scaling other than llama3 (linear for Gemma 3,
 * longrope for Phi-3, with rot_dim/2 long and short factors),
 * activations other than the family's. 0, or -1 with a reason. */
int model_config_parse(const char *json, struct model_config *c /* OUT */, char *err,
                       size_t errcap);
/* Reads and parses `path`. */
int model_config_load(const char *path, struct model_config *c /* OUT */, char *err,
                      size_t errcap);
/* Checks that a config is usable (sizes within limits, heads divide). */
int model_config_check(const struct model_config *c, char *err, size_t errcap);
/* A config.json text for `c` (malloc'd; NULL on allocation failure). */
char *model_config_to_json(const struct model_config *c);
/* A named shape: "tiny" (hidden 64, 2 layers, 4 heads, 2 key/value heads,
 * intermediate 172), "base" (models/alallo-base's: 192, 4 layers, 6 heads, 3
 * key/value heads, 512, positions 256), "small" (256, 6 layers, 4 heads,
 * 768), "124m" (768,
 * 12 layers, 12 heads, 2048, vocabulary 50257) or "1b" (Llama-3.2-1B-class:
 * 2048, 16 layers, 32 heads / 8 key/value heads, 8192, vocabulary 128256,
 * rope_theta 5e5); all tied, rope_theta 1e4 unless said, rms_norm_eps 1e-5.
 * `vocab` sets the vocabulary of tiny, base and small (and must be at most the
 * named one for 124m and 1b, or 0 to take it). 0, or -1 if unknown. */
int model_config_shape(const char *name, int vocab, struct model_config *c /* OUT */);

/* Parameter count of the model itself (embedding counted once when tied). */
size_t model_config_params(const struct model_config *c);
/* The parameters one token goes through: all of them for a dense model;
 * for a mixture of experts the router and the k chosen experts of each
 * sparse layer, not all E (throughput per active parameter). */
size_t model_config_active_params(const struct model_config *c);

enum model_proj { PROJ_Q, PROJ_K, PROJ_V, PROJ_O, PROJ_GATE, PROJ_UP, PROJ_DOWN, PROJ_COUNT };
/* "q_proj", ... ; NULL for out-of-range. */
const char *model_proj_name(enum model_proj p);
/* Looks a projection up by its name (e.g. "up_proj"); -1 if unknown. */
int model_proj_parse(const char *name);
#define MODEL_ALL_PROJ ((1u << PROJ_COUNT) - 1)

struct model_opts {
    int full;              /* 1 = full fine-tuning in fp32 */
    enum wkind base_kind;  /* LoRA mode: storage of the frozen matrices */
    int lora_r;            /* LoRA rank (0 = no adapters) */
    float lora_alpha;
    unsigned lora_targets; /* bit p set = adapter on projection p */
};

struct model_layer {
    float *ln1, *ln2;       /* (C) before attention, before the MLP */
    float *dln1, *dln2;     /* gradients, NULL when frozen */
    float *ln3, *ln4;       /* (C) Gemma 2: after attention, after the MLP; else NULL */
    float *dln3, *dln4;
    float *qn, *kn;         /* (hd) Qwen3: q_norm and k_norm, each head's scale; else NULL */
    float *dqn, *dkn;
    struct linear proj[PROJ_COUNT]; /* a sparse layer's gate/up/down are empty (0 x 0) */
    struct moe_layer *moe;  /* the experts of a sparse layer (moe.h), else NULL */
};

/* One named Hugging Face tensor of the model. A fused tensor (Phi-3's
 * qkv_proj, gate_up_proj) is the rows of n_parts linears one after the
 * other; the model keeps them apart (each its own adapter). */
struct model_tensor {
    char name[96];
    int rows, cols;        /* a vector has rows == 1 and is1d set */
    int is1d;
    struct linear *lin;    /* the weight of this linear (the first part), or NULL */
    struct linear *part[3];
    int n_parts;           /* 1, or 2-3 for a fused tensor; 0 for a vector */
    float *vec;            /* a norm weight or a bias, or NULL */
    float offset;          /* held value = stored value + offset (Gemma norms: 1) */
};

struct model {
    struct model_config cfg;
    struct model_opts opts;
    struct linear embed;          /* (V,C): a row per token; the head when tied */
    struct linear head;           /* (V,C) untied output head */
    float *norm_f, *dnorm_f;      /* (C) */
    struct model_layer *layers;   /* (L) */
    float *train;                 /* trainable fp32 parameters */
    float *grad;                  /* their gradients */
    size_t n_train, n_decay;      /* n_decay: matrices first, [0, n_decay) */
    float *fixed;                 /* frozen fp32 values */
    size_t n_fixed;
    uint16_t *bf;                 /* frozen bf16 values */
    size_t n_bf;
    struct model_tensor *tensors; /* Hugging Face tensors, in file order */
    int n_tensors;
    float *rope_cos, *rope_sin;   /* (max_pos, rot_dim/2) */
    float *rope_cos_local, *rope_sin_local; /* the swa layers' (rope_local_theta), or NULL */
    int rope_len;
};

/* Lays out and allocates a model for `cfg` in mode `opts`. Values start at
 * zero (norm weights at one); fill them with model_set_tensor and
 * model_lora_init. NULL with a reason on failure. */
struct model *model_create(const struct model_config *cfg, const struct model_opts *opts,
                           char *err, size_t errcap);
void model_free(struct model *m); /* NULL is fine */

/* Index of the tensor called `name`, or -1. */
int model_tensor_find(const struct model *m, const char *name);
/* Produces values [start, start+count) of one tensor (row-major) into out.
 * Called with increasing, adjacent ranges. */
typedef void (*model_fill_fn)(void *ctx, size_t start, size_t count, float *out);
/* Fills tensor i from `fn` in chunks (bounded scratch even for a large
 * embedding), converting to the storage kind. 0, or -1 on allocation failure. */
int model_fill_tensor(struct model *m, int i, model_fill_fn fn, void *ctx);
/* Stores rows*cols fp32 values of tensor i in the model's storage kind
 * (converting to bf16 or quantizing to NF4). 0, or -1 on allocation failure. */
int model_set_tensor(struct model *m, int i, const float *values);
/* Reads tensor i back as fp32, LoRA merged into linear weights. */
void model_get_tensor(const struct model *m, int i, float *out);

/* Random init for a fresh model (model init, bench): normal(0, 0.02)
 * matrices, down/o projections scaled by 1/sqrt(2L), norms one, biases 0. */
int model_init_random(struct model *m, uint64_t seed);
/* The same with another standard deviation than 0.02, and norm scales of
 * one plus normal(0, norm_std) (0: exactly one), for tests that need outputs
 * far from uniform (llama.cpp against alallo). */
int model_init_random_std(struct model *m, uint64_t seed, float std, float norm_std);
/* LoRA init: A uniform in +-1/sqrt(in) (Kaiming-uniform as PEFT does), B zero. */
void model_lora_init(struct model *m, uint64_t seed);

/* Rotary tables for positions [0, len); called by model_create for
 * min(max_pos, 4096) and again to grow. 0 or -1. */
int model_rope_ensure(struct model *m, int len);

/* The rotary tables of layer l: the local ones on a Gemma 3 swa layer,
 * else the global ones. */
void model_layer_rope(const struct model *m, int l, const float **cos_t, const float **sin_t);
/* The attention window of layer l: sliding_window on a sliding-window
 * layer (row i attends to rows i - window + 1 .. i), 0 (unbounded) else. */
int model_layer_window(const struct model_config *c, int l);

/* Bytes held by the model's parameters (for memory reports). */
size_t model_param_bytes(const struct model *m);

/* Readies the gradient block for a step: as zeroing it all, but each
 * full-fine-tuning weight matrix is only marked fresh (dw_fresh), so its
 * first product writes it instead of adding to zeros: a pass over the
 * block saved, and a read of each matrix gradient. The pass
 * (model_forward_backward*) settles what it did not write
 * (model_grad_settle), so after it the block holds exactly what zeroing
 * first would give, bit for bit. */
void model_grad_begin(struct model *m);
/* Zeroes every matrix gradient still marked fresh. */
void model_grad_settle(struct model *m);

/* Saved activations and scratch for batches up to B x T. */
struct model_acts;

struct model_acts *model_acts_create(const struct model *m, int B, int T);
void model_acts_free(struct model_acts *a); /* NULL is fine */
size_t model_acts_bytes(const struct model_acts *a);

/* LoRA dropout (PEFT's lora_dropout) for every pass through `a` from now
 * on, forward and backward alike, until it is set again (p = 0: none):
 * each adapter reads its input with a fraction p of its elements zeroed
 * and the rest scaled by 1/(1-p) (train/linear.h), a mask drawn from
 * `seed`, the layer, the projection and the element alone, so the same
 * seed gives the same masks (the trainer passes one per step: a resumed
 * run drops what an unbroken one does). Nothing drops in full fine-tuning
 * (no adapters). Allocates N x the widest adapter input floats the first
 * time p > 0. Returns 0, or -1 for p outside [0, 1) or out of memory (no
 * dropout then). */
int model_acts_dropout(struct model_acts *a, const struct model *m, float p, uint64_t seed);

/* Seconds spent per phase since the acts were made (bench and logs). */
struct model_timing {
    double forward, head, backward;
};
void model_acts_timing(const struct model_acts *a, struct model_timing *t /* OUT */);

/* One batch: ids and mask (B,T) row-major. Position t predicts ids[t+1]
 * where mask[t+1] is set. Returns the summed loss over targets (natural log)
 * and sets *n_targets. With backward set, adds dscale * d(sum)/d(param) into
 * the gradient block (callers pass dscale = 1/n_targets for the mean and
 * zero the gradients first). */
double model_forward_backward(struct model *m, struct model_acts *a, const int32_t *ids,
                              const uint8_t *mask, int B, int T, float dscale, int backward,
                              size_t *n_targets /* OUT */);

/* The same for packed rows: seg (B,T) holds, for each position, the index
 * within its row of the first position of its example (NULL: one example
 * per row). Attention stays inside each example and rotary positions
 * restart at each example's start, so a packed row computes what its
 * examples would alone. The caller clears mask at each example's first
 * position (nothing before it in the example predicts it). */
double model_forward_backward_packed(struct model *m, struct model_acts *a, const int32_t *ids,
                                     const uint8_t *mask, const int32_t *seg, int B, int T,
                                     float dscale, int backward, size_t *n_targets /* OUT */);

/* Each target's loss: tok_loss (B,T) OUT gets -log p(ids[i+1]) at every
 * position i whose next token is a target, 0 elsewhere. Forward only;
 * returns their sum. */
double model_token_losses(struct model *m, struct model_acts *a, const int32_t *ids,
                          const uint8_t *mask, const int32_t *seg, int B, int T,
                          double *tok_loss /* OUT (B*T) */, size_t *n_targets /* OUT */);

/* Given every target's loss (tok_loss, as model_token_losses writes it),
 * writes w (B*T): d(the caller's loss)/d(tok_loss[i]). */
typedef void (*model_weights_fn)(void *ctx, const double *tok_loss, float *w);

/* A loss that is a function of the per-token losses (DPO's, of each
 * sequence's log-probability): the forward pass and the head give
 * tok_loss, fn turns it into weights w, and the backward pass adds
 * sum_i w[i] d(tok_loss[i])/d(param) into the gradients. tok_loss and
 * tok_w are the caller's (B*T) buffers. Returns the sum of tok_loss. */
double model_forward_backward_weighted(struct model *m, struct model_acts *a,
                                       const int32_t *ids, const uint8_t *mask,
                                       const int32_t *seg, int B, int T, model_weights_fn fn,
                                       void *ctx, double *tok_loss /* OUT */,
                                       float *tok_w /* OUT */, size_t *n_targets /* OUT */);

/* Forward pass only, writing the logits of every position (B*T, V). */
void model_forward_logits(struct model *m, struct model_acts *a, const int32_t *ids, int B,
                          int T, float *logits);

/* The family's parts shared by the training pass and generation. */
/* out (n,C) = embedding rows of ids, times sqrt(C) where the family says. */
void model_embed(const struct model *m, const int32_t *ids, int n, float *out);
/* MLP activation h = act(g) * u over n values (SwiGLU or GeGLU). */
void model_mlp_act(const struct model *m, float *h, const float *g, const float *u, size_t n);
/* The scale of attention scores. */
float model_attn_scale(const struct model_config *c);

/* The mixture of experts' auxiliary loss term of the last pass,
 * router_aux_coef * aux (moe.h), as the objective adds it to the mean
 * loss of its targets (the returned sum over n_targets); 0 for a dense
 * model. The passes with dscale add its gradient with weight
 * dscale * n_targets (1 for one batch, its share under accumulation); the
 * weighted pass (DPO) leaves it out. */
double model_last_aux(const struct model_acts *a);

/* Of the last pass's targets, how many the model predicted (its arg-max
 * is the target): the token accuracy is this over n_targets. */
size_t model_last_hits(const struct model_acts *a);

/* Number of positions with a target in a batch (mask[t+1] set for t < T-1). */
size_t model_count_targets(const uint8_t *mask, int B, int T);

#endif
