/* tokenizer.h - text <-> token ids from a Hugging Face `tokenizer.json`.
 *
 * Two model kinds are read: byte-level BPE (GPT-2, Llama 3, Qwen style:
 * pre-split by the file's regex, bytes mapped to printable characters, then
 * merges by rank) and SentencePiece-style BPE with byte fallback (Llama 2
 * style: "▁" for spaces, <0xNN> tokens for unknown bytes). Added/special
 * tokens from "added_tokens" are matched verbatim only where the caller asks
 * (tokenizer_encode_special).
 *
 * Ownership: the tokenizer owns its tables; arrays returned by encode and
 * strings returned by decode are the caller's to free(). All functions are
 * safe to call from several threads on one loaded tokenizer.
 */
#ifndef ALALLO_TRAIN_TOKENIZER_H
#define ALALLO_TRAIN_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct tokenizer;

/* Loads `path` (a tokenizer.json). On failure returns NULL and writes a
 * one-line reason into err (e.g. "tokenizer.json: unsupported model type
 * \"WordPiece\""). */
struct tokenizer *tokenizer_load(const char *path, char *err, size_t errcap);
void tokenizer_free(struct tokenizer *t); /* NULL is fine */

/* As tokenizer_load, from `len` bytes of tokenizer.json text in memory. */
struct tokenizer *tokenizer_load_json(const char *json, size_t len, char *err, size_t errcap);

/* Number of ids (vocabulary plus added tokens; the largest id + 1). */
int tokenizer_vocab_size(const struct tokenizer *t);

/* Special ids, or -1 when the tokenizer has none. bos/eos are found from the
 * added tokens ("<s>", "</s>", "<|endoftext|>", "<|begin_of_text|>",
 * "<|end_of_text|>", ...). */
int tokenizer_bos_id(const struct tokenizer *t);
int tokenizer_eos_id(const struct tokenizer *t);

/* The id of a token written exactly as `text`, or -1. */
int tokenizer_token_id(const struct tokenizer *t, const char *text);

/* The text of token `id` as the file writes it (byte-level tokens in
 * GPT-2's printable form, SentencePiece tokens with their space mark), or
 * NULL for an id out of range. Owned by the tokenizer. */
const char *tokenizer_token_text(const struct tokenizer *t, int id);

/* 0 for a vocabulary token, 1 for an added token, 2 for an added special
 * token, -1 for an id out of range or unused. */
int tokenizer_token_kind(const struct tokenizer *t, int id);

/* 1 for a byte-level BPE tokenizer, 0 for SentencePiece style. */
int tokenizer_is_byte_level(const struct tokenizer *t);

/* Encodes `len` bytes of UTF-8 text (plain text: special-token strings are
 * encoded as ordinary text). On success returns 0 and sets *ids (malloc'd)
 * and *n. Returns -1 on allocation failure or input over 64 MiB. */
int tokenizer_encode(const struct tokenizer *t, const char *text, size_t len,
                     int32_t **ids /* OUT */, size_t *n /* OUT */);

/* As tokenizer_encode, but added tokens written in the text become their ids. */
int tokenizer_encode_special(const struct tokenizer *t, const char *text, size_t len,
                             int32_t **ids /* OUT */, size_t *n /* OUT */);

/* Decodes ids to UTF-8 (malloc'd, NUL-terminated; invalid sequences become
 * U+FFFD). Special tokens are skipped when skip_special is non-zero.
 * NULL on allocation failure. */
char *tokenizer_decode(const struct tokenizer *t, const int32_t *ids, size_t n,
                       int skip_special);

/* Token `id` alone: the bytes it stands for in a text (malloc'd into
 * *bytes, *len of them; a SentencePiece token keeps its leading space, an
 * added token is its own text), and the same as UTF-8 (returned, malloc'd,
 * NUL-terminated; a byte-level token that ends inside a character has
 * U+FFFD for the bytes that are no whole character). NULL (and no bytes)
 * for an id out of range or when memory ran out. */
char *tokenizer_token_piece(const struct tokenizer *t, int id, char **bytes /* OUT */,
                            size_t *len /* OUT */);

#endif
