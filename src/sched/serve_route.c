/* serve_route.c - the choice of a serving engine (see serve_route.h). */
#include "sched/serve_route.h"

/* How well engine e suits the request: 2 base and adapter loaded, 1 the
 * base, 0 neither. */
static int loaded_rank(const struct serve_route_engine *e)
{
    return e->has_base ? 1 + (e->has_adapter ? 1 : 0) : 0;
}

/* Whether a is a better choice than b (both fresh). */
static bool better(const struct serve_route_engine *a, const struct serve_route_engine *b)
{
    int ra = loaded_rank(a), rb = loaded_rank(b);
    if (ra != rb)
        return ra > rb;
    if (ra == 0 && a->free_bytes != b->free_bytes)
        return a->free_bytes > b->free_bytes;
    return a->busy < b->busy;
}

int serve_route_pick(const struct serve_route_engine *e, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (e[i].fresh && (best < 0 || better(&e[i], &e[best])))
            best = i;
    return best;
}
