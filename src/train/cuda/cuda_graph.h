/* cuda_graph.h - parts of the training pass replayed as CUDA graphs where
 * their launches repeat (issue 36, item 5; docs/trainer.md, "CUDA graphs").
 *
 * A body is host code whose only effects are work queued on the stream
 * (kernels through cuda_launch, cuda_gemm.h's products, cuda_zero,
 * cuda_copy) and flags of its own it sets on failure; it uploads,
 * downloads, syncs, allocates and frees nothing (cuda_ctx.h aborts if it
 * does). cuda_graphs_run walks the body first (cuda_walk.h: every launch,
 * product, fill and copy noted with its arguments, nothing queued), then:
 *   - the record equals one that has a graph: the graph is launched, one
 *     launch for all of the body's work;
 *   - it equals one seen once before: the body runs again under stream
 *     capture, and the graph it makes is kept and launched;
 *   - it is new: the body runs as it is (eagerly) and the record is kept.
 * So a shape's first pass runs eagerly (cuBLASLt picks its algorithms and
 * the kernels load outside any capture), its second captures, the rest
 * replay; work whose arguments change every pass (a seed passed by value,
 * say: LoRA dropout's are read on the device for this) never captures and
 * runs eagerly, as without graphs. A graph replays only
 * work the body would queue now, byte for byte, so it gives the eager
 * pass's bits. The body runs twice a pass (the walk, then eagerly or under
 * capture) or once (the walk, then the replay): it must do the same each
 * time it runs (no host state it changes and reads again).
 *
 * A capture that fails turns the set's graphs off for good (eager from
 * then on, the reason kept for cuda_graphs_stats) and the body runs
 * eagerly: the pass's work is done either way.
 *
 * Ownership: a set keeps CUDA_GRAPH_SLOTS records and their graphs, the
 * least recently used given up first; cuda_graphs_free releases them.
 * Single-threaded, as the trainer's host side is.
 */
#ifndef ALALLO_TRAIN_CUDA_GRAPH_H
#define ALALLO_TRAIN_CUDA_GRAPH_H

#define CUDA_GRAPH_SLOTS 4

struct cuda_graphs;

struct cuda_graph_stats {
    unsigned long eager;    /* bodies run as they are */
    unsigned long captures; /* graphs made */
    unsigned long replays;  /* graphs launched (a capture's first included) */
    double walk_s;          /* host seconds spent walking and matching records
                             * (while the GPU may wait: the price of a replay) */
    char off[600];          /* why graphs stopped ("" while on): a copy */
};

/* A set with no records; NULL when out of memory. */
struct cuda_graphs *cuda_graphs_create(void);
void cuda_graphs_free(struct cuda_graphs *g); /* NULL is fine */
/* The body's work, queued as above. 0, or -1 when a graph's launch failed
 * (the reason in cuda_ctx_error()). */
int cuda_graphs_run(struct cuda_graphs *g, void (*body)(void *), void *arg);
/* cuda_graphs_run in two halves, for a caller that walks while the GPU is
 * still busy with earlier work (the walk's host time then hidden) and
 * queues the work later: cuda_graphs_walk records the body's work and
 * decides; cuda_graphs_play then queues it as decided (0 or -1 as above).
 * A play follows its walk, with the same body and argument, nothing the
 * body reads changed in between (a walk not played, its pass having
 * failed in between, is dropped by the next walk). */
void cuda_graphs_walk(struct cuda_graphs *g, void (*body)(void *), void *arg);
int cuda_graphs_play(struct cuda_graphs *g, void (*body)(void *), void *arg);
void cuda_graphs_stats(const struct cuda_graphs *g, struct cuda_graph_stats *out /* OUT */);

#endif
