/* bench_speed.h - what `alallo bench train` prints, read back: the pace
 * that a worker measures at its start (worker/worker_speed.h) and that the
 * engine measures for a pool with a bench job (control/engine.h). Pure: the
 * caller hands in the text. */
#ifndef ALALLO_CORE_BENCH_SPEED_H
#define ALALLO_CORE_BENCH_SPEED_H

#include <stdbool.h>

/* The start-up bench, `alallo bench train --shape BENCH_SPEED_SHAPE --steps
 * BENCH_SPEED_STEPS` (a worker's and a pool's bench job).
 *
 * The shape is the built-in model's (models/alallo-base, 2.4M parameters),
 * the model a new service's first jobs train: the tiny shape (124k) ran
 * at a third of its FLOP/s, so a new service estimated them 3x too long
 * (docs/worker.md). Larger models run at more FLOP/s still, which their
 * learnt factors take up.
 *
 * The first step warms up, the median of the other 16 is the figure: a
 * step takes 10 to 50 ms on a CPU, so a preemption or another process
 * starting moves one or two of them, not the median (the mean of 2 read
 * up to 12x low). */
#define BENCH_SPEED_SHAPE "base"
#define BENCH_SPEED_STEPS "17"

struct bench_speed {
    double tokens_per_s;  /* 0 when unknown */
    double flops;         /* achieved FLOP/s; 0 when unknown */
};

/* Reads bench's output: the last line that is a JSON object with a positive
 * "tokens_per_s" (or the whole text as one pretty-printed object). The pace
 * is "tokens_per_s_median" where that is positive (the CPU bench's median
 * step), else "tokens_per_s". FLOP/s
 * come from "flops_per_s" or "flops", else from the pace ×
 * "flops_per_token", else from "mfu" × "peak_fp32_flops" (or
 * "peak_flops"), else 0. Returns 0, or -1 with *out zeroed. text may be
 * NULL. */
int bench_speed_parse(const char *text, struct bench_speed *out /* OUT */);

/* Whether a speed kept as JSON (a pool slot's `{"tokens_per_s":…,"flops":…,
 * "bench":…}`) was measured by today's start-up bench: its "bench" is
 * BENCH_SPEED_SHAPE. A speed kept from an older bench (no "bench") is not,
 * and is measured again: the estimator's learnt factors are relative to
 * one bench. speed may be NULL. */
bool bench_speed_is_current(const char *speed);

#endif
