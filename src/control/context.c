/* context.c - the default context of a job (context.h). */
#include "control/context.h"

#include <stdlib.h>

#include "control/sched_link.h"
#include "core/clock.h"
#include "core/job_hyper.h"
#include "sched/planner.h"

int control_model_context(const struct catalog_model *m)
{
    if (m->max_positions <= 0 || m->max_positions > JOB_HYPER_MAX_SEQ)
        return JOB_HYPER_MAX_SEQ;
    return m->max_positions;
}

int control_default_context(struct control *ctl, const struct catalog_model *m,
                            const struct store_job *j)
{
    int seq = control_model_context(m);
    int floor = seq < CONTEXT_MIN_DEFAULT ? seq : CONTEXT_MIN_DEFAULT;
    struct sched_worker *w = calloc(SCHED_LINK_WORKERS, sizeof *w);
    struct store_job *probe = malloc(sizeof *probe);
    if (!w || !probe) {
        free(w);
        free(probe);
        return floor;
    }
    /* The estimate's picture of the fleet (at most a second old), not a
     * fresh read: a fresh one cost every job creation two queries and a
     * few megabytes zeroed, most of serve's time at 64 clients. */
    int n = sched_link_fleet(ctl, (double)clock_now_ms() / 1000.0, w, SCHED_LINK_WORKERS);
    if (n == 0)
        floor = seq; /* no worker known yet: nothing to cap by */
    *probe = *j;
    struct job_hyper h;
    job_hyper_parse(j->hyper, &h);
    while (seq > floor) {
        h.max_seq_len = seq;
        if (!job_hyper_format(&h, false, probe->hyper, sizeof probe->hyper))
            break;
        struct plan_job pj;
        sched_link_plan_job(m, probe, &pj);
        if (planner_feasibility(&pj, w, (size_t)n, NULL) == PLAN_FITS)
            break;
        seq /= 2;
    }
    if (seq < floor)
        seq = floor;
    free(w);
    free(probe);
    return seq;
}
