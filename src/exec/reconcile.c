/* reconcile.c - the store's open attempts against the engine's jobs
 * (reconcile.h). O(na * nj): 500 attempts against 500 jobs is 250,000
 * string comparisons, well under a millisecond. */
#include "exec/reconcile.h"

#include <string.h>

#include "core/text.h"

/* Running beats pending beats ended: the job that tells most. */
static int rank(enum exec_state s)
{
    return s == EXEC_RUNNING ? 2 : s == EXEC_PENDING ? 1 : 0;
}

static const struct exec_job *job_of(const char *tag, const struct exec_job *jobs, int nj)
{
    const struct exec_job *best = NULL;
    for (int i = 0; i < nj; i++)
        if (strcmp(jobs[i].tag, tag) == 0 && (!best || rank(jobs[i].state) > rank(best->state)))
            best = &jobs[i];
    return best;
}

static void decide(const struct exec_open_attempt *a, const struct exec_job *jobs, int nj,
                   int64_t listed_ms, struct exec_action *act)
{
    memset(act, 0, sizeof *act);
    text_copy(act->attempt_id, sizeof act->attempt_id, a->attempt_id);
    if (!exec_tag_for(a->attempt_id, act->tag)) {
        act->kind = EXEC_ACT_KEEP; /* not a tag: nothing of the engine's can be its */
        act->state = a->state;
        return;
    }
    act->state = a->state;
    text_copy(act->engine_id, sizeof act->engine_id, a->engine_id);
    const struct exec_job *j = job_of(act->tag, jobs, nj);
    bool too_new = a->submitted_ms > listed_ms - EXEC_RECONCILE_SLACK_MS;

    if (j && j->state != EXEC_ENDED) {
        enum engine_state now =
            j->state == EXEC_RUNNING ? ENGINE_STATE_RUNNING : ENGINE_STATE_PENDING;
        /* A runner already heard from is not sent back to pending. */
        if (now == ENGINE_STATE_PENDING && a->state == ENGINE_STATE_RUNNING)
            now = ENGINE_STATE_RUNNING;
        act->kind = (strcmp(a->engine_id, j->id) != 0 || now != a->state) ? EXEC_ACT_UPDATE
                                                                         : EXEC_ACT_KEEP;
        act->state = now;
        text_copy(act->engine_id, sizeof act->engine_id, j->id);
        text_copy(act->node, sizeof act->node, j->node);
        if (j->state == EXEC_PENDING)
            text_copy(act->reason, sizeof act->reason, j->reason);
        return;
    }
    if (a->finished || too_new) {
        act->kind = EXEC_ACT_KEEP;
        return;
    }
    if (j) { /* ended without a finish */
        act->kind = EXEC_ACT_END;
        text_copy(act->engine_id, sizeof act->engine_id, j->id);
        text_copy(act->node, sizeof act->node, j->node);
        text_copy(act->reason, sizeof act->reason,
                  j->reason[0] ? j->reason : "The engine's job ended without the attempt "
                                             "reporting its end");
        return;
    }
    if (a->state == ENGINE_STATE_SUBMITTING) {
        act->kind = EXEC_ACT_RESUBMIT;
        return;
    }
    act->kind = EXEC_ACT_END;
    text_copy(act->reason, sizeof act->reason,
              "The engine's job vanished: it is not in the engine's list (lost in a controller "
              "crash, or ended longer ago than the engine keeps ended jobs)");
}

void exec_reconcile(const struct exec_open_attempt *attempts, int na, const struct exec_job *jobs,
                    int nj, int64_t listed_ms, struct exec_action *out, int *nout)
{
    int k = 0;
    for (int i = 0; i < na; i++)
        decide(&attempts[i], jobs, nj, listed_ms, &out[k++]);
    for (int i = 0; i < nj; i++) {
        const struct exec_job *j = &jobs[i];
        if (j->state == EXEC_ENDED)
            continue;
        char id[IDS_MAX];
        if (!exec_attempt_of(j->tag, id, sizeof id))
            continue;
        bool owned = false;
        for (int a = 0; a < na && !owned; a++)
            owned = strcmp(attempts[a].attempt_id, id) == 0;
        /* Once per tag: scancel --name takes every job of the tag. */
        for (int e = 0; e < i && !owned; e++)
            owned = jobs[e].state != EXEC_ENDED && strcmp(jobs[e].tag, j->tag) == 0;
        if (owned)
            continue;
        struct exec_action *act = &out[k++];
        memset(act, 0, sizeof *act);
        act->kind = EXEC_ACT_CANCEL;
        text_copy(act->attempt_id, sizeof act->attempt_id, id);
        text_copy(act->tag, sizeof act->tag, j->tag);
        text_copy(act->engine_id, sizeof act->engine_id, j->id);
        text_copy(act->node, sizeof act->node, j->node);
        text_copy(act->reason, sizeof act->reason, "No open attempt owns this engine job");
    }
    *nout = k;
}

const char *exec_action_name(enum exec_action_kind k)
{
    switch (k) {
    case EXEC_ACT_KEEP: return "keep";
    case EXEC_ACT_UPDATE: return "update";
    case EXEC_ACT_RESUBMIT: return "resubmit";
    case EXEC_ACT_END: return "end";
    case EXEC_ACT_CANCEL: return "cancel";
    }
    return "?";
}
