/* trainer_event.c - parsing and checking a trainer's stdout lines. */
#include "worker/trainer_event.h"

#include <stdio.h>
#include <string.h>

const char *trainer_event_kind_name(enum trainer_event_kind k)
{
    const char *name = tproto_event_name((enum tproto_event)k);
    return name ? name : "other";
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
    enum tproto_event known;
    ev->kind = tproto_event_parse(name, &known) ? (enum trainer_event_kind)known : TEV_OTHER;
    json_t *step = json_object_get(obj, "step");
    if (json_is_integer(step) && json_integer_value(step) >= 0)
        ev->step = (long)json_integer_value(step);
    const char *text = json_string_value(json_object_get(obj, "line"));
    if (ev->kind == TEV_ERROR) {
        const char *kind = json_string_value(json_object_get(obj, "kind"));
        if (!tproto_error_kind_parse(kind, &ev->error_kind)) {
            snprintf(err, errcap, "error event without kind \"user\" or \"internal\"");
            json_decref(obj);
            return -1;
        }
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
