/* grader_text.h - the text_similarity grader's metrics: how close a
 * model's answer is to a reference, each a score in [0, 1] (docs/rft.md,
 * "text_similarity"). Pure: no I/O, no allocation beyond the call.
 *
 * Words, for BLEU, GLEU and ROUGE: the text lower-cased (ASCII letters)
 * and cut at every byte that is not an ASCII letter or digit and below
 * 0x80 (a UTF-8 character outside ASCII stays part of its word). At most
 * GRADER_TEXT_MAX_WORDS words of each text are read; the rest is ignored.
 * Characters, for fuzzy_match: Unicode code points (a broken UTF-8 byte
 * counts as one), at most GRADER_TEXT_MAX_CHARS of each text.
 */
#ifndef ALALLO_CORE_GRADER_TEXT_H
#define ALALLO_CORE_GRADER_TEXT_H

#include <stdbool.h>

#define GRADER_TEXT_MAX_WORDS 1024
#define GRADER_TEXT_MAX_CHARS 4096

enum grader_metric {
    GRADER_FUZZY = 0, /* 2 * LCS(characters) / (|a| + |b|); two empty texts: 1 */
    GRADER_BLEU,      /* sentence BLEU-4, see grader_text_score */
    GRADER_GLEU,      /* Google BLEU: 1- to 4-gram matches / max(answer's, reference's) */
    GRADER_ROUGE_1,   /* ROUGE-n: F1 of the clipped n-gram overlap */
    GRADER_ROUGE_2,
    GRADER_ROUGE_3,
    GRADER_ROUGE_4,
    GRADER_ROUGE_5,
    GRADER_ROUGE_L,   /* F1 of the longest common subsequence of words */
    GRADER_METRIC_COUNT
};

/* OpenAI's name of a metric ("fuzzy_match", "bleu", "gleu", "rouge_1" ..
 * "rouge_5", "rouge_l"); NULL out of range. */
const char *grader_metric_name(enum grader_metric m);
/* The metric of a name; false when alallo does not compute it. */
bool grader_metric_parse(const char *name, enum grader_metric *out /* OUT */);

/* The score of `answer` against `reference` (NUL-terminated UTF-8).
 * BLEU: the geometric mean of the clipped 1- to 4-gram precisions over the
 * orders the answer has n-grams of, an order with no match counted as
 * 1 / (2^k * its n-grams) for the k-th such order, times the brevity
 * penalty exp(1 - r/c) when the answer (c words) is shorter than the
 * reference (r). An empty answer scores 0 on every metric but fuzzy_match. */
double grader_text_score(enum grader_metric m, const char *answer, const char *reference);

#endif
