/* pool.h - a pool: a kind of place an engine runs attempts (a Slurm
 * partition with a GPU shape, a class and a price), declared by the
 * operator with `serve --slurm-pool SPEC` (docs/slurm.md):
 *
 *   name=a100,partition=gpu,gres=gpu:a100:1,gpu_mem=80G,cpus=8,mem=64G,
 *   class=on-demand,price=2.10/h,slots=8[,qos=…,account=…,constraint=…]
 *
 * Required: name, partition, mem, class, price. Optional: gres (none: a
 * CPU-only pool), gpu_mem (the memory of one GPU; with gres only: the slots
 * are then declared as GPU workers that the planner's GPU memory model
 * judges, docs/slurm.md), cpus (1), slots (from the partition's capacity, see
 * exec_pool_default_slots), qos, account, constraint. Each slot is room for
 * one attempt of this shape; the scheduling pass sees the slots as workers.
 * Pure: parsing and arithmetic only.
 */
#ifndef ALALLO_EXEC_POOL_H
#define ALALLO_EXEC_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "exec/executor.h"

#define EXEC_POOL_SPEC_MAX 1024
#define EXEC_POOL_SLOTS_MAX 4096

enum exec_pool_class {
    EXEC_POOL_ON_DEMAND, /* "on-demand": not preempted                    */
    EXEC_POOL_SPOT,      /* "spot": preemptible, cheaper                   */
};

struct exec_pool {
    char name[64];          /* [A-Za-z0-9._-], as workers' names              */
    char partition[64];
    char gres[64];          /* "gpu:a100:1", "gpu:2"; "" for none            */
    char gpu_type[32];      /* "a100", "" for any type                        */
    int gpus;               /* GPUs per attempt (from gres)                   */
    int64_t gpu_mem_mb;     /* memory of one GPU, MiB; 0: not declared        */
    int cpus;               /* CPUs per attempt                               */
    int64_t mem_mb;         /* memory per attempt, MiB                        */
    enum exec_pool_class class_;
    double price_per_hour;  /* per slot-hour, in the service's currency       */
    int slots;              /* attempts at once; 0: not given (use the default) */
    char qos[64], account[64], constraint[128];
};

/* Parses SPEC into *p. ERR_INVALID with err naming the bad key and what it
 * expects (an unknown key, one given twice, a value out of range, a
 * required key missing). */
enum alallo_err exec_pool_parse(const char *spec, struct exec_pool *p /* OUT */,
                                char *err /* OUT */, size_t errcap);

/* How many attempts of p's shape the capacity c holds: the least of up
 * GPUs / gpus, up CPUs / cpus and up memory / mem, capped at
 * EXEC_POOL_SLOTS_MAX; 0 when none fits (no node has p.gpus GPUs). */
int exec_pool_default_slots(const struct exec_pool *p, const struct exec_capacity *c);

/* The pool's part of a submission: partition, QOS, account, constraint,
 * gres, CPUs and memory written into s (the rest of s is left as is). */
void exec_pool_fill_submit(const struct exec_pool *p, struct exec_submit *s /* IN/OUT */);

/* "on-demand" or "spot". */
const char *exec_pool_class_name(enum exec_pool_class c);

#endif
