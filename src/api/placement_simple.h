/* placement_simple.h - which waiting job a worker that asks for work gets.
 *
 * The simplest fair rule, kept in one place so that the scheduler of
 * src/sched can replace it: among the candidates (one per account: that
 * account's oldest waiting job that fits the worker's memory, see
 * store_claim_candidates), take the account served longest ago, and on a
 * tie the oldest job. Accounts thus take turns (round-robin) and each
 * account's jobs run first come, first served.
 */
#ifndef ALALLO_API_PLACEMENT_SIMPLE_H
#define ALALLO_API_PLACEMENT_SIMPLE_H

#include <stdint.h>

#include "store/store.h"

struct placement;

struct placement *placement_new(void);
void placement_free(struct placement *p);

/* Returns the index of the chosen candidate, or -1 when n is 0, and
 * remembers that its account was served at `tick` (any growing number).
 * Thread-safe. */
int placement_pick(struct placement *p, const struct store_claim_candidate *c, int n,
                   int64_t tick);

/* Forgets the last pick of `account` (its claim did not go through). */
void placement_unpick(struct placement *p, const char *account, int64_t previous_tick);

/* When `account` was last served (0: never). */
int64_t placement_last_served(struct placement *p, const char *account);

#endif
