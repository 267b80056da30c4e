/* conn_guard.h - bounds what a peer can hold before it has said who it is.
 *
 * The HTTP server runs one thread per connection, because handlers may
 * block (a followed log, a generation, an export). A connection that is
 * *waiting* for its request's headers - just opened, or kept alive between
 * requests - holds a thread and a slot but has proved nothing, so the
 * guard bounds the waiting ones:
 *
 *  - At most `max_waiting` wait at once. A connection that opens past that
 *    cuts the one that has waited longest, so a new client always gets in:
 *    to keep it out, a peer would have to open `max_waiting` connections in
 *    the moment the client takes to send its headers.
 *  - Each may wait at most `wait_ms` for its headers, counted from when it
 *    began to wait. Bytes that trickle in do not extend it.
 *
 * A connection whose headers have arrived is *busy* and never cut for
 * waiting:
 * a request with a body is admitted at its headers only if its caller's
 * key or token is good (http_mhd.c); one without a body is answered at
 * once. The slots between `max_waiting` and the server's connection limit
 * are the reserve that busy (checked) connections use.
 *
 * A busy connection whose answer is a download that holds a scarce place
 * (an export: a copy of a model and one of few slots) may be given a floor
 * rate (conn_guard_floor): in each window of CONN_GUARD_FLOOR_WINDOW_MS,
 * its reader must take at least the floor's worth of bytes, or it is cut,
 * when bytes were still waiting for it (a reader that keeps up with a slow
 * producer is never cut). What the reader took is what was handed to the
 * socket (conn_guard_sent) less what the socket still queues (`unsent`,
 * by default the SIOCOUTQ ioctl).
 *
 * Cutting is `cut(fd)` (by default shutdown(2)); the connection's own
 * thread then notices and closes it. The caller must call
 * conn_guard_close() before the descriptor is closed, so that a number
 * reused by a later socket is never cut. Thread-safe (one mutex); `now_ms`
 * is a monotonic clock in milliseconds and never goes back between calls.
 */
#ifndef ALALLO_API_CONN_GUARD_H
#define ALALLO_API_CONN_GUARD_H

#include <stdint.h>

struct conn_guard;
struct conn_guard_entry; /* one per open connection, owned by the guard */

typedef void (*conn_guard_cut_fn)(int fd);
typedef int64_t (*conn_guard_unsent_fn)(int fd); /* bytes queued on fd, not yet taken */

#define CONN_GUARD_FLOOR_WINDOW_MS 10000

struct conn_guard_stats {
    int waiting;        /* waiting now, not yet cut */
    int busy;           /* headers arrived, request not finished */
    uint64_t cut_full;  /* cut to make room for a newer connection */
    uint64_t cut_late;  /* cut for waiting longer than wait_ms */
    uint64_t cut_slow;  /* downloads cut for being read below their floor */
};

/* A guard for at most max_waiting (>= 1) waiting connections, each for at
 * most wait_ms (> 0). cut NULL means shutdown(fd, SHUT_RDWR). NULL on out
 * of memory. */
struct conn_guard *conn_guard_new(int max_waiting, int64_t wait_ms, conn_guard_cut_fn cut);

/* Frees g and any entries still open. NULL is fine. */
void conn_guard_free(struct conn_guard *g);

/* A connection on fd opened at now_ms; it starts waiting. When that makes
 * more than max_waiting, the one waiting longest (never this one) is cut.
 * Returns its entry, or NULL on out of memory (the caller should refuse
 * the connection). */
struct conn_guard_entry *conn_guard_open(struct conn_guard *g, int fd, int64_t now_ms);

/* Its request's headers arrived: no longer waiting, never cut. Returns
 * false when it had already been cut (its request should not be served). */
int conn_guard_busy(struct conn_guard *g, struct conn_guard_entry *e);

/* Its request is finished; it waits again for the next one from now_ms. */
void conn_guard_wait(struct conn_guard *g, struct conn_guard_entry *e, int64_t now_ms);

/* The connection is closing (before its descriptor is closed): forgets and
 * frees e. NULL is fine. */
void conn_guard_close(struct conn_guard *g, struct conn_guard_entry *e);

/* How the bytes a socket still queues are counted (tests); NULL: SIOCOUTQ. */
void conn_guard_set_unsent(struct conn_guard *g, conn_guard_unsent_fn unsent);

/* e (busy) answers with a download that must be read at floor_bps (> 0)
 * bytes a second or more, from now_ms until its request is finished. */
void conn_guard_floor(struct conn_guard *g, struct conn_guard_entry *e, int64_t floor_bps,
                      int64_t now_ms);

/* n more bytes of e's download were handed to its socket. */
void conn_guard_sent(struct conn_guard *g, struct conn_guard_entry *e, int64_t n);

/* Cuts every connection that began waiting wait_ms or more before now_ms,
 * and every download whose window ended with its reader below the floor.
 * Returns how many. */
int conn_guard_expire(struct conn_guard *g, int64_t now_ms);

/* Milliseconds from now_ms until the next waiting connection's deadline
 * (0 if one is due), or -1 when none waits. */
int64_t conn_guard_next_due(struct conn_guard *g, int64_t now_ms);

void conn_guard_get_stats(struct conn_guard *g, struct conn_guard_stats *out /* OUT */);

#endif
