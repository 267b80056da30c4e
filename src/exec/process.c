/* process.c - the executor over local child processes (process.h). */
#include "exec/process.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/text.h"

#define SPAWN_BUSY_TRIES 40    /* a script busy being written: tries, */
#define SPAWN_BUSY_PAUSE_MS 50 /* this far apart (2 s in all)         */

extern char **environ;

struct pjob {
    char id[EXEC_ID_MAX];
    char tag[EXEC_TAG_MAX];
    pid_t pid;
    bool ended;
    char raw_state[24];
    char reason[EXEC_REASON_MAX];
    int64_t start_wall_ms;
    int64_t ended_ms;     /* monotonic                                      */
    int64_t usr1_at_ms;   /* monotonic; 0: none or sent                     */
    int64_t limit_at_ms;  /* monotonic; 0: no limit                         */
    int64_t term_at_ms;   /* when SIGTERM went; 0: not yet                  */
    bool cancelled, timed_out;
};

struct process_x {
    struct executor base; /* first */
    struct process_config cfg;
    struct pjob *jobs;
    int n, cap;
};

static struct process_x *of(struct executor *x)
{
    return (struct process_x *)x;
}

static void signal_group(struct pjob *j, int sig)
{
    if (!j->ended && j->pid > 0)
        kill(-j->pid, sig);
}

/* Records how j's process ended, if it has: peeks first (WNOWAIT), so that
 * what the script left in its group is killed while the ended leader still
 * holds its PID (no other process can have taken it yet), then reaps. */
static void end_if_exited(struct pjob *j, int64_t now)
{
    siginfo_t info;
    memset(&info, 0, sizeof info);
    if (waitid(P_PID, (id_t)j->pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
        if (errno == ECHILD) {
            j->ended = true; /* reaped elsewhere: its status is lost */
            j->ended_ms = now;
            text_copy(j->raw_state, sizeof j->raw_state, "FAILED");
            text_copy(j->reason, sizeof j->reason,
                      "The process ended; its exit status was taken by another part");
        }
        return;
    }
    if (info.si_pid != j->pid)
        return; /* still running */
    kill(-j->pid, SIGKILL);
    int status = 0;
    while (waitpid(j->pid, &status, 0) < 0 && errno == EINTR)
        ;
    j->ended = true;
    j->ended_ms = now;
    const char *state;
    if (j->cancelled) {
        state = "CANCELLED";
        text_copy(j->reason, sizeof j->reason, "The process was cancelled");
    } else if (j->timed_out) {
        state = "TIMEOUT";
        text_copy(j->reason, sizeof j->reason, "The process reached its time limit");
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        state = "COMPLETED";
        text_copy(j->reason, sizeof j->reason,
                  "The process completed without the attempt reporting its end");
    } else if (WIFEXITED(status)) {
        state = "FAILED";
        text_printf(j->reason, sizeof j->reason, "The process exited with status %d",
                    WEXITSTATUS(status));
    } else {
        state = "FAILED";
        text_printf(j->reason, sizeof j->reason, "The process was killed by signal %d (%s)",
                    WTERMSIG(status), strsignal(WTERMSIG(status)));
    }
    text_copy(j->raw_state, sizeof j->raw_state, state);
}

/* Reaps, applies the time limits and the grace, forgets old ended jobs. */
static void tick(struct process_x *px)
{
    int64_t now = clock_mono_ms();
    int64_t grace_ms = (int64_t)(px->cfg.grace_s > 0 ? px->cfg.grace_s : 10) * 1000;
    int64_t keep_ms = (int64_t)(px->cfg.keep_ended_s > 0 ? px->cfg.keep_ended_s : 600) * 1000;
    int w = 0;
    for (int i = 0; i < px->n; i++) {
        struct pjob *j = &px->jobs[i];
        if (!j->ended)
            end_if_exited(j, now);
        if (!j->ended) {
            if (j->usr1_at_ms && now >= j->usr1_at_ms) {
                signal_group(j, SIGUSR1);
                j->usr1_at_ms = 0;
            }
            if (j->limit_at_ms && now >= j->limit_at_ms && !j->term_at_ms) {
                j->timed_out = true;
                signal_group(j, SIGTERM);
                j->term_at_ms = now;
            }
            if (j->term_at_ms && now - j->term_at_ms >= grace_ms)
                signal_group(j, SIGKILL);
        }
        if (j->ended && now - j->ended_ms >= keep_ms)
            continue; /* forgotten */
        px->jobs[w++] = *j;
    }
    px->n = w;
}

static enum alallo_err process_submit_receipt(struct executor *x, const struct exec_submit *s,
                                              struct exec_receipt *rc)
{
    struct process_x *px = of(x);
    memset(rc, 0, sizeof *rc);
    tick(px);
    if (px->n >= PROCESS_JOBS_MAX)
        return exec_fail(x, ERR_UNAVAILABLE, "submit %s: %d processes already listed", s->tag,
                         PROCESS_JOBS_MAX);
    if (px->n == px->cap) {
        int ncap = px->cap ? px->cap * 2 : 16;
        struct pjob *nj = realloc(px->jobs, (size_t)ncap * sizeof *nj);
        if (!nj)
            return exec_fail(x, ERR_NOMEM, "submit %s: out of memory", s->tag);
        px->jobs = nj;
        px->cap = ncap;
    }
    /* The output and the folder are opened here, so that a bad one is this
     * call's clear error rather than a child that exits 127. */
    const char *out = s->output[0] ? s->output : "/dev/null";
    int out_fd = open(out, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (out_fd < 0)
        return exec_fail(x, ERR_INVALID, "submit %s: cannot open the output %.200s: %s", s->tag,
                         out, strerror(errno));
    struct stat st;
    if (s->workdir[0] && (stat(s->workdir, &st) != 0 || !S_ISDIR(st.st_mode))) {
        close(out_fd);
        return exec_fail(x, ERR_INVALID, "submit %s: the work folder %.200s is not a folder",
                         s->tag, s->workdir);
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
    if (s->workdir[0])
        posix_spawn_file_actions_addchdir_np(&fa, s->workdir);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setpgroup(&attr, 0);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGPIPE, SIGCHLD, SIGQUIT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaddset(&defaults, sigs[i]);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
    char *argv[] = {(char *)s->script, NULL};
    pid_t pid;
    /* ETXTBSY: the script was just written, and a child that another
     * thread of this process forked at that moment holds a copy of the
     * writing descriptor until it execs (O_CLOEXEC closes it only then).
     * That passes within moments: try again, up to SPAWN_BUSY_TRIES. */
    int rc_spawn = ETXTBSY;
    for (int t = 0; t < SPAWN_BUSY_TRIES && rc_spawn == ETXTBSY; t++) {
        if (t > 0)
            nanosleep(&(struct timespec){.tv_nsec = SPAWN_BUSY_PAUSE_MS * 1000000L}, NULL);
        rc_spawn = posix_spawn(&pid, s->script, &fa, &attr, argv, environ);
    }
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(out_fd);
    if (rc_spawn != 0)
        return exec_fail(x, ERR_INVALID, "submit %s: could not run %.200s: %s", s->tag, s->script,
                         strerror(rc_spawn));
    struct pjob *j = &px->jobs[px->n];
    memset(j, 0, sizeof *j);
    snprintf(j->id, sizeof j->id, "%d", (int)pid);
    text_copy(j->tag, sizeof j->tag, s->tag);
    j->pid = pid;
    text_copy(j->raw_state, sizeof j->raw_state, "RUNNING");
    j->start_wall_ms = clock_now_ms();
    int64_t now = clock_mono_ms();
    if (s->time_limit_min > 0) {
        j->limit_at_ms = now + (int64_t)s->time_limit_min * 60000;
        if (s->signal_lead_s > 0)
            j->usr1_at_ms = j->limit_at_ms - (int64_t)s->signal_lead_s * 1000;
    }
    px->n++;
    text_copy(rc->id, sizeof rc->id, j->id);
    rc->time_limit_min = s->time_limit_min;
    return ERR_OK;
}

static enum alallo_err process_list(struct executor *x, struct exec_job *out, int cap, int *n)
{
    struct process_x *px = of(x);
    tick(px);
    for (int i = 0; i < px->n && i < cap; i++) {
        const struct pjob *j = &px->jobs[i];
        struct exec_job *o = &out[i];
        memset(o, 0, sizeof *o);
        text_copy(o->id, sizeof o->id, j->id);
        text_copy(o->tag, sizeof o->tag, j->tag);
        o->state = j->ended ? EXEC_ENDED : EXEC_RUNNING;
        text_copy(o->raw_state, sizeof o->raw_state, j->raw_state);
        if (j->ended)
            text_copy(o->reason, sizeof o->reason, j->reason);
        text_copy(o->node, sizeof o->node, "localhost");
        o->start_ms = j->start_wall_ms;
    }
    *n = px->n;
    return ERR_OK;
}

static enum alallo_err process_cancel(struct executor *x, const char *tag)
{
    struct process_x *px = of(x);
    tick(px);
    int64_t now = clock_mono_ms();
    for (int i = 0; i < px->n; i++) {
        struct pjob *j = &px->jobs[i];
        if (j->ended || strcmp(j->tag, tag) != 0 || j->term_at_ms)
            continue;
        j->cancelled = true;
        signal_group(j, SIGTERM);
        j->term_at_ms = now ? now : 1;
    }
    return ERR_OK;
}

static enum alallo_err process_capacity(struct executor *x, const char *partition,
                                        const char *gpu_type, struct exec_capacity *c)
{
    struct process_x *px = of(x);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    c->nodes = c->nodes_up = 1;
    c->cpus = cpus > 0 ? (int)cpus : 1;
    c->mem_mb = pages > 0 && page > 0 ? (int64_t)pages * page / (1024 * 1024) : 0;
    c->gpus = c->max_gpus_per_node = px->cfg.gpus;
    c->max_time_min = 0;
    return ERR_OK;
}

static void process_close(struct executor *x)
{
    struct process_x *px = of(x);
    for (int i = 0; i < px->n; i++)
        if (!px->jobs[i].ended) {
            px->jobs[i].cancelled = true;
            signal_group(&px->jobs[i], SIGTERM);
        }
    int64_t grace_ms = (int64_t)(px->cfg.grace_s > 0 ? px->cfg.grace_s : 10) * 1000;
    int64_t end = clock_mono_ms() + grace_ms;
    for (int i = 0; i < px->n; i++) {
        struct pjob *j = &px->jobs[i];
        while (!j->ended) {
            end_if_exited(j, 0);
            if (j->ended)
                break;
            if (clock_mono_ms() >= end) {
                signal_group(j, SIGKILL);
                end = INT64_MAX; /* the next look reaps it */
                continue;
            }
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    free(px->jobs);
    free(px);
}

static const struct executor_ops process_ops = {
    .submit = exec_submit_by_receipt,
    .list = process_list,
    .cancel = process_cancel,
    .close = process_close,
    .submit_receipt = process_submit_receipt,
    .capacity = process_capacity,
};

enum alallo_err executor_process_open(const struct process_config *cfg, struct executor **x,
                                      char *err, size_t errcap)
{
    *x = NULL;
    struct process_x *px = calloc(1, sizeof *px);
    if (!px) {
        text_error(err, errcap, "process executor: out of memory");
        return ERR_NOMEM;
    }
    if (cfg)
        px->cfg = *cfg;
    if (px->cfg.gpus < 0 || px->cfg.grace_s < 0 || px->cfg.keep_ended_s < 0) {
        free(px);
        text_error(err, errcap, "process executor: gpus, grace and keep cannot be negative");
        return ERR_INVALID;
    }
    px->base.ops = &process_ops;
    text_copy(px->base.name, sizeof px->base.name, "process");
    *x = &px->base;
    return ERR_OK;
}
