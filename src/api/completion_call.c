/* completion_call.c - one generation for a completions request (see
 * completion_call.h). */
#include "api/completion_call.h"

#include <assert.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api/fair_share.h"
#include "api/handlers.h"
#include "control/generation.h"
#include "control/inference.h"
#include "control/models.h"
#include "core/text.h"

/* The folder of `model` for the caller (name and dir filled): false with
 * res set. */
static bool model_of(struct api_server *srv, struct http_request *req, const char *model,
                     char *name, size_t ncap, char *dir, size_t dcap, struct http_response *res)
{
    char msg[1024];
    if (!control_model_name(srv->ctl, req->account.id, model, name, ncap, msg, sizeof msg)) {
        api_error(res, ERR_NOT_FOUND, msg, "model");
        return false;
    }
    enum alallo_err found = control_model_dir(srv->ctl, req->account.id, name, dir, dcap, msg,
                                              sizeof msg);
    if (found) {
        api_error(res, found, msg[0] ? msg : NULL, found == ERR_NOT_FOUND ? "model" : NULL);
        return false;
    }
    return true;
}

/* A generation's failure e (with the generator's sentence why) as the
 * client reads it, in res; `about` before the sentence when not NULL. */
static void failed(enum alallo_err e, const char *why, const char *about, const char *input_param,
                   struct http_response *res)
{
    bool said = e == ERR_INVALID || e == ERR_RATE_LIMITED || e == ERR_UNAVAILABLE;
    const char *msg = said && why[0]         ? why
                      : e == ERR_UNAVAILABLE ? "The generation took too long and was stopped."
                                             : "The generation failed.";
    char full[700];
    if (about)
        text_printf(full, sizeof full, "%s: %s", about, msg);
    api_error(res, e, about ? full : msg, e == ERR_INVALID ? input_param : NULL);
    if (e == ERR_RATE_LIMITED || e == ERR_UNAVAILABLE) {
        text_copy(res->header_name, sizeof res->header_name, "Retry-After");
        text_printf(res->header_value, sizeof res->header_value, "%d", INFERENCE_RETRY_AFTER_S);
    }
}

json_t *completion_generate(struct api_server *srv, struct http_request *req, const char *model,
                            const struct control_generation *g, const char *input_param,
                            struct http_response *res)
{
    char dir[1024], name[256];
    if (!model_of(srv, req, model, name, sizeof name, dir, sizeof dir, res))
        return NULL;
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
        failed(e, why, NULL, input_param, res);
        return NULL;
    }
    atomic_fetch_add(&srv->metrics.completions, 1);
    return out;
}

/* Several generations of one request, each on a thread of its own,
 * watching one end of a socket pair instead of the client's socket: the
 * request's thread closes the other end when the client leaves or when
 * one of them fails, which cancels the rest in the engine at once. */
struct many {
    atomic_int done;   /* generations ended */
    atomic_int failed; /* the first that failed, -1 while none */
};

struct one_of_many {
    struct api_server *srv;
    struct many *m;
    int index;
    const char *account, *dir, *name;
    struct control_generation g;
    json_t *out;
    enum alallo_err e;
    char why[600];
    pthread_t thread;
    bool started;
};

static void ended(struct one_of_many *o)
{
    int none = -1;
    if (o->e)
        atomic_compare_exchange_strong(&o->m->failed, &none, o->index);
    atomic_fetch_add(&o->m->done, 1);
}

static void *generate_one(void *arg)
{
    struct one_of_many *o = arg;
    o->e = control_generate(o->srv->ctl, o->account, o->dir, o->name, &o->g,
                            o->srv->cfg.completion_timeout_s, &o->out, o->why, sizeof o->why);
    ended(o);
    return NULL;
}

/* Whether the client of socket fd (0: none) has hung up, waiting up to
 * ms for it. */
static bool client_left(int fd, int ms)
{
    struct pollfd p = {.fd = fd > 0 ? fd : -1, .events = POLLRDHUP};
    return poll(&p, 1, ms) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

bool completion_generate_many(struct api_server *srv, struct http_request *req, const char *model,
                              const struct control_generation *gs, int n,
                              const char *const *about, const char *input_param, json_t **outs,
                              struct http_response *res)
{
    assert(n >= 1 && n <= COMPLETION_CHOICES_MAX);
    assert(srv->ctl->inference); /* a child per request serves one at a time */
    char dir[1024], name[256];
    if (!model_of(srv, req, model, name, sizeof name, dir, sizeof dir, res))
        return false;
    struct one_of_many *runs = calloc((size_t)n, sizeof *runs);
    struct many m;
    atomic_init(&m.done, 0);
    atomic_init(&m.failed, -1);
    int pair[2];
    if (!runs || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair)) {
        free(runs);
        api_error(res, ERR_NOMEM, NULL, NULL);
        return false;
    }
    for (int i = 0; i < n; i++) {
        runs[i] = (struct one_of_many){.srv = srv, .m = &m, .index = i,
                                       .account = req->account.id, .dir = dir, .name = name,
                                       .g = gs[i]};
        runs[i].g.watch_fd = pair[0];
        runs[i].started = pthread_create(&runs[i].thread, NULL, generate_one, &runs[i]) == 0;
        if (!runs[i].started) {
            runs[i].e = ERR_RATE_LIMITED;
            text_copy(runs[i].why, sizeof runs[i].why,
                      "The server cannot start more generations right now; try again shortly.");
            ended(&runs[i]);
        }
    }
    bool cut = false;
    while (atomic_load(&m.done) < n) {
        bool gone = client_left(req->client_fd, 50);
        if (!cut && (gone || atomic_load(&m.failed) >= 0)) {
            shutdown(pair[1], SHUT_RDWR); /* the others are cancelled */
            cut = true;
        }
        if (gone && cut)
            poll(NULL, 0, 50);
    }
    for (int i = 0; i < n; i++)
        if (runs[i].started)
            pthread_join(runs[i].thread, NULL);
    close(pair[0]);
    close(pair[1]);
    int bad = atomic_load(&m.failed);
    if (bad >= 0)
        failed(runs[bad].e, runs[bad].why, about ? about[bad] : NULL, input_param, res);
    for (int i = 0; i < n; i++) {
        if (bad >= 0)
            json_decref(runs[i].out);
        else
            outs[i] = runs[i].out;
    }
    if (bad < 0)
        atomic_fetch_add(&srv->metrics.completions, (long)n);
    free(runs);
    return bad < 0;
}
