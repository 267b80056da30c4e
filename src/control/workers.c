/* workers.c - see workers.h. */
#include "control/workers.h"

#include <stdlib.h>
#include <string.h>

#include "control/fleet.h"
#include "control/lifecycle.h"
#include "core/ids.h"
#include "core/text.h"

bool control_worker_change_allowed(enum worker_state from, enum worker_state to)
{
    static const bool allowed[WORKER_STATE_COUNT][WORKER_STATE_COUNT] = {
        /*               active draining lost */
        [WORKER_ACTIVE] = {true, true, true},
        [WORKER_DRAINING] = {false, true, true},
        [WORKER_LOST] = {true, false, true},
    };
    if ((int)from < 0 || from >= WORKER_STATE_COUNT || (int)to < 0 || to >= WORKER_STATE_COUNT)
        return false;
    return allowed[from][to];
}

/* The state the store keeps for w; unknown text reads as lost. */
static enum worker_state state_of(const struct store_worker *w)
{
    enum worker_state s;
    return worker_state_parse(w->state, &s) ? s : WORKER_LOST;
}

/* Moves worker w from the state read into *w to `to`, when the table
 * allows it and the store still holds that state (a compare-and-set, so a
 * decision made on a stale read never undoes a newer one; with
 * silent_before_ms > 0 only while the worker has not spoken since). When
 * the state changed since *w was read, *w is read again and the move
 * decided afresh, once. ERR_CONFLICT when the move is not allowed now;
 * nothing changes then. A move to the state it is in changes nothing. */
static enum alallo_err set_state(struct control *ctl, struct store_worker *w, enum worker_state to,
                                 int64_t silent_before_ms)
{
    for (int tries = 0; tries < 2; tries++) {
        enum worker_state from = state_of(w);
        if (from == to)
            return ERR_OK;
        if (!control_worker_change_allowed(from, to))
            return ERR_CONFLICT;
        enum alallo_err e = store_worker_change_state(
            ctl->store, w->name, worker_state_name(from), worker_state_name(to), silent_before_ms);
        if (!e) {
            text_copy(w->state, sizeof w->state, worker_state_name(to));
            return ERR_OK;
        }
        if (e != ERR_CONFLICT || silent_before_ms > 0)
            return e; /* a silent worker that spoke since is not lost */
        e = store_worker_get(ctl->store, w->name, w);
        if (e)
            return e;
    }
    return ERR_CONFLICT;
}

enum alallo_err control_worker_register(struct control *ctl, struct store_worker *w)
{
    text_copy(w->state, sizeof w->state, worker_state_name(WORKER_ACTIVE));
    w->last_heartbeat_ms = w->registered_ms = clock_now_ms();
    /* A worker that registers again has restarted: whatever it ran is gone. */
    enum alallo_err e = lifecycle_worker_gone(ctl, w->name, "worker restarted");
    if (!e)
        e = store_worker_put(ctl->store, w);
    if (e)
        return e;
    fleet_changed(ctl);
    log_line("info", "worker %s registered: %d cpus, %.1f GB, %s, %.2f/h", w->name, w->cpus,
             (double)w->mem_bytes / 1e9, w->class_, w->price_per_hour);
    return ERR_OK;
}

enum alallo_err control_worker_heartbeat(struct control *ctl, const char *name,
                                         struct store_worker *w)
{
    if (!ids_valid_name(name, 64))
        return ERR_NOT_FOUND;
    enum alallo_err e = store_worker_get(ctl->store, name, w);
    if (!e)
        e = store_worker_heartbeat(ctl->store, w->name, clock_now_ms());
    if (!e && state_of(w) == WORKER_LOST) {
        /* Back from the dead: its attempts ended when it was lost. Another
         * call may have moved it first (back, then drained): *w then says
         * where it stands, and the heartbeat is answered with that. */
        e = set_state(ctl, w, WORKER_ACTIVE, 0);
        if (e == ERR_CONFLICT)
            e = ERR_OK;
        fleet_changed(ctl);
    }
    return e;
}

enum tproto_stop control_worker_stop_for(struct control *ctl, const char *worker,
                                         const char *attempt_id)
{
    struct store_attempt a;
    struct store_job *j = malloc(sizeof *j);
    /* An attempt this server does not know runs for nothing. */
    enum tproto_stop stop = TPROTO_STOP_CANCEL;
    if (j && ids_valid(attempt_id) && store_attempt_get(ctl->store, attempt_id, &a) == ERR_OK &&
        strcmp(a.worker, worker) == 0 && store_job_get(ctl->store, NULL, a.job, j) == ERR_OK)
        stop = lifecycle_stop_for(j, &a);
    free(j);
    return stop;
}

enum alallo_err control_worker_take_away(struct control *ctl, const char *name, bool spot,
                                         struct store_worker *w, struct store_attempt *open,
                                         int cap, int *n)
{
    *n = 0;
    enum alallo_err e = ids_valid_name(name, 64) ? store_worker_get(ctl->store, name, w)
                                                 : ERR_NOT_FOUND;
    if (e)
        return e;
    if (spot && strcmp(w->class_, "spot") != 0)
        return ERR_CONFLICT;
    if (state_of(w) == WORKER_ACTIVE) {
        e = set_state(ctl, w, WORKER_DRAINING, 0);
        if (e == ERR_CONFLICT)
            e = ERR_OK; /* lost meanwhile: its attempts move all the same */
    }
    if (!e)
        e = store_attempt_list_open(ctl->store, name, open, cap, n);
    if (e)
        return e;
    for (int i = 0; i < *n; i++)
        lifecycle_request_stop(ctl, open[i].job, STOP_REASON_MOVE);
    fleet_changed(ctl);
    log_line("info", "worker %s %s", name,
             spot ? "lost its spot capacity" : "drained by the operator");
    return ERR_OK;
}

enum alallo_err control_worker_hold(struct control *ctl, const char *name)
{
    struct store_worker w;
    enum alallo_err e = store_worker_get(ctl->store, name, &w);
    if (!e && state_of(&w) != WORKER_DRAINING)
        e = set_state(ctl, &w, WORKER_DRAINING, 0);
    if (e)
        return e;
    fleet_changed(ctl);
    log_line("info", "worker %s held by a serving engine", name);
    return ERR_OK;
}

void control_workers_check_lost(struct control *ctl, int64_t now_ms)
{
    struct store_worker *ws = calloc(FLEET_MAX, sizeof *ws);
    int n = 0;
    if (ws && store_worker_list(ctl->store, ws, FLEET_MAX, &n) == ERR_OK) {
        for (int i = 0; i < n; i++) {
            if (state_of(&ws[i]) == WORKER_LOST ||
                now_ms - ws[i].last_heartbeat_ms <= (int64_t)ctl->cfg.worker_timeout_s * 1000)
                continue;
            log_line("warn", "worker %s lost: no heartbeat for %d s", ws[i].name,
                     ctl->cfg.worker_timeout_s);
            /* Only if it is still silent: a heartbeat since this list was
             * read keeps it. */
            int64_t silent_before = now_ms - (int64_t)ctl->cfg.worker_timeout_s * 1000;
            if (set_state(ctl, &ws[i], WORKER_LOST, silent_before) != ERR_OK)
                continue;
            lifecycle_worker_gone(ctl, ws[i].name, "worker lost");
            fleet_changed(ctl);
        }
    }
    free(ws);
}
