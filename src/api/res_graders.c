/* res_graders.c - POST /v1/fine_tuning/alpha/graders/validate and
 * /v1/fine_tuning/alpha/graders/run (OpenAI's shape): a grader checked,
 * or run on one answer and one data line, so that a user tries a grader
 * before paying for a job (docs/rft.md). A score_model grader asks its
 * model through the same generation as /v1/chat/completions; a python
 * grader is checked (the sandbox works here, its source compiles) and run
 * in the sandbox (core/grader_python.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/completion_call.h"
#include "api/handlers.h"
#include "control/generation.h"
#include "control/models.h"
#include "core/clock.h"
#include "core/grader.h"
#include "core/grader_python.h"

/* The grader of body, checked; NULL with res answered. */
static json_t *checked_grader(json_t *body, struct http_response *res)
{
    json_t *g = json_object_get(body, "grader");
    if (!g || json_is_null(g)) {
        api_error(res, ERR_INVALID, "grader is required.", "grader");
        return NULL;
    }
    char param[256], msg[512];
    if (!grader_check(g, "grader", param, sizeof param, msg, sizeof msg) ||
        !grader_python_ready(g, "grader", param, sizeof param, msg, sizeof msg)) {
        api_error(res, ERR_INVALID, msg, param);
        return NULL;
    }
    return g;
}

void graders_validate(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    (void)srv;
    json_t *body = api_body_object(req, res);
    if (!body)
        return;
    json_t *g = checked_grader(body, res);
    if (g)
        api_json(res, 200, json_pack("{s:O}", "grader", g));
    json_decref(body);
}

/* A score_model grader's model: one chat generation as
 * /v1/chat/completions makes it. On failure res is answered. */
struct asker {
    struct api_server *srv;
    struct http_request *req;
    struct http_response *res;
    bool answered;
    long prompt_tokens, completion_tokens;
};

static int ask(void *ctx, const char *model, const json_t *messages, const json_t *sampling,
               char **reply, char *err, size_t errcap)
{
    struct asker *a = ctx;
    json_t *chat = json_pack("{s:O}", "messages", messages);
    char *text = json_dumps(chat, JSON_COMPACT);
    json_decref(chat);
    const json_t *mt = json_object_get(sampling, "max_completions_tokens");
    const json_t *t = json_object_get(sampling, "temperature");
    const json_t *seed = json_object_get(sampling, "seed");
    struct control_generation g = {
        .chat = text,
        .max_tokens = json_is_integer(mt) ? (long)json_integer_value(mt) : 256,
        .temperature = json_is_number(t) ? json_number_value(t) : 0,
        .seed = json_is_integer(seed) && json_integer_value(seed) >= 0 ? json_integer_value(seed)
                                                                         : -1};
    json_t *out = text ? completion_generate(a->srv, a->req, model, &g, "grader", a->res) : NULL;
    free(text);
    if (!out) {
        a->answered = true;
        snprintf(err, errcap, "the grader's model did not answer");
        return -1;
    }
    const char *s = json_string_value(json_object_get(out, "text"));
    *reply = strdup(s ? s : "");
    a->prompt_tokens += (long)json_integer_value(json_object_get(out, "prompt_tokens"));
    a->completion_tokens += (long)json_integer_value(json_object_get(out, "completion_tokens"));
    json_decref(out);
    return 0;
}

void graders_run(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    json_t *body = api_body_object(req, res);
    if (!body)
        return;
    json_t *g = checked_grader(body, res);
    json_t *sample = json_object_get(body, "model_sample");
    json_t *item = json_object_get(body, "item");
    if (g && !json_is_string(sample)) {
        api_error(res, ERR_INVALID, "model_sample is required: the answer to grade, a string.",
                  "model_sample");
        g = NULL;
    }
    if (g && item && !json_is_null(item) && !json_is_object(item)) {
        api_error(res, ERR_INVALID, "item must be an object: the data line the grader reads.",
                  "item");
        g = NULL;
    }
    if (!g) {
        json_decref(body);
        return;
    }
    json_t *empty = json_object();
    struct asker a = {.srv = srv, .req = req, .res = res};
    struct grader_model mdl = {ask, &a};
    struct grader_result r;
    char err[400] = "";
    int64_t t0 = clock_now_ms();
    bool ok = grader_run(g, json_string_value(sample), json_is_object(item) ? item : empty, &mdl,
                         &r, err, sizeof err);
    double seconds = (double)(clock_now_ms() - t0) / 1000.0;
    if (!a.answered) {
        /* OpenAI's shape: a grader that fails on this input is a reward of
         * 0 with its errors named, not a failed request */
        json_t *name = json_object_get(g, "name");
        json_t *meta = json_pack(
            "{s:O,s:O,s:{s:b,s:s*},s:f,s:o,s:{s:I,s:I}}", "name",
            name ? name : json_null(), "type", json_object_get(g, "type"), "errors",
            "grader_error", !ok, "message", ok ? NULL : err, "execution_time", seconds, "scores",
            ok && r.sub_rewards ? json_incref(r.sub_rewards) : json_object(), "token_usage",
            "prompt_tokens", (json_int_t)a.prompt_tokens, "completion_tokens",
            (json_int_t)a.completion_tokens);
        api_json(res, 200,
                 json_pack("{s:f,s:o,s:o,s:{}}", "reward", ok ? r.reward : 0.0, "metadata", meta,
                           "sub_rewards",
                           ok && r.sub_rewards ? json_incref(r.sub_rewards) : json_object(),
                           "model_grader_token_usage_per_model"));
    }
    if (ok)
        json_decref(r.sub_rewards);
    json_decref(empty);
    json_decref(body);
}
