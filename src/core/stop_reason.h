/* stop_reason.h - why the control layer asked a job's attempt to stop, as
 * kept in the job (store text `jobs.stop_reason`, "" for none). The reason
 * decides the job's outcome when the attempt ends (docs/lifecycle.md); the
 * worker only learns the stop word it maps to (core/trainer_protocol.h).
 * Pure: no I/O.
 */
#ifndef ALALLO_CORE_STOP_REASON_H
#define ALALLO_CORE_STOP_REASON_H

#include <stdbool.h>

enum stop_reason {
    STOP_REASON_NONE = 0,      /* "": nothing asked                              */
    STOP_REASON_CANCEL,        /* "cancel": the user cancelled                   */
    STOP_REASON_MOVE,          /* "move": memory, drain, spot take-back          */
    STOP_REASON_TIME_LIMIT,    /* "time_limit": past --time-limit                */
    STOP_REASON_BUDGET,        /* "budget": past --budget-multiple               */
    STOP_REASON_NOT_AVAILABLE, /* "not_available": no known worker has the memory */
    STOP_REASON_NOT_AVAILABLE_LOWER, /* "not_available_lower_precision": none has it
                                        at 16-bit, one would at 4-bit */
    STOP_REASON_COUNT
};

/* The stored text; "" for STOP_REASON_NONE, NULL when out of range. */
const char *stop_reason_name(enum stop_reason r);

/* Parses the stored text ("" and NULL read as STOP_REASON_NONE); false
 * for any other text. */
bool stop_reason_parse(const char *name, enum stop_reason *out /* OUT */);

/* The reason named by stored text, STOP_REASON_NONE for text it does not
 * know (a row written by a newer version reads as no stop asked). */
enum stop_reason stop_reason_of(const char *name);

#endif
