/* dataset.h - line-by-line validation of a JSONL data set, as done at
 * upload (the API) and again by the trainer. Pure: works on a buffer.
 *
 * A valid line is a JSON object in chat form ("messages": a non-empty array
 * of {"role": "system"|"user"|"assistant", "content": string} with at least
 * one assistant message) or prompt/completion form ("prompt" and
 * "completion" strings, completion non-empty). Blank lines are skipped.
 */
#ifndef ALALLO_CORE_DATASET_H
#define ALALLO_CORE_DATASET_H

#include <stddef.h>

enum dataset_format { DATASET_EMPTY = 0, DATASET_CHAT, DATASET_PROMPT_COMPLETION, DATASET_MIXED };

struct dataset_check {
    long examples;             /* valid examples counted                     */
    long bytes_of_text;        /* total bytes of content/prompt/completion   */
    enum dataset_format format;
    long bad_line;             /* 0 when valid; else the first bad line (1-based) */
    char problem[200];         /* e.g. missing field "completion"            */
};

/* Validates `len` bytes. Returns 0 when every line is valid and there is at
 * least one example; -1 otherwise with out->bad_line/problem set (bad_line 0
 * and problem "the file has no examples" for an empty file). */
int dataset_check_buffer(const char *buf, size_t len, struct dataset_check *out /* OUT */);

/* Writes "line N of NAME: PROBLEM" (or "NAME: PROBLEM" when bad_line is 0). */
char *dataset_check_error(const struct dataset_check *c, const char *name, char *buf, size_t cap);

#endif
