/* results_id.h - the id of a job's results file (results_file.h): the
 * job's own id with another prefix ("file-results-" + what follows
 * "ftjob-"), so a job and its file name each other without a column. Kept
 * apart from the file itself so that the views of jobs (shapes.c) name it
 * without depending on the file's handler, which uses those views.
 */
#ifndef ALALLO_API_RESULTS_ID_H
#define ALALLO_API_RESULTS_ID_H

#include <stdbool.h>
#include <stddef.h>

#include "store/store.h"

#define RESULTS_FILE_PREFIX "file-results-"

/* The id of job j's results file into out; false when j has none yet (it
 * has not ended, or trained no step). */
bool results_file_id(const struct store_job *j, char *out, size_t cap);

/* Whether `file_id` names a results file; the job's id into job. */
bool results_file_job(const char *file_id, char *job, size_t cap);

#endif
