/* fleet.c - the cached picture of the capacity. */
#include "control/fleet.h"

#include "control/sched_link.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct fleet_cache {
    pthread_mutex_t mu;
    struct fleet f;
    int64_t read_ms; /* 0: never or invalidated */
};

struct fleet_cache *fleet_cache_new(void)
{
    struct fleet_cache *c = calloc(1, sizeof *c);
    if (c)
        pthread_mutex_init(&c->mu, NULL);
    return c;
}

void fleet_cache_free(struct fleet_cache *c)
{
    if (!c)
        return;
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static void read_fleet(struct control *ctl, struct fleet *f)
{
    memset(f, 0, sizeof *f);
    struct store_worker *all = calloc(FLEET_MAX, sizeof *all);
    int n = 0;
    if (!all || store_worker_list(ctl->store, all, FLEET_MAX, &n)) {
        free(all);
        return;
    }
    /* Every open attempt in one read, by worker name like the workers. */
    struct store_attempt *open = calloc(FLEET_MAX, sizeof *open);
    int n_open = 0;
    if (!open || store_attempt_list_open(ctl->store, "", open, FLEET_MAX, &n_open))
        n_open = 0;
    int cursor = 0;
    for (int i = 0; i < n; i++) {
        bool busy = fleet_attempt_of(open, n_open, &cursor, all[i].name) != NULL;
        if (strcmp(all[i].state, "lost") == 0)
            continue;
        f->workers[f->n] = all[i];
        f->idle[f->n] = !busy && strcmp(all[i].state, "active") == 0;
        f->n++;
    }
    free(open);
    free(all);
    long counts[JOB_STATUS_COUNT];
    if (store_job_count_by_status(ctl->store, counts) == ERR_OK)
        f->waiting = counts[JOB_QUEUED] + counts[JOB_RESCHEDULING];
}

void fleet_snapshot(struct control *ctl, struct fleet *out)
{
    struct fleet_cache *c = ctl->fleet;
    int64_t now = clock_now_ms();
    pthread_mutex_lock(&c->mu);
    if (!c->read_ms || now - c->read_ms > FLEET_TTL_MS || now < c->read_ms) {
        read_fleet(ctl, &c->f);
        c->read_ms = now;
    }
    memcpy(out, &c->f, sizeof *out);
    pthread_mutex_unlock(&c->mu);
}

void fleet_invalidate(struct control *ctl)
{
    if (ctl->sched)
        sched_link_invalidate(ctl->sched);
    pthread_mutex_lock(&ctl->fleet->mu);
    ctl->fleet->read_ms = 0;
    pthread_mutex_unlock(&ctl->fleet->mu);
}

void fleet_changed(struct control *ctl)
{
    fleet_invalidate(ctl);
    if (ctl->sched)
        sched_link_forget_pass(ctl->sched);
}

const struct store_attempt *fleet_attempt_of(const struct store_attempt *open, int n,
                                             int *cursor, const char *name)
{
    while (*cursor < n && strcmp(open[*cursor].worker, name) < 0)
        (*cursor)++;
    return *cursor < n && strcmp(open[*cursor].worker, name) == 0 ? &open[*cursor] : NULL;
}
