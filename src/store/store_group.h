/* store_group.h - group commit of job creations, shared by both store
 * implementations: concurrent store_job_insert() calls queue their job; a
 * caller that finds jobs queued and a leader's slot free becomes a leader,
 * takes every job queued so far and hands them to the implementation's
 * commit function (one transaction on that slot's connection), then wakes
 * the others. SQLite has one slot (one writer); PostgreSQL several, so that
 * one batch's execution overlaps another's flush. Nobody returns before
 * the commit that holds their job has returned. Each waiter sleeps on its
 * own semaphore and is woken once, when its commit is done, or when a slot
 * is free and it heads the queue (it then leads): a commit never wakes
 * every waiter (with 64 at once that herd cost most of serve's CPU).
 * Internal to src/store/. */
#ifndef ALALLO_STORE_GROUP_H
#define ALALLO_STORE_GROUP_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "store/store.h"

/* One queued job; lives on its caller's stack until done. */
struct store_pending {
    struct store_job *job;
    const struct store_event *event;
    enum alallo_err result; /* set by the commit function */
    char error[256];        /* its store_last_error() text when result != ERR_OK */
    atomic_int done;        /* set last by the leader: then the entry is its caller's again */
    sem_t wake;             /* posted when done, or when this caller is to lead */
    struct store_pending *next;
};

#define STORE_GROUP_SLOTS_MAX 8

struct store_group {
    pthread_mutex_t mu; /* owns the queue and the slots */
    struct store_pending *head, *tail;
    int slots;                            /* leaders at once, 1..STORE_GROUP_SLOTS_MAX */
    bool busy[STORE_GROUP_SLOTS_MAX];     /* slot i has a leader */
};

/* Writes every job of the list `batch` in one transaction on the
 * connection of `slot` and sets each one's result (and error). Runs on a
 * leader's thread; never two at once on one slot. */
typedef void (*store_group_commit_fn)(struct store_pending *batch, int slot, void *ctx);

/* A group with `slots` leaders at most at once (1..STORE_GROUP_SLOTS_MAX). */
void store_group_init(struct store_group *g, int slots);
void store_group_destroy(struct store_group *g);

/* Queues job (and its first event) and returns its result once a commit
 * that holds it has returned; sets store_last_error() on failure. */
enum alallo_err store_group_insert(struct store_group *g, struct store_job *job,
                                   const struct store_event *first_event,
                                   store_group_commit_fn commit, void *ctx);

#endif
