/* store_group.c - the leader/follower queue of group commit. */
#include "store/store_group.h"

#include "store/store_backend.h"

void store_group_init(struct store_group *g, int slots)
{
    pthread_mutex_init(&g->mu, NULL);
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
}

/* Hands the entries of a committed batch back to their callers (the
 * leader's own entry, `me`, needs no wake-up). Called with g->mu held.
 * Each entry's post comes before its `done`: once done is set its caller
 * may return and its entry, semaphore included, is gone. */
static void release_batch(struct store_pending *batch, struct store_pending *me)
{
    for (struct store_pending *p = batch, *next; p; p = next) {
        next = p->next;
        if (p != me)
            sem_post(&p->wake);
        atomic_store_explicit(&p->done, 1, memory_order_release);
    }
}

enum alallo_err store_group_insert(struct store_group *g, struct store_job *job,
                                   const struct store_event *first_event,
                                   store_group_commit_fn commit, void *ctx)
{
    struct store_pending me = {.job = job, .event = first_event};
    atomic_init(&me.done, 0);
    sem_init(&me.wake, 0, 0);
    pthread_mutex_lock(&g->mu);
    if (g->tail)
        g->tail->next = &me;
    else
        g->head = &me;
    g->tail = &me;
    for (;;) {
        if (atomic_load_explicit(&me.done, memory_order_acquire))
            break;
        int slot = g->head ? free_slot(g) : -1;
        if (slot < 0) {
            /* Every slot leads a batch, or another leader took ours: sleep
             * until our commit is done or we are called to lead. */
            pthread_mutex_unlock(&g->mu);
            sem_wait(&me.wake);
            if (atomic_load_explicit(&me.done, memory_order_acquire))
                goto out; /* done: the leader is finished with our entry */
            pthread_mutex_lock(&g->mu);
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
        release_batch(batch, &me);
        g->busy[slot] = false;
        /* Jobs queued meanwhile: the first of them leads them. */
        if (g->head)
            sem_post(&g->head->wake);
    }
    pthread_mutex_unlock(&g->mu);
out:
    sem_destroy(&me.wake);
    if (me.result)
        store_set_error("%s", me.error);
    return me.result;
}
