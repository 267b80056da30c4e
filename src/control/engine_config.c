/* engine_config.c - what serve's command line declares for an engine:
 * pools (--slurm-pool, parsed by exec/pool.c), the server-to-node path
 * map (--cluster-data) and the serving engines' pools (--inference-pool).
 * See engine.h. */
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

/* A whole number from 0 to ENGINE_SERVING_MAX spelling all of [p, end). */
static bool serve_number(const char *p, const char *end, int *out)
{
    char digits[8];
    long v;
    if (end - p < 1 || end - p >= (long)sizeof digits || *p < '0' || *p > '9')
        return false;
    memcpy(digits, p, (size_t)(end - p));
    digits[end - p] = '\0';
    if (!text_parse_long(digits, 0, ENGINE_SERVING_MAX, &v))
        return false;
    *out = (int)v;
    return true;
}

int engine_serve_parse(const char *spec, struct engine_config *cfg, char *err, size_t errcap)
{
    const char *colon = strchr(spec, ':'), *end = spec + strlen(spec);
    struct engine_serve sv;
    memset(&sv, 0, sizeof sv);
    size_t name = colon ? (size_t)(colon - spec) : strlen(spec);
    int lo = 1, hi = 1;
    bool scaled = false, ok = name > 0 && name < sizeof sv.pool;
    if (ok && colon) {
        const char *dash = strchr(colon + 1, '-');
        scaled = dash != NULL;
        ok = scaled ? serve_number(colon + 1, dash, &lo) && serve_number(dash + 1, end, &hi)
                    : serve_number(colon + 1, end, &lo) && (hi = lo) > 0;
        ok = ok && hi >= 1 && lo <= hi;
    }
    if (!ok) {
        text_error(err, errcap, "--inference-pool wants POOL, POOL:N or POOL:MIN-MAX (N and MAX "
                   "from 1 to %d, MIN from 0 to MAX)", ENGINE_SERVING_MAX);
        return -1;
    }
    memcpy(sv.pool, spec, name);
    sv.pool[name] = '\0';
    sv.count = hi;
    sv.min = lo;
    sv.scaled = scaled && lo < hi;
    for (int i = 0; i < cfg->n_serve; i++)
        if (strcmp(cfg->serve[i].pool, sv.pool) == 0) {
            text_error(err, errcap, "--inference-pool %s: the pool is named twice", sv.pool);
            return -1;
        }
    if (cfg->n_serve >= ENGINE_SERVE_POOLS_MAX) {
        text_error(err, errcap, "--inference-pool %s: more than %d pools serve", sv.pool,
                   ENGINE_SERVE_POOLS_MAX);
        return -1;
    }
    cfg->serve[cfg->n_serve++] = sv;
    return 0;
}
