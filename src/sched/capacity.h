/* capacity.h - the capacity model: what a worker offers and how fast a job
 * runs on it. Pure: no I/O, no clock, no allocation.
 *
 * A worker declares its memory, CPU cores, class (on-demand or spot) and
 * hourly price, and measures its own speed when it starts (a short training
 * benchmark, src/worker/worker_speed.h). The speed is kept as effective
 * FLOP/s, so that one measurement serves every model size: the pace of a
 * job on a worker is the worker's FLOP/s divided by the model FLOPs per
 * token of that job (FACTS.md: full 6N + 6LdT, LoRA ~ 4N + 6N_lora).
 *
 * What the formulas leave out (dequantisation of 4-bit weights, optimizer
 * time, short sequences) is learnt by the estimator's calibration per
 * (method, worker class); see docs/estimator.md.
 *
 * The caller owns every struct; nothing here keeps a pointer.
 */
#ifndef ALALLO_SCHED_CAPACITY_H
#define ALALLO_SCHED_CAPACITY_H

#include <stdbool.h>
#include <stdint.h>

#include "core/worker_state.h"

#define CAPACITY_NAME_MAX 64

enum worker_class { WORKER_ON_DEMAND = 0, WORKER_SPOT, WORKER_CLASS_COUNT };

struct sched_worker {
    char name[CAPACITY_NAME_MAX];
    int cpus;
    int64_t mem_bytes;        /* memory it offers to one attempt            */
    enum worker_class class_;
    double price_per_hour;    /* in the service's currency                  */
    double flops;             /* measured effective FLOP/s; <= 0: unknown   */
    double bench_params;      /* the parameters of the model it was measured
                                 on, and its FLOP/s on a smaller one at the
                                 same bench (capacity_worker_flops_for); 0:
                                 unknown                                     */
    double small_params, small_flops;
    enum worker_state state;
    int64_t running_attempt;  /* 0 when idle; one attempt at a time         */
    double busy_until_s;      /* when its running attempt is expected to end
                                 (same clock as `now` everywhere); ignored
                                 when running_attempt is 0                   */
    double busy_low_s;        /* the range of that end, from the attempt's  */
    double busy_high_s;       /* own time left (time_left.h); 0: unknown,
                                 read as busy_until_s (the estimator's wait
                                 range, docs/estimator.md)                 */
    int gpus;                 /* GPUs declared; 0: a CPU worker             */
    char gpu_kind[32];        /* e.g. "h200"; the estimator's key           */
    int64_t gpu_mem_bytes;    /* memory of one GPU                          */
    double silent_s;          /* seconds since its last heartbeat; 0 when the
                                 caller does not know (a lost worker then
                                 counts as gone)                            */
    double speed_log;         /* the worker's own speed correction applied to
                                 flops and small_flops, in logs (> 0: slower
                                 than its bench; capacity_correct_speed)    */
};

/* How long a lost worker still counts as capacity that may come back: a
 * busy machine misses a few heartbeats, a node reboots. While it does, a
 * job that only it could run waits (is accepted, stays queued) rather
 * than failing "Not available right now."; nothing is ever placed on a
 * lost worker. */
#define CAPACITY_RETURN_GRACE_S 900.0

/* True when `w` counts when judging whether a job fits anywhere: it is not
 * lost, or was lost less than CAPACITY_RETURN_GRACE_S ago (silent_s). */
bool capacity_may_run(const struct sched_worker *w);

/* "on-demand" / "spot"; NULL for an out-of-range value. */
const char *capacity_class_name(enum worker_class c);
/* Parses "on-demand" or "spot"; false otherwise. */
bool capacity_class_parse(const char *s, enum worker_class *out /* OUT */);

/* The FLOP/s a worker stands for when it measured `tokens_per_s` on a shape
 * of `flops_per_token`. 0 when either is not positive. */
double capacity_flops_from_reference(double tokens_per_s, double flops_per_token);

/* The speed the capacity model uses for `w`: its measured FLOP/s, or, when
 * it has not measured yet, a deliberately slow 1 GFLOP/s per core (so an
 * unmeasured worker is never preferred for being "fast"). Always > 0. */
double capacity_worker_flops(const struct sched_worker *w);

/* The speed for a model of `params` (active) parameters: a model smaller
 * than the bench's runs at fewer FLOP/s (narrower products, the same
 * fixed work a step), so where w measured the small shape too
 * (small_params, small_flops) its figure is read between the two points,
 * in logs of the parameters, and at the small point's below it. At or
 * above the bench's size, params unknown (<= 0) or one point only:
 * capacity_worker_flops(w). A second point never makes a model faster than
 * the bench, and never more than 1/CAPACITY_SMALL_RATIO_MIN slower. */
double capacity_worker_flops_for(const struct sched_worker *w, double params);
#define CAPACITY_SMALL_RATIO_MIN (1.0 / 64)

/* Applies a worker's own speed correction (est_worker_speed_logs), in
 * logs: its measured FLOP/s (both bench points) divided by exp(log_slower),
 * kept in w->speed_log. A correction that is not finite is 0. */
void capacity_correct_speed(struct sched_worker *w, double log_slower);

/* Expected seconds of training for `work_flops` FLOPs of a model of
 * `params` active parameters on `w` (capacity_worker_flops_for). */
double capacity_train_seconds(double work_flops, double params, const struct sched_worker *w);

/* Expected tokens per second of a job of `flops_per_token` on `w`. */
double capacity_pace_tokens_per_s(double flops_per_token, const struct sched_worker *w);

/* Money for `seconds` of the worker's time at `price_per_hour`, in
 * millionths of the currency unit (micros), rounded to the nearest. */
int64_t capacity_price_micros(double price_per_hour, double seconds);

#endif
