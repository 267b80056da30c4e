/* worker_speed.h - a worker measures its own speed when it starts, so that
 * the estimator knows each worker's pace (SPEC §3).
 *
 * It runs `<alallo_bin> bench train --shape base --steps 17 --threads N` as a
 * child, bounded in time, and reads the one JSON object that bench prints.
 * A worker whose attempts train on the GPU adds `--device cuda` (first), so
 * that its pace is the GPU trainer's (docs/worker.md, "GPUs").
 */
#ifndef ALALLO_WORKER_WORKER_SPEED_H
#define ALALLO_WORKER_WORKER_SPEED_H

#include <signal.h>
#include <stddef.h>

#include "core/bench_speed.h"

/* Runs the benchmark with `threads` threads on `device` ("cpu" or "cuda",
 * as the worker's attempts train: worker_trainer_device) for at most
 * timeout_s seconds, or until *stop (may be NULL) becomes non-zero. Returns
 * 0 with *out filled, or -1 with a one-line reason in err (and *out zeroed:
 * speed unknown). */
int worker_speed_measure(const char *alallo_bin, int threads, const char *device, int timeout_s,
                         volatile sig_atomic_t *stop, struct bench_speed *out /* OUT */,
                         char *err, size_t errcap);

#endif
