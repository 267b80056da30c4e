/* test_hyper.c - the "auto" hyper-parameters (sched/hyper.h, docs/api.md)
 * and the did-the-loss-go-down test a succeeded job is judged by. */
#include "sched/hyper.h"
#include "sched_test.h"

static struct hyper_params auto_of(long examples, int64_t params)
{
    struct hyper_params h = {0};
    hyper_auto(examples, params, &h);
    return h;
}

/* 40 pairs of the sample task on the built-in 2.4M-parameter model: 25
 * epochs of batch 4 at 10x, 250 steps (measured: final loss 0.036, all
 * of 10 training prompts completed as trained; the former defaults, 3
 * epochs of 8 at 1x, 15 steps, ended at 9.47 and completed none). */
static void small_set_on_small_model(void **state)
{
    (void)state;
    struct hyper_params h = auto_of(40, 2400000);
    assert_int_equal(h.n_epochs, 25);
    assert_int_equal(h.batch_size, 4);
    assert_near(h.lr_multiplier, 10.0, 0);
}

static void epochs_fall_as_the_set_grows(void **state)
{
    (void)state;
    assert_int_equal(auto_of(1, 0).n_epochs, HYPER_MAX_EPOCHS);
    assert_int_equal(auto_of(0, 0).n_epochs, HYPER_MAX_EPOCHS); /* counted as 1 */
    assert_int_equal(auto_of(200, 0).n_epochs, 10);
    assert_int_equal(auto_of(201, 0).n_epochs, 10);             /* rounded up */
    assert_int_equal(auto_of(1000, 0).n_epochs, 2);
    assert_int_equal(auto_of(2000, 0).n_epochs, 1);
    assert_int_equal(auto_of(1000000, 0).n_epochs, 1);
    int last = HYPER_MAX_EPOCHS + 1;
    for (long n = 1; n < 5000; n += 7) {
        int e = auto_of(n, 0).n_epochs;
        assert_true(e >= 1 && e <= last);
        last = e;
    }
}

static void batch_gives_about_ten_steps_an_epoch(void **state)
{
    (void)state;
    assert_int_equal(auto_of(1, 0).batch_size, 1);
    assert_int_equal(auto_of(19, 0).batch_size, 1);
    assert_int_equal(auto_of(20, 0).batch_size, 2);
    assert_int_equal(auto_of(80, 0).batch_size, HYPER_MAX_BATCH);
    assert_int_equal(auto_of(1000000, 0).batch_size, HYPER_MAX_BATCH);
}

static void large_models_keep_the_base_rate(void **state)
{
    (void)state;
    assert_near(auto_of(40, 0).lr_multiplier, 10.0, 0); /* unknown: small */
    assert_near(auto_of(40, HYPER_SMALL_MODEL_PARAMS - 1).lr_multiplier, 10.0, 0);
    assert_near(auto_of(40, HYPER_SMALL_MODEL_PARAMS).lr_multiplier, 1.0, 0);
    assert_near(auto_of(40, 7000000000LL).lr_multiplier, 1.0, 0);
}

static void given_values_are_kept(void **state)
{
    (void)state;
    struct hyper_params h = {.n_epochs = 30};
    hyper_auto(40, 2400000, &h);
    assert_int_equal(h.n_epochs, 30);
    assert_int_equal(h.batch_size, 4);
    assert_near(h.lr_multiplier, 10.0, 0);
    h = (struct hyper_params){.n_epochs = 2, .batch_size = 16, .lr_multiplier = 0.5};
    hyper_auto(40, 2400000, &h);
    assert_int_equal(h.n_epochs, 2);
    assert_int_equal(h.batch_size, 16);
    assert_near(h.lr_multiplier, 0.5, 0);
}

static struct hyper_params dpo_of(long pairs, int64_t params)
{
    struct hyper_params h = {0};
    hyper_auto_dpo(pairs, params, &h);
    return h;
}

/* 30 pairs on the built-in model (bench/train/dpo_defaults.mjs): the
 * supervised rule's 25 epochs of 3 at 10x, 250 steps, ruined the model (0
 * of 10 answers preferred, every one a repeated fragment); DPO's own, 10
 * epochs of 3 at 0.5x, 100 steps, moved all 10 to the preferred answer. */
static void dpo_gets_its_own_rule(void **state)
{
    (void)state;
    struct hyper_params sft = auto_of(30, 2400000), dpo = dpo_of(30, 2400000);
    assert_int_equal(sft.n_epochs, 25);
    assert_near(sft.lr_multiplier, 10.0, 0);
    assert_int_equal(dpo.n_epochs, 10);
    assert_int_equal(dpo.batch_size, 3);
    assert_near(dpo.lr_multiplier, 0.5, 0);
    assert_near(dpo_of(30, HYPER_SMALL_MODEL_PARAMS).lr_multiplier, 0.05, 0);
    assert_near(dpo_of(30, 0).lr_multiplier, 0.5, 0); /* unknown: small */
}

/* About HYPER_DPO_TARGET_STEPS steps: a few epochs of a small set, one of
 * a large one, never more than HYPER_DPO_MAX_EPOCHS. */
static void dpo_aims_at_a_hundred_steps(void **state)
{
    (void)state;
    assert_int_equal(dpo_of(1, 0).n_epochs, HYPER_DPO_MAX_EPOCHS);
    assert_int_equal(dpo_of(0, 0).n_epochs, HYPER_DPO_MAX_EPOCHS); /* counted as 1 */
    assert_int_equal(dpo_of(100, 0).n_epochs, 8);   /* 13 steps an epoch: 104 */
    assert_int_equal(dpo_of(300, 0).n_epochs, 3);   /* 38 an epoch: 114 */
    assert_int_equal(dpo_of(800, 0).n_epochs, 1);
    assert_int_equal(dpo_of(100000, 0).n_epochs, 1);
    /* a batch given counts */
    struct hyper_params h = {.batch_size = 30};
    hyper_auto_dpo(30, 0, &h);
    assert_int_equal(h.n_epochs, HYPER_DPO_MAX_EPOCHS);
    h = (struct hyper_params){.batch_size = 1};
    hyper_auto_dpo(30, 0, &h);
    assert_int_equal(h.n_epochs, 4); /* 30 steps an epoch: 120 */
    /* values given are kept */
    h = (struct hyper_params){.n_epochs = 2, .batch_size = 16, .lr_multiplier = 5};
    hyper_auto_dpo(30, 0, &h);
    assert_int_equal(h.n_epochs, 2);
    assert_int_equal(h.batch_size, 16);
    assert_near(h.lr_multiplier, 5.0, 0);
}

/* Reinforcement's rule: half the prompts a step, about twenty steps, and
 * the rate measured on the built-in model (2e-3 for LoRA) for a small one. */
static void rft_gets_its_own_rule(void **state)
{
    (void)state;
    struct hyper_params h = {0};
    hyper_auto_rft(8, 2400000, &h);
    assert_int_equal(h.batch_size, 4);
    assert_int_equal(h.n_epochs, 10); /* 2 steps an epoch */
    assert_near(h.lr_multiplier, 10.0, 0);
    h = (struct hyper_params){0};
    hyper_auto_rft(1000, HYPER_SMALL_MODEL_PARAMS, &h);
    assert_int_equal(h.batch_size, HYPER_MAX_BATCH);
    assert_int_equal(h.n_epochs, 1);
    assert_near(h.lr_multiplier, 0.25, 0);
    h = (struct hyper_params){.n_epochs = 2, .batch_size = 3, .lr_multiplier = 1};
    hyper_auto_rft(8, 0, &h);
    assert_int_equal(h.n_epochs, 2);
    assert_int_equal(h.batch_size, 3);
    assert_near(h.lr_multiplier, 1.0, 0);
}

static void loss_went_down(void **state)
{
    (void)state;
    assert_true(hyper_loss_went_down(5.7, 0.036));
    assert_true(hyper_loss_went_down(4.0, 3.6));   /* exactly 10% lower */
    assert_false(hyper_loss_went_down(4.0, 3.7));  /* less than 10% */
    assert_false(hyper_loss_went_down(8.54, 9.47)); /* went up */
    assert_false(hyper_loss_went_down(0, 1));
    assert_false(hyper_loss_known(0, 1));
    assert_false(hyper_loss_known(NAN, 1));
    assert_false(hyper_loss_known(1, INFINITY));
    assert_true(hyper_loss_known(1, 1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(small_set_on_small_model),
        cmocka_unit_test(epochs_fall_as_the_set_grows),
        cmocka_unit_test(batch_gives_about_ten_steps_an_epoch),
        cmocka_unit_test(large_models_keep_the_base_rate),
        cmocka_unit_test(given_values_are_kept),
        cmocka_unit_test(dpo_gets_its_own_rule),
        cmocka_unit_test(dpo_aims_at_a_hundred_steps),
        cmocka_unit_test(rft_gets_its_own_rule),
        cmocka_unit_test(loss_went_down),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
