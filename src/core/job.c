/* job.c - statuses, messages and time texts of the help page. */
#include "core/job.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *const status_names[JOB_STATUS_COUNT] = {
    "queued", "running", "re-scheduling", "cancelling",
    "cancelled", "succeeded", "failed",
};

static const char *const message_texts[JOB_MESSAGE_COUNT] = {
    "",
    "Starting",
    "Waiting for capacity",
    "Re-scheduling",
    "Not available right now.",
    "Not available right now. Choose a lower precision.",
    "Stopped: the budget was reached",
    "Stopped: the time limit was reached",
    "Training failed: ",
    "Failed. We've been notified and are looking into it.",
};

const char *job_status_name(enum job_status s)
{
    if ((int)s < 0 || s >= JOB_STATUS_COUNT)
        return NULL;
    return status_names[s];
}

bool job_status_parse(const char *name, enum job_status *out)
{
    if (!name)
        return false;
    for (int i = 0; i < JOB_STATUS_COUNT; i++) {
        if (strcmp(name, status_names[i]) == 0) {
            *out = (enum job_status)i;
            return true;
        }
    }
    return false;
}

const char *job_message_text(enum job_message m)
{
    if ((int)m < 0 || m >= JOB_MESSAGE_COUNT)
        return NULL;
    return message_texts[m];
}

bool job_status_is_terminal(enum job_status s)
{
    return s == JOB_CANCELLED || s == JOB_SUCCEEDED || s == JOB_FAILED;
}

/* The moves of docs/lifecycle.md ("What moves a job"), row by row:
 *   queued        -> queued (message), running (started), failed (nothing can
 *                    run it), cancelling (cancel while an attempt holds it),
 *                    cancelled (cancel, nothing holds it)
 *   running       -> running, succeeded (done), failed, re-scheduling (move,
 *                    lost worker), cancelling
 *   re-scheduling -> re-scheduling, running, succeeded (done before
 *                    the move took effect), failed, cancelling, cancelled
 *   cancelling    -> cancelled, succeeded (done before the stop took effect)
 * Nothing leaves cancelled, succeeded or failed. */
bool job_transition_allowed(enum job_status from, enum job_status to)
{
    switch (from) {
    case JOB_QUEUED:
        return to == JOB_QUEUED || to == JOB_RUNNING || to == JOB_FAILED ||
               to == JOB_CANCELLING || to == JOB_CANCELLED;
    case JOB_RUNNING:
        return to == JOB_RUNNING || to == JOB_SUCCEEDED || to == JOB_FAILED ||
               to == JOB_RESCHEDULING || to == JOB_CANCELLING;
    case JOB_RESCHEDULING:
        return to == JOB_RESCHEDULING || to == JOB_RUNNING || to == JOB_SUCCEEDED ||
               to == JOB_FAILED || to == JOB_CANCELLING || to == JOB_CANCELLED;
    case JOB_CANCELLING:
        return to == JOB_CANCELLED || to == JOB_SUCCEEDED;
    default:
        return false;
    }
}

bool job_message_allowed(enum job_status s, enum job_message m)
{
    switch (m) {
    case MSG_NONE:
        return s != JOB_FAILED && s != JOB_RESCHEDULING;
    case MSG_STARTING:
    case MSG_WAITING_FOR_CAPACITY:
        return s == JOB_QUEUED;
    case MSG_RESCHEDULING:
        return s == JOB_RESCHEDULING;
    case MSG_NOT_AVAILABLE:
    case MSG_NOT_AVAILABLE_LOWER_PRECISION:
    case MSG_STOPPED_BUDGET:
    case MSG_STOPPED_TIME_LIMIT:
    case MSG_TRAINING_FAILED:
    case MSG_FAILED_INTERNAL:
        return s == JOB_FAILED;
    default:
        return false;
    }
}

bool job_outcome_is_free(enum job_status s, enum job_message m)
{
    (void)m;
    return s == JOB_FAILED;
}

char *job_training_failed_message(char *buf, size_t cap, const char *line)
{
    if (cap == 0)
        return buf;
    const char *prefix = message_texts[MSG_TRAINING_FAILED];
    size_t plen = strlen(prefix);
    if (cap <= plen) {
        buf[0] = '\0';
        return buf;
    }
    memcpy(buf, prefix, plen);
    size_t n = 0;
    if (line) {
        while (line[n] && line[n] != '\n' && line[n] != '\r' && plen + n + 1 < cap)
            n++;
        memcpy(buf + plen, line, n);
    }
    buf[plen + n] = '\0';
    return buf;
}

/* Whole minutes, half up, at least 1. */
static long whole_minutes(double seconds)
{
    long m = (long)floor(seconds / 60.0 + 0.5);
    return m < 1 ? 1 : m;
}

/* Hours with one decimal, half up, in tenths. */
static long tenths_of_hours(double seconds)
{
    return (long)floor(seconds / 360.0 + 0.5);
}

static char *duration_text(char *buf, size_t cap, double seconds, double minutes_below_s)
{
    if (cap == 0)
        return buf;
    if (!(seconds >= 0)) /* negative or NaN */
        seconds = 0;
    int n;
    if (seconds < minutes_below_s) {
        n = snprintf(buf, cap, "%ld min", whole_minutes(seconds));
    } else {
        long t = tenths_of_hours(seconds);
        n = snprintf(buf, cap, "%ld.%ld h", t / 10, t % 10);
    }
    if (n < 0 || (size_t)n >= cap)
        buf[0] = '\0';
    return buf;
}

char *job_time_left_text(char *buf, size_t cap, double seconds)
{
    return duration_text(buf, cap, seconds, 5400.0);
}

char *job_estimate_end_text(char *buf, size_t cap, double seconds)
{
    return duration_text(buf, cap, seconds, 3600.0);
}

/* Ranges whose upper end is under this read with the short-range rule. */
#define SHORT_RANGE_S 600.0

/* Whole minutes of a short range's end: the low end rounded down, the high
 * end up (a hair of slack so that 120.0000001 s is still 2 min). */
static long minutes_down(double seconds)
{
    return (long)floor(seconds / 60.0 + 1e-9);
}

static long minutes_up(double seconds)
{
    return (long)ceil(seconds / 60.0 - 1e-9);
}

/* A range whose upper end is under SHORT_RANGE_S (10 min): rounded outward,
 * so that two ends that differ by seconds do not read as one point, and a
 * low end under 1 minute reads as "under": 15..54 s is "under 1 min",
 * 30..100 s "under 2 min", 61..119 s "1 min to 2 min", 60..60 s "1 min". */
static int short_range_text(char *buf, size_t cap, double low_s, double high_s)
{
    long hi = minutes_up(high_s);
    if (hi < 1)
        hi = 1;
    if (low_s < 60.0)
        return snprintf(buf, cap, "under %ld min", hi);
    long lo = minutes_down(low_s);
    if (lo < 1)
        lo = 1;
    if (lo >= hi)
        return snprintf(buf, cap, "%ld min", hi);
    return snprintf(buf, cap, "%ld min to %ld min", lo, hi);
}

static char *range_text(char *buf, size_t cap, double low_s, double high_s, double below_s)
{
    char a[32], b[32];
    if (cap == 0)
        return buf;
    if (!(low_s >= 0)) /* negative or NaN */
        low_s = 0;
    if (!(high_s >= low_s))
        high_s = low_s;
    int n;
    if (high_s < SHORT_RANGE_S) {
        n = short_range_text(buf, cap, low_s, high_s);
    } else {
        duration_text(a, sizeof a, low_s, below_s);
        duration_text(b, sizeof b, high_s, below_s);
        n = strcmp(a, b) == 0 ? snprintf(buf, cap, "%s", a)
                              : snprintf(buf, cap, "%s to %s", a, b);
    }
    if (n < 0 || (size_t)n >= cap)
        buf[0] = '\0';
    return buf;
}

char *job_estimate_range_text(char *buf, size_t cap, double low_s, double high_s)
{
    return range_text(buf, cap, low_s, high_s, 3600.0);
}

char *job_time_left_range_text(char *buf, size_t cap, double low_s, double high_s)
{
    return range_text(buf, cap, low_s, high_s, 5400.0);
}

/* Tenths a hair under a whole number of them (4.3 * 10 is 42.99...) count
 * as that number: rounding outward never adds a tenth to an exact end. */
#define TENTH_SLACK 1e-6

double job_range_low_s(double low_s)
{
    if (!(low_s > 0) || !isfinite(low_s))
        return 0;
    return floor(low_s * 10.0 + TENTH_SLACK) / 10.0;
}

double job_range_high_s(double high_s)
{
    if (!(high_s > 0) || !isfinite(high_s))
        return 0;
    return ceil(high_s * 10.0 - TENTH_SLACK) / 10.0;
}

char *job_moment_text(char *buf, size_t cap, double s, bool up)
{
    if (cap)
        buf[0] = '\0';
    if (!isfinite(s) || s < 0 || s > (double)JOB_FINISH_BY_MAX || cap == 0)
        return buf;
    double minute = up ? ceil(s / 60.0) : floor(s / 60.0);
    time_t t = (time_t)(minute * 60.0);
    struct tm tm;
    if (!gmtime_r(&t, &tm) || strftime(buf, cap, "%Y-%m-%d %H:%M UTC", &tm) == 0)
        buf[0] = '\0';
    return buf;
}

int job_progress_percent(long steps_done, long max_steps, enum job_status s)
{
    if (s == JOB_SUCCEEDED)
        return 100;
    if (max_steps <= 0 || steps_done <= 0)
        return 0;
    if (steps_done >= max_steps)
        return 100;
    return (int)(steps_done * 100 / max_steps);
}

long job_max_steps(long examples, int epochs, int batch_size)
{
    if (examples <= 0 || epochs <= 0 || batch_size <= 0)
        return 0;
    long total = examples * (long)epochs;
    return (total + batch_size - 1) / batch_size;
}

bool job_step_ends_epoch(long examples, int batch_size, long step)
{
    if (examples <= 0 || batch_size <= 0 || step <= 0)
        return false;
    /* Examples taken before and after the step; an epoch ends when a
     * multiple of `examples` falls in (before, after]. */
    long before = (step - 1) * (long)batch_size, after = step * (long)batch_size;
    return after / examples > before / examples;
}
