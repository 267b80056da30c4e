/* test_race.c - the CPU emulator finds what a fixed order hides: its
 * shuffled order (ALALLO_EMU_SHUFFLE) and its shared-memory race detector
 * (emu_race.h) against race_kernels.cu's kernels, two right and two with a
 * race planted (a missing __syncthreads; __syncwarp where two warps meet).
 *
 * Built by tests/gpu/emu/run.sh with EMU_RACE=1 (CMakeLists.txt:
 * gpu_emu_race/planted). Each run is a child process with its own
 * environment (the emulator reads it at its first launch), its stderr
 * kept, so that an abort is a result to check and not the test's end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "race_kernels.h"

#define BLOCKS 3
#define N (BLOCKS * 64)

enum outcome { RIGHT, WRONG, ABORTED };

struct run {
    enum outcome outcome;
    char err[2048]; /* the child's stderr */
};

static float want(enum race_kernel k, const float *x, int i)
{
    int t = i % 64;
    switch (k) {
    case RACE_LEFT_SYNCED:
    case RACE_LEFT_PLANTED:
        return x[i] + (t ? x[i - 1] : 0.0f);
    case RACE_WARP_SYNCED:
        return x[i] + x[i - t + (t ^ 1)];
    case RACE_WARP_PLANTED:
        return x[i] + x[i - t + (t ^ 32)];
    }
    return NAN;
}

/* Runs kernel k in a child with ALALLO_EMU_SHUFFLE=seed (0: the fixed
 * order) and the detector on or off. */
static struct run run_child(enum race_kernel k, int seed, int detect)
{
    struct run r = {.outcome = WRONG};
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        char s[16];
        snprintf(s, sizeof s, "%d", seed);
        setenv("ALALLO_EMU_SHUFFLE", s, 1);
        setenv("ALALLO_EMU_RACE", detect ? "1" : "0", 1);
        float x[N], out[N];
        for (int i = 0; i < N; i++)
            x[i] = (float)(i % 7) + 0.25f * (float)(i / 64);
        if (race_kernel_run(k, x, out, BLOCKS) < 0)
            _exit(3);
        if (detect && !race_kernel_watched())
            _exit(4); /* not an EMU_RACE=1 build: the test would prove nothing */
        for (int i = 0; i < N; i++)
            if (!(out[i] == want(k, x, i)))
                _exit(1);
        _exit(0);
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t n;
    while ((n = read(fds[0], r.err + got, sizeof r.err - 1 - got)) > 0)
        got += (size_t)n;
    r.err[got] = 0;
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT) {
        r.outcome = ABORTED;
    } else {
        assert_true(WIFEXITED(status));
        int code = WEXITSTATUS(status);
        if (code != 0 && code != 1)
            fail_msg("child exited %d: %s", code, r.err);
        r.outcome = code == 0 ? RIGHT : WRONG;
    }
    return r;
}

/* The right kernels pass in the fixed order and under every seed, the
 * detector on: no false alarm for a barrier, nor for __syncwarp inside
 * one warp. */
static void right_kernels_pass_in_every_order(void **state)
{
    (void)state;
    enum race_kernel right[] = {RACE_LEFT_SYNCED, RACE_WARP_SYNCED};
    for (size_t k = 0; k < 2; k++)
        for (int seed = 0; seed <= 4; seed++) {
            struct run r = run_child(right[k], seed, 1);
            if (r.outcome != RIGHT)
                fail_msg("kernel %d, seed %d: %s", (int)right[k], seed, r.err);
        }
}

/* The missing __syncthreads: right in the fixed order (each thread runs
 * after its left neighbour), wrong under shuffled orders (a NaN read from
 * a word not yet written), and reported by the detector in any order. */
static void missing_barrier_is_found(void **state)
{
    (void)state;
    assert_int_equal(run_child(RACE_LEFT_PLANTED, 0, 0).outcome, RIGHT);
    int wrong = 0;
    for (int seed = 1; seed <= 4; seed++)
        wrong += run_child(RACE_LEFT_PLANTED, seed, 0).outcome == WRONG;
    assert_int_equal(wrong, 4);
    struct run r = run_child(RACE_LEFT_PLANTED, 0, 1);
    assert_int_equal(r.outcome, ABORTED);
    assert_non_null(strstr(r.err, "a shared-memory race in block 0,0,0: thread 1 reads byte 0 "
                                  "(of 256), which thread 0 wrote since the last barrier"));
    for (int seed = 1; seed <= 2; seed++) { /* a read may come first: then the write is */
        r = run_child(RACE_LEFT_PLANTED, seed, 1);
        assert_int_equal(r.outcome, ABORTED);
        assert_non_null(strstr(r.err, "a shared-memory race in block"));
    }
}

/* __syncwarp where two warps meet: the detector reports it even in the
 * fixed order, where both warps have written before either reads. */
static void warp_sync_across_warps_is_found(void **state)
{
    (void)state;
    assert_int_equal(run_child(RACE_WARP_PLANTED, 0, 0).outcome, RIGHT);
    for (int seed = 0; seed <= 2; seed++) {
        struct run r = run_child(RACE_WARP_PLANTED, seed, 1);
        assert_int_equal(r.outcome, ABORTED);
        assert_non_null(strstr(r.err, "a shared-memory race in block"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(right_kernels_pass_in_every_order),
        cmocka_unit_test(missing_barrier_is_found),
        cmocka_unit_test(warp_sync_across_warps_is_found),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
