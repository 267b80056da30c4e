/* attempt_run.c - one attempt from the trainer's start to the finish; see
 * attempt_run.h. Moved here from worker.c so that the worker and the
 * attempt runner share one copy. */
#include "worker/attempt_run.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/fs.h"
#include "worker/attempt_config.h"
#include "worker/trainer_event.h"
#include "worker/trainer_proc.h"

#define OUTAGE_BACKOFF_MS 1000
#define FLUSH_EVERY_S 0.5
#define FLUSH_BATCH 200
/* Events held while the server is away; past this only the events the job
 * cannot do without (started, checkpoint, done, error) are kept. */
#define PENDING_CAP 5000
/* After the host is told to stop, how long it still tries to hand a
 * finished attempt's last events and finish to the server. */
#define LAST_REPORT_PATIENCE_S 10.0

static bool stopping(const struct attempt_host *h)
{
    return *h->stop != 0;
}

/* Sleeps up to ms, waking early when the host is told to stop. */
static void nap(const struct attempt_host *h, int ms)
{
    while (ms > 0 && !stopping(h)) {
        int step = ms < 100 ? ms : 100;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)step * 1000000L};
        nanosleep(&ts, NULL);
        ms -= step;
    }
}

struct attempt {
    const struct attempt_host *h;
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
    bool reported;         /* the server took the finish */
    enum tproto_stop acted_on;
    enum tproto_error_kind error_kind; /* from the trainer's `error` event */
    char error_line[1024];
    char last_stderr[1024];
    long last_step;
};

static void note_stop(struct attempt *a, enum tproto_stop k)
{
    a->h->note(a->h->ctx, k);
}

static void on_trainer_line(void *ctx, int stream, const char *line, size_t len, bool truncated)
{
    struct attempt *a = ctx;
    const struct attempt_host *h = a->h;
    if (stream == 2) {
        if (len > 0) {
            wlog_printf(h->log, "trainer %s: %.*s", a->id, (int)(len > 1500 ? 1500 : len), line);
            snprintf(a->last_stderr, sizeof a->last_stderr, "%s", line);
        }
        return;
    }
    if (len == 0)
        return;
    struct trainer_event ev;
    char err[200];
    if (truncated) {
        wlog_printf(h->log, "trainer %s: stdout line over %d bytes dropped", a->id,
                    TRAINER_PROC_MAX_LINE);
        return;
    }
    if (trainer_event_parse(line, len, &ev, err, sizeof err) != 0) {
        wlog_printf(h->log, "trainer %s: stdout line is not an event (%s): %.200s", a->id, err,
                    line);
        return;
    }
    switch (ev.kind) {
    case TEV_ERROR:
        a->error_kind = ev.error_kind;
        snprintf(a->error_line, sizeof a->error_line, "%s", ev.line);
        wlog_printf(h->log, "attempt %s: %s error: %s", a->id,
                    tproto_error_kind_name(ev.error_kind), ev.line);
        break;
    case TEV_STARTED:
    case TEV_CHECKPOINT:
    case TEV_DONE:
        wlog_printf(h->log, "attempt %s: %s at step %ld", a->id,
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
    const struct attempt_host *h = a->h;
    if (json_array_size(a->pending) == 0)
        return REPORT_OK;
    if (a->dropped > 0) {
        wlog_printf(h->log, "attempt %s: %ld log/step events dropped while the server was away",
                    a->id, a->dropped);
        a->dropped = 0;
    }
    json_t *body = json_pack("{s:I,s:I,s:O}", "fence", (json_int_t)a->fence, "first",
                             (json_int_t)a->first, "events", a->pending);
    long status;
    json_t *answer = NULL;
    char err[300];
    int rc = wapi_post(h->api, a->path_events, body, &status, &answer, err, sizeof err);
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
        wlog_printf(h->log, "attempt %s: events refused (%ld): %s", a->id, status,
                    wapi_error_message(answer, "fenced"));
        r = REPORT_FENCED;
    } else if (status >= 400 && status < 500) {
        /* The server will never take this batch; holding it would stall. */
        wlog_printf(h->log, "attempt %s: %zu events rejected (%ld): %s", a->id,
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
    int rc = wapi_post(a->h->api, a->path_finish, body, &status, &answer, err, sizeof err);
    enum report r = REPORT_RETRY;
    if (rc == 0 && status == 200)
        r = REPORT_OK;
    else if (rc == 0 && (status == 409 || status == 404))
        r = REPORT_FENCED;
    else if (rc == 0 && status >= 400 && status < 500)
        r = REPORT_REJECTED;
    if (r != REPORT_OK && r != REPORT_RETRY)
        wlog_printf(a->h->log, "attempt %s: finish refused (%ld): %s", a->id, status,
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
    const struct attempt_host *h = a->h;
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
            a->reported = r == REPORT_OK;
            if (r == REPORT_FENCED)
                a->fenced = true;
            if (r != REPORT_RETRY)
                break;
        } else if (a->fenced) {
            break;
        }
        if (!logged_outage) {
            wlog_printf(h->log, "attempt %s: server away; holding the result", a->id);
            logged_outage = true;
        }
        if (stopping(h)) {
            if (stop_seen == 0)
                stop_seen = trainer_proc_now();
            else if (trainer_proc_now() - stop_seen > LAST_REPORT_PATIENCE_S) {
                wlog_printf(h->log, "attempt %s: stopping without reporting the end", a->id);
                break;
            }
            struct timespec ts = {.tv_sec = 0, .tv_nsec = 500000000L};
            nanosleep(&ts, NULL);
        } else {
            nap(h, OUTAGE_BACKOFF_MS);
        }
    }
    json_decref(body);
}


/* The stop the trainer must get now, if any. */
static enum tproto_stop stop_now(const struct attempt_host *h, double now)
{
    enum tproto_stop k = h->requested(h->ctx);
    /* The host goes away (a worker stopping; a runner's SIGTERM from the
     * engine: preemption, scancel, its time limit) or the engine's time
     * limit is near: checkpoint, and the job continues elsewhere. */
    if (k == TPROTO_STOP_NONE && (stopping(h) || (h->deadline > 0 && now >= h->deadline)))
        k = TPROTO_STOP_MOVE;
    return k;
}

/* Writes the trainer's config into h->dir and starts it (p: OUT). On
 * failure false, with the line the job's error is made of in start_error
 * (OUT, errcap bytes). */
static bool start_trainer(const struct attempt_host *h, const json_t *spec,
                          struct trainer_proc *p, char *start_error, size_t errcap)
{
    char config[800], err[600] = "";
    snprintf(config, sizeof config, "%s/ATTEMPT.json", h->dir);
    if (fs_mkdirs(h->dir, 0700) != 0) {
        snprintf(start_error, errcap, "worker: cannot create %s: %s", h->dir, strerror(errno));
        return false;
    }
    if (attempt_config_write(spec, h->cpus, h->device ? h->device : "cpu", config, err,
                             sizeof err) != 0) {
        snprintf(start_error, errcap, "worker: %s", err);
        return false;
    }
    char *argv[] = {(char *)h->alallo_bin, "train", "--config", config, NULL};
    if (trainer_proc_start(p, argv, h->dir, err, sizeof err) != 0) {
        snprintf(start_error, errcap, "worker: %s", err);
        return false;
    }
    return true;
}

/* Sends the pending events when they are due: urgent ones, every
 * FLUSH_EVERY_S, or a full batch; after a failed try, not before
 * *retry_after. */
static void flush_when_due(struct attempt *a, double now, double *last_flush,
                           double *retry_after)
{
    size_t n = json_array_size(a->pending);
    if (n > 0 && !a->fenced && now >= *retry_after &&
        (a->urgent || now - *last_flush >= FLUSH_EVERY_S || n >= FLUSH_BATCH)) {
        enum report r = flush_events(a);
        *last_flush = now;
        if (r != REPORT_RETRY)
            a->urgent = false;
        if (r == REPORT_FENCED)
            a->fenced = true;
        *retry_after = r == REPORT_RETRY ? now + OUTAGE_BACKOFF_MS / 1000.0 : 0;
    }
}

/* Relays the started trainer's events until it exits, stopping it when
 * asked (SIGTERM, then SIGKILL after stop_grace_s) and killing it when the
 * attempt is fenced. */
static void watch_trainer(struct attempt *a, struct trainer_proc *p)
{
    const struct attempt_host *h = a->h;
    double last_flush = trainer_proc_now(), retry_after = 0, signalled_at = 0;
    bool killed = false;
    for (;;) {
        int running = trainer_proc_poll(p, 200, on_trainer_line, a);
        double now = trainer_proc_now();
        flush_when_due(a, now, &last_flush, &retry_after);
        if (!a->fenced && h->fenced && h->fenced(h->ctx))
            a->fenced = true;
        if (running <= 0)
            break;
        /* Another attempt owns the job now: this trainer must not write
         * one more checkpoint. */
        if (a->fenced && !killed) {
            wlog_printf(h->log, "attempt %s: fenced; killing the trainer", a->id);
            trainer_proc_signal(p, SIGKILL);
            killed = true;
        }
        enum tproto_stop k = stop_now(h, now);
        if (k != TPROTO_STOP_NONE && signalled_at == 0 && !killed) {
            a->acted_on = k;
            wlog_printf(h->log, "attempt %s: stopping the trainer (%s)", a->id,
                        tproto_stop_name(k));
            trainer_proc_signal(p, SIGTERM);
            signalled_at = now;
        }
        if (signalled_at > 0 && !killed && now - signalled_at > h->stop_grace_s) {
            wlog_printf(h->log, "attempt %s: no exit %d s after SIGTERM; SIGKILL", a->id,
                        h->stop_grace_s);
            trainer_proc_signal(p, SIGKILL);
            killed = true;
        }
    }
    /* The engine may signal the whole step, trainer included (Slurm's
     * SIGTERM on preemption): a trainer that checkpointed and exited 4
     * before this loop sent its own SIGTERM stopped for the same
     * reason. */
    if (a->acted_on == TPROTO_STOP_NONE && p->reaped && p->term_signal == 0 &&
        p->exit_status == TPROTO_EXIT_STOPPED)
        a->acted_on = stop_now(h, trainer_proc_now());
    if (p->term_signal)
        wlog_printf(h->log, "attempt %s: trainer killed by signal %d", a->id, p->term_signal);
    else
        wlog_printf(h->log, "attempt %s: trainer exited with %d", a->id, p->exit_status);
}

enum attempt_report attempt_run(const struct attempt_host *h, const char *id, long long fence,
                                const json_t *spec)
{
    struct attempt *a = calloc(1, sizeof *a);
    if (!a) {
        wlog_printf(h->log, "out of memory for an attempt");
        return ATTEMPT_UNREPORTED;
    }
    a->h = h;
    a->last_step = -1;
    a->pending = json_array();
    snprintf(a->id, sizeof a->id, "%s", id);
    a->fence = fence;
    snprintf(a->path_events, sizeof a->path_events, "/internal/attempts/%s/events", a->id);
    snprintf(a->path_finish, sizeof a->path_finish, "/internal/attempts/%s/finish", a->id);

    struct trainer_proc p;
    memset(&p, 0, sizeof p);
    p.out_fd = p.err_fd = -1;
    char start_error[1024] = "";
    bool started = start_trainer(h, spec, &p, start_error, sizeof start_error);
    if (!started) {
        wlog_printf(h->log, "attempt %s: %s", a->id, start_error);
    } else {
        wlog_printf(h->log, "attempt %s: trainer %d started", a->id, (int)p.pid);
        watch_trainer(a, &p);
    }
    report_end(a, &p, started, start_error);
    enum attempt_report result = a->fenced ? ATTEMPT_FENCED
                                 : a->reported ? ATTEMPT_REPORTED
                                               : ATTEMPT_UNREPORTED;
    trainer_proc_close(&p);
    json_decref(a->pending);
    free(a);
    return result;
}
