/* attempt_runner.c - `alallo attempt run`; see attempt_runner.h.
 *
 * Two threads, as in a worker: the main thread starts the attempt and runs
 * it (attempt_run.c), a heartbeat thread reports every heartbeat_s and
 * notes the stop the server asks for, or that the attempt was fenced. The
 * only signal handlers are installed here: SIGTERM and SIGINT set the stop
 * flag.
 */
#include "worker/attempt_runner.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/cmd_help.h"
#include "core/fs.h"
#include "core/ids.h"
#include "core/trainer_protocol.h"
#include "worker/attempt_run.h"
#include "worker/trainer_proc.h"
#include "worker/wapi.h"
#include "worker/wlog.h"
#include "worker/worker.h"

#define HTTP_TIMEOUT_MS 10000
#define START_PATIENCE_S 60.0 /* the server away at start: retry this long */

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

struct runner {
    bool trainer_cuda; /* this alallo was built with CUDA (from src/app) */
    char server[256];
    char attempt[IDS_MAX];
    char token[128];
    char work_dir[512];
    char alallo_bin[512];
    int stop_grace_s;
    char engine_id[32];
    char node[128];
    struct wlog log;

    pthread_mutex_t mu; /* guards what follows */
    pthread_cond_t wake;
    long long fence;
    int heartbeat_s;
    enum tproto_stop stop_request;
    bool fenced;
    bool quit;
};

static void usage(FILE *f)
{
    fputs("usage: alallo attempt run --server URL --attempt ID --token @FILE --work-dir DIR\n"
          "                          [--stop-grace S]\n"
          "  runs one attempt an engine (Slurm, or local processes) started; see\n"
          "  docs/worker-protocol.md, \"The attempt runner\"\n",
          f);
}

/* ---- the host's side of attempt_run ------------------------------------ */

static enum tproto_stop host_requested(void *ctx)
{
    struct runner *r = ctx;
    pthread_mutex_lock(&r->mu);
    enum tproto_stop k = r->stop_request;
    pthread_mutex_unlock(&r->mu);
    return k;
}

static void host_note(void *ctx, enum tproto_stop k)
{
    struct runner *r = ctx;
    pthread_mutex_lock(&r->mu);
    if (r->stop_request == TPROTO_STOP_NONE)
        r->stop_request = k;
    pthread_mutex_unlock(&r->mu);
}

static bool host_fenced(void *ctx)
{
    struct runner *r = ctx;
    pthread_mutex_lock(&r->mu);
    bool f = r->fenced;
    pthread_mutex_unlock(&r->mu);
    return f;
}

/* ---- heartbeats --------------------------------------------------------- */

static void *heartbeat_main(void *arg)
{
    struct runner *r = arg;
    struct wapi api;
    char err[300], path[160];
    if (wapi_init(&api, r->server, r->token, HTTP_TIMEOUT_MS, err, sizeof err)) {
        wlog_printf(&r->log, "heartbeat: %s", err);
        return NULL;
    }
    snprintf(path, sizeof path, "/internal/attempts/%s/heartbeat", r->attempt);
    bool outage = false;
    pthread_mutex_lock(&r->mu);
    while (!r->quit) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += r->heartbeat_s;
        while (!r->quit && pthread_cond_timedwait(&r->wake, &r->mu, &until) != ETIMEDOUT)
            ;
        if (r->quit)
            break;
        long long fence = r->fence;
        pthread_mutex_unlock(&r->mu);
        json_t *body = json_pack("{s:I,s:s,s:s}", "fence", (json_int_t)fence, "engine_id",
                                 r->engine_id, "node", r->node);
        long status = 0;
        json_t *answer = NULL;
        int rc = wapi_post(&api, path, body, &status, &answer, err, sizeof err);
        json_decref(body);
        if (rc != 0 && !outage)
            wlog_printf(&r->log, "heartbeat: %s", err);
        if (rc == 0 && outage)
            wlog_printf(&r->log, "heartbeat: server back (%ld)", status);
        outage = rc != 0;
        enum tproto_stop k = TPROTO_STOP_NONE;
        bool parsed = rc == 0 && status == 200 &&
                      tproto_stop_parse(json_string_value(json_object_get(answer, "stop")), &k);
        if (rc == 0 && (status == 409 || status == 404))
            wlog_printf(&r->log, "heartbeat refused (%ld): %s", status,
                        wapi_error_message(answer, "fenced"));
        json_decref(answer);
        pthread_mutex_lock(&r->mu);
        if (rc == 0 && (status == 409 || status == 404))
            r->fenced = true; /* another attempt owns the job */
        else if (parsed && r->stop_request == TPROTO_STOP_NONE)
            r->stop_request = k;
    }
    pthread_mutex_unlock(&r->mu);
    wapi_free(&api);
    return NULL;
}

/* ---- start ---------------------------------------------------------------- */

/* The start call, retried while the server is away. Returns 0 with *answer
 * (owned by the caller), 3 when the server refused to start this attempt,
 * 1 when it could not be reached. */
static int start(struct runner *r, struct wapi *api, json_t **answer)
{
    char path[160], err[300];
    snprintf(path, sizeof path, "/internal/attempts/%s/start", r->attempt);
    double give_up = trainer_proc_now() + START_PATIENCE_S;
    bool logged = false;
    while (!stop_flag) {
        json_t *body = json_pack("{s:s,s:s}", "engine_id", r->engine_id, "node", r->node);
        long status = 0;
        int rc = wapi_post(api, path, body, &status, answer, err, sizeof err);
        json_decref(body);
        if (rc == 0 && status == 200)
            return 0;
        if (rc == 0 && status >= 400 && status < 500) {
            wlog_printf(&r->log, "start refused (%ld): %s", status,
                        wapi_error_message(*answer, "no reason given"));
            json_decref(*answer);
            *answer = NULL;
            return 3;
        }
        if (!logged)
            wlog_printf(&r->log, "start: %s", rc ? err : "server error; retrying");
        logged = true;
        json_decref(*answer);
        *answer = NULL;
        if (trainer_proc_now() > give_up)
            break;
        struct timespec ts = {.tv_sec = 1, .tv_nsec = 0};
        nanosleep(&ts, NULL);
    }
    return 1;
}

/* ---- arguments ------------------------------------------------------------ */

static int parse_args(struct runner *r, int argc, char **argv)
{
    if (cmd_help_asked(argc, argv)) {
        usage(stdout);
        return -1;
    }
    if (argc < 2 || strcmp(argv[1], "run") != 0) {
        usage(stderr);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr, "alallo attempt run: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        bool ok = true;
        if (strcmp(a, "--server") == 0)
            ok = strlen(v) < sizeof r->server && snprintf(r->server, sizeof r->server, "%s", v);
        else if (strcmp(a, "--attempt") == 0)
            ok = ids_valid(v) && strlen(v) < sizeof r->attempt &&
                 snprintf(r->attempt, sizeof r->attempt, "%s", v);
        else if (strcmp(a, "--token") == 0)
            ok = worker_read_token(v, r->token, sizeof r->token) == 0;
        else if (strcmp(a, "--work-dir") == 0)
            ok = v[0] == '/' && strlen(v) < sizeof r->work_dir - 64 &&
                 snprintf(r->work_dir, sizeof r->work_dir, "%s", v);
        else if (strcmp(a, "--stop-grace") == 0) {
            char *end = NULL;
            long s = strtol(v, &end, 10);
            ok = end != v && !*end && s >= 1 && s <= 3600;
            r->stop_grace_s = (int)s;
        } else {
            fprintf(stderr, "alallo attempt run: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "alallo attempt run: bad value for %s%s\n", a,
                    strcmp(a, "--work-dir") == 0 ? " (an absolute path)" : "");
            return 2;
        }
    }
    if (!r->server[0] || !r->attempt[0] || !r->token[0] || !r->work_dir[0]) {
        fprintf(stderr, "alallo attempt run: --server, --attempt, --token and --work-dir are "
                        "required\n");
        usage(stderr);
        return 2;
    }
    return 0;
}

/* Where it runs: the engine's job id and the node, from the engine's
 * environment (Slurm's, or ALALLO_ENGINE_ID from the process engine). */
static void place(struct runner *r)
{
    worker_engine_place(r->engine_id, sizeof r->engine_id, r->node, sizeof r->node);
}

int cmd_attempt(int argc, char **argv, bool trainer_cuda)
{
    struct runner *r = calloc(1, sizeof *r);
    if (!r)
        return 1;
    r->trainer_cuda = trainer_cuda;
    r->stop_grace_s = 30;
    r->heartbeat_s = 2;
    r->log.fd = -1;
    int rc = parse_args(r, argc, argv);
    if (rc) {
        free(r);
        return rc < 0 ? 0 : rc;
    }
    place(r);
    ssize_t n = readlink("/proc/self/exe", r->alallo_bin, sizeof r->alallo_bin - 1);
    r->alallo_bin[n > 0 ? n : 0] = '\0';
    worker_catch_stop_signals(on_signal);

    char log_path[600], err[300];
    snprintf(log_path, sizeof log_path, "%s/runner.log", r->work_dir);
    snprintf(r->log.name, sizeof r->log.name, "%s", r->attempt);
    if (fs_mkdirs(r->work_dir, 0700) != 0 || wlog_open(&r->log, log_path, r->attempt) != 0)
        fprintf(stderr, "alallo attempt run: cannot open %s: %s; logging here\n", log_path,
                strerror(errno));
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->wake, &ca);
    pthread_condattr_destroy(&ca);

    struct wapi api;
    json_t *answer = NULL;
    rc = 1;
    if (wapi_init(&api, r->server, r->token, HTTP_TIMEOUT_MS, err, sizeof err) != 0) {
        wlog_printf(&r->log, "%s", err);
        goto out;
    }
    wlog_printf(&r->log, "attempt %s: starting (engine job %s on %s)", r->attempt,
                r->engine_id[0] ? r->engine_id : "?", r->node[0] ? r->node : "?");
    rc = start(r, &api, &answer);
    if (rc)
        goto out_api;
    json_t *fence = json_object_get(answer, "fence");
    json_t *spec = json_object_get(answer, "spec");
    json_t *hb = json_object_get(answer, "heartbeat_s");
    json_t *cpus = json_object_get(answer, "cpus");
    json_t *deadline = json_object_get(answer, "deadline_s");
    if (!json_is_integer(fence) || !json_is_object(spec)) {
        wlog_printf(&r->log, "start answer without a fence and a spec");
        rc = 1;
        goto out_api;
    }
    r->fence = (long long)json_integer_value(fence);
    if (json_is_integer(hb) && json_integer_value(hb) >= 1 && json_integer_value(hb) <= 60)
        r->heartbeat_s = (int)json_integer_value(hb);
    int threads = json_is_integer(cpus) && json_integer_value(cpus) >= 1
                      ? (int)json_integer_value(cpus)
                      : 1;
    /* The slot's GPUs (its pool's gres; Slurm sets CUDA_VISIBLE_DEVICES to
     * the ones it allocated): the trainer takes them when this alallo has
     * CUDA. */
    json_t *gpus = json_object_get(answer, "gpus");
    struct worker_config slot = {.trainer_cuda = r->trainer_cuda};
    if (json_is_integer(gpus) && json_integer_value(gpus) > 0 && json_integer_value(gpus) <= 64)
        slot.gpus = (int)json_integer_value(gpus);
    char warning[300];
    if (worker_gpu_warning(&slot, warning, sizeof warning))
        wlog_printf(&r->log, "%s", warning);
    double left = json_is_number(deadline) ? json_number_value(deadline) : 0;
    wlog_printf(&r->log,
                "attempt %s of job %s: fence %lld, %d threads, trainer on %s, deadline in %.0f s",
                r->attempt, json_string_value(json_object_get(answer, "job_id")), r->fence,
                threads, worker_trainer_device(&slot), left);
    pthread_t thread;
    if (pthread_create(&thread, NULL, heartbeat_main, r) != 0) {
        wlog_printf(&r->log, "cannot start the heartbeat thread");
        rc = 1;
        goto out_api;
    }
    struct attempt_host h = {
        .api = &api,
        .log = &r->log,
        .alallo_bin = r->alallo_bin,
        .cpus = threads,
        .device = worker_trainer_device(&slot),
        .stop_grace_s = r->stop_grace_s,
        .dir = r->work_dir,
        .stop = &stop_flag,
        .deadline = left > 0 ? trainer_proc_now() + left : 0,
        .requested = host_requested,
        .note = host_note,
        .fenced = host_fenced,
        .ctx = r,
    };
    enum attempt_report report = attempt_run(&h, r->attempt, r->fence, spec);
    pthread_mutex_lock(&r->mu);
    r->quit = true;
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->mu);
    pthread_join(thread, NULL);
    wlog_printf(&r->log, "attempt %s: %s", r->attempt,
                report == ATTEMPT_REPORTED ? "reported"
                : report == ATTEMPT_FENCED ? "fenced: another attempt owns the job"
                                           : "its end could not be reported");
    rc = report == ATTEMPT_UNREPORTED ? 1 : 0;
out_api:
    json_decref(answer);
    wapi_free(&api);
out:
    wlog_close(&r->log);
    pthread_cond_destroy(&r->wake);
    pthread_mutex_destroy(&r->mu);
    memset(r->token, 0, sizeof r->token);
    free(r);
    return rc;
}
