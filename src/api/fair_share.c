/* fair_share.c - see fair_share.h. */
#include "api/fair_share.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/text.h"

#define ACCOUNT_MAX 64

/* An account that holds or waits for a slot; forgotten when it does neither. */
struct account {
    char id[ACCOUNT_MAX];
    int held, waiting;
};

struct waiter {
    int account; /* index in accounts */
    uint64_t seq; /* arrival order */
    bool used;
};

struct fair_share {
    pthread_mutex_t mu;
    pthread_cond_t changed;
    int slots, free_slots, max_waiting, n_waiting;
    uint64_t next_seq;
    int n_accounts; /* capacity of accounts: slots + max_waiting */
    struct account *accounts;
    struct waiter *waiters; /* max_waiting of them */
};

struct fair_share *fair_share_new(int slots, int max_waiting)
{
    if (slots < 1 || max_waiting < 0)
        return NULL;
    struct fair_share *fs = calloc(1, sizeof *fs);
    if (!fs)
        return NULL;
    fs->slots = fs->free_slots = slots;
    fs->max_waiting = max_waiting;
    fs->n_accounts = slots + max_waiting;
    fs->accounts = calloc((size_t)fs->n_accounts, sizeof *fs->accounts);
    fs->waiters = calloc((size_t)(max_waiting ? max_waiting : 1), sizeof *fs->waiters);
    pthread_condattr_t ca;
    bool ok = fs->accounts && fs->waiters && pthread_condattr_init(&ca) == 0;
    if (ok) {
        ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
             pthread_cond_init(&fs->changed, &ca) == 0;
        pthread_condattr_destroy(&ca);
    }
    if (ok && pthread_mutex_init(&fs->mu, NULL) != 0) {
        pthread_cond_destroy(&fs->changed);
        ok = false;
    }
    if (!ok) {
        free(fs->accounts);
        free(fs->waiters);
        free(fs);
        return NULL;
    }
    return fs;
}

void fair_share_free(struct fair_share *fs)
{
    if (!fs)
        return;
    pthread_cond_destroy(&fs->changed);
    pthread_mutex_destroy(&fs->mu);
    free(fs->accounts);
    free(fs->waiters);
    free(fs);
}

/* The index of account `id`; with `add`, a free entry made its own. -1
 * when there is none (the table holds every account that holds or waits,
 * so a full one means a caller's id was never taken). */
static int find_account(struct fair_share *fs, const char *id, bool add)
{
    int unused = -1;
    for (int i = 0; i < fs->n_accounts; i++) {
        struct account *a = &fs->accounts[i];
        if (a->held == 0 && a->waiting == 0) {
            if (unused < 0)
                unused = i;
        } else if (strcmp(a->id, id) == 0) {
            return i;
        }
    }
    if (!add || unused < 0)
        return -1;
    text_copy(fs->accounts[unused].id, sizeof fs->accounts[unused].id, id);
    return unused;
}

/* Whether a caller of an account that holds `held` slots, arrived as `seq`,
 * comes before every waiter: a waiter of an account holding fewer slots,
 * or as many and arrived earlier, comes first. */
static bool first_in_line(const struct fair_share *fs, int held, uint64_t seq)
{
    for (int i = 0; i < fs->max_waiting; i++) {
        const struct waiter *w = &fs->waiters[i];
        if (!w->used || w->seq == seq)
            continue;
        int wh = fs->accounts[w->account].held;
        if (wh < held || (wh == held && w->seq < seq))
            return false;
    }
    return true;
}

static void deadline_after(struct timespec *ts, int64_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

bool fair_share_take(struct fair_share *fs, const char *account, int64_t wait_ms)
{
    if (!account || !account[0])
        return false;
    pthread_mutex_lock(&fs->mu);
    bool taken = false;
    int a = find_account(fs, account, true);
    if (a < 0)
        goto out;
    struct account *acc = &fs->accounts[a];
    uint64_t seq = ++fs->next_seq;
    if (fs->free_slots > 0 && first_in_line(fs, acc->held, seq)) {
        taken = true;
        goto out;
    }
    if (wait_ms <= 0 || fs->n_waiting >= fs->max_waiting || acc->waiting >= fs->slots)
        goto out;
    int wi = 0;
    while (fs->waiters[wi].used)
        wi++; /* n_waiting < max_waiting: one is free */
    fs->waiters[wi] = (struct waiter){.account = a, .seq = seq, .used = true};
    fs->n_waiting++;
    acc->waiting++;
    struct timespec until;
    deadline_after(&until, wait_ms);
    for (;;) {
        if (fs->free_slots > 0 && first_in_line(fs, acc->held, seq)) {
            taken = true;
            break;
        }
        if (pthread_cond_timedwait(&fs->changed, &fs->mu, &until) != 0) {
            /* Timed out; a slot freed at the same moment still counts. */
            taken = fs->free_slots > 0 && first_in_line(fs, acc->held, seq);
            break;
        }
    }
    fs->waiters[wi].used = false;
    fs->n_waiting--;
    acc->waiting--;
    pthread_cond_broadcast(&fs->changed); /* the line changed: the next may go */
out:
    if (taken) {
        fs->free_slots--;
        fs->accounts[a].held++;
    }
    pthread_mutex_unlock(&fs->mu);
    return taken;
}

void fair_share_give(struct fair_share *fs, const char *account)
{
    pthread_mutex_lock(&fs->mu);
    int a = find_account(fs, account, false);
    if (a >= 0 && fs->accounts[a].held > 0) {
        fs->accounts[a].held--;
        fs->free_slots++;
        pthread_cond_broadcast(&fs->changed);
    }
    pthread_mutex_unlock(&fs->mu);
}

void fair_share_count(struct fair_share *fs, const char *account, int *held, int *waiting)
{
    pthread_mutex_lock(&fs->mu);
    int a = find_account(fs, account, false);
    if (held)
        *held = a >= 0 ? fs->accounts[a].held : 0;
    if (waiting)
        *waiting = a >= 0 ? fs->accounts[a].waiting : 0;
    pthread_mutex_unlock(&fs->mu);
}
