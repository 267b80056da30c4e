/* gguf_moe.h - what a mixture of experts (qwen3_moe, train/model/moe.h) is
 * in GGUF: llama.cpp's `qwen3moe` architecture (docs/models.md, "Mixture
 * of experts").
 *
 * llama.cpp's qwen3moe makes every layer's MLP the experts, always divides
 * the k chosen weights by their sum, and reads no q/k/v biases; a model
 * that differs is refused by name (gguf_moe_refusal) rather than written
 * as a file that would compute otherwise. Its keys (gguf_moe_set_keys):
 * ARCH.expert_count, ARCH.expert_used_count and
 * ARCH.expert_feed_forward_length. Its tensors, written by export.c: per
 * layer the router `blk.N.ffn_gate_inp.weight` (ne {hidden, E}) and the
 * experts stacked, expert e's matrix at index e of the slowest dimension:
 * `blk.N.ffn_gate_exps.weight` and `ffn_up_exps` (ne {hidden, width, E}),
 * `ffn_down_exps` (ne {width, hidden, E}).
 *
 * Pure functions of the config; the writer stays the caller's.
 */
#ifndef ALALLO_TRAIN_GGUF_MOE_H
#define ALALLO_TRAIN_GGUF_MOE_H

#include <stddef.h>

struct gguf_writer;
struct model_config;

/* llama.cpp's architecture of a mixture of experts. */
#define GGUF_MOE_ARCH "qwen3moe"

/* 0 when llama.cpp's qwen3moe computes c as alallo does; else -1 with a
 * one-line reason naming the config key that differs in err. */
int gguf_moe_refusal(const struct model_config *c, char *err, size_t errcap);

/* Adds the experts' keys under `arch`. 0, or -1 on allocation failure. */
int gguf_moe_set_keys(struct gguf_writer *w, const char *arch, const struct model_config *c);

/* GGUF's name of a stacked projection (enum moe_proj): "ffn_gate_exps",
 * "ffn_up_exps", "ffn_down_exps". */
const char *gguf_moe_stack_name(int proj);

#endif
