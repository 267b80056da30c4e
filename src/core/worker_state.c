/* worker_state.c - see worker_state.h. */
#include "core/worker_state.h"

#include <string.h>

static const char *const worker_names[WORKER_STATE_COUNT] = {"active", "draining", "lost"};
static const char *const attempt_names[ATTEMPT_STATUS_COUNT] = {"starting", "running", "ended"};
static const char *const engine_names[ENGINE_STATE_COUNT] = {"", "submitting", "pending",
                                                             "running"};

const char *worker_state_name(enum worker_state s)
{
    return (int)s >= 0 && s < WORKER_STATE_COUNT ? worker_names[s] : NULL;
}

bool worker_state_parse(const char *name, enum worker_state *out)
{
    for (int i = 0; name && i < WORKER_STATE_COUNT; i++) {
        if (strcmp(name, worker_names[i]) == 0) {
            *out = (enum worker_state)i;
            return true;
        }
    }
    return false;
}

const char *attempt_status_name(enum attempt_status s)
{
    return (int)s >= 0 && s < ATTEMPT_STATUS_COUNT ? attempt_names[s] : NULL;
}

enum attempt_status attempt_status_of(const char *name)
{
    for (int i = 0; name && i < ATTEMPT_STATUS_COUNT; i++)
        if (strcmp(name, attempt_names[i]) == 0)
            return (enum attempt_status)i;
    return ATTEMPT_ENDED;
}

const char *engine_state_name(enum engine_state s)
{
    return (int)s >= 0 && s < ENGINE_STATE_COUNT ? engine_names[s] : NULL;
}

enum engine_state engine_state_of(const char *name)
{
    for (int i = 1; name && i < ENGINE_STATE_COUNT; i++)
        if (strcmp(name, engine_names[i]) == 0)
            return (enum engine_state)i;
    return ENGINE_STATE_NONE;
}
