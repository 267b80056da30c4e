/* train_device.c - the attempt's device: the checks, and the GPU's entry
 * (train_device.h). */
#include "train/run/train_device.h"

#include <stdio.h>
#include <stdlib.h>

#include "train/run/train_events.h"
#include "train/run/trainer.h"
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
#ifdef ALALLO_HAVE_CUDA
    return trainer_run_gpu(c); /* uses the context train_device_prepare opened */
#else
    (void)c;
    tev_error(0, "device \"cuda\": this alallo was built without CUDA");
    return TRAIN_USER;
#endif
}

void train_device_release(void)
{
#ifdef ALALLO_HAVE_CUDA
    cuda_ctx_close();
#endif
}
