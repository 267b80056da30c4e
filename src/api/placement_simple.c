/* placement_simple.c - round-robin between accounts, oldest job first.
 * Remembers the last service time of up to PLACEMENT_ACCOUNTS accounts in
 * memory; an account forgotten (table full, or a restart) counts as never
 * served, which only ever moves it forward in the turn. */
#include "api/placement_simple.h"

#include "core/text.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define PLACEMENT_ACCOUNTS 1024

struct served {
    char account[IDS_MAX];
    int64_t tick;
};

struct placement {
    pthread_mutex_t mu;
    struct served rows[PLACEMENT_ACCOUNTS];
    int n;
};

struct placement *placement_new(void)
{
    struct placement *p = calloc(1, sizeof *p);
    if (p)
        pthread_mutex_init(&p->mu, NULL);
    return p;
}

void placement_free(struct placement *p)
{
    if (!p)
        return;
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static struct served *find(struct placement *p, const char *account, int create)
{
    for (int i = 0; i < p->n; i++)
        if (strcmp(p->rows[i].account, account) == 0)
            return &p->rows[i];
    if (!create)
        return NULL;
    int slot = p->n;
    if (p->n < PLACEMENT_ACCOUNTS) {
        p->n++;
    } else {
        /* Full: reuse the row served longest ago. */
        slot = 0;
        for (int i = 1; i < p->n; i++)
            if (p->rows[i].tick < p->rows[slot].tick)
                slot = i;
    }
    memset(&p->rows[slot], 0, sizeof p->rows[slot]);
    text_copy(p->rows[slot].account, IDS_MAX, account);
    return &p->rows[slot];
}

int placement_pick(struct placement *p, const struct store_claim_candidate *c, int n,
                   int64_t tick)
{
    if (n <= 0)
        return -1;
    pthread_mutex_lock(&p->mu);
    int best = -1;
    int64_t best_tick = 0;
    for (int i = 0; i < n; i++) {
        struct served *s = find(p, c[i].account, 0);
        int64_t t = s ? s->tick : 0;
        if (best < 0 || t < best_tick || (t == best_tick && c[i].seq < c[best].seq)) {
            best = i;
            best_tick = t;
        }
    }
    struct served *s = find(p, c[best].account, 1);
    s->tick = tick;
    pthread_mutex_unlock(&p->mu);
    return best;
}

void placement_unpick(struct placement *p, const char *account, int64_t previous_tick)
{
    pthread_mutex_lock(&p->mu);
    struct served *s = find(p, account, 0);
    if (s)
        s->tick = previous_tick;
    pthread_mutex_unlock(&p->mu);
}

int64_t placement_last_served(struct placement *p, const char *account)
{
    pthread_mutex_lock(&p->mu);
    struct served *s = find(p, account, 0);
    int64_t t = s ? s->tick : 0;
    pthread_mutex_unlock(&p->mu);
    return t;
}
