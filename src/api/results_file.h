/* results_file.h - a job's results file: its metrics step by step as CSV,
 * in OpenAI's columns (docs/api.md, "The results file"), listed in the
 * job's result_files once it has ended and served by GET /v1/files/{id}
 * and /v1/files/{id}/content.
 *
 * The file is not stored twice: its rows are the job's `metrics` events
 * (one per reported step: every 10 steps, each validation, each epoch's
 * end), read when it is asked for. Its id is the job's own with another
 * prefix ("file-results-" + what follows "ftjob-"), so a job and its file
 * name each other without a column (results_id.h).
 */
#ifndef ALALLO_API_RESULTS_FILE_H
#define ALALLO_API_RESULTS_FILE_H

#include <stdbool.h>
#include <stddef.h>

#include "api/http.h"
#include "api/results_id.h"
#include "api/server.h"
#include "store/store.h"

#define RESULTS_FILE_NAME "step_metrics.csv"
#define RESULTS_MAX_ROWS 200000 /* a "too large" error beyond */

/* Rows from metrics events' data (JSON objects as shape_event gives):
 * events without "step" and "train_loss" are skipped; two of one step are
 * merged (the later one's values win). */
struct results_csv;
struct results_csv *results_csv_new(void);
void results_csv_free(struct results_csv *c); /* NULL is fine */
/* false: out of memory or more than RESULTS_MAX_ROWS rows. */
bool results_csv_add(struct results_csv *c, const char *event_data);
/* How many rows the adds so far looked at to find a step's row (the index
 * regrown included): a small multiple of the events added, whatever their
 * number (a row is found by its step, never searched for). For tests. */
size_t results_csv_work(const struct results_csv *c);
/* The CSV text, rows by step, the header first; malloc'd, *len its length.
 * NULL on out of memory. Rows may still be added after. */
char *results_csv_text(struct results_csv *c, size_t *len /* OUT */);
/* The length results_csv_text would give, without writing the text (for
 * the file object's `bytes`). */
size_t results_csv_size(struct results_csv *c);

/* GET /v1/files/{id} and /content for a results file id (results_file_job
 * true): answers res (404 when the caller's job has none). */
void results_file_get(struct api_server *srv, struct http_request *req, struct http_response *res,
                      const char *job_id, bool content);

#endif
