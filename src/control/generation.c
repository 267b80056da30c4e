/* generation.c - a completion by the engine or a child (see generation.h). */
#include "control/generation.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "control/checkpoint_models.h"
#include "control/inference.h"
#include "control/paths.h"
#include "core/child.h"
#include "core/ids.h"
#include "core/log.h"
#include "core/text.h"
#include "store/store.h"

/* The user's mistake the generator reported (exit status 3 and one JSON
 * object, cmd_generate.c) as a sentence of our own: the generator's words
 * may name the model's folder. False when `o` is no such report. */
static bool user_mistake(const json_t *o, char *why, size_t whycap)
{
    const char *code = json_string_value(json_object_get(o, "error"));
    json_int_t pt = json_integer_value(json_object_get(o, "prompt_tokens"));
    json_int_t ctx = json_integer_value(json_object_get(o, "context_tokens"));
    if (code && strcmp(code, "context_length_exceeded") == 0)
        return text_printf(why, whycap,
                           "This model's maximum context length is %lld tokens, and the prompt "
                           "is %lld tokens; at least one token must be left for the completion. "
                           "Shorten the prompt.",
                           (long long)ctx, (long long)pt);
    const char *msg = json_string_value(json_object_get(o, "message"));
    if (code && strcmp(code, "invalid_chat") == 0 && msg)
        return text_printf(why, whycap, "This model's chat template cannot lay out these "
                                        "messages: %s", msg);
    if (code && strcmp(code, "invalid_prompt") == 0 && msg)
        return text_printf(why, whycap, "The prompt's token ids do not fit this model: %s.",
                           msg);
    if (code && strcmp(code, "empty_prompt") == 0)
        return text_copy(why, whycap,
                         "The prompt is empty, and this model needs some text to continue.");
    return false;
}

/* A line of `alallo generate --stream`: {"delta": TEXT} goes to on_delta;
 * the final object (the last line) is read when the child has ended. */
static void delta_line(void *ctx, const char *line, size_t len)
{
    const struct control_generation *g = ctx;
    json_t *o = json_loadb(line, len, 0, NULL);
    json_t *d = json_object_get(o, "delta");
    if (json_is_string(d) && json_object_size(o) == 1)
        g->on_delta(g->on_delta_ctx, json_string_value(d), json_string_length(d), NULL);
    json_decref(o);
}

/* The child-process path: `alallo generate --json` for this request. */
static enum alallo_err child_generate(struct control *ctl, const char *dir, const char *model_name,
                                      const struct control_generation *g, int timeout_s,
                                      json_t **out, char *why, size_t whycap)
{
    *out = NULL;
    why[0] = '\0';
    if (g->logprobs || g->prompt_ids || g->n_stop > 0) {
        text_printf(why, whycap, "%s served by the resident inference engine only; this server "
                                 "answers with a process per request (serve --inference child).",
                    g->logprobs ? "logprobs are" : g->prompt_ids ? "prompts of token ids are"
                                                                 : "stop texts are");
        return ERR_INVALID;
    }
    char max_tokens[24], temperature[32], seed[24], top_p[32];
    text_printf(max_tokens, sizeof max_tokens, "%ld", g->max_tokens);
    text_printf(temperature, sizeof temperature, "%g", g->temperature);
    text_printf(seed, sizeof seed, "%lld", g->seed);
    text_printf(top_p, sizeof top_p, "%.17g", g->top_p);
    char *argv[24] = {ctl->alallo_bin,  "generate",    "--model-dir",    (char *)dir,
                      g->chat ? "--chat" : "--prompt",
                      g->chat ? (char *)g->chat : (char *)g->prompt, "--max-tokens", max_tokens,
                      "--temperature",  temperature,   "--json"};
    int argc = 11;
    if (g->top_p > 0 && g->top_p < 1) {
        argv[argc++] = "--top-p";
        argv[argc++] = top_p;
    }
    if (g->seed >= 0) {
        argv[argc++] = "--seed";
        argv[argc++] = seed;
    }
    if (g->on_delta)
        argv[argc++] = "--stream";
    char threads[16];
    if (ctl->cfg.generate_threads > 0) {
        text_printf(threads, sizeof threads, "%d", ctl->cfg.generate_threads);
        argv[argc++] = "--threads";
        argv[argc++] = threads;
    }
    struct child_result r;
    int rc = child_run_lines(argv, (int64_t)timeout_s * 1000, 4 << 20,
                             g->on_delta ? delta_line : NULL, (void *)g, &r);
    json_t *o = NULL;
    bool mistake = rc == 0 && r.exit_status == 3;
    if (rc == 0 && (r.exit_status == 0 || mistake) && r.out) {
        /* The JSON object is the last line it printed. */
        char *last = r.out + r.out_len;
        while (last > r.out && (last[-1] == '\n' || last[-1] == '\r'))
            *--last = '\0';
        char *nl = strrchr(r.out, '\n');
        o = json_loads(nl ? nl + 1 : r.out, 0, NULL);
    }
    enum alallo_err e = ERR_OK;
    if (mistake && user_mistake(o, why, whycap)) {
        e = ERR_INVALID;
        json_decref(o);
        o = NULL;
    } else if (!json_is_object(o) || mistake) {
        e = r.timed_out ? ERR_UNAVAILABLE : ERR_INTERNAL;
        log_line("error", "generate for %s failed (exit %d, signal %d): %.300s", model_name,
                 r.exit_status, r.signal, r.err);
        json_decref(o);
        o = NULL;
    }
    child_result_free(&r);
    *out = o;
    return e;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The weights the engine loads for model `name` (folder `dir`) and its
 * LoRA adapter ("" when none): a LoRA job's or LoRA checkpoint's base and
 * adapter, *four_bit when the job trained on its base in 4 bits (NF4:
 * served so, as trained); otherwise (a base model, a full fine-tune, an
 * adapter no longer kept) the folder itself. */
static void model_weights(struct control *ctl, const char *account, const char *name,
                          const char *dir, char *weights, size_t wcap, char *adapter,
                          size_t acap, bool *four_bit)
{
    text_copy(weights, wcap, dir);
    adapter[0] = '\0';
    *four_bit = false;
    struct store_job *j = malloc(sizeof *j);
    if (!j)
        return;
    char job_id[IDS_MAX], folder[1024], why[300];
    long step;
    bool lora = false;
    if (store_job_by_model(ctl->store, account, name, j) == ERR_OK)
        lora = strcmp(j->adapter, "lora") == 0 &&
               control_job_dir(ctl, j->id, "out/adapter", adapter, acap) && is_dir(adapter);
    else if (control_checkpoint_name_parse(name, job_id, sizeof job_id, &step))
        lora = control_checkpoint_model_dir(ctl, account, name, folder, sizeof folder, adapter,
                                            acap, j, why, sizeof why) == ERR_OK &&
               adapter[0] && is_dir(adapter);
    if (!lora || !control_job_model_dir(ctl, j, weights, wcap)) {
        text_copy(weights, wcap, dir);
        adapter[0] = '\0';
    } else {
        *four_bit = strcmp(j->precision, "4-bit") == 0;
    }
    free(j);
}

/* The engine's path: the request as engine.h's line, its answer read. */
static enum alallo_err engine_generate(struct control *ctl, const char *account, const char *dir,
                                       const char *model_name,
                                       const struct control_generation *g, int timeout_s,
                                       json_t **out, char *why, size_t whycap)
{
    char weights[1024], adapter[1024];
    bool four_bit;
    model_weights(ctl, account, model_name, dir, weights, sizeof weights, adapter,
                  sizeof adapter, &four_bit);
    json_t *req = json_pack("{ss ss sI sf sb}", "account", account, "weights", weights,
                            "max_tokens", (json_int_t)g->max_tokens, "temperature",
                            g->temperature, "stream", g->on_delta != NULL);
    if (req && adapter[0])
        json_object_set_new(req, "adapter", json_string(adapter));
    if (req && four_bit)
        json_object_set_new(req, "four_bit", json_true());
    if (req && g->seed >= 0)
        json_object_set_new(req, "seed", json_integer(g->seed));
    if (req && g->top_p > 0 && g->top_p < 1)
        json_object_set_new(req, "top_p", json_real(g->top_p));
    json_t *stop = g->n_stop > 0 ? json_array() : NULL;
    for (int i = 0; stop && i < g->n_stop; i++)
        json_array_append_new(stop, json_string(g->stop[i]));
    if (req && stop)
        json_object_set_new(req, "stop", stop);
    else
        json_decref(stop);
    if (req && g->logprobs)
        json_object_set_new(req, "logprobs", json_integer(g->top_logprobs));
    if (req && g->logprobs && g->prompt_logprobs)
        json_object_set_new(req, "prompt_logprobs", json_true());
    if (req && g->chat)
        json_object_set_new(req, "chat", json_loads(g->chat, 0, NULL));
    else if (req && g->prompt_ids)
        json_object_set_new(req, "prompt_ids", json_loads(g->prompt_ids, 0, NULL));
    else if (req)
        json_object_set_new(req, "prompt", json_string(g->prompt));
    if (!req)
        return ERR_NOMEM;
    json_t *o = NULL;
    enum alallo_err e = inference_call(ctl->inference, req, timeout_s, g->watch_fd, g->on_delta,
                                       g->on_delta_ctx, &o, why, whycap);
    json_decref(req);
    if (e)
        return e;
    const char *code = json_string_value(json_object_get(o, "error"));
    if (!code) {
        *out = o;
        return ERR_OK;
    }
    if (strcmp(code, "busy") == 0) {
        text_copy(why, whycap, "Too many generations of this account are waiting; retry after "
                               "Retry-After seconds.");
        e = ERR_RATE_LIMITED;
    } else if (user_mistake(o, why, whycap)) {
        e = ERR_INVALID;
    } else {
        log_line("error", "the inference engine failed for %s: %.300s", model_name,
                 json_string_value(json_object_get(o, "message")));
        e = ERR_INTERNAL;
    }
    json_decref(o);
    return e;
}

enum alallo_err control_generate(struct control *ctl, const char *account, const char *dir,
                                 const char *model_name, const struct control_generation *g,
                                 int timeout_s, json_t **out, char *why, size_t whycap)
{
    *out = NULL;
    why[0] = '\0';
    if (ctl->inference)
        return engine_generate(ctl, account, dir, model_name, g, timeout_s, out, why, whycap);
    return child_generate(ctl, dir, model_name, g, timeout_s, out, why, whycap);
}
