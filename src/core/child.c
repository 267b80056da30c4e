/* child.c - a bounded child process with its output collected. */
#include "core/child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/growbuf.h"

extern char **environ;

int child_run(char *const argv[], int timeout_s, size_t out_cap, struct child_result *r)
{
    return child_run_ms(argv, (int64_t)timeout_s * 1000, out_cap, r);
}

int child_run_ms(char *const argv[], int64_t timeout_ms, size_t out_cap, struct child_result *r)
{
    return child_run_lines(argv, timeout_ms, out_cap, NULL, NULL, r);
}

/* The child's stdin: /dev/null, or (in_fd[1] >= 0) our end of a socket
 * pair whose other end is its stdin; a socket, so that a child that
 * stops reading gives EPIPE to send(MSG_NOSIGNAL), never SIGPIPE. */
static int open_stdin(const char *in, int in_fd[2])
{
    in_fd[0] = in_fd[1] = -1;
    if (!in)
        return 0;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in_fd) != 0)
        return -1;
    if (shutdown(in_fd[0], SHUT_WR) != 0 || fcntl(in_fd[1], F_SETFL, O_NONBLOCK) != 0) {
        close(in_fd[0]);
        close(in_fd[1]);
        return -1;
    }
    return 0;
}

/* Sends what is left of the input; closes our end when all is sent or
 * the child stopped reading. */
static void feed(int *fd, const char *in, size_t in_len, size_t *sent)
{
    ssize_t n = send(*fd, in + *sent, in_len - *sent, MSG_NOSIGNAL);
    if (n > 0)
        *sent += (size_t)n;
    if ((n < 0 && errno != EAGAIN && errno != EINTR) || *sent >= in_len) {
        close(*fd);
        *fd = -1;
    }
}

static int run(char *const argv[], const char *in, size_t in_len, int64_t timeout_ms,
               size_t out_cap, child_line_fn fn, void *ctx, struct child_result *r)
{
    memset(r, 0, sizeof *r);
    r->exit_status = -1;
    int out_pipe[2], err_pipe[2], in_fd[2];
    if (open_stdin(in, in_fd) != 0)
        return -1;
    if (pipe2(out_pipe, O_CLOEXEC) != 0) {
        if (in) {
            close(in_fd[0]);
            close(in_fd[1]);
        }
        return -1;
    }
    if (pipe2(err_pipe, O_CLOEXEC) != 0) {
        close(out_pipe[0]);
        close(out_pipe[1]);
        if (in) {
            close(in_fd[0]);
            close(in_fd[1]);
        }
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
    if (in)
        posix_spawn_file_actions_adddup2(&fa, in_fd[0], 0);
    else
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setpgroup(&attr, 0);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
    pid_t pid;
    int rc = strchr(argv[0], '/') ? posix_spawn(&pid, argv[0], &fa, &attr, argv, environ)
                                   : posix_spawnp(&pid, argv[0], &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(out_pipe[1]);
    close(err_pipe[1]);
    if (in)
        close(in_fd[0]);
    if (rc != 0) {
        close(out_pipe[0]);
        close(err_pipe[0]);
        if (in)
            close(in_fd[1]);
        errno = rc;
        return -1;
    }
    double deadline = clock_mono_s() + (double)timeout_ms / 1000.0;
    /* stdout, up to out_cap bytes and the NUL */
    struct growbuf out = GROWBUF_INIT(out_cap < SIZE_MAX ? out_cap + 1 : SIZE_MAX);
    int open_fds = 2;
    struct pollfd p[3] = {{.fd = out_pipe[0], .events = POLLIN},
                          {.fd = err_pipe[0], .events = POLLIN},
                          {.fd = in ? in_fd[1] : -1, .events = POLLOUT}};
    size_t err_len = 0, line_at = 0; /* where the next line of stdout starts */
    size_t sent = 0;
    if (in && in_len == 0) {
        close(p[2].fd);
        p[2].fd = -1;
    }
    while (open_fds > 0) {
        double left = deadline - clock_mono_s();
        if (left <= 0) {
            r->timed_out = 1;
            break;
        }
        int n = poll(p, 3, (int)(left * 1000) + 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        if (p[2].fd >= 0 && p[2].revents)
            feed(&p[2].fd, in, in_len, &sent);
        for (int i = 0; i < 2; i++) {
            if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[8192];
            ssize_t got = read(p[i].fd, buf, sizeof buf);
            if (got <= 0) {
                close(p[i].fd);
                p[i].fd = -1;
                open_fds--;
                continue;
            }
            if (i == 0) {
                enum growbuf_err e = growbuf_append(&out, buf, (size_t)got);
                r->out = out.p; /* r owns the bytes (child_result_free) */
                r->out_len = out.len;
                if (e) {
                    r->timed_out = 1; /* too much output (or no memory): treated like the limit */
                    r->too_large = e == GROWBUF_TOO_LARGE;
                    open_fds = 0;
                    break;
                }
                for (char *nl; fn && (nl = memchr(r->out + line_at, '\n', r->out_len - line_at));
                     line_at = (size_t)(nl - r->out) + 1)
                    fn(ctx, r->out + line_at, (size_t)(nl - (r->out + line_at)));
            } else {
                /* Keep the last bytes of stderr: the error is at the end. */
                for (ssize_t k = 0; k < got; k++) {
                    if (err_len + 1 >= sizeof r->err) {
                        memmove(r->err, r->err + sizeof r->err / 2, sizeof r->err / 2);
                        err_len -= sizeof r->err / 2;
                    }
                    r->err[err_len++] = buf[k];
                }
                r->err[err_len] = '\0';
            }
        }
    }
    for (int i = 0; i < 3; i++)
        if (p[i].fd >= 0)
            close(p[i].fd);
    if (r->timed_out)
        kill(-pid, SIGKILL);
    /* The output is closed; the child may still run (it closed its
     * streams, or left them to a grandchild): wait for it up to the same
     * deadline. */
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, r->timed_out ? 0 : WNOHANG);
        if (w == pid)
            break;
        if (w < 0 && errno != EINTR)
            break;
        if (w == 0 && clock_mono_s() >= deadline) {
            r->timed_out = 1;
            kill(-pid, SIGKILL);
            continue;
        }
        if (w == 0) {
            struct timespec ts = {0, 2 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    if (WIFEXITED(status) && !r->timed_out)
        r->exit_status = WEXITSTATUS(status);
    else if (WIFSIGNALED(status))
        r->signal = WTERMSIG(status);
    return 0;
}

int child_run_lines(char *const argv[], int64_t timeout_ms, size_t out_cap, child_line_fn fn,
                    void *ctx, struct child_result *r)
{
    return run(argv, NULL, 0, timeout_ms, out_cap, fn, ctx, r);
}

int child_run_input(char *const argv[], const char *in, size_t in_len, int64_t timeout_ms,
                    size_t out_cap, struct child_result *r)
{
    return run(argv, in ? in : "", in_len, timeout_ms, out_cap, NULL, NULL, r);
}

void child_result_free(struct child_result *r)
{
    free(r->out);
    r->out = NULL;
    r->out_len = 0;
}
