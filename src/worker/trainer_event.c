/* trainer_event.c - parsing and checking a trainer's stdout lines. */
#include "worker/trainer_event.h"

#include <stdio.h>
#include <string.h>

static const char *const kind_names[] = {
    [TEV_STARTED] = "started",   [TEV_LOG] = "log",   [TEV_STEP] = "step",
    [TEV_MEMORY] = "memory",     [TEV_CHECKPOINT] = "checkpoint",
    [TEV_DONE] = "done",         [TEV_ERROR] = "error", [TEV_OTHER] = "other",
};

const char *trainer_event_kind_name(enum trainer_event_kind k)
{
    if ((int)k < 0 || k > TEV_OTHER)
        return "other";
    return kind_names[k];
}

static void copy_line(char *dst, size_t cap, const char *src)
{
    size_t n = 0;
    /* One line only: a user-facing message never carries a newline. */
    while (src[n] && src[n] != '\n' && src[n] != '\r' && n + 1 < cap)
        n++;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

int trainer_event_parse(const char *line, size_t len, struct trainer_event *ev, char *err,
                        size_t errcap)
{
    memset(ev, 0, sizeof *ev);
    ev->step = -1;
    if (len > TRAINER_EVENT_MAX_LINE) {
        snprintf(err, errcap, "event line too long (%zu bytes)", len);
        return -1;
    }
    json_error_t jerr;
    json_t *obj = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!obj) {
        snprintf(err, errcap, "not JSON: %s", jerr.text);
        return -1;
    }
    const char *name = json_string_value(json_object_get(obj, "event"));
    if (!json_is_object(obj) || !name) {
        snprintf(err, errcap, "not an event: no \"event\" string");
        json_decref(obj);
        return -1;
    }
    ev->kind = TEV_OTHER;
    for (int k = 0; k < TEV_OTHER; k++)
        if (strcmp(name, kind_names[k]) == 0)
            ev->kind = (enum trainer_event_kind)k;
    json_t *step = json_object_get(obj, "step");
    if (json_is_integer(step) && json_integer_value(step) >= 0)
        ev->step = (long)json_integer_value(step);
    const char *text = json_string_value(json_object_get(obj, "line"));
    if (ev->kind == TEV_ERROR) {
        const char *kind = json_string_value(json_object_get(obj, "kind"));
        if (!kind || (strcmp(kind, "user") != 0 && strcmp(kind, "internal") != 0)) {
            snprintf(err, errcap, "error event without kind \"user\" or \"internal\"");
            json_decref(obj);
            return -1;
        }
        snprintf(ev->error_kind, sizeof ev->error_kind, "%s", kind);
        copy_line(ev->line, sizeof ev->line, text ? text : "");
    } else if (ev->kind == TEV_LOG) {
        if (!text) {
            snprintf(err, errcap, "log event without \"line\"");
            json_decref(obj);
            return -1;
        }
        copy_line(ev->line, sizeof ev->line, text);
    }
    ev->obj = obj;
    return 0;
}

void trainer_event_free(struct trainer_event *ev)
{
    if (ev && ev->obj) {
        json_decref(ev->obj);
        ev->obj = NULL;
    }
}
