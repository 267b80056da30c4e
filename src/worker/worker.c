/* worker.c - worker_run: register, heartbeat, claim, run one attempt at a
 * time, relay the trainer's events, finish. See docs/worker.md.
 *
 * Two threads per worker: the caller's thread runs the claim loop and the
 * attempt (attempt_run.c: the trainer, its events, the finish), and a heartbeat
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
#include "worker/attempt_run.h"
#include "worker/trainer_proc.h"
#include "worker/wapi.h"
#include "worker/wlog.h"
#include "worker/worker_speed.h"

#define HTTP_TIMEOUT_MS 10000
#define REGISTER_PATIENCE_S 30.0
#define IDLE_BACKOFF_MS 500
#define OUTAGE_BACKOFF_MS 1000


struct worker {
    const struct worker_config *cfg;
    volatile sig_atomic_t *stop;
    struct wlog log;
    struct wapi api; /* the main thread's client */
    char work_dir[512];
    struct bench_speed speed;
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
    json_t *speed = w->speed_known ? bench_speed_json(&w->speed)
                                   : json_pack("{s:n,s:n}", "tokens_per_s", "flops");
    json_t *body = json_pack("{s:s,s:i,s:I,s:s,s:f,s:s,s:o,s:s}", "name", c->name, "cpus",
                             c->cpus, "mem_bytes", (json_int_t)c->mem_bytes, "accelerator",
                             c->accelerator, "price_per_hour", c->price_per_hour, "class",
                             c->class_, "speed", speed, "trainer", worker_trainer_device(c));
    /* GPUs only when declared: a server from before them refuses no key. */
    if (body && c->gpus > 0)
        json_object_set_new(body, "gpus",
                            json_pack("{s:i,s:s,s:I}", "count", c->gpus, "kind", c->gpu_kind,
                                      "mem_bytes", (json_int_t)c->gpu_mem_bytes));
    return body;
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

/* The host's side of attempt_run: the stop the heartbeat thread or an
 * event answer noted, shared under w->mu. */
static enum tproto_stop host_requested(void *ctx)
{
    return requested_stop(ctx);
}

static void host_note(void *ctx, enum tproto_stop k)
{
    struct worker *w = ctx;
    pthread_mutex_lock(&w->mu);
    if (w->stop_request == TPROTO_STOP_NONE)
        w->stop_request = k;
    pthread_mutex_unlock(&w->mu);
}

/* Runs the attempt the server placed here, from start to finish. */
static void run_attempt(struct worker *w, json_t *claim)
{
    const char *id = json_string_value(json_object_get(claim, "attempt_id"));
    const char *job = json_string_value(json_object_get(claim, "job_id"));
    json_t *fence = json_object_get(claim, "fence");
    json_t *spec = json_object_get(claim, "spec");
    if (!id_valid(id) || !json_is_integer(fence)) {
        wlog_printf(&w->log, "claim answer without a usable attempt_id and fence: ignored");
        return;
    }
    long long f = (long long)json_integer_value(fence);
    wlog_printf(&w->log, "attempt %s of job %s claimed (fence %lld)", id, job ? job : "?", f);
    set_current(w, id, f);
    char dir[700];
    snprintf(dir, sizeof dir, "%s/attempts/%s", w->work_dir, id);
    struct attempt_host h = {
        .api = &w->api,
        .log = &w->log,
        .alallo_bin = w->cfg->alallo_bin,
        .cpus = w->cfg->cpus,
        .device = worker_trainer_device(w->cfg),
        .stop_grace_s = w->cfg->stop_grace_s,
        .dir = dir,
        .stop = w->stop,
        .requested = host_requested,
        .note = host_note,
        .ctx = w,
    };
    attempt_run(&h, id, f, spec);
    set_current(w, "", 0);
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
    wlog_printf(&w->log, "starting: %d cpus, %lld bytes, %s, %.4f/h, server %s, trainer %s",
                cfg->cpus, (long long)cfg->mem_bytes, cfg->class_, cfg->price_per_hour,
                cfg->server_url, worker_trainer_device(cfg));
    char warning[300];
    if (worker_gpu_warning(cfg, warning, sizeof warning)) {
        /* The log, and the operator's terminal (serve's or worker's stderr). */
        wlog_printf(&w->log, "%s", warning);
        fprintf(stderr, "worker %s: %s\n", cfg->name, warning);
    }

    if (wapi_init(&w->api, cfg->server_url, cfg->token, HTTP_TIMEOUT_MS, err, sizeof err) != 0) {
        fprintf(stderr, "worker %s: %s\n", cfg->name, err);
        wlog_printf(&w->log, "%s", err);
        goto out;
    }
    if (cfg->bench_timeout_s > 0) {
        if (worker_speed_measure(cfg->alallo_bin, cfg->cpus, worker_trainer_device(cfg),
                                 cfg->bench_timeout_s, stop, &w->speed, err, sizeof err) == 0) {
            w->speed_known = true;
            wlog_printf(&w->log,
                        "measured speed: %.1f tokens/s, %.3g FLOP/s (on %s); %.3g FLOP/s on "
                        "the %s shape",
                        w->speed.tokens_per_s, w->speed.flops, worker_trainer_device(cfg),
                        w->speed.small_flops, BENCH_SPEED_SMALL_SHAPE);
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
