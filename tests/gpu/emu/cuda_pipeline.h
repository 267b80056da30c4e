/* cuda_pipeline.h (emulator) - CUDA's pipeline primitives (the
 * asynchronous copies from global to shared memory that sm_80+ runs as
 * cp.async) as the backend's kernels use them, for the CPU emulator
 * (cuda_runtime.h beside this says how).
 *
 * A copy is held back, not run: it lands when its thread waits for its
 * batch (__pipeline_wait_prior), as that thread's stores, and never
 * before. So a kernel that reads a copied word before its thread has
 * waited reads the emulator's NaN fill (on a GPU: whatever had landed),
 * and one that reads another thread's copy after the wait but with no
 * barrier between is a race the detector (emu_race.h) reports, since the
 * stores are the waiting thread's. The source is read at the wait, not at
 * the issue: a kernel that changes it in between races on the GPU too.
 */
#ifndef ALALLO_EMU_CUDA_PIPELINE_H
#define ALALLO_EMU_CUDA_PIPELINE_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

namespace emu_pipe {

/* a word the compiler may read through any type (the copies move floats) */
typedef uint32_t __attribute__((may_alias)) word;

struct copy {
    word *dst;
    const word *src;
    size_t words;
    size_t batch; /* the number of commits before it was issued */
};

struct thread_pipe {
    std::vector<copy> held;
    size_t commits = 0;
};

/* Every thread's pipe, by its index in the block (one block at a time:
 * blocks run in turn). A pointer set on first use, not a function's
 * static: that one's guarded initialization is an atomic, which the race
 * detector's build (-fsanitize=thread, emu_race.h) cannot link. */
static std::vector<thread_pipe> *pipes __attribute__((unused));

inline thread_pipe &mine()
{
    if (!pipes)
        pipes = new std::vector<thread_pipe>();
    const dim3 &t = emu::thread_idx(), &d = emu::block_dim();
    size_t id = t.x + (size_t)d.x * (t.y + (size_t)d.y * t.z);
    if (pipes->size() <= id)
        pipes->resize(id + 1);
    return (*pipes)[id];
}

} // namespace emu_pipe

/* The GPU's rules: 4, 8 or 16 bytes, both addresses on that size. */
static inline void __pipeline_memcpy_async(void *dst, const void *src, size_t size,
                                           size_t zfill = 0)
{
    if ((size != 4 && size != 8 && size != 16) || (uintptr_t)dst % size != 0 ||
        (uintptr_t)src % size != 0 || zfill != 0) {
        fprintf(stderr, "cuda emulator: __pipeline_memcpy_async of %zu bytes from %p to %p: "
                        "the GPU copies 4, 8 or 16 bytes between addresses on that size "
                        "(zfill is not emulated)\n", size, src, dst);
        abort();
    }
    emu_pipe::thread_pipe &p = emu_pipe::mine();
    p.held.push_back(emu_pipe::copy{(emu_pipe::word *)dst, (const emu_pipe::word *)src,
                                    size / 4, p.commits});
}

static inline void __pipeline_commit() { emu_pipe::mine().commits++; }

/* Lands every copy of this thread but those of its `prior` latest batches
 * (and those not committed yet), in the order they were issued. */
static inline void __pipeline_wait_prior(size_t prior)
{
    emu_pipe::thread_pipe &p = emu_pipe::mine();
    size_t keep_from = p.commits >= prior ? p.commits - prior : 0;
    std::vector<emu_pipe::copy> kept;
    for (const emu_pipe::copy &c : p.held) {
        if (c.batch >= keep_from) {
            kept.push_back(c);
            continue;
        }
        for (size_t w = 0; w < c.words; w++)
            c.dst[w] = c.src[w];
    }
    p.held.swap(kept);
}

#endif
