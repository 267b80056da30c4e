/* export.h - taking a model out of alallo: a merged Hugging Face folder, a
 * PEFT LoRA adapter folder, or a GGUF file llama.cpp runs.
 *
 * Every export validates before it writes: a Hugging Face folder must have a
 * config.json alallo understands, a tokenizer.json that loads, and every
 * tensor the config implies with the right shape (read from the
 * safetensors headers only, so checking a large model costs little); a PEFT
 * folder must have a LoRA adapter_config.json and lora_A/lora_B tensors of
 * the stated rank. Outputs appear whole or not at all (temporary name,
 * fsync, rename). An existing output is never overwritten.
 *
 * GGUF: a Llama-architecture file (F16 or BF16 matrices, F32 vectors) with
 * llama.cpp's metadata keys and tensor names, q/k rows permuted the way
 * llama.cpp's converter does for Llama models, and the tokenizer as
 * tokenizer.ggml.* (model "gpt2" for byte-level BPE, "llama" for
 * SentencePiece style); the other families under their own llama.cpp
 * architectures, a mixture of experts as gguf_moe.h says. Details in
 * docs/formats.md.
 */
#ifndef ALALLO_TRAIN_EXPORT_H
#define ALALLO_TRAIN_EXPORT_H

#include <stddef.h>
#include <stdint.h>

/* Storage of the matrices in GGUF; vectors are always F32. F32 exists for
 * checking numerics against a reference, F16 is what people run; the
 * quantized ones are alallo's own encoders of ggml's block formats, with
 * the per-tensor choice of quant.h (quant_pick). */
enum export_dtype { EXPORT_F16 = 0, EXPORT_BF16, EXPORT_F32, EXPORT_Q8_0, EXPORT_Q4_0, EXPORT_Q4_K_M };

/* Checks a Hugging Face model folder as described above. 0, or -1 with a
 * one-line reason. */
int export_check_hf(const char *model_dir, char *err, size_t errcap);

/* Checks a PEFT LoRA adapter folder. 0, or -1 with a one-line reason. */
int export_check_peft(const char *adapter_dir, char *err, size_t errcap);

/* Copies a checked model folder to out_dir (which must not exist). */
int export_hf(const char *model_dir, const char *out_dir, char *err, size_t errcap);

/* Copies a checked adapter folder to out_dir (which must not exist). */
int export_peft(const char *adapter_dir, const char *out_dir, char *err, size_t errcap);

/* Converts a checked Llama model folder to one GGUF file at out_path
 * (which must not exist). */
int export_gguf(const char *model_dir, const char *out_path, enum export_dtype dtype, char *err,
                size_t errcap);

/* The row order llama.cpp's converter gives q/k projections: within each of
 * n_head groups of rows, row (j * half + i) moves to (2 * i + j) for
 * i < half = rows / n_head / 2, j in {0, 1}. Returns the source row of
 * destination row `r`. */
size_t export_permuted_row(size_t r, size_t rows, int n_head);

#endif
