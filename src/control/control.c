/* control.c - see control.h. */
#include "control/control.h"

#include <string.h>

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
