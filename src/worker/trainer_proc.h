/* trainer_proc.h - one trainer child process: started in its own process
 * group, its stdout and stderr read line by line, signalled as a group.
 *
 * The child gets SIGKILL when the thread that started it dies
 * (PR_SET_PDEATHSIG), so `kill -9` of a worker takes its trainer with it and
 * no orphan keeps writing into a job's checkpoint folder. stdin is
 * /dev/null; no other descriptor of the parent leaks into the child.
 *
 * Used for `alallo train` (docs/trainer-protocol.md) and for the speed
 * measurement at start (`alallo bench train`). One owner thread per struct.
 */
#ifndef ALALLO_WORKER_TRAINER_PROC_H
#define ALALLO_WORKER_TRAINER_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Longest line delivered; a longer one is delivered cut, with truncated set. */
#define TRAINER_PROC_MAX_LINE (64 * 1024)

struct trainer_line_buf {
    char *data;       /* TRAINER_PROC_MAX_LINE + 1 bytes, owned */
    size_t len;
    bool overflow;    /* the current line passed the limit; rest discarded */
};

struct trainer_proc {
    pid_t pid;            /* the child, also its process group; 0 when none */
    int out_fd, err_fd;   /* read ends, -1 once closed                       */
    bool reaped;          /* waitpid collected the child                     */
    int exit_status;      /* exit code when it exited, else -1               */
    int term_signal;      /* the signal that ended it, else 0                */
    double reaped_at;     /* monotonic seconds when reaped                   */
    struct trainer_line_buf out, err;
};

/* stream: 1 stdout, 2 stderr. `line` has no newline and is NUL-terminated at
 * line[len]. */
typedef void (*trainer_line_fn)(void *ctx, int stream, const char *line, size_t len,
                                bool truncated);

/* Starts argv[0] (a path) with argv in folder `cwd` (NULL: the current one).
 * Returns 0, or -1 with a one-line reason in err (including an exec that
 * failed in the child: "cannot run PATH: No such file or directory"). */
int trainer_proc_start(struct trainer_proc *p /* OUT */, char *const argv[], const char *cwd,
                       char *err, size_t errcap);

/* Waits up to timeout_ms for output, calls fn for each complete line, and
 * reaps the child when it has exited. Returns 1 while the child runs or its
 * pipes are still open, 0 once it has exited and its output is drained (a
 * descendant holding the pipes open is given 2 s, then cut off). */
int trainer_proc_poll(struct trainer_proc *p, int timeout_ms, trainer_line_fn fn, void *ctx);

/* Sends `sig` to the child's process group. Returns 0, or -1 when the child
 * is already reaped or kill failed. */
int trainer_proc_signal(struct trainer_proc *p, int sig);

/* Ends everything: SIGKILL to the group if the child was not reaped, waits
 * for it, closes the pipes and frees the buffers. Safe on a struct whose
 * start failed, and twice. */
void trainer_proc_close(struct trainer_proc *p);

/* Seconds on the monotonic clock. */
double trainer_proc_now(void);

#endif
