/* service.c - see service.h. */
#include "control/service.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "control/catalog.h"
#include "control/engine.h"
#include "control/fleet.h"
#include "control/lifecycle.h"
#include "control/sched_link.h"
#include "control/webhook_events.h"
#include "core/worker_state.h"

int control_open(struct control *ctl, struct store *store, char *err, size_t errcap)
{
    ctl->store = store;
    store_set_job_hook(store, webhook_events_hook, NULL);
    ctl->catalog = catalog_new(ctl->cfg.models_dir);
    ctl->sched = sched_link_new();
    if (!ctl->catalog || !ctl->sched) {
        snprintf(err, errcap, "out of memory");
        goto fail;
    }
    atomic_store(&ctl->leading, 0);
    if (!ctl->cfg.standby)
        control_begin_leading(ctl);
    else if (sched_link_load_history(ctl->sched, store) != ERR_OK)
        log_line("warn", "calibration history could not be read: %s", store_last_error());
    return 0;
fail:
    catalog_free(ctl->catalog);
    sched_link_free(ctl->sched);
    ctl->catalog = NULL;
    ctl->sched = NULL;
    ctl->store = NULL;
    return -1;
}

void control_begin_leading(struct control *ctl)
{
    if (sched_link_reload(ctl->sched, ctl->store) != ERR_OK)
        log_line("warn", "calibration history could not be read: %s", store_last_error());
    /* Workers known from before get a fresh grace period: they could not
     * reach a server that was not running. */
    struct store_worker *ws = calloc(FLEET_MAX, sizeof *ws);
    int nw = 0;
    enum worker_state state;
    if (ws && store_worker_list(ctl->store, ws, FLEET_MAX, &nw) == ERR_OK)
        for (int i = 0; i < nw; i++)
            if (!worker_state_parse(ws[i].state, &state) || state != WORKER_LOST)
                store_worker_heartbeat(ctl->store, ws[i].name, clock_now_ms());
    free(ws);
    fleet_changed(ctl);
    lifecycle_repair_partial_models(ctl);
    atomic_store(&ctl->leading, 1);
}

enum leadership_change control_leadership_step(struct control *ctl)
{
    enum leadership_change ch = leadership_step(ctl);
    if (ch == LEADERSHIP_TAKEN)
        control_begin_leading(ctl);
    return ch;
}

void control_close(struct control *ctl)
{
    engine_stop(ctl->engine); /* its thread uses the store */
    store_close(ctl->store);
    catalog_free(ctl->catalog);
    sched_link_free(ctl->sched);
    ctl->store = NULL;
    ctl->catalog = NULL;
    ctl->sched = NULL;
}
