/* stop_text.h - texts that end an answer where one first appears (the
 * `stop` of OpenAI's completions): where the first of them starts in an
 * answer's text, and how many bytes at the text's end must be held back
 * from a stream while they may still grow into one. Pure: no I/O, no
 * allocation; a stop_texts holds copies of its texts.
 *
 * The answer is its text before the stop text, which is not part of it
 * (as OpenAI and vLLM give it). Texts are compared as bytes, from the
 * answer's first byte; the earliest start wins, whichever text it is. */
#ifndef ALALLO_TRAIN_STOP_TEXT_H
#define ALALLO_TRAIN_STOP_TEXT_H

#include <stddef.h>

#define STOP_TEXTS_MAX 4    /* OpenAI's bound */
#define STOP_TEXT_BYTES 256 /* one text's bytes at most */
#define STOP_TEXT_NONE ((size_t)-1)

struct stop_texts {
    int n;
    size_t len[STOP_TEXTS_MAX];
    char text[STOP_TEXTS_MAX][STOP_TEXT_BYTES];
};

/* Adds text[0..len): 0, or -1 when s is full or the text is empty or
 * longer than STOP_TEXT_BYTES (s unchanged). */
int stop_texts_add(struct stop_texts *s, const char *text, size_t len);

/* Where the earliest of s's texts starts in text[0..len), or
 * STOP_TEXT_NONE. */
size_t stop_texts_find(const struct stop_texts *s, const char *text, size_t len);

/* The bytes at the end of text[0..len) that are the start of one of s's
 * texts but not the whole of it (the longest such end): what a stream
 * holds back until the next token says whether a stop text came. */
size_t stop_texts_held(const struct stop_texts *s, const char *text, size_t len);

#endif
