/* trainer_proc.c - a trainer child: fork/exec in its own process group,
 * line-by-line reading of its output, group signals. */
#include "worker/trainer_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"

double trainer_proc_now(void)
{
    return clock_mono_s();
}

static void close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

/* In the child, between fork and exec: only async-signal-safe calls, since
 * the parent may have other threads (local workers inside serve). */
static void child_exec(char *const argv[], const char *cwd, int out_w, int err_w, int report_w,
                       pid_t parent)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) /* the parent died before prctl took effect */
        _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    /* A trainer whose worker died must die at its next write: SIGPIPE. */
    const int sigs[] = {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGCHLD};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &dfl, NULL);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0 && devnull != STDIN_FILENO)
        dup2(devnull, STDIN_FILENO);
    /* dup2 onto itself would keep close-on-exec: clear it by hand. */
    if (out_w == STDOUT_FILENO)
        fcntl(out_w, F_SETFD, 0);
    else
        dup2(out_w, STDOUT_FILENO);
    if (err_w == STDERR_FILENO)
        fcntl(err_w, F_SETFD, 0);
    else
        dup2(err_w, STDERR_FILENO);
    int e = 0;
    if (cwd && chdir(cwd) != 0)
        e = errno;
    if (!e) {
        /* report_w is close-on-exec: it closes by itself on success. */
        if (report_w > 3)
            close_range(3, (unsigned)report_w - 1, 0);
        close_range((unsigned)report_w + 1, ~0U, 0);
        execv(argv[0], argv);
        e = errno;
    }
    ssize_t w = write(report_w, &e, sizeof e);
    (void)w;
    _exit(127);
}

static int alloc_line_buf(struct trainer_line_buf *b)
{
    b->data = malloc(TRAINER_PROC_MAX_LINE + 1);
    b->len = 0;
    b->overflow = false;
    return b->data ? 0 : -1;
}

int trainer_proc_start(struct trainer_proc *p, char *const argv[], const char *cwd, char *err,
                       size_t errcap)
{
    memset(p, 0, sizeof *p);
    p->out_fd = p->err_fd = -1;
    p->exit_status = -1;
    int out[2] = {-1, -1}, errp[2] = {-1, -1}, rep[2] = {-1, -1};
    if (alloc_line_buf(&p->out) != 0 || alloc_line_buf(&p->err) != 0) {
        snprintf(err, errcap, "out of memory");
        goto fail;
    }
    /* O_CLOEXEC on every end, so that a trainer started by another worker
     * thread at the same moment never inherits them. */
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(errp, O_CLOEXEC) != 0 || pipe2(rep, O_CLOEXEC) != 0) {
        snprintf(err, errcap, "pipe: %s", strerror(errno));
        goto fail;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, errcap, "fork: %s", strerror(errno));
        goto fail;
    }
    if (pid == 0)
        child_exec(argv, cwd, out[1], errp[1], rep[1], parent);
    setpgid(pid, pid); /* also here: a signal may come before the child runs */
    p->pid = pid;
    close_fd(&out[1]);
    close_fd(&errp[1]);
    close_fd(&rep[1]);
    int child_errno = 0;
    ssize_t r;
    do
        r = read(rep[0], &child_errno, sizeof child_errno);
    while (r < 0 && errno == EINTR);
    close_fd(&rep[0]);
    p->out_fd = out[0];
    p->err_fd = errp[0];
    fcntl(p->out_fd, F_SETFL, O_NONBLOCK);
    fcntl(p->err_fd, F_SETFL, O_NONBLOCK);
    if (r == (ssize_t)sizeof child_errno) {
        snprintf(err, errcap, "cannot run %s: %s", argv[0], strerror(child_errno));
        trainer_proc_close(p);
        return -1;
    }
    return 0;
fail:
    close_fd(&out[0]);
    close_fd(&out[1]);
    close_fd(&errp[0]);
    close_fd(&errp[1]);
    close_fd(&rep[0]);
    close_fd(&rep[1]);
    trainer_proc_close(p);
    return -1;
}

/* Splits newly read bytes into lines for fn. */
static void feed(struct trainer_line_buf *b, int stream, const char *data, size_t n,
                 trainer_line_fn fn, void *ctx)
{
    for (size_t i = 0; i < n; i++) {
        char c = data[i];
        if (c == '\n') {
            b->data[b->len] = '\0';
            if (fn)
                fn(ctx, stream, b->data, b->len, b->overflow);
            b->len = 0;
            b->overflow = false;
        } else if (b->len < TRAINER_PROC_MAX_LINE) {
            b->data[b->len++] = c;
        } else {
            b->overflow = true;
        }
    }
}

/* A last line without a newline still counts. */
static void flush_partial(struct trainer_line_buf *b, int stream, trainer_line_fn fn, void *ctx)
{
    if (b->data && (b->len > 0 || b->overflow)) {
        b->data[b->len] = '\0';
        if (fn)
            fn(ctx, stream, b->data, b->len, b->overflow);
        b->len = 0;
        b->overflow = false;
    }
}

/* Reads what is there; closes the fd at end of file. */
static void drain(int *fd, struct trainer_line_buf *b, int stream, trainer_line_fn fn, void *ctx)
{
    char chunk[16384];
    for (int rounds = 0; *fd >= 0 && rounds < 64; rounds++) {
        ssize_t n = read(*fd, chunk, sizeof chunk);
        if (n > 0) {
            feed(b, stream, chunk, (size_t)n, fn, ctx);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        flush_partial(b, stream, fn, ctx);
        close_fd(fd);
    }
}

static void reap(struct trainer_proc *p, int options)
{
    if (p->reaped || p->pid <= 0)
        return;
    int st;
    pid_t r;
    do
        r = waitpid(p->pid, &st, options);
    while (r < 0 && errno == EINTR);
    if (r != p->pid)
        return;
    p->reaped = true;
    p->reaped_at = trainer_proc_now();
    if (WIFEXITED(st)) {
        p->exit_status = WEXITSTATUS(st);
    } else if (WIFSIGNALED(st)) {
        p->term_signal = WTERMSIG(st);
    }
    /* Whatever the trainer left behind in its group goes with it. */
    kill(-p->pid, SIGKILL);
}

int trainer_proc_poll(struct trainer_proc *p, int timeout_ms, trainer_line_fn fn, void *ctx)
{
    if (p->pid <= 0)
        return 0;
    struct pollfd fds[2];
    int n = 0;
    if (p->out_fd >= 0)
        fds[n++] = (struct pollfd){.fd = p->out_fd, .events = POLLIN};
    if (p->err_fd >= 0)
        fds[n++] = (struct pollfd){.fd = p->err_fd, .events = POLLIN};
    /* Without open pipes there is nothing to wake us: poll the exit often. */
    int wait_ms = n > 0 ? timeout_ms : (timeout_ms < 50 ? timeout_ms : 50);
    int r = poll(fds, (nfds_t)n, wait_ms);
    if (r < 0 && errno != EINTR)
        return -1;
    drain(&p->out_fd, &p->out, 1, fn, ctx);
    drain(&p->err_fd, &p->err, 2, fn, ctx);
    reap(p, WNOHANG);
    if (p->reaped && (p->out_fd >= 0 || p->err_fd >= 0) &&
        trainer_proc_now() - p->reaped_at > 2.0) {
        flush_partial(&p->out, 1, fn, ctx);
        flush_partial(&p->err, 2, fn, ctx);
        close_fd(&p->out_fd);
        close_fd(&p->err_fd);
    }
    return p->reaped && p->out_fd < 0 && p->err_fd < 0 ? 0 : 1;
}

int trainer_proc_signal(struct trainer_proc *p, int sig)
{
    if (p->pid <= 0 || p->reaped)
        return -1;
    return kill(-p->pid, sig) == 0 ? 0 : -1;
}

void trainer_proc_close(struct trainer_proc *p)
{
    if (p->pid > 0 && !p->reaped) {
        kill(-p->pid, SIGKILL);
        reap(p, 0);
    }
    close_fd(&p->out_fd);
    close_fd(&p->err_fd);
    free(p->out.data);
    free(p->err.data);
    p->out.data = p->err.data = NULL;
}
