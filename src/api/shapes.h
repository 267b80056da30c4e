/* shapes.h - the JSON objects the API answers with, shaped like OpenAI's
 * (so its SDKs read them unchanged) plus alallo's own fields (SPEC §4).
 * Each returns a new reference, or NULL on out of memory.
 */
#ifndef ALALLO_API_SHAPES_H
#define ALALLO_API_SHAPES_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "control/jobs.h"
#include "store/store.h"

#define SHAPES_CURRENCY CONTROL_CURRENCY

/* {"object":"list","data":DATA,"has_more":..,"first_id":..,"last_id":..};
 * steals `data` (an array of objects with "id"). */
json_t *shape_list(json_t *data, bool has_more);

struct jsonw;

/* Writes a fine-tuning job as JSON text (the hot path: lists of jobs). */
void shape_job_write(struct jsonw *w, const struct store_job *j,
                     const struct store_attempt *attempts, int n_attempts, int64_t now_ms);

/* A fine-tuning job; `attempts` may be NULL when n_attempts is 0. The same
 * object shape_job_write writes. */
json_t *shape_job(const struct store_job *j, const struct store_attempt *attempts, int n_attempts,
                  int64_t now_ms);

json_t *shape_file(const struct store_file *f);
json_t *shape_event(const struct store_job *j, const struct store_event *e);
json_t *shape_checkpoint(const struct store_job *j, const struct store_checkpoint *c);
json_t *shape_ledger_row(const struct store_ledger_row *r);

/* The id an event has in the API: "ftevent-" + job id's random part + "-" + seq. */
void shape_event_id(const struct store_job *j, int64_t seq, char *out, size_t cap);

/* Parses an event id made by shape_event_id for job j; 0 when it is not. */
int64_t shape_event_seq(const struct store_job *j, const char *id);


/* "Supervised fine-tuning" as people read the method. */
const char *shape_training_method(const struct store_job *j);

#endif
