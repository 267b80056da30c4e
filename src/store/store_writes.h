/* store_writes.h - the rows a store_job_update() callback queues, as seen
 * by store implementations (not by callers, which use the store_writes_*
 * functions of store.h). Fixed caps: an update writes at most
 * STORE_WRITES_CAP rows of each kind; one more is ERR_TOO_LARGE.
 */
#ifndef ALALLO_STORE_WRITES_H
#define ALALLO_STORE_WRITES_H

#include "store/store.h"

#define STORE_WRITES_CAP 256

struct store_writes {
    struct store_log_line *logs;
    int n_logs;
    struct store_event *events;
    int n_events;
    struct store_checkpoint *checkpoints;
    int n_checkpoints;
    struct store_ledger_row *ledger;
    int n_ledger;
    struct store_attempt *attempts;
    int n_attempts;
    struct store_calibration *calibration;
    int n_calibration;
    struct store_webhook_event *webhook_events;
    int n_webhook_events;
};

/* Empties w, keeping any memory it holds. */
void store_writes_reset(struct store_writes *w);

/* Frees what w holds; w itself is the caller's. NULL is fine. */
void store_writes_free(struct store_writes *w);

#endif
