/* dataset.h - line-by-line validation of a JSONL data set, as done at
 * upload (the API) and again by the trainer. Pure: works on a buffer.
 *
 * A valid line is a JSON object in one of these forms (docs/data.md):
 *  - chat: "messages", a non-empty array of {"role": "system"|"user"|
 *    "assistant"|"tool", "content": string} with at least one assistant
 *    message; OpenAI's tool calls: "tools" (function definitions), assistant
 *    "tool_calls" (content may then be null), "tool" messages answering a
 *    call by its "tool_call_id", and "parallel_tool_calls": false (at most
 *    one call per assistant message); an assistant message's reasoning in
 *    "reasoning_content" (a string or null), given to the chat template;
 *  - prompt/completion: "prompt" and "completion" strings, completion
 *    non-empty;
 *  - Alpaca: "instruction", optional "input", "output" (and "system");
 *  - ShareGPT: "conversations", [{"from": "system"|"human"|"gpt", "value"}];
 *  - for DPO, a preference pair in OpenAI's form: {"input": {"messages":
 *    [...]}, "preferred_output": [{"role": "assistant", "content": "..."}],
 *    "non_preferred_output": [...]} (input messages as in chat form, no
 *    assistant needed; each output one non-empty assistant message). A file
 *    of preference pairs holds nothing else;
 *  - for reinforcement fine-tuning, a prompt: chat form with no assistant
 *    message whose last message is the user's, and any other fields the
 *    graders read as {{item.FIELD}} (core/grader.h). A file of prompts
 *    holds nothing else, and a chat without an answer in a file of answered
 *    chats is "no assistant message".
 * Alpaca and ShareGPT lines are converted to chat form (counted in
 * dataset_check.converted and named by dataset_check_converted_from) and
 * then checked as chat. Blank lines are skipped.
 */
#ifndef ALALLO_CORE_DATASET_H
#define ALALLO_CORE_DATASET_H

#include <stddef.h>

enum dataset_format { DATASET_EMPTY = 0, DATASET_CHAT, DATASET_PROMPT_COMPLETION, DATASET_MIXED,
                      DATASET_PREFERENCE, DATASET_REINFORCEMENT };

struct dataset_check {
    long examples;             /* valid examples counted                     */
    long bytes_of_text;        /* total bytes of content/prompt/completion   */
    enum dataset_format format;
    long bad_line;             /* 0 when valid; else the first bad line (1-based) */
    char problem[200];         /* e.g. missing field "completion"            */
    long alpaca, sharegpt;     /* lines converted from each form             */
    long tool_examples;        /* chat examples with tools or tool calls     */
    long reasoning_examples;   /* chat examples with an assistant message that
                                  reasons: a non-blank "reasoning_content", or
                                  a "<think>...</think>" block with text in
                                  its content (docs/data.md)                 */
};

/* "chat", "prompt-completion", "mixed", "preference", "reinforcement" ("" for empty): the
 * format a file object states. */
const char *dataset_format_name(enum dataset_format f);

#define DATASET_MAX_LINE (1024 * 1024) /* bytes in one line, newline excluded */

enum dataset_role { DATASET_SYSTEM = 0, DATASET_USER, DATASET_ASSISTANT, DATASET_TOOL };

struct json_t;

/* One message of a chat example, pointing into parser-owned memory that is
 * valid only during the callback. An assistant message with tool calls has
 * them written after its content, one line each:
 *   <tool_call>{"name": NAME, "arguments": ARGUMENTS}</tool_call>
 * (the plain-text layout of models without a chat template). */
struct dataset_turn {
    enum dataset_role role;
    const char *text;
    size_t len;
};

/* One valid example, as handed to a dataset_each callback. For chat form
 * `turns` is set; for prompt/completion `prompt` and `completion` are; for
 * a preference pair `turns`, `preferred` and `non_preferred`. */
struct dataset_example {
    enum dataset_format form; /* DATASET_CHAT or DATASET_PROMPT_COMPLETION */
    const char *prompt;
    size_t prompt_len;
    const char *completion;
    size_t completion_len;
    const struct dataset_turn *turns; /* chat form; preference: the input messages */
    size_t n_turns;
    const char *preferred, *non_preferred; /* preference form: the two answers */
    size_t preferred_len, non_preferred_len;
    /* preference form: the two answers' messages, as JSON for a chat template
     * (messages and tools are then the input's) */
    const struct json_t *preferred_msg, *non_preferred_msg;
    /* chat form: the line's messages (converted ones for Alpaca/ShareGPT)
     * and its "tools" (NULL when none), as JSON for a chat template; valid
     * only during the callback */
    const struct json_t *messages;
    const struct json_t *tools;
};

/* Called once per valid example in file order; `line` is 1-based. A
 * non-zero return stops the walk and is returned by dataset_each. */
typedef int (*dataset_example_fn)(void *ctx, long line, const struct dataset_example *ex);

/* Validates `len` bytes like dataset_check_buffer and calls fn (when not
 * NULL) for each valid example before the next line is read. Returns 0 when
 * every line is valid and there is at least one example; -1 on the first bad
 * line (out->bad_line/problem set, as dataset_check_buffer); or fn's
 * non-zero value. */
int dataset_each(const char *buf, size_t len, dataset_example_fn fn, void *ctx,
                 struct dataset_check *out /* OUT */);

/* The header text of a role ("system", "user", "assistant"). */
const char *dataset_role_name(enum dataset_role r);

/* Validates `len` bytes. Returns 0 when every line is valid and there is at
 * least one example; -1 otherwise with out->bad_line/problem set (bad_line 0
 * and problem "the file has no examples" for an empty file). */
int dataset_check_buffer(const char *buf, size_t len, struct dataset_check *out /* OUT */);

/* "alpaca", "sharegpt", "alpaca+sharegpt" or NULL (nothing converted). */
const char *dataset_check_converted_from(const struct dataset_check *c);

/* Validates `len` bytes like dataset_check_buffer and writes the data set in
 * chat and prompt/completion forms only: each Alpaca or ShareGPT line
 * becomes {"messages": [...]} on the same line number; other lines are
 * copied unchanged. *out is malloc'd (the caller's). 0, or -1 with out
 * check's bad_line/problem set (or "out of memory"). */
int dataset_convert(const char *buf, size_t len, char **out /* OUT */, size_t *out_len /* OUT */,
                    struct dataset_check *check /* OUT */);

/* Writes "line N of NAME: PROBLEM" (or "NAME: PROBLEM" when bad_line is 0). */
char *dataset_check_error(const struct dataset_check *c, const char *name, char *buf, size_t cap);

#endif
