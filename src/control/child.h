/* child.h - running a helper process of this binary (generate, export)
 * with a time limit, collecting what it prints. The child gets its own
 * process group and is killed (SIGKILL to the group) when the limit
 * passes or the collected output passes its cap.
 */
#ifndef ALALLO_CONTROL_CHILD_H
#define ALALLO_CONTROL_CHILD_H

#include <stddef.h>

struct child_result {
    int exit_status; /* -1 when killed by a signal or the limit */
    int signal;
    int timed_out;
    char *out;  /* stdout, NUL-terminated, malloc'd; NULL when empty */
    size_t out_len;
    char err[2048]; /* the last bytes of stderr */
};

/* Runs argv (argv[0] is a path) for at most timeout_s seconds, keeping up
 * to out_cap bytes of stdout. Returns 0 when it ran (see r for how it
 * ended), -1 when it could not start. */
int child_run(char *const argv[], int timeout_s, size_t out_cap, struct child_result *r /* OUT */);

void child_result_free(struct child_result *r);

#endif
