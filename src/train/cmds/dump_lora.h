/* dump_lora.h - the LoRA part of the trainer's dumps for the PyTorch
 * checks (`alallo train --dump-grads --lora-rank R`, `--dump-grpo`). The
 * entries point into the model: it must outlive their writing. */
#ifndef ALALLO_TRAIN_DUMP_LORA_H
#define ALALLO_TRAIN_DUMP_LORA_H

#include "train/formats/safetensors.h"
#include "train/model/model.h"

/* "lora_scale" (1, *scale OUT holds it), and per adapted projection
 * "lora.<layer>.<proj>.A" (r,in), ".B" (out,r) and their "grad." twins,
 * into ts from index k; returns the next index. ts needs room for
 * 1 + 4 * n_layers * PROJ_COUNT entries from k. */
int dump_lora_adapters(const struct model *m, struct st_tensor *ts, int k, float *scale);

#endif
