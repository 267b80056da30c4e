/* wlog.h - a worker's own log file (work_dir/worker.log).
 *
 * Each line is "2024-05-01T12:00:00Z name: text", written with one write()
 * on a file opened O_APPEND, so the worker's threads (and several workers
 * sharing a file) never interleave inside a line. No locks, no globals.
 */
#ifndef ALALLO_WORKER_WLOG_H
#define ALALLO_WORKER_WLOG_H

#include <stddef.h>

struct wlog {
    int fd;          /* -1 when closed: lines then go to stderr */
    char name[64];   /* the worker's name, prefixed to each line */
};

/* A log that has grown past this when it is opened is moved to PATH.1 (the
 * previous PATH.1 is dropped), so a worker's logs stay bounded across runs. */
#define WLOG_ROTATE_BYTES (16L * 1024 * 1024)

/* Opens (creating, mode 0600) the log at `path` for worker `name`. Returns 0,
 * or -1 (with errno) and leaves the log writing to stderr. */
int wlog_open(struct wlog *log /* OUT */, const char *path, const char *name);

/* Appends one line; text longer than about 2 KiB is cut. Safe from any
 * thread. A NULL log writes to stderr. */
void wlog_printf(struct wlog *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Closes the file. Accepts a log that was never opened (fd -1). */
void wlog_close(struct wlog *log);

#endif
