/* cuda_walk.h - a record of the work a piece of host code would queue on
 * the stream, made without queuing it: cuda_graph.h's walk, which decides
 * whether a captured graph still does what the code would do.
 *
 * While the context has a walk (cuda_ctx_walk()), every launcher of the
 * backend notes what it would queue and queues nothing: cuda_launch (the
 * kernel, its grid, block, shared memory and each argument's bytes, below),
 * cuda_gemm.h's products (cuda_gemm_walked: kind, operands, shapes,
 * scalars), cuda_zero and cuda_copy (pointers and sizes). A record equal
 * byte for byte to another means the same launches in the same order with
 * the same arguments, which is what a graph replays (each note starts
 * with what it is, and each item with its length, so that no two runs of
 * different work write the same bytes: a kernel's address fixes how many
 * arguments follow it). An argument with
 * padding whose bytes differ makes two equal launches differ: a graph not
 * replayed (slower), never a wrong one: so a struct a kernel takes by
 * value fills its padding with a field of its own, set to 0 (dbt_shape,
 * attn_grad_out).
 *
 * Ownership: the walk's bytes are its owner's (cuda_graph.c), grown here
 * with realloc; a failed growth sets oom and the record is not used.
 */
#ifndef ALALLO_TRAIN_CUDA_WALK_H
#define ALALLO_TRAIN_CUDA_WALK_H

#include <stdlib.h>
#include <string.h>

struct cuda_walk {
    unsigned char *bytes;
    size_t len, cap;
    int oom; /* a growth failed: the record is incomplete */
};

/* What each note of a record is (its first item), so that two different
 * runs of work can never write the same bytes. */
enum { CUDA_WALK_LAUNCH = 1, CUDA_WALK_PRODUCT, CUDA_WALK_ZERO, CUDA_WALK_COPY };

/* Appends one item: its length (4 bytes), then its n bytes. */
static inline void cuda_walk_note(struct cuda_walk *w, const void *p, size_t n)
{
    unsigned len = (unsigned)n;
    if (w->oom)
        return;
    if (w->len + sizeof len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->len + sizeof len + n)
            cap *= 2;
        unsigned char *b = (unsigned char *)realloc(w->bytes, cap);
        if (!b) {
            w->oom = 1;
            return;
        }
        w->bytes = b;
        w->cap = cap;
    }
    memcpy(w->bytes + w->len, &len, sizeof len);
    memcpy(w->bytes + w->len + sizeof len, p, n);
    w->len += sizeof len + n;
}

/* A note's first item: what it is (CUDA_WALK_...). */
static inline void cuda_walk_begin(struct cuda_walk *w, int what)
{
    cuda_walk_note(w, &what, sizeof what);
}

#ifdef __cplusplus
#include <cuda_runtime.h>

extern "C" {
#include "train/cuda/cuda_ctx.h"
}

/* cuda_launch's half of a walk: true (the launch noted, nothing to queue)
 * while a walk is on, false otherwise. */
template <typename K, typename... A>
static inline bool cuda_launch_walked(K kernel, dim3 grid, dim3 block, size_t smem,
                                      const A &...args)
{
    struct cuda_walk *w = cuda_ctx_walk();
    if (!w)
        return false;
    unsigned shape[6] = {grid.x, grid.y, grid.z, block.x, block.y, block.z};
    cuda_walk_begin(w, CUDA_WALK_LAUNCH);
    cuda_walk_note(w, &kernel, sizeof kernel);
    cuda_walk_note(w, shape, sizeof shape);
    cuda_walk_note(w, &smem, sizeof smem);
    int each[] = {0, (cuda_walk_note(w, &args, sizeof args), 0)...};
    (void)each;
    return true;
}
#endif

#endif
