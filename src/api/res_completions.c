/* res_completions.c - POST /v1/completions (OpenAI shape): generation from
 * a base or fine-tuned model (completion_call.h: the resident inference
 * engine, or a child process with a time limit), and the sampling fields
 * it shares with chat completions.
 *
 * Legacy completions take a prompt of text or of the model's token ids,
 * or a list of up to 32 such prompts with `n` answers each (one engine
 * request an answer, side by side: completion_generate_many), `logprobs`
 * (0..5: the answer's tokens with their log-probabilities and
 * that many most likely tokens at each place, in OpenAI's legacy shape,
 * completion_logprobs.h), `echo` (the prompt before the answer; with
 * logprobs, the prompt's own tokens' first) and `stream` (text_completion
 * chunks as server-sent events, live_stream.h; docs/api.md). */
#include <limits.h>
#include <math.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/completion_call.h"
#include "api/completion_logprobs.h"
#include "api/handlers.h"
#include "api/live_stream.h"
#include "control/generation.h"
#include "core/ids.h"
#include "core/text.h"

#define PROMPT_MAX (32 * 1024)
#define PROMPT_MAX_IDS (32 * 1024)
#define MAX_TOKENS_CAP 2048
#define LEGACY_LOGPROBS_MAX 5 /* OpenAI's bound for legacy completions */

static bool bad(struct http_response *res, const char *param, const char *msg)
{
    api_error(res, ERR_INVALID, msg, param);
    return false;
}

/* A request's stop texts into g: null, a text, or a list of up to
 * COMPLETION_STOP_MAX texts of 1 to COMPLETION_STOP_BYTES bytes (the
 * engine's bounds, train/run/stop_text.h); served by the engine only. */
static bool stop_parse(struct api_server *srv, json_t *body, struct control_generation *g,
                       struct http_response *res)
{
    json_t *v = json_object_get(body, "stop");
    g->n_stop = 0;
    if (!v || json_is_null(v))
        return true;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    bool ok = json_is_string(v) || (json_is_array(v) && n <= COMPLETION_STOP_MAX);
    for (size_t i = 0; ok && i < n; i++) {
        json_t *t = json_is_array(v) ? json_array_get(v, i) : v;
        ok = json_is_string(t) && json_string_length(t) >= 1 &&
             json_string_length(t) <= COMPLETION_STOP_BYTES &&
             strlen(json_string_value(t)) == json_string_length(t);
        if (ok)
            g->stop[g->n_stop++] = json_string_value(t);
    }
    if (!ok)
        return bad(res, "stop", "stop must be a string or an array of up to 4 strings, each of "
                                "1 to 256 bytes.");
    if (g->n_stop > 0 && !srv->ctl->inference)
        return bad(res, "stop", "stop is served by the resident inference engine only; this "
                                "server answers with a process per request (serve --inference "
                                "child).");
    return true;
}

/* max_tokens (or max_completion_tokens), temperature, top_p, seed and
 * stop of a request into g; false with the error set in res. */
bool completion_sampling_parse(struct api_server *srv, json_t *body,
                               struct control_generation *g, struct http_response *res)
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
    } else if (sodium_init() >= 0) {
        /* none given: a draw of its own, so that asking again samples
         * anew (as OpenAI's API); a seed makes an answer repeatable */
        uint64_t r;
        randombytes_buf(&r, sizeof r);
        g->seed = (long long)(r >> 1);
    }
    json_t *tp = json_object_get(body, "top_p");
    g->top_p = 1.0;
    if (tp && !json_is_null(tp)) {
        double v = json_number_value(tp);
        if (!json_is_number(tp) || !isfinite(v) || v < 0 || v > 1)
            return bad(res, "top_p", "top_p must be a number from 0 to 1.");
        /* 0 keeps the most likely token alone, as the smallest nucleus */
        g->top_p = v > COMPLETION_TOP_P_MIN ? v : COMPLETION_TOP_P_MIN;
    }
    return stop_parse(srv, body, g, res);
}

bool completion_logprobs_served(struct api_server *srv, struct http_response *res)
{
    return srv->ctl->inference ||
           bad(res, "logprobs", "logprobs are served by the resident inference engine only; "
                                "this server answers with a process per request (serve "
                                "--inference child).");
}

/* Choice `index` of a legacy answer or chunk: its text, its logprobs
 * (taken over, or NULL for null) and its finish reason (NULL for null). */
static json_t *choice(const char *text, size_t len, int index, json_t *logprobs,
                      const char *finish)
{
    return json_pack("{s:s%,s:i,s:o,s:o}", "text", text, len, "index", index, "logprobs",
                     logprobs ? logprobs : json_null(), "finish_reason",
                     finish ? json_string(finish) : json_null());
}

static json_t *answer(const char *id, json_int_t created, const char *model, json_t *choices)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:o}", "id", id, "object", "text_completion", "created",
                     created, "model", model, "choices", choices);
}

/* A streamed legacy answer (live_stream.h's format), one instance a
 * choice: with echo, the prompt first; each piece of text as a
 * text_completion chunk, with the log-probabilities of its tokens; a last
 * chunk with the finish reason (and the log-probabilities no piece
 * carried); once every choice ended, the usage when asked for, and
 * [DONE]. */
struct legacy_stream {
    char id[IDS_MAX];
    int index;
    int per_prompt;     /* n: the answers of one prompt, whose tokens count once */
    json_int_t created;
    char *model, *echo; /* echo: the prompt's text (NULL for token ids: it comes) */
    bool echoes;        /* echo asked for                                   */
    bool echo_waits;    /* the echo waits for the prompt's line (legacy_prompt) */
    bool include_usage;
    size_t text_sent;   /* bytes of the answer sent                  */
    struct live_logprobs lp;
    size_t chars;       /* characters of the text before the pending */
};

static void legacy_free(void *fmt)
{
    struct legacy_stream *l = fmt;
    json_decref(l->lp.pending);
    free(l->model);
    free(l->echo);
    free(l);
}

/* One chunk of text (with the pending entries' logprobs) and finish. */
static void legacy_chunk(struct legacy_stream *l, struct jsonw *buf, const char *text,
                         size_t len, const char *finish)
{
    json_t *entries = live_logprobs_take(&l->lp);
    json_t *lp = entries ? completion_logprobs(entries, &l->chars) : NULL;
    json_decref(entries);
    if (entries && !lp) {
        buf->b.err = GROWBUF_NO_MEMORY;
        return;
    }
    live_event(buf, answer(l->id, l->created, l->model,
                           json_pack("[o]", choice(text, len, l->index, lp, finish))));
}

static void legacy_begin(void *fmt, struct jsonw *buf)
{
    struct legacy_stream *l = fmt;
    if (l->echoes && !l->echo_waits)
        legacy_chunk(l, buf, l->echo, strlen(l->echo), NULL);
}

/* Echo of token ids or with logprobs: the prompt's chunk once its line
 * came ({"prompt_text", "prompt_logprobs"}), its text and its own
 * tokens' entries. */
static void legacy_prompt(void *fmt, struct jsonw *buf, const json_t *prompt)
{
    struct legacy_stream *l = fmt;
    if (!l->echo_waits)
        return;
    l->echo_waits = false;
    json_t *entries = json_object_get(prompt, "prompt_logprobs");
    if (l->lp.pending && entries)
        json_array_extend(l->lp.pending, entries);
    const char *text = json_string_value(json_object_get(prompt, "prompt_text"));
    text = text ? text : l->echo ? l->echo : "";
    legacy_chunk(l, buf, text, strlen(text), NULL);
}

static void legacy_piece(void *fmt, struct jsonw *buf, const char *piece, size_t len,
                         const json_t *logprobs)
{
    struct legacy_stream *l = fmt;
    live_logprobs_add(&l->lp, logprobs);
    if (len == 0)
        return;
    legacy_chunk(l, buf, piece, len, NULL);
    l->text_sent += len;
}

static void legacy_finish(void *fmt, struct jsonw *buf, json_t *out)
{
    struct legacy_stream *l = fmt;
    legacy_prompt(l, buf, out); /* when the prompt's line did not come before */
    const char *text = json_string_value(json_object_get(out, "text"));
    const char *finish = json_string_value(json_object_get(out, "finish_reason"));
    size_t tn = text ? strlen(text) : 0, sent = l->text_sent <= tn ? l->text_sent : tn;
    if (tn > sent) { /* what no piece brought */
        legacy_chunk(l, buf, text + sent, tn - sent, NULL);
        l->text_sent = tn;
    }
    live_logprobs_rest(&l->lp, out);
    legacy_chunk(l, buf, "", 0, finish ? finish : "length");
}

/* Every choice ended: the usage when asked for (a prompt's tokens once,
 * as OpenAI counts them), and [DONE]. */
static void legacy_end(void *const *fmts, int k, struct jsonw *buf, json_t *const *outs)
{
    const struct legacy_stream *l = fmts[0];
    if (l->include_usage) {
        json_int_t pt = 0, ct = 0;
        for (int i = 0; i < k; i++) {
            if (i % l->per_prompt == 0)
                pt += json_integer_value(json_object_get(outs[i], "prompt_tokens"));
            ct += json_integer_value(json_object_get(outs[i], "completion_tokens"));
        }
        json_t *u = answer(l->id, l->created, l->model, json_array());
        json_object_set_new(u, "usage", json_pack("{s:I,s:I,s:I}", "prompt_tokens", pt,
                                                  "completion_tokens", ct, "total_tokens",
                                                  pt + ct));
        live_event(buf, u);
    }
    live_done(buf);
}

/* What a streamed legacy completion's choices share. */
struct legacy_make {
    const char *model;
    char id[IDS_MAX];
    json_int_t created;
    int n; /* answers a prompt */
    bool echo, include_usage;
};

/* Choice i's format, of the one id. */
static void *legacy_make(const void *ctx, int i, const struct control_generation *g)
{
    const struct legacy_make *m = ctx;
    struct legacy_stream *l = calloc(1, sizeof *l);
    if (!l || !(l->model = strdup(m->model)) ||
        (m->echo && g->prompt && !(l->echo = strdup(g->prompt))) ||
        (g->logprobs && !(l->lp.pending = json_array()))) {
        if (l)
            legacy_free(l);
        return NULL;
    }
    text_copy(l->id, sizeof l->id, m->id);
    l->index = i;
    l->per_prompt = m->n;
    l->created = m->created;
    l->include_usage = m->include_usage;
    l->echoes = m->echo;
    l->echo_waits = m->echo && (g->prompt_ids || g->logprobs);
    return l;
}

static const struct live_format legacy_format = {legacy_make,   legacy_begin, legacy_piece,
                                                 legacy_finish, legacy_end,   legacy_free,
                                                 legacy_prompt};

/* logprobs (0..5, or none), echo, stream and n (1..32 answers a prompt)
 * of a legacy request into g, *echo, *stream and *n (best_of equal to n
 * or absent); false with the error set in res. */
static bool legacy_options(struct api_server *srv, json_t *body, struct control_generation *g,
                           bool *echo, bool *stream, int *n, struct http_response *res)
{
    json_t *lp = json_object_get(body, "logprobs"), *e = json_object_get(body, "echo"),
           *st = json_object_get(body, "stream");
    bool has_lp = lp && !json_is_null(lp);
    if (has_lp && !(json_is_integer(lp) && json_integer_value(lp) >= 0 &&
                    json_integer_value(lp) <= LEGACY_LOGPROBS_MAX))
        return bad(res, "logprobs", "logprobs must be an integer from 0 to 5.");
    if (has_lp && !completion_logprobs_served(srv, res))
        return false;
    if (e && !json_is_null(e) && !json_is_boolean(e))
        return bad(res, "echo", "echo must be true or false.");
    if (st && !json_is_null(st) && !json_is_boolean(st))
        return bad(res, "stream", "stream must be true or false.");
    json_t *nv = json_object_get(body, "n"), *best = json_object_get(body, "best_of");
    *n = 1;
    if (nv && !json_is_null(nv)) {
        if (!json_is_integer(nv) || json_integer_value(nv) < 1 ||
            json_integer_value(nv) > COMPLETION_CHOICES_MAX)
            return bad(res, "n", "n must be an integer from 1 to 32.");
        *n = (int)json_integer_value(nv);
    }
    /* best_of picks by the answers' likelihood; alallo returns what it
     * samples, so only the plain case is served */
    if (best && !json_is_null(best) &&
        !(json_is_integer(best) && json_integer_value(best) == *n))
        return bad(res, "best_of", "best_of must equal n (alallo returns every answer it "
                                   "samples).");
    g->logprobs = has_lp;
    g->top_logprobs = has_lp ? (int)json_integer_value(lp) : 0;
    g->prompt_logprobs = has_lp && json_is_true(e);
    *echo = json_is_true(e);
    *stream = json_is_true(st);
    return true;
}

/* Starts the streamed answer of gs[0..k), n of each prompt
 * (live_stream.h): a format each, of one id. */
static void legacy_stream_start(struct api_server *srv, struct http_request *req,
                                struct http_response *res, const char *model,
                                const struct control_generation *gs, int k, int n,
                                const char *const *about, bool echo, bool include_usage)
{
    struct legacy_make m = {.model = model,
                            .created = (json_int_t)(clock_now_ms() / 1000),
                            .n = n,
                            .echo = echo,
                            .include_usage = include_usage};
    ids_make(m.id, sizeof m.id, "cmpl-");
    live_stream_start(srv, req, res, model, gs, k, about, "prompt", &legacy_format, &m);
}

/* The prompts of a legacy request: texts (borrowed from the body) or the
 * model's token ids (JSON text, owned). */
struct legacy_prompts {
    int n;
    const char *text[COMPLETION_CHOICES_MAX];
    char *ids[COMPLETION_CHOICES_MAX];
};

static void legacy_prompts_free(struct legacy_prompts *ps)
{
    for (int i = 0; i < ps->n; i++)
        free(ps->ids[i]);
    ps->n = 0;
}

/* Whether p is a prompt of token ids: a non-empty array of integers. */
static bool token_ids(json_t *p)
{
    size_t i;
    json_t *v;
    bool tokens = json_is_array(p) && json_array_size(p) > 0;
    json_array_foreach(p, i, v)
        tokens = tokens && json_is_integer(v) && json_integer_value(v) >= 0 &&
                 json_integer_value(v) <= INT32_MAX;
    return tokens;
}

/* One prompt, p, into ps: a string, or the model's token ids (given to the
 * engine as they are); false with the error set in res. */
static bool legacy_prompt_add(struct api_server *srv, json_t *p, struct legacy_prompts *ps,
                              struct http_response *res)
{
    if (json_is_string(p)) {
        if (json_string_length(p) > PROMPT_MAX)
            return bad(res, "prompt", "prompt is too long (at most 32768 bytes).");
        ps->ids[ps->n] = NULL;
        ps->text[ps->n++] = json_string_value(p);
        return true;
    }
    if (!token_ids(p))
        return bad(res, "prompt", "prompt must be a string, an array of token ids (integers "
                                  "from 0), or a list of up to 32 of these.");
    if (json_array_size(p) > PROMPT_MAX_IDS)
        return bad(res, "prompt", "prompt is too long (at most 32768 token ids).");
    if (!srv->ctl->inference)
        return bad(res, "prompt", "prompts of token ids are served by the resident inference "
                                  "engine only; this server answers with a process per request "
                                  "(serve --inference child).");
    ps->text[ps->n] = NULL;
    if (!(ps->ids[ps->n] = json_dumps(p, JSON_COMPACT))) {
        api_error(res, ERR_NOMEM, NULL, NULL);
        return false;
    }
    ps->n++;
    return true;
}

/* The prompt of a legacy request into ps: one prompt, or a list of up to
 * COMPLETION_CHOICES_MAX (strings or arrays of token ids, as SDKs and
 * evaluation harnesses send them); false with the error set in res. */
static bool legacy_prompts_of(struct api_server *srv, json_t *p, struct legacy_prompts *ps,
                              struct http_response *res)
{
    ps->n = 0;
    if (json_is_string(p) || token_ids(p))
        return legacy_prompt_add(srv, p, ps, res);
    size_t n = json_array_size(p);
    if (!json_is_array(p) || n < 1 || json_is_integer(json_array_get(p, 0)))
        return legacy_prompt_add(srv, p, ps, res); /* says what is wrong */
    if (n > COMPLETION_CHOICES_MAX)
        return bad(res, "prompt", "prompt lists at most 32 prompts a request.");
    for (size_t i = 0; i < n; i++)
        if (!legacy_prompt_add(srv, json_array_get(p, i), ps, res))
            return false;
    return true;
}

/* The entries of a legacy answer's logprobs: with echo the prompt's own
 * tokens' first, then the answer's (a new reference; NULL when memory ran
 * out). */
static json_t *legacy_entries(json_t *out, bool echo)
{
    json_t *all = json_array();
    json_t *prompt = echo ? json_object_get(out, "prompt_logprobs") : NULL;
    json_t *answer = json_object_get(out, "logprobs");
    if (all && ((prompt && json_array_extend(all, prompt)) ||
                (answer && json_array_extend(all, answer)))) {
        json_decref(all);
        return NULL;
    }
    return all;
}

/* The choice of generator answer `out` to g, index `index`: with echo the
 * prompt (its text, or the text of its token ids) before the answer. NULL
 * when memory ran out. */
static json_t *legacy_choice(const struct control_generation *g, json_t *out, bool echo,
                             int index)
{
    const char *text = json_string_value(json_object_get(out, "text"));
    const char *finish = json_string_value(json_object_get(out, "finish_reason"));
    size_t chars = 0;
    json_t *entries = g->logprobs ? legacy_entries(out, echo) : NULL;
    json_t *lp = entries ? completion_logprobs(entries, &chars) : NULL;
    json_decref(entries);
    char *whole = NULL;
    const char *said = g->prompt ? g->prompt
                                 : json_string_value(json_object_get(out, "prompt_text"));
    if (echo && text && asprintf(&whole, "%s%s", said ? said : "", text) < 0)
        whole = NULL;
    json_t *c = NULL;
    if ((!g->logprobs || lp) && (!echo || !text || whole)) {
        const char *t = whole ? whole : text ? text : "";
        c = choice(t, strlen(t), index, lp, finish ? finish : "length");
        lp = NULL;
    }
    json_decref(lp);
    free(whole);
    return c;
}

void completions_create(struct api_server *srv, struct http_request *req, struct http_response *res)
{
    json_t *body = api_body_object(req, res);
    if (!body)
        return;
    struct control_generation g = {0};
    const char *model = json_string_value(json_object_get(body, "model"));
    struct legacy_prompts ps = {0};
    g.watch_fd = req->client_fd; /* the client gone cancels the generation */
    bool echo = false, stream = false;
    int n = 1;
    bool ok = !model ? bad(res, "model", "model is required.")
                     : legacy_prompts_of(srv, json_object_get(body, "prompt"), &ps, res) &&
                           completion_sampling_parse(srv, body, &g, res) &&
                           legacy_options(srv, body, &g, &echo, &stream, &n, res);
    int count = ok ? ps.n * n : 0;
    if (ok && count > COMPLETION_CHOICES_MAX)
        ok = bad(res, "n", "n times the prompts listed is at most 32 answers a request.");
    else if (ok && count > 1 && !srv->ctl->inference)
        ok = bad(res, ps.n > 1 ? "prompt" : "n",
                 "several answers a request (a list of prompts, n above 1) are served by the "
                 "resident inference engine only; this server answers with a process per "
                 "request (serve --inference child).");
    struct control_generation gs[COMPLETION_CHOICES_MAX];
    json_t *outs[COMPLETION_CHOICES_MAX];
    char about_buf[COMPLETION_CHOICES_MAX][32];
    const char *about[COMPLETION_CHOICES_MAX];
    /* answers of a prompt in turn; the k-th answer of each prompt samples
     * from seed + k, so n answers differ and a seed repeats them all */
    for (int i = 0; ok && i < count; i++) {
        gs[i] = g;
        gs[i].prompt = ps.text[i / n];
        gs[i].prompt_ids = ps.ids[i / n];
        gs[i].seed = (long long)(((unsigned long long)g.seed + (unsigned)(i % n)) & LLONG_MAX);
        text_printf(about_buf[i], sizeof about_buf[i], "prompt[%d]", i / n);
        about[i] = about_buf[i];
    }
    if (ok && stream) {
        json_t *so = json_object_get(body, "stream_options");
        legacy_stream_start(srv, req, res, model, gs, count, n, ps.n > 1 ? about : NULL, echo,
                            json_is_true(json_object_get(so, "include_usage")));
        ok = false; /* answered */
    }
    if (ok && count == 1)
        ok = (outs[0] = completion_generate(srv, req, model, &gs[0], "prompt", res)) != NULL;
    else if (ok)
        ok = completion_generate_many(srv, req, model, gs, count, ps.n > 1 ? about : NULL,
                                      "prompt", outs, res);
    if (ok) {
        char id[IDS_MAX];
        ids_make(id, sizeof id, "cmpl-");
        json_t *choices = json_array();
        json_int_t pt = 0, ct = 0;
        for (int i = 0; choices && i < count; i++) {
            json_t *c = legacy_choice(&gs[i], outs[i], echo, i);
            if (!c || json_array_append_new(choices, c)) {
                json_decref(choices);
                choices = NULL;
            }
            if (i % n == 0) /* a prompt's tokens count once, as OpenAI counts them */
                pt += json_integer_value(json_object_get(outs[i], "prompt_tokens"));
            ct += json_integer_value(json_object_get(outs[i], "completion_tokens"));
        }
        if (!choices) {
            api_error(res, ERR_NOMEM, NULL, NULL);
        } else {
            json_t *a = answer(id, (json_int_t)(clock_now_ms() / 1000), model, choices);
            json_object_set_new(a, "usage", json_pack("{s:I,s:I,s:I}", "prompt_tokens", pt,
                                                      "completion_tokens", ct, "total_tokens",
                                                      pt + ct));
            api_json(res, 200, a);
        }
        for (int i = 0; i < count; i++)
            json_decref(outs[i]);
    }
    legacy_prompts_free(&ps);
    json_decref(body);
}
