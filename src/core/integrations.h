/* integrations.h - a job's experiment-tracker integrations, as OpenAI's API
 * takes them: `integrations: [{type: "wandb", wandb: {project, name,
 * entity, tags}}]` (docs/integrations.md).
 *
 * The API checks the request's array (integrations_parse), the store keeps
 * it inside the job's hyper JSON object under "integrations" (no column of
 * its own), and the job view and the forwarder (control/wandb_forward.h)
 * read it back (integrations_from_hyper). Pure: no I/O.
 */
#ifndef ALALLO_CORE_INTEGRATIONS_H
#define ALALLO_CORE_INTEGRATIONS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define WANDB_FIELD_MAX 129 /* project, name and entity: 1..128 bytes, NUL */
#define WANDB_TAG_MAX 65    /* a tag: 1..64 bytes, NUL */
#define WANDB_TAGS_MAX 5    /* tags of one job */

struct job_wandb {
    bool on;                    /* the job has a W&B integration */
    char project[WANDB_FIELD_MAX];
    char name[WANDB_FIELD_MAX]; /* the run's display name, "" for the job id */
    char entity[WANDB_FIELD_MAX]; /* "" for the key's default entity */
    char tags[WANDB_TAGS_MAX][WANDB_TAG_MAX];
    int n_tags;
};

/* Whether s is a W&B project or entity name as alallo takes it
 * (docs/integrations.md): 1 to 128 ASCII letters, digits, '-', '_' and
 * '.', but not "." or ".." alone. Such a name is one safe URL path segment
 * as it is: no '/', '\\', '#', '?', '%', ':', space or control character. */
bool wandb_name_valid(const char *s);

/* Whether s is a run's display name: 1 to 128 bytes of text without a
 * control character (C0, DEL or C1). It is sent only inside JSON, never in
 * a URL. */
bool wandb_display_name_valid(const char *s);

/* Checks the request's `integrations` value (NULL or null: none). On a bad
 * value returns false with the offending field (e.g.
 * "integrations[0].wandb.project") in param and a sentence in msg. */
bool integrations_parse(json_t *v, struct job_wandb *out /* OUT */, char *param, size_t pcap,
                        char *msg, size_t mcap);

/* The integrations kept in a job's hyper object; out->on false when none
 * (or for "" and any unreadable text). */
void integrations_from_hyper(const char *hyper, struct job_wandb *out /* OUT */);

/* The OpenAI-shaped array of `w` (an empty array when off); a new reference. */
json_t *integrations_to_json(const struct job_wandb *w);

/* Adds `w` (when on) to the hyper object text in hyper[cap], in place.
 * false when the result does not fit cap or the text is not an object. */
bool integrations_into_hyper(const struct job_wandb *w, char *hyper /* IN/OUT */, size_t cap);

#endif
