/* trainer_event.h - one line of a trainer's stdout (docs/trainer-protocol.md,
 * "Events"), parsed and checked before the worker relays it.
 *
 * The worker relays each valid event unchanged to the server; it reads only
 * what it needs itself: the kind, the step, and an error's kind and line.
 */
#ifndef ALALLO_WORKER_TRAINER_EVENT_H
#define ALALLO_WORKER_TRAINER_EVENT_H

#include <jansson.h>
#include <stddef.h>

#include "core/trainer_protocol.h"

/* A line longer than this is not an event (the trainer's longest, `error`,
 * carries one log line). */
#define TRAINER_EVENT_MAX_LINE (64 * 1024)

/* The protocol's events (core/trainer_protocol.h), and one more. */
enum trainer_event_kind {
    TEV_STARTED = TPROTO_EVENT_STARTED,
    TEV_LOG = TPROTO_EVENT_LOG,
    TEV_STEP = TPROTO_EVENT_STEP,
    TEV_MEMORY = TPROTO_EVENT_MEMORY,
    TEV_CHECKPOINT = TPROTO_EVENT_CHECKPOINT,
    TEV_DONE = TPROTO_EVENT_DONE,
    TEV_ERROR = TPROTO_EVENT_ERROR,
    TEV_OTHER = TPROTO_EVENT_COUNT, /* a kind this worker does not know: relayed as it is */
};

struct trainer_event {
    enum trainer_event_kind kind;
    json_t *obj;           /* the whole event; owned by the event             */
    long step;             /* `step` when present, else -1                    */
    enum tproto_error_kind error_kind; /* TEV_ERROR: user or internal; else NONE */
    char line[1024];       /* TEV_ERROR and TEV_LOG: the line, cut to fit     */
};

/* Parses one line (without its newline) of `len` bytes. Returns 0 with *ev
 * filled (free it with trainer_event_free), or -1 with a reason in err when
 * the line is not a JSON object with a string "event", or is too long, or a
 * known event lacks a field the worker needs (`error` without kind "user" or
 * "internal"). */
int trainer_event_parse(const char *line, size_t len, struct trainer_event *ev /* OUT */,
                        char *err, size_t errcap);

/* The kind's name in the protocol ("started", ...); "other" for TEV_OTHER. */
const char *trainer_event_kind_name(enum trainer_event_kind k);

/* Releases ev->obj. Accepts an event that was never parsed (obj NULL). */
void trainer_event_free(struct trainer_event *ev);

#endif
