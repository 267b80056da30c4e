/* test_grpo.c - GRPO's advantages and loss weights (train/model/grpo.c):
 * hand-computed values, the clip on each side, and every weight against a
 * finite difference of the loss it comes from. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "train/model/grpo.h"

#define NEAR(a, b, tol) assert_true(fabs((a) - (b)) <= (tol))

static void advantages(void **state)
{
    (void)state;
    double r[4] = {1, 0, 0, 1}, a[4];
    grpo_advantages(4, r, a);
    NEAR(a[0], 0.5 / 0.5001, 1e-12);
    NEAR(a[1], -0.5 / 0.5001, 1e-12);
    double same[3] = {0.7, 0.7, 0.7};
    grpo_advantages(3, same, a);
    for (int i = 0; i < 3; i++)
        NEAR(a[i], 0, 0);
}

/* Two rows of three positions: row 0's answer is its last two tokens,
 * row 1's its last one. */
static const uint8_t MASK[6] = {0, 1, 1, 0, 0, 1};

static void on_policy(void **state)
{
    (void)state;
    double adv[2] = {1, -1}, nll[6] = {0.5, 0.7, 0, 0.2, 0, 0};
    float w[6];
    struct grpo_batch b = {.B = 2, .T = 3, .mask = MASK, .adv = adv, .eps = GRPO_CLIP};
    grpo_weights(&b, nll, w);
    /* ratio 1: w = A / (B * L) on each answer token's position */
    NEAR(w[0], 0.25, 1e-7);
    NEAR(w[1], 0.25, 1e-7);
    NEAR(w[2], 0, 0);
    NEAR(w[3], 0, 0);
    NEAR(w[4], -0.5, 1e-7);
    NEAR(b.loss, -(0.25 + 0.25) + 0.5, 1e-12);
    NEAR(b.clipped, 0, 0);
}

static void clipped(void **state)
{
    (void)state;
    double adv[2] = {1, -1}, nll[6] = {0.5, 0.7, 0, 0.2, 0.3, 0};
    /* row 0 position 0: ratio 1.5 with A > 0, clipped; row 1: ratio 0.5
     * with A < 0, clipped; row 0 position 1: ratio 1.1, not */
    double old[6] = {0.5 + log(1.5), 0.7 + log(1.1), 0, 0, 0.3 + log(0.5), 0};
    float w[6];
    struct grpo_batch b = {.B = 2, .T = 3, .mask = MASK, .adv = adv, .old_nll = old,
                           .eps = GRPO_CLIP};
    grpo_weights(&b, nll, w);
    NEAR(w[0], 0, 0);
    NEAR(w[1], 0.25 * 1.1, 1e-6);
    NEAR(w[4], 0, 0);
    NEAR(b.clipped, 2.0 / 3.0, 1e-12);
    NEAR(b.loss, -0.25 * 1.2 - 0.25 * 1.1 + 0.5 * 0.8, 1e-9);
}

static void kl_penalty(void **state)
{
    (void)state;
    double adv[2] = {0, 0}, nll[6] = {log(2), 0, 0, 0, 1, 0}, ref[6] = {0, 0, 0, 0, 1, 0};
    float w[6];
    struct grpo_batch b = {.B = 2, .T = 3, .mask = MASK, .adv = adv, .ref_nll = ref,
                           .beta = 0.1, .eps = GRPO_CLIP};
    grpo_weights(&b, nll, w);
    /* d = ln 2 at row 0 position 0: KL 2 - ln 2 - 1, weight beta (2 - 1) / 4 */
    NEAR(w[0], 0.1 * 1.0 / 4, 1e-7);
    NEAR(w[1], 0, 1e-7);
    NEAR(b.kl, (1 - log(2)) / 3, 1e-12);
    NEAR(b.loss, 0.1 * (1 - log(2)) / 4, 1e-12);
}

/* Each weight is the loss's derivative: central differences agree. */
static void finite_differences(void **state)
{
    (void)state;
    double adv[2] = {0.8, -1.3}, nll[6] = {0.4, 0.9, 0, 0.3, 0.6, 0};
    double old[6] = {0.5, 0.8, 0, 0.1, 0.55, 0}, ref[6] = {0.7, 0.2, 0, 0.9, 0.1, 0};
    float w[6], scratch[6];
    struct grpo_batch b = {.B = 2, .T = 3, .mask = MASK, .adv = adv, .old_nll = old,
                           .ref_nll = ref, .beta = 0.05, .eps = GRPO_CLIP};
    grpo_weights(&b, nll, w);
    for (int i = 0; i < 6; i++) {
        double h = 1e-6, keep = nll[i];
        nll[i] = keep + h;
        grpo_weights(&b, nll, scratch);
        double up = b.loss;
        nll[i] = keep - h;
        grpo_weights(&b, nll, scratch);
        double down = b.loss;
        nll[i] = keep;
        NEAR(w[i], (up - down) / (2 * h), 1e-6);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(advantages), cmocka_unit_test(on_policy), cmocka_unit_test(clipped),
        cmocka_unit_test(kl_penalty), cmocka_unit_test(finite_differences)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
