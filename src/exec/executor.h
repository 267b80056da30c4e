/* executor.h - engines that run one attempt as one of their own jobs (a
 * Slurm job today; docs/slurm.md). The control layer decides what runs
 * where and when (pools, goals, fairness, moves, billing); an engine only
 * submits, reports, cancels and lists what it was given, found by a tag:
 * the name `alallo-<attempt id>`, never the engine's own job id (a Slurm
 * controller that crashes can reuse ids).
 *
 * Implementations: exec/slurm.c (sbatch/squeue/scancel/scontrol through
 * their command lines with fixed output formats; no libslurm) and
 * exec/process.c (the attempt's script run as a local child process, for
 * machines and tests without Slurm). Both are safe to call from one
 * thread at a time per struct executor; the caller serialises.
 *
 * Ownership: the caller owns every struct it passes; an executor copies
 * what it keeps. Nothing here touches the store.
 *
 * Callers go through the executor_* functions at the end of this file
 * (they check arguments and fill x->error); the ops table is what an
 * engine implements. After any call that fails, x->error says why in one
 * line a user can read, with the engine's own message (a command's
 * stderr) where there is one.
 */
#ifndef ALALLO_EXEC_EXECUTOR_H
#define ALALLO_EXEC_EXECUTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define EXEC_TAG_PREFIX "alallo-"
#define EXEC_BENCH_PREFIX "alallo-bench-" /* a pool's bench job, not an attempt's */
#define EXEC_SERVE_PREFIX "alallo-serve-" /* a pool's serving engine, not an attempt's */
#define EXEC_ID_MAX 32     /* an engine's job id, with its NUL */
#define EXEC_TAG_MAX 64    /* alallo-<attempt id>, with its NUL */
#define EXEC_REASON_MAX 160
#define EXEC_PATH_MAX 1024

/* What one submission asks of the engine (a pool's settings plus the
 * attempt's plan). Strings "" mean "not given". */
struct exec_submit {
    char tag[EXEC_TAG_MAX];        /* alallo-<attempt id>                          */
    char partition[64];
    char qos[64], account[64], constraint[128];
    char gres[64];                 /* e.g. "gpu:a100:1", "" for none              */
    int cpus;                      /* CPUs for the one task                        */
    int64_t mem_mb;                /* memory per node, MiB                          */
    long time_limit_min;           /* --time; 0: the partition's default           */
    int signal_lead_s;             /* --signal=USR1@lead; 0: none                  */
    char script[EXEC_PATH_MAX];    /* the batch script (written, fsynced, 0700)    */
    char output[EXEC_PATH_MAX];    /* stdout/stderr of the engine's job            */
    char workdir[EXEC_PATH_MAX];
    char comment[128];             /* shown to the cluster's operators (squeue %k), e.g.
                                      "alallo:<job id>:<fence>"; never read back    */
};

/* An engine job as the engine reports it. */
enum exec_state {
    EXEC_PENDING,   /* accepted, not running yet (reason says why)          */
    EXEC_RUNNING,
    EXEC_ENDED,     /* completed, failed, cancelled, timed out, preempted… */
};

struct exec_job {
    char id[EXEC_ID_MAX];
    char tag[EXEC_TAG_MAX];
    enum exec_state state;
    char raw_state[24];             /* the engine's own word (RUNNING, NODE_FAIL…) */
    char raw_reason[48];            /* the engine's own reason word, "" for none   */
    char reason[EXEC_REASON_MAX];   /* plain words: why pending, or how it ended;
                                       "" while running                          */
    char node[64];                  /* where it runs, "" before                    */
    int64_t start_ms;               /* when it started or is expected to, 0: unknown */
};

/* What the engine made of one submission. */
struct exec_receipt {
    char id[EXEC_ID_MAX];          /* the engine's job id (a Slurm ";cluster" cut off) */
    long time_limit_min;           /* the limit asked of the engine; 0: its default */
    bool clamped;                  /* the caller's limit was above the partition's  */
    char note[EXEC_REASON_MAX];    /* when clamped: a sentence for the job's log    */
};

/* What one partition (Slurm) or machine (process) can hold, counting only
 * nodes that take work now (not down, drained or failing). */
struct exec_capacity {
    int nodes;                     /* nodes in the partition                       */
    int nodes_up;
    int cpus;                      /* CPUs on the nodes up                         */
    int64_t mem_mb;                /* memory on the nodes up, MiB                  */
    int gpus;                      /* GPUs of the asked type on the nodes up       */
    int max_gpus_per_node;         /* the most such GPUs one node up has           */
    long max_time_min;             /* the partition's MaxTime; 0: unlimited        */
};

struct executor;

struct executor_ops {
    /* Submits one job. ERR_OK with the engine's job id in id. On a reply
     * lost (timeout), ERR_UNAVAILABLE: the caller finds out by listing. */
    enum alallo_err (*submit)(struct executor *x, const struct exec_submit *s,
                              char id[EXEC_ID_MAX] /* OUT */);
    /* Lists the engine's jobs whose tag starts with EXEC_TAG_PREFIX,
     * including those ended recently (Slurm: within MinJobAge). Writes at
     * most cap into out and the total into *n. */
    enum alallo_err (*list)(struct executor *x, struct exec_job *out /* OUT [cap] */, int cap,
                            int *n /* OUT */);
    /* Cancels every job tagged `tag` (pending or running); no job: ERR_OK. */
    enum alallo_err (*cancel)(struct executor *x, const char *tag);
    void (*close)(struct executor *x);
    /* submit, telling what became of the time limit (clamped to the
     * partition's MaxTime, which would otherwise leave the job pending for
     * ever). Same errors as submit. */
    enum alallo_err (*submit_receipt)(struct executor *x, const struct exec_submit *s,
                                      struct exec_receipt *r /* OUT */);
    /* The capacity of `partition` ("" : the engine's default) counting
     * GPUs of type gpu_type ("" : any type). */
    enum alallo_err (*capacity)(struct executor *x, const char *partition, const char *gpu_type,
                                struct exec_capacity *c /* OUT */);
};

#define EXEC_ERROR_MAX 512

struct executor {
    const struct executor_ops *ops;
    char name[16];               /* "slurm", "process"                          */
    char error[EXEC_ERROR_MAX];  /* why the last failed call failed, one line   */
};

/* The tag of attempt `attempt_id`: "alallo-<attempt id>". False when it
 * does not fit or the id is not a safe id. */
bool exec_tag_for(const char *attempt_id, char tag[EXEC_TAG_MAX] /* OUT */);

/* The attempt id a tag names, or false when tag is not one of alallo's
 * attempts' (a bench or serving tag is not: reconciliation leaves those
 * jobs alone). */
bool exec_attempt_of(const char *tag, char *attempt_id /* OUT */, size_t cap);

/* The tag of pool `pool`'s bench job: "alallo-bench-<pool>" (the engine
 * measures a pool's speed with it, control/engine.h). False when it does
 * not fit or the name is not a safe name. */
bool exec_bench_tag_for(const char *pool, char tag[EXEC_TAG_MAX] /* OUT */);

/* The tag of serving engine `id` ("<pool>-<k>", control/engine.h):
 * "alallo-serve-<id>". False when it does not fit or is not a safe name. */
bool exec_serve_tag_for(const char *id, char tag[EXEC_TAG_MAX] /* OUT */);

/* Whether tag is one of alallo's: an attempt's, a bench job's or a serving
 * engine's. */
bool exec_tag_is_alallo(const char *tag);

/* Appends 's' (single quotes around s) to the batch script text in out:
 * a path or URL as one word of the shell. False when it does not fit, or
 * s holds a quote or a newline. */
bool exec_script_quote(char *out, size_t cap, const char *s);

/* Stops x and frees it; NULL is a no-op. */
void executor_close(struct executor *x);

/* The calls, through x->ops, with the arguments checked first (a tag that
 * is not alallo's, a script path that is not absolute, a negative limit:
 * ERR_INVALID). r, when not NULL, receives the receipt. */
enum alallo_err executor_submit(struct executor *x, const struct exec_submit *s,
                                struct exec_receipt *r /* OUT, may be NULL */);
enum alallo_err executor_list(struct executor *x, struct exec_job *out /* OUT [cap] */, int cap,
                              int *n /* OUT */);
enum alallo_err executor_cancel(struct executor *x, const char *tag);
enum alallo_err executor_capacity(struct executor *x, const char *partition, const char *gpu_type,
                                  struct exec_capacity *c /* OUT */);

/* The ops->submit of an engine whose submit_receipt does the work. */
enum alallo_err exec_submit_by_receipt(struct executor *x, const struct exec_submit *s,
                                       char id[EXEC_ID_MAX] /* OUT */);

/* Sets x->error (printf, one line, cut to fit) and returns e: for engines. */
enum alallo_err exec_fail(struct executor *x, enum alallo_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
