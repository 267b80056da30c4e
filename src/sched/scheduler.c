/* scheduler.c - fair order between accounts, placement by goal. */
#include "sched/scheduler.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Prices within this share of the lower one are "the same price" for
 * lowest_cost, so that a job does not queue behind the one worker whose
 * measured speed happens to be a few percent better. */
#define COST_TIE_SHARE 0.10
/* ...and prices within this much, in the service's currency, are a tie
 * too: a saving under a cent is not worth a wait (a small job on a
 * cheaper worker that is busy starts at once on a dearer idle one). */
#define COST_TIE_MIN 0.01
/* A busy worker is never seen as free sooner than this after now. */
#define BUSY_MIN_S 1.0

static const char *const goal_names[SCHED_GOAL_COUNT] = {"lowest_cost", "fastest_finish",
                                                              "finish_by"};

const char *sched_goal_name(enum sched_goal g)
{
    if ((int)g < 0 || g >= SCHED_GOAL_COUNT)
        return NULL;
    return goal_names[g];
}

bool sched_goal_parse(const char *s, enum sched_goal *out)
{
    for (int i = 0; s && i < SCHED_GOAL_COUNT; i++) {
        if (strcmp(s, goal_names[i]) == 0) {
            *out = (enum sched_goal)i;
            return true;
        }
    }
    return false;
}

void sched_free_at(const struct sched_worker *workers, size_t n_workers, double now,
                   double *free_at)
{
    for (size_t i = 0; i < n_workers; i++) {
        const struct sched_worker *w = &workers[i];
        if (w->state != WORKER_ACTIVE)
            free_at[i] = INFINITY;
        else if (w->running_attempt == 0)
            free_at[i] = now;
        else
            free_at[i] = fmax(w->busy_until_s, now + BUSY_MIN_S);
    }
}

/* How long a lowest_cost job waits for cheaper capacity before a dearer
 * worker that can start it sooner wins: the larger of this and its own
 * expected training time there. Without it, lowest_cost jobs pile up
 * behind the cheapest class while other workers stand idle. */
#define PATIENCE_MIN_S 3600.0

/* max and min without a call into libm (this is the inner loop of a pass;
 * no value here is NaN). */
static inline double max2(double a, double b) { return a > b ? a : b; }
static inline double min2(double a, double b) { return a < b ? a : b; }

/* True when a lowest-cost job would wait too long for candidate c: past
 * the patience below, or (deadline_s > 0) past what its estimate allowed,
 * finishing after the upper end of the time it showed, unless c starts it
 * now. The one rule of the server's passes and the simulation
 * (docs/scheduler.md, "Lowest cost"). */
static inline bool waits_too_long(const struct sched_job *job, double now,
                                  const struct sched_choice *c)
{
    if (c->start_s - now > max2(PATIENCE_MIN_S, c->train_s))
        return true;
    return job->deadline_s > 0 && c->start_s > now && c->finish_s > job->deadline_s;
}

/* Prices that count as the same for lowest_cost and finish_by (above). */
static inline bool same_price(const struct sched_choice *c, const struct sched_choice *best)
{
    double lo = min2(c->price, best->price);
    return fabs(c->price - best->price) <= max2(COST_TIE_SHARE * lo, COST_TIE_MIN);
}

/* True when candidate c is a better place than best for job. The order is
 * total and depends only on the values, so a pass is deterministic for a
 * given input. */
static inline bool better(const struct sched_job *job, double now, const struct sched_choice *c,
                          int64_t c_mem, const struct sched_choice *best, int64_t best_mem)
{
    if (best->worker < 0)
        return true;
    if (job->goal == SCHED_FINISH_BY) {
        bool c_in = c->high_s <= job->finish_by_s, b_in = best->high_s <= job->finish_by_s;
        if (c_in != b_in)
            return c_in;
        if (!c_in) { /* neither makes it: the earliest finish at the 90% level */
            if (c->high_s != best->high_s)
                return c->high_s < best->high_s;
        } else if (!same_price(c, best)) {
            return c->price < best->price;
        }
        if (c->finish_s != best->finish_s)
            return c->finish_s < best->finish_s;
        if (c->price != best->price)
            return c->price < best->price;
    } else if (job->goal == SCHED_LOWEST_COST) {
        bool c_late = waits_too_long(job, now, c);
        bool b_late = waits_too_long(job, now, best);
        if (c_late != b_late)
            return !c_late;
        if (c_late && c->start_s != best->start_s) /* both late: the sooner */
            return c->start_s < best->start_s;
        if (!same_price(c, best))
            return c->price < best->price;
        if (c->finish_s != best->finish_s)
            return c->finish_s < best->finish_s;
    } else {
        if (c->finish_s != best->finish_s)
            return c->finish_s < best->finish_s;
        if (c->price != best->price)
            return c->price < best->price;
    }
    return c_mem < best_mem;
}

/* What a placement needs of one worker, laid out for the inner loop of a
 * pass (J x W of these comparisons). free_at is +inf for a worker that
 * takes nothing. */
bool sched_gpu_fits(const struct sched_job *job, int64_t gpu_mem_bytes)
{
    return gpu_mem_bytes < 0 || job->gpu_mem_bytes <= gpu_mem_bytes;
}

struct slot {
    double free_at;
    const struct sched_worker *w;
    double price_per_hour;
    int64_t mem_bytes;
    int64_t gpu_mem_bytes; /* -1: no GPUs */
    int class_;            /* enum worker_class, for finish_hi */
};

static void fill_slots(const struct sched_worker *workers, size_t n, const double *free_at,
                       struct slot *slots)
{
    for (size_t i = 0; i < n; i++) {
        const struct sched_worker *w = &workers[i];
        slots[i].free_at = w->state == WORKER_ACTIVE ? free_at[i] : INFINITY;
        slots[i].w = w;
        slots[i].price_per_hour = w->price_per_hour;
        slots[i].mem_bytes = w->mem_bytes;
        slots[i].gpu_mem_bytes = w->gpus > 0 ? w->gpu_mem_bytes : -1;
        slots[i].class_ = (int)w->class_ >= 0 && w->class_ < WORKER_CLASS_COUNT ? (int)w->class_ : 0;
    }
}

/* finish_by: the finish of candidate c at the 90% level, from the job's
 * finish_hi read at c's share of start (see scheduler.h). */
static double high_at(const struct sched_job *job, double now, const struct sched_choice *c,
                      int class_)
{
    double total = c->finish_s - now;
    if (!(total > 0))
        return c->finish_s;
    double share = (c->start_s - now + job->startup_s) / total;
    share = share < 0 ? 0 : share > 1 ? 1 : share;
    const float *f = job->finish_hi[c->start_s > now][class_];
    double x = share * (SCHED_FINISH_SHARES - 1);
    int k = (int)x;
    if (k >= SCHED_FINISH_SHARES - 1)
        k = SCHED_FINISH_SHARES - 2;
    double hi = f[k] + (x - k) * (f[k + 1] - f[k]);
    return now + total * max2(1.0, hi);
}

static void choose_in(const struct sched_job *job, const struct slot *slots, size_t n,
                      double now, struct sched_choice *out)
{
    struct sched_choice best = {.worker = -1, .start_s = INFINITY, .finish_s = INFINITY,
                               .high_s = INFINITY};
    int64_t best_mem = 0;
    double work = job->work_flops > 0 ? job->work_flops : 0;
    for (size_t i = 0; i < n; i++) {
        const struct slot *sl = &slots[i];
        if (sl->mem_bytes < job->mem_bytes || !isfinite(sl->free_at) ||
            !sched_gpu_fits(job, sl->gpu_mem_bytes))
            continue;
        struct sched_choice c;
        c.worker = (int)i;
        c.start_s = sl->free_at;
        c.train_s = capacity_train_seconds(work, job->params, sl->w);
        c.finish_s = c.start_s + job->startup_s + c.train_s;
        c.price = sl->price_per_hour * c.train_s / 3600.0;
        c.high_s = job->goal == SCHED_FINISH_BY ? high_at(job, now, &c, sl->class_) : c.finish_s;
        if (better(job, now, &c, sl->mem_bytes, &best, best_mem)) {
            best = c;
            best_mem = sl->mem_bytes;
        }
    }
    *out = best;
}

bool sched_choose(const struct sched_job *job, const struct sched_worker *workers,
                  size_t n_workers, const double *free_at, double now, struct sched_choice *out)
{
    /* No worker, no choice; and so the slots below are always written
     * before choose_in reads them (gcc 12 at -O3 could not tell). */
    if (n_workers == 0) {
        *out = (struct sched_choice){.worker = -1, .start_s = INFINITY, .finish_s = INFINITY,
                               .high_s = INFINITY};
        return false;
    }
    struct slot local[256];
    struct slot *slots = n_workers <= 256 ? local : malloc(n_workers * sizeof *slots);
    if (!slots) {
        *out = (struct sched_choice){.worker = -1, .start_s = INFINITY, .finish_s = INFINITY,
                               .high_s = INFINITY};
        return false;
    }
    fill_slots(workers, n_workers, free_at, slots);
    choose_in(job, slots, n_workers, now, out);
    if (slots != local)
        free(slots);
    return out->worker >= 0;
}

/* ---- fair order ------------------------------------------------------- */

struct group {
    uint64_t account;
    size_t head, end;  /* positions in the sorted index list */
    long load;         /* running + placed in this pass      */
};

/* The sort keys of one job, copied so that qsort needs no context (and
 * the pass stays safe to run on several threads). */
struct order_key {
    uint64_t account;
    double created_s;
    int64_t id;
    size_t index;
};

static int cmp_order_key(const void *a, const void *b)
{
    const struct order_key *x = a, *y = b;
    if (x->account != y->account)
        return x->account < y->account ? -1 : 1;
    if (x->created_s != y->created_s)
        return x->created_s < y->created_s ? -1 : 1;
    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static int cmp_load(const void *a, const void *b)
{
    const struct sched_account_load *x = a, *y = b;
    if (x->account != y->account)
        return x->account < y->account ? -1 : 1;
    return 0;
}

/* Group a comes before group b in the fair order. */
static bool group_before(const struct group *a, const struct group *b, const struct sched_job *jobs,
                         const size_t *idx)
{
    if (a->load != b->load)
        return a->load < b->load;
    const struct sched_job *ja = &jobs[idx[a->head]], *jb = &jobs[idx[b->head]];
    if (ja->created_s != jb->created_s)
        return ja->created_s < jb->created_s;
    return a->account < b->account;
}

static void heap_down(size_t *heap, size_t n, size_t i, const struct group *g,
                      const struct sched_job *jobs, const size_t *idx)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && group_before(&g[heap[l]], &g[heap[m]], jobs, idx))
            m = l;
        if (r < n && group_before(&g[heap[r]], &g[heap[m]], jobs, idx))
            m = r;
        if (m == i)
            return;
        size_t t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
}

/* ---- the pass --------------------------------------------------------- */

/* The pass. With stop_at < n_jobs it is a dry run for one job: it stops
 * when the fair order reaches jobs[stop_at] and leaves in out->free_at_s
 * when each worker is free just before that job is placed. */
static enum alallo_err run_pass(const struct sched_job *jobs, size_t n_jobs,
                                const struct sched_worker *workers, size_t n_workers,
                                const struct sched_account_load *loads, size_t n_loads,
                                double now, struct sched_pass_out *out, size_t stop_at)
{
    out->n_assignments = 0;
    if (n_jobs == 0) {
        if (out->free_at_s)
            sched_free_at(workers, n_workers, now, out->free_at_s);
        return ERR_OK;
    }

    enum alallo_err err = ERR_NOMEM;
    size_t *idx = malloc(n_jobs * sizeof *idx);
    struct order_key *keys = malloc(n_jobs * sizeof *keys);
    struct group *groups = malloc(n_jobs * sizeof *groups);
    size_t *heap = malloc(n_jobs * sizeof *heap);
    double *free_at = malloc((n_workers ? n_workers : 1) * sizeof *free_at);
    struct slot *slots = malloc((n_workers ? n_workers : 1) * sizeof *slots);
    bool *taken = calloc(n_workers ? n_workers : 1, sizeof *taken);
    struct sched_account_load *sorted_loads = malloc((n_loads ? n_loads : 1) * sizeof *sorted_loads);
    if (!idx || !keys || !groups || !heap || !free_at || !slots || !taken || !sorted_loads)
        goto out;

    for (size_t i = 0; i < n_jobs; i++)
        keys[i] = (struct order_key){jobs[i].account, jobs[i].created_s, jobs[i].id, i};
    qsort(keys, n_jobs, sizeof *keys, cmp_order_key);
    for (size_t i = 0; i < n_jobs; i++)
        idx[i] = keys[i].index;
    if (n_loads) {
        memcpy(sorted_loads, loads, n_loads * sizeof *loads);
        qsort(sorted_loads, n_loads, sizeof *sorted_loads, cmp_load);
    }

    size_t n_groups = 0;
    for (size_t i = 0; i < n_jobs;) {
        size_t j = i;
        uint64_t acct = jobs[idx[i]].account;
        while (j < n_jobs && jobs[idx[j]].account == acct)
            j++;
        struct sched_account_load key = {.account = acct};
        const struct sched_account_load *l =
            n_loads ? bsearch(&key, sorted_loads, n_loads, sizeof key, cmp_load) : NULL;
        groups[n_groups] = (struct group){.account = acct, .head = i, .end = j,
                                          .load = l && l->running > 0 ? l->running : 0};
        heap[n_groups] = n_groups;
        n_groups++;
        i = j;
    }
    for (size_t i = n_groups / 2; i-- > 0;)
        heap_down(heap, n_groups, i, groups, jobs, idx);

    sched_free_at(workers, n_workers, now, free_at);
    fill_slots(workers, n_workers, free_at, slots);
    for (size_t i = 0; i < n_workers; i++)
        taken[i] = workers[i].running_attempt != 0;

    size_t n_heap = n_groups;
    while (n_heap > 0) {
        struct group *g = &groups[heap[0]];
        size_t j = idx[g->head];
        if (j == stop_at)
            break;
        const struct sched_job *job = &jobs[j];
        struct sched_choice c;
        bool assigned = false;
        choose_in(job, slots, n_workers, now, &c);
        if (c.worker >= 0) {
            size_t w = (size_t)c.worker;
            if (!taken[w] && c.start_s <= now) {
                taken[w] = true;
                out->assignments[out->n_assignments++] =
                    (struct sched_assignment){.job = j, .worker = w, .finish_s = c.finish_s};
                assigned = true;
            }
            free_at[w] = slots[w].free_at = c.finish_s;
        }
        if (out->messages)
            out->messages[j] = assigned ? MSG_STARTING : MSG_WAITING_FOR_CAPACITY;
        if (out->planned_worker)
            out->planned_worker[j] = c.worker;
        if (out->expected_start_s)
            out->expected_start_s[j] = c.start_s;

        g->load++;
        g->head++;
        if (g->head == g->end)
            heap[0] = heap[--n_heap];
        heap_down(heap, n_heap, 0, groups, jobs, idx);
    }
    if (out->free_at_s)
        memcpy(out->free_at_s, free_at, n_workers * sizeof *free_at);
    err = ERR_OK;
out:
    free(idx);
    free(keys);
    free(groups);
    free(heap);
    free(free_at);
    free(slots);
    free(taken);
    free(sorted_loads);
    return err;
}

enum alallo_err sched_pass(const struct sched_job *jobs, size_t n_jobs,
                           const struct sched_worker *workers, size_t n_workers,
                           const struct sched_account_load *loads, size_t n_loads, double now,
                           struct sched_pass_out *out)
{
    if (n_jobs > SCHED_MAX_JOBS || n_workers > SCHED_MAX_WORKERS || !out ||
        (n_workers && !out->assignments) || (n_loads && !loads))
        return ERR_INVALID;
    return run_pass(jobs, n_jobs, workers, n_workers, loads, n_loads, now, out, SIZE_MAX);
}

enum alallo_err sched_horizon_before(const struct sched_job *jobs, size_t n_jobs, size_t job,
                                     const struct sched_worker *workers, size_t n_workers,
                                     const struct sched_account_load *loads, size_t n_loads,
                                     double now, double *free_at)
{
    if (n_jobs > SCHED_MAX_JOBS || n_workers > SCHED_MAX_WORKERS || job >= n_jobs || !free_at ||
        (n_loads && !loads))
        return ERR_INVALID;
    struct sched_assignment *scratch = malloc((n_workers ? n_workers : 1) * sizeof *scratch);
    if (!scratch)
        return ERR_NOMEM;
    struct sched_pass_out out = {.assignments = scratch, .free_at_s = free_at};
    enum alallo_err e = run_pass(jobs, n_jobs, workers, n_workers, loads, n_loads, now, &out, job);
    free(scratch);
    return e;
}

long sched_assigned_job(const struct sched_pass_out *out, size_t worker)
{
    for (size_t i = 0; i < out->n_assignments; i++)
        if (out->assignments[i].worker == worker)
            return (long)out->assignments[i].job;
    return -1;
}
