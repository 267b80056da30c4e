/* billing_provisional.h - what a job that ends costs, until the ledger
 * module of src/sched takes over. The rules are SPEC §2 Money:
 *  - price = each worker's hourly rate × the time the job's steps took on
 *    it; each step of the final model is billed once: steps lost after the
 *    last checkpoint and repeated after a move are free, and so are waiting,
 *    loading and moving;
 *  - failed (every message) costs nothing;
 *  - succeeded never costs more than the upper end of its estimated price:
 *    the excess is refunded;
 *  - cancelled: the steps completed are charged, unless the job had run
 *    past the upper end of its estimated time, then it is free.
 * Pure.
 */
#ifndef ALALLO_API_BILLING_PROVISIONAL_H
#define ALALLO_API_BILLING_PROVISIONAL_H

#include "store/store.h"

struct bill {
    double charge; /* to write as a "charge" row */
    double refund; /* to write as a "refund" row */
    long steps;    /* steps the charge pays for */
};

/* The bill of job j, which is ending now in j->status. `history` holds its
 * attempts as stored (any order); `current` (may be NULL) replaces the row
 * of the same id, as it is about to be written. */
void billing_settle_provisional(const struct store_job *j, const struct store_attempt *history,
                                int n_history, const struct store_attempt *current,
                                int64_t now_ms, struct bill *out /* OUT */);

#endif
