/* res_completions.c - POST /v1/completions (OpenAI shape): generation from
 * a base or fine-tuned model (control_generate: the resident inference
 * engine, or a child process with a time limit). The engine queues each
 * account's requests itself and answers a full queue with 429 and a crash
 * with 503, both with Retry-After (docs/serving.md). With a child per
 * request, at most cfg.max_completions run at once, shared fairly between
 * accounts (fair_share.h): a call waits up to cfg.slot_wait_ms for its
 * turn, then gets 429. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/fair_share.h"
#include "api/handlers.h"
#include "control/generation.h"
#include "control/inference.h"
#include "control/models.h"
#include "core/ids.h"
#include "core/text.h"

#define PROMPT_MAX (32 * 1024)
#define MAX_TOKENS_CAP 2048

static bool bad(struct http_response *res, const char *param, const char *msg)
{
    api_error(res, ERR_INVALID, msg, param);
    return false;
}

/* max_tokens (or max_completion_tokens), temperature and seed of a
 * request into g; false with the error set in res. */
bool completion_sampling_parse(json_t *body, struct control_generation *g,
                               struct http_response *res)
{
    json_t *mt = json_object_get(body, "max_tokens");
    if (!mt || json_is_null(mt))
        mt = json_object_get(body, "max_completion_tokens");
    g->max_tokens = 16;
    if (mt && !json_is_null(mt)) {
        if (!json_is_integer(mt) || json_integer_value(mt) < 1 ||
            json_integer_value(mt) > MAX_TOKENS_CAP)
            return bad(res, "max_tokens", "max_tokens must be an integer from 1 to 2048.");
        g->max_tokens = (long)json_integer_value(mt);
    }
    json_t *t = json_object_get(body, "temperature");
    g->temperature = 1.0;
    if (t && !json_is_null(t)) {
        double v = json_number_value(t);
        if (!json_is_number(t) || !isfinite(v) || v < 0 || v > 2)
            return bad(res, "temperature", "temperature must be a number from 0 to 2.");
        g->temperature = v;
    }
    json_t *s = json_object_get(body, "seed");
    g->seed = -1;
    if (s && !json_is_null(s)) {
        /* Any integer JSON can carry here (up to 2^63 - 1; a bigger one is
         * refused as bad JSON) the generator takes whole (cmd_generate.c). */
        if (!json_is_integer(s) || json_integer_value(s) < 0)
            return bad(res, "seed", "seed must be an integer from 0 to 9223372036854775807.");
        g->seed = (long long)json_integer_value(s);
    }
    return true;
}

json_t *completion_generate(struct api_server *srv, struct http_request *req, const char *model,
                            const struct control_generation *g, const char *input_param,
                            struct http_response *res)
{
    char dir[1024], name[256], msg[1024];
    if (!control_model_name(srv->ctl, req->account.id, model, name, sizeof name, msg,
                            sizeof msg)) {
        api_error(res, ERR_NOT_FOUND, msg, "model");
        return NULL;
    }
    enum alallo_err found =
        control_model_dir(srv->ctl, req->account.id, name, dir, sizeof dir, msg, sizeof msg);
    if (found) {
        api_error(res, found, msg[0] ? msg : NULL, found == ERR_NOT_FOUND ? "model" : NULL);
        return NULL;
    }
    /* the engine queues per account itself (train/serve/admission.h) */
    bool pooled = !srv->ctl->inference;
    if (pooled && !fair_share_take(srv->generations, req->account.id, srv->cfg.slot_wait_ms)) {
        api_error(res, ERR_RATE_LIMITED, "Too many generations are running; try again shortly.",
                  NULL);
        return NULL;
    }
    json_t *out = NULL;
    char why[600];
    enum alallo_err e = control_generate(srv->ctl, req->account.id, dir, name, g,
                                         srv->cfg.completion_timeout_s, &out, why, sizeof why);
    if (pooled)
        fair_share_give(srv->generations, req->account.id);
    if (e) {
        bool said = e == ERR_INVALID || e == ERR_RATE_LIMITED || e == ERR_UNAVAILABLE;
        api_error(res, e,
                  said && why[0]         ? why
                  : e == ERR_UNAVAILABLE ? "The generation took too long and was stopped."
                                         : "The generation failed.",
                  e == ERR_INVALID ? input_param : NULL);
        if (e == ERR_RATE_LIMITED || e == ERR_UNAVAILABLE) {
            text_copy(res->header_name, sizeof res->header_name, "Retry-After");
            text_printf(res->header_value, sizeof res->header_value, "%d",
                        INFERENCE_RETRY_AFTER_S);
        }
        return NULL;
    }
    atomic_fetch_add(&srv->metrics.completions, 1);
    return out;
}

void completions_create(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    json_t *body = api_body_object(req, res);
    if (!body)
        return;
    struct control_generation g = {0};
    const char *model = json_string_value(json_object_get(body, "model"));
    json_t *p = json_object_get(body, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1)
        p = json_array_get(p, 0); /* one prompt in a list, as SDKs allow */
    g.prompt = json_string_value(p);
    g.watch_fd = req->client_fd; /* the client gone cancels the generation */
    bool ok = !model            ? bad(res, "model", "model is required.")
              : !g.prompt       ? bad(res, "prompt", "prompt must be a string.")
              : strlen(g.prompt) > PROMPT_MAX
                  ? bad(res, "prompt", "prompt is too long (at most 32768 bytes).")
                  : completion_sampling_parse(body, &g, res);
    json_t *out = ok ? completion_generate(srv, req, model, &g, "prompt", res) : NULL;
    if (!out) {
        json_decref(body);
        return;
    }
    char id[IDS_MAX];
    ids_make(id, sizeof id, "cmpl-");
    json_int_t pt = json_integer_value(json_object_get(out, "prompt_tokens"));
    json_int_t ct = json_integer_value(json_object_get(out, "completion_tokens"));
    const char *text = json_string_value(json_object_get(out, "text"));
    const char *finish = json_string_value(json_object_get(out, "finish_reason"));
    api_json(res, 200,
             json_pack("{s:s,s:s,s:I,s:s,s:[{s:s,s:i,s:n,s:s}],s:{s:I,s:I,s:I}}", "id", id,
                       "object", "text_completion", "created", (json_int_t)(clock_now_ms() / 1000),
                       "model", model, "choices", "text", text ? text : "", "index", 0,
                       "logprobs", "finish_reason", finish ? finish : "length", "usage",
                       "prompt_tokens", pt, "completion_tokens", ct, "total_tokens", pt + ct));
    json_decref(out);
    json_decref(body);
}
