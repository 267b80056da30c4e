/* bpe_train.h - learning a byte-level BPE tokenizer from text.
 *
 * The text is pre-split with GPT-2's pattern, every distinct pre-token is
 * counted, and starting from the 256 byte tokens the most frequent adjacent
 * pair is merged until the vocabulary reaches the size asked for (or no pair
 * occurs min_frequency times). Ties between equally frequent pairs go to the
 * pair whose (left id, right id) is smallest, so a run is deterministic.
 * The result is written as a Hugging Face tokenizer.json (model BPE,
 * pre-tokenizer ByteLevel, decoder ByteLevel) with <|endoftext|> as the one
 * special token, used as both BOS and EOS.
 *
 * Ownership: the trainer owns everything it counts; bpe_train_free releases it.
 */
#ifndef ALALLO_TRAIN_BPE_TRAIN_H
#define ALALLO_TRAIN_BPE_TRAIN_H

#include <stddef.h>

#define BPE_TRAIN_MIN_VOCAB 258      /* 256 bytes + one merge + <|endoftext|> */
#define BPE_TRAIN_MAX_VOCAB 1000000
#define BPE_TRAIN_MAX_INPUT ((size_t)1 << 30) /* per file */

struct bpe_trainer;

struct bpe_train_result {
    int vocab_size; /* ids in the written file, the special token included */
    int n_merges;
    size_t n_words; /* distinct pre-tokens counted */
};

struct bpe_trainer *bpe_train_new(void);
void bpe_train_free(struct bpe_trainer *bt); /* NULL is fine */

/* Counts the pre-tokens of `len` bytes of text. May be called many times.
 * Returns 0, or -1 with a reason in err (out of memory, too many distinct
 * pre-tokens). */
int bpe_train_add_text(struct bpe_trainer *bt, const char *text, size_t len, char *err,
                       size_t errcap);

/* Learns merges until the vocabulary (bytes + merges + the special token)
 * has vocab_size ids or no pair occurs min_frequency times. */
int bpe_train_run(struct bpe_trainer *bt, int vocab_size, int min_frequency,
                  struct bpe_train_result *out /* OUT */, char *err, size_t errcap);

/* The learned tokenizer as tokenizer.json text (malloc'd, NUL-terminated),
 * or NULL on allocation failure. Valid after bpe_train_run. */
char *bpe_train_json(const struct bpe_trainer *bt);

/* Writes bpe_train_json atomically to `path` (PATH.tmp, fsync, rename). */
int bpe_train_write(const struct bpe_trainer *bt, const char *path, char *err, size_t errcap);

#endif
