/* context_fit.c - the largest context (max_seq_len) the planner fits on a
 * worker of a given memory, for a few model shapes at 16-bit and 4-bit
 * LoRA (and full fine-tuning at 16-bit), batch 1 and batch 4. Pure: links
 * the planner (src/sched/planner.c) and prints one JSON object.
 *
 * usage: context_fit [GiB]   (default 24)
 */
#include <stdio.h>
#include <stdlib.h>

#include "sched/planner.h"

struct shape {
    const char *name;
    struct plan_model m;
    int context; /* the model's own max_position_embeddings */
};

/* The largest T in [1, PLAN_MAX_SEQ] whose need fits in cap bytes, or 0. */
static int largest(struct plan_job j, int64_t cap)
{
    int lo = 0, hi = PLAN_MAX_SEQ;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        j.seq_len = mid;
        struct plan_job n;
        struct plan_memory mem;
        char why[200];
        if (planner_normalize(&j, &n, why, sizeof why) == ERR_OK &&
            planner_memory(&n, &mem, why, sizeof why) == ERR_OK && mem.total <= cap)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

int main(int argc, char **argv)
{
    double gib = argc > 1 ? atof(argv[1]) : 24.0;
    int64_t cap = (int64_t)(gib * 1024 * 1024 * 1024);
    const struct shape shapes[] = {
        /* models/alallo-base/config.json */
        {"alallo-base", {.layers = 4, .hidden = 192, .intermediate = 512, .heads = 6,
                         .kv_heads = 3, .vocab = 4096, .tied = true}, 256},
        /* a 1B-class shape: Llama 3.2 1B's config.json */
        {"llama-3.2-1b-shape", {.layers = 16, .hidden = 2048, .intermediate = 8192, .heads = 32,
                                .kv_heads = 8, .vocab = 128256, .tied = true}, 131072},
    };
    const struct {
        const char *name;
        enum plan_precision p;
        enum plan_adapter a;
    } methods[] = {{"16-bit LoRA", PLAN_16BIT, PLAN_LORA},
                   {"4-bit LoRA", PLAN_4BIT, PLAN_LORA},
                   {"16-bit full", PLAN_16BIT, PLAN_FULL}};
    printf("{\"worker_gib\": %g, \"threads\": %d, \"results\": [\n", gib, PLAN_ASSUMED_THREADS);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (size_t k = 0; k < sizeof methods / sizeof methods[0]; k++) {
            for (int batch = 1; batch <= 4; batch += 3) {
                struct plan_job j = {.model = shapes[s].m, .precision = methods[k].p,
                                     .adapter = methods[k].a, .batch = batch};
                int t = largest(j, cap);
                int usable = t < shapes[s].context ? t : shapes[s].context;
                printf("  {\"model\": \"%s\", \"method\": \"%s\", \"batch\": %d, "
                       "\"planner_max_seq_len\": %d, \"model_context\": %d, "
                       "\"max_seq_len\": %d}%s\n",
                       shapes[s].name, methods[k].name, batch, t, shapes[s].context, usable,
                       s + 1 == sizeof shapes / sizeof shapes[0] &&
                               k + 1 == sizeof methods / sizeof methods[0] && batch == 4
                           ? ""
                           : ",");
            }
        }
    }
    printf("]}\n");
    return 0;
}
