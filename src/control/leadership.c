/* leadership.c - see leadership.h. */
#include "control/leadership.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "store/leader_lock.h"

struct leadership {
    struct leader_lock *lock;
    char my_url[LEADER_URL_MAX];
    pthread_mutex_t mu; /* owns leader_url */
    char leader_url[LEADER_URL_MAX]; /* "" when unknown */
};

int leadership_open(struct control *ctl, const char *where, const char *my_url, char *err,
                    size_t errcap)
{
    struct leadership *l = calloc(1, sizeof *l);
    if (!l) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    if (!text_copy(l->my_url, sizeof l->my_url, my_url)) {
        snprintf(err, errcap, "the server's URL is longer than %d bytes", LEADER_URL_MAX - 1);
        free(l);
        return -1;
    }
    if (leader_lock_open(where, &l->lock, err, errcap) != ERR_OK) {
        free(l);
        return -1;
    }
    pthread_mutex_init(&l->mu, NULL);
    ctl->lead = l;
    return 0;
}

static void set_leader_url(struct leadership *l, const char *url)
{
    pthread_mutex_lock(&l->mu);
    text_copy(l->leader_url, sizeof l->leader_url, url);
    pthread_mutex_unlock(&l->mu);
}

enum leadership_change leadership_step(struct control *ctl)
{
    struct leadership *l = ctl->lead;
    bool was = control_leads(ctl);
    enum leader_lock_state s = leader_lock_try(l->lock, l->my_url);
    if (s != LEADER_LOCK_HELD) {
        atomic_store(&ctl->leading, 0);
        char url[LEADER_URL_MAX] = "";
        if (leader_lock_url(l->lock, url, sizeof url) != ERR_OK || strcmp(url, l->my_url) == 0)
            url[0] = '\0'; /* our own URL, left by an earlier run: not a leader */
        set_leader_url(l, url);
        if (s == LEADER_LOCK_LOST || was) {
            log_line("error", "this server has lost the leadership; it stops leading now");
            return LEADERSHIP_LOST;
        }
        return LEADERSHIP_SAME;
    }
    if (was)
        return LEADERSHIP_SAME;
    set_leader_url(l, "");
    log_line("info", "this server is now the leader (%s)", l->my_url);
    return LEADERSHIP_TAKEN; /* the caller takes the lead (service.h) */
}

bool control_leads(struct control *ctl)
{
    return atomic_load(&ctl->leading) != 0;
}

bool leadership_leader_url(struct control *ctl, char *out, size_t cap)
{
    struct leadership *l = ctl->lead;
    if (!l || control_leads(ctl))
        return false;
    pthread_mutex_lock(&l->mu);
    bool ok = l->leader_url[0] && text_copy(out, cap, l->leader_url);
    pthread_mutex_unlock(&l->mu);
    return ok;
}

void leadership_close(struct control *ctl)
{
    struct leadership *l = ctl->lead;
    if (!l)
        return;
    atomic_store(&ctl->leading, 0);
    leader_lock_close(l->lock);
    pthread_mutex_destroy(&l->mu);
    free(l);
    ctl->lead = NULL;
}
