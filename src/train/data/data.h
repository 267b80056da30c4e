/* data.h - a JSONL training set turned into token ids with a loss mask.
 *
 * Each line is one example, either chat form
 *   {"messages":[{"role":"system|user|assistant","content":"..."}, ...]}
 * or prompt/completion form {"prompt":"...","completion":"..."}.
 * The text layout (template) and the rule for examples longer than the
 * context are documented in docs/data.md. Loss counts only assistant /
 * completion tokens (and the end-of-sequence token that closes them).
 *
 * Ownership: the dataset owns all its arrays; dataset_free releases them.
 */
#ifndef ALALLO_TRAIN_DATA_H
#define ALALLO_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "core/dataset.h"
#include "train/tokenizer/tokenizer.h"

struct example {
    int32_t *ids;   /* (len) token ids, starting with BOS when the tokenizer has one */
    uint8_t *mask;  /* (len) 1 where the token at this position is a target of the loss */
    size_t len;
};

struct dataset {
    struct example *ex;
    size_t n;
    size_t n_tokens;     /* sum of len */
    size_t n_truncated;  /* examples cut to fit the context (docs/data.md) */
    int pairs;           /* 1: a file of preference pairs (DPO): ex[2i] holds pair i's
                            input and preferred answer, ex[2i+1] the same input and
                            the other answer; the mask covers each answer */
};

/* Reads and tokenizes `path`. `display_name` is how the file is named in
 * errors (the user's upload name, e.g. "train.jsonl"). `max_len` is the
 * context length. On a bad line returns NULL and writes exactly one line to
 * err such as:  line 3 of train.jsonl: missing field "completion"  */
struct dataset *dataset_load(const char *path, const char *display_name,
                             const struct tokenizer *tok, size_t max_len,
                             char *err, size_t errcap);

/* As dataset_load, with chat examples laid out by the model's own chat
 * template (fmt, chat_format.h) instead of the plain layout; fmt NULL is
 * dataset_load. Loss falls on the assistant turns the template writes.
 * fmt_err, when not NULL, says why the model's template cannot be used:
 * a chat example is then an error (prompt/completion ones still load). */
struct chat_format;
struct dataset *dataset_load_chat(const char *path, const char *display_name,
                                  const struct tokenizer *tok, const struct chat_format *fmt,
                                  const char *fmt_err, size_t max_len, char *err, size_t errcap);
/* As dataset_load_chat, from len bytes of JSONL in memory named `name`
 * in errors (reinforcement fine-tuning's answers, laid out for training
 * as the files are). */
struct dataset *dataset_from_buffer(const char *buf, size_t len, const char *name,
                                    const struct tokenizer *tok, const struct chat_format *fmt,
                                    const char *fmt_err, size_t max_len, char *err,
                                    size_t errcap);
void dataset_free(struct dataset *d); /* NULL is fine */

/* Moves a share (0 < share < 1) of d's examples, drawn from the seed, into
 * a new dataset (validation_split): round(share * n), at least 1, and at
 * least 1 left in d; the rest keep their order in d. Not for preference
 * pairs. NULL when d has fewer than 2 examples or memory runs out (d is
 * then unchanged). */
struct dataset *dataset_split_off(struct dataset *d, double share, uint64_t seed);

/* Formats a prompt for generation the way training formatted prompts
 * (prompt/completion form: the prompt text as trained). malloc'd ids, or -1. */
int data_encode_prompt(const struct tokenizer *tok, const char *prompt,
                       int32_t **ids /* OUT */, size_t *n /* OUT */);

/* Formats a conversation for generation the way training formatted chat
 * examples, ending with the assistant header so the model writes the next
 * answer: BOS, each turn (assistant turns closed by EOS), "\n\nAssistant:\n".
 * malloc'd ids; 0, or -1 on allocation failure or a bad role. */
int data_encode_chat(const struct tokenizer *tok, const struct dataset_turn *turns,
                     size_t n_turns, int32_t **ids /* OUT */, size_t *n /* OUT */);

#endif
