/* race_kernels.h (emulator only) - race_kernels.cu's kernels, for
 * test_race.c: 64 threads a block, `blocks` blocks, x and out of
 * 64 * blocks floats each (host memory). */
#ifndef ALALLO_EMU_RACE_KERNELS_H
#define ALALLO_EMU_RACE_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif

enum race_kernel {
    RACE_LEFT_SYNCED,  /* out[i] = x[i] + x[i-1], a barrier between */
    RACE_LEFT_PLANTED, /* the same with the barrier left out */
    RACE_WARP_SYNCED,  /* out[i] = x[i] + x[i^1], __syncwarp between */
    RACE_WARP_PLANTED, /* out[i] = x[i] + x[i^32]: __syncwarp is not enough */
};

/* Runs one of them; 0, or -1 when the emulator refused. */
int race_kernel_run(enum race_kernel which, const float *x, float *out, int blocks);
/* Whether the race detector has watched an access (EMU_RACE=1 builds). */
int race_kernel_watched(void);

#ifdef __cplusplus
}
#endif

#endif
