/* side_work.h - work done by one thread beside the caller: the caller
 * hands it items (indices) one at a time as they become ready, the thread
 * runs fn on each in the order handed, and side_work_finish waits for
 * every item handed and ends the thread. Reinforcement fine-tuning grades
 * each answer this way as the rollouts finish it (rft_run.c,
 * docs/rft.md). fn must touch only what no other thread touches until
 * side_work_finish returns. Without a thread (none could be started, or
 * beside false) side_work_push runs fn at once in the caller's thread,
 * so the work and its order are the same either way.
 *
 * Ownership: the caller owns ctx; the side_work is freed by
 * side_work_finish. */
#ifndef ALALLO_TRAIN_SIDE_WORK_H
#define ALALLO_TRAIN_SIDE_WORK_H

#include <stdbool.h>

struct side_work;

typedef void (*side_work_fn)(void *ctx, int item);

/* Room for cap items; NULL out of memory. */
struct side_work *side_work_start(side_work_fn fn, void *ctx, int cap, bool beside);
/* Hands over item (at most cap items in all). */
void side_work_push(struct side_work *w, int item);
/* Waits until every item handed is done, then frees w. The seconds the
 * caller waited in *waited_s (may be NULL). */
void side_work_finish(struct side_work *w, double *waited_s);

#endif
