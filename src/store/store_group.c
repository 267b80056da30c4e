/* store_group.c - the leader/follower queue of group commit. */
#include "store/store_group.h"

#include "store/store_backend.h"

void store_group_init(struct store_group *g, int slots)
{
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->head = g->tail = NULL;
    g->slots = slots < 1 ? 1 : slots > STORE_GROUP_SLOTS_MAX ? STORE_GROUP_SLOTS_MAX : slots;
    for (int i = 0; i < STORE_GROUP_SLOTS_MAX; i++)
        g->busy[i] = false;
}

static int free_slot(const struct store_group *g)
{
    for (int i = 0; i < g->slots; i++)
        if (!g->busy[i])
            return i;
    return -1;
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
        int slot = g->head ? free_slot(g) : -1;
        if (slot < 0) {
            /* Every slot leads a batch, or another leader took ours. */
            pthread_cond_wait(&g->cv, &g->mu);
            continue;
        }
        /* Lead: take everything queued so far (ourselves included, unless
         * a leader already took us: then we lead the jobs behind us). */
        g->busy[slot] = true;
        struct store_pending *batch = g->head;
        g->head = g->tail = NULL;
        pthread_mutex_unlock(&g->mu);
        commit(batch, slot, ctx);
        pthread_mutex_lock(&g->mu);
        for (struct store_pending *p = batch, *next; p; p = next) {
            next = p->next; /* read first: a waiter may leave once done is set */
            p->done = 1;
        }
        g->busy[slot] = false;
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    if (me.result)
        store_set_error("%s", me.error);
    return me.result;
}
