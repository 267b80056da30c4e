/* engine.h - attempts run by an engine (exec/executor.h: a Slurm cluster,
 * or local processes), the control side (docs/slurm.md).
 *
 * Each pool of the engine declares slots; each slot is a worker row of the
 * store (`ENGINE:POOL:K`, e.g. `slurm:spot:0`) with the pool's class, price
 * and memory, so that the scheduling pass places jobs on pools exactly as
 * on registered workers. The engine keeps its slots alive, and for a job the
 * pass places on a free slot:
 *   1. claims it (lifecycle_claim_engine: a new attempt and fence, recorded
 *      with engine_state "submitting" before anything is submitted);
 *   2. writes the attempt's token (0600; only its hash is stored) and batch
 *      script (0700) into DATA/jobs/JOB/attempts/ATT/, submits it tagged
 *      `alallo-ATT`, and records the engine's id and "pending";
 *   3. polls the engine every ENGINE_POLL_S: pending (with the engine's
 *      reason in plain words, an event when it changes), running (when, on
 *      which node; the start timeout counts from then);
 *   4. reconciles by tag at start-up and every ENGINE_RECONCILE_S:
 *      resubmits an attempt whose submit was lost, ends one whose engine job
 *      vanished (the job re-schedules from its latest checkpoint), cancels
 *      engine jobs no open attempt owns;
 *   5. ends an attempt whose runner fell silent for --worker-timeout
 *      ("worker lost", its engine job cancelled), cancels a pending attempt
 *      of a cancelled job in the engine at once, and a running one's engine
 *      job once its runner has had the stop grace to checkpoint.
 * The runner (`alallo attempt run`, worker/attempt_runner.h) calls
 * engine_attempt_start and engine_attempt_heartbeat through /internal.
 *
 * Threads: one thread of its own does 1-5; the executor is only called
 * from it. The calls from request threads read the configuration (fixed
 * after engine_start) and the store. Ownership: the engine opens and owns
 * its executor.
 */
#ifndef ALALLO_CONTROL_ENGINE_H
#define ALALLO_CONTROL_ENGINE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control/control.h"
#include "core/trainer_protocol.h"
#include "exec/executor.h"
#include "exec/pool.h"

#define ENGINE_POOLS_MAX 16
#define ENGINE_SLOTS_MAX 256 /* slots of all pools together */
#define ENGINE_POLL_S 2
#define ENGINE_RECONCILE_S 30
#define ENGINE_DEFAULT_LEAD_S 60 /* the runner stops its trainer this long before
                                  * the engine's time limit */
#define ENGINE_TIME_SLACK_MIN 5  /* --time above the job's remaining limit */
#define ENGINE_SERVING_MAX 16    /* serving engines on a pool's nodes */
#define ENGINE_SERVE_POOLS_MAX 8 /* pools with serving engines */
#define ENGINE_SERVE_IDLE_S 300  /* an engine beyond MIN idle this long stops */

/* A pool as the engine runs it: the operator's declaration (exec/pool.h)
 * and what the engine learnt of its partition at start. */
struct engine_pool {
    struct exec_pool decl;
    long max_time_min;        /* the partition's MaxTime; 0: none or unknown */
    int lead_s;               /* see ENGINE_DEFAULT_LEAD_S                   */
};

/* One --inference-pool: the serving engines of one pool. */
struct engine_serve {
    char pool[64];
    int count;                    /* N, or MAX                                    */
    int min;                      /* N, or MIN                                    */
    bool scaled;                  /* MIN < MAX                                    */
};

struct engine_config {
    struct engine_pool pools[ENGINE_POOLS_MAX];
    int n_pools;
    char server_url[256];         /* the URL runners call ("http://HOST:PORT")     */
    char launcher[EXEC_PATH_MAX]; /* what the batch script runs the runner under,
                                   * e.g. "/usr/bin/srun --kill-on-bad-exit=1";
                                   * "" runs it directly                          */
    char map_from[512], map_to[512]; /* --cluster-data: the server's prefix of the
                                      * data folder and the nodes' one; "" none    */
    int stop_grace_s;             /* a running attempt's engine job is cancelled
                                   * this long after its cancel was asked (30)    */
    /* --inference-pool POOL[:N], once per pool: N serving engines
     * (control/serving_jobs.h) run as jobs of pool POOL, taking N of its
     * slots. POOL:MIN-MAX (scaled): from MIN to MAX (count) engines as the
     * requests ask (sched/serve_scale.h), an engine beyond MIN taking a
     * slot no attempt runs on and giving it back after serve_idle_s with
     * nothing to do; across pools, one more goes to the cheapest pool with
     * a free slot and one fewer leaves the dearest. */
    struct engine_serve serve[ENGINE_SERVE_POOLS_MAX];
    int n_serve;
    int serve_idle_s;             /* 0: ENGINE_SERVE_IDLE_S                      */
    long long serve_memory;       /* each engine's --model-memory; 0: its default */
    int serve_running;            /* each engine's --max-running; 0: its default  */
};

/* Parses one --slurm-pool SPEC (exec/pool.h) into *p. Returns 0, or -1
 * with a one-line reason in err. */
int engine_pool_parse(const char *spec, struct engine_pool *p /* OUT */, char *err,
                      size_t errcap);

/* Parses one --inference-pool SPEC (POOL, POOL:N or POOL:MIN-MAX) and
 * adds it to cfg's serve[]. Returns 0, or -1 with a one-line reason in err
 * (a form it does not take, a pool named twice, more than
 * ENGINE_SERVE_POOLS_MAX). */
int engine_serve_parse(const char *spec, struct engine_config *cfg, char *err, size_t errcap);

/* Replaces the prefix map_from of `path` with map_to (a path the nodes
 * see). A path outside map_from, or no map, is copied. False when it does
 * not fit. */
bool engine_map_path(const struct engine_config *cfg, const char *path, char *out, size_t cap);

struct engine;

/* Opens the executor `kind` ("slurm": Slurm's tools found in PATH, for the
 * cluster SLURM_CONF names; "process": local child processes) and starts
 * the engine over it: asks the engine for each pool's partition
 * (its MaxTime, and its slots when the declaration gave none), declares
 * the pools' slots, reconciles once, and starts its thread. Sets ctl->engine. Returns 0, or -1 with a
 * reason in err. */
int engine_start(struct control *ctl, const char *kind, const struct engine_config *cfg,
                 char *err, size_t errcap);

/* Keeps the engine's slots alive (their worker rows' heartbeats), and
 * declares a slot whose row is gone. Called by the server's ticker
 * (control_tick), not by the engine's thread, so that an engine slow to
 * answer (a Slurm controller down) never makes its slots look lost. */
void engine_keep_slots(struct control *ctl);

/* Stops the thread and closes the executor; the engine's jobs keep
 * running (a restarted server reconciles them). NULL is a no-op. */
void engine_stop(struct engine *e);

/* The engine's name ("slurm", "process"). */
const char *engine_name(const struct engine *e);

/* ---- serving engines on a pool's nodes (docs/serving.md, "On a cluster")
 *
 * For each of cfg.serve[], the engine's thread keeps its count of jobs
 * (or, with a range, as many as the requests ask) of that pool running
 * the inference engine (control/serving_jobs.h),
 * their files in DATA/engine/serving; the calls below come from request
 * threads. */

/* Whether `token` is serving engine `id`'s. */
bool engine_serving_token_ok(struct control *ctl, const char *id, const char *token);

/* A serving engine's heartbeat: it listens at host:port on `node`, and
 * `stats` is its state (or NULL). Notes it in ctl->serving. ERR_NOT_FOUND
 * for an id this engine does not run; *stop is true for one no longer
 * wanted. */
enum alallo_err engine_serving_heartbeat(struct control *ctl, const char *id, const char *node,
                                         const char *host, int port, const json_t *stats,
                                         bool *stop /* OUT */);

/* What a runner is told when it starts (engine_attempt_start). */
struct engine_start_answer {
    struct store_attempt attempt;
    struct store_job job;
    json_t *spec;       /* owned by the caller; paths as the nodes see them */
    int cpus;           /* the trainer's threads                              */
    int gpus;           /* GPUs the slot holds (the pool's gres), 0: none     */
    double deadline_s;  /* from now: stop the trainer with a checkpoint then */
    int heartbeat_s;
};

/* The start call of attempt `attempt_id`'s runner: records the runner's
 * engine id and node, counts as a heartbeat, and hands it the spec and
 * fence. One runner per attempt: the same runner calling again (same
 * engine id and node: an answer it lost) gets the same answer;
 * ERR_CONFLICT when another runner (another engine job, or the same job id
 * on another node) has started the attempt, checked and recorded in one
 * transaction, so that of two runners starting at once one is refused.
 * ERR_FENCED when the attempt no longer owns its job (or the job is being
 * cancelled); ERR_NOT_FOUND when the attempt is unknown or not an
 * engine's. */
enum alallo_err engine_attempt_start(struct control *ctl, const char *attempt_id,
                                     const char *engine_id, const char *node,
                                     struct engine_start_answer *out /* OUT */);

/* A runner's heartbeat: ERR_FENCED unless `fence` is its attempt's and the
 * attempt owns its job, or ended with its job's success (the runner is
 * finishing: ERR_OK, nothing recorded). *stop: what to do with the
 * trainer. */
enum alallo_err engine_attempt_heartbeat(struct control *ctl, const char *attempt_id,
                                         int64_t fence, const char *engine_id, const char *node,
                                         enum tproto_stop *stop /* OUT */);

/* Whether `token` is attempt `attempt_id`'s own token (its hash matches;
 * an attempt without one admits none). */
bool engine_attempt_token_ok(struct control *ctl, const char *attempt_id, const char *token);

/* A pool as /v1/workers shows it. */
struct engine_pool_usage {
    char name[64];
    char class_[16];
    double price_per_hour;
    int slots;
    int in_use;   /* slots with an open attempt                 */
    int pending;  /* of those, attempts the engine has not run yet */
    int serving;  /* slots that run a serving engine (--inference-pool) */
};

/* The pools of ctl's engine (none without one). Returns how many (<= cap). */
int engine_pools_usage(struct control *ctl, struct engine_pool_usage *out /* OUT [cap] */,
                       int cap);

#endif
