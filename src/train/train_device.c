/* train_device.c - the attempt's device: the checks, and the GPU's entry
 * (train_device.h). */
#include "train/train_device.h"

#include <stdio.h>
#include <stdlib.h>

#include "train/train_events.h"
#include "train/trainer.h"
#ifdef ALALLO_HAVE_CUDA
#include "train/cuda/cuda_ctx.h"
#endif

const char *train_device_name(int device)
{
    return device == TRAIN_DEVICE_CPU ? "cpu" : device == TRAIN_DEVICE_CUDA ? "cuda" : NULL;
}

int train_device_cuda_built(void)
{
#ifdef ALALLO_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

int train_device_prepare(const struct train_config *c, int *on_gpu, char *err, size_t errcap)
{
    *on_gpu = 0;
    if (c->device != TRAIN_DEVICE_CUDA)
        return 0;
#ifndef ALALLO_HAVE_CUDA
    snprintf(err, errcap,
             "this alallo was built without CUDA: the attempt asks for device \"cuda\", which "
             "needs an alallo built where nvcc is found (docs/trainer.md, \"GPU\"); run it on "
             "such a worker or ask for device \"cpu\"");
    return TRAIN_USER;
#else
    if (cuda_device_count() == 0) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        snprintf(err, errcap,
                 "device \"cuda\": no GPU is visible to the trainer (CUDA_VISIBLE_DEVICES=%s; "
                 "check the worker's GPUs, its driver and CUDA_VISIBLE_DEVICES)",
                 vis ? vis : "unset");
        return TRAIN_INTERNAL;
    }
    if (cuda_ctx_open(0) < 0) {
        snprintf(err, errcap, "device \"cuda\": %s", cuda_ctx_error());
        return TRAIN_INTERNAL;
    }
    *on_gpu = 1;
    return 0;
#endif
}

int train_device_run_gpu(const struct train_config *c)
{
    (void)c;
    /* LEAD: wire the GPU trainer here once src/train/cuda/cuda_train.h is
     * merged: include it under ALALLO_HAVE_CUDA above and
     *     return cuda_train_run(c);
     * (its own events and exit status, as trainer_run's). Until then a
     * "cuda" attempt that reached a GPU fails on alallo's side. */
    tev_error(0, "device \"cuda\": this alallo opens the GPU but has no GPU trainer yet "
                 "(issue 15)");
    return TRAIN_INTERNAL;
}

void train_device_release(void)
{
#ifdef ALALLO_HAVE_CUDA
    cuda_ctx_close();
#endif
}
