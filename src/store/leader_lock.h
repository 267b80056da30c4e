/* leader_lock.h - which one of the `serve` processes sharing one store leads.
 *
 * Several `alallo serve` may run on one store (docs/operations.md, "High
 * availability"); exactly one of them, the leader, runs the scheduling
 * passes, the timers and the local workers. Leadership is a lock held for
 * as long as the leader lives, released by the operating system or the
 * database when it dies, so that a standby can take it within a second:
 *
 *  - SQLite (a data folder): an exclusive flock(2) on DATA/leader.lock.
 *    The kernel drops it when the process dies, even by kill -9.
 *  - PostgreSQL: pg_try_advisory_lock(LEADER_LOCK_KEY) on a connection of
 *    the lock's own (never one of the store's), so that the lock lives
 *    exactly as long as that session. The server ends the session when
 *    the leader dies; a leader that loses the connection has lost the
 *    lock and must stop leading at once (leader_lock_try says so).
 *
 * The leader also writes where it answers (its URL) beside the lock, in
 * the lock file or in the table serve_leader, so that a standby knows
 * where to forward writes. The URL is advisory: it may name a leader that
 * has just died.
 *
 * Not thread-safe: one thread (the server's leadership watcher,
 * control/leadership.h) owns a struct leader_lock and makes every call.
 */
#ifndef ALALLO_STORE_LEADER_LOCK_H
#define ALALLO_STORE_LEADER_LOCK_H

#include <stddef.h>

#include "core/err.h"

/* The advisory lock's key: "alallo" in ASCII, read as a number. */
#define LEADER_LOCK_KEY 0x616c616c6c6fLL
#define LEADER_URL_MAX 256

struct leader_lock;

/* Opens the lock for store `where`: a "postgresql://" or "postgres://"
 * URL, or else the path of a data folder (SQLite), whose lock file
 * DATA/leader.lock is created when missing. Nothing is locked yet.
 * Returns 0, or ERR_INVALID / ERR_UNAVAILABLE / ERR_IO / ERR_NOMEM with a
 * reason in err. */
enum alallo_err leader_lock_open(const char *where, struct leader_lock **out /* OUT */,
                                 char *err, size_t errcap);

enum leader_lock_state {
    LEADER_LOCK_STANDBY = 0, /* another process holds it (or none could be asked) */
    LEADER_LOCK_HELD = 1,    /* this process holds it */
    LEADER_LOCK_LOST = 2,    /* this process held it and no longer does */
};

/* Takes the lock when free, or checks that this process still holds it
 * (for PostgreSQL: that its session is alive). On taking it, writes
 * my_url as the leader's URL. Once LEADER_LOCK_LOST has been returned,
 * the lock is never taken again by this handle (a process that lost
 * leadership stops; docs/operations.md). Never blocks for long: the
 * PostgreSQL calls have a few seconds' timeout. */
enum leader_lock_state leader_lock_try(struct leader_lock *l, const char *my_url);

/* The URL the current leader wrote, into out. ERR_NOT_FOUND when none has
 * been written; ERR_UNAVAILABLE when it cannot be read now. */
enum alallo_err leader_lock_url(struct leader_lock *l, char *out /* OUT */, size_t cap);

/* Releases the lock (when held) and frees l. NULL is allowed. */
void leader_lock_close(struct leader_lock *l);

#endif
