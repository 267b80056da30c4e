/* admission.c - per-account queues taken in turn (see admission.h). */
#include "train/serve/admission.h"

#include <stdlib.h>
#include <string.h>

struct waiting {
    void *item;
    long tokens;
    struct waiting *next;
};

struct account_queue {
    char id[64];
    struct waiting *head, *tail;
    int count;
};

struct admission {
    struct admission_limits lim;
    struct account_queue *acc; /* accounts that have waited, in first-seen order */
    int n_acc, cap_acc;
    int turn;                  /* the account served last */
    int running, waiting;
    long tokens;
};

struct admission *admission_new(const struct admission_limits *lim)
{
    if (lim->max_running < 1 || lim->max_tokens_in_flight < 1 || lim->max_queued < 1)
        return NULL;
    struct admission *a = calloc(1, sizeof *a);
    if (a) {
        a->lim = *lim;
        a->turn = -1;
    }
    return a;
}

void admission_free(struct admission *a)
{
    if (!a)
        return;
    for (int i = 0; i < a->n_acc; i++)
        while (a->acc[i].head) {
            struct waiting *w = a->acc[i].head;
            a->acc[i].head = w->next;
            free(w);
        }
    free(a->acc);
    free(a);
}

static struct account_queue *queue_of(struct admission *a, const char *account)
{
    for (int i = 0; i < a->n_acc; i++)
        if (strncmp(a->acc[i].id, account, sizeof a->acc[i].id - 1) == 0)
            return &a->acc[i];
    if (a->n_acc == a->cap_acc) {
        int cap = a->cap_acc ? a->cap_acc * 2 : 8;
        struct account_queue *n = realloc(a->acc, sizeof *n * (size_t)cap);
        if (!n)
            return NULL;
        a->acc = n;
        a->cap_acc = cap;
    }
    struct account_queue *q = &a->acc[a->n_acc++];
    memset(q, 0, sizeof *q);
    strncpy(q->id, account, sizeof q->id - 1);
    return q;
}

int admission_push(struct admission *a, const char *account, void *item, long tokens)
{
    if (a->waiting >= a->lim.max_queued * 4)
        return -1;
    struct account_queue *q = queue_of(a, account);
    if (!q || q->count >= a->lim.max_queued)
        return -1;
    struct waiting *w = malloc(sizeof *w);
    if (!w)
        return -1;
    *w = (struct waiting){item, tokens, NULL};
    if (q->tail)
        q->tail->next = w;
    else
        q->head = w;
    q->tail = w;
    q->count++;
    a->waiting++;
    return 0;
}

void *admission_next(struct admission *a)
{
    if (a->waiting == 0 || a->running >= a->lim.max_running)
        return NULL;
    for (int k = 1; k <= a->n_acc; k++) {
        int i = (a->turn + k) % a->n_acc;
        struct account_queue *q = &a->acc[i];
        if (!q->head)
            continue;
        struct waiting *w = q->head;
        bool fits = a->tokens + w->tokens <= a->lim.max_tokens_in_flight || a->running == 0;
        if (!fits)
            return NULL; /* its turn: nobody overtakes it, or it would starve */
        q->head = w->next;
        if (!q->head)
            q->tail = NULL;
        q->count--;
        a->waiting--;
        a->running++;
        a->tokens += w->tokens;
        a->turn = i;
        void *item = w->item;
        free(w);
        return item;
    }
    return NULL;
}

void admission_done(struct admission *a, long tokens)
{
    a->running--;
    a->tokens -= tokens;
}

bool admission_drop(struct admission *a, void *item)
{
    for (int i = 0; i < a->n_acc; i++) {
        struct account_queue *q = &a->acc[i];
        for (struct waiting **p = &q->head, *prev = NULL; *p; prev = *p, p = &(*p)->next) {
            if ((*p)->item != item)
                continue;
            struct waiting *w = *p;
            *p = w->next;
            if (q->tail == w)
                q->tail = prev;
            q->count--;
            a->waiting--;
            free(w);
            return true;
        }
    }
    return false;
}

int admission_running(const struct admission *a)
{
    return a->running;
}

int admission_waiting(const struct admission *a)
{
    return a->waiting;
}

long admission_tokens(const struct admission *a)
{
    return a->tokens;
}
