/* rft_data.h - the data of a reinforcement fine-tuning job against its
 * grader, checked when the job is made (docs/rft.md): every line of the
 * training and validation files must hold the fields the grader reads as
 * {{item.FIELD}}, so that a job never fails on its first rollout for a
 * field a line lacks.
 */
#ifndef ALALLO_CONTROL_RFT_DATA_H
#define ALALLO_CONTROL_RFT_DATA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Reads the data file at `path` (JSONL, checked at upload) line by line
 * and checks each against grader g (passed grader_check). false with a
 * sentence naming the file (`name`), the line and the field in msg, or
 * saying the file could not be read. */
bool rft_data_check(const char *path, const char *name, const json_t *g, char *msg, size_t cap);

#endif
