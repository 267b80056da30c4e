/* admission.h - who runs next in the inference engine: a queue per
 * account, taken in turn, and limits on what runs at once.
 *
 * A request waits in its account's queue (first in, first out). When the
 * engine has room - fewer than max_running sequences running and their
 * tokens in flight (each one's prompt plus its max_tokens, counted from
 * admission to its end) leaving room for the next one - the next request
 * is taken from the account after the one served last, round-robin over
 * the accounts that wait: one account's hundred requests never keep
 * another's one waiting for more than one turn. A request alone larger
 * than the token limit is admitted when nothing else runs (it can never
 * fit otherwise). A push past max_queued of one account, or past
 * max_queued * 4 of all, is refused at once (the engine answers "busy"
 * and the API a 429 with Retry-After).
 *
 * Pure: no I/O, no clock, no threads. Items are the caller's pointers,
 * never freed here.
 */
#ifndef ALALLO_SERVE_ADMISSION_H
#define ALALLO_SERVE_ADMISSION_H

#include <stdbool.h>
#include <stddef.h>

struct admission_limits {
    int max_running;          /* sequences decoding at once, >= 1 */
    long max_tokens_in_flight; /* prompt + max_tokens of those, >= 1 */
    int max_queued;           /* waiting requests per account, >= 1 */
};

struct admission;

struct admission *admission_new(const struct admission_limits *lim);
void admission_free(struct admission *a); /* NULL is fine; items are not freed */

/* Queues item for account (up to 63 bytes kept) with its token count.
 * 0, or -1 when the queue is full (or memory ran out). */
int admission_push(struct admission *a, const char *account, void *item, long tokens);

/* The next item to run, or NULL when none waits or the limits leave no
 * room; it then counts as running until admission_done. */
void *admission_next(struct admission *a);

/* A running item of `tokens` ended: its room is free again. */
void admission_done(struct admission *a, long tokens);

/* Takes a waiting item out of its queue (its client went away). True when
 * it was waiting. */
bool admission_drop(struct admission *a, void *item);

int admission_running(const struct admission *a);
int admission_waiting(const struct admission *a);
long admission_tokens(const struct admission *a);

#endif
