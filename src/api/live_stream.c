/* live_stream.c - a generation streamed as server-sent events (see
 * live_stream.h). */
#include "api/live_stream.h"

#include <assert.h>
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

/* One choice: its generation's copies and its format. */
struct live_choice {
    struct live *l;
    int index;
    char *prompt, *chat, *prompt_ids;
    char *stop[COMPLETION_STOP_MAX];
    char about[32];
    void *fmt;
};

/* Shared by the generations' thread and the connection's; whichever lets
 * go last frees it. */
struct live {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    bool started;             /* the first piece came: the answer is 200 */
    bool done;                /* the generations have ended               */
    struct jsonw buf;         /* events, buf.b.p[sent..] not yet sent     */
    size_t sent;
    struct http_response err; /* the error, when one failed before a piece */
    struct api_server *srv;
    struct http_request req;  /* the caller's account; the body is not used */
    int watch_fd;             /* the generations' copy of the client's socket */
    char *model;
    const char *input_param;
    const struct live_format *f;
    bool about;               /* choices[i].about names each */
    int k;
    struct control_generation g[COMPLETION_CHOICES_MAX];
    struct live_choice choices[COMPLETION_CHOICES_MAX];
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

/* A choice's copies freed, and its format when it has one. */
static void choice_free(const struct live_format *f, struct live_choice *c)
{
    free(c->prompt);
    free(c->chat);
    free(c->prompt_ids);
    for (int i = 0; i < COMPLETION_STOP_MAX; i++)
        free(c->stop[i]);
    if (c->fmt && f->free)
        f->free(c->fmt);
    memset(c, 0, sizeof *c);
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
    for (int i = 0; i < l->k; i++)
        choice_free(l->f, &l->choices[i]);
    free(l->model);
    free(l);
}

static void live_piece(void *ctx, const char *piece, size_t len, const json_t *logprobs)
{
    struct live_choice *c = ctx;
    struct live *l = c->l;
    pthread_mutex_lock(&l->mu);
    if (piece)
        l->f->piece(c->fmt, &l->buf, piece, len, logprobs);
    else if (l->f->prompt)
        l->f->prompt(c->fmt, &l->buf, logprobs);
    l->started = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

static void *live_run(void *ctx)
{
    struct live *l = ctx;
    json_t *outs[COMPLETION_CHOICES_MAX] = {0};
    bool ok;
    if (l->k == 1) {
        l->g[0].watch_fd = l->watch_fd;
        outs[0] = completion_generate(l->srv, &l->req, l->model, &l->g[0], l->input_param,
                                      &l->err);
        ok = outs[0] != NULL;
    } else { /* side by side: its own watch of the client, and cuts */
        const char *about[COMPLETION_CHOICES_MAX];
        for (int i = 0; i < l->k; i++)
            about[i] = l->choices[i].about;
        struct http_request r = l->req;
        r.client_fd = l->watch_fd;
        ok = completion_generate_many(l->srv, &r, l->model, l->g, l->k, l->about ? about : NULL,
                                      l->input_param, outs, &l->err);
    }
    if (l->watch_fd > 0) /* the generations are over: nothing to watch */
        close(l->watch_fd);
    pthread_mutex_lock(&l->mu);
    if (ok) { /* an empty answer starts here */
        l->started = true;
        void *fmts[COMPLETION_CHOICES_MAX];
        for (int i = 0; i < l->k; i++) {
            l->f->finish(l->choices[i].fmt, &l->buf, outs[i]);
            fmts[i] = l->choices[i].fmt;
        }
        l->f->end(fmts, l->k, &l->buf, outs);
    } else if (l->started && l->err.body) {
        /* it failed after the 200 went out (the engine died, one choice
         * failed): its error is the stream's last event, with no [DONE] */
        live_event(&l->buf, json_loadb(l->err.body, l->err.len, 0, NULL));
    }
    l->done = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; ok && i < l->k; i++)
        json_decref(outs[i]);
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

/* Choice i of l: copies of what gs[i] points at, its format and its
 * generation's callback. False when memory ran out. */
static bool choice_make(struct live *l, int i, const struct control_generation *g,
                        const char *about, void *fmt)
{
    struct live_choice *c = &l->choices[i];
    c->l = l;
    c->index = i;
    c->fmt = fmt;
    if (about)
        text_copy(c->about, sizeof c->about, about);
    bool copied = copy(&c->prompt, g->prompt) && copy(&c->chat, g->chat) &&
                  copy(&c->prompt_ids, g->prompt_ids);
    for (int s = 0; copied && s < g->n_stop; s++)
        copied = copy(&c->stop[s], g->stop[s]);
    l->g[i] = *g;
    l->g[i].prompt = c->prompt;
    l->g[i].chat = c->chat;
    l->g[i].prompt_ids = c->prompt_ids;
    for (int s = 0; s < g->n_stop; s++)
        l->g[i].stop[s] = c->stop[s];
    l->g[i].on_delta = live_piece;
    l->g[i].on_delta_ctx = c;
    l->g[i].watch_fd = 0;
    return copied;
}

void live_stream_start(struct api_server *srv, struct http_request *req,
                       struct http_response *res, const char *model,
                       const struct control_generation *gs, int k, const char *const *about,
                       const char *input_param, const struct live_format *f,
                       const void *make_ctx)
{
    assert(k >= 1 && k <= COMPLETION_CHOICES_MAX);
    void *fmts[COMPLETION_CHOICES_MAX];
    int made = 0;
    while (made < k && (fmts[made] = f->make(make_ctx, made, &gs[made])) != NULL)
        made++;
    if (made < k) {
        for (int i = 0; f->free && i < made; i++)
            f->free(fmts[i]);
        api_error(res, ERR_NOMEM, NULL, NULL);
        return;
    }
    struct live *l = calloc(1, sizeof *l);
    bool copied = l && copy(&l->model, model);
    if (l) {
        l->f = f;
        l->k = k;
    }
    for (int i = 0; l && i < k; i++) /* every format taken over, even when one fails */
        copied = choice_make(l, i, &gs[i], about ? about[i] : NULL, fmts[i]) && copied;
    if (!copied) {
        if (l) {
            for (int i = 0; i < k; i++)
                choice_free(f, &l->choices[i]);
            free(l->model);
            free(l);
        } else {
            for (int i = 0; f->free && i < k; i++)
                f->free(fmts[i]);
        }
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
    l->about = about != NULL;
    l->input_param = input_param;
    /* The generations' thread watches its own copy of the client's
     * socket: the connection's thread may close the original while the
     * generations still run (the client gone, its events not read). */
    l->watch_fd = gs[0].watch_fd > 0 ? fcntl(gs[0].watch_fd, F_DUPFD_CLOEXEC, 3) : 0;
    if (l->watch_fd < 0)
        l->watch_fd = 0;
    l->req.client_fd = 0;
    for (int i = 0; f->begin && i < k; i++)
        f->begin(l->choices[i].fmt, &l->buf);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, live_run, l) != 0) {
        pthread_attr_destroy(&attr);
        if (l->watch_fd > 0)
            close(l->watch_fd);
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
    if (failed) { /* the error the generation wrote, handed over */
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
