/* tool_calls.h - tool calls found in a model's answer, in OpenAI's shape.
 *
 * A model asked with `tools` answers a call in its family's way; these
 * forms are recognised (docs/api.md):
 *   <tool_call>{"name": N, "arguments": {...}}</tool_call>   Qwen2.5, and
 *        alallo's plain layout for models without a chat template (one or
 *        more blocks; text outside them is the message's content)
 *   [TOOL_CALLS] [{"name": N, "arguments": {...}}, ...]     Mistral
 *   {"name": N, "parameters": {...}}                         Llama 3.1
 *        (the whole answer, optionally after <|python_tag|>)
 * Pure: works on a string.
 */
#ifndef ALALLO_CORE_TOOL_CALLS_H
#define ALALLO_CORE_TOOL_CALLS_H

#include <jansson.h>

/* Parses `text`. When it holds tool calls, returns a new array of
 * {"id", "type": "function", "function": {"name", "arguments" (JSON
 * text)}} (ids "call_" + id_prefix + index) and sets *content to a new
 * string of the text outside the calls (trimmed; NULL when empty).
 * Returns NULL (and *content NULL) when the text holds no call. */
json_t *tool_calls_parse(const char *text, const char *id_prefix, json_t **content /* OUT */);

#endif
