/* serving_registry.h - the inference engines that run on a cluster's
 * nodes, as their serving jobs report them (docs/serving.md, "On a
 * cluster"): where each listens, its key, what it has loaded and how busy
 * it is. control/engine.c notes each heartbeat; control/inference.c asks
 * it where a generation goes (sched/serve_route.h decides) and for the
 * sum of their stats (/metrics); the API lists it (GET /v1/workers,
 * "serving").
 *
 * An engine not heard from for SERVING_STALE_MS is not chosen (its job
 * may have ended); one not heard from for SERVING_FORGET_MS is dropped.
 *
 * Ownership: the registry copies what it is given; what it returns is the
 * caller's. Thread-safe.
 */
#ifndef ALALLO_CONTROL_SERVING_REGISTRY_H
#define ALALLO_CONTROL_SERVING_REGISTRY_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define SERVING_MAX 64
#define SERVING_STALE_MS 12000
#define SERVING_FORGET_MS 600000
#define SERVING_KEY_MAX 128

struct serving_registry;

/* Where a generation goes: the engine's id, host, port and key. */
struct serving_target {
    char id[64];
    char host[256];
    int port;
    char key[SERVING_KEY_MAX];
};

struct serving_registry *serving_registry_new(void);
void serving_registry_free(struct serving_registry *r); /* NULL is fine */

/* Engine `id` listens at host:port with `key` and reported `stats` (its
 * engine's {"stats": true} answer, or NULL) at now_ms. */
void serving_registry_note(struct serving_registry *r, const char *id, const char *node,
                           const char *host, int port, const char *key, const json_t *stats,
                           int64_t now_ms);

/* Drops engine `id` (its job ended or was cancelled). */
void serving_registry_forget(struct serving_registry *r, const char *id);

/* The engine for a generation of `weights` (with `adapter`, or NULL), as
 * the nodes see those paths: true with *out, false when no engine was
 * heard from lately. */
bool serving_registry_pick(struct serving_registry *r, const char *weights,
                           const char *adapter, int64_t now_ms,
                           struct serving_target *out /* OUT */);

/* A request found no engine heard from lately (scaled to zero, or all
 * lost): the engine's thread may start one (sched/serve_scale.h). */
void serving_registry_missed(struct serving_registry *r, int64_t now_ms);

/* What the engines ids[0..n) last reported, for the scaling of a pool's
 * engines: how many were heard from lately, the requests waiting at
 * them, whether the last of them (ids[n-1]) was heard from lately and how
 * long it has had nothing to do (0: it has work, or was not heard from
 * lately), and how long ago a request found no engine (-1: none did). */
struct serving_load {
    int fresh;
    long waiting;
    bool last_fresh;
    int64_t last_idle_ms;
    int64_t missed_ago_ms;
};
void serving_registry_load(struct serving_registry *r, const char *const *ids, int n,
                           int64_t now_ms, struct serving_load *out /* OUT */);

/* How many engines were heard from lately. */
int serving_registry_fresh(struct serving_registry *r, int64_t now_ms);

/* The engines' stats summed (each integer field), with "engines": how
 * many were heard from lately; NULL when none was. */
json_t *serving_registry_stats(struct serving_registry *r, int64_t now_ms);

/* [{id, node, host, port, fresh, seen_at, models, model_bytes,
 * model_memory, running, waiting}] for GET /v1/workers (no keys). */
json_t *serving_registry_list(struct serving_registry *r, int64_t now_ms);

#endif
