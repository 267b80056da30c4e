/* adapter.h - a PEFT LoRA adapter loaded apart from its base model, for
 * the inference engine: the base's weights stay one copy, shared by every
 * adapter of it, and each request adds its own adapter's low-rank product
 * (train/run/decode.h). Never merged.
 *
 * Ownership: serve_adapter_load returns an adapter the caller frees with
 * serve_adapter_free; it does not point into the base.
 */
#ifndef ALALLO_SERVE_ADAPTER_H
#define ALALLO_SERVE_ADAPTER_H

#include <stddef.h>

#include "train/run/decode.h"

struct serve_adapter {
    struct decode_adapter d;
    float *mem;
    size_t bytes;
};

/* Loads the PEFT folder `dir` (adapter_config.json and
 * adapter_model.safetensors) for `base`: every targeted projection's A and
 * B, with scale lora_alpha / r as training used. NULL with a reason (not a
 * LoRA folder, a tensor missing or of another shape than the base's). */
struct serve_adapter *serve_adapter_load(const struct model *base, const char *dir, char *err,
                                         size_t errcap);
void serve_adapter_free(struct serve_adapter *a); /* NULL is fine */

#endif
