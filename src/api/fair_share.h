/* fair_share.h - a server-wide pool of slots shared fairly between accounts.
 *
 * Some work holds a scarce server resource for its whole length: a
 * generation (a child process on the server's CPU), a streamed answer, an
 * export (a temporary copy of a model). The server runs a fixed number at
 * once; this pool hands those slots out so that one busy account never
 * keeps another out:
 *
 *  - A caller takes a slot for its account, waiting up to `wait_ms` when
 *    none is free. The pool is work-conserving: an account alone may hold
 *    every slot.
 *  - When a slot is free, the waiter that gets it is the one whose account
 *    holds the fewest slots, the oldest among equals. So an account that
 *    holds slots never gets a freed one while another account that holds
 *    fewer waits: each account's share is the pool divided by the accounts
 *    that want it (docs/security.md, "Fair shares").
 *  - At most `slots` callers of one account wait at once, and at most
 *    `max_waiting` of all accounts; a caller past either is refused at
 *    once, so one account cannot fill the waiting room either.
 *
 * Thread-safe (one mutex and one condition variable). Waiting blocks the
 * calling thread: the HTTP server runs one thread per connection.
 */
#ifndef ALALLO_API_FAIR_SHARE_H
#define ALALLO_API_FAIR_SHARE_H

#include <stdbool.h>
#include <stdint.h>

struct fair_share;

/* A pool of `slots` (>= 1) with room for `max_waiting` (>= 0) waiters.
 * NULL on out of memory or bad arguments. */
struct fair_share *fair_share_new(int slots, int max_waiting);

/* Frees fs; no slot may be held or waited for. NULL is fine. */
void fair_share_free(struct fair_share *fs);

/* Takes a slot for `account` (a non-empty id, kept up to 63 bytes),
 * waiting up to wait_ms (0: no wait) for its turn. Returns true when taken
 * (the caller gives it back with fair_share_give), false when the waiting
 * room is full or the time ran out. */
bool fair_share_take(struct fair_share *fs, const char *account, int64_t wait_ms);

/* Gives back a slot `account` took. */
void fair_share_give(struct fair_share *fs, const char *account);

/* The slots `account` holds and its callers waiting now (either may be
 * NULL); for tests and metrics. */
void fair_share_count(struct fair_share *fs, const char *account, int *held /* OUT */,
                      int *waiting /* OUT */);

#endif
