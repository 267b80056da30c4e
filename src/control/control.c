/* control.c - see control.h. */
#include "control/control.h"
#include "control/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control/catalog.h"
#include "control/fleet.h"
#include "control/lifecycle.h"
#include "control/sched_link.h"
#include "control/webhook_events.h"
#include "core/worker_state.h"

void control_config_defaults(struct control_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->worker_timeout_s = 10;
    cfg->heartbeat_s = 2;
    cfg->time_limit_s = 12 * 3600;
    cfg->budget_multiple = 2.0;
    cfg->start_timeout_s = 300;
    cfg->start_tries = 3;
    cfg->plan_scale = 1.0;
    cfg->pass_reuse_s = 0.5;
}

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
