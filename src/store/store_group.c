/* store_group.c - the leader/follower queue of group commit. */
#include "store/store_group.h"

#include "store/store_backend.h"

void store_group_init(struct store_group *g)
{
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->head = g->tail = NULL;
    g->committing = 0;
}

void store_group_destroy(struct store_group *g)
{
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
}

enum alallo_err store_group_insert(struct store_group *g, struct store_job *job,
                                   const struct store_event *first_event,
                                   store_group_commit_fn commit, void *ctx)
{
    struct store_pending me = {.job = job, .event = first_event};
    pthread_mutex_lock(&g->mu);
    if (g->tail)
        g->tail->next = &me;
    else
        g->head = &me;
    g->tail = &me;
    while (!me.done) {
        if (g->committing) {
            pthread_cond_wait(&g->cv, &g->mu);
            continue;
        }
        /* Lead: take everything queued so far, ourselves included. */
        g->committing = 1;
        struct store_pending *batch = g->head;
        g->head = g->tail = NULL;
        pthread_mutex_unlock(&g->mu);
        commit(batch, ctx);
        pthread_mutex_lock(&g->mu);
        for (struct store_pending *p = batch, *next; p; p = next) {
            next = p->next; /* read first: a waiter may leave once done is set */
            p->done = 1;
        }
        g->committing = 0;
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    if (me.result)
        store_set_error("%s", me.error);
    return me.result;
}
