/* cuda_graph.c - a pass's parts as CUDA graphs where their launches repeat
 * (contract in cuda_graph.h). */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "train/cuda/cuda_ctx.h"
#include "train/cuda/cuda_graph.h"
#include "train/cuda/cuda_walk.h"

struct slot {
    unsigned char *rec; /* a walk's record, NULL: the slot is free */
    size_t len;
    void *graph;        /* its graph, NULL until the record is seen again */
    unsigned long used; /* when last matched or made (g->tick) */
};

enum next { NEXT_NONE, NEXT_EAGER, NEXT_CAPTURE, NEXT_REPLAY };

struct cuda_graphs {
    struct slot slots[CUDA_GRAPH_SLOTS];
    enum next next;        /* what cuda_graphs_play does (the walk decided) */
    struct slot *at;       /* its slot (capture, replay) */
    struct cuda_walk walk; /* this run's record, its memory kept between runs */
    unsigned long tick;
    struct cuda_graph_stats st; /* st.off: why graphs stopped */
};

struct cuda_graphs *cuda_graphs_create(void)
{
    return calloc(1, sizeof(struct cuda_graphs));
}

static void slot_clear(struct slot *s)
{
    cuda_ctx_graph_free(s->graph);
    free(s->rec);
    memset(s, 0, sizeof *s);
}

void cuda_graphs_free(struct cuda_graphs *g)
{
    if (!g)
        return;
    for (int i = 0; i < CUDA_GRAPH_SLOTS; i++)
        slot_clear(&g->slots[i]);
    free(g->walk.bytes);
    free(g);
}

void cuda_graphs_stats(const struct cuda_graphs *g, struct cuda_graph_stats *out)
{
    *out = g->st;
}

static struct slot *find(struct cuda_graphs *g)
{
    for (int i = 0; i < CUDA_GRAPH_SLOTS; i++) {
        struct slot *s = &g->slots[i];
        if (s->rec && s->len == g->walk.len && memcmp(s->rec, g->walk.bytes, s->len) == 0)
            return s;
    }
    return NULL;
}

/* Keeps this run's record in the least recently used slot (a free one
 * first); a record that cannot be copied is not kept. */
static void remember(struct cuda_graphs *g)
{
    struct slot *v = &g->slots[0];
    for (int i = 1; i < CUDA_GRAPH_SLOTS && v->rec; i++)
        if (!g->slots[i].rec || g->slots[i].used < v->used)
            v = &g->slots[i];
    slot_clear(v);
    v->rec = malloc(g->walk.len ? g->walk.len : 1);
    if (!v->rec)
        return;
    memcpy(v->rec, g->walk.bytes, g->walk.len);
    v->len = g->walk.len;
    v->used = g->tick;
}

void cuda_graphs_walk(struct cuda_graphs *g, void (*body)(void *), void *arg)
{
    g->at = NULL; /* a walk not played (its pass failed between) is dropped */
    if (g->st.off[0]) {
        g->next = NEXT_EAGER;
        return;
    }
    double t0 = clock_mono_s();
    g->walk.len = 0;
    g->walk.oom = 0;
    cuda_ctx_set_walk(&g->walk);
    body(arg);
    cuda_ctx_set_walk(NULL);
    g->next = NEXT_EAGER;
    if (!g->walk.oom) { /* else no room for the record: nothing to match */
        g->tick++;
        struct slot *s = find(g);
        if (!s) {
            remember(g);
        } else {
            s->used = g->tick;
            g->at = s;
            g->next = s->graph ? NEXT_REPLAY : NEXT_CAPTURE; /* captured at a second sight */
        }
    }
    g->st.walk_s += clock_mono_s() - t0;
}

int cuda_graphs_play(struct cuda_graphs *g, void (*body)(void *), void *arg)
{
    enum next next = g->next;
    struct slot *s = g->at;
    assert(next != NEXT_NONE); /* a walk first */
    g->next = NEXT_NONE;
    if (next == NEXT_CAPTURE) {
        if (cuda_ctx_capture_begin() == 0) {
            body(arg);
            if (cuda_ctx_capture_end(&s->graph) == 0)
                g->st.captures++;
        }
        if (!s->graph) {
            snprintf(g->st.off, sizeof g->st.off, "%s", cuda_ctx_error());
            next = NEXT_EAGER;
        }
    }
    if (next == NEXT_EAGER) {
        body(arg);
        g->st.eager++;
        return 0;
    }
    g->st.replays++;
    return cuda_ctx_graph_launch(s->graph);
}

int cuda_graphs_run(struct cuda_graphs *g, void (*body)(void *), void *arg)
{
    cuda_graphs_walk(g, body, arg);
    return cuda_graphs_play(g, body, arg);
}
