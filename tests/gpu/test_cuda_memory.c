/* test_cuda_memory.c - the planner's GPU memory model (sched/planner.h,
 * planner_memory_gpu) against what the GPU trainer allocates for the same
 * job: cuda_model_upload plus the optimizer's moments against the plan's
 * weights and trainable state, cuda_acts_create against the plan's
 * activations and logits. The planner places jobs on GPUs by these
 * figures, so a trainer that allocates more than they say runs out of GPU
 * memory where the plan said it fits; this test fails first. (The model
 * counted bf16 activations where the trainer keeps fp32 until
 * 2026-12-02.) Nothing is trained: the allocations are the test.
 *
 * Each case: the plan's part may be above the allocation by at most
 * TOL_OVER (it rounds some terms up) and below it by at most TOL_UNDER
 * (or SLACK_BYTES). The
 * plan's overhead (the CUDA context, the cuBLASLt workspace) and margin are
 * not part of the comparison.
 *
 * Without a GPU it prints one `skip:` line and exits 77.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "sched/planner.h"
#include "train/cuda/cuda_model.h"
#include "train/cuda/cuda_optim.h"
#include "train/cuda/cuda_train.h"
#include "train/model/model.h"
#include "train/model/optim.h"

#define TOL_OVER 0.15
#define TOL_UNDER 0.02
/* Below this, an under-count is the few small arrays the plan leaves to
 * its 1 GiB of overhead (the rotary tables, 256-byte alignment of each
 * array): it shows on the tiny models only. */
#define SLACK_BYTES (1.0 * (1 << 20))

struct mem_case {
    const char *name;
    const char *shape; /* model_config_shape's, or NULL for the family's tiny */
    int family;
    int vocab;
    int full, four;
    int B, T;
};

static const struct mem_case cases[] = {
    {"124m-lora16", "124m", FAM_LLAMA, 0, 0, 0, 4, 1024},
    {"124m-lora4", "124m", FAM_LLAMA, 0, 0, 1, 4, 1024},
    {"124m-full", "124m", FAM_LLAMA, 0, 1, 0, 2, 1024},
    {"small-lora4", "small", FAM_LLAMA, 4096, 0, 1, 8, 512},
    {"gemma2-lora16", NULL, FAM_GEMMA2, 4096, 0, 0, 8, 512},
    {"gemma2-lora4", NULL, FAM_GEMMA2, 4096, 0, 1, 8, 512},
};
enum { N_CASES = sizeof cases / sizeof cases[0], RANK = 16 };

static struct plan_job plan_of(const struct model *m, const struct mem_case *k)
{
    const struct model_config *c = &m->cfg;
    struct plan_job j = {
        .model = {.params = (int64_t)model_config_params(c),
                  .layers = c->n_layers,
                  .hidden = c->hidden,
                  .intermediate = c->intermediate,
                  .heads = c->n_heads,
                  .kv_heads = c->n_kv_heads,
                  .vocab = c->vocab,
                  .tied = c->tied != 0,
                  .head_dim = c->head_dim,
                  .post_norms = c->post_norms != 0,
                  .attn_softcap = c->attn_softcap > 0.0f,
                  .final_softcap = c->final_softcap > 0.0f},
        .precision = k->four ? PLAN_4BIT : PLAN_16BIT,
        .adapter = k->full ? PLAN_FULL : PLAN_LORA,
        .lora_rank = k->full ? 0 : RANK,
        .batch = k->B,
        .seq_len = k->T,
        .threads = 1,
    };
    return j;
}

static void check_part(const char *what, const char *name, double plan, double got)
{
    double r = plan / got;
    printf("%s %s: plan %.1f MiB, allocated %.1f MiB (%.3fx)\n", name, what, plan / (1 << 20),
           got / (1 << 20), r);
    double under = TOL_UNDER * got > SLACK_BYTES ? TOL_UNDER * got : SLACK_BYTES;
    if (plan > (1.0 + TOL_OVER) * got || plan < got - under)
        fail_msg("%s %s: the plan says %.0f bytes, the GPU trainer allocates %.0f", name, what,
                 plan, got);
}

static void test_case(void **state)
{
    const struct mem_case *k = *state;
    struct model_config c;
    if (k->shape)
        assert_int_equal(model_config_shape(k->shape, k->vocab, &c), 0);
    else
        assert_int_equal(model_config_family_tiny(k->family, k->vocab, &c), 0);
    struct model_opts o = {.full = k->full, .base_kind = k->four ? WK_NF4 : WK_BF16};
    if (!k->full) {
        o.lora_r = RANK;
        o.lora_alpha = 2.0f * RANK;
        o.lora_targets = MODEL_ALL_PROJ;
    }
    char err[256];
    struct model *m = model_create(&c, &o, err, sizeof err);
    if (!m)
        fail_msg("model_create: %s", err);
    assert_int_equal(model_init_random(m, 3), 0);
    assert_int_equal(model_rope_ensure(m, k->T), 0);
    struct cuda_model *cm = cuda_model_upload(m, err, sizeof err);
    if (!cm)
        fail_msg("upload: %s", err);
    struct cuda_acts *a =
        cuda_acts_create(cm, k->B, k->T, cuda_train_recompute_auto(m), err, sizeof err);
    if (!a)
        fail_msg("acts: %s", err);
    /* the optimizer's moments on the device (cuda_optim_init) */
    double optim_bytes = 2.0 * (double)m->n_train * sizeof(float);

    struct plan_job j = plan_of(m, k);
    struct plan_memory p;
    assert_int_equal(planner_memory_gpu(&j, &p, err, sizeof err), ERR_OK);
    check_part("weights and trainable state", k->name, (double)(p.base + p.trainable),
               (double)cuda_model_bytes(cm) + optim_bytes);
    check_part("activations and logits", k->name, (double)(p.activations + p.logits),
               (double)cuda_acts_bytes(a));
    cuda_acts_free(a);
    cuda_model_free(cm);
    model_free(m);
}

int main(void)
{
    int rc = gpu_test_open("test_cuda_memory");
    if (rc)
        return rc;
    struct CMUnitTest tests[N_CASES];
    for (int i = 0; i < N_CASES; i++)
        tests[i] = (struct CMUnitTest){.name = cases[i].name, .test_func = test_case,
                                       .initial_state = (void *)&cases[i]};
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    cuda_ctx_close();
    return rc;
}
