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
 * the same arguments, which is what a graph replays (one item a launch,
 * product, fill or copy, each with its length and what it is, so that no
 * two runs of different work write the same bytes). An argument with
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

/* What an item of a record is, so that two different runs of work can
 * never write the same bytes. */
enum { CUDA_WALK_LAUNCH = 1, CUDA_WALK_PRODUCT, CUDA_WALK_ZERO, CUDA_WALK_COPY };

/* Appends one item: its length (4 bytes), then what it is (4 bytes,
 * CUDA_WALK_...), then the n bytes at p. */
static inline void cuda_walk_note(struct cuda_walk *w, int what, const void *p, size_t n)
{
    unsigned len = (unsigned)(sizeof what + n);
    size_t need = w->len + sizeof len + len;
    if (w->oom)
        return;
    if (need > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < need)
            cap *= 2;
        unsigned char *b = (unsigned char *)realloc(w->bytes, cap);
        if (!b) {
            w->oom = 1;
            return;
        }
        w->bytes = b;
        w->cap = cap;
    }
    unsigned char *at = w->bytes + w->len;
    memcpy(at, &len, sizeof len);
    memcpy(at + sizeof len, &what, sizeof what);
    memcpy(at + sizeof len + sizeof what, p, n);
    w->len = need;
}

#ifdef __cplusplus
#include <cuda_runtime.h>

extern "C" {
#include "train/cuda/cuda_ctx.h"
}

/* cuda_launch's half of a walk: true (the launch noted, nothing to queue)
 * while a walk is on, false otherwise. The item: the kernel, its grid,
 * block and shared memory, each argument's bytes in turn, gathered on the
 * stack first. */
template <typename K, typename... A>
static inline bool cuda_launch_walked(K kernel, dim3 grid, dim3 block, size_t smem,
                                      const A &...args)
{
    struct cuda_walk *w = cuda_ctx_walk();
    if (!w)
        return false;
    unsigned shape[6] = {grid.x, grid.y, grid.z, block.x, block.y, block.z};
    constexpr size_t n = sizeof kernel + sizeof shape + sizeof smem + (sizeof(A) + ... + 0);
    unsigned char item[n], *at = item;
    memcpy(at, &kernel, sizeof kernel);
    memcpy(at += sizeof kernel, shape, sizeof shape);
    memcpy(at += sizeof shape, &smem, sizeof smem);
    at += sizeof smem;
    int each[] = {0, (memcpy(at, &args, sizeof args), at += sizeof args, 0)...};
    (void)each;
    cuda_walk_note(w, CUDA_WALK_LAUNCH, item, n);
    return true;
}
#endif

#endif
