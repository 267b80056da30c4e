/* train_device.h - where an attempt runs: the CPU, or the GPU the attempt
 * asks for with "device": "cuda" (docs/trainer-protocol.md, "Device";
 * docs/trainer.md, "GPU").
 *
 * The field is the only switch: an environment with CUDA_VISIBLE_DEVICES
 * set does not move a "cpu" attempt onto a GPU. For "cuda",
 * CUDA_VISIBLE_DEVICES (the worker's, inherited) says which GPUs the
 * trainer may see, and it takes the first of them.
 *
 * Refusals, each before anything is loaded or written, as a one-line
 * reason and the trainer's exit status:
 *   - an alallo built without CUDA: TRAIN_USER (3), "this alallo was built
 *     without CUDA: ...";
 *   - no GPU visible: TRAIN_INTERNAL (1), a line that names
 *     CUDA_VISIBLE_DEVICES (the worker's set-up, not the user's settings);
 *   - a GPU that will not open (compute capability below 8.0, no memory):
 *     TRAIN_INTERNAL with CUDA's reason.
 */
#ifndef ALALLO_TRAIN_TRAIN_DEVICE_H
#define ALALLO_TRAIN_TRAIN_DEVICE_H

#include <stddef.h>

#include "train/run/train_config.h"

/* "cpu" or "cuda" (NULL for another value). */
const char *train_device_name(int device);

/* 1 when this alallo was built with the CUDA backend (ALALLO_HAVE_CUDA). */
int train_device_cuda_built(void);

/* Prepares c->device. 0 when the attempt may run: *on_gpu 0 for the CPU
 * (nothing was done), 1 when the GPU context is open on the first visible
 * GPU (close it with train_device_release). Otherwise TRAIN_USER or
 * TRAIN_INTERNAL with a one-line reason in err, and nothing is open. */
int train_device_prepare(const struct train_config *c, int *on_gpu /* OUT */, char *err,
                         size_t errcap);

/* Runs the attempt on the open GPU: the trainer's exit status, with the
 * `error` event already sent on failure. */
int train_device_run_gpu(const struct train_config *c);

/* Closes what train_device_prepare opened; safe when nothing is. */
void train_device_release(void);

#endif
