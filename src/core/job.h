/* job.h - the job model as users see it: statuses, messages, transitions,
 * and the text forms of durations. Pure: no I/O, no allocation.
 *
 * The words here are fixed by the help page users read
 * (job-status-and-time-estimates): every status and message string below is
 * a requirement, word for word. See docs/lifecycle.md.
 */
#ifndef ALALLO_CORE_JOB_H
#define ALALLO_CORE_JOB_H

#include <stdbool.h>
#include <stddef.h>

enum job_status {
    JOB_QUEUED = 0,
    JOB_RUNNING,
    JOB_RESCHEDULING,
    JOB_CANCELLING,
    JOB_CANCELLED,
    JOB_SUCCEEDED,
    JOB_FAILED,
    JOB_STATUS_COUNT
};

/* The fixed messages. MSG_TRAINING_FAILED is a prefix: the full message is
 * "Training failed: " followed by the last relevant line of the log. */
enum job_message {
    MSG_NONE = 0,
    MSG_STARTING,
    MSG_WAITING_FOR_CAPACITY,
    MSG_RESCHEDULING,
    MSG_NOT_AVAILABLE,
    MSG_NOT_AVAILABLE_LOWER_PRECISION,
    MSG_STOPPED_BUDGET,
    MSG_STOPPED_TIME_LIMIT,
    MSG_TRAINING_FAILED,
    MSG_FAILED_INTERNAL,
    JOB_MESSAGE_COUNT
};

/* "queued", "running", "re-scheduling", ... Never NULL for a valid status;
 * NULL for an out-of-range value. */
const char *job_status_name(enum job_status s);

/* Parses a status name; returns false if `name` is not one of the seven. */
bool job_status_parse(const char *name, enum job_status *out /* OUT */);

/* The message text, e.g. "Waiting for capacity"; "" for MSG_NONE and
 * "Training failed: " for MSG_TRAINING_FAILED. NULL for out-of-range. */
const char *job_message_text(enum job_message m);

/* True when a job ends in `s`: cancelled, succeeded, failed. */
bool job_status_is_terminal(enum job_status s);

/* True when the lifecycle allows moving from `from` to `to`
 * (docs/lifecycle.md has the diagram). Staying in the same status is
 * allowed only for queued, running and re-scheduling (a message change). */
bool job_transition_allowed(enum job_status from, enum job_status to);

/* True when `m` may accompany status `s` (e.g. MSG_STARTING only with
 * queued, MSG_STOPPED_BUDGET only with failed). */
bool job_message_allowed(enum job_status s, enum job_message m);

/* Whether a job that ended with (s, m) costs nothing: failed (every failed
 * message, both Stopped: ones included) and cancelled-while-queued are free;
 * the rest is decided by the ledger. */
bool job_outcome_is_free(enum job_status s, enum job_message m);

/* Writes "Training failed: <line>" into buf, trimming <line> to one line
 * (up to the first newline) and truncating to fit. Returns buf. */
char *job_training_failed_message(char *buf, size_t cap, const char *line);

/* Text of a duration, time-left rule: under 1.5 hours in whole minutes
 * ("40 min"), otherwise hours with one decimal ("2.4 h"). Minutes round half
 * up and are at least 1. Returns buf; "" if cap is too small. */
char *job_time_left_text(char *buf, size_t cap, double seconds);

/* Text of one end of an estimate: under 1 hour in whole minutes, otherwise
 * hours with one decimal. */
char *job_estimate_end_text(char *buf, size_t cap, double seconds);

/* A range "A to B" using the estimate rule for each end ("40 min to 1.3 h");
 * when both ends read the same, once ("40 min"). A range whose upper end is
 * under 10 minutes reads in whole minutes rounded outward (low end down,
 * high end up), and one whose low end is under a minute as "under B":
 * 15..54 s is "under 1 min", 61..119 s "1 min to 2 min" (docs/estimator.md).
 * Both range functions share this short-range rule. */
char *job_estimate_range_text(char *buf, size_t cap, double low_s, double high_s);

/* The latest deadline the goal finish_by takes: 9999-12-31 23:59:59 UTC. */
#define JOB_FINISH_BY_MAX 253402300799LL

/* A moment (Unix seconds) as "2026-12-03 18:00 UTC", to the minute:
 * rounded down, or up when `up` (an earliest finish is never shown earlier
 * than it is). Returns buf; "" if cap is too small or s is not finite. */
char *job_moment_text(char *buf, size_t cap, double s, bool up);

/* A range "A to B" using the time-left rule for each end (and the
 * short-range rule above). */
char *job_time_left_range_text(char *buf, size_t cap, double low_s, double high_s);

/* A range's ends as the API shows them, in seconds to a tenth, rounded
 * outward: the low end down, the high end up (4.31..5.22 s is 4.3..5.3).
 * Not negative; a non-finite end reads 0. */
double job_range_low_s(double low_s);
double job_range_high_s(double high_s);

/* Progress percent 0..100 from steps; a succeeded job shows 100.
 * max_steps <= 0 reads as 0%. */
int job_progress_percent(long steps_done, long max_steps, enum job_status s);

/* max_steps = ceil(examples * epochs / batch_size); 0 on bad input. */
long job_max_steps(long examples, int epochs, int batch_size);

/* Whether optimizer step `step` (from 1) ends an epoch: its batch takes the
 * data set's last example, as the trainer walks the examples in batches
 * that run on from one epoch into the next (the trainer checkpoints there,
 * docs/trainer.md). False on bad input. */
bool job_step_ends_epoch(long examples, int batch_size, long step);

#endif
