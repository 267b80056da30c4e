/* res_completions.c - POST /v1/completions (OpenAI shape): generation from
 * a base or fine-tuned model (control_generate, a child process with a
 * time limit). At most cfg.max_completions run at once; more get 429. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/handlers.h"
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

struct gen_args {
    const char *model, *prompt;
    long max_tokens;
    double temperature;
    long long seed; /* -1: none */
};

static bool parse(json_t *body, struct gen_args *a, struct http_response *res)
{
    a->model = json_string_value(json_object_get(body, "model"));
    if (!a->model)
        return bad(res, "model", "model is required.");
    json_t *p = json_object_get(body, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1)
        p = json_array_get(p, 0); /* one prompt in a list, as SDKs allow */
    a->prompt = json_string_value(p);
    if (!a->prompt)
        return bad(res, "prompt", "prompt must be a string.");
    if (strlen(a->prompt) > PROMPT_MAX)
        return bad(res, "prompt", "prompt is too long (at most 32768 bytes).");
    json_t *mt = json_object_get(body, "max_tokens");
    a->max_tokens = 16;
    if (mt && !json_is_null(mt)) {
        if (!json_is_integer(mt) || json_integer_value(mt) < 1 ||
            json_integer_value(mt) > MAX_TOKENS_CAP)
            return bad(res, "max_tokens", "max_tokens must be an integer from 1 to 2048.");
        a->max_tokens = (long)json_integer_value(mt);
    }
    json_t *t = json_object_get(body, "temperature");
    a->temperature = 1.0;
    if (t && !json_is_null(t)) {
        double v = json_number_value(t);
        if (!json_is_number(t) || !isfinite(v) || v < 0 || v > 2)
            return bad(res, "temperature", "temperature must be a number from 0 to 2.");
        a->temperature = v;
    }
    json_t *s = json_object_get(body, "seed");
    a->seed = -1;
    if (s && !json_is_null(s)) {
        /* Any integer JSON can carry here (up to 2^63 - 1; a bigger one is
         * refused as bad JSON) the generator takes whole (cmd_generate.c). */
        if (!json_is_integer(s) || json_integer_value(s) < 0)
            return bad(res, "seed", "seed must be an integer from 0 to 9223372036854775807.");
        a->seed = (long long)json_integer_value(s);
    }
    return true;
}

void completions_create(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    json_t *body = api_body_object(req, res);
    if (!body)
        return;
    struct gen_args a;
    if (!parse(body, &a, res)) {
        json_decref(body);
        return;
    }
    char dir[1024], name[256], msg[1024];
    if (!control_model_name(srv->ctl, req->account.id, a.model, name, sizeof name, msg,
                            sizeof msg)) {
        json_decref(body);
        api_error(res, ERR_NOT_FOUND, msg, "model");
        return;
    }
    if (!control_model_dir(srv->ctl, req->account.id, name, dir, sizeof dir)) {
        control_no_such_model(srv->ctl, req->account.id, a.model, msg, sizeof msg);
        json_decref(body);
        api_error(res, ERR_NOT_FOUND, msg, "model");
        return;
    }
    if (atomic_fetch_add(&srv->completions_running, 1) >= srv->cfg.max_completions) {
        atomic_fetch_sub(&srv->completions_running, 1);
        json_decref(body);
        api_error(res, ERR_RATE_LIMITED, "Too many generations are running; try again shortly.",
                  NULL);
        return;
    }
    struct control_generation g = {.prompt = a.prompt,
                                   .max_tokens = a.max_tokens,
                                   .temperature = a.temperature,
                                   .seed = a.seed};
    json_t *out = NULL;
    char why[300];
    enum alallo_err e = control_generate(srv->ctl, dir, a.model, &g,
                                         srv->cfg.completion_timeout_s, &out, why, sizeof why);
    atomic_fetch_sub(&srv->completions_running, 1);
    if (e) {
        api_error(res, e,
                  e == ERR_INVALID       ? why
                  : e == ERR_UNAVAILABLE ? "The generation took too long and was stopped."
                                         : "The generation failed.",
                  e == ERR_INVALID ? "prompt" : NULL);
        json_decref(body);
        return;
    }
    atomic_fetch_add(&srv->metrics.completions, 1);
    char id[IDS_MAX];
    ids_make(id, sizeof id, "cmpl-");
    json_int_t pt = json_integer_value(json_object_get(out, "prompt_tokens"));
    json_int_t ct = json_integer_value(json_object_get(out, "completion_tokens"));
    const char *text = json_string_value(json_object_get(out, "text"));
    const char *finish = json_string_value(json_object_get(out, "finish_reason"));
    api_json(res, 200,
             json_pack("{s:s,s:s,s:I,s:s,s:[{s:s,s:i,s:n,s:s}],s:{s:I,s:I,s:I}}", "id", id,
                       "object", "text_completion", "created", (json_int_t)(clock_now_ms() / 1000),
                       "model", a.model, "choices", "text", text ? text : "", "index", 0,
                       "logprobs", "finish_reason", finish ? finish : "length", "usage",
                       "prompt_tokens", pt, "completion_tokens", ct, "total_tokens", pt + ct));
    json_decref(out);
    json_decref(body);
}
