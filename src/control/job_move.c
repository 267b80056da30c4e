/* job_move.c - the guarded change of a job's status (job_move.h). */
#include "control/job_move.h"

#include "core/log.h"
#include "core/text.h"

enum alallo_err job_move_to(struct store_job *j, enum job_status to, enum job_message m)
{
    if (!job_transition_allowed(j->status, to) || !job_message_allowed(to, m)) {
        log_line("error", "job %s: forbidden move %s -> %s (message %d)", j->id,
                 job_status_name(j->status) ? job_status_name(j->status) : "?",
                 job_status_name(to) ? job_status_name(to) : "?", (int)m);
        return ERR_INTERNAL;
    }
    j->status = to;
    text_copy(j->message, sizeof j->message, job_message_text(m));
    return ERR_OK;
}

enum alallo_err job_move_initial(struct store_job *j, enum job_status s, enum job_message m)
{
    bool ok =
        (s == JOB_QUEUED && (m == MSG_STARTING || m == MSG_WAITING_FOR_CAPACITY)) ||
        (s == JOB_FAILED && (m == MSG_NOT_AVAILABLE || m == MSG_NOT_AVAILABLE_LOWER_PRECISION));
    if (!ok) {
        log_line("error", "job %s: %s is not a first status", j->id,
                 job_status_name(s) ? job_status_name(s) : "?");
        return ERR_INTERNAL;
    }
    j->status = s;
    text_copy(j->message, sizeof j->message, job_message_text(m));
    return ERR_OK;
}
