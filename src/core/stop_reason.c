/* stop_reason.c - the name table of enum stop_reason. */
#include "core/stop_reason.h"

#include <string.h>

static const char *const names[STOP_REASON_COUNT] = {
    [STOP_REASON_NONE] = "",
    [STOP_REASON_CANCEL] = "cancel",
    [STOP_REASON_MOVE] = "move",
    [STOP_REASON_TIME_LIMIT] = "time_limit",
    [STOP_REASON_BUDGET] = "budget",
    [STOP_REASON_NOT_AVAILABLE] = "not_available",
    [STOP_REASON_NOT_AVAILABLE_LOWER] = "not_available_lower_precision",
};

const char *stop_reason_name(enum stop_reason r)
{
    return (int)r >= 0 && r < STOP_REASON_COUNT ? names[r] : NULL;
}

bool stop_reason_parse(const char *name, enum stop_reason *out)
{
    if (!name)
        name = "";
    for (int i = 0; i < STOP_REASON_COUNT; i++) {
        if (strcmp(name, names[i]) == 0) {
            *out = (enum stop_reason)i;
            return true;
        }
    }
    return false;
}

enum stop_reason stop_reason_of(const char *name)
{
    enum stop_reason r;
    return stop_reason_parse(name, &r) ? r : STOP_REASON_NONE;
}
