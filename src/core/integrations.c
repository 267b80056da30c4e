/* integrations.c - a job's experiment-tracker integrations (integrations.h). */
#include "core/integrations.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/job_hyper.h"

static bool fail(char *param, size_t pcap, const char *p, char *msg, size_t mcap, const char *m)
{
    snprintf(param, pcap, "%s", p);
    snprintf(msg, mcap, "%s", m);
    return false;
}

bool wandb_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n >= WANDB_FIELD_MAX || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return false;
    }
    return true;
}

bool wandb_display_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n >= WANDB_FIELD_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return false;
        /* C1 controls, U+0080..U+009F, are 0xC2 0x80..0x9F in UTF-8 */
        if (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
            (unsigned char)s[i + 1] <= 0x9f)
            return false;
    }
    return true;
}

/* A string field checked by `valid` (whose rule `rule` states); absent or
 * null allowed unless `required`. */
static bool field(json_t *o, const char *key, bool required, bool (*valid)(const char *),
                  const char *rule, char *dst, size_t cap, char *param, size_t pcap, char *msg,
                  size_t mcap)
{
    json_t *v = json_object_get(o, key);
    char p[64];
    snprintf(p, sizeof p, "integrations[0].wandb.%s", key);
    if (!v || json_is_null(v)) {
        if (required)
            return fail(param, pcap, p, msg, mcap, "W&B needs a project to log the run in.");
        dst[0] = 0;
        return true;
    }
    const char *s = json_is_string(v) ? json_string_value(v) : "";
    size_t n = strlen(s);
    if (n >= cap || !valid(s)) {
        snprintf(param, pcap, "%s", p);
        snprintf(msg, mcap, "%s must be %s.", p, rule);
        return false;
    }
    memcpy(dst, s, n + 1);
    return true;
}

bool integrations_parse(json_t *v, struct job_wandb *out, char *param, size_t pcap, char *msg,
                        size_t mcap)
{
    memset(out, 0, sizeof *out);
    if (!v || json_is_null(v))
        return true;
    if (!json_is_array(v))
        return fail(param, pcap, "integrations", msg, mcap, "integrations must be an array.");
    if (json_array_size(v) == 0)
        return true;
    if (json_array_size(v) > 1)
        return fail(param, pcap, "integrations", msg, mcap,
                    "integrations takes one entry (type \"wandb\").");
    json_t *it = json_array_get(v, 0);
    json_t *type = json_object_get(it, "type");
    if (!json_is_object(it) || !json_is_string(type) ||
        strcmp(json_string_value(type), "wandb") != 0)
        return fail(param, pcap, "integrations[0].type", msg, mcap,
                    "The only integration type is \"wandb\".");
    json_t *w = json_object_get(it, "wandb");
    if (!json_is_object(w))
        return fail(param, pcap, "integrations[0].wandb", msg, mcap,
                    "integrations[0].wandb must be an object with at least a project.");
    static const char NAME_RULE[] =
        "1 to 128 letters, digits, '-', '_' or '.' (not \".\" or \"..\" alone)";
    static const char TEXT_RULE[] = "a string of 1 to 128 bytes without control characters";
    if (!field(w, "project", true, wandb_name_valid, NAME_RULE, out->project, sizeof out->project,
               param, pcap, msg, mcap) ||
        !field(w, "name", false, wandb_display_name_valid, TEXT_RULE, out->name, sizeof out->name,
               param, pcap, msg, mcap) ||
        !field(w, "entity", false, wandb_name_valid, NAME_RULE, out->entity, sizeof out->entity,
               param, pcap, msg, mcap))
        return false;
    json_t *tags = json_object_get(w, "tags");
    if (tags && !json_is_null(tags)) {
        if (!json_is_array(tags) || json_array_size(tags) > WANDB_TAGS_MAX)
            return fail(param, pcap, "integrations[0].wandb.tags", msg, mcap,
                        "tags must be an array of at most 5 strings.");
        for (size_t i = 0; i < json_array_size(tags); i++) {
            json_t *t = json_array_get(tags, i);
            size_t n = json_is_string(t) ? strlen(json_string_value(t)) : 0;
            if (n < 1 || n >= WANDB_TAG_MAX)
                return fail(param, pcap, "integrations[0].wandb.tags", msg, mcap,
                            "Each tag must be a string of 1 to 64 characters.");
            memcpy(out->tags[out->n_tags++], json_string_value(t), n + 1);
        }
    }
    out->on = true;
    return true;
}

void integrations_from_hyper(const char *hyper, struct job_wandb *out)
{
    memset(out, 0, sizeof *out);
    json_t *o = hyper && hyper[0] ? json_loads(hyper, 0, NULL) : NULL;
    char param[64], msg[128];
    struct job_wandb w;
    if (o && integrations_parse(json_object_get(o, "integrations"), &w, param, sizeof param, msg,
                                sizeof msg))
        *out = w;
    json_decref(o);
}

json_t *integrations_to_json(const struct job_wandb *w)
{
    json_t *a = json_array();
    if (!w->on)
        return a;
    json_t *tags = json_array();
    for (int i = 0; i < w->n_tags; i++)
        json_array_append_new(tags, json_string(w->tags[i]));
    json_t *o = json_object();
    json_object_set_new(o, "project", json_string(w->project));
    json_object_set_new(o, "name", w->name[0] ? json_string(w->name) : json_null());
    json_object_set_new(o, "entity", w->entity[0] ? json_string(w->entity) : json_null());
    json_object_set_new(o, "tags", tags);
    json_array_append_new(a, json_pack("{ss so}", "type", "wandb", "wandb", o));
    return a;
}

bool integrations_into_hyper(const struct job_wandb *w, char *hyper, size_t cap)
{
    if (!w->on)
        return true;
    return job_hyper_set(hyper, cap, "integrations", integrations_to_json(w));
}
