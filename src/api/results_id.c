/* results_id.c - see results_id.h. */
#include "api/results_id.h"

#include <string.h>

#include "core/ids.h"
#include "core/job.h"
#include "core/text.h"

#define JOB_PREFIX "ftjob-"

bool results_file_id(const struct store_job *j, char *out, size_t cap)
{
    if (!job_status_is_terminal(j->status) || j->steps_done <= 0 ||
        strncmp(j->id, JOB_PREFIX, strlen(JOB_PREFIX)) != 0)
        return false;
    return text_printf(out, cap, RESULTS_FILE_PREFIX "%s", j->id + strlen(JOB_PREFIX));
}

bool results_file_job(const char *file_id, char *job, size_t cap)
{
    size_t n = strlen(RESULTS_FILE_PREFIX);
    if (!file_id || strncmp(file_id, RESULTS_FILE_PREFIX, n) != 0 || !file_id[n])
        return false;
    return text_printf(job, cap, JOB_PREFIX "%s", file_id + n) && ids_valid(job);
}
