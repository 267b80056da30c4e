/* worker.h - a worker: runs training attempts on one node's capacity.
 *
 * worker_run speaks the worker protocol (docs/worker-protocol.md) to the
 * server at cfg->server_url, and starts one trainer process per attempt
 * (docs/trainer-protocol.md). It is used by `alallo worker` (a process of its
 * own) and by `alallo serve` for local workers (one thread each).
 *
 * Ownership: the caller owns the config and the stop flag; worker_run only
 * reads them. worker_run keeps no global state and installs no signal
 * handlers, so several may run in one process. See docs/worker.md.
 */
#ifndef ALALLO_WORKER_WORKER_H
#define ALALLO_WORKER_WORKER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The hourly price of a worker declared without `price=`: a nominal
 * on-demand rate, so that a fresh `make run` shows real amounts for
 * estimates, charges and cancels. An operator sets price=0 for a free
 * worker (docs/operations.md). */
#define WORKER_DEFAULT_PRICE_PER_HOUR 0.40

/* The most GPUs one worker may declare (docs/worker.md, "GPUs"). */
#define WORKER_GPUS_MAX 64

struct worker_config {
    char name[64];
    char server_url[256];   /* e.g. "http://127.0.0.1:8080"                   */
    char token[128];        /* the worker token                                */
    int cpus;               /* compute threads given to each trainer           */
    int64_t mem_bytes;      /* memory this worker offers                       */
    double price_per_hour;  /* in the service's currency                      */
    char class_[16];        /* "on-demand" or "spot"                           */
    char accelerator[32];   /* "cpu" unless a real accelerator is declared     */
    int gpus;               /* GPUs declared (0: none); each attempt holds all */
    char gpu_kind[32];      /* e.g. "h200"; "" when gpus is 0                  */
    int64_t gpu_mem_bytes;  /* memory of one GPU; 0 when gpus is 0            */
    bool trainer_cuda;      /* alallo_bin was built with the CUDA backend: set
                             * by the caller (src/app, from
                             * train_device_cuda_built()), since this layer may
                             * not ask src/train; false by default            */
    char alallo_bin[512];   /* path of the binary to start as `alallo train`  */
    char work_dir[512];     /* folder for attempt configs and worker logs;
                             * "" means ./alallo-worker-<name>                 */
    int stop_grace_s;       /* SIGTERM to SIGKILL of a trainer (default 30)    */
    int bench_timeout_s;    /* bound on the speed measurement at start
                             * (default 120); 0 skips it: speed unknown        */
};

/* Fills defaults: this machine's CPUs and memory, price 0, "on-demand",
 * "cpu", the running binary (/proc/self/exe), the host name as the worker
 * name, an empty server URL and token. */
void worker_config_defaults(struct worker_config *cfg /* OUT */);

/* The device this worker's attempts train on, written as "device" into
 * every ATTEMPT.json and declared as "trainer" at registration: "cuda" when
 * it declares GPUs and its trainer was built with CUDA, else "cpu"
 * (docs/worker.md, "GPUs"). */
const char *worker_trainer_device(const struct worker_config *cfg);

/* The one warning line of a worker that declares GPUs but whose trainer was
 * built without CUDA, written to cap bytes of out; "" (returns false) for
 * any other worker. */
bool worker_gpu_warning(const struct worker_config *cfg, char *out /* OUT */, size_t cap);

/* Parses a --local-worker SPEC "name=small,cpus=1,mem=2G,price=0.40,class=spot"
 * on top of what cfg holds (keys: name, cpus, mem, price, class,
 * accelerator, gpus, gpu_kind, gpu_mem; sizes take K, M, G or T suffixes,
 * powers of 1024). Returns 0, or -1 with a one-line reason in err; cfg may
 * then be partly updated. A SPEC that declares GPUs must be complete:
 * call worker_config_check once every SPEC and option is applied. */
int worker_config_parse_spec(struct worker_config *cfg, const char *spec, char *err, size_t errcap);

/* The checks across keys, once the whole declaration is parsed: gpus needs
 * gpu_kind and gpu_mem, and gpu_kind or gpu_mem need gpus. Returns 0, or -1
 * with a one-line reason in err. */
int worker_config_check(const struct worker_config *cfg, char *err, size_t errcap);

/* True when `name` is 1 to 63 letters, digits, '-', '_' or '.', not
 * starting with '.': safe in URL paths and file names. */
bool worker_name_valid(const char *name);

/* Parses a size such as "2G", "512M", "1048576" into bytes. Returns 0, or -1
 * on a bad or out-of-range value. */
int worker_parse_size(const char *text, int64_t *out /* OUT */);

/* A --token argument: the token itself, or "@FILE" for the first line of
 * FILE. Returns 0, or -1 (unreadable, empty, or longer than cap - 1). */
int worker_read_token(const char *arg, char *out /* OUT */, size_t cap);

/* Where an engine's job runs, from the engine's environment: its job id
 * (SLURM_JOB_ID, or ALALLO_ENGINE_ID from the process engine; "" when
 * neither) and the node (SLURMD_NODENAME, else the host name). */
void worker_engine_place(char *engine_id, size_t idcap, char *node, size_t nodecap);

/* Installs `on` for SIGTERM and SIGINT (the signals that stop a worker or
 * an attempt runner) and ignores SIGPIPE (a broken connection must be an
 * error from curl, not a dead process). For the commands' main only. */
void worker_catch_stop_signals(void (*on)(int));

/* Runs until *stop becomes non-zero (then stops its trainer with SIGTERM,
 * finishes the attempt and returns 0). Returns non-zero if it cannot
 * register with the server after retrying for 30 s (or at once when the
 * server refuses the token or the declaration). Thread-safe: several
 * workers may run in one process. */
int worker_run(const struct worker_config *cfg, volatile sig_atomic_t *stop);

#endif
