/* cuda_mma.cuh (emulator) - shadows src/train/cuda/cuda_mma.cuh: the
 * m16n8k16 bf16 product with the layout PTX documents (that header says
 * it), for the CPU emulator. Lanes exchange their fragments through a
 * table per warp between two warp syncs, then each sums its own four
 * elements in fp32, k in order. The syncs make it a warp operation, as
 * mma.sync is (every lane must reach it); the race detector (emu_race.h)
 * takes them as ordering the warp's lanes, which the GPU's mma.sync does
 * not promise for shared memory: a race between lanes of one warp across
 * this product would go unseen. */
#ifndef ALALLO_TRAIN_CUDA_MMA_CUH
#define ALALLO_TRAIN_CUDA_MMA_CUH

#include <cstdint>
#include <cstring>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace emu_mma {

struct lane_frags {
    uint32_t a[4], b[2];
};

/* The table of every warp of the running block (blocks run in turn); a
 * pointer set on first use (a function's static would need an atomic
 * guard, which the race detector's build cannot link). */
static std::vector<lane_frags> *table __attribute__((unused));

inline float half_of(uint32_t w, int hi)
{
    __nv_bfloat16 h;
    h.x = (uint16_t)(hi ? w >> 16 : w & 0xffffu);
    return __bfloat162float(h);
}

} // namespace emu_mma

static inline void mma_16816(float *c, const uint32_t *a, const uint32_t *b)
{
    if (!emu_mma::table)
        emu_mma::table = new std::vector<emu_mma::lane_frags>();
    const dim3 &t3 = emu::thread_idx(), &d3 = emu::block_dim();
    size_t id = t3.x + (size_t)d3.x * (t3.y + (size_t)d3.y * t3.z);
    size_t w0 = id - id % 32;
    if (emu_mma::table->size() < w0 + 32)
        emu_mma::table->resize(w0 + 32);
    emu_mma::lane_frags &mine = (*emu_mma::table)[id];
    memcpy(mine.a, a, sizeof mine.a);
    memcpy(mine.b, b, sizeof mine.b);
    emu::sync_warp(); /* every lane's fragments are in the table */
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; l++) {
        const emu_mma::lane_frags &f = (*emu_mma::table)[w0 + l];
        int g = l / 4, t = l % 4;
        for (int h = 0; h < 2; h++) {
            A[g][2 * t + h] = emu_mma::half_of(f.a[0], h);
            A[g + 8][2 * t + h] = emu_mma::half_of(f.a[1], h);
            A[g][2 * t + 8 + h] = emu_mma::half_of(f.a[2], h);
            A[g + 8][2 * t + 8 + h] = emu_mma::half_of(f.a[3], h);
            B[2 * t + h][g] = emu_mma::half_of(f.b[0], h);
            B[2 * t + 8 + h][g] = emu_mma::half_of(f.b[1], h);
        }
    }
    emu::sync_warp(); /* every lane has read the table before it changes */
    int g = (int)(id % 32) / 4, t = (int)(id % 32) % 4;
    for (int e = 0; e < 4; e++) {
        int r = g + (e / 2) * 8, col = 2 * t + e % 2;
        float acc = c[e];
        for (int k = 0; k < 16; k++)
            acc += A[r][k] * B[k][col];
        c[e] = acc;
    }
}

#endif
