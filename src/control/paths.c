/* paths.c - see paths.h. */
#include "control/paths.h"

#include <string.h>

#include "core/ids.h"
#include "core/text.h"

bool control_job_dir(const struct control *ctl, const char *job_id, const char *sub,
                     char *out, size_t cap)
{
    if (!ids_valid(job_id))
        return false;
    return text_printf(out, cap, "%s/jobs/%s%s%s", ctl->cfg.data_dir, job_id, sub ? "/" : "",
                       sub ? sub : "");
}

bool control_attempt_dir(const struct control *ctl, const char *job_id, const char *attempt_id,
                         const char *sub, char *out, size_t cap)
{
    if (!ids_valid(job_id) || !ids_valid(attempt_id))
        return false;
    return text_printf(out, cap, "%s/jobs/%s/attempts/%s%s%s", ctl->cfg.data_dir, job_id,
                       attempt_id, sub ? "/" : "", sub ? sub : "");
}

void control_fine_tuned_model_name(const struct store_job *j, char *out, size_t cap)
{
    const char *dash = strchr(j->id, '-');
    text_printf(out, cap, "ft:%s:%s:%s", j->model, j->suffix[0] ? j->suffix : "alallo",
                dash ? dash + 1 : j->id);
}
