/* ratelimit.h - a per-key token bucket: how many API requests one caller may
 * make per second, with a burst allowance.
 *
 * Each key (the caller's account id) has a bucket that holds up to `burst`
 * tokens and refills at `rate` tokens per second; a request takes one token
 * or is refused with the time until one is back (HTTP 429 + Retry-After).
 *
 * Memory is bounded: the limiter holds at most `max_keys` buckets, in
 * RATELIMIT_SHARDS shards of fixed arrays allocated once by ratelimit_new().
 * When a shard is full, a bucket that has refilled to `burst` is reused
 * first (forgetting it changes nothing), then the one idle longest. Keys are
 * account ids, which callers cannot invent, so eviction cannot be used to
 * mint fresh buckets at will.
 *
 * Thread safety: every function may be called from any thread at once;
 * each shard has its own mutex, so callers with different keys rarely wait
 * for each other. Time is passed in by the caller (ratelimit_now() gives a
 * monotonic clock), which keeps the arithmetic testable.
 *
 * Ownership: ratelimit_new() returns a limiter the caller frees with
 * ratelimit_free(); keys are copied.
 */
#ifndef ALALLO_API_RATELIMIT_H
#define ALALLO_API_RATELIMIT_H

#include <stdbool.h>
#include <stddef.h>

#define RATELIMIT_KEY_MAX 64     /* longest key, without its NUL */
#define RATELIMIT_SHARDS 16
#define RATELIMIT_MAX_KEYS 65536 /* the most buckets one limiter may hold */

struct ratelimit;

/* A limiter of `rate` requests per second (> 0) with bursts of up to
 * `burst` (>= 1) for each of at most `max_keys` keys (rounded up to a
 * multiple of RATELIMIT_SHARDS, at most RATELIMIT_MAX_KEYS). Returns NULL
 * when an argument is out of range or memory is short. */
struct ratelimit *ratelimit_new(double rate, double burst, size_t max_keys);

/* Frees the limiter; NULL is fine. */
void ratelimit_free(struct ratelimit *rl);

/* Takes one token from `key`'s bucket at time `now_s` (seconds on a
 * monotonic clock; a time earlier than the bucket's last one counts as no
 * time passed). Returns true when the request may go on. Returns false when
 * it must be refused; then *retry_after_s (may be NULL) is the time until a
 * token is back, in seconds, > 0. An empty or over-long key (more than
 * RATELIMIT_KEY_MAX bytes) is refused with *retry_after_s = 0, since it can
 * only come from a bug in the caller. */
bool ratelimit_take(struct ratelimit *rl, const char *key, double now_s,
                    double *retry_after_s /* OUT, may be NULL */);

/* Buckets held now (for tests and metrics). */
size_t ratelimit_size(struct ratelimit *rl);

/* Seconds on CLOCK_MONOTONIC. */
double ratelimit_now(void);

#endif
