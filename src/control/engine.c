/* engine.c - attempts run by an engine: slots, submission, polling,
 * reconciliation by tag, cancels and lost runners. See engine.h and
 * docs/slurm.md ("What alallo does on each engine event").
 */
#include "control/engine.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "control/bench_watch.h"
#include "control/fleet.h"
#include "control/job_move.h"
#include "control/leadership.h"
#include "control/lifecycle.h"
#include "control/paths.h"
#include "control/sched_link.h"
#include "control/serving_jobs.h"
#include "control/serving_registry.h"
#include "control/workers.h"
#include "core/bench_speed.h"
#include "core/fs.h"
#include "core/ids.h"
#include "core/job.h"
#include "core/keys.h"
#include "core/stop_reason.h"
#include "core/text.h"
#include "core/worker_state.h"
#include "exec/process.h"
#include "exec/reconcile.h"
#include "exec/slurm.h"
#include "sched/serve_scale.h"

#define LIST_MAX 4096      /* engine jobs read by one list */
#define OPEN_MAX ENGINE_SLOTS_MAX
#define REFUSED_BACKOFF_MS 60000 /* a pool whose submission was refused rests */
#define SCRIPT_MAX 4096
#define BENCH_OUTPUT_MAX (64 * 1024)      /* of a bench's output, what is read */

struct slot {
    char name[STORE_NAME_MAX]; /* ENGINE.POOL.K */
    int pool;
    bool serving; /* held by a serving engine beyond the range's MIN */
};

/* A pool's bench job (engine.h), as the engine's thread follows it. */
struct pool_bench {
    bool known;           /* a slot of the pool has a speed: no bench again */
    bool running;         /* a bench job was submitted and has not been judged */
    int64_t since_ms;     /* when it was submitted (or found, after a restart) */
    int64_t running_ms;   /* when it was first known RUNNING; 0: not yet */
    int64_t marked_ms;    /* when its start mark was first seen; 0: not yet */
    int64_t next_try_ms;  /* after a failure: not before this */
    char cancelled_id[EXEC_ID_MAX]; /* the bench job last cancelled, */
    int64_t cancel_next_ms;         /* and when it is cancelled again */
};

/* One pool's serving engines (cfg.serve[i]). */
struct serve_set {
    struct serving_jobs *jobs;
    int pool;                     /* its index in cfg.pools */
    int64_t changed_ms;           /* its count last changed; 0: never */
};

/* A cancel asked of a running attempt: when the engine first saw it. */
struct cancel_note {
    char attempt[IDS_MAX];
    int64_t since_ms;
};

struct engine {
    struct control *ctl;
    struct executor *x;
    struct engine_config cfg;
    struct slot slots[ENGINE_SLOTS_MAX];
    int n_slots;

    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool quit;

    /* the thread's own */
    struct exec_job *jobs;
    int n_jobs;
    struct store_attempt *open;
    int n_open;
    struct cancel_note cancels[OPEN_MAX];
    int n_cancels;
    int64_t pool_rest_until[ENGINE_POOLS_MAX];
    struct pool_bench bench[ENGINE_POOLS_MAX];
    struct serve_set serve[ENGINE_SERVE_POOLS_MAX]; /* cfg.serve's, in its order */
    struct serving_jobs *serve_jobs[ENGINE_SERVE_POOLS_MAX]; /* serve[i].jobs */
    int64_t serve_changed_ms;     /* any pool's count last changed; 0: never */
};

const char *engine_name(const struct engine *e)
{
    return e ? e->x->name : "";
}

/* ---- small helpers ------------------------------------------------------ */

static const struct slot *slot_named(const struct engine *e, const char *name)
{
    for (int i = 0; i < e->n_slots; i++)
        if (strcmp(e->slots[i].name, name) == 0)
            return &e->slots[i];
    return NULL;
}

static const struct engine_pool *pool_of(const struct engine *e, const char *slot)
{
    const struct slot *s = slot_named(e, slot);
    return s ? &e->cfg.pools[s->pool] : NULL;
}

/* Whether worker name `w` is one of this engine's slots (also of a pool
 * no longer declared: its attempts are still the engine's). */
static bool engine_worker(const struct engine *e, const char *w)
{
    size_t n = strlen(e->x->name);
    return strncmp(w, e->x->name, n) == 0 && w[n] == '.';
}

static const struct exec_job *job_tagged(const struct engine *e, const char *attempt_id)
{
    char tag[EXEC_TAG_MAX];
    if (!exec_tag_for(attempt_id, tag))
        return NULL;
    for (int i = 0; i < e->n_jobs; i++)
        if (strcmp(e->jobs[i].tag, tag) == 0)
            return &e->jobs[i];
    return NULL;
}

static void cancel_in_engine(struct engine *e, const char *attempt_id, const char *why)
{
    char tag[EXEC_TAG_MAX];
    if (!exec_tag_for(attempt_id, tag))
        return;
    enum alallo_err r = executor_cancel(e->x, tag);
    log_line(r ? "warn" : "info", "%s: cancel %s (%s)%s%s", e->x->name, tag, why,
             r ? ": reconciliation tries again: " : "", r ? e->x->error : "");
}

/* Ends the engine's attempt on `slot` (lifecycle_worker_gone: the job
 * continues from its latest checkpoint, or is cancelled if cancelling). */
static void end_attempt(struct engine *e, const struct store_attempt *a, const char *reason)
{
    log_line("warn", "%s: attempt %s of job %s ends: %s", e->x->name, a->id, a->job, reason);
    enum alallo_err r = lifecycle_worker_gone(e->ctl, a->worker, reason);
    if (r)
        log_line("error", "%s: could not end attempt %s: %s", e->x->name, a->id,
                 err_code(r));
    fleet_invalidate(e->ctl);
}

/* ---- the attempt's row ------------------------------------------------- */

/* What to change on an engine attempt; fields left "" / 0 / false stay. */
struct seen {
    enum engine_state expect_state; /* only from this state (none: any)    */
    enum engine_state state;        /* none: keep                          */
    const char *engine_id;
    const char *reason;       /* NULL: keep                                   */
    const char *node;
    const char *token_hash;
    const char *resume_from;
    int64_t running_ms;       /* set when still 0                             */
    int64_t heartbeat_ms;
    int64_t fence;            /* > 0: the caller's fence must match           */
    bool starting;            /* the engine runs it: "Starting"               */
    bool one_runner;          /* a runner's start: ERR_CONFLICT when another
                                 runner (engine job and node) started it    */
    char event[STORE_MESSAGE_MAX];
    enum tproto_stop stop;    /* OUT */
};

/* Whether attempt a was started by a runner other than the one in engine
 * job `engine_id` on `node`: a runner has called (heartbeat_ms is set only
 * by a runner's start and heartbeats) and what it recorded differs. The
 * same runner retrying a start whose answer it lost matches. A job that a
 * crashed controller forgot, still starting its script beside the job
 * submitted again under the same tag, is such another runner. */
static bool another_runner(const struct store_attempt *a, const char *engine_id,
                           const char *node)
{
    if (engine_state_of(a->engine_state) != ENGINE_STATE_RUNNING || a->heartbeat_ms == 0)
        return false;
    if (strcmp(a->engine_id, engine_id ? engine_id : "") != 0)
        return true;
    return a->node[0] && node && node[0] && strcmp(a->node, node) != 0;
}

static enum alallo_err seen_cb(struct store_job *j, struct store_attempt *a,
                               struct store_writes *w, void *vctx)
{
    struct seen *s = vctx;
    bool owns = a->fence == j->fence && attempt_status_of(a->status) != ATTEMPT_ENDED &&
                strcmp(j->active_attempt, a->id) == 0;
    if (!owns || (s->fence > 0 && s->fence != a->fence))
        return ERR_FENCED;
    if (s->expect_state && engine_state_of(a->engine_state) != s->expect_state)
        return ERR_CONFLICT;
    if (s->one_runner && another_runner(a, s->engine_id, s->node))
        return ERR_CONFLICT;
    if (s->state)
        text_copy(a->engine_state, sizeof a->engine_state, engine_state_name(s->state));
    if (s->engine_id && s->engine_id[0])
        text_copy(a->engine_id, sizeof a->engine_id, s->engine_id);
    if (s->reason)
        text_copy(a->engine_reason, sizeof a->engine_reason, s->reason);
    if (s->node && s->node[0])
        text_copy(a->node, sizeof a->node, s->node);
    if (s->token_hash)
        text_copy(a->token_hash, sizeof a->token_hash, s->token_hash);
    if (s->resume_from)
        text_copy(a->resume_from, sizeof a->resume_from, s->resume_from);
    if (s->running_ms > 0 && a->engine_running_ms == 0)
        a->engine_running_ms = s->running_ms;
    if (s->heartbeat_ms > 0)
        a->heartbeat_ms = s->heartbeat_ms;
    enum alallo_err r = ERR_OK;
    if (s->starting && j->status == JOB_QUEUED && a->engine_running_ms > 0 &&
        attempt_status_of(a->status) == ATTEMPT_STARTING)
        r = job_move_to(j, JOB_QUEUED, MSG_STARTING);
    if (!r && s->event[0])
        r = store_writes_event(w, clock_now_ms(), "info", "message", s->event, NULL);
    s->stop = lifecycle_stop_for(j, a);
    return r;
}

static enum alallo_err update(struct control *ctl, const struct store_attempt *a, struct seen *s)
{
    return store_job_update(ctl->store, a->job, a->id, seen_cb, s);
}

/* ---- submission --------------------------------------------------------- */

/* A crash, as kill -9 would make it, at a named point: for the tests of
 * crash-safe bookkeeping (tests/integration/slurm_cluster.test.mjs), which
 * set ALALLO_TEST_CRASH to "before-submit" or "after-submit". */
static void crash_point(const char *where)
{
    const char *at = getenv("ALALLO_TEST_CRASH");
    if (at && strcmp(at, where) == 0)
        raise(SIGKILL);
}

/* The engine's --time for job j on pool p: the job's remaining limit and
 * some slack, at most the pool's MaxTime. *clamped says whether it was cut. */
static long time_limit_min(const struct control *ctl, const struct store_job *j,
                           const struct engine_pool *p, bool *clamped)
{
    int64_t left_s = ctl->cfg.time_limit_s - j->running_ms / 1000;
    if (left_s < 60)
        left_s = 60;
    long min = (long)((left_s + 59) / 60) + ENGINE_TIME_SLACK_MIN;
    *clamped = p->max_time_min > 0 && min > p->max_time_min;
    return *clamped ? p->max_time_min : min;
}

/* Writes the attempt's token and batch script and submits it. Each call
 * makes a new token (only its hash is kept, so a resubmission after a crash
 * cannot know the old one). Returns ERR_OK when submitted,
 * ERR_UNAVAILABLE when the engine did not answer (reconciliation finds
 * out), another error when it refused. */
static enum alallo_err submit(struct engine *e, const struct store_attempt *a)
{
    struct control *ctl = e->ctl;
    const struct engine_pool *p = pool_of(e, a->worker);
    if (!p)
        return ERR_NOT_FOUND;
    struct store_job *j = malloc(sizeof *j);
    if (!j)
        return ERR_NOMEM;
    enum alallo_err r = store_job_get(ctl->store, NULL, a->job, j);
    char dir[EXEC_PATH_MAX], node_dir[EXEC_PATH_MAX], path[EXEC_PATH_MAX];
    char token[KEYS_MAX], hash[KEYS_HASH_HEX];
    if (!r && (!control_attempt_dir(ctl, a->job, a->id, NULL, dir, sizeof dir) ||
               !engine_map_path(&e->cfg, dir, node_dir, sizeof node_dir) ||
               fs_mkdirs(dir, 0700) != 0))
        r = ERR_IO;
    if (!r && (keys_new_token(token, sizeof token) || keys_hash(token, hash)))
        r = ERR_INTERNAL;
    struct seen s = {.expect_state = ENGINE_STATE_SUBMITTING, .token_hash = hash};
    if (!r)
        r = update(ctl, a, &s);
    /* The token file before the script that names it; both durable before
     * the engine can start either. */
    char line[KEYS_MAX + 2];
    text_printf(line, sizeof line, "%s\n", token);
    if (!r && (!text_printf(path, sizeof path, "%s/token", dir) ||
               fs_write_durably(path, line, strlen(line), 0600) != 0))
        r = ERR_IO;
    char script[SCRIPT_MAX] = "";
    bool ok = !r && text_printf(script, sizeof script,
                                "#!/bin/sh\n# attempt %s of job %s, written by alallo serve\n"
                                "exec %s%s",
                                a->id, a->job, e->cfg.launcher, e->cfg.launcher[0] ? " " : "");
    char token_arg[EXEC_PATH_MAX + 8];
    text_printf(token_arg, sizeof token_arg, "@%s/token", node_dir);
    ok = ok && exec_script_quote(script, sizeof script, ctl->alallo_bin) &&
         text_printf(script + strlen(script), sizeof script - strlen(script),
                     " attempt run --server ") &&
         exec_script_quote(script, sizeof script, e->cfg.server_url) &&
         text_printf(script + strlen(script), sizeof script - strlen(script), " --attempt %s",
                     a->id) &&
         text_printf(script + strlen(script), sizeof script - strlen(script), " --token ") &&
         exec_script_quote(script, sizeof script, token_arg) &&
         text_printf(script + strlen(script), sizeof script - strlen(script), " --work-dir ") &&
         exec_script_quote(script, sizeof script, node_dir) &&
         text_printf(script + strlen(script), sizeof script - strlen(script), "\n");
    if (!r && !ok)
        r = ERR_TOO_LARGE;
    struct exec_submit sub;
    memset(&sub, 0, sizeof sub);
    exec_pool_fill_submit(&p->decl, &sub);
    if (!r && (!exec_tag_for(a->id, sub.tag) ||
               !text_printf(sub.script, sizeof sub.script, "%s/attempt.sbatch", dir) ||
               fs_write_durably(sub.script, script, strlen(script), 0700) != 0 ||
               !text_printf(sub.output, sizeof sub.output, "%s/%s-%%j.out", node_dir, e->x->name) ||
               !text_copy(sub.workdir, sizeof sub.workdir, node_dir)))
        r = ERR_IO;
    bool clamped = false;
    if (!r)
        sub.time_limit_min = time_limit_min(ctl, j, p, &clamped);
    struct exec_receipt rc;
    memset(&rc, 0, sizeof rc);
    if (!r)
        crash_point("before-submit");
    if (!r)
        r = executor_submit(e->x, &sub, &rc);
    if (!r)
        crash_point("after-submit");
    if (!r) {
        struct seen done = {.expect_state = ENGINE_STATE_SUBMITTING,
                            .state = ENGINE_STATE_PENDING, .engine_id = rc.id, .reason = ""};
        clamped = clamped || rc.clamped;
        text_printf(done.event, sizeof done.event, "Submitted to pool %s as %s job %s (attempt %s)%s%s",
                    p->decl.name, e->x->name, rc.id, a->id, clamped ? "; " : "",
                    !clamped ? ""
                    : rc.note[0] ? rc.note
                                 : "its time limit is cut to the partition's MaxTime");
        enum alallo_err u = update(ctl, a, &done);
        if (u)
            log_line("warn", "%s: attempt %s submitted as %s, not recorded (%s): reconciliation "
                     "records it", e->x->name, a->id, rc.id, err_code(u));
        log_line("info", "%s: attempt %s of job %s submitted as %s to pool %s%s", e->x->name,
                 a->id, a->job, rc.id, p->decl.name, clamped ? " (time limit clamped)" : "");
    } else {
        log_line("warn", "%s: attempt %s of job %s not submitted: %s: %s", e->x->name, a->id,
                 a->job, err_code(r), e->x->error);
    }
    memset(token, 0, sizeof token);
    free(j);
    return r;
}

/* A submission refused for good (not a lost answer): the attempt ends (its
 * job waits again) and the pool rests a while, so that a wrong pool does
 * not spin. */
static void refused(struct engine *e, const struct store_attempt *a, enum alallo_err r)
{
    const struct slot *s = slot_named(e, a->worker);
    if (s)
        e->pool_rest_until[s->pool] = clock_now_ms() + REFUSED_BACKOFF_MS;
    char why[STORE_MESSAGE_MAX];
    text_printf(why, sizeof why, "the engine refused the submission (%s: %s)", err_code(r),
                e->x->error);
    cancel_in_engine(e, a->id, "refused");
    end_attempt(e, a, why);
}

/* ---- the engine's view -------------------------------------------------- */

/* Records what the engine says of attempt a (pending and why, or running),
 * when it changed. */
static void apply_state(struct engine *e, const struct store_attempt *a, const struct exec_job *x)
{
    if (x->state == EXEC_PENDING) {
        bool changed = engine_state_of(a->engine_state) != ENGINE_STATE_PENDING ||
                       strcmp(a->engine_reason, x->reason) != 0 || strcmp(a->engine_id, x->id);
        if (!changed || attempt_status_of(a->status) != ATTEMPT_STARTING)
            return;
        struct seen s = {.state = ENGINE_STATE_PENDING, .engine_id = x->id, .reason = x->reason};
        if (x->reason[0] && strcmp(a->engine_reason, x->reason) != 0)
            text_printf(s.event, sizeof s.event, "Waiting in %s: %s", e->x->name, x->reason);
        update(e->ctl, a, &s);
    } else if (x->state == EXEC_RUNNING) {
        if (engine_state_of(a->engine_state) == ENGINE_STATE_RUNNING && a->engine_id[0])
            return;
        int64_t now = clock_now_ms();
        struct seen s = {.state = ENGINE_STATE_RUNNING, .engine_id = x->id, .reason = "",
                         .node = x->node,
                         .running_ms = now, .starting = true};
        text_printf(s.event, sizeof s.event, "Running in %s%s%s (job %s)", e->x->name,
                    x->node[0] ? " on " : "", x->node, x->id);
        update(e->ctl, a, &s);
    }
}

/* Reconciliation by tag (docs/slurm.md), decided by exec_reconcile: the
 * engine's jobs (listed at listed_ms) against the open attempts, read
 * after the list so that an attempt whose runner finished before its job
 * ended is no longer open. Updates of what runs are apply_state's. */
static void reconcile(struct engine *e, int64_t listed_ms)
{
    struct exec_open_attempt *in = calloc((size_t)e->n_open + 1, sizeof *in);
    struct exec_action *acts = calloc((size_t)(e->n_open + e->n_jobs) + 1, sizeof *acts);
    if (!in || !acts) {
        free(in);
        free(acts);
        return;
    }
    for (int i = 0; i < e->n_open; i++) {
        const struct store_attempt *a = &e->open[i];
        text_copy(in[i].attempt_id, sizeof in[i].attempt_id, a->id);
        enum engine_state st = engine_state_of(a->engine_state);
        in[i].state = st == ENGINE_STATE_NONE ? ENGINE_STATE_PENDING : st;
        text_copy(in[i].engine_id, sizeof in[i].engine_id, a->engine_id);
        in[i].submitted_ms = a->started_ms;
    }
    int n = 0;
    exec_reconcile(in, e->n_open, e->jobs, e->n_jobs, listed_ms, acts, &n);
    for (int k = 0; k < n; k++) {
        const struct exec_action *act = &acts[k];
        const struct store_attempt *a = k < e->n_open ? &e->open[k] : NULL;
        if (act->kind == EXEC_ACT_RESUBMIT && a) {
            log_line("warn", "%s: attempt %s was recorded but never reached the engine; "
                     "submitting it again", e->x->name, a->id);
            enum alallo_err r = submit(e, a);
            if (r && r != ERR_UNAVAILABLE && r != ERR_FENCED && r != ERR_CONFLICT)
                refused(e, a, r);
        } else if (act->kind == EXEC_ACT_END && a) {
            end_attempt(e, a, act->reason);
        } else if (act->kind == EXEC_ACT_CANCEL) {
            cancel_in_engine(e, act->attempt_id, "no open attempt owns it");
        }
    }
    free(in);
    free(acts);
}

/* ---- cancels and silent runners ----------------------------------------- */

static struct cancel_note *cancel_note(struct engine *e, const char *attempt, int64_t now)
{
    for (int i = 0; i < e->n_cancels; i++)
        if (strcmp(e->cancels[i].attempt, attempt) == 0)
            return &e->cancels[i];
    if (e->n_cancels >= OPEN_MAX)
        return NULL;
    struct cancel_note *c = &e->cancels[e->n_cancels++];
    text_copy(c->attempt, sizeof c->attempt, attempt);
    c->since_ms = now;
    return c;
}

/* Forgets cancel notes of attempts no longer open. */
static void prune_cancels(struct engine *e)
{
    int k = 0;
    for (int i = 0; i < e->n_cancels; i++) {
        bool open = false;
        for (int j = 0; j < e->n_open && !open; j++)
            open = strcmp(e->open[j].id, e->cancels[i].attempt) == 0;
        if (open)
            e->cancels[k++] = e->cancels[i];
    }
    e->n_cancels = k;
}

static void watch(struct engine *e, int64_t now)
{
    struct control *ctl = e->ctl;
    struct store_job *j = malloc(sizeof *j);
    if (!j)
        return;
    int64_t timeout_ms = (int64_t)ctl->cfg.worker_timeout_s * 1000;
    for (int i = 0; i < e->n_open; i++) {
        const struct store_attempt *a = &e->open[i];
        if (store_job_get(ctl->store, NULL, a->job, j) != ERR_OK)
            continue;
        bool ran = engine_state_of(a->engine_state) == ENGINE_STATE_RUNNING || a->heartbeat_ms > 0;
        if (stop_reason_of(j->stop_reason) == STOP_REASON_CANCEL &&
            strcmp(j->active_attempt, a->id) == 0) {
            if (!ran) {
                /* Never ran: out of the engine's queue at once, nothing
                 * charged. */
                cancel_in_engine(e, a->id, "the job was cancelled while pending");
                end_attempt(e, a, "cancelled before it ran");
                continue;
            }
            struct cancel_note *c = cancel_note(e, a->id, now);
            if (c && now - c->since_ms > (int64_t)e->cfg.stop_grace_s * 1000) {
                cancel_in_engine(e, a->id, "the runner did not stop within the grace");
                end_attempt(e, a, "worker lost");
            }
            continue;
        }
        /* Silent since its last heartbeat. Before its first call a runner
         * may take long to come up (srun, a node's prolog): that is the
         * start timeout's to judge (lifecycle_check_starts counts it from
         * when the engine runs the attempt). */
        if (a->heartbeat_ms > 0 && now - a->heartbeat_ms > timeout_ms) {
            cancel_in_engine(e, a->id, "its runner fell silent");
            end_attempt(e, a, "worker lost");
        }
    }
    free(j);
}

/* ---- slots ------------------------------------------------------------- */

static enum alallo_err declare_slot(struct engine *e, const struct slot *s)
{
    const struct exec_pool *p = &e->cfg.pools[s->pool].decl;
    struct store_worker w = {0}, old;
    text_copy(w.name, sizeof w.name, s->name);
    w.cpus = p->cpus;
    w.mem_bytes = p->mem_mb * 1024 * 1024;
    text_copy(w.class_, sizeof w.class_, exec_pool_class_name(p->class_));
    w.price_per_hour = p->price_per_hour;
    char accel[160];
    text_printf(accel, sizeof accel, "%s:%s%s%s", e->x->name, p->name, p->gres[0] ? ":" : "",
                p->gres);
    /* With gpu_mem, the slot is a GPU worker (docs/slurm.md): its GPUs'
     * kind is the gres type, "gpu" when the gres names none. */
    char gpus[160] = "", kind[sizeof p->gpu_type] = "gpu";
    if (p->gpu_type[0]) { /* one spelling per kind, as workers have */
        size_t i = 0;
        for (; p->gpu_type[i]; i++)
            kind[i] = (char)tolower((unsigned char)p->gpu_type[i]);
        kind[i] = '\0';
    }
    if (p->gpus > 0 && p->gpu_mem_mb > 0)
        text_printf(gpus, sizeof gpus,
                    ",\"gpus\":{\"count\":%d,\"kind\":\"%s\",\"mem_bytes\":%lld}", p->gpus,
                    kind, (long long)p->gpu_mem_mb * 1024 * 1024);
    text_printf(w.resources, sizeof w.resources,
                "{\"cpus\":%d,\"mem_bytes\":%lld,\"accelerator\":\"%s\"%s}", w.cpus,
                (long long)w.mem_bytes, accel, gpus);
    text_copy(w.speed, sizeof w.speed, "{\"tokens_per_s\":0,\"flops\":0}");
    if (store_worker_get(e->ctl->store, s->name, &old) == ERR_OK) {
        /* Known from before a restart: its open attempt (if any) lives on
         * in the engine and reconciliation checks it; only the declaration
         * is refreshed. */
        w.registered_ms = old.registered_ms;
        w.tokens_per_s = old.tokens_per_s;
        w.flops = old.flops;
        text_copy(w.speed, sizeof w.speed, old.speed);
        text_copy(w.state, sizeof w.state, worker_state_name(WORKER_ACTIVE));
        w.last_heartbeat_ms = clock_now_ms();
        enum alallo_err r = store_worker_put(e->ctl->store, &w);
        fleet_changed(e->ctl);
        return r;
    }
    return control_worker_register(e->ctl, &w);
}

void engine_keep_slots(struct control *ctl)
{
    struct engine *e = ctl->engine;
    for (int i = 0; e && i < e->n_slots; i++) {
        struct store_worker w;
        if (control_worker_heartbeat(ctl, e->slots[i].name, &w) == ERR_NOT_FOUND)
            declare_slot(e, &e->slots[i]);
    }
}

/* Whether an open attempt runs on slot s. */
static bool slot_busy(const struct engine *e, const struct slot *s)
{
    for (int k = 0; k < e->n_open; k++)
        if (strcmp(e->open[k].worker, s->name) == 0)
            return true;
    return false;
}

/* Offers each free slot to the scheduling pass; a placed job is claimed and
 * submitted at once. */
static void fill(struct engine *e, int64_t now)
{
    long counts[JOB_STATUS_COUNT];
    if (store_job_count_by_status(e->ctl->store, counts) != ERR_OK ||
        counts[JOB_QUEUED] + counts[JOB_RESCHEDULING] == 0)
        return;
    bool pool_done[ENGINE_POOLS_MAX] = {0};
    for (int i = 0; i < e->n_slots; i++) {
        const struct slot *s = &e->slots[i];
        if (pool_done[s->pool] || now < e->pool_rest_until[s->pool] || s->serving ||
            slot_busy(e, s))
            continue;
        struct store_attempt a;
        bool claimed = false;
        enum alallo_err r = lifecycle_claim_engine(e->ctl, s->name, &a, &claimed);
        if (r || !claimed) {
            pool_done[s->pool] = true; /* its other slots would get nothing either */
            continue;
        }
        r = submit(e, &a);
        if (r && r != ERR_UNAVAILABLE && r != ERR_FENCED && r != ERR_CONFLICT)
            refused(e, &a, r);
        if (e->n_open < OPEN_MAX)
            e->open[e->n_open++] = a; /* busy from now on */
    }
}

static bool read_open(struct engine *e)
{
    struct store_attempt *all = calloc(SCHED_LINK_WORKERS, sizeof *all);
    int n = 0;
    if (!all || store_attempt_list_open(e->ctl->store, "", all, SCHED_LINK_WORKERS, &n)) {
        free(all);
        return false;
    }
    e->n_open = 0;
    for (int i = 0; i < n && e->n_open < OPEN_MAX; i++)
        if (engine_worker(e, all[i].worker))
            e->open[e->n_open++] = all[i];
    free(all);
    return true;
}

static bool list_jobs(struct engine *e)
{
    int n = 0;
    enum alallo_err r = executor_list(e->x, e->jobs, LIST_MAX, &n);
    if (r) {
        log_line("warn", "%s: cannot list the engine's jobs (%s: %s)", e->x->name, err_code(r),
                 e->x->error);
        return false;
    }
    e->n_jobs = n < LIST_MAX ? n : LIST_MAX;
    return true;
}

/* ---- a pool's speed: one bench job -------------------------------------- */

/* DATA/engine/bench/POOL.out (what bench printed), or the folder with
 * file NULL. */
static bool bench_path(const struct engine *e, int pool, const char *suffix, char *out, size_t cap)
{
    if (!suffix)
        return text_printf(out, cap, "%s/engine/bench", e->ctl->cfg.data_dir);
    return text_printf(out, cap, "%s/engine/bench/%s%s", e->ctl->cfg.data_dir,
                       e->cfg.pools[pool].decl.name, suffix);
}

/* Whether a slot of pool p has a speed in the store measured by today's
 * bench (a bench job's, kept over a restart); one kept from an older bench
 * is measured again (bench_speed_is_current). */
static bool pool_speed_known(struct engine *e, int p)
{
    for (int i = 0; i < e->n_slots; i++) {
        struct store_worker w;
        if (e->slots[i].pool == p &&
            store_worker_get(e->ctl->store, e->slots[i].name, &w) == ERR_OK &&
            w.tokens_per_s > 0 && bench_speed_is_current(w.speed))
            return true;
    }
    return false;
}

/* Writes the speed into every slot of pool p. */
static void pool_speed_set(struct engine *e, int p, const struct bench_speed *sp)
{
    for (int i = 0; i < e->n_slots; i++) {
        struct store_worker w;
        if (e->slots[i].pool != p ||
            store_worker_get(e->ctl->store, e->slots[i].name, &w) != ERR_OK)
            continue;
        w.tokens_per_s = sp->tokens_per_s;
        w.flops = sp->flops;
        json_t *kept = bench_speed_json(sp);
        char *text = kept ? json_dumps(kept, JSON_COMPACT) : NULL;
        json_decref(kept);
        enum alallo_err r = text && text_copy(w.speed, sizeof w.speed, text)
                                ? store_worker_put(e->ctl->store, &w)
                                : ERR_NOMEM;
        free(text);
        if (r)
            log_line("warn", "%s: pool %s: cannot record the speed of slot %s: %s", e->x->name,
                     e->cfg.pools[p].decl.name, w.name, err_code(r));
    }
    fleet_changed(e->ctl);
}

/* Adds to script the line that runs `alallo bench train` on both of the
 * bench's shapes (BENCH_SPEED_SHAPES, one process) with pool's CPUs under
 * the launcher, its output into node_out; it replaces the shell, so that
 * the job ends with it. False when it does not fit. */
static bool bench_line(char *script, size_t cap, const struct engine *e,
                       const struct engine_pool *pool, const char *node_out)
{
    return text_printf(script + strlen(script), cap - strlen(script), "\nexec %s%s",
                       e->cfg.launcher, e->cfg.launcher[0] ? " " : "") &&
           exec_script_quote(script, cap, e->ctl->alallo_bin) &&
           text_printf(script + strlen(script), cap - strlen(script),
                       " bench train --shape %s --steps %s --threads %d >", BENCH_SPEED_SHAPES,
                       BENCH_SPEED_STEPS, pool->decl.cpus > 0 ? pool->decl.cpus : 1) &&
           exec_script_quote(script, cap, node_out) &&
           text_printf(script + strlen(script), cap - strlen(script), "\n");
}

/* Submits pool p's bench job: `alallo bench train --steps 17` on the small
 * shape and the bench's, in one process (bench_speed.h), with the pool's CPUs, under
 * the launcher, their output into
 * DATA/engine/bench/POOL.out. Its script first writes the start mark
 * DATA/engine/bench/POOL.started (bench_watch.h: a job listed RUNNING
 * without it is a ghost). Both are removed first, so that an old one is
 * never read as new. */
static enum alallo_err bench_submit(struct engine *e, int p)
{
    const struct engine_pool *pool = &e->cfg.pools[p];
    char dir[EXEC_PATH_MAX], node_dir[EXEC_PATH_MAX], out[EXEC_PATH_MAX], node_out[EXEC_PATH_MAX];
    char mark[EXEC_PATH_MAX], node_mark[EXEC_PATH_MAX];
    struct exec_submit sub;
    memset(&sub, 0, sizeof sub);
    exec_pool_fill_submit(&pool->decl, &sub);
    if (!exec_bench_tag_for(pool->decl.name, sub.tag) || !bench_path(e, p, NULL, dir, sizeof dir) ||
        !bench_path(e, p, ".out", out, sizeof out) ||
        !bench_path(e, p, ".started", mark, sizeof mark) ||
        !engine_map_path(&e->cfg, dir, node_dir, sizeof node_dir) ||
        !engine_map_path(&e->cfg, out, node_out, sizeof node_out) ||
        !engine_map_path(&e->cfg, mark, node_mark, sizeof node_mark))
        return exec_fail(e->x, ERR_TOO_LARGE, "the bench job's paths do not fit");
    if (fs_mkdirs(dir, 0700) != 0)
        return exec_fail(e->x, ERR_IO, "cannot make %.200s", dir);
    if (remove(out) != 0 && errno != ENOENT)
        return exec_fail(e->x, ERR_IO, "cannot remove the old %.200s", out);
    if (remove(mark) != 0 && errno != ENOENT)
        return exec_fail(e->x, ERR_IO, "cannot remove the old %.200s", mark);
    char script[SCRIPT_MAX] = "";
    bool ok = text_printf(script, sizeof script,
                          "#!/bin/sh\n# the bench job of pool %s, written by alallo serve\n: >",
                          pool->decl.name) &&
              exec_script_quote(script, sizeof script, node_mark) &&
              bench_line(script, sizeof script, e, pool, node_out);
    if (!ok)
        return exec_fail(e->x, ERR_TOO_LARGE, "the bench job's script does not fit");
    if (!text_printf(sub.script, sizeof sub.script, "%s/%s.sbatch", dir, pool->decl.name) ||
        !text_printf(sub.output, sizeof sub.output, "%s/%s-%%j.log", node_dir, pool->decl.name) ||
        !text_copy(sub.workdir, sizeof sub.workdir, node_dir))
        return exec_fail(e->x, ERR_TOO_LARGE, "the bench job's paths do not fit");
    if (fs_write_durably(sub.script, script, strlen(script), 0700) != 0)
        return exec_fail(e->x, ERR_IO, "cannot write %.200s", sub.script);
    sub.time_limit_min = BENCH_TIMEOUT_MS / 60000;
    if (pool->max_time_min > 0 && sub.time_limit_min > pool->max_time_min)
        sub.time_limit_min = pool->max_time_min;
    struct exec_receipt rc;
    enum alallo_err r = executor_submit(e->x, &sub, &rc);
    if (!r)
        log_line("info", "%s: pool %s: its speed is unknown; bench job %s submitted (%s)",
                 e->x->name, pool->decl.name, rc.id, sub.tag);
    return r;
}

/* Reads what pool p's bench printed. Returns 0, or -1 with why in err. */
static int bench_read(struct engine *e, int p, struct bench_speed *sp, char *err, size_t cap)
{
    char path[EXEC_PATH_MAX];
    memset(sp, 0, sizeof *sp);
    if (!bench_path(e, p, ".out", path, sizeof path)) {
        text_error(err, cap, "the output's path does not fit");
        return -1;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        text_error(err, cap, "no output in %s: %s", path, strerror(errno));
        return -1;
    }
    char *text = malloc(BENCH_OUTPUT_MAX + 1);
    size_t n = text ? fread(text, 1, BENCH_OUTPUT_MAX, f) : 0;
    fclose(f);
    if (!text) {
        text_error(err, cap, "out of memory");
        return -1;
    }
    text[n] = '\0';
    int rc = bench_speed_parse(text, sp);
    free(text);
    if (rc)
        text_error(err, cap, "bench printed no tokens_per_s in %s", path);
    return rc;
}

static void bench_failed(struct engine *e, int p, int64_t now, const char *why)
{
    struct pool_bench *b = &e->bench[p];
    b->running = false;
    b->next_try_ms = now + BENCH_RETRY_MS;
    log_line("warn", "%s: pool %s: the bench job failed: %s; its speed stays unknown (calibrated "
             "from finished attempts), another bench in %d min", e->x->name,
             e->cfg.pools[p].decl.name, why, BENCH_RETRY_MS / 60000);
}

/* Pool p's speed, as its bench job measured it: recorded on its slots. */
static void bench_measured(struct engine *e, int p, const struct bench_speed *sp)
{
    pool_speed_set(e, p, sp);
    e->bench[p].running = false;
    e->bench[p].known = true;
    log_line("info", "%s: pool %s: measured %.1f tokens/s, %.3g FLOP/s by its bench job; "
             "recorded on its %d slot(s)", e->x->name, e->cfg.pools[p].decl.name,
             sp->tokens_per_s, sp->flops, e->cfg.pools[p].decl.slots);
}

/* Whether pool p's bench job has written its start mark. */
static bool bench_marked(const struct engine *e, int p)
{
    char path[EXEC_PATH_MAX];
    struct stat st;
    return bench_path(e, p, ".started", path, sizeof path) && stat(path, &st) == 0;
}

/* Notes that pool p's bench job `id` was just cancelled: the same job,
 * still listed, is cancelled again only a reconciliation period later. */
static void bench_cancelled(struct engine *e, int p, const char *id, int64_t now)
{
    struct pool_bench *b = &e->bench[p];
    text_copy(b->cancelled_id, sizeof b->cancelled_id, id);
    b->cancel_next_ms = now + ENGINE_RECONCILE_S * 1000;
}

/* Cancels pool p's live bench job `live`, which no one wants (the pool's
 * speed is known, or its failed bench rests until its retry): at once, and
 * again every reconciliation period while the engine still lists it. */
static void bench_cancel_unwanted(struct engine *e, int p, const struct exec_job *live,
                                  const char *tag, int64_t now)
{
    struct pool_bench *b = &e->bench[p];
    if (strcmp(live->id, b->cancelled_id) == 0 && now < b->cancel_next_ms)
        return;
    bench_cancelled(e, p, live->id, now);
    enum alallo_err r = executor_cancel(e->x, tag);
    log_line("warn", "%s: pool %s: bench job %s is listed %s though no bench is wanted (%s); "
             "cancelled%s%s", e->x->name, e->cfg.pools[p].decl.name, live->id,
             live->raw_state[0] ? live->raw_state : "alive",
             b->known ? "the pool's speed is known" : "a failed bench waits for its retry",
             r ? ": the cancel failed: " : "", r ? e->x->error : "");
}

/* Follows pool p's live bench job: what it was first seen doing, then
 * bench_watch.h's verdict. Its output complete: measured, whatever the
 * engine still lists (a controller restarted while the bench ended may
 * keep a ghost RUNNING; cancelled, it leaves no job). */
static void bench_follow(struct engine *e, int p, const struct exec_job *live, const char *tag,
                         int64_t now)
{
    struct pool_bench *b = &e->bench[p];
    const char *name = e->cfg.pools[p].decl.name;
    if (!b->running) { /* submitted before a restart or by another leader */
        b->running = true;
        b->since_ms = now;
        b->running_ms = b->marked_ms = 0;
    }
    if (live->state == EXEC_RUNNING && b->running_ms == 0)
        /* the engine's own start when it is earlier (a job already running
         * when this server found it), else the first sight of it */
        b->running_ms = live->start_ms > 0 && live->start_ms < now ? live->start_ms : now;
    if (b->marked_ms == 0 && bench_marked(e, p))
        b->marked_ms = now;
    struct bench_speed done;
    char unread[512];
    if (bench_read(e, p, &done, unread, sizeof unread) == 0) {
        /* cancelled before the speed is recorded: the cancel goes by the
         * job's name, and once the speed shows, a job of that name is
         * someone else's (a ghost to warn of, not one to take silently) */
        bench_cancelled(e, p, live->id, now);
        if (executor_cancel(e->x, tag))
            log_line("warn", "%s: pool %s: its bench job, done, is still listed and "
                     "could not be cancelled: %s", e->x->name, name, e->x->error);
        bench_measured(e, p, &done);
        return;
    }
    struct bench_look look = {
        .now_ms = now,
        .wanted = true,
        .since_ms = b->since_ms,
        .running_since_ms = b->running_ms,
        .marked_ms = b->marked_ms,
    };
    char why[EXEC_REASON_MAX + EXEC_ERROR_MAX];
    if (bench_judge(&look, why, sizeof why) == BENCH_WAIT)
        return;
    enum alallo_err r = executor_cancel(e->x, tag);
    size_t n = strlen(why);
    text_printf(why + n, sizeof why - n, "; bench job %s cancelled%s%s", live->id,
                r ? ", but the cancel failed: " : "", r ? e->x->error : "");
    bench_failed(e, p, now, why);
    bench_cancelled(e, p, live->id, now);
}

/* One look at each pool's bench, after a list of the engine's jobs: judges
 * a pool's bench job when it has ended (or ran too long, or is a ghost:
 * bench_watch.h), submits one when the pool's speed is unknown and none
 * runs, and cancels one that no one wants. */
static void bench_pools(struct engine *e, int64_t now, int64_t listed_ms)
{
    for (int p = 0; p < e->cfg.n_pools; p++) {
        struct pool_bench *b = &e->bench[p];
        const char *name = e->cfg.pools[p].decl.name;
        char tag[EXEC_TAG_MAX];
        if (!exec_bench_tag_for(name, tag))
            continue;
        const struct exec_job *live = NULL, *ended = NULL;
        for (int i = 0; i < e->n_jobs; i++)
            if (strcmp(e->jobs[i].tag, tag) == 0) {
                if (e->jobs[i].state == EXEC_ENDED)
                    ended = &e->jobs[i];
                else if (!live || strcmp(live->id, b->cancelled_id) == 0)
                    live = &e->jobs[i]; /* one not cancelled yet first */
            }
        if (!b->known && !b->running && pool_speed_known(e, p))
            b->known = true;
        /* A bench job alive while none is wanted: one left by a server
         * before a restart, a ghost a restarted controller brought back
         * after the bench was measured, or one that failed. */
        if (live && (b->known || (!b->running && now < b->next_try_ms))) {
            bench_cancel_unwanted(e, p, live, tag, now);
            continue;
        }
        if (b->known)
            continue;
        if (live) {
            bench_follow(e, p, live, tag, now);
            continue;
        }
        if (b->running) {
            /* Ended, or not listed. A submission moments before the list
             * may not be in it yet, and an ended job of the tag may be an
             * earlier bench's: judged at a later list. */
            if (b->since_ms > listed_ms - EXEC_RECONCILE_SLACK_MS)
                continue;
            struct bench_speed sp;
            char why[512];
            if (bench_read(e, p, &sp, why, sizeof why) != 0) {
                if (ended && ended->reason[0]) {
                    size_t n = strlen(why);
                    text_printf(why + n, sizeof why - n, "; the engine says: %s", ended->reason);
                }
                bench_failed(e, p, now, why);
                continue;
            }
            bench_measured(e, p, &sp);
            continue;
        }
        if (now < b->next_try_ms)
            continue;
        enum alallo_err r = bench_submit(e, p);
        if (r == ERR_UNAVAILABLE)
            /* the engine's reply was lost: the job may exist; a later list
             * finds it, or judges it ended or never made */
            log_line("warn", "%s: pool %s: the bench job's submission went unanswered (%s); "
                     "looked for at the next lists", e->x->name, name, e->x->error);
        else if (r) {
            char why[EXEC_ERROR_MAX + 32];
            text_printf(why, sizeof why, "not submitted: %s: %s", err_code(r), e->x->error);
            bench_failed(e, p, now, why);
            continue;
        }
        b->running = true;
        b->since_ms = clock_now_ms();
        b->running_ms = b->marked_ms = 0;
    }
}

/* ---- serving engines on a pool's nodes ----------------------------------- */

/* The index in cfg.serve of pool p's serving engines; -1: it has none. */
static int serve_index(const struct engine *e, int p)
{
    for (int i = 0; i < e->cfg.n_serve; i++)
        if (e->serve[i].pool == p)
            return i;
    return -1;
}

/* The serving engines pool p runs now. */
static int serving_slots(const struct engine *e, int p)
{
    int i = serve_index(e, p);
    return i < 0 ? 0 : serving_jobs_count(e->serve[i].jobs);
}

/* Pool p's slots declared to train: its slots less the serving engines
 * that always run (the range's MIN); an engine beyond them holds one of
 * these while it runs (slot.serving). */
static int engine_training_slots(const struct engine *e, int p)
{
    int i = serve_index(e, p);
    return e->cfg.pools[p].decl.slots - (i < 0 ? 0 : e->cfg.serve[i].min);
}

/* Where pool set i stands for sched/serve_scale.h: its engines' load and
 * its slots, a free one (NULL: none) and one held by an engine beyond MIN
 * (NULL: none). */
static void serve_set_state(struct engine *e, int i, int64_t now,
                            struct serve_scale_pool *out, struct serving_load *load,
                            struct slot **free_slot, struct slot **held)
{
    const struct serve_set *set = &e->serve[i];
    const struct engine_serve *c = &e->cfg.serve[i];
    int count = serving_jobs_count(set->jobs);
    const char *ids[SERVING_JOBS_MAX];
    for (int k = 0; k < count; k++)
        ids[k] = serving_jobs_id(set->jobs, k);
    serving_registry_load(e->ctl->serving, ids, count, now, load);
    *free_slot = *held = NULL;
    int free_slots = 0;
    for (int k = 0; k < e->n_slots; k++) {
        struct slot *s = &e->slots[k];
        if (s->pool != set->pool)
            continue;
        if (s->serving)
            *held = s;
        else if (!slot_busy(e, s) && free_slots++ == 0)
            *free_slot = s;
    }
    *out = (struct serve_scale_pool){
        .min = c->min,
        .max = c->count,
        .count = count,
        .fresh = load->fresh,
        .waiting = load->waiting,
        .last_fresh = load->last_fresh,
        .last_idle_ms = load->last_idle_ms,
        .changed_ago_ms = set->changed_ms ? now - set->changed_ms : -1,
        .free_slots = free_slots,
        .price_per_hour = e->cfg.pools[set->pool].decl.price_per_hour,
    };
}

/* With a range of engines (--inference-pool POOL:MIN-MAX) on one pool or
 * more, one engine more or fewer as sched/serve_scale.h decides, on the
 * pool it picks: an engine beyond MIN holds a slot of its pool no attempt
 * runs on, and gives it back when it stops. */
static void serving_scale(struct engine *e, int64_t now)
{
    const struct engine_config *c = &e->cfg;
    bool scaled = false;
    for (int i = 0; i < c->n_serve; i++)
        scaled = scaled || c->serve[i].scaled;
    if (!scaled)
        return;
    long jobs[JOB_STATUS_COUNT];
    if (store_job_count_by_status(e->ctl->store, jobs) != ERR_OK)
        return;
    struct serve_scale_pool pools[ENGINE_SERVE_POOLS_MAX];
    struct serving_load load[ENGINE_SERVE_POOLS_MAX];
    struct slot *free_slot[ENGINE_SERVE_POOLS_MAX], *held[ENGINE_SERVE_POOLS_MAX];
    for (int i = 0; i < c->n_serve; i++)
        serve_set_state(e, i, now, &pools[i], &load[i], &free_slot[i], &held[i]);
    struct serve_scale_all all = {
        .missed_ago_ms = c->n_serve ? load[0].missed_ago_ms : -1,
        .changed_ago_ms = e->serve_changed_ms ? now - e->serve_changed_ms : -1,
        .training_queued = jobs[JOB_QUEUED] + jobs[JOB_RESCHEDULING],
        .idle_ms = (int64_t)c->serve_idle_s * 1000,
    };
    struct serve_scale_step st = serve_scale_next(pools, c->n_serve, &all);
    if (st.pool < 0)
        return;
    int i = st.pool, count = pools[i].count, want = count + st.delta, min = c->serve[i].min;
    assert(st.delta == 1 || st.delta == -1);
    if ((want > min && st.delta > 0 && !free_slot[i]) || (count > min && st.delta < 0 && !held[i]))
        return;
    /* a held slot reads as draining: no pass places a job on it, and no
     * estimate reads it as free; given back, it is declared again */
    if (st.delta > 0 && want > min) {
        if (control_worker_hold(e->ctl, free_slot[i]->name) != ERR_OK)
            return;
        free_slot[i]->serving = true;
    } else if (st.delta < 0 && count > min) {
        held[i]->serving = false;
        declare_slot(e, held[i]);
    }
    serving_jobs_set_count(e->serve[i].jobs, want);
    e->serve_changed_ms = e->serve[i].changed_ms = now;
    const char *pool = c->serve[i].pool;
    int fleet = 0; /* every pool's engines, before this change */
    for (int k = 0; k < c->n_serve; k++)
        fleet += pools[k].count;
    if (st.delta > 0)
        log_line("info", "%s: serving engines on pool %s: %d, one more (%s)", e->x->name, pool,
                 want, fleet == 0 ? "a request found none" : "requests wait at every engine");
    else
        log_line("info", "%s: serving engines on pool %s: %d, one fewer (%s for %lld s%s)",
                 e->x->name, pool, want, load[i].last_fresh ? "idle" : "not heard from",
                 (long long)(load[i].last_fresh ? load[i].last_idle_ms
                                                : pools[i].changed_ago_ms) / 1000,
                 all.training_queued > 0 ? ", training jobs queued" : "");
}

/* DATA/engine/serving. */
static bool serving_dir(const struct control *ctl, char *out, size_t cap)
{
    return text_printf(out, cap, "%s/engine/serving", ctl->cfg.data_dir);
}

/* The serving jobs after a list (serving_jobs.h): those no pool's set
 * wants (an earlier run's, with other pools or none) are cancelled, and
 * each pool's wanted ones not listed are submitted. */
static void serving_round(struct engine *e, int64_t now, int64_t listed_ms)
{
    char dir[EXEC_PATH_MAX], node_dir[EXEC_PATH_MAX];
    if (!serving_dir(e->ctl, dir, sizeof dir) ||
        !engine_map_path(&e->cfg, dir, node_dir, sizeof node_dir))
        return;
    serving_scale(e, now);
    serving_jobs_cancel_unwanted(e->serve_jobs, e->cfg.n_serve, e->x, e->ctl->serving, e->jobs,
                                 e->n_jobs);
    for (int i = 0; i < e->cfg.n_serve; i++) {
        const struct engine_pool *p = &e->cfg.pools[e->serve[i].pool];
        struct serving_jobs_env env = {.x = e->x,
                                       .dir = dir,
                                       .node_dir = node_dir,
                                       .bin = e->ctl->alallo_bin,
                                       .server_url = e->cfg.server_url,
                                       .launcher = e->cfg.launcher,
                                       .pool = &p->decl,
                                       .max_time_min = p->max_time_min,
                                       .memory = e->cfg.serve_memory,
                                       .max_running = e->cfg.serve_running,
                                       .registry = e->ctl->serving};
        serving_jobs_round(e->serve[i].jobs, &env, e->jobs, e->n_jobs, now, listed_ms);
    }
}

/* One round: what the engine says, then the attempts as they are now. */
static void round_once(struct engine *e, bool poll, bool full)
{
    int64_t now = clock_now_ms();
    bool listed = (poll || full) && list_jobs(e);
    int64_t listed_ms = clock_now_ms();
    if (!read_open(e))
        return;
    if (listed)
        for (int i = 0; i < e->n_open; i++) {
            const struct exec_job *x = job_tagged(e, e->open[i].id);
            if (x)
                apply_state(e, &e->open[i], x);
        }
    if (listed && full)
        reconcile(e, listed_ms);
    if (listed && full && !read_open(e))
        return;
    watch(e, now);
    prune_cancels(e);
    if (!read_open(e))
        return;
    fill(e, now);
    if (listed)
        bench_pools(e, now, listed_ms);
    if (listed) /* without --inference-pool, to cancel serving jobs left */
        serving_round(e, now, listed_ms);
}

static void *engine_main(void *arg)
{
    struct engine *e = arg;
    /* The reconciliation at start-up leaves attempts recorded moments
     * before it alone (too new to judge, exec/reconcile.h): a second one
     * soon after settles them. */
    int64_t next_poll = 0, next_full = clock_now_ms() + 2 * EXEC_RECONCILE_SLACK_MS + 1000;
    bool led = true; /* only the leader submits, polls and reconciles (leadership.h) */
    pthread_mutex_lock(&e->mu);
    while (!e->quit) {
        pthread_mutex_unlock(&e->mu);
        int64_t now = clock_now_ms();
        bool leads = control_leads(e->ctl), took_over = leads && !led;
        led = leads;
        if (took_over) /* look at the engine now */
            next_poll = 0, next_full = 0;
        bool poll = leads && now >= next_poll, full = leads && now >= next_full;
        if (poll)
            next_poll = now + ENGINE_POLL_S * 1000;
        if (full)
            next_full = now + ENGINE_RECONCILE_S * 1000;
        if (took_over) /* and again soon, as at start-up */
            next_full = now + 2 * EXEC_RECONCILE_SLACK_MS + 1000;
        if (leads)
            round_once(e, poll, full);
        pthread_mutex_lock(&e->mu);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += 1;
        while (!e->quit && pthread_cond_timedwait(&e->cv, &e->mu, &until) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

int engine_start(struct control *ctl, const char *kind, const struct engine_config *cfg,
                 char *err, size_t errcap)
{
    struct executor *x = NULL;
    enum alallo_err opened = ERR_INVALID;
    if (strcmp(kind, "slurm") == 0) {
        struct slurm_config sc;
        memset(&sc, 0, sizeof sc);
        opened = executor_slurm_open(&sc, &x, err, errcap);
    } else if (strcmp(kind, "process") == 0) {
        opened = executor_process_open(NULL, &x, err, errcap);
    } else {
        text_error(err, errcap, "unknown executor '%s' (slurm or process)", kind);
    }
    if (opened)
        return -1;
    struct engine *e = calloc(1, sizeof *e);
    if (e) {
        e->jobs = calloc(LIST_MAX, sizeof *e->jobs);
        e->open = calloc(OPEN_MAX, sizeof *e->open);
    }
    if (!e || !e->jobs || !e->open) {
        if (e) {
            free(e->jobs);
            free(e->open);
        }
        free(e);
        executor_close(x);
        text_error(err, errcap, "out of memory");
        return -1;
    }
    e->ctl = ctl;
    e->x = x;
    e->cfg = *cfg;
    if (e->cfg.stop_grace_s <= 0)
        e->cfg.stop_grace_s = 30;
    assert(e->cfg.n_serve >= 0 && e->cfg.n_serve <= ENGINE_SERVE_POOLS_MAX);
    for (int i = 0; i < e->cfg.n_serve; i++) {
        struct engine_serve *sv = &e->cfg.serve[i];
        if (sv->count <= 0)
            sv->count = 1;
        if (!sv->scaled) /* a fixed count: the range N-N */
            sv->min = sv->count;
    }
    if (e->cfg.serve_idle_s <= 0)
        e->cfg.serve_idle_s = ENGINE_SERVE_IDLE_S;
    cfg = &e->cfg;
    for (int p = 0; p < cfg->n_pools; p++) {
        struct engine_pool *pool = &e->cfg.pools[p];
        struct exec_capacity cap;
        enum alallo_err r = executor_capacity(x, pool->decl.partition, pool->decl.gpu_type, &cap);
        if (!r)
            pool->max_time_min = cap.max_time_min;
        if (pool->decl.slots == 0)
            pool->decl.slots = r ? 0 : exec_pool_default_slots(&pool->decl, &cap);
        if (pool->lead_s <= 0)
            pool->lead_s = ENGINE_DEFAULT_LEAD_S;
        if (pool->decl.slots == 0) {
            text_error(err, errcap, "pool %s: no slots given and %s", pool->decl.name,
                       r ? "the engine cannot tell its capacity" : "no attempt of its shape fits");
            engine_stop(e);
            return -1;
        }
    }
    /* Each pool's serving engines take up to its count (N, or MAX) of its
     * slots, MIN of them for good: the pool's training slots are the rest
     * (docs/serving.md, "On a cluster"). */
    for (int i = 0; i < cfg->n_serve; i++) {
        const struct engine_serve *sv = &cfg->serve[i];
        struct serve_set *set = &e->serve[i];
        assert(sv->min >= 0 && sv->min <= sv->count);
        set->pool = -1;
        for (int p = 0; p < cfg->n_pools; p++)
            if (strcmp(cfg->pools[p].decl.name, sv->pool) == 0)
                set->pool = p;
        const char *why = set->pool < 0 ? "no such pool (declare it with --slurm-pool)" : NULL;
        char need[96];
        if (!why && cfg->pools[set->pool].decl.slots < sv->count) {
            text_printf(need, sizeof need, "the pool has %d slot(s); %d engine(s) need as many",
                        cfg->pools[set->pool].decl.slots, sv->count);
            why = need;
        }
        if (!why && !(set->jobs = serving_jobs_new(sv->pool, sv->count)))
            why = "its name makes no serving job's tag";
        if (!why) {
            serving_jobs_set_count(set->jobs, sv->min);
            e->serve_jobs[i] = set->jobs;
        }
        if (why) {
            text_error(err, errcap, "--inference-pool %s: %s", sv->pool, why);
            engine_stop(e);
            return -1;
        }
    }
    for (int p = 0; p < cfg->n_pools; p++)
        for (int k = 0; k < engine_training_slots(e, p); k++) {
            if (e->n_slots >= ENGINE_SLOTS_MAX) {
                text_error(err, errcap, "more than %d slots in all", ENGINE_SLOTS_MAX);
                engine_stop(e);
                return -1;
            }
            struct slot *s = &e->slots[e->n_slots++];
            s->pool = p;
            text_printf(s->name, sizeof s->name, "%s.%s.%d", x->name, cfg->pools[p].decl.name, k);
        }
    for (int i = 0; i < e->n_slots; i++) {
        enum alallo_err r = declare_slot(e, &e->slots[i]);
        if (r) {
            text_error(err, errcap, "cannot declare slot %s: %s", e->slots[i].name,
                       err_code(r));
            engine_stop(e);
            return -1;
        }
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &ca);
    pthread_condattr_destroy(&ca);
    /* Reconcile before anything new is placed: a server that died around
     * a submission finds out what the engine holds first. */
    round_once(e, true, true);
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        text_error(err, errcap, "cannot start the engine's thread");
        engine_stop(e);
        return -1;
    }
    e->started = true;
    ctl->engine = e;
    log_line("info", "%s: %d pool(s), %d slot(s); runners call %s", x->name, cfg->n_pools,
             e->n_slots, cfg->server_url);
    return 0;
}

void engine_stop(struct engine *e)
{
    if (!e)
        return;
    if (e->started) {
        pthread_mutex_lock(&e->mu);
        e->quit = true;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
        pthread_cond_destroy(&e->cv);
        pthread_mutex_destroy(&e->mu);
    }
    if (e->ctl && e->ctl->engine == e)
        e->ctl->engine = NULL;
    executor_close(e->x);
    for (int i = 0; i < ENGINE_SERVE_POOLS_MAX; i++)
        serving_jobs_free(e->serve[i].jobs);
    free(e->jobs);
    free(e->open);
    free(e);
}

/* ---- the runner's calls ------------------------------------------------- */

/* Rewrites the paths of a spec as the nodes see them. */
static bool map_spec(const struct engine_config *cfg, json_t *spec)
{
    static const char *const keys[] = {"model_dir",  "train_file", "validation_file",
                                       "checkpoint_dir", "out_dir", "resume_from"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *v = json_string_value(json_object_get(spec, keys[i]));
        char out[STORE_PATH_MAX];
        if (!v)
            continue;
        if (!engine_map_path(cfg, v, out, sizeof out))
            return false;
        json_object_set_new(spec, keys[i], json_string(out));
    }
    return true;
}

enum alallo_err engine_attempt_start(struct control *ctl, const char *attempt_id,
                                     const char *engine_id, const char *node,
                                     struct engine_start_answer *out)
{
    memset(out, 0, sizeof *out);
    struct engine *e = ctl->engine;
    if (!e)
        return ERR_NOT_FOUND;
    enum alallo_err r =
        lifecycle_attempt_spec(ctl, attempt_id, &out->attempt, &out->job, &out->spec);
    if (r)
        return r;
    const struct engine_pool *p = pool_of(e, out->attempt.worker);
    if (!p || engine_state_of(out->attempt.engine_state) == ENGINE_STATE_NONE) {
        json_decref(out->spec);
        out->spec = NULL;
        return ERR_NOT_FOUND;
    }
    int64_t now = clock_now_ms();
    const char *from = json_string_value(json_object_get(out->spec, "resume_from"));
    struct seen s = {.engine_id = engine_id, .node = node, .heartbeat_ms = now,
                     .running_ms = now, .state = ENGINE_STATE_RUNNING, .reason = "", .starting = true,
                     .one_runner = true, .resume_from = from ? from : ""};
    if (engine_state_of(out->attempt.engine_state) != ENGINE_STATE_RUNNING ||
        out->attempt.heartbeat_ms == 0)
        text_printf(s.event, sizeof s.event, "Attempt %s runs on %s", out->attempt.id,
                    node && node[0] ? node : "a node");
    r = update(ctl, &out->attempt, &s);
    if (!r && !map_spec(&e->cfg, out->spec))
        r = ERR_TOO_LARGE;
    if (r) {
        json_decref(out->spec);
        out->spec = NULL;
        return r;
    }
    bool clamped;
    long limit_min = time_limit_min(ctl, &out->job, p, &clamped);
    int64_t since = out->attempt.engine_running_ms > 0 ? out->attempt.engine_running_ms : now;
    /* The lead: the pool's, but at most a quarter of a short limit. */
    double lead = fmin((double)p->lead_s, (double)limit_min * 60 / 4);
    double left = (double)limit_min * 60 - lead - (double)(now - since) / 1000.0;
    out->deadline_s = left < 10 ? 10 : left;
    out->cpus = p->decl.cpus;
    out->gpus = p->decl.gpus;
    out->heartbeat_s = ctl->cfg.heartbeat_s;
    return ERR_OK;
}

enum alallo_err engine_attempt_heartbeat(struct control *ctl, const char *attempt_id,
                                         int64_t fence, const char *engine_id, const char *node,
                                         enum tproto_stop *stop)
{
    *stop = TPROTO_STOP_NONE;
    struct engine *e = ctl->engine;
    struct store_attempt a;
    enum alallo_err r = e ? store_attempt_get(ctl->store, attempt_id, &a) : ERR_NOT_FOUND;
    if (r)
        return r;
    if (engine_state_of(a.engine_state) == ENGINE_STATE_NONE)
        return ERR_NOT_FOUND;
    /* The job succeeded at its trainer's `done`, which the runner relayed
     * while the trainer was still exiting: the runner is not fenced, it
     * is finishing (its finish is answered likewise, lifecycle_finish). */
    if (lifecycle_attempt_finishing(&a, fence))
        return ERR_OK;
    if (a.fence != fence || attempt_status_of(a.status) == ATTEMPT_ENDED)
        return ERR_FENCED;
    struct seen s = {.engine_id = engine_id, .node = node, .heartbeat_ms = clock_now_ms(),
                     .fence = fence};
    r = update(ctl, &a, &s);
    if (!r)
        *stop = s.stop;
    return r;
}

bool engine_attempt_token_ok(struct control *ctl, const char *attempt_id, const char *token)
{
    struct store_attempt a;
    char hash[KEYS_HASH_HEX];
    if (!ids_valid(attempt_id) || store_attempt_get(ctl->store, attempt_id, &a) != ERR_OK ||
        !a.token_hash[0] || keys_hash(token, hash))
        return false;
    return keys_equal(hash, a.token_hash);
}

int engine_pools_usage(struct control *ctl, struct engine_pool_usage *out, int cap)
{
    struct engine *e = ctl->engine;
    if (!e)
        return 0;
    struct store_attempt *all = calloc(SCHED_LINK_WORKERS, sizeof *all);
    int n_all = 0;
    if (!all || store_attempt_list_open(ctl->store, "", all, SCHED_LINK_WORKERS, &n_all))
        n_all = 0;
    int n = 0;
    for (int p = 0; p < e->cfg.n_pools && n < cap; p++, n++) {
        const struct exec_pool *pool = &e->cfg.pools[p].decl;
        struct engine_pool_usage *u = &out[n];
        memset(u, 0, sizeof *u);
        text_copy(u->name, sizeof u->name, pool->name);
        text_copy(u->class_, sizeof u->class_, exec_pool_class_name(pool->class_));
        u->price_per_hour = pool->price_per_hour;
        u->slots = pool->slots;
        u->serving = serving_slots(e, p);
        for (int i = 0; i < n_all; i++) {
            const struct slot *s = slot_named(e, all[i].worker);
            if (!s || s->pool != p)
                continue;
            u->in_use++;
            if (engine_state_of(all[i].engine_state) != ENGINE_STATE_RUNNING)
                u->pending++;
        }
    }
    free(all);
    return n;
}

/* ---- the serving engines' calls ----------------------------------------- */

bool engine_serving_token_ok(struct control *ctl, const char *id, const char *token)
{
    char dir[EXEC_PATH_MAX], mine[KEYS_MAX], a[KEYS_HASH_HEX], b[KEYS_HASH_HEX];
    if (!ctl->engine || !token || !serving_dir(ctl, dir, sizeof dir) ||
        !serving_jobs_token(dir, id, mine, sizeof mine))
        return false;
    bool ok = keys_hash(mine, a) == 0 && keys_hash(token, b) == 0 && keys_equal(a, b);
    memset(mine, 0, sizeof mine);
    return ok;
}

enum alallo_err engine_serving_heartbeat(struct control *ctl, const char *id, const char *node,
                                         const char *host, int port, const json_t *stats,
                                         bool *stop)
{
    *stop = false;
    struct engine *e = ctl->engine;
    char dir[EXEC_PATH_MAX], key[KEYS_MAX];
    if (!e || !serving_dir(ctl, dir, sizeof dir) || !serving_jobs_token(dir, id, key, sizeof key))
        return ERR_NOT_FOUND;
    if (!serving_jobs_wanted_any(e->serve_jobs, e->cfg.n_serve, id)) {
        *stop = true;
        serving_registry_forget(ctl->serving, id);
    } else if (port > 0 && port < 65536 && host && host[0]) {
        serving_registry_note(ctl->serving, id, node, host, port, key, stats, clock_now_ms());
    }
    memset(key, 0, sizeof key);
    return ERR_OK;
}
