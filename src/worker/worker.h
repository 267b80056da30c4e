/* worker.h - a worker: runs training attempts on one node's capacity.
 *
 * worker_run speaks the worker protocol (docs/worker-protocol.md) to the
 * server at cfg->server_url, and starts one trainer process per attempt
 * (docs/trainer-protocol.md). It is used by `alallo worker` (a process of its
 * own) and by `alallo serve` for local workers (one thread each).
 */
#ifndef ALALLO_WORKER_WORKER_H
#define ALALLO_WORKER_WORKER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

struct worker_config {
    char name[64];
    char server_url[256];   /* e.g. "http://127.0.0.1:8080"                   */
    char token[128];        /* the worker token                                */
    int cpus;               /* compute threads given to each trainer           */
    int64_t mem_bytes;      /* memory this worker offers                       */
    double price_per_hour;  /* in the service's currency                      */
    char class_[16];        /* "on-demand" or "spot"                           */
    char accelerator[32];   /* "cpu" unless a real accelerator is declared     */
    char alallo_bin[512];   /* path of the binary to start as `alallo train`  */
    char work_dir[512];     /* folder for attempt configs and worker logs      */
};

/* Fills defaults: this machine's CPUs and memory, price 0, "on-demand",
 * "cpu", the running binary (/proc/self/exe). */
void worker_config_defaults(struct worker_config *cfg /* OUT */);

/* Parses a --local-worker SPEC "name=small,cpus=1,mem=2G,price=0.40,class=spot"
 * on top of the defaults. Returns 0, or -1 with a reason in err. */
int worker_config_parse_spec(struct worker_config *cfg, const char *spec, char *err, size_t errcap);

/* Runs until *stop becomes non-zero (then stops its trainer with SIGTERM,
 * finishes the attempt and returns 0). Returns non-zero if it cannot
 * register with the server after retrying for 30 s. Thread-safe: several
 * workers may run in one process. */
int worker_run(const struct worker_config *cfg, volatile sig_atomic_t *stop);

#endif
