/* fuzz_dataset.c - libFuzzer driver for the JSONL data set check
 * (core/dataset.h: dataset_check_buffer, dataset_each).
 *
 * Input: a whole uploaded file. Properties:
 *  - no crash, no read outside the buffer or the parser's memory;
 *  - the verdict is consistent: 0 means no bad line and at least one
 *    example; -1 names a line that exists (or 0 for "no examples") and a
 *    non-empty problem;
 *  - the problem is one line of valid UTF-8, because the API sends it to
 *    the user inside a JSON error, and JSON strings must be UTF-8;
 *  - dataset_each hands the callback exactly the examples counted, with
 *    texts whose bytes sum to bytes_of_text, and agrees with
 *    dataset_check_buffer on the verdict.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dataset.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct tally {
    long examples;
    long text_bytes;
    long last_line;
};

static int count_example(void *ctx, long line, const struct dataset_example *ex)
{
    struct tally *t = ctx;
    FUZZ_CHECK(line > t->last_line); /* file order, one call per line */
    t->last_line = line;
    t->examples++;
    if (ex->form == DATASET_CHAT || ex->form == DATASET_REINFORCEMENT) {
        FUZZ_CHECK(ex->n_turns > 0 && ex->turns != NULL);
        int assistant = 0;
        for (size_t i = 0; i < ex->n_turns; i++) {
            const struct dataset_turn *turn = &ex->turns[i];
            FUZZ_CHECK((unsigned)turn->role <= DATASET_TOOL);
            FUZZ_CHECK(turn->text != NULL);
            fuzz_touch(turn->text, turn->len);
            assistant |= turn->role == DATASET_ASSISTANT;
            t->text_bytes += (long)turn->len;
        }
        /* an answered chat has an assistant turn; a reinforcement prompt
         * has none and ends with the user's (core/dataset.h) */
        if (ex->form == DATASET_CHAT)
            FUZZ_CHECK(assistant);
        else
            FUZZ_CHECK(!assistant && ex->turns[ex->n_turns - 1].role == DATASET_USER);
    } else {
        FUZZ_CHECK(ex->form == DATASET_PROMPT_COMPLETION);
        FUZZ_CHECK(ex->prompt != NULL && ex->completion != NULL && ex->completion_len > 0);
        fuzz_touch(ex->prompt, ex->prompt_len);
        fuzz_touch(ex->completion, ex->completion_len);
        t->text_bytes += (long)(ex->prompt_len + ex->completion_len);
    }
    return 0;
}

static long count_lines(const uint8_t *data, size_t size)
{
    long n = 1;
    for (size_t i = 0; i < size; i++)
        n += data[i] == '\n';
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    struct dataset_check c;
    int rc = dataset_check_buffer(buf, size, &c);
    FUZZ_CHECK(rc == 0 || rc == -1);
    FUZZ_CHECK(memchr(c.problem, '\0', sizeof c.problem) != NULL);
    if (rc == 0) {
        FUZZ_CHECK(c.bad_line == 0 && c.examples > 0 && c.format != DATASET_EMPTY);
    } else {
        FUZZ_CHECK(c.problem[0] != '\0');
        FUZZ_CHECK(c.bad_line >= 0 && c.bad_line <= count_lines(data, size));
        FUZZ_CHECK(c.bad_line > 0 || c.examples == 0);
        FUZZ_CHECK(strchr(c.problem, '\n') == NULL);
        if (!fuzz_utf8_valid((const uint8_t *)c.problem, strlen(c.problem))) {
            fprintf(stderr, "problem text is not valid UTF-8: \"%s\"\n", c.problem);
            abort();
        }
        char msg[400];
        dataset_check_error(&c, "train.jsonl", msg, sizeof msg);
        FUZZ_CHECK(strstr(msg, "train.jsonl") != NULL);
    }
    FUZZ_CHECK(c.bytes_of_text >= 0);

    struct tally t = {0, 0, 0};
    struct dataset_check d;
    int rc2 = dataset_each(buf, size, count_example, &t, &d);
    FUZZ_CHECK(rc2 == rc);
    FUZZ_CHECK(d.bad_line == c.bad_line && d.examples == c.examples);
    FUZZ_CHECK(strcmp(d.problem, c.problem) == 0);
    FUZZ_CHECK(t.examples == d.examples);
    if (rc == 0)
        FUZZ_CHECK(t.text_bytes == d.bytes_of_text);
    return 0;
}
