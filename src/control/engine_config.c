/* engine_config.c - what serve's command line declares for an engine:
 * pools (--slurm-pool, parsed by exec/pool.c) and the server-to-node path
 * map (--cluster-data). See engine.h. */
#include <string.h>

#include "control/engine.h"
#include "core/text.h"

bool engine_map_path(const struct engine_config *cfg, const char *path, char *out, size_t cap)
{
    size_t n = strlen(cfg->map_from);
    if (n > 0 && strncmp(path, cfg->map_from, n) == 0 && (path[n] == '/' || path[n] == '\0'))
        return text_printf(out, cap, "%s%s", cfg->map_to, path + n);
    return text_copy(out, cap, path);
}

int engine_pool_parse(const char *spec, struct engine_pool *p, char *err, size_t errcap)
{
    memset(p, 0, sizeof *p);
    p->lead_s = ENGINE_DEFAULT_LEAD_S;
    return exec_pool_parse(spec, &p->decl, err, errcap) == ERR_OK ? 0 : -1;
}
