/* sandbox.h - running a short Python program on untrusted code (a python
 * grader's source, docs/rft.md) in a sandbox: Debian's /usr/bin/python3
 * -I -S inside bubblewrap (/usr/bin/bwrap), with
 *   - no network and nothing shared (--unshare-all: a new user, pid, net,
 *     ipc, uts and cgroup namespace; every capability dropped),
 *   - a read-only file system of /usr (and /bin, /lib... as this machine
 *     links them) and the loader's cache, nothing else of the host: no
 *     home, no /etc, no data folder; a private /tmp of at most 16 MiB,
 *   - limits set before bwrap is executed (util-linux's prlimit): address
 *     space (memory), CPU seconds, file size, no core files; and, inside
 *     the sandbox before the program runs, a number of processes (set
 *     there because the kernel counts processes per user namespace: set
 *     outside, it would count every process of alallo's user);
 *   - a wall-clock limit, after which the whole process group is killed
 *     (bwrap's --die-with-parent and its pid namespace take the rest).
 * When alallo runs as root the sandbox runs as nobody (65534), since the
 * kernel exempts root from the process limit.
 * The program reads its input on stdin and writes its answer on stdout;
 * the caller owns both texts. Thread-safe.
 */
#ifndef ALALLO_CORE_SANDBOX_H
#define ALALLO_CORE_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/child.h"

#define SANDBOX_BWRAP "/usr/bin/bwrap"
#define SANDBOX_PYTHON "/usr/bin/python3"

struct sandbox_limits {
    int64_t wall_ms;     /* the whole run, startup included              */
    int cpu_s;           /* CPU seconds of each process                   */
    size_t memory_bytes; /* address space of each process                 */
    int processes;       /* processes and threads inside the sandbox      */
    size_t file_bytes;   /* largest file it may write (in its /tmp)       */
    size_t out_cap;      /* stdout kept; more is an error                 */
};

/* 5 s of wall clock and of CPU, 256 MiB, 16 processes, 1 MiB files,
 * 64 KiB of output (docs/rft.md). */
struct sandbox_limits sandbox_default_limits(void);

/* Whether the sandbox works on this machine: bwrap and python3 are there
 * and bwrap can make its namespaces (unprivileged user namespaces on).
 * Runs `pass` in it the first time, and again after a failure (so that
 * installing bubblewrap needs no restart); a success is kept. false with
 * a sentence saying why in why. */
bool sandbox_available(char *why, size_t whycap);

/* Runs python source `program` (given as -c) in the sandbox with
 * in[0..in_len) on its stdin. 0 when it ran (r says how it ended:
 * r->exit_status, r->signal, r->timed_out, r->out, r->err; the caller
 * frees r with child_result_free), -1 when it could not start (why says). */
int sandbox_python(const char *program, const char *in, size_t in_len,
                   const struct sandbox_limits *lim, struct child_result *r /* OUT */,
                   char *why, size_t whycap);

/* The last line of r's stderr that is not blank (the reason a program
 * gave for failing), cut to cap. */
void sandbox_last_line(const struct child_result *r, char *line, size_t cap);

#endif
