/* serving_jobs.h - the jobs that run the inference engine on a pool's
 * nodes (serve's --inference-pool POOL[:N]; docs/serving.md, "On a
 * cluster"), as the engine's thread keeps them (control/engine.h).
 *
 * Each of the N is a job of the pool tagged alallo-serve-<pool>-<k> that
 * runs `alallo serving run` (worker/serving_runner.h): the inference
 * engine on its node, reporting where it listens every few seconds. A job
 * that is not listed is submitted again, after a growing pause when it
 * ended within a minute (a pool that cannot run it does not spin); a
 * serving job no pool's set wants (a pool no longer named, beyond the
 * count wanted now) is cancelled. Each
 * submission writes a new token, DIR/<id>.token (0600): the serving job's
 * credential for its heartbeats and its engine's key, read back by the
 * server (serving_jobs_token).
 *
 * A set is one pool's engines; a server with engines on several pools
 * keeps a set for each (ids "<pool>-<k>" are unique across pools: k has
 * no dash).
 *
 * Ownership: serving_jobs_new returns what serving_jobs_free frees.
 * serving_jobs_round, serving_jobs_cancel_unwanted and
 * serving_jobs_set_count are the engine thread's; serving_jobs_wanted and
 * serving_jobs_count may be called from any thread.
 */
#ifndef ALALLO_CONTROL_SERVING_JOBS_H
#define ALALLO_CONTROL_SERVING_JOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec/executor.h"
#include "exec/pool.h"

#define SERVING_JOBS_MAX 16
#define SERVING_ID_MAX 64

struct serving_jobs;
struct serving_registry;

/* What a round needs of the engine and the server. */
struct serving_jobs_env {
    struct executor *x;
    const char *dir;          /* DATA/engine/serving                    */
    const char *node_dir;     /* the same folder as the nodes see it    */
    const char *bin;          /* alallo, as the nodes run it            */
    const char *server_url;   /* what the runners call                  */
    const char *launcher;     /* e.g. "srun --kill-on-bad-exit=1", or "" */
    const struct exec_pool *pool;     /* the pool the engines run on */
    long max_time_min;        /* the pool's MaxTime; 0: none known      */
    long long memory;         /* each engine's --model-memory; 0: default */
    int max_running;          /* each engine's --max-running; 0: default */
    struct serving_registry *registry; /* told of the jobs that end    */
};

/* Up to `max` engines on pool `pool` (ids "<pool>-0" ...), all wanted
 * until serving_jobs_set_count says fewer. NULL when out of memory or the
 * pool's name makes no tag. */
struct serving_jobs *serving_jobs_new(const char *pool, int max);
void serving_jobs_free(struct serving_jobs *sj); /* NULL is fine */

/* The engines wanted now are the first `count` (0 to max; the engine's
 * thread sets it, sched/serve_scale.h decides): the next round submits
 * those not running and cancels the rest. 0 for sj NULL. */
void serving_jobs_set_count(struct serving_jobs *sj, int count);
int serving_jobs_count(const struct serving_jobs *sj);

/* Engine k's id (k < max). */
const char *serving_jobs_id(const struct serving_jobs *sj, int k);

/* After a list of the engine's jobs (jobs[n]) at listed_ms: submits the
 * wanted ones of sj's pool (env->pool) not listed. */
void serving_jobs_round(struct serving_jobs *sj, const struct serving_jobs_env *env,
                        const struct exec_job *jobs, int n, int64_t now_ms, int64_t listed_ms);

/* After the same list: cancels the listed serving jobs that none of
 * sets[n_sets] wants (every one when n_sets is 0), and forgets them in
 * registry. */
void serving_jobs_cancel_unwanted(struct serving_jobs *const *sets, int n_sets,
                                  struct executor *x, struct serving_registry *registry,
                                  const struct exec_job *jobs, int n);

/* Whether `id` is one of the engines wanted of sj (NULL: none), or of
 * any of sets[n_sets]. */
bool serving_jobs_wanted(const struct serving_jobs *sj, const char *id);
bool serving_jobs_wanted_any(struct serving_jobs *const *sets, int n_sets, const char *id);

/* Serving job id's token, read back from DIR/<id>.token. */
bool serving_jobs_token(const char *dir, const char *id, char *out, size_t cap);

#endif
