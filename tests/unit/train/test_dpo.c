/* test_dpo.c - the per-token log-probabilities of a DPO step and the watch
 * that calls a run whose preferred and other answers both fall a collapse
 * (train/dpo.h, docs/trainer.md "DPO"). The loss and its gradients are
 * checked against PyTorch in test_dpo_torch.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "train/model/dpo.h"

#define ROW 8

/* One row of ROW positions: pair 0's preferred answer at offset 0 (4 positions, the
 * first a prompt position), its other answer at offset 4 (4 positions, the
 * first two prompt positions). */
static const int row[2] = {0, 0};
static const size_t off[2] = {0, 4}, len[2] = {4, 4};
static const unsigned char mask[ROW] = {0, 1, 1, 1, 0, 0, 1, 1};

static void per_token_log_probabilities(void **state)
{
    (void)state;
    /* token losses: preferred 0.5 + 1.0 + 1.5 = 3 over 3 tokens, other
     * 2 + 4 = 6 over 2 tokens; the prompt positions carry no loss */
    const double tok_loss[ROW] = {0, 0.5, 1.0, 1.5, 0, 0, 2, 4};
    const double ref[2] = {-1.5, -3.0}; /* per token: -0.5 and -1.5 */
    float w[ROW];
    memset(w, 0, sizeof w);
    struct dpo_batch b = {.n_ex = 2, .row = row, .off = off, .len = len, .T = ROW,
                          .ref = ref, .mask = mask, .beta = 0.1};
    dpo_batch_weights(&b, tok_loss, w);
    assert_true(fabs(b.st.chosen_logp - -1.0) < 1e-12);
    assert_true(fabs(b.st.rejected_logp - -3.0) < 1e-12);
    assert_true(fabs(b.st.chosen_ref_logp - -0.5) < 1e-12);
    assert_true(fabs(b.st.rejected_ref_logp - -1.5) < 1e-12);
    /* without a mask, no per-token figures (and the loss is unchanged) */
    double loss = b.st.loss;
    b.mask = NULL;
    dpo_batch_weights(&b, tok_loss, w);
    assert_true(b.st.chosen_logp == 0 && b.st.rejected_ref_logp == 0);
    assert_true(b.st.loss == loss);
}

/* A step whose answers stand dc and dr nats per token below the reference. */
static struct dpo_stats step_down(double dc, double dr)
{
    return (struct dpo_stats){.chosen_ref_logp = -1.25, .rejected_ref_logp = -1.5,
                              .chosen_logp = -1.25 - dc, .rejected_logp = -1.5 - dr};
}

static void a_healthy_run_is_no_collapse(void **state)
{
    (void)state;
    struct dpo_watch w = {0};
    double dc = 0, dr = 0;
    /* the other answers fall far, the preferred ones a little or rise */
    for (int i = 0; i < 10; i++)
        dpo_watch_add(&w, &(struct dpo_stats){0});
    assert_false(dpo_watch_collapsed(&w, &dc, &dr));
    for (int i = 0; i < 10; i++) {
        struct dpo_stats s = step_down(i % 2 ? 0.3 : -0.2, 3.0);
        dpo_watch_add(&w, &s);
    }
    assert_false(dpo_watch_collapsed(&w, &dc, &dr));
    /* the preferred ones alone fall (a bad pair order, not a collapse) */
    struct dpo_stats s = step_down(3.0, 0.5);
    dpo_watch_add(&w, &s);
    assert_false(dpo_watch_collapsed(&w, &dc, &dr));
    /* an empty window */
    assert_false(dpo_watch_collapsed(&w, &dc, &dr));
    /* not a number is no collapse */
    s = step_down(NAN, 5.0);
    dpo_watch_add(&w, &s);
    assert_false(dpo_watch_collapsed(&w, &dc, &dr));
}

static void both_falling_is_a_collapse_reported_once(void **state)
{
    (void)state;
    struct dpo_watch w = {0};
    double dc = 0, dr = 0;
    /* the window's mean counts, not one step: 0.25 then 1.0 is 0.625 */
    struct dpo_stats a = step_down(0.25, 3.0), b = step_down(1.0, 5.0);
    dpo_watch_add(&w, &a);
    dpo_watch_add(&w, &b);
    assert_true(dpo_watch_collapsed(&w, &dc, &dr));
    assert_true(fabs(dc - 0.625) < 1e-12);
    assert_true(fabs(dr - 4.0) < 1e-12);
    /* once per run */
    dpo_watch_add(&w, &b);
    assert_false(dpo_watch_collapsed(&w, &dc, &dr));
    /* exactly at the limit is not past it */
    struct dpo_watch v = {0};
    struct dpo_stats at = step_down(DPO_COLLAPSE_DROP, DPO_COLLAPSE_DROP);
    dpo_watch_add(&v, &at);
    assert_false(dpo_watch_collapsed(&v, &dc, &dr));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(per_token_log_probabilities),
        cmocka_unit_test(a_healthy_run_is_no_collapse),
        cmocka_unit_test(both_falling_is_a_collapse_reported_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
