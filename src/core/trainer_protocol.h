/* trainer_protocol.h - the words the trainer, the worker and the control
 * layer share (docs/trainer-protocol.md and docs/worker-protocol.md): the
 * trainer's event names, its error kinds and exit codes, and the stop words
 * a worker acts on. Each enum has one name table here; text on the wire or
 * in the store is converted with these functions at the edge and nowhere
 * else. Pure: no I/O, no allocation.
 */
#ifndef ALALLO_CORE_TRAINER_PROTOCOL_H
#define ALALLO_CORE_TRAINER_PROTOCOL_H

#include <stdbool.h>

/* Exit codes of `alallo train` (docs/trainer-protocol.md, "Exit status").
 * Any other code, or a signal, is a crash. */
#define TPROTO_EXIT_DONE 0       /* trained to max_steps; `done` was sent        */
#define TPROTO_EXIT_INTERNAL 1   /* an internal error; `error` kind internal      */
#define TPROTO_EXIT_USER_ERROR 3 /* bad data or settings; `error` kind user sent  */
#define TPROTO_EXIT_STOPPED 4    /* stopped on request after a checkpoint         */

/* The value of "event" in a trainer's stdout line. */
enum tproto_event {
    TPROTO_EVENT_STARTED = 0,
    TPROTO_EVENT_LOG,
    TPROTO_EVENT_STEP,
    TPROTO_EVENT_MEMORY,
    TPROTO_EVENT_CHECKPOINT,
    TPROTO_EVENT_DONE,
    TPROTO_EVENT_ERROR,
    TPROTO_EVENT_SAMPLE, /* a prompt's greedy answer at a step (docs/trainer-protocol.md) */
    TPROTO_EVENT_COUNT
};

/* "started", "log", ...; NULL for an out-of-range value. */
const char *tproto_event_name(enum tproto_event e);
/* False when `name` is NULL or not one of the eight. */
bool tproto_event_parse(const char *name, enum tproto_event *out /* OUT */);

/* The metrics a `step` event may carry beside `loss`, and a `checkpoint`
 * event in its `metrics` object, named as OpenAI names them (docs/api.md,
 * "Metrics"). The order is the results file's column order. */
enum tproto_metric {
    TPROTO_METRIC_TRAIN_LOSS = 0,      /* "train_loss": the step's batch        */
    TPROTO_METRIC_TRAIN_ACCURACY,      /* "train_mean_token_accuracy"           */
    TPROTO_METRIC_VALID_LOSS,          /* "valid_loss": one validation batch    */
    TPROTO_METRIC_VALID_ACCURACY,      /* "valid_mean_token_accuracy"           */
    TPROTO_METRIC_FULL_VALID_LOSS,     /* "full_valid_loss": the whole set, at an epoch's end */
    TPROTO_METRIC_FULL_VALID_ACCURACY, /* "full_valid_mean_token_accuracy"      */
    /* reinforcement fine-tuning (docs/rft.md) */
    TPROTO_METRIC_TRAIN_REWARD,        /* "train_reward_mean": the step's answers */
    TPROTO_METRIC_VALID_REWARD,        /* "valid_reward_mean": at eval_interval   */
    TPROTO_METRIC_COUNT
};

/* "train_loss", ...; NULL for an out-of-range value. */
const char *tproto_metric_name(enum tproto_metric m);

/* `kind` of an `error` event, and `error_kind` of a finish. */
enum tproto_error_kind {
    TPROTO_ERROR_NONE = 0, /* no error event was sent (null on the wire) */
    TPROTO_ERROR_USER,     /* "user": the data or the settings            */
    TPROTO_ERROR_INTERNAL, /* "internal": alallo's side                   */
    TPROTO_ERROR_KIND_COUNT
};

/* "user" or "internal"; NULL for TPROTO_ERROR_NONE and out-of-range values. */
const char *tproto_error_kind_name(enum tproto_error_kind k);
/* Parses "user" or "internal"; false otherwise (NULL included). */
bool tproto_error_kind_parse(const char *name, enum tproto_error_kind *out /* OUT */);

/* What a worker must do with its trainer (`stop` in the server's answers),
 * and what it acted on (`stop` of a finish). Both stops send SIGTERM; they
 * differ in what becomes of the job. */
enum tproto_stop {
    TPROTO_STOP_NONE = 0, /* go on (null on the wire)                          */
    TPROTO_STOP_CANCEL,   /* "cancel": the job ends (cancel, limit, fenced)    */
    TPROTO_STOP_MOVE,     /* "move": the job continues elsewhere from the checkpoint */
    TPROTO_STOP_COUNT
};

/* "cancel" or "move"; NULL for TPROTO_STOP_NONE and out-of-range values. */
const char *tproto_stop_name(enum tproto_stop s);
/* Parses "cancel" or "move"; false otherwise (NULL included). */
bool tproto_stop_parse(const char *name, enum tproto_stop *out /* OUT */);

#endif
