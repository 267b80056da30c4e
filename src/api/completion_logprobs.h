/* completion_logprobs.h - the log-probabilities of a legacy completion
 * (/v1/completions) in OpenAI's legacy shape, made from the generator's
 * entries (control/generation.h: one per answer token, {"token",
 * "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}...]}):
 *
 *   {"tokens": [TEXT...], "token_logprobs": [X...],
 *    "top_logprobs": [{TEXT: X, ...}...], "text_offset": [N...]}
 *
 * Each top_logprobs object holds the most likely tokens at that place,
 * most likely first, and the token taken when it is not among them (so up
 * to N + 1 keys, as OpenAI's API says); two tokens of the same text keep
 * the more likely one's value; an entry whose logprob is null (a prompt's
 * first token, with nothing before it) has null there too, as in OpenAI's
 * echo. text_offset is where each token starts in
 * the choice's text, in characters (Unicode code points; a token that
 * starts inside a character counts from the character after it).
 *
 * Ownership: the object returned is the caller's; entries are borrowed.
 */
#ifndef ALALLO_API_COMPLETION_LOGPROBS_H
#define ALALLO_API_COMPLETION_LOGPROBS_H

#include <jansson.h>
#include <stddef.h>

/* The legacy object of `entries` (an array; NULL is taken as empty), whose
 * first token starts at character *chars of the text; *chars is moved past
 * the last. NULL when memory ran out. */
json_t *completion_logprobs(const json_t *entries, size_t *chars /* IN/OUT */);

#endif
