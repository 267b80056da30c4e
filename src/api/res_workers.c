/* res_workers.c - /v1/workers: the capacity as every account may see it,
 * and drain (the operator's account only): a draining worker takes no new
 * attempts and its running one moves elsewhere from its latest checkpoint. */
#include <stdlib.h>
#include <string.h>

#include "control/engine.h"
#include "control/fleet.h"
#include "control/serving_registry.h"
#include "core/clock.h"
#include "api/handlers.h"
#include "control/workers.h"
#include "core/ids.h"
#include "core/text.h"

static json_t *worker_json(const struct store_worker *w, const struct store_attempt *open, int n)
{
    json_t *resources = json_loads(w->resources, 0, NULL);
    json_t *speed = json_loads(w->speed, 0, NULL);
    /* An attempt holds all of a worker's GPUs: its hourly price is theirs. */
    json_t *declared = json_object_get(resources, "gpus");
    json_int_t gpus = json_integer_value(json_object_get(declared, "count"));
    json_t *o = json_pack("{s:s,s:s,s:o,s:s,s:f,s:s,s:o,s:I,s:I,s:o}", "object", "worker", "name",
                     w->name, "resources", resources ? resources : json_object(), "class",
                     w->class_, "price_per_hour", w->price_per_hour, "state", w->state, "speed",
                     speed ? speed : json_object(), "last_heartbeat_at",
                     (json_int_t)(w->last_heartbeat_ms / 1000), "registered_at",
                     (json_int_t)(w->registered_ms / 1000), "running",
                     n > 0 ? json_string(open[0].job) : json_null());
    if (o && gpus > 0)
        json_object_set_new(o, "price_per_gpu_hour", json_real(w->price_per_hour / (double)gpus));
    return o;
}

/* An engine's attempt on a slot: where the engine holds it. */
static void add_engine_state(json_t *o, const struct store_attempt *a)
{
    if (!a || !a->engine_state[0])
        return;
    json_object_set_new(o, "engine", json_pack("{s:s,s:s,s:s,s:s}", "state", a->engine_state,
                                                "reason", a->engine_reason, "job_id",
                                                a->engine_id, "node", a->node));
}

/* The engine's pools: slots, slots in use, attempts the engine holds
 * pending. */
static json_t *pools_json(struct api_server *srv)
{
    struct engine_pool_usage u[ENGINE_POOLS_MAX];
    int n = engine_pools_usage(srv->ctl, u, ENGINE_POOLS_MAX);
    json_t *a = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(
            a, json_pack("{s:s,s:s,s:s,s:f,s:i,s:i,s:i,s:i}", "object", "pool", "name",
                         u[i].name, "class", u[i].class_, "price_per_hour",
                         u[i].price_per_hour, "slots", u[i].slots, "in_use", u[i].in_use,
                         "pending", u[i].pending, "serving", u[i].serving));
    return a;
}

/* A worker as `req`'s account may see it: which job it runs is named only
 * when the job is the caller's own (the operator included). */
static json_t *worker_for(struct api_server *srv, const struct http_request *req,
                          const struct store_worker *w, const struct store_attempt *open, int n)
{
    json_t *o = worker_json(w, open, n);
    if (o && n > 0) {
        struct store_job *j = malloc(sizeof *j);
        if (!j || store_job_get(srv->ctl->store, req->account.id, open[0].job, j) != ERR_OK)
            json_object_set_new(o, "running", json_string("another account's job"));
        free(j);
    }
    return o;
}

void workers_list(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    struct store_worker *ws = calloc(FLEET_MAX, sizeof *ws);
    struct store_attempt *open = calloc(FLEET_MAX, sizeof *open);
    json_t *data = json_array();
    int n, n_open = 0;
    enum alallo_err e = ws && open && data ? store_worker_list(srv->ctl->store, ws, FLEET_MAX, &n)
                                           : ERR_NOMEM;
    if (!e)
        e = store_attempt_list_open(srv->ctl->store, "", open, FLEET_MAX, &n_open);
    if (e) {
        json_decref(data);
        api_store_error(res, e);
    } else {
        int cursor = 0;
        for (int i = 0; i < n; i++) {
            const struct store_attempt *a =
                sched_link_attempt_of(open, n_open, &cursor, ws[i].name);
            json_t *o = worker_for(srv, req, &ws[i], a, a ? 1 : 0);
            add_engine_state(o, a);
            json_array_append_new(data, o);
        }
        json_t *out = json_pack("{s:s,s:o,s:s,s:o}", "object", "list", "data", data, "engine",
                                engine_name(srv->ctl->engine), "pools", pools_json(srv));
        /* the inference engines on nodes (docs/serving.md, "On a cluster"):
         * where they listen is the operator's to see */
        if (out && srv->ctl->serving && strcmp(req->account.name, "default") == 0)
            json_object_set_new(out, "serving",
                                serving_registry_list(srv->ctl->serving, clock_now_ms()));
        api_json(res, 200, out);
    }
    free(open);
    free(ws);
}

static void take_away(struct api_server *srv, struct http_request *req,
                      struct http_response *res, bool spot);

void workers_drain(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    take_away(srv, req, res, false);
}

void workers_reclaim(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    take_away(srv, req, res, true);
}

/* Drain (spot false) or spot take-back: the worker takes no new attempt and
 * its running job is told to checkpoint and move. */
static void take_away(struct api_server *srv, struct http_request *req,
                      struct http_response *res, bool spot)
{
    struct store_worker w;
    struct store_attempt open[4];
    int n = 0;
    enum alallo_err e = control_worker_take_away(srv->ctl, req->params[0], spot, &w, open, 4, &n);
    if (e == ERR_NOT_FOUND)
        api_error(res, e, "No such worker.", "name");
    else if (e == ERR_CONFLICT)
        api_error(res, e, "Only a spot worker's capacity can be taken back.", "name");
    else if (e)
        api_store_error(res, e);
    else
        api_json(res, 200, worker_for(srv, req, &w, open, n));
}
