/* emu_race.cc (emulator) - the shared-memory race detector (emu_race.h),
 * and the instrumentation calls GCC's -fsanitize=thread inserts into the
 * kernels, answered here instead of by ThreadSanitizer's runtime.
 *
 * A record per byte of the block's shared memory: the last writer (its
 * thread, the barrier interval and its warp's epoch at the write) and the
 * readers in the current interval (one thread, or many; one warp, or
 * several). An interval is the time between two block barriers: a
 * number that grows at each barrier and each new block, so a record of an
 * earlier interval or block never matches and the shadow is never
 * cleared. ALALLO_EMU_RACE=0 in the environment turns the watching off
 * (an instrumented build then runs as an uninstrumented one would). A warp's epoch grows at each of its warp operations: within
 * one interval, two threads of the same warp are ordered when their
 * accesses lie in different epochs.
 */
#include "emu_race.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

const uint16_t MANY = 0xffff; /* several readers (r_tid) or warps (r_warp) */

struct cell {
    uint32_t w_interval; /* of the last write; 0: never written */
    uint32_t w_epoch;    /* the writer's warp epoch then */
    uint32_t r_interval; /* of the readers below; 0: never read */
    uint32_t r_epoch;    /* the latest warp epoch a read came in (one warp) */
    uint16_t w_tid;
    uint16_t r_tid;  /* the one reader at r_epoch, or MANY */
    uint16_t r_warp; /* the one warp that read this interval, or MANY */
};

std::vector<cell> shadow;
std::vector<uint32_t> warp_epoch;
const unsigned char *base;
size_t size;
uint32_t interval;
size_t tid;
unsigned bx, by, bz;
bool seen;

[[noreturn]] void report(const char *what, size_t off, const char *other, long other_tid)
{
    char who[64];
    if (other_tid >= 0)
        snprintf(who, sizeof who, "thread %ld", other_tid);
    else
        snprintf(who, sizeof who, "threads of %s", other_tid == -1 ? "its warp" : "other warps");
    fprintf(stderr,
            "cuda emulator: a shared-memory race in block %u,%u,%u: thread %zu %s byte %zu "
            "(of %zu), which %s %s since the last barrier, with no __syncthreads (or, in one "
            "warp, __syncwarp) between them\n",
            bx, by, bz, tid, what, off, size, who, other);
    abort();
}

void access(const void *addr, size_t n, bool write)
{
    const unsigned char *p = static_cast<const unsigned char *>(addr);
    if (!base || p + n <= base || p >= base + size)
        return;
    seen = true;
    size_t from = p < base ? 0 : (size_t)(p - base);
    size_t to = std::min(size, (size_t)(p + n - base));
    size_t warp = tid / 32;
    uint32_t e = warp_epoch[warp];
    for (size_t i = from; i < to; i++) {
        cell &c = shadow[i];
        /* an earlier write by another thread, unordered with this access */
        if (c.w_interval == interval && c.w_tid != tid &&
            ((size_t)c.w_tid / 32 != warp || c.w_epoch == e))
            report(write ? "writes" : "reads", i, "wrote", c.w_tid);
        if (write) {
            if (c.r_interval == interval) {
                if (c.r_warp == MANY)
                    report("writes", i, "read", -2);
                if (c.r_warp != warp)
                    report("writes", i, "read", c.r_tid == MANY ? -2 : (long)c.r_tid);
                if (c.r_epoch == e && c.r_tid != tid)
                    report("writes", i, "read", c.r_tid == MANY ? -1 : (long)c.r_tid);
            }
            c.w_interval = interval;
            c.w_epoch = e;
            c.w_tid = (uint16_t)tid;
        } else if (c.r_interval != interval) {
            c.r_interval = interval;
            c.r_epoch = e;
            c.r_tid = (uint16_t)tid;
            c.r_warp = (uint16_t)warp;
        } else if (c.r_warp != MANY && c.r_warp != warp) {
            c.r_warp = MANY;
        } else if (c.r_warp != MANY) {
            if (c.r_epoch != e) {
                c.r_epoch = e;
                c.r_tid = (uint16_t)tid;
            } else if (c.r_tid != tid) {
                c.r_tid = MANY;
            }
        }
    }
}

} // namespace

namespace emu_race {

void block_start(const void *smem, size_t bytes, size_t threads, unsigned x, unsigned y,
                 unsigned z)
{
    static int off = -1; /* ALALLO_EMU_RACE=0: not watched (test_race.c's) */
    if (off < 0) {
        const char *e = getenv("ALALLO_EMU_RACE");
        off = e && e[0] == '0' && !e[1];
    }
    base = off ? nullptr : static_cast<const unsigned char *>(smem);
    size = base ? bytes : 0;
    if (shadow.size() < size)
        shadow.resize(size, cell());
    if (warp_epoch.size() < (threads + 31) / 32)
        warp_epoch.resize((threads + 31) / 32, 0);
    interval++;
    bx = x, by = y, bz = z;
    tid = 0;
}

void block_end() { base = nullptr; }
void running(size_t t) { tid = t; }
void barrier() { interval++; }
void warp_sync(size_t warp) { warp_epoch[warp]++; }
bool watching() { return seen; }

} // namespace emu_race

/* GCC's -fsanitize=thread calls (the kernels' objects only). The function
 * entries and exits, and the start-up call, have nothing to do here. */
extern "C" {
void __tsan_init(void) {}
void __tsan_func_entry(void *pc) { (void)pc; }
void __tsan_func_exit(void) {}
#define EMU_RACE_SIZES(X) X(1) X(2) X(4) X(8) X(16)
#define EMU_RACE_HOOKS(n)                                                                    \
    void __tsan_read##n(void *p) { access(p, n, false); }                                    \
    void __tsan_write##n(void *p) { access(p, n, true); }                                    \
    void __tsan_unaligned_read##n(void *p) { access(p, n, false); }                          \
    void __tsan_unaligned_write##n(void *p) { access(p, n, true); }
EMU_RACE_SIZES(EMU_RACE_HOOKS)
void __tsan_read_range(void *p, size_t n) { access(p, n, false); }
void __tsan_write_range(void *p, size_t n) { access(p, n, true); }
}
