/* conn_guard.c - the waiting connections as one list, oldest first. The
 * contract is in conn_guard.h. */
#include "api/conn_guard.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>

enum entry_state { WAITING, BUSY, CUT };

struct conn_guard_entry {
    int fd;
    enum entry_state state;
    int64_t since_ms;                      /* when it began to wait */
    struct conn_guard_entry *prev, *next;  /* in the waiting list while WAITING */
};

struct conn_guard {
    pthread_mutex_t mu;
    int max_waiting;
    int64_t wait_ms;
    conn_guard_cut_fn cut;
    struct conn_guard_entry *head, *tail; /* waiting, oldest first */
    int waiting, busy;
    uint64_t cut_full, cut_late;
};

static void default_cut(int fd) { shutdown(fd, SHUT_RDWR); }

struct conn_guard *conn_guard_new(int max_waiting, int64_t wait_ms, conn_guard_cut_fn cut)
{
    if (max_waiting < 1 || wait_ms <= 0)
        return NULL;
    struct conn_guard *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    if (pthread_mutex_init(&g->mu, NULL)) {
        free(g);
        return NULL;
    }
    g->max_waiting = max_waiting;
    g->wait_ms = wait_ms;
    g->cut = cut ? cut : default_cut;
    return g;
}

void conn_guard_free(struct conn_guard *g)
{
    if (!g)
        return;
    /* Busy and cut entries are owned by their connections until close;
     * at free time the server has stopped, so only waiting ones remain
     * reachable here. */
    for (struct conn_guard_entry *e = g->head, *n; e; e = n) {
        n = e->next;
        free(e);
    }
    pthread_mutex_destroy(&g->mu);
    free(g);
}

static void unlink_waiting(struct conn_guard *g, struct conn_guard_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        g->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        g->tail = e->prev;
    e->prev = e->next = NULL;
    g->waiting--;
}

static void append_waiting(struct conn_guard *g, struct conn_guard_entry *e, int64_t now_ms)
{
    e->state = WAITING;
    e->since_ms = now_ms;
    e->prev = g->tail;
    e->next = NULL;
    if (g->tail)
        g->tail->next = e;
    else
        g->head = e;
    g->tail = e;
    g->waiting++;
}

/* Cuts e (waiting) while the lock is held: the descriptor cannot be closed
 * meanwhile, because its connection must take the lock to close. */
static void cut_waiting(struct conn_guard *g, struct conn_guard_entry *e)
{
    unlink_waiting(g, e);
    e->state = CUT;
    g->cut(e->fd);
}

struct conn_guard_entry *conn_guard_open(struct conn_guard *g, int fd, int64_t now_ms)
{
    struct conn_guard_entry *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->fd = fd;
    pthread_mutex_lock(&g->mu);
    append_waiting(g, e, now_ms);
    if (g->waiting > g->max_waiting) {
        cut_waiting(g, g->head);
        g->cut_full++;
    }
    pthread_mutex_unlock(&g->mu);
    return e;
}

int conn_guard_busy(struct conn_guard *g, struct conn_guard_entry *e)
{
    pthread_mutex_lock(&g->mu);
    int ok = e->state != CUT;
    if (e->state == WAITING) {
        unlink_waiting(g, e);
        e->state = BUSY;
        g->busy++;
    }
    pthread_mutex_unlock(&g->mu);
    return ok;
}

void conn_guard_wait(struct conn_guard *g, struct conn_guard_entry *e, int64_t now_ms)
{
    pthread_mutex_lock(&g->mu);
    if (e->state == BUSY) {
        g->busy--;
        append_waiting(g, e, now_ms);
        if (g->waiting > g->max_waiting) {
            cut_waiting(g, g->head);
            g->cut_full++;
        }
    }
    pthread_mutex_unlock(&g->mu);
}

void conn_guard_close(struct conn_guard *g, struct conn_guard_entry *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&g->mu);
    if (e->state == WAITING)
        unlink_waiting(g, e);
    else if (e->state == BUSY)
        g->busy--;
    pthread_mutex_unlock(&g->mu);
    free(e);
}

int conn_guard_expire(struct conn_guard *g, int64_t now_ms)
{
    int n = 0;
    pthread_mutex_lock(&g->mu);
    while (g->head && now_ms - g->head->since_ms >= g->wait_ms) {
        cut_waiting(g, g->head);
        g->cut_late++;
        n++;
    }
    pthread_mutex_unlock(&g->mu);
    return n;
}

int64_t conn_guard_next_due(struct conn_guard *g, int64_t now_ms)
{
    pthread_mutex_lock(&g->mu);
    int64_t due = -1;
    if (g->head) {
        due = g->head->since_ms + g->wait_ms - now_ms;
        if (due < 0)
            due = 0;
    }
    pthread_mutex_unlock(&g->mu);
    return due;
}

void conn_guard_get_stats(struct conn_guard *g, struct conn_guard_stats *out)
{
    pthread_mutex_lock(&g->mu);
    *out = (struct conn_guard_stats){g->waiting, g->busy, g->cut_full, g->cut_late};
    pthread_mutex_unlock(&g->mu);
}
