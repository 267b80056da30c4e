/* cuda_emu.cc - a CPU emulator for the backend's kernels, and train/cuda/
 * cuda_ctx.h over host memory, so that a tests/gpu program links against
 * kernels compiled by g++ (cuda_runtime.h beside this says how) and runs
 * its GPU checks on a machine with no GPU. It proves a kernel's indexing,
 * masking, tiling and barriers, not its speed or its bits on a real GPU:
 * the real run is still tests/gpu on the GPU machine.
 *
 * One block at a time; its threads are fibers (ucontext to start, then
 * GCC's builtin setjmp/longjmp) run in turn up to their next barrier or warp
 * operation. Device memory is malloc'd host
 * memory (fresh allocations filled with NaN unless zeroed).
 *
 * The order: by default blocks run x, then y, then z, and each round of
 * a block runs its threads in index order, every warp passing its warp
 * operation together. ALALLO_EMU_SHUFFLE=SEED (a number other than 0)
 * shuffles both from SEED: the blocks in a random order, and inside a
 * block, at each step, a random thread of those that can run goes on to
 * its next barrier or warp operation, and a warp whose last lane arrives
 * there goes on at once (so warps drift apart between block barriers,
 * as on a GPU). A kernel whose result depends on that order (a missing
 * barrier) then gives other results under other seeds, and, compiled
 * for the race detector (emu_race.h, run.sh's EMU_RACE=1), aborts at the
 * first pair of unordered accesses to one byte of shared memory.
 */
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include <ucontext.h>

#include <cuda_runtime.h>

#include "emu_race.h"

extern "C" {
#include "train/cuda/cuda_ctx.h"
}
#include "train/cuda/cuda_walk.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

namespace {

enum state { RUN, AT_WARP, AT_BLOCK, DONE };

/* GCC's own setjmp and longjmp (5 words: frame, stack and resume
 * addresses): no signal mask, no system call, and no libc entry point for
 * a sanitizer to intercept (AddressSanitizer's _longjmp unpoisons the
 * stack with a system call each time). __builtin_longjmp may not sit in
 * the function that called __builtin_setjmp, hence jump(). */
typedef void *jump_buf[5];

__attribute__((noinline, noreturn)) void jump(jump_buf to)
{
    __builtin_longjmp(to, 1);
}
enum op { OP_SYNCWARP, OP_SHFL, OP_SHFL_DOWN, OP_SYNC, OP_SYNC_OR };

#define STACK_BYTES (512u << 10)
#define DEFAULT_SMEM (48u << 10)
#define MAX_SMEM (227u << 10) /* Hopper's opt-in limit per block */

struct fiber {
    ucontext_t ctx; /* where the fiber starts */
    jump_buf jmp;   /* where it waits, once started */
    bool entered;
    char *stack;
    dim3 tid;
    state st;
    op kind;
    float val;
    int lane_mask, pred;
};

/* The fibers, made once and kept: a block of n threads runs on the first
 * n, each entered once by setcontext and resumed ever after by jump()
 * (fiber_entry loops over the blocks it is given). */
std::vector<fiber> fibers;
size_t n_threads; /* the running block's */

/* Frees the fibers' stacks at exit (before LeakSanitizer looks). */
struct release_stacks {
    ~release_stacks()
    {
        for (fiber &f : fibers)
            free(f.stack);
    }
} release_at_exit;
jump_buf sched_jmp;
size_t cur;
dim3 cur_block, cur_bdim, cur_grid;
float *cur_smem;
std::function<void()> *cur_body;
std::map<const void *, int> smem_limits;
char launch_error[512];
size_t in_use, peak;
/* A capture in progress (cuda_ctx_capture_begin): the stream's work kept
 * in order, not run; capture_bad the first launch it refused (a launch an
 * invalid configuration makes fails the capture, as CUDA's does). */
std::vector<std::function<void()>> *capture;
char capture_bad[512];
struct cuda_walk *walk; /* cuda_ctx_walk() */
/* ALALLO_EMU_SHUFFLE's seed (0: the fixed order) and the generator it
 * starts (splitmix64), read at the first launch. */
uint64_t shuffle_seed, rng_state;
bool shuffle_read;
#if EMU_ASAN
const void *sched_stack_bottom;
size_t sched_stack_size;
#endif

[[noreturn]] void die(const char *what)
{
    fprintf(stderr, "cuda emulator: %s (block %u,%u,%u)\n", what, cur_block.x, cur_block.y,
            cur_block.z);
    abort();
}

/* Guard zones of NaN bytes on both sides of shared memory and of every
 * device allocation: a kernel's write past either end is caught when the
 * block ends or the array is freed (without AddressSanitizer too), and a
 * read there gives NaN. */
#define GUARD 4096u

unsigned char *guarded_alloc(size_t bytes, int fill)
{
    void *raw = nullptr; /* on 256 bytes, as cudaMalloc's (wmma needs 32) */
    if (posix_memalign(&raw, 256, bytes + 2 * GUARD) != 0)
        return nullptr;
    unsigned char *p = static_cast<unsigned char *>(raw);
    memset(p, 0xff, GUARD);
    memset(p + GUARD, fill, bytes);
    memset(p + GUARD + bytes, 0xff, GUARD);
    return p + GUARD;
}

void guarded_free(unsigned char *p, size_t bytes, const char *what)
{
    if (!p)
        return;
    for (size_t i = 0; i < GUARD; i++)
        if (p[-(long)GUARD + (long)i] != 0xff || p[bytes + i] != 0xff) {
            int after = p[bytes + i] != 0xff;
            fprintf(stderr, "cuda emulator: a kernel wrote outside %s of %zu bytes, at byte "
                    "%s%zu\n", what, bytes, after ? "" : "-", after ? bytes + i : GUARD - i);
            abort();
        }
    free(p - GUARD);
}

/* The two halves of a switch, annotated so AddressSanitizer follows the
 * stacks. A fiber is entered the first time by setcontext (onto the stack
 * makecontext prepared); every later switch, either way, is GCC's
 * __builtin_setjmp and __builtin_longjmp (jump_buf above): swapcontext's
 * two system calls per switch made the emulator spend half its time in
 * the kernel. */
void to_fiber(size_t i)
{
    emu_race::running(i);
#if EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, fibers[i].stack, STACK_BYTES);
#endif
    if (__builtin_setjmp(sched_jmp) == 0) {
        if (!fibers[i].entered) {
            fibers[i].entered = true;
            setcontext(&fibers[i].ctx);
            die("setcontext returned");
        }
        jump(fibers[i].jmp);
    }
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, &sched_stack_bottom, &sched_stack_size);
#endif
}

void to_scheduler()
{
#if EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, sched_stack_bottom, sched_stack_size);
#endif
    if (__builtin_setjmp(fibers[cur].jmp) == 0)
        jump(sched_jmp);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void fiber_entry()
{
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched_stack_bottom, &sched_stack_size);
#endif
    for (;;) { /* one thread of each block the fiber is given */
        (*cur_body)();
        fibers[cur].st = DONE;
        to_scheduler();
    }
}

void wait_at(state st, op kind)
{
    fibers[cur].st = st;
    fibers[cur].kind = kind;
    to_scheduler();
}

/* Completes the warp operation every lane of the warp of thread w (its
 * first) waits at, if they all do; true when it did. */
bool release_warp(size_t w)
{
    size_t n = n_threads;
    size_t lanes = std::min<size_t>(32, n - w);
    for (size_t l = 0; l < lanes; l++)
        if (fibers[w + l].st != AT_WARP)
            return false;
    {
        op kind = fibers[w].kind;
        int m = fibers[w].lane_mask;
        for (size_t l = 0; l < lanes; l++)
            if (fibers[w + l].kind != kind ||
                ((kind == OP_SHFL || kind == OP_SHFL_DOWN) && fibers[w + l].lane_mask != m))
                die("the lanes of a warp wait at different warp operations");
        std::vector<float> vals(lanes);
        for (size_t l = 0; l < lanes; l++)
            vals[l] = fibers[w + l].val;
        for (size_t l = 0; l < lanes; l++) {
            if (kind == OP_SHFL) {
                size_t src = l ^ (size_t)m;
                if (src >= lanes)
                    die("a shuffle reads a lane the warp does not have");
                fibers[w + l].val = vals[src];
            } else if (kind == OP_SHFL_DOWN && l + (size_t)m < lanes) {
                fibers[w + l].val = vals[l + (size_t)m];
            }
            fibers[w + l].st = RUN;
        }
    }
    emu_race::warp_sync(w / 32);
    return true;
}

/* Completes warp operations every lane of a warp waits at; true when one
 * did. */
bool release_warps()
{
    bool any = false;
    for (size_t w = 0; w < n_threads; w += 32)
        any |= release_warp(w);
    return any;
}

uint64_t next_random()
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A random index below n (n > 0). */
size_t pick(size_t n) { return (size_t)(next_random() % n); }

/* A new fiber's start (apart from its caller: getcontext returns twice,
 * like setjmp). */
__attribute__((noinline)) void make_fiber(fiber &f)
{
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = STACK_BYTES;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_entry, 0);
    f.entered = false;
}

/* Runs the fibers that can run until none can: in index order, a round
 * at a time, warps released after each round; or (shuffled) one random
 * fiber at a time, its warp released as soon as its last lane arrives. */
void run_runnable()
{
    size_t n = n_threads;
    if (!shuffle_seed) {
        do {
            for (size_t i = 0; i < n; i++) {
                if (fibers[i].st == RUN) {
                    cur = i;
                    to_fiber(i);
                }
            }
        } while (release_warps());
        return;
    }
    std::vector<size_t> ready;
    for (size_t i = 0; i < n; i++)
        if (fibers[i].st == RUN)
            ready.push_back(i);
    while (!ready.empty()) {
        size_t j = pick(ready.size()), i = ready[j];
        ready[j] = ready.back();
        ready.pop_back();
        cur = i;
        to_fiber(i);
        size_t w = i / 32 * 32;
        if (fibers[i].st == AT_WARP && release_warp(w))
            for (size_t l = w; l < std::min(n, w + 32); l++)
                ready.push_back(l);
    }
}

void run_block()
{
    size_t n = n_threads;
    for (size_t i = 0; i < n; i++)
        fibers[i].st = RUN;
    for (;;) {
        run_runnable();
        size_t done = 0, at_block = 0;
        for (size_t i = 0; i < n; i++) {
            done += fibers[i].st == DONE;
            at_block += fibers[i].st == AT_BLOCK;
        }
        if (done == n)
            return;
        if (at_block != n)
            die(done ? "a barrier waits for threads that have exited"
                     : "threads wait at a barrier and at warp operations at once (a hang)");
        op kind = fibers[0].kind;
        int any = 0;
        for (size_t i = 0; i < n; i++) {
            if (fibers[i].kind != kind)
                die("threads wait at different kinds of barrier");
            any |= fibers[i].pred;
        }
        for (size_t i = 0; i < n; i++) {
            fibers[i].pred = any;
            fibers[i].st = RUN;
        }
        emu_race::barrier();
    }
}

} // namespace

namespace emu {

const dim3 &thread_idx() { return fibers[cur].tid; }
const dim3 &block_idx() { return cur_block; }
const dim3 &block_dim() { return cur_bdim; }
const dim3 &grid_dim() { return cur_grid; }
float *shared() { return cur_smem; }
unsigned lane_id() { return (unsigned)(cur % 32); }

void sync_block()
{
    fibers[cur].pred = 0;
    wait_at(AT_BLOCK, OP_SYNC);
}

int sync_block_or(int pred)
{
    fibers[cur].pred = pred != 0;
    wait_at(AT_BLOCK, OP_SYNC_OR);
    return fibers[cur].pred;
}

void sync_warp()
{
    wait_at(AT_WARP, OP_SYNCWARP);
}

} // namespace emu

namespace {

/* A shuffle of kind OP_SHFL (arg: the lane mask) or OP_SHFL_DOWN (arg:
 * the distance), completed by release_warps. */
float shuffle(unsigned mask, float v, int arg, op kind)
{
    if (mask != 0xffffffffu)
        die("the emulator runs full-warp shuffles only");
    fibers[cur].val = v;
    fibers[cur].lane_mask = arg;
    wait_at(AT_WARP, kind);
    return fibers[cur].val;
}

} // namespace

namespace emu {

float shfl_xor(unsigned mask, float v, int lane_mask)
{
    return shuffle(mask, v, lane_mask, OP_SHFL);
}

float shfl_down(unsigned mask, float v, int delta)
{
    return shuffle(mask, v, delta, OP_SHFL_DOWN);
}

cudaError_t set_smem_limit(const void *kernel, int bytes)
{
    if (bytes < 0 || (unsigned)bytes > MAX_SMEM)
        return cudaErrorInvalidValue;
    smem_limits[kernel] = bytes;
    return cudaSuccess;
}

void run(const void *kernel, dim3 grid, dim3 block, size_t smem, std::function<void()> body)
{
    size_t threads = (size_t)block.x * block.y * block.z;
    size_t limit = DEFAULT_SMEM;
    auto it = smem_limits.find(kernel);
    if (it != smem_limits.end() && (size_t)it->second > limit)
        limit = (size_t)it->second;
    if (threads == 0 || threads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
        grid.y > 65535 || grid.z > 65535 || smem > limit) {
        char *to = capture ? capture_bad : launch_error;
        if (!to[0])
            snprintf(to, sizeof launch_error,
                     "invalid launch: grid %u,%u,%u block %u,%u,%u, %zu bytes of shared memory "
                     "(limit %zu)",
                     grid.x, grid.y, grid.z, block.x, block.y, block.z, smem, limit);
        return;
    }
    if (capture) { /* a graph's node: the launch again when it replays */
        capture->push_back([=]() { run(kernel, grid, block, smem, body); });
        return;
    }
    /* never moved once made: a ucontext_t points into itself */
    fibers.reserve(1024);
    while (fibers.size() < threads) {
        fibers.push_back(fiber());
        fiber &f = fibers.back();
        f.stack = static_cast<char *>(malloc(STACK_BYTES));
        if (!f.stack)
            die("out of memory for fiber stacks");
        make_fiber(f);
    }
    n_threads = threads;
    for (size_t t = 0; t < threads; t++)
        fibers[t].tid = dim3((unsigned)(t % block.x), (unsigned)(t / block.x % block.y),
                             (unsigned)(t / ((size_t)block.x * block.y)));
    cur_grid = grid;
    cur_bdim = block;
    cur_body = &body;
    if (!shuffle_read) {
        const char *e = getenv("ALALLO_EMU_SHUFFLE");
        shuffle_seed = e && *e ? strtoull(e, nullptr, 10) : 0;
        rng_state = shuffle_seed;
        shuffle_read = true;
    }
    size_t blocks = (size_t)grid.x * grid.y * grid.z;
    std::vector<size_t> order(blocks);
    for (size_t b = 0; b < blocks; b++)
        order[b] = b;
    if (shuffle_seed)
        for (size_t b = blocks; b > 1; b--)
            std::swap(order[b - 1], order[pick(b)]);
    for (size_t b : order) {
        cur_block = dim3((unsigned)(b % grid.x), (unsigned)(b / grid.x % grid.y),
                         (unsigned)(b / ((size_t)grid.x * grid.y)));
        /* NaN in every float */
        unsigned char *sh = smem ? guarded_alloc(smem, 0xff) : nullptr;
        if (smem && !sh)
            die("out of memory for shared memory");
        cur_smem = reinterpret_cast<float *>(sh);
        emu_race::block_start(sh, smem, threads, cur_block.x, cur_block.y, cur_block.z);
        run_block();
        emu_race::block_end();
        guarded_free(sh, smem, "shared memory");
        cur_smem = nullptr;
    }
}

void submit(std::function<void()> work)
{
    if (capture)
        capture->push_back(std::move(work));
    else
        work();
}

} // namespace emu

/* ---- train/cuda/cuda_ctx.h over host memory */

static char ctx_error[600];
static struct cuda_device_info emu_dev;
static int emu_open;

extern "C" {

int cuda_device_count(void) { return 1; }

/* The emulated GPU's memory: 16 GiB, or ALALLO_EMU_GPU_BYTES (tests that
 * make the trainer fall back to micro-batches). Allocations past it fail
 * as cudaMalloc's do. */
static size_t emu_total_bytes(void)
{
    const char *e = getenv("ALALLO_EMU_GPU_BYTES");
    return e && *e ? (size_t)strtoull(e, nullptr, 10) : (size_t)1 << 34;
}

int cuda_device_query(int index, struct cuda_device_info *out)
{
    if (index != 0) {
        snprintf(ctx_error, sizeof ctx_error, "GPU %d does not exist: 1 visible (emulated)",
                 index);
        return -1;
    }
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "CPU emulator");
    out->total_bytes = emu_total_bytes();
    out->cc_major = 9;
    out->sm_count = 1;
    return 0;
}

int cuda_ctx_open(int index)
{
    if (cuda_device_query(index, &emu_dev) < 0)
        return -1;
    emu_open = 1;
    return 0;
}

void cuda_ctx_close(void) { emu_open = 0; }
const struct cuda_device_info *cuda_ctx_device(void) { return emu_open ? &emu_dev : nullptr; }
void *cuda_ctx_stream(void) { return nullptr; }
void *cuda_ctx_lt(void) { return nullptr; }

void *cuda_ctx_workspace(size_t *bytes)
{
    *bytes = 0;
    return nullptr;
}

/* The calls a graph's body may not make (cuda_ctx.h): they abort. */
static void idle_or_abort(const char *what)
{
    if (!walk && !capture)
        return;
    fprintf(stderr, "cuda emulator: %s inside a CUDA graph's body (cuda_graph.h)\n", what);
    abort();
}

struct cuda_walk *cuda_ctx_walk(void) { return walk; }
void cuda_ctx_set_walk(struct cuda_walk *w) { walk = w; }

/* A graph is the kept work, replayed in order. ALALLO_EMU_CAPTURE=fail
 * makes every capture fail at its end, as a driver that refuses one would
 * (the tests of cuda_graph.c's fallback). */
int cuda_ctx_capture_begin(void)
{
    idle_or_abort("a capture");
    capture = new std::vector<std::function<void()>>();
    capture_bad[0] = 0;
    return 0;
}

int cuda_ctx_capture_end(void **graph)
{
    std::vector<std::function<void()>> *g = capture;
    capture = nullptr;
    *graph = nullptr;
    const char *f = getenv("ALALLO_EMU_CAPTURE");
    if (capture_bad[0] || (f && strcmp(f, "fail") == 0)) {
        snprintf(ctx_error, sizeof ctx_error, "a CUDA graph's capture failed: %s",
                 capture_bad[0] ? capture_bad : "refused (ALALLO_EMU_CAPTURE=fail)");
        delete g;
        return -1;
    }
    *graph = g;
    return 0;
}

int cuda_ctx_graph_launch(void *graph)
{
    idle_or_abort("a graph's launch");
    for (std::function<void()> &work : *static_cast<std::vector<std::function<void()>> *>(graph))
        work();
    return 0;
}

void cuda_ctx_graph_free(void *graph)
{
    delete static_cast<std::vector<std::function<void()>> *>(graph);
}

int cuda_ctx_sync(void)
{
    idle_or_abort("cuda_ctx_sync");
    if (!launch_error[0])
        return 0;
    snprintf(ctx_error, sizeof ctx_error, "the GPU reported an error: %s", launch_error);
    launch_error[0] = 0;
    return -1;
}

const char *cuda_ctx_error(void) { return ctx_error; }

int cuda_ctx_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx_error, sizeof ctx_error, fmt, ap);
    va_end(ap);
    return -1;
}

/* Sizes by address, for the in-use count and the guards. */
static std::map<void *, size_t> allocs;

void *cuda_alloc(size_t bytes, int zero)
{
    idle_or_abort("cuda_alloc");
    if (in_use + bytes > emu_total_bytes()) {
        snprintf(ctx_error, sizeof ctx_error,
                 "the GPU has no room for %zu more MiB (%zu MiB in use; emulated)", bytes >> 20,
                 in_use >> 20);
        return nullptr;
    }
    unsigned char *p = guarded_alloc(bytes, zero ? 0 : 0xff);
    if (!p) {
        snprintf(ctx_error, sizeof ctx_error, "out of memory for %zu bytes (emulated)", bytes);
        return nullptr;
    }
    allocs[p] = bytes;
    in_use += bytes;
    if (in_use > peak)
        peak = in_use;
    return p;
}

void cuda_free(void *p)
{
    if (!p)
        return;
    idle_or_abort("cuda_free");
    auto it = allocs.find(p);
    if (it == allocs.end()) {
        fprintf(stderr, "cuda emulator: cuda_free of %p, which cuda_alloc did not give\n", p);
        abort();
    }
    in_use -= it->second;
    guarded_free(static_cast<unsigned char *>(p), it->second, "a device array");
    allocs.erase(it);
}

int cuda_upload(void *dst, const void *src, size_t bytes)
{
    idle_or_abort("cuda_upload");
    memcpy(dst, src, bytes);
    return 0;
}

int cuda_copy(void *dst, const void *src, size_t bytes)
{
    if (walk) {
        size_t item[3] = {(size_t)dst, (size_t)src, bytes};
        cuda_walk_note(walk, CUDA_WALK_COPY, item, sizeof item);
        return 0;
    }
    emu::submit([=]() { memmove(dst, src, bytes); });
    return 0;
}

int cuda_download(void *dst, const void *src, size_t bytes)
{
    idle_or_abort("cuda_download");
    memcpy(dst, src, bytes);
    return 0;
}

size_t cuda_mem_in_use(void) { return in_use; }
size_t cuda_mem_peak(void) { return peak; }

} /* extern "C" */
