/* live_stream.c - a generation streamed as server-sent events (see
 * live_stream.h). */
#include "api/live_stream.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/completion_call.h"
#include "api/handlers.h"
#include "control/generation.h"
#include "core/text.h"

/* Shared by the generation's thread and the connection's; whichever lets
 * go last frees it. */
struct live {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    bool started;             /* the first piece came: the answer is 200 */
    bool done;                /* the generation has ended                 */
    struct jsonw buf;         /* events, buf.b.p[sent..] not yet sent     */
    size_t sent;
    struct http_response err; /* the error, when it failed before a piece */
    struct api_server *srv;
    struct http_request req;  /* the caller's account; the body is not used */
    struct control_generation g;
    char *prompt, *chat, *prompt_ids, *model;
    char *stop[COMPLETION_STOP_MAX];
    const char *input_param;
    const struct live_format *f;
    void *fmt;
};

void live_event(struct jsonw *buf, json_t *chunk)
{
    char *s = chunk ? json_dumps(chunk, JSON_COMPACT) : NULL;
    json_decref(chunk);
    if (!s) {
        buf->b.err = GROWBUF_NO_MEMORY; /* the chunk could not be written */
        return;
    }
    jsonw_raw(buf, "data: ", 6);
    jsonw_raw(buf, s, strlen(s));
    jsonw_raw(buf, "\n\n", 2);
    free(s);
}

void live_done(struct jsonw *buf)
{
    jsonw_raw(buf, "data: [DONE]\n\n", 14);
}

void live_logprobs_add(struct live_logprobs *lp, const json_t *logprobs)
{
    if (lp->pending && json_is_array(logprobs)) {
        json_array_extend(lp->pending, (json_t *)logprobs);
        lp->got += json_array_size(logprobs);
    }
}

void live_logprobs_rest(struct live_logprobs *lp, json_t *out)
{
    json_t *all = json_object_get(out, "logprobs");
    for (size_t i = lp->got; lp->pending && i < json_array_size(all); i++)
        json_array_append(lp->pending, json_array_get(all, i));
    lp->got = json_array_size(all);
}

json_t *live_logprobs_take(struct live_logprobs *lp)
{
    json_t *p = lp->pending;
    if (!p || json_array_size(p) == 0)
        return NULL;
    lp->pending = json_array();
    return p;
}

static void live_release(void *ctx)
{
    struct live *l = ctx;
    pthread_mutex_lock(&l->mu);
    bool last = --l->refs == 0;
    pthread_mutex_unlock(&l->mu);
    if (!last)
        return;
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    jsonw_free(&l->buf);
    http_response_free(&l->err);
    if (l->f && l->f->free)
        l->f->free(l->fmt);
    free(l->prompt);
    free(l->chat);
    free(l->prompt_ids);
    free(l->model);
    for (int i = 0; i < COMPLETION_STOP_MAX; i++)
        free(l->stop[i]);
    free(l);
}

static void live_piece(void *ctx, const char *piece, size_t len, const json_t *logprobs)
{
    struct live *l = ctx;
    pthread_mutex_lock(&l->mu);
    if (piece)
        l->f->piece(l->fmt, &l->buf, piece, len, logprobs);
    else if (l->f->prompt)
        l->f->prompt(l->fmt, &l->buf, logprobs);
    l->started = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

static void *live_run(void *ctx)
{
    struct live *l = ctx;
    json_t *out = completion_generate(l->srv, &l->req, l->model, &l->g, l->input_param, &l->err);
    if (l->g.watch_fd > 0) /* the generation is over: nothing to watch */
        close(l->g.watch_fd);
    pthread_mutex_lock(&l->mu);
    if (out) { /* an empty answer starts here */
        l->started = true;
        l->f->finish(l->fmt, &l->buf, out);
    }
    l->done = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    json_decref(out);
    live_release(l);
    return NULL;
}

/* http_stream_fn: the events as they come; -1 at the end. */
static ssize_t live_read(void *ctx, char *buf, size_t max)
{
    struct live *l = ctx;
    pthread_mutex_lock(&l->mu);
    while (l->sent == l->buf.b.len && !l->done && !l->buf.b.err)
        pthread_cond_wait(&l->cv, &l->mu);
    ssize_t n = -1;
    if (l->buf.b.err) {
        n = -2;
    } else if (l->sent < l->buf.b.len) {
        size_t k = l->buf.b.len - l->sent < max ? l->buf.b.len - l->sent : max;
        memcpy(buf, l->buf.b.p + l->sent, k);
        l->sent += k;
        n = (ssize_t)k;
    }
    pthread_mutex_unlock(&l->mu);
    return n;
}

/* A copy of s, or NULL for NULL; false when memory ran out. */
static bool copy(char **to, const char *s)
{
    *to = s ? strdup(s) : NULL;
    return !s || *to;
}

void live_stream_start(struct api_server *srv, struct http_request *req,
                       struct http_response *res, const char *model,
                       const struct control_generation *g, const char *input_param,
                       const struct live_format *f, void *fmt)
{
    struct live *l = calloc(1, sizeof *l);
    bool copied = l && copy(&l->prompt, g->prompt) && copy(&l->chat, g->chat) &&
                  copy(&l->prompt_ids, g->prompt_ids) && copy(&l->model, model);
    for (int i = 0; copied && i < g->n_stop; i++)
        copied = copy(&l->stop[i], g->stop[i]);
    if (!copied) {
        if (l) {
            free(l->prompt);
            free(l->chat);
            free(l->prompt_ids);
            free(l->model);
            for (int i = 0; i < COMPLETION_STOP_MAX; i++)
                free(l->stop[i]);
            free(l);
        }
        if (f->free)
            f->free(fmt);
        api_error(res, ERR_NOMEM, NULL, NULL);
        return;
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->refs = 2;
    l->srv = srv;
    l->req = *req;
    l->req.body = NULL;
    l->req.body_len = 0;
    l->g = *g;
    l->g.prompt = l->prompt;
    l->g.chat = l->chat;
    l->g.prompt_ids = l->prompt_ids;
    for (int i = 0; i < g->n_stop; i++)
        l->g.stop[i] = l->stop[i];
    l->g.on_delta = live_piece;
    l->g.on_delta_ctx = l;
    l->input_param = input_param;
    l->f = f;
    l->fmt = fmt;
    /* The generation's thread watches its own copy of the client's
     * socket: the connection's thread may close the original while the
     * generation still runs (the client gone, its events not read). */
    l->g.watch_fd = g->watch_fd > 0 ? fcntl(g->watch_fd, F_DUPFD_CLOEXEC, 3) : 0;
    l->req.client_fd = 0;
    if (f->begin)
        f->begin(fmt, &l->buf);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, live_run, l) != 0) {
        pthread_attr_destroy(&attr);
        if (l->g.watch_fd > 0)
            close(l->g.watch_fd);
        l->refs = 1;
        live_release(l);
        api_error(res, ERR_NOMEM, NULL, NULL);
        return;
    }
    pthread_attr_destroy(&attr);
    pthread_mutex_lock(&l->mu);
    while (!l->started && !l->done)
        pthread_cond_wait(&l->cv, &l->mu);
    bool failed = !l->started;
    if (failed) { /* the error completion_generate wrote, handed over */
        http_response_free(res);
        *res = l->err;
        memset(&l->err, 0, sizeof l->err);
    }
    pthread_mutex_unlock(&l->mu);
    if (failed) {
        live_release(l);
        return;
    }
    http_response_free(res);
    res->status = 200;
    text_copy(res->content_type, sizeof res->content_type, "text/event-stream");
    res->stream = live_read;
    res->stream_ctx = l;
    res->stream_free = live_release;
}
