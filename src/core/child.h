/* child.h - running a helper process (this binary's generate and export,
 * Slurm's command-line tools) with a time limit, collecting what it
 * prints. The child gets its own process group and is killed (SIGKILL to
 * the group) when the limit passes or the collected output passes its cap.
 */
#ifndef ALALLO_CORE_CHILD_H
#define ALALLO_CORE_CHILD_H

#include <stddef.h>
#include <stdint.h>

struct child_result {
    int exit_status; /* -1 when killed by a signal or the limit */
    int signal;
    int timed_out;  /* the limit passed, or (with too_large) the output cap */
    int too_large;  /* stdout passed out_cap: killed, out holds what came  */
    char *out;  /* stdout, NUL-terminated, malloc'd; NULL when empty */
    size_t out_len;
    char err[2048]; /* the last bytes of stderr */
};

/* Runs argv (argv[0] is a path) for at most timeout_s seconds, keeping up
 * to out_cap bytes of stdout. Returns 0 when it ran (see r for how it
 * ended), -1 when it could not start (errno says why). */
int child_run(char *const argv[], int timeout_s, size_t out_cap, struct child_result *r /* OUT */);

/* child_run with the limit in milliseconds; argv[0] without a '/' is
 * looked up in PATH. The limit covers the whole run: a child that closes
 * its output and goes on running is killed at the limit too. */
int child_run_ms(char *const argv[], int64_t timeout_ms, size_t out_cap,
                 struct child_result *r /* OUT */);

/* Called with each whole line of stdout (without its '\n') as it arrives. */
typedef void (*child_line_fn)(void *ctx, const char *line, size_t len);

/* child_run_ms that also gives each line of stdout to fn as the child
 * writes it (stdout is still collected into r->out). */
int child_run_lines(char *const argv[], int64_t timeout_ms, size_t out_cap, child_line_fn fn,
                    void *ctx, struct child_result *r /* OUT */);

/* child_run_ms with in[0..in_len) given on the child's stdin (a socket,
 * closed once all is written; a child that stops reading loses the rest,
 * and this process gets no SIGPIPE). */
int child_run_input(char *const argv[], const char *in, size_t in_len, int64_t timeout_ms,
                    size_t out_cap, struct child_result *r /* OUT */);

void child_result_free(struct child_result *r);

#endif
