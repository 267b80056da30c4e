/* attempt_run.h - one attempt from the trainer's start to the server's
 * finish: writes ATTEMPT.json, starts `alallo train`, relays its events,
 * stops it when asked, and reports how it ended (docs/worker-protocol.md).
 *
 * Shared by the worker (worker.c: after a claim) and the attempt runner
 * (attempt_runner.c: after the start call of an engine's attempt), so that
 * both run, relay and finish the same way.
 *
 * The host owns everything in struct attempt_host; attempt_run only reads
 * it and calls its functions from the calling thread.
 */
#ifndef ALALLO_WORKER_ATTEMPT_RUN_H
#define ALALLO_WORKER_ATTEMPT_RUN_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>

#include "core/trainer_protocol.h"
#include "worker/wapi.h"
#include "worker/wlog.h"

struct attempt_host {
    struct wapi *api;            /* the calling thread's client                       */
    struct wlog *log;
    const char *alallo_bin;      /* started as `alallo train --config ATTEMPT.json`  */
    int cpus;                    /* the trainer's threads                             */
    const char *device;          /* "cpu" or "cuda": ATTEMPT.json's "device"; NULL:
                                  * "cpu"                                             */
    int stop_grace_s;            /* SIGTERM to SIGKILL of the trainer                */
    const char *dir;             /* the attempt's folder (absolute; made here)       */
    volatile sig_atomic_t *stop; /* the host goes away: the trainer checkpoints and
                                  * the attempt ends with stop "move"               */
    double deadline;             /* trainer_proc_now() seconds; past it: as *stop.
                                  * 0: none                                          */
    /* The stop the server asked for (heartbeats, event answers): read and
     * noted through the host, which shares it with its heartbeat thread. */
    enum tproto_stop (*requested)(void *ctx);
    void (*note)(void *ctx, enum tproto_stop k);
    /* True when the server refused a heartbeat with a fence error; may be
     * NULL. */
    bool (*fenced)(void *ctx);
    void *ctx;
};

/* How the attempt's end was reported. */
enum attempt_report {
    ATTEMPT_REPORTED,   /* the server took the finish                          */
    ATTEMPT_FENCED,     /* another attempt owns the job: no finish was sent    */
    ATTEMPT_UNREPORTED, /* the host stopped before the server could be reached */
};

/* Runs attempt `id` holding `fence` with the trainer's `spec` (a JSON
 * object, not changed) from start to finish. While the host runs, the end
 * is retried while the server is away; once *stop is set, for a few
 * seconds more. */
enum attempt_report attempt_run(const struct attempt_host *h, const char *id, long long fence,
                                const json_t *spec);

#endif
