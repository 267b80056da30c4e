/* bench_watch.h - what the engine does with a pool's bench job at one look
 * (control/engine.c, docs/slurm.md "Speed"): wait for it, or cancel it.
 *
 * A bench job (`alallo bench train --shape base --steps 17`) ends within
 * seconds once it runs. Its batch script first writes a start mark
 * (DATA/engine/bench/POOL.started) and only then runs the bench, so that
 * the engine can tell a bench that runs from a ghost: a job a restarted
 * Slurm controller still lists RUNNING (its saved state older than the
 * crash) although its script never ran, or ran and ended while the
 * controller was down. Such a job holds a node's CPUs, memory and GPU
 * until its time limit; alallo cancels it instead:
 *
 *   - listed RUNNING for BENCH_START_MS with no start mark: a ghost;
 *   - started (mark seen) BENCH_RUN_MS ago without complete output: stalled;
 *   - not ended BENCH_TIMEOUT_MS after its submission (queued or running):
 *     too long;
 *   - listed alive while the engine wants no bench of the pool (its speed
 *     known, or a failed bench resting until its retry): unwanted.
 *
 * The first three end the bench as failed (tried again BENCH_RETRY_MS
 * later); the last is cancelled at once. A complete output is read before
 * any of these (the caller's part): a done bench is measured, whatever the
 * controller lists.
 *
 * Pure: no clock, no files, no engine; the caller passes what it saw.
 */
#ifndef ALALLO_CONTROL_BENCH_WATCH_H
#define ALALLO_CONTROL_BENCH_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BENCH_TIMEOUT_MS (10 * 60 * 1000) /* submission to end, queued or running */
#define BENCH_START_MS (60 * 1000)        /* RUNNING to the script's start mark   */
#define BENCH_RUN_MS (5 * 60 * 1000)      /* start mark to complete output        */
#define BENCH_RETRY_MS (60 * 60 * 1000)   /* a failed bench is tried again after  */

enum bench_verdict {
    BENCH_WAIT,     /* leave it                                  */
    BENCH_GHOST,    /* RUNNING, never started: cancel, failed     */
    BENCH_STALLED,  /* started, no output for long: cancel, failed */
    BENCH_TOO_LONG, /* not ended in time: cancel, failed          */
    BENCH_UNWANTED, /* no bench is wanted: cancel                 */
};

/* One look at a pool's live (pending or running) bench job. Times are the
 * engine's own clock, in ms; 0 means "not yet". */
struct bench_look {
    int64_t now_ms;
    bool wanted;              /* the engine follows this bench (not known, not resting) */
    int64_t since_ms;         /* submitted, or found alive after a restart */
    int64_t running_since_ms; /* first known RUNNING (the engine's sight, or the
                               * engine's reported start when earlier)     */
    int64_t marked_ms;        /* when the engine first saw the start mark  */
};

/* The verdict on one look; `why`, when not NULL, gets a sentence for the
 * log ("" for BENCH_WAIT). */
enum bench_verdict bench_judge(const struct bench_look *l, char *why, size_t cap);

#endif
