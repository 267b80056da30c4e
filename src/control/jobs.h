/* jobs.h - creating a job: the estimate of a draft (time and price as a
 * range, the plan, the wait in the queue), the nominal plan and the ledger
 * it starts with, and the durable row. The API validates the request and
 * fills the draft (api/job_request.h); everything from the estimate on is
 * decided here. Cancels are lifecycle_cancel (lifecycle.h).
 */
#ifndef ALALLO_CONTROL_JOBS_H
#define ALALLO_CONTROL_JOBS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "control/catalog.h"
#include "control/control.h"
#include "control/sched_link.h"
#include "store/store.h"

#define CONTROL_CURRENCY "USD"         /* the currency of every price */
#define CONTROL_VALID_EVERY_STEPS 10   /* the trainer's default valid_every_steps */

struct job_draft {
    struct store_job job; /* no id, status or estimate yet */
    struct catalog_model model;
    struct store_file file;
    struct estimate est; /* the real estimator's (src/sched/estimator.h) */
    double now;          /* when it was estimated, seconds */
    double model_factor; /* the shape's speed factor the estimate used */
    double startup_factor; /* the shape's fixed-cost factor it used     */
    /* validation: one pass over the validation set (a file, or the share
     * of the training file held out); 0 none */
    double valid_tokens;
    long valid_examples;
    /* sample answers at each epoch's end and before the first step: the
     * prompts answered (the job's own, or the first validation prompts),
     * and their tokens together; 0 none */
    int sample_prompts;
    double sample_tokens;
    /* reinforcement fine-tuning: valid_tokens and valid_examples are the
     * prompts its validation rewards answer (the validation file, or the
     * first training prompts), and rft_grade_tokens what grading one answer
     * costs in training tokens (docs/estimator.md, "Reinforcement
     * fine-tuning: rollouts, grading and updates") */
    bool rft;
    double rft_grade_tokens;
};

/* The model `id` a job of `account` may train from: a base model of the
 * catalog, or a fine-tuned model (ft:...) of the same account. False when
 * unknown. */
bool control_model_find(struct control *ctl, const char *account, const char *id,
                        struct catalog_model *m /* OUT */);

/* Tokens in one epoch of a data set with `examples` examples and
 * `text_bytes` bytes of text, each example cut to seq_len: about 4 bytes
 * of English per token plus the template's tokens. */
int64_t control_job_tokens_per_epoch(long examples, int64_t text_bytes, int seq_len);

/* Computes r->est from the model, the data, the queue and the fleet now.
 * ERR_INVALID (reason in why) for a shape the planner refuses. */
enum alallo_err control_job_estimate(struct control *ctl, struct job_draft *r, char *why,
                                     size_t whycap);

/* The estimate object of SPEC §4: time, price, plan, message. */
json_t *control_estimate_json(const struct estimate *e);

/* Fills the draft's estimate fields, plan and ledger from r->est. */
void control_job_apply_estimate(struct job_draft *r);

/* Whether job j has no price range yet: it was created while no capacity
 * (no worker, or none with a known speed) was known, so its estimate says
 * why there is none and its ledger has not started. Such a job is priced
 * when it is first placed, never run uncapped or free. */
bool control_job_unpriced(const struct store_job *j);

/* The estimate of unpriced job j now that capacity is known, into r (r->job
 * a copy of j). ERR_UNAVAILABLE, with why, while still no capacity with a
 * known speed can run it: the job is not placed then. */
enum alallo_err control_job_estimate_placed(struct control *ctl, const struct store_job *j,
                                            struct job_draft *r, char *why, size_t whycap);

/* Gives job j (inside its update) the estimate of r: its ranges counted
 * from its creation, its plan, and its ledger with the price's upper end
 * as its cap. False (j unchanged) when j is priced already. */
bool control_job_price_placed(struct store_job *j, struct job_draft *r);

/* Estimates the draft and stores it as a new job: queued, or failed at once
 * (at no cost) when no known capacity can ever run it. r->job gets the job
 * as stored. ERR_INVALID with a reason in why for a shape the planner
 * refuses; ERR_NOT_FOUND with "No such file: ID." in why when a data set
 * was deleted before the job could be stored; a store error otherwise. */
enum alallo_err control_job_create(struct control *ctl, struct job_draft *r, char *why,
                                   size_t whycap);

#endif
