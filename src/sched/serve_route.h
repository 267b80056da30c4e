/* serve_route.h - which serving engine a generation goes to, on a cluster
 * (docs/serving.md, "On a cluster"): pure policy over what the engines
 * last reported of themselves (control/serving_registry.h gathers it).
 *
 * The rule: among the engines heard from lately, one that has the
 * request's base loaded (and its adapter too, if it has one: no load at
 * all), the least busy of those (running + waiting); else the one with
 * the most free model memory, so the base loads where it fits without
 * pushing another out (ties: the least busy, then the first). None heard
 * from lately: none. */
#ifndef ALALLO_SCHED_SERVE_ROUTE_H
#define ALALLO_SCHED_SERVE_ROUTE_H

#include <stdbool.h>

struct serve_route_engine {
    bool fresh;           /* heard from lately                          */
    bool has_base;        /* its models loaded hold the request's base  */
    bool has_adapter;     /* ... and its adapter (false when none asked) */
    long long free_bytes; /* model memory less what is loaded           */
    long busy;            /* running + waiting                          */
};

/* The index of the engine to use, or -1 when none is fresh. */
int serve_route_pick(const struct serve_route_engine *e, int n);

#endif
