/* trainer_protocol.c - the name tables of the trainer protocol. */
#include "core/trainer_protocol.h"

#include <string.h>

static const char *const event_names[TPROTO_EVENT_COUNT] = {
    [TPROTO_EVENT_STARTED] = "started",       [TPROTO_EVENT_LOG] = "log",
    [TPROTO_EVENT_STEP] = "step",             [TPROTO_EVENT_MEMORY] = "memory",
    [TPROTO_EVENT_CHECKPOINT] = "checkpoint", [TPROTO_EVENT_DONE] = "done",
    [TPROTO_EVENT_ERROR] = "error",           [TPROTO_EVENT_SAMPLE] = "sample",
};

static const char *const metric_names[TPROTO_METRIC_COUNT] = {
    [TPROTO_METRIC_TRAIN_LOSS] = "train_loss",
    [TPROTO_METRIC_TRAIN_ACCURACY] = "train_mean_token_accuracy",
    [TPROTO_METRIC_VALID_LOSS] = "valid_loss",
    [TPROTO_METRIC_VALID_ACCURACY] = "valid_mean_token_accuracy",
    [TPROTO_METRIC_FULL_VALID_LOSS] = "full_valid_loss",
    [TPROTO_METRIC_FULL_VALID_ACCURACY] = "full_valid_mean_token_accuracy",
    [TPROTO_METRIC_TRAIN_REWARD] = "train_reward_mean",
    [TPROTO_METRIC_VALID_REWARD] = "valid_reward_mean",
};

const char *tproto_metric_name(enum tproto_metric m)
{
    return (int)m >= 0 && m < TPROTO_METRIC_COUNT ? metric_names[m] : NULL;
}

static const char *const error_kind_names[TPROTO_ERROR_KIND_COUNT] = {
    [TPROTO_ERROR_NONE] = NULL,
    [TPROTO_ERROR_USER] = "user",
    [TPROTO_ERROR_INTERNAL] = "internal",
};

static const char *const stop_names[TPROTO_STOP_COUNT] = {
    [TPROTO_STOP_NONE] = NULL,
    [TPROTO_STOP_CANCEL] = "cancel",
    [TPROTO_STOP_MOVE] = "move",
};

/* The index of `name` in names[0..n), or -1. NULL entries never match. */
static int find(const char *const *names, int n, const char *name)
{
    if (!name)
        return -1;
    for (int i = 0; i < n; i++)
        if (names[i] && strcmp(names[i], name) == 0)
            return i;
    return -1;
}

const char *tproto_event_name(enum tproto_event e)
{
    return (int)e >= 0 && e < TPROTO_EVENT_COUNT ? event_names[e] : NULL;
}

bool tproto_event_parse(const char *name, enum tproto_event *out)
{
    int i = find(event_names, TPROTO_EVENT_COUNT, name);
    if (i < 0)
        return false;
    *out = (enum tproto_event)i;
    return true;
}

const char *tproto_error_kind_name(enum tproto_error_kind k)
{
    return (int)k >= 0 && k < TPROTO_ERROR_KIND_COUNT ? error_kind_names[k] : NULL;
}

bool tproto_error_kind_parse(const char *name, enum tproto_error_kind *out)
{
    int i = find(error_kind_names, TPROTO_ERROR_KIND_COUNT, name);
    if (i < 0)
        return false;
    *out = (enum tproto_error_kind)i;
    return true;
}

const char *tproto_stop_name(enum tproto_stop s)
{
    return (int)s >= 0 && s < TPROTO_STOP_COUNT ? stop_names[s] : NULL;
}

bool tproto_stop_parse(const char *name, enum tproto_stop *out)
{
    int i = find(stop_names, TPROTO_STOP_COUNT, name);
    if (i < 0)
        return false;
    *out = (enum tproto_stop)i;
    return true;
}
