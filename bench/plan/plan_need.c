/* plan_need.c - the planner's memory need of one training job, for
 * bench/plan/rss.sh to set against the trainer's measured peak RSS. Pure:
 * links the planner (src/sched/planner.c) and prints one JSON object.
 *
 * usage: plan_need LAYERS HIDDEN INTERMEDIATE HEADS KV_HEADS HEAD_DIM VOCAB
 *                  TIED GEMMA2 ATTN_CAP FINAL_CAP BATCH SEQ THREADS RANK [QK_NORM
 *                  [EXPERTS EXPERTS_USED MOE_INTERMEDIATE]]
 *   (TIED, GEMMA2, ATTN_CAP, FINAL_CAP, QK_NORM (Qwen3): 0 or 1; RANK 0 =
 *   full fine-tuning; EXPERTS > 0: a mixture of experts, every layer
 *   sparse)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "sched/planner.h"

int main(int argc, char **argv)
{
    if (argc != 16 && argc != 17 && argc != 20) {
        fprintf(stderr, "usage: plan_need LAYERS HIDDEN INTERMEDIATE HEADS KV_HEADS HEAD_DIM "
                        "VOCAB TIED GEMMA2 ATTN_CAP FINAL_CAP BATCH SEQ THREADS RANK "
                        "[QK_NORM [EXPERTS EXPERTS_USED MOE_INTERMEDIATE]]\n");
        return 2;
    }
    int v[19] = {0};
    for (int i = 0; i + 1 < argc; i++)
        v[i] = atoi(argv[i + 1]);
    struct plan_job j = {.model = {.layers = v[0], .hidden = v[1], .intermediate = v[2],
                                   .heads = v[3], .kv_heads = v[4], .head_dim = v[5],
                                   .vocab = v[6], .tied = v[7] != 0, .post_norms = v[8] != 0,
                                   .attn_softcap = v[9] != 0, .final_softcap = v[10] != 0,
                                   .qk_norm = v[15] != 0, .experts = v[16],
                                   .experts_used = v[17], .moe_intermediate = v[18]},
                         .precision = PLAN_16BIT,
                         .adapter = v[14] > 0 ? PLAN_LORA : PLAN_FULL,
                         .lora_rank = v[14],
                         .batch = v[11],
                         .seq_len = v[12],
                         .threads = v[13]};
    struct plan_memory m;
    char why[200];
    if (planner_memory(&j, &m, why, sizeof why) != ERR_OK) {
        fprintf(stderr, "plan_need: %s\n", why);
        return 1;
    }
    printf("{\"base\": %" PRId64 ", \"trainable\": %" PRId64 ", \"activations\": %" PRId64
           ", \"logits\": %" PRId64 ", \"overhead\": %" PRId64 ", \"total\": %" PRId64 "}\n",
           m.base, m.trainable, m.activations, m.logits, m.overhead, m.total);
    return 0;
}
