/* context.h - the context (max_seq_len) a job trains with when its request
 * leaves it out: the model's own context, capped by what the planner fits
 * on the workers the service knows (docs/api.md, "Hyper-parameters").
 */
#ifndef ALALLO_CONTROL_CONTEXT_H
#define ALALLO_CONTROL_CONTEXT_H

#include "control/catalog.h"
#include "control/control.h"
#include "store/store.h"

/* The shortest context chosen by default (or the model's, if shorter). */
#define CONTEXT_MIN_DEFAULT 256

/* The model's context (max_positions; JOB_HYPER_MAX_SEQ when unknown, at
 * most that), halved while job j with that context would need more memory
 * than any known worker offers (the fleet as estimates see it,
 * sched_link_fleet), down to CONTEXT_MIN_DEFAULT (no worker known at all:
 * the model's context). j's precision,
 * adapter, batch size and hyper-parameters count; its max_seq_len does
 * not. */
int control_default_context(struct control *ctl, const struct catalog_model *m,
                            const struct store_job *j);

/* The model's context as the API bounds max_seq_len by. */
int control_model_context(const struct catalog_model *m);

#endif
