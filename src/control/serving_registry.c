/* serving_registry.c - the engines on nodes and their last reports (see
 * serving_registry.h). */
#include "control/serving_registry.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "sched/serve_route.h"

struct entry {
    struct serving_target t;
    char node[256];
    json_t *stats; /* owned; NULL when the engine did not answer */
    int64_t seen_ms;
    int64_t busy_ms; /* last reported with work (or first heard from) */
};

struct serving_registry {
    pthread_mutex_t mu;
    struct entry e[SERVING_MAX];
    int n;
    int64_t missed_ms; /* a request last found no engine; 0: never */
};

struct serving_registry *serving_registry_new(void)
{
    struct serving_registry *r = calloc(1, sizeof *r);
    if (r)
        pthread_mutex_init(&r->mu, NULL);
    return r;
}

void serving_registry_free(struct serving_registry *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n; i++)
        json_decref(r->e[i].stats);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static void drop(struct serving_registry *r, int i)
{
    json_decref(r->e[i].stats);
    r->e[i] = r->e[--r->n];
    memset(&r->e[r->n], 0, sizeof r->e[r->n]);
}

/* Drops those not heard from for SERVING_FORGET_MS (r->mu held). */
static void prune(struct serving_registry *r, int64_t now_ms)
{
    for (int i = r->n - 1; i >= 0; i--)
        if (now_ms - r->e[i].seen_ms > SERVING_FORGET_MS)
            drop(r, i);
}

void serving_registry_note(struct serving_registry *r, const char *id, const char *node,
                           const char *host, int port, const char *key, const json_t *stats,
                           int64_t now_ms)
{
    if (!r || !id || !host || !key)
        return;
    pthread_mutex_lock(&r->mu);
    prune(r, now_ms);
    int i = 0;
    while (i < r->n && strcmp(r->e[i].t.id, id) != 0)
        i++;
    int64_t busy_ms = i < r->n ? r->e[i].busy_ms : now_ms;
    if (i == r->n && r->n < SERVING_MAX)
        r->n++;
    if (i < r->n) {
        struct entry *e = &r->e[i];
        json_decref(e->stats);
        memset(e, 0, sizeof *e);
        text_copy(e->t.id, sizeof e->t.id, id);
        text_copy(e->t.host, sizeof e->t.host, host);
        text_copy(e->t.key, sizeof e->t.key, key);
        text_copy(e->node, sizeof e->node, node ? node : "");
        e->t.port = port;
        e->stats = json_is_object(stats) ? json_deep_copy(stats) : NULL;
        e->seen_ms = now_ms;
        e->busy_ms = busy_ms;
        if (json_integer_value(json_object_get(stats, "running")) > 0 ||
            json_integer_value(json_object_get(stats, "waiting")) > 0)
            e->busy_ms = now_ms;
    }
    pthread_mutex_unlock(&r->mu);
}

void serving_registry_forget(struct serving_registry *r, const char *id)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    for (int i = r->n - 1; i >= 0; i--)
        if (strcmp(r->e[i].t.id, id) == 0)
            drop(r, i);
    pthread_mutex_unlock(&r->mu);
}

static long long stat_int(const json_t *stats, const char *key)
{
    return (long long)json_integer_value(json_object_get(stats, key));
}

/* Whether the engine's loaded models hold `dir` (a base when adapter is
 * false, else an adapter). */
static bool has_loaded(const json_t *stats, const char *dir, bool adapter)
{
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(stats, "loaded"), i, m)
    {
        const char *d = json_string_value(json_object_get(m, "dir"));
        if (d && strcmp(d, dir) == 0 && json_is_true(json_object_get(m, "adapter")) == adapter)
            return true;
    }
    return false;
}

bool serving_registry_pick(struct serving_registry *r, const char *weights,
                           const char *adapter, int64_t now_ms, struct serving_target *out)
{
    if (!r)
        return false;
    struct serve_route_engine v[SERVING_MAX];
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++) {
        const struct entry *e = &r->e[i];
        v[i] = (struct serve_route_engine){
            .fresh = now_ms - e->seen_ms <= SERVING_STALE_MS && e->t.port > 0,
            .has_base = weights && has_loaded(e->stats, weights, false),
            .has_adapter = adapter && has_loaded(e->stats, adapter, true),
            .free_bytes = stat_int(e->stats, "model_memory") - stat_int(e->stats, "model_bytes"),
            .busy = (long)(stat_int(e->stats, "running") + stat_int(e->stats, "waiting")),
        };
    }
    int k = serve_route_pick(v, r->n);
    if (k >= 0)
        *out = r->e[k].t;
    pthread_mutex_unlock(&r->mu);
    return k >= 0;
}

void serving_registry_missed(struct serving_registry *r, int64_t now_ms)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->missed_ms = now_ms;
    pthread_mutex_unlock(&r->mu);
}

void serving_registry_load(struct serving_registry *r, const char *const *ids, int n,
                           int64_t now_ms, struct serving_load *out)
{
    memset(out, 0, sizeof *out);
    out->missed_ago_ms = -1;
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    if (r->missed_ms > 0)
        out->missed_ago_ms = now_ms - r->missed_ms;
    for (int k = 0; k < n; k++)
        for (int i = 0; i < r->n; i++) {
            const struct entry *e = &r->e[i];
            if (strcmp(e->t.id, ids[k]) != 0 || now_ms - e->seen_ms > SERVING_STALE_MS)
                continue;
            out->fresh++;
            out->waiting += (long)stat_int(e->stats, "waiting");
            if (k == n - 1) {
                out->last_fresh = true;
                if (e->busy_ms < e->seen_ms)
                    out->last_idle_ms = now_ms - e->busy_ms;
            }
        }
    pthread_mutex_unlock(&r->mu);
}

int serving_registry_fresh(struct serving_registry *r, int64_t now_ms)
{
    int n = 0;
    if (!r)
        return 0;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++)
        n += now_ms - r->e[i].seen_ms <= SERVING_STALE_MS;
    pthread_mutex_unlock(&r->mu);
    return n;
}

json_t *serving_registry_stats(struct serving_registry *r, int64_t now_ms)
{
    if (!r)
        return NULL;
    json_t *sum = json_object();
    int n = 0;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; sum && i < r->n; i++) {
        const struct entry *e = &r->e[i];
        if (now_ms - e->seen_ms > SERVING_STALE_MS || !e->stats)
            continue;
        n++;
        const char *key;
        json_t *v;
        json_object_foreach(e->stats, key, v)
        {
            if (!json_is_integer(v))
                continue;
            json_int_t was = json_integer_value(json_object_get(sum, key));
            json_object_set_new(sum, key, json_integer(was + json_integer_value(v)));
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (!sum || n == 0) {
        json_decref(sum);
        return NULL;
    }
    json_object_set_new(sum, "engines", json_integer(n));
    return sum;
}

json_t *serving_registry_list(struct serving_registry *r, int64_t now_ms)
{
    json_t *a = json_array();
    if (!r || !a)
        return a;
    pthread_mutex_lock(&r->mu);
    for (int i = 0; i < r->n; i++) {
        const struct entry *e = &r->e[i];
        json_array_append_new(
            a, json_pack("{ss ss ss si sb sI sI sI sI sI sI}", "id", e->t.id, "node", e->node,
                         "host", e->t.host, "port", e->t.port, "fresh",
                         now_ms - e->seen_ms <= SERVING_STALE_MS, "seen_at",
                         (json_int_t)(e->seen_ms / 1000), "models",
                         (json_int_t)stat_int(e->stats, "models"), "model_bytes",
                         (json_int_t)stat_int(e->stats, "model_bytes"), "model_memory",
                         (json_int_t)stat_int(e->stats, "model_memory"), "running",
                         (json_int_t)stat_int(e->stats, "running"), "waiting",
                         (json_int_t)stat_int(e->stats, "waiting")));
    }
    pthread_mutex_unlock(&r->mu);
    return a;
}
