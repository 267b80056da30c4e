/* res_internal.c - /internal: the worker protocol (docs/worker-protocol.md),
 * server side. Workers authenticate with the worker token. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "api/handlers.h"
#include "control/engine.h"
#include "control/lifecycle.h"
#include "control/workers.h"
#include "core/bench_speed.h"
#include "core/ids.h"
#include "core/text.h"

static double number(json_t *o, const char *key, double dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

/* The optional "gpus" of a registration: {"count","kind","mem_bytes"}
 * (docs/worker-protocol.md). Returns NULL when absent or well formed, with
 * *out a new object to store (NULL when absent); else the reason. */
static const char *gpus_declared(json_t *body, json_t **out)
{
    *out = NULL;
    json_t *g = json_object_get(body, "gpus");
    if (!g || json_is_null(g))
        return NULL;
    const char *kind = json_string_value(json_object_get(g, "kind"));
    double count = number(g, "count", 0), mem = number(g, "mem_bytes", 0);
    if (!json_is_object(g))
        return "gpus must be an object {\"count\",\"kind\",\"mem_bytes\"}.";
    if (!(count >= 1 && count <= 64) || count != floor(count))
        return "gpus.count must be a whole number from 1 to 64.";
    if (!kind || !ids_valid_name(kind, 32))
        return "gpus.kind must be a short name such as \"h200\".";
    if (!(mem >= 1024.0 * 1024 * 1024 && mem < 9e18))
        return "gpus.mem_bytes must be the memory of one GPU, at least 1 GiB.";
    *out = json_pack("{s:i,s:s,s:I}", "count", (int)count, "kind", kind, "mem_bytes",
                     (json_int_t)mem);
    return NULL;
}

void internal_register(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    json_t *body = api_body_object(req, res);
    if (!body)
        return;
    struct store_worker w = {0};
    const char *name = json_string_value(json_object_get(body, "name"));
    const char *class_ = json_string_value(json_object_get(body, "class"));
    const char *accel = json_string_value(json_object_get(body, "accelerator"));
    /* Where its attempts train (docs/worker-protocol.md); absent from a
     * worker from before the field. */
    json_t *trainer = json_object_get(body, "trainer");
    double cpus = number(body, "cpus", 0), mem = number(body, "mem_bytes", 0);
    double price = number(body, "price_per_hour", 0);
    json_t *speed = json_object_get(body, "speed");
    json_t *gpus = NULL;
    const char *bad = NULL;
    if (!name || !ids_valid_name(name, 64))
        bad = "name must be 1 to 63 letters, digits, '.', '-' or '_'.";
    else if (!(cpus >= 1 && cpus <= 4096))
        bad = "cpus must be from 1 to 4096.";
    else if (!(mem >= 1 && mem < 9e18))
        bad = "mem_bytes must be a positive number of bytes.";
    else if (!class_ || (strcmp(class_, "on-demand") != 0 && strcmp(class_, "spot") != 0))
        bad = "class must be \"on-demand\" or \"spot\".";
    else if (!(price >= 0 && price <= 1e6))
        bad = "price_per_hour must be from 0 to 1000000.";
    else if (trainer && !json_is_null(trainer) &&
             (!json_is_string(trainer) || (strcmp(json_string_value(trainer), "cpu") != 0 &&
                                            strcmp(json_string_value(trainer), "cuda") != 0)))
        bad = "trainer must be \"cpu\" or \"cuda\".";
    else
        bad = gpus_declared(body, &gpus);
    if (bad) {
        json_decref(gpus);
        json_decref(body);
        api_error(res, ERR_INVALID, bad, NULL);
        return;
    }
    text_copy(w.name, sizeof w.name, name);
    text_copy(w.class_, sizeof w.class_, class_);
    w.cpus = (int)cpus;
    w.mem_bytes = (int64_t)mem;
    w.price_per_hour = price;
    struct bench_speed measured;
    bench_speed_from_json(speed, &measured);
    w.tokens_per_s = measured.tokens_per_s;
    w.flops = measured.flops;
    json_t *resources = json_pack("{s:i,s:I,s:s}", "cpus", w.cpus, "mem_bytes",
                                  (json_int_t)w.mem_bytes, "accelerator", accel ? accel : "cpu");
    if (resources && gpus)
        json_object_set_new(resources, "gpus", gpus);
    else
        json_decref(gpus);
    if (resources && json_is_string(trainer))
        json_object_set_new(resources, "trainer", json_string(json_string_value(trainer)));
    json_t *sp = bench_speed_json(&measured);
    char *rtext = resources ? json_dumps(resources, JSON_COMPACT) : NULL;
    char *stext = sp ? json_dumps(sp, JSON_COMPACT) : NULL;
    bool ok = rtext && stext && text_copy(w.resources, sizeof w.resources, rtext) &&
              text_copy(w.speed, sizeof w.speed, stext);
    free(rtext);
    free(stext);
    json_decref(resources);
    json_decref(sp);
    json_decref(body);
    if (!ok) {
        api_error(res, ERR_INVALID, "accelerator is too long.", "accelerator");
        return;
    }
    enum alallo_err e = control_worker_register(srv->ctl, &w);
    if (e) {
        api_store_error(res, e);
        return;
    }
    api_json(res, 200,
             json_pack("{s:s,s:i}", "name", w.name, "heartbeat_s", srv->ctl->cfg.heartbeat_s));
}

void internal_heartbeat(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    json_t *body = api_body_object(req, res);
    if (!body)
        return;
    struct store_worker w;
    enum alallo_err e = control_worker_heartbeat(srv->ctl, req->params[0], &w);
    if (e) {
        json_decref(body);
        if (e == ERR_NOT_FOUND)
            api_error(res, e, "Unknown worker; register first.", "name");
        else
            api_store_error(res, e);
        return;
    }
    const char *attempt_id = json_string_value(json_object_get(body, "attempt_id"));
    const char *stop = attempt_id
                           ? tproto_stop_name(control_worker_stop_for(srv->ctl, w.name, attempt_id))
                           : NULL;
    json_decref(body);
    api_json(res, 200, json_pack("{s:s,s:o}", "state", w.state, "stop",
                                 stop ? json_string(stop) : json_null()));
}

void internal_claim(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    const char *name = req->params[0];
    if (!ids_valid_name(name, 64)) {
        api_error(res, ERR_NOT_FOUND, "Unknown worker; register first.", "name");
        return;
    }
    struct store_attempt a;
    json_t *spec = NULL;
    enum alallo_err e = lifecycle_claim(srv->ctl, name, &a, &spec);
    if (e == ERR_NOT_FOUND) {
        api_error(res, e, "Unknown worker; register first.", "name");
        return;
    }
    if (e) {
        api_store_error(res, e);
        return;
    }
    if (!spec) {
        http_respond(res, 204, "application/json", "", 0);
        return;
    }
    api_json(res, 200, json_pack("{s:s,s:s,s:I,s:o}", "attempt_id", a.id, "job_id", a.job,
                                 "fence", (json_int_t)a.fence, "spec", spec));
}

/* Reads the fence every attempt call carries; answers 400 when missing. */
static bool read_fence(json_t *body, int64_t *fence, struct http_response *res)
{
    json_t *f = json_object_get(body, "fence");
    if (!json_is_integer(f)) {
        api_error(res, ERR_INVALID, "fence (an integer) is required.", "fence");
        return false;
    }
    *fence = json_integer_value(f);
    return true;
}

/* The body of an attempt call and the fence it must carry; NULL with res
 * answered (400) when either is missing. The caller frees the body. */
static json_t *fenced_body(struct http_request *req, struct http_response *res, int64_t *fence)
{
    json_t *body = api_body_object(req, res);
    if (body && !read_fence(body, fence, res)) {
        json_decref(body);
        body = NULL;
    }
    return body;
}

static void answer_attempt_error(struct http_response *res, enum alallo_err e)
{
    if (e == ERR_FENCED)
        api_error(res, e, "This attempt no longer owns its job; its report changes nothing.",
                  "fence");
    else if (e == ERR_NOT_FOUND)
        api_error(res, e, "No such attempt.", "id");
    else
        api_store_error(res, e);
}

void internal_events(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    int64_t fence;
    json_t *body = fenced_body(req, res, &fence);
    if (!body)
        return;
    json_t *events = json_object_get(body, "events");
    if (!json_is_array(events)) {
        json_decref(body);
        api_error(res, ERR_INVALID, "events (an array) is required.", "events");
        return;
    }
    json_t *first = json_object_get(body, "first");
    int64_t first_index = json_is_integer(first) && json_integer_value(first) >= 0
                              ? json_integer_value(first)
                              : -1;
    enum tproto_stop stop = TPROTO_STOP_NONE;
    enum alallo_err e =
        ids_valid(req->params[0])
            ? lifecycle_events(srv->ctl, req->params[0], fence, first_index, events, &stop)
            : ERR_NOT_FOUND;
    json_decref(body);
    if (e) {
        answer_attempt_error(res, e);
        return;
    }
    const char *word = tproto_stop_name(stop);
    api_json(res, 200, json_pack("{s:o}", "stop", word ? json_string(word) : json_null()));
}

void internal_finish(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    int64_t fence;
    json_t *body = fenced_body(req, res, &fence);
    if (!body)
        return;
    struct attempt_end end = {.exit_status = -1};
    json_t *status = json_object_get(body, "exit_status");
    json_t *sig = json_object_get(body, "signal");
    if (json_is_integer(status))
        end.exit_status = (int)json_integer_value(status);
    if (json_is_integer(sig))
        end.signal = (int)json_integer_value(sig);
    /* Words this server does not know read as none. */
    if (!tproto_error_kind_parse(json_string_value(json_object_get(body, "error_kind")),
                                 &end.error_kind))
        end.error_kind = TPROTO_ERROR_NONE;
    if (!tproto_stop_parse(json_string_value(json_object_get(body, "stop")), &end.acted_on))
        end.acted_on = TPROTO_STOP_NONE;
    /* Neither an exit status nor a signal: the trainer never started. */
    if (end.exit_status < 0 && end.signal <= 0) {
        if (end.error_kind != TPROTO_ERROR_INTERNAL) {
            json_decref(body);
            api_error(res, ERR_INVALID, "exit_status or signal is required.", "exit_status");
            return;
        }
        end.not_started = true;
    }
    text_copy(end.line, sizeof end.line, json_string_value(json_object_get(body, "line")));
    json_decref(body);
    enum alallo_err e = ids_valid(req->params[0])
                            ? lifecycle_finish(srv->ctl, req->params[0], fence, &end)
                            : ERR_NOT_FOUND;
    if (e) {
        answer_attempt_error(res, e);
        return;
    }
    api_json(res, 200, json_object());
}

/* The runner's engine id and node ("" when absent or not plain text). */
static void runner_place(json_t *body, char *engine_id, size_t idcap, char *node, size_t nodecap)
{
    const char *id = json_string_value(json_object_get(body, "engine_id"));
    const char *n = json_string_value(json_object_get(body, "node"));
    if (!id || text_has_control(id) || !text_copy(engine_id, idcap, id))
        engine_id[0] = '\0';
    if (!n || text_has_control(n) || !text_copy(node, nodecap, n))
        node[0] = '\0';
}

void internal_attempt_start(struct api_server *srv, struct http_request *req,
                            struct http_response *res)
{
    json_t *body = api_body_object(req, res);
    if (!body)
        return;
    char engine_id[32], node[STORE_NAME_MAX];
    runner_place(body, engine_id, sizeof engine_id, node, sizeof node);
    json_decref(body);
    struct engine_start_answer *a = malloc(sizeof *a);
    if (!a) {
        api_store_error(res, ERR_NOMEM);
        return;
    }
    enum alallo_err e = ids_valid(req->params[0])
                            ? engine_attempt_start(srv->ctl, req->params[0], engine_id, node, a)
                            : ERR_NOT_FOUND;
    if (e == ERR_CONFLICT) { /* engine.h: one runner per attempt */
        free(a);
        api_error(res, e, "Another runner has started this attempt; this one runs nothing.",
                  "engine_id");
        return;
    }
    if (e) {
        free(a);
        answer_attempt_error(res, e);
        return;
    }
    api_json(res, 200,
             json_pack("{s:s,s:s,s:I,s:o,s:i,s:i,s:f,s:i}", "attempt_id", a->attempt.id,
                       "job_id", a->attempt.job, "fence", (json_int_t)a->attempt.fence, "spec",
                       a->spec, "cpus", a->cpus, "gpus", a->gpus, "deadline_s", a->deadline_s,
                       "heartbeat_s", a->heartbeat_s));
    free(a);
}

void internal_attempt_heartbeat(struct api_server *srv, struct http_request *req,
                                struct http_response *res)
{
    int64_t fence;
    json_t *body = fenced_body(req, res, &fence);
    if (!body)
        return;
    char engine_id[32], node[STORE_NAME_MAX];
    runner_place(body, engine_id, sizeof engine_id, node, sizeof node);
    json_decref(body);
    enum tproto_stop stop = TPROTO_STOP_NONE;
    enum alallo_err e = ids_valid(req->params[0]) ? engine_attempt_heartbeat(
                                                        srv->ctl, req->params[0], fence,
                                                        engine_id, node, &stop)
                                                  : ERR_NOT_FOUND;
    if (e) {
        answer_attempt_error(res, e);
        return;
    }
    const char *word = tproto_stop_name(stop);
    api_json(res, 200, json_pack("{s:o}", "stop", word ? json_string(word) : json_null()));
}

/* A serving engine's heartbeat (worker/serving_runner.h): where it
 * listens and its stats. {"stop": true} for one no longer wanted. */
void internal_serving_heartbeat(struct api_server *srv, struct http_request *req,
                                struct http_response *res)
{
    json_t *body = api_body_object(req, res);
    if (!body)
        return;
    const char *host = json_string_value(json_object_get(body, "host"));
    json_t *port = json_object_get(body, "port");
    json_t *stats = json_object_get(body, "stats");
    char engine_id[32], node[STORE_NAME_MAX];
    runner_place(body, engine_id, sizeof engine_id, node, sizeof node);
    if (!host || !host[0] || strlen(host) > 255 || text_has_control(host) ||
        !json_is_integer(port) || json_integer_value(port) < 1 ||
        json_integer_value(port) > 65535 || (stats && !json_is_object(stats) && !json_is_null(stats))) {
        json_decref(body);
        api_error(res, ERR_INVALID, "A serving heartbeat needs host, port (1-65535) and stats.",
                  "host");
        return;
    }
    bool stop = false;
    enum alallo_err e = engine_serving_heartbeat(srv->ctl, req->params[0], node[0] ? node : host,
                                                 host, (int)json_integer_value(port),
                                                 json_is_object(stats) ? stats : NULL, &stop);
    json_decref(body);
    if (e) {
        api_error(res, e, "No such serving engine.", NULL);
        return;
    }
    api_json(res, 200, json_pack("{s:b}", "stop", stop));
}
