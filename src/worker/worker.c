/* worker.c - worker_run: register, heartbeat, claim, run one attempt at a
 * time, relay the trainer's events, finish. See docs/worker.md.
 *
 * Two threads per worker: the caller's thread runs the claim loop and the
 * attempt (reading the trainer's output, relaying events), and a heartbeat
 * thread posts heartbeats every heartbeat_s whatever the main thread is
 * blocked on. They share the current attempt and a stop request under `mu`.
 */
#include "worker/worker.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/trainer_protocol.h"
#include "core/worker_state.h"
#include "worker/attempt_config.h"
#include "worker/trainer_event.h"
#include "worker/trainer_proc.h"
#include "worker/wapi.h"
#include "worker/wlog.h"
#include "worker/worker_speed.h"

#define HTTP_TIMEOUT_MS 10000
#define REGISTER_PATIENCE_S 30.0
#define IDLE_BACKOFF_MS 500
#define OUTAGE_BACKOFF_MS 1000
#define FLUSH_EVERY_S 0.5
#define FLUSH_BATCH 200
/* Events held while the server is away; past this only the events the job
 * cannot do without (started, checkpoint, done, error) are kept. */
#define PENDING_CAP 5000
/* After the worker itself is told to stop, how long it still tries to hand
 * a finished attempt's last events and finish to the server. */
#define LAST_REPORT_PATIENCE_S 10.0


struct worker {
    const struct worker_config *cfg;
    volatile sig_atomic_t *stop;
    struct wlog log;
    struct wapi api; /* the main thread's client */
    char work_dir[512];
    struct worker_speed speed;
    bool speed_known;

    pthread_mutex_t mu; /* guards what follows */
    pthread_cond_t wake; /* wakes the heartbeat thread to quit */
    char attempt_id[80]; /* "" when idle */
    long long fence;
    enum tproto_stop stop_request;
    bool need_register;
    int heartbeat_s;
    bool hb_quit;
};

/* The stop flag of the caller, or a stop asked through the server. */
static bool stopping(struct worker *w)
{
    return *w->stop != 0;
}

/* Sleeps up to ms, waking early when the worker is told to stop. */
static void nap(struct worker *w, int ms)
{
    while (ms > 0 && !stopping(w)) {
        int step = ms < 100 ? ms : 100;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)step * 1000000L};
        nanosleep(&ts, NULL);
        ms -= step;
    }
}

static bool id_valid(const char *id)
{
    return id && worker_name_valid(id) && strlen(id) < 80;
}

/* ---- registration ---------------------------------------------------- */

static json_t *registration_body(struct worker *w)
{
    const struct worker_config *c = w->cfg;
    json_t *speed = json_pack("{s:o,s:o}", "tokens_per_s",
                              w->speed_known ? json_real(w->speed.tokens_per_s) : json_null(),
                              "flops",
                              w->speed_known && w->speed.flops > 0 ? json_real(w->speed.flops)
                                                                   : json_null());
    return json_pack("{s:s,s:i,s:I,s:s,s:f,s:s,s:o}", "name", c->name, "cpus", c->cpus,
                     "mem_bytes", (json_int_t)c->mem_bytes, "accelerator", c->accelerator,
                     "price_per_hour", c->price_per_hour, "class", c->class_, "speed", speed);
}

/* One register call. Returns 0 on success, 1 when worth retrying, -1 when
 * the server refused (bad token or declaration): retrying will not help. */
static int register_once(struct worker *w, bool quiet)
{
    char err[300];
    long status;
    json_t *answer = NULL;
    json_t *body = registration_body(w);
    int rc = wapi_post(&w->api, "/internal/workers/register", body, &status, &answer, err,
                       sizeof err);
    json_decref(body);
    if (rc != 0) {
        if (!quiet)
            wlog_printf(&w->log, "register: %s", err);
        return 1;
    }
    int result;
    if (status == 200) {
        json_t *hb = json_object_get(answer, "heartbeat_s");
        int s = json_is_number(hb) ? (int)json_number_value(hb) : 2;
        if (s < 1)
            s = 1;
        if (s > 60)
            s = 60;
        pthread_mutex_lock(&w->mu);
        w->heartbeat_s = s;
        w->need_register = false;
        pthread_mutex_unlock(&w->mu);
        wlog_printf(&w->log, "registered with %s (heartbeat every %d s)", w->api.base, s);
        result = 0;
    } else if (status == 400 || status == 401 || status == 403) {
        wlog_printf(&w->log, "register refused (%ld): %s", status,
                    wapi_error_message(answer, "no reason given"));
        result = -1;
    } else {
        if (!quiet)
            wlog_printf(&w->log, "register: server answered %ld: %s", status,
                        wapi_error_message(answer, "no reason given"));
        result = 1;
    }
    json_decref(answer);
    return result;
}

/* The first registration: up to REGISTER_PATIENCE_S of retries. */
static int register_first(struct worker *w)
{
    double give_up = trainer_proc_now() + REGISTER_PATIENCE_S;
    bool quiet = false;
    for (;;) {
        int rc = register_once(w, quiet);
        if (rc <= 0)
            return rc;
        quiet = true; /* one line per outage is enough */
        if (stopping(w) || trainer_proc_now() > give_up)
            return -1;
        nap(w, OUTAGE_BACKOFF_MS);
    }
}

/* ---- heartbeats -------------------------------------------------------- */

static void *heartbeat_main(void *arg)
{
    struct worker *w = arg;
    struct wapi api;
    char err[300];
    if (wapi_init(&api, w->cfg->server_url, w->cfg->token, HTTP_TIMEOUT_MS, err, sizeof err)) {
        wlog_printf(&w->log, "heartbeat: %s", err);
        return NULL;
    }
    char path[160];
    snprintf(path, sizeof path, "/internal/workers/%s/heartbeat", w->cfg->name);
    bool outage = false, draining = false;
    pthread_mutex_lock(&w->mu);
    while (!w->hb_quit) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += w->heartbeat_s;
        while (!w->hb_quit && pthread_cond_timedwait(&w->wake, &w->mu, &until) != ETIMEDOUT)
            ;
        if (w->hb_quit)
            break;
        char attempt[80];
        snprintf(attempt, sizeof attempt, "%s", w->attempt_id);
        long long fence = w->fence;
        pthread_mutex_unlock(&w->mu);

        json_t *body = attempt[0] ? json_pack("{s:s,s:I}", "attempt_id", attempt, "fence",
                                              (json_int_t)fence)
                                  : json_pack("{s:n,s:n}", "attempt_id", "fence");
        long status;
        json_t *answer = NULL;
        int rc = wapi_post(&api, path, body, &status, &answer, err, sizeof err);
        json_decref(body);
        const char *stop = json_string_value(json_object_get(answer, "stop"));
        const char *state = json_string_value(json_object_get(answer, "state"));
        if (rc != 0 && !outage)
            wlog_printf(&w->log, "heartbeat: %s", err);
        if (rc == 0 && outage)
            wlog_printf(&w->log, "heartbeat: server back (%ld)", status);
        outage = rc != 0;
        if (rc == 0 && status == 200 && state) {
            enum worker_state ws;
            bool d = worker_state_parse(state, &ws) && ws == WORKER_DRAINING;
            if (d != draining)
                wlog_printf(&w->log, "server says this worker is %s", state);
            draining = d;
        }

        pthread_mutex_lock(&w->mu);
        if (rc == 0 && status == 404) {
            w->need_register = true; /* the server does not know us (any more) */
        } else if (rc == 0 && status == 200 && stop && attempt[0] &&
                   strcmp(attempt, w->attempt_id) == 0 && w->stop_request == TPROTO_STOP_NONE) {
            enum tproto_stop k;
            if (tproto_stop_parse(stop, &k))
                w->stop_request = k;
        }
        json_decref(answer);
    }
    pthread_mutex_unlock(&w->mu);
    wapi_free(&api);
    return NULL;
}

/* ---- one attempt ------------------------------------------------------- */

struct attempt {
    struct worker *w;
    char id[80];
    char path_events[160];
    char path_finish[160];
    long long fence;
    json_t *pending;       /* events not yet accepted by the server */
    long first;            /* index in this attempt of pending[0]: lets the
                            * server skip a batch it took but whose answer
                            * was lost */
    long dropped;          /* events dropped while over PENDING_CAP */
    bool fenced;           /* the server says another attempt owns the job */
    bool urgent;           /* a pending event changes the job: send it now */
    enum tproto_stop acted_on;
    enum tproto_error_kind error_kind; /* from the trainer's `error` event */
    char error_line[1024];
    char last_stderr[1024];
    long last_step;
};

static void note_stop(struct attempt *a, enum tproto_stop k)
{
    pthread_mutex_lock(&a->w->mu);
    if (a->w->stop_request == TPROTO_STOP_NONE)
        a->w->stop_request = k;
    pthread_mutex_unlock(&a->w->mu);
}

static void on_trainer_line(void *ctx, int stream, const char *line, size_t len, bool truncated)
{
    struct attempt *a = ctx;
    struct worker *w = a->w;
    if (stream == 2) {
        if (len > 0) {
            wlog_printf(&w->log, "trainer %s: %.*s", a->id, (int)(len > 1500 ? 1500 : len), line);
            snprintf(a->last_stderr, sizeof a->last_stderr, "%s", line);
        }
        return;
    }
    if (len == 0)
        return;
    struct trainer_event ev;
    char err[200];
    if (truncated) {
        wlog_printf(&w->log, "trainer %s: stdout line over %d bytes dropped", a->id,
                    TRAINER_PROC_MAX_LINE);
        return;
    }
    if (trainer_event_parse(line, len, &ev, err, sizeof err) != 0) {
        wlog_printf(&w->log, "trainer %s: stdout line is not an event (%s): %.200s", a->id, err,
                    line);
        return;
    }
    switch (ev.kind) {
    case TEV_ERROR:
        a->error_kind = ev.error_kind;
        snprintf(a->error_line, sizeof a->error_line, "%s", ev.line);
        wlog_printf(&w->log, "attempt %s: %s error: %s", a->id,
                    tproto_error_kind_name(ev.error_kind), ev.line);
        break;
    case TEV_STARTED:
    case TEV_CHECKPOINT:
    case TEV_DONE:
        wlog_printf(&w->log, "attempt %s: %s at step %ld", a->id,
                    trainer_event_kind_name(ev.kind), ev.step);
        break;
    default:
        break;
    }
    if (ev.step >= 0)
        a->last_step = ev.step;
    bool essential = ev.kind == TEV_STARTED || ev.kind == TEV_CHECKPOINT ||
                     ev.kind == TEV_DONE || ev.kind == TEV_ERROR;
    if (json_array_size(a->pending) >= PENDING_CAP && !essential) {
        a->dropped++;
    } else {
        json_array_append(a->pending, ev.obj);
        /* started, checkpoint, done and error change what users see (status,
         * what a move resumes from, the outcome): no batching delay. */
        if (essential)
            a->urgent = true;
    }
    trainer_event_free(&ev);
}

/* Result of a report to the server. */
enum report { REPORT_OK, REPORT_RETRY, REPORT_FENCED, REPORT_REJECTED };

/* Posts the pending events. On success they are gone from `pending`. */
static enum report flush_events(struct attempt *a)
{
    struct worker *w = a->w;
    if (json_array_size(a->pending) == 0)
        return REPORT_OK;
    if (a->dropped > 0) {
        wlog_printf(&w->log, "attempt %s: %ld log/step events dropped while the server was away",
                    a->id, a->dropped);
        a->dropped = 0;
    }
    json_t *body = json_pack("{s:I,s:I,s:O}", "fence", (json_int_t)a->fence, "first",
                             (json_int_t)a->first, "events", a->pending);
    long status;
    json_t *answer = NULL;
    char err[300];
    int rc = wapi_post(&w->api, a->path_events, body, &status, &answer, err, sizeof err);
    json_decref(body);
    enum report r;
    if (rc != 0) {
        r = REPORT_RETRY;
    } else if (status == 200) {
        a->first += (long)json_array_size(a->pending);
        json_array_clear(a->pending);
        enum tproto_stop k;
        if (tproto_stop_parse(json_string_value(json_object_get(answer, "stop")), &k))
            note_stop(a, k);
        r = REPORT_OK;
    } else if (status == 409 || status == 404) {
        wlog_printf(&w->log, "attempt %s: events refused (%ld): %s", a->id, status,
                    wapi_error_message(answer, "fenced"));
        r = REPORT_FENCED;
    } else if (status >= 400 && status < 500) {
        /* The server will never take this batch; holding it would stall. */
        wlog_printf(&w->log, "attempt %s: %zu events rejected (%ld): %s", a->id,
                    json_array_size(a->pending), status, wapi_error_message(answer, "?"));
        a->first += (long)json_array_size(a->pending);
        json_array_clear(a->pending);
        r = REPORT_REJECTED;
    } else {
        r = REPORT_RETRY;
    }
    json_decref(answer);
    return r;
}

static json_t *finish_body(struct attempt *a, const struct trainer_proc *p, bool started,
                           const char *start_error)
{
    const char *kind = tproto_error_kind_name(a->error_kind);
    const char *line = a->error_line[0] ? a->error_line : NULL;
    if (!started) {
        kind = tproto_error_kind_name(TPROTO_ERROR_INTERNAL);
        line = start_error;
    } else if (!line && a->last_stderr[0]) {
        line = a->last_stderr; /* for the operator: a crash leaves no event */
    }
    const char *stop = tproto_stop_name(a->acted_on);
    bool exited = started && p->reaped && p->term_signal == 0;
    return json_pack("{s:I,s:o,s:o,s:o,s:o,s:o}", "fence", (json_int_t)a->fence, "exit_status",
                     exited ? json_integer(p->exit_status) : json_null(), "signal",
                     started && p->term_signal ? json_integer(p->term_signal) : json_null(),
                     "error_kind", kind ? json_string(kind) : json_null(), "line",
                     line ? json_string(line) : json_null(), "stop",
                     stop ? json_string(stop) : json_null());
}

static enum report post_finish(struct attempt *a, json_t *body)
{
    long status;
    json_t *answer = NULL;
    char err[300];
    int rc = wapi_post(&a->w->api, a->path_finish, body, &status, &answer, err, sizeof err);
    enum report r = REPORT_RETRY;
    if (rc == 0 && status == 200)
        r = REPORT_OK;
    else if (rc == 0 && (status == 409 || status == 404))
        r = REPORT_FENCED;
    else if (rc == 0 && status >= 400 && status < 500)
        r = REPORT_REJECTED;
    if (r != REPORT_OK && r != REPORT_RETRY)
        wlog_printf(&a->w->log, "attempt %s: finish refused (%ld): %s", a->id, status,
                    wapi_error_message(answer, "?"));
    json_decref(answer);
    return r;
}

/* Hands the last events and the finish to the server: retried while the
 * server is away, for as long as the worker runs (a finished training's
 * `done` must not be lost), and LAST_REPORT_PATIENCE_S once it is stopping. */
static void report_end(struct attempt *a, const struct trainer_proc *p, bool started,
                       const char *start_error)
{
    struct worker *w = a->w;
    double stop_seen = 0;
    bool events_done = a->fenced;
    json_t *body = finish_body(a, p, started, start_error);
    bool logged_outage = false;
    for (;;) {
        enum report r = REPORT_OK;
        if (!events_done) {
            r = flush_events(a);
            if (r == REPORT_FENCED)
                a->fenced = true;
            if (r != REPORT_RETRY)
                events_done = true;
        }
        if (events_done && !a->fenced) {
            r = post_finish(a, body);
            if (r != REPORT_RETRY)
                break;
        } else if (a->fenced) {
            break;
        }
        if (!logged_outage) {
            wlog_printf(&w->log, "attempt %s: server away; holding the result", a->id);
            logged_outage = true;
        }
        if (stopping(w)) {
            if (stop_seen == 0)
                stop_seen = trainer_proc_now();
            else if (trainer_proc_now() - stop_seen > LAST_REPORT_PATIENCE_S) {
                wlog_printf(&w->log, "attempt %s: stopping without reporting the end", a->id);
                break;
            }
            struct timespec ts = {.tv_sec = 0, .tv_nsec = 500000000L};
            nanosleep(&ts, NULL);
        } else {
            nap(w, OUTAGE_BACKOFF_MS);
        }
    }
    json_decref(body);
}

static void set_current(struct worker *w, const char *id, long long fence)
{
    pthread_mutex_lock(&w->mu);
    snprintf(w->attempt_id, sizeof w->attempt_id, "%s", id);
    w->fence = fence;
    w->stop_request = TPROTO_STOP_NONE;
    pthread_mutex_unlock(&w->mu);
}

static enum tproto_stop requested_stop(struct worker *w)
{
    pthread_mutex_lock(&w->mu);
    enum tproto_stop k = w->stop_request;
    pthread_mutex_unlock(&w->mu);
    return k;
}

/* Runs the attempt the server placed here, from start to finish. */
static void run_attempt(struct worker *w, json_t *claim)
{
    struct attempt *a = calloc(1, sizeof *a);
    if (!a) {
        wlog_printf(&w->log, "out of memory for an attempt");
        return;
    }
    a->w = w;
    a->last_step = -1;
    a->pending = json_array();
    const char *id = json_string_value(json_object_get(claim, "attempt_id"));
    const char *job = json_string_value(json_object_get(claim, "job_id"));
    json_t *fence = json_object_get(claim, "fence");
    json_t *spec = json_object_get(claim, "spec");
    if (!id_valid(id) || !json_is_integer(fence)) {
        wlog_printf(&w->log, "claim answer without a usable attempt_id and fence: ignored");
        json_decref(a->pending);
        free(a);
        return;
    }
    snprintf(a->id, sizeof a->id, "%s", id);
    a->fence = (long long)json_integer_value(fence);
    snprintf(a->path_events, sizeof a->path_events, "/internal/attempts/%s/events", a->id);
    snprintf(a->path_finish, sizeof a->path_finish, "/internal/attempts/%s/finish", a->id);
    wlog_printf(&w->log, "attempt %s of job %s claimed (fence %lld)", a->id, job ? job : "?",
                a->fence);
    set_current(w, a->id, a->fence);

    char dir[700], config[800], err[600] = "";
    snprintf(dir, sizeof dir, "%s/attempts/%s", w->work_dir, a->id);
    snprintf(config, sizeof config, "%s/ATTEMPT.json", dir);
    struct trainer_proc p;
    memset(&p, 0, sizeof p);
    p.out_fd = p.err_fd = -1;
    bool started = false;
    char start_error[1024] = "";
    if (fs_mkdirs(dir, 0700) != 0) {
        snprintf(start_error, sizeof start_error, "worker: cannot create %s: %s", dir,
                 strerror(errno));
    } else if (attempt_config_write(spec, w->cfg->cpus, config, err, sizeof err) != 0) {
        snprintf(start_error, sizeof start_error, "worker: %s", err);
    } else {
        char *argv[] = {(char *)w->cfg->alallo_bin, "train", "--config", config, NULL};
        if (trainer_proc_start(&p, argv, dir, err, sizeof err) != 0)
            snprintf(start_error, sizeof start_error, "worker: %s", err);
        else
            started = true;
    }
    if (!started) {
        wlog_printf(&w->log, "attempt %s: %s", a->id, start_error);
    } else {
        wlog_printf(&w->log, "attempt %s: trainer %d started", a->id, (int)p.pid);
        double last_flush = trainer_proc_now(), retry_after = 0, signalled_at = 0;
        bool killed = false;
        for (;;) {
            int running = trainer_proc_poll(&p, 200, on_trainer_line, a);
            double now = trainer_proc_now();
            size_t n = json_array_size(a->pending);
            if (n > 0 && !a->fenced && now >= retry_after &&
                (a->urgent || now - last_flush >= FLUSH_EVERY_S || n >= FLUSH_BATCH)) {
                enum report r = flush_events(a);
                last_flush = now;
                if (r != REPORT_RETRY)
                    a->urgent = false;
                if (r == REPORT_FENCED)
                    a->fenced = true;
                retry_after = r == REPORT_RETRY ? now + OUTAGE_BACKOFF_MS / 1000.0 : 0;
            }
            if (running <= 0)
                break;
            /* Another attempt owns the job now: this trainer must not write
             * one more checkpoint into the job's folder. */
            if (a->fenced && !killed) {
                wlog_printf(&w->log, "attempt %s: fenced; killing the trainer", a->id);
                trainer_proc_signal(&p, SIGKILL);
                killed = true;
            }
            enum tproto_stop k = requested_stop(w);
            if (k == TPROTO_STOP_NONE && stopping(w))
                k = TPROTO_STOP_MOVE; /* the worker goes away: the job continues elsewhere */
            if (k != TPROTO_STOP_NONE && signalled_at == 0 && !killed) {
                a->acted_on = k;
                wlog_printf(&w->log, "attempt %s: stopping the trainer (%s)", a->id,
                            tproto_stop_name(k));
                trainer_proc_signal(&p, SIGTERM);
                signalled_at = now;
            }
            if (signalled_at > 0 && !killed && now - signalled_at > w->cfg->stop_grace_s) {
                wlog_printf(&w->log, "attempt %s: no exit %d s after SIGTERM; SIGKILL", a->id,
                            w->cfg->stop_grace_s);
                trainer_proc_signal(&p, SIGKILL);
                killed = true;
            }
        }
        if (p.term_signal)
            wlog_printf(&w->log, "attempt %s: trainer killed by signal %d", a->id, p.term_signal);
        else
            wlog_printf(&w->log, "attempt %s: trainer exited with %d", a->id, p.exit_status);
    }
    report_end(a, &p, started, start_error);
    trainer_proc_close(&p);
    set_current(w, "", 0);
    json_decref(a->pending);
    free(a);
}

/* ---- the loop ---------------------------------------------------------- */

static int check_config(const struct worker_config *c, char *err, size_t errcap)
{
    if (!worker_name_valid(c->name))
        snprintf(err, errcap, "bad worker name '%s'", c->name);
    else if (c->cpus < 1)
        snprintf(err, errcap, "cpus must be at least 1");
    else if (!c->alallo_bin[0])
        snprintf(err, errcap, "no alallo binary to start trainers with");
    else if (strcmp(c->class_, "on-demand") != 0 && strcmp(c->class_, "spot") != 0)
        snprintf(err, errcap, "class must be on-demand or spot");
    else
        return 0;
    return -1;
}

static void claim_loop(struct worker *w)
{
    char path[160], err[300];
    snprintf(path, sizeof path, "/internal/workers/%s/claim", w->cfg->name);
    bool outage = false;
    while (!stopping(w)) {
        pthread_mutex_lock(&w->mu);
        bool again = w->need_register;
        pthread_mutex_unlock(&w->mu);
        if (again) {
            if (register_once(w, outage) != 0) {
                outage = true;
                nap(w, OUTAGE_BACKOFF_MS);
            }
            continue;
        }
        long status;
        json_t *answer = NULL;
        int rc = wapi_post(&w->api, path, NULL, &status, &answer, err, sizeof err);
        if (rc != 0) {
            if (!outage)
                wlog_printf(&w->log, "claim: %s", err);
            outage = true;
            nap(w, OUTAGE_BACKOFF_MS);
        } else if (status == 200) {
            outage = false;
            run_attempt(w, answer);
        } else if (status == 204) {
            outage = false;
            nap(w, IDLE_BACKOFF_MS);
        } else if (status == 404 || status == 401) {
            /* A server that lost us (or a new token): declare ourselves again. */
            wlog_printf(&w->log, "claim: server answered %ld; registering again", status);
            pthread_mutex_lock(&w->mu);
            w->need_register = true;
            pthread_mutex_unlock(&w->mu);
            nap(w, OUTAGE_BACKOFF_MS);
        } else {
            if (!outage)
                wlog_printf(&w->log, "claim: server answered %ld: %s", status,
                            wapi_error_message(answer, "no reason given"));
            outage = true;
            nap(w, OUTAGE_BACKOFF_MS);
        }
        json_decref(answer);
    }
}

int worker_run(const struct worker_config *cfg, volatile sig_atomic_t *stop)
{
    char err[300];
    if (check_config(cfg, err, sizeof err) != 0) {
        fprintf(stderr, "worker: %s\n", err);
        return 1;
    }
    struct worker *w = calloc(1, sizeof *w);
    if (!w)
        return 1;
    w->cfg = cfg;
    w->stop = stop;
    w->heartbeat_s = 2;
    w->log.fd = -1;
    snprintf(w->log.name, sizeof w->log.name, "%s", cfg->name);
    if (cfg->work_dir[0])
        snprintf(w->work_dir, sizeof w->work_dir, "%s", cfg->work_dir);
    else
        snprintf(w->work_dir, sizeof w->work_dir, "alallo-worker-%s", cfg->name);
    char log_path[600], attempts[600];
    snprintf(log_path, sizeof log_path, "%s/worker.log", w->work_dir);
    snprintf(attempts, sizeof attempts, "%s/attempts", w->work_dir);
    /* Absolute, because each trainer runs inside its attempt's folder. */
    char *abs = NULL;
    if (fs_mkdirs(attempts, 0700) != 0 || !(abs = realpath(w->work_dir, NULL)) ||
        strlen(abs) >= sizeof w->work_dir - 100) {
        fprintf(stderr, "worker %s: cannot use work folder %s: %s\n", cfg->name, w->work_dir,
                abs ? "path too long" : strerror(errno));
        free(abs);
        free(w);
        return 1;
    }
    snprintf(w->work_dir, sizeof w->work_dir, "%s", abs);
    free(abs);
    snprintf(log_path, sizeof log_path, "%s/worker.log", w->work_dir);
    if (wlog_open(&w->log, log_path, cfg->name) != 0) {
        fprintf(stderr, "worker %s: cannot open %s: %s\n", cfg->name, log_path, strerror(errno));
        free(w);
        return 1;
    }
    int result = 1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->wake, &ca);
    pthread_condattr_destroy(&ca);
    wlog_printf(&w->log, "starting: %d cpus, %lld bytes, %s, %.4f/h, server %s", cfg->cpus,
                (long long)cfg->mem_bytes, cfg->class_, cfg->price_per_hour, cfg->server_url);

    if (wapi_init(&w->api, cfg->server_url, cfg->token, HTTP_TIMEOUT_MS, err, sizeof err) != 0) {
        fprintf(stderr, "worker %s: %s\n", cfg->name, err);
        wlog_printf(&w->log, "%s", err);
        goto out;
    }
    if (cfg->bench_timeout_s > 0) {
        if (worker_speed_measure(cfg->alallo_bin, cfg->cpus, cfg->bench_timeout_s, stop,
                                 &w->speed, err, sizeof err) == 0) {
            w->speed_known = true;
            wlog_printf(&w->log, "measured speed: %.1f tokens/s, %.3g FLOP/s",
                        w->speed.tokens_per_s, w->speed.flops);
        } else {
            wlog_printf(&w->log, "speed unknown: %s", err);
        }
    }
    if (register_first(w) != 0) {
        if (!stopping(w)) {
            fprintf(stderr, "worker %s: could not register with %s (see %s)\n", cfg->name,
                    cfg->server_url, log_path);
            goto out;
        }
        result = 0;
        goto out;
    }
    pthread_t hb;
    if (pthread_create(&hb, NULL, heartbeat_main, w) != 0) {
        fprintf(stderr, "worker %s: cannot start the heartbeat thread\n", cfg->name);
        goto out;
    }
    claim_loop(w);
    pthread_mutex_lock(&w->mu);
    w->hb_quit = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
    pthread_join(hb, NULL);
    wlog_printf(&w->log, "stopped");
    result = 0;
out:
    wapi_free(&w->api);
    wlog_close(&w->log);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->mu);
    free(w);
    return result;
}
