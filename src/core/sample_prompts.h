/* sample_prompts.h - the prompts a job asks its model to answer at each
 * epoch's end, beside the base model's answers: `sample_prompts` on
 * POST /v1/fine_tuning/jobs (docs/api.md, "Sample answers").
 *
 * A value is a list of 1..SAMPLE_PROMPTS_MAX prompts, each a string (a
 * prompt as in prompt/completion training data) or a conversation as in
 * chat training data, [{role, content}] with roles system, user and
 * assistant, ending with a user message. A prompt's text (a string's
 * bytes, or the sum of a conversation's contents) is 1..SAMPLE_PROMPT_MAX_BYTES.
 *
 * The API checks the request's value (sample_prompts_check), the store
 * keeps it inside the job's hyper JSON object under "sample_prompts" (no
 * column of its own, as integrations), the server passes it to the trainer
 * in ATTEMPT.json (docs/trainer-protocol.md), and the trainer checks it
 * again (a settings error when bad). Pure: no I/O.
 */
#ifndef ALALLO_CORE_SAMPLE_PROMPTS_H
#define ALALLO_CORE_SAMPLE_PROMPTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define SAMPLE_PROMPTS_MAX 5         /* prompts of one job */
#define SAMPLE_PROMPT_MAX_BYTES 500  /* text of one prompt */
#define SAMPLE_PROMPT_MAX_MESSAGES 8 /* messages of one conversation */
/* Without prompts of its own, a job with validation data is answered on
 * the first prompts of its validation set, this many. */
#define SAMPLE_PROMPTS_FROM_VALIDATION 3
/* The longest answer, in tokens (greedy decoding). */
#define SAMPLE_ANSWER_TOKENS 32

/* Checks v (NULL or null: none, true). On a bad value returns false with
 * the field's path in param ("sample_prompts[1][0].content") and a
 * sentence in msg. */
bool sample_prompts_check(const json_t *v, char *param, size_t pcap, char *msg, size_t mcap);

/* The prompts kept in a job's hyper object: a new reference to the array,
 * or NULL when there are none (or they do not check). */
json_t *sample_prompts_from_hyper(const char *hyper);

/* Sets hyper's "sample_prompts" to v (checked; NULL or null: nothing to
 * do). false when hyper is no JSON object or the result does not fit in
 * cap (hyper unchanged). */
bool sample_prompts_into_hyper(const json_t *v, char *hyper /* IN/OUT */, size_t cap);

/* How a prompt reads in its sample events: a string as it is, a
 * conversation as its last message's content. Borrowed from p; "" when p
 * is neither. */
const char *sample_prompt_text(const json_t *p);

/* The bytes of a prompt's text (a string's, or a conversation's contents
 * together), for the estimate. 0 when p is neither. */
size_t sample_prompt_bytes(const json_t *p);

#endif
