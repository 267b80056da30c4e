/* emu_race.h (emulator) - the CPU emulator's shared-memory race detector:
 * which thread of a block read and wrote which byte of its shared memory
 * since the last barrier, and a report (then abort, as every emulator
 * error) when two threads touch the same byte between two barriers, at
 * least one of them writing, with nothing to order them: a race on a GPU,
 * whatever order the emulator happened to run them in.
 *
 * Two threads are ordered by a block barrier (__syncthreads, and
 * __syncthreads_or) between their accesses, or, in the same warp, by a
 * warp operation (__syncwarp, a shuffle). Global memory is not watched.
 *
 * How it sees the accesses: tests/gpu/emu/run.sh with EMU_RACE=1 compiles
 * the kernels with GCC's -fsanitize=thread, which only inserts a call
 * before each load and store (__tsan_read4(addr) ...); this file defines
 * those calls (ThreadSanitizer's own runtime is not linked), and looks
 * only at addresses inside the running block's shared memory. Without
 * EMU_RACE the calls never come and the detector costs nothing.
 *
 * cuda_emu.cc owns the schedule and calls the hooks below; this file owns
 * the shadow (a record per byte of the block's shared memory).
 */
#ifndef ALALLO_EMU_RACE_H
#define ALALLO_EMU_RACE_H

#include <cstddef>

namespace emu_race {

/* A block starts: its shared memory is [smem, smem + bytes), its threads
 * number `threads`; (x, y, z) names it in a report. */
void block_start(const void *smem, size_t bytes, size_t threads, unsigned x, unsigned y,
                 unsigned z);
/* The block ended: nothing is watched until the next block_start. */
void block_end();
/* Thread `tid` (of the running block) runs from now on. */
void running(size_t tid);
/* Every thread of the block passed a barrier. */
void barrier();
/* Every lane of warp `warp` passed a warp operation. */
void warp_sync(size_t warp);
/* Whether any access has been checked since the program started (true only
 * in an instrumented build): tests say which mode they ran in. */
bool watching();

} // namespace emu_race

#endif
