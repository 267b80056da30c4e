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

/* A second point of the same bench, on a model 20x smaller
 * (BENCH_SPEED_SMALL_SHAPE, run first, a tenth of a second on a CPU):
 * FLOP/s fall with a model's width, so a model smaller than the bench's
 * is given a speed between the two points (capacity_worker_flops_for)
 * instead of the bench's, at which a new service estimated the tiny
 * shape's first job 10x too short and capped it at a tenth of its price.
 * The pair is kept as BENCH_SPEED_MARK; a speed kept without it is
 * measured again (bench_speed_is_current). On a CPU both are measured by
 * one process, `--shape BENCH_SPEED_SHAPES` (its start-up and the CPU's
 * peaks paid once); a GPU's bench runs one process a shape. */
#define BENCH_SPEED_SMALL_SHAPE "tiny"
#define BENCH_SPEED_SHAPES BENCH_SPEED_SMALL_SHAPE "," BENCH_SPEED_SHAPE
#define BENCH_SPEED_MARK "base+tiny"

struct bench_speed {
    double tokens_per_s;  /* 0 when unknown */
    double flops;         /* achieved FLOP/s; 0 when unknown */
    double params;        /* the bench model's parameters; 0 when unknown */
    double small_params;  /* BENCH_SPEED_SMALL_SHAPE's parameters and */
    double small_flops;   /* FLOP/s; both 0 when it was not measured   */
};

/* Reads bench's output: the last line that is a JSON object with a positive
 * "tokens_per_s" and a "shape" other than BENCH_SPEED_SMALL_SHAPE (or the
 * whole text as one pretty-printed object). The pace
 * is "tokens_per_s_median" where that is positive (the CPU bench's median
 * step), else "tokens_per_s". FLOP/s
 * come from "flops_per_s" or "flops", else from the pace ×
 * "flops_per_token", else from "mfu" × "peak_fp32_flops" (or
 * "peak_flops"), else 0; params from "params". The last line of the small
 * shape, where there is one, gives small_params and small_flops (both or
 * neither). Returns 0, or -1 with *out zeroed. text may be NULL. */
int bench_speed_parse(const char *text, struct bench_speed *out /* OUT */);

/* A speed as the server keeps it (a worker's or a pool slot's `speed`):
 * `{"tokens_per_s":…,"flops":…,"bench":BENCH_SPEED_MARK}`, with
 * `"params":…` and `"small":{"params":…,"flops":…}` where known. Returns
 * a new object, or NULL when out of memory. */
struct json_t;
struct json_t *bench_speed_json(const struct bench_speed *sp);

/* The speed `obj` (a registration's "speed", or bench_speed_json's) into
 * *out: numbers that are not finite and positive read as 0, and the small
 * point only whole. obj may be NULL (all 0). */
void bench_speed_from_json(const struct json_t *obj, struct bench_speed *out /* OUT */);

/* Whether a speed kept as JSON (a pool slot's) was measured by today's
 * start-up bench: its "bench" is BENCH_SPEED_MARK. A speed kept from an
 * older bench is not, and is measured again: the estimator's learnt
 * factors are relative to one bench. speed may be NULL. */
bool bench_speed_is_current(const char *speed);

#endif
