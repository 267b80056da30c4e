/* modelio.h - model folders in Hugging Face layout, in and out.
 *
 * In: config.json, every *.safetensors file of the folder (sharded models
 * too; F32, BF16 or F16 tensors), converted on the fly to the model's
 * storage kind (fp32, bf16 or NF4) a chunk at a time.
 * Out: a merged folder (config.json, model.safetensors in F32 with any LoRA
 * adapter folded into the weights, and the tokenizer files copied from the
 * base), or a PEFT LoRA adapter folder (adapter_config.json and
 * adapter_model.safetensors with keys
 * base_model.model.model.layers.N.<part>.<proj>.lora_A.weight (r,in) and
 * .lora_B.weight (out,r)).
 * Folders are written under a temporary name and renamed into place, so a
 * reader never sees half a folder.
 *
 * Ownership: modelio_load returns a model the caller frees with model_free.
 */
#ifndef ALALLO_TRAIN_MODELIO_H
#define ALALLO_TRAIN_MODELIO_H

#include <stddef.h>

#include "train/model/model.h"
#include "train/formats/safetensors.h"

#define MODELIO_MAX_PATH 1024

/* Loads the model folder `dir` in mode `opts`. Every tensor the model needs
 * must be present with the right shape; extra tensors are ignored (a tied
 * model's lm_head.weight, rotary caches). NULL with a one-line reason. */
struct model *modelio_load(const char *dir, const struct model_opts *opts, char *err,
                           size_t errcap);

/* Writes a merged model folder at out_dir (replacing one that exists),
 * copying tokenizer files from tokenizer_dir (NULL: none). 0 or -1. */
int modelio_save_merged(const struct model *m, const char *out_dir, const char *tokenizer_dir,
                        char *err, size_t errcap);

/* Writes a merged model folder at out_dir from the published weights of
 * base_dir (the folder m was loaded from) plus m's LoRA adapters, one
 * tensor at a time: whatever m holds its base in (bf16, NF4), the merged
 * model is the base as published plus what training added, and saving
 * holds one tensor in fp32 beside m, never a second copy of the model.
 * Copies base_dir's tokenizer files. 0, or -1 with a reason (a missing or
 * misshapen base tensor is refused before anything is written). */
int modelio_save_merged_onto(const struct model *m, const char *base_dir, const char *out_dir,
                             char *err, size_t errcap);

/* Writes the LoRA adapters as a PEFT folder at out_dir. base_name goes in
 * adapter_config.json's base_model_name_or_path. 0 or -1. */
int modelio_save_peft(const struct model *m, const char *out_dir, const char *base_name,
                      char *err, size_t errcap);

/* Reads r, lora_alpha and target_modules of a PEFT folder into opts (other
 * fields of opts are left as they are). 0 or -1 with a reason. */
int modelio_peft_opts(const char *adapter_dir, struct model_opts *opts, char *err,
                      size_t errcap);

/* Loads the adapter weights of a PEFT folder into m, which was created with
 * the options modelio_peft_opts gave. 0 or -1 with a reason. */
int modelio_load_peft(struct model *m, const char *adapter_dir, char *err, size_t errcap);

/* The same into linears held apart from a model (the inference engine's
 * adapters, train/serve/adapter.h): at(ctx, l, p) is projection p of layer
 * l; those with r > 0 get their A (r,in) and B (out,r) filled (in, out
 * and r set by the caller, la and lb allocated). 0 or -1 with a reason. */
int modelio_peft_fill(const char *adapter_dir, int n_layers,
                      struct linear *(*at)(void *ctx, int layer, int proj), void *ctx, char *err,
                      size_t errcap);

/* Writes `text` to path (fsynced). 0 or -1. */
int modelio_write_text(const char *path, const char *text);

/* Describes the gradient of every tensor of a full fine-tuning model as
 * F32 safetensors entries named "grad.<tensor>" pointing into m->grad
 * (m->n_tensors entries into out), for the PyTorch comparison dumps. */
void modelio_grad_tensors(const struct model *m, struct st_tensor *out /* OUT */);

#endif
