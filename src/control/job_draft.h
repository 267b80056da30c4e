/* job_draft.h - from a job's request (what the body of POST
 * /v1/fine_tuning/jobs and /v1/fine_tuning/estimates says, checked as JSON
 * by api/job_request.c) to the draft that control_job_create and
 * control_job_estimate take (control/jobs.h): the model resolved, the data
 * sets looked up, the "auto" hyper-parameters chosen, the context, the
 * W&B key's presence and what the estimate reads.
 *
 * One request may be wrong in several ways; the answer names the first
 * check it fails, in one fixed order that mixes checks of the JSON alone
 * with checks that need the model, the files or the account. The request
 * carries the first JSON error with its place in that order
 * (enum job_check_at), and control_job_draft answers it when no check of
 * its own, earlier in the order, fails first.
 */
#ifndef ALALLO_CONTROL_JOB_DRAFT_H
#define ALALLO_CONTROL_JOB_DRAFT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "control/control.h"
#include "control/jobs.h"
#include "core/integrations.h"
#include "core/job_hyper.h"

/* The order of a request's checks: JSON (J) and control's (C). */
enum job_check_at {
    JOB_AT_NONE = 0,
    JOB_AT_FIELDS,         /* J: the string fields, model and training_file given */
    JOB_AT_MODEL,          /* C: model resolved (404 "model")                     */
    JOB_AT_FILES,          /* C: training_file, then validation_file (404)        */
    JOB_AT_HYPER,          /* J: method, hyperparameters, epochs, batch, rate     */
    JOB_AT_SEQ,            /* C: max_seq_len within the model's context           */
    JOB_AT_MORE_HYPER,     /* J: the other hyper-parameters and their combinations */
    JOB_AT_HELD_OUT,       /* C: validation_split against the file's examples     */
    JOB_AT_FORMAT,         /* C: the file's format against the method             */
    JOB_AT_SETTINGS,       /* J: suffix, name, precision, goal, finish_by, adapter, seed, metadata */
    JOB_AT_CONTEXT,        /* C: finish_by in the future, the default context, the hyper object's size */
    JOB_AT_INTEGRATIONS,   /* J: integrations                                    */
    JOB_AT_WANDB_KEY,      /* C: the account's W&B key, the hyper object's size   */
    JOB_AT_SAMPLE_PROMPTS, /* J: sample_prompts                                   */
    JOB_AT_SAMPLE_SIZE,    /* C: sample_prompts within the hyper object           */
    JOB_AT_MAX_STEPS,      /* J: max_steps                                        */
    JOB_AT_EXAMPLES,       /* C: some steps to train                              */
};

/* A 400 or 404 naming a field: code (ERR_INVALID, ERR_NOT_FOUND, or the
 * store's error), the field (param, "" for none) and the message. */
struct field_error {
    enum job_check_at at; /* JOB_AT_NONE: no error */
    enum alallo_err code;
    char param[80];
    char message[512];
};

/* A job's request as its JSON says it, checked as JSON only. Strings are
 * borrowed from the body, which must outlive the request; NULL when
 * absent. 0 in epochs, batch and lr, and seq_given false: "auto". */
struct job_request {
    const char *model, *training_file, *validation_file;
    const char *suffix, *name, *precision, *goal, *adapter;
    bool dpo;                   /* method.type "dpo" */
    double epochs, batch, lr;
    bool seq_given;             /* max_seq_len given, not "auto" ...  */
    bool seq_integer;           /* ... as an integer ...              */
    double seq;                 /* ... of this value (checked in control
                                   against the model's context)        */
    struct job_hyper more;      /* the others; max_seq_len 0          */
    bool seed_given;
    int64_t seed;
    char metadata[STORE_JSON_MAX]; /* compact JSON object, or "" */
    struct job_wandb wandb;
    const json_t *sample_prompts; /* borrowed; NULL or [] for none */
    bool max_steps_given;
    long max_steps;
    int64_t finish_by;          /* the goal finish_by's deadline, Unix
                                   seconds (checked against the clock in
                                   control); 0 when absent              */
    struct field_error err;     /* the first JSON check failed, if any */
};

/* Makes the draft of rq for `account` into *out (zeroed first). False with
 * *err set (the first check failed, rq->err included) on a bad request;
 * the caller answers it as a 400/404 naming err->param. */
bool control_job_draft(struct control *ctl, const char *account, const struct job_request *rq,
                       struct job_draft *out /* OUT */, struct field_error *err /* OUT */);

#endif
