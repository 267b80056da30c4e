/* sample_prompts.c - a job's own sample prompts (sample_prompts.h). */
#include "core/sample_prompts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/job_hyper.h"

static const char *const roles[] = {"system", "user", "assistant"};

static bool fail(char *param, size_t pcap, const char *p, char *msg, size_t mcap, const char *m)
{
    snprintf(param, pcap, "%s", p);
    snprintf(msg, mcap, "%s", m);
    return false;
}

static bool known_role(const char *r)
{
    for (size_t i = 0; r && i < sizeof roles / sizeof roles[0]; i++)
        if (strcmp(r, roles[i]) == 0)
            return true;
    return false;
}

/* One conversation, prompt i. */
static bool check_chat(const json_t *c, size_t i, char *param, size_t pcap, char *msg,
                       size_t mcap)
{
    char p[64];
    size_t n = json_array_size(c);
    snprintf(p, sizeof p, "sample_prompts[%zu]", i);
    if (n < 1 || n > SAMPLE_PROMPT_MAX_MESSAGES) {
        snprintf(param, pcap, "%s", p);
        snprintf(msg, mcap, "%s must hold 1 to %d messages.", p, SAMPLE_PROMPT_MAX_MESSAGES);
        return false;
    }
    for (size_t k = 0; k < n; k++) {
        const json_t *m = json_array_get(c, k);
        snprintf(p, sizeof p, "sample_prompts[%zu][%zu]", i, k);
        if (!json_is_object(m))
            return fail(param, pcap, p, msg, mcap,
                        "A message must be an object {role, content}.");
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!known_role(role)) {
            snprintf(param, pcap, "%s.role", p);
            snprintf(msg, mcap, "%s.role must be \"system\", \"user\" or \"assistant\".", p);
            return false;
        }
        const json_t *content = json_object_get(m, "content");
        if (!json_is_string(content) || json_string_length(content) == 0) {
            snprintf(param, pcap, "%s.content", p);
            snprintf(msg, mcap, "%s.content must be a non-empty string.", p);
            return false;
        }
        if (k == n - 1 && strcmp(role, "user") != 0) {
            snprintf(param, pcap, "%s.role", p);
            snprintf(msg, mcap,
                     "The last message of sample_prompts[%zu] must be the user's: the model "
                     "answers it.", i);
            return false;
        }
    }
    return true;
}

bool sample_prompts_check(const json_t *v, char *param, size_t pcap, char *msg, size_t mcap)
{
    if (!v || json_is_null(v))
        return true;
    if (!json_is_array(v))
        return fail(param, pcap, "sample_prompts", msg, mcap,
                    "sample_prompts must be a list of prompts: strings, or lists of messages "
                    "[{role, content}].");
    size_t n = json_array_size(v);
    if (n < 1 || n > SAMPLE_PROMPTS_MAX) {
        snprintf(param, pcap, "sample_prompts");
        snprintf(msg, mcap, "sample_prompts must hold 1 to %d prompts (it has %zu).",
                 SAMPLE_PROMPTS_MAX, n);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *p = json_array_get(v, i);
        char at[32];
        snprintf(at, sizeof at, "sample_prompts[%zu]", i);
        if (json_is_array(p)) {
            if (!check_chat(p, i, param, pcap, msg, mcap))
                return false;
        } else if (!json_is_string(p)) {
            snprintf(param, pcap, "%s", at);
            snprintf(msg, mcap, "%s must be a string or a list of messages [{role, content}].",
                     at);
            return false;
        }
        size_t bytes = sample_prompt_bytes(p);
        if (bytes == 0 || bytes > SAMPLE_PROMPT_MAX_BYTES) {
            snprintf(param, pcap, "%s", at);
            snprintf(msg, mcap, "%s must have 1 to %d bytes of text (it has %zu).", at,
                     SAMPLE_PROMPT_MAX_BYTES, bytes);
            return false;
        }
    }
    return true;
}

json_t *sample_prompts_from_hyper(const char *hyper)
{
    json_t *o = hyper && hyper[0] ? json_loads(hyper, 0, NULL) : NULL;
    json_t *v = json_object_get(o, "sample_prompts");
    char param[64], msg[160];
    json_t *out = json_is_array(v) && sample_prompts_check(v, param, sizeof param, msg, sizeof msg)
                      ? json_incref(v)
                      : NULL;
    json_decref(o);
    return out;
}

bool sample_prompts_into_hyper(const json_t *v, char *hyper, size_t cap)
{
    if (!v || json_is_null(v))
        return true;
    return job_hyper_set(hyper, cap, "sample_prompts", json_deep_copy(v));
}

const char *sample_prompt_text(const json_t *p)
{
    if (json_is_string(p))
        return json_string_value(p);
    const json_t *last = json_array_get(p, json_array_size(p) - 1);
    const char *s = json_string_value(json_object_get(last, "content"));
    return s ? s : "";
}

size_t sample_prompt_bytes(const json_t *p)
{
    if (json_is_string(p))
        return json_string_length(p);
    size_t n = 0;
    for (size_t k = 0; k < json_array_size(p); k++)
        n += json_string_length(json_object_get(json_array_get(p, k), "content"));
    return n;
}
