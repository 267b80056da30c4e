/* control.h - the service behind the API: the state one `alallo serve`
 * holds to change jobs and workers, shared by every request thread and
 * the server's ticker.
 *
 * The control layer owns the store, the catalog of base models and the
 * scheduler's link (calibration history and the pass). It
 * decides with src/sched, keeps with src/store and knows nothing of HTTP:
 * the API (src/api) calls it, and src/app wires the two together.
 * Everything reachable from a struct control is thread-safe.
 *
 * This header is the state only, which every file of src/control uses;
 * opening, taking the lead and closing are service.h, the ticker tick.h.
 */
#ifndef ALALLO_CONTROL_CONTROL_H
#define ALALLO_CONTROL_CONTROL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/clock.h"
#include "core/err.h"
#include "control/webhook_target.h"
#include "core/log.h"
#include "store/store.h"

struct control_config {
    char data_dir[512];   /* absolute */
    char models_dir[512]; /* absolute; base models, one folder each */
    int worker_timeout_s; /* a worker silent this long is lost (default 10) */
    int heartbeat_s;      /* what workers are told to use (default 2) */
    int64_t time_limit_s; /* running time per job across attempts (default 12 h) */
    double budget_multiple; /* stop past this x the upper estimated time (default 2) */
    char webhook[512];      /* "" for none */
    /* internal ranges accounts' webhooks may reach (--webhook-allow;
       webhook_target.h); none by default */
    struct webhook_allow webhook_allow;
    int start_timeout_s;    /* an attempt not `started` this long is ended (default 300) */
    int start_tries;        /* attempts that never start before the job fails (default 3) */
    double plan_scale;      /* memory plan x this (tests; default 1) */
    double pass_reuse_s; /* a claim this soon after a pass takes what that pass
                            assigned it (default 0.5; sched_link.h) */
    bool standby; /* open as a standby, leading only once leadership.h says
                     so (default false: lead at once) */
    int generate_threads; /* threads of a generation, engine or child
                             (--inference-threads); 0: every CPU (default) */
};

/* Fills the defaults documented in docs/operations.md. */
void control_config_defaults(struct control_config *cfg /* OUT */);

struct control_metrics {
    atomic_long internal_failures;
    atomic_long jobs_created;
    /* scheduling passes: how many, and their wall time in microseconds
     * (the sum, the latest and the longest); the jobs the latest read */
    atomic_long passes;
    atomic_long pass_us_sum;
    atomic_long pass_us_last;
    atomic_long pass_us_max;
    atomic_long pass_jobs_last;
    atomic_long pass_cpu_us_sum; /* CPU time of the passes' threads */
    atomic_long pass_cpu_us_last;
};

struct catalog;
struct leadership;
struct sched_link;
struct engine;
struct inference;
struct serving_registry;

struct control {
    struct control_config cfg;
    struct store *store;
    struct catalog *catalog;
    struct sched_link *sched; /* calibration history and the pass (sched_link.h) */
    struct engine *engine;    /* attempts run by an engine (engine.h); NULL: none */
    struct control_metrics metrics;
    char alallo_bin[512]; /* this binary, for child processes */
    atomic_int leading; /* 1 when this process leads (leadership.h) */
    struct leadership *lead; /* NULL: the only server on its store */
    atomic_int checkpoint_builds; /* checkpoints being made into models (checkpoint_models.h) */
    struct inference *inference; /* the resident engine (inference.h); NULL: a child per request */
    struct serving_registry *serving; /* engines on nodes (serving_registry.h); NULL: none */
};

#endif
