/* chat_format.h - a model's own chat template (tokenizer_config.json's
 * "chat_template", or chat_template.jinja beside it) applied to a
 * conversation: for training, token ids with the assistant turns marked
 * for the loss; for generation, the prompt that asks for the next turn.
 *
 * The template sees what transformers gives it: `messages` (OpenAI's
 * shape; a tool call's "arguments" string is parsed into an object, as
 * the templates expect), `tools` (when the conversation has any),
 * `add_generation_prompt`, and the special tokens of tokenizer_config.json
 * (`bos_token`, `eos_token`, `pad_token`, `unk_token`).
 *
 * Finding the assistant turns (docs/data.md): for assistant message i, the
 * template renders the messages before it with the generation prompt (P)
 * and the messages up to it without (F); the text F adds after P is the
 * turn as the template writes it (with its end-of-turn mark), and it is
 * looked for in the whole conversation's text after the end of the
 * previous turn. When P is no prefix of F (the template lays out earlier
 * messages differently once a reply follows), the turn is taken from the
 * last place F holds the message's (trimmed) content. When the whole
 * conversation writes the turn otherwise than F (Qwen3 drops the reasoning
 * of turns before the last query), it is found from F's last place of the
 * content, as given, trimmed, or after its last "</think>". A turn whose F
 * ends with the eos_token the template writes after a conversation's last
 * message (Phi-4-mini) is found without it when another message follows.
 * A turn that cannot be found is an error naming the message.
 *
 * Ownership: chat_format_load returns a format the caller frees with
 * chat_format_free; arrays and text returned are malloc'd and the caller's.
 */
#ifndef ALALLO_TRAIN_CHAT_FORMAT_H
#define ALALLO_TRAIN_CHAT_FORMAT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "train/tokenizer/tokenizer.h"

struct chat_format;

/* Reads model_dir's chat template. NULL with err[0] == '\0' when the model
 * has none (alallo's plain layout is used then); NULL with a reason when the
 * template cannot be read or parsed. */
struct chat_format *chat_format_load(const char *model_dir, char *err, size_t errcap);

/* As chat_format_load, from tokenizer_config.json text (for tests). */
struct chat_format *chat_format_from_config(const char *config_json, size_t len, char *err,
                                            size_t errcap);
void chat_format_free(struct chat_format *f); /* NULL is fine */

/* The whole conversation as ids and a mask that is 1 on each assistant
 * turn. Added tokens written in the rendered text become their ids, as
 * transformers tokenizes a rendered template (docs/data.md). Each span
 * (text between turns, each turn) is tokenized on its own. 0, or -1 with a
 * reason ("message 3: ..."). */
int chat_format_encode(const struct chat_format *f, const struct tokenizer *tok,
                       const json_t *messages, const json_t *tools, int32_t **ids /* OUT */,
                       uint8_t **mask /* OUT */, size_t *n /* OUT */, char *err, size_t errcap);

/* The text that asks the model for the next assistant turn. 0, or -1 with a
 * reason. */
int chat_format_prompt(const struct chat_format *f, const json_t *messages, const json_t *tools,
                       char **text /* OUT */, char *err, size_t errcap);

/* The template's text of one conversation (the whole of it, no generation
 * prompt). For tests. */
int chat_format_render(const struct chat_format *f, const json_t *messages, const json_t *tools,
                       int add_generation_prompt, char **text /* OUT */, char *err, size_t errcap);

/* Ids that end an assistant turn: EOS, the config's eos_token, and the
 * end-of-turn tokens of the known families that the tokenizer has
 * (<|im_end|>, <|eot_id|>, <|eom_id|>, <end_of_turn>, <|end|>). Writes up
 * to cap ids; returns how many. */
int chat_format_stop_ids(const struct chat_format *f, const struct tokenizer *tok, int32_t *out,
                         int cap);

#endif
