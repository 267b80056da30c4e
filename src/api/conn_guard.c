/* conn_guard.c - the waiting connections as one list, oldest first. The
 * contract is in conn_guard.h. */
#include "api/conn_guard.h"

#include <linux/sockios.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

enum entry_state { WAITING, BUSY, CUT };

struct conn_guard_entry {
    int fd;
    enum entry_state state;
    int64_t since_ms;                      /* when it began to wait */
    struct conn_guard_entry *prev, *next;  /* in the waiting list while WAITING */
    /* A download with a floor rate (conn_guard_floor), in the watched list. */
    bool watched;
    int64_t floor_bps, sent, win_start_ms, win_delivered;
    struct conn_guard_entry *wprev, *wnext;
};

struct conn_guard {
    pthread_mutex_t mu;
    int max_waiting;
    int64_t wait_ms;
    conn_guard_cut_fn cut;
    conn_guard_unsent_fn unsent;
    struct conn_guard_entry *head, *tail; /* waiting, oldest first */
    struct conn_guard_entry *watched;     /* busy downloads with a floor */
    int waiting, busy;
    uint64_t cut_full, cut_late, cut_slow;
};

static void default_cut(int fd) { shutdown(fd, SHUT_RDWR); }

static int64_t default_unsent(int fd)
{
    int n = 0;
    return ioctl(fd, SIOCOUTQ, &n) == 0 && n > 0 ? n : 0;
}

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
    g->unsent = default_unsent;
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

static void unwatch(struct conn_guard *g, struct conn_guard_entry *e)
{
    if (!e->watched)
        return;
    if (e->wprev)
        e->wprev->wnext = e->wnext;
    else
        g->watched = e->wnext;
    if (e->wnext)
        e->wnext->wprev = e->wprev;
    e->wprev = e->wnext = NULL;
    e->watched = false;
}

void conn_guard_set_unsent(struct conn_guard *g, conn_guard_unsent_fn unsent)
{
    pthread_mutex_lock(&g->mu);
    g->unsent = unsent ? unsent : default_unsent;
    pthread_mutex_unlock(&g->mu);
}

void conn_guard_floor(struct conn_guard *g, struct conn_guard_entry *e, int64_t floor_bps,
                      int64_t now_ms)
{
    pthread_mutex_lock(&g->mu);
    if (e->state == BUSY && !e->watched && floor_bps > 0) {
        e->watched = true;
        e->floor_bps = floor_bps;
        e->sent = e->win_delivered = 0;
        e->win_start_ms = now_ms;
        e->wprev = NULL;
        e->wnext = g->watched;
        if (g->watched)
            g->watched->wprev = e;
        g->watched = e;
    }
    pthread_mutex_unlock(&g->mu);
}

void conn_guard_sent(struct conn_guard *g, struct conn_guard_entry *e, int64_t n)
{
    pthread_mutex_lock(&g->mu);
    e->sent += n;
    pthread_mutex_unlock(&g->mu);
}

/* Ends the window of each watched download that is due: one whose reader
 * took less than the floor in it, with bytes still waiting for it, is cut. */
static int check_floors(struct conn_guard *g, int64_t now_ms)
{
    int n = 0;
    for (struct conn_guard_entry *e = g->watched, *next; e; e = next) {
        next = e->wnext;
        int64_t span = now_ms - e->win_start_ms;
        if (span < CONN_GUARD_FLOOR_WINDOW_MS)
            continue;
        int64_t unsent = g->unsent(e->fd);
        int64_t delivered = e->sent - unsent;
        if (unsent > 0 && (delivered - e->win_delivered) * 1000 < e->floor_bps * span) {
            unwatch(g, e);
            g->cut(e->fd);
            g->cut_slow++;
            n++;
            continue;
        }
        e->win_start_ms = now_ms;
        e->win_delivered = delivered;
    }
    return n;
}

void conn_guard_wait(struct conn_guard *g, struct conn_guard_entry *e, int64_t now_ms)
{
    pthread_mutex_lock(&g->mu);
    unwatch(g, e);
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
    unwatch(g, e);
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
    n += check_floors(g, now_ms);
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
    *out = (struct conn_guard_stats){g->waiting, g->busy, g->cut_full, g->cut_late, g->cut_slow};
    pthread_mutex_unlock(&g->mu);
}
