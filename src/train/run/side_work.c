/* side_work.c - one thread beside the caller (side_work.h). */
#include "train/run/side_work.h"

#include <pthread.h>
#include <stdlib.h>

#include "core/clock.h"

struct side_work {
    side_work_fn fn;
    void *ctx;
    int *items, cap, pushed, taken;
    bool closed, threaded;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
};

static void *loop(void *arg)
{
    struct side_work *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->taken == w->pushed && !w->closed)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->taken == w->pushed)
            break;
        int item = w->items[w->taken++];
        pthread_mutex_unlock(&w->mu);
        w->fn(w->ctx, item);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

struct side_work *side_work_start(side_work_fn fn, void *ctx, int cap, bool beside)
{
    struct side_work *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->items = calloc((size_t)(cap > 0 ? cap : 1), sizeof *w->items);
    if (!w->items) {
        free(w);
        return NULL;
    }
    w->fn = fn;
    w->ctx = ctx;
    w->cap = cap;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->threaded = beside && pthread_create(&w->thread, NULL, loop, w) == 0;
    return w;
}

void side_work_push(struct side_work *w, int item)
{
    if (!w->threaded) {
        w->fn(w->ctx, item);
        return;
    }
    pthread_mutex_lock(&w->mu);
    if (w->pushed < w->cap)
        w->items[w->pushed++] = item;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void side_work_finish(struct side_work *w, double *waited_s)
{
    double t0 = clock_mono_s();
    if (w->threaded) {
        pthread_mutex_lock(&w->mu);
        w->closed = true;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
    }
    if (waited_s)
        *waited_s = clock_mono_s() - t0;
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->items);
    free(w);
}
