/* test_job_hyper.c - a job's further hyper-parameters as stored: defaults,
 * jobs older than them, a round trip, and values out of range read back as
 * defaults rather than trusted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "core/job_hyper.h"

static void defaults_and_legacy(void **state)
{
    (void)state;
    struct job_hyper h;
    job_hyper_defaults(&h);
    assert_int_equal(h.max_seq_len, 0);
    assert_true(h.packing);
    assert_int_equal(h.lora_rank, 16);
    assert_true(h.lora_alpha == 32.0);
    assert_true(h.lora_dropout == 0.0);
    assert_int_equal(h.lora_targets, JOB_HYPER_ALL_TARGETS);
    assert_int_equal(h.lr_schedule, JOB_LR_COSINE);
    assert_true(h.warmup_ratio == 0.05);
    assert_false(h.train_on_inputs);
    /* a job stored before these existed trains as it did */
    job_hyper_parse("", &h);
    assert_int_equal(h.max_seq_len, JOB_HYPER_LEGACY_SEQ);
    assert_false(h.packing);
    assert_int_equal(h.lora_rank, 16);
    job_hyper_parse("not json", &h);
    assert_int_equal(h.max_seq_len, JOB_HYPER_LEGACY_SEQ);
}

static void round_trip(void **state)
{
    (void)state;
    struct job_hyper h, back;
    job_hyper_defaults(&h);
    h.max_seq_len = 4096;
    h.packing = false;
    h.lora_rank = 8;
    h.lora_alpha = 12.5;
    h.lora_dropout = 0.1;
    h.lora_targets = (1u << 0) | (1u << 2);
    h.lr_schedule = JOB_LR_CONSTANT;
    h.warmup_ratio = 0.2;
    h.weight_decay = 0.01;
    h.train_on_inputs = true;
    h.dpo_beta = 0.25;
    char buf[512];
    assert_true(job_hyper_format(&h, true, buf, sizeof buf));
    assert_non_null(strstr(buf, "\"lora_target_modules\":[\"q_proj\",\"v_proj\"]"));
    assert_non_null(strstr(buf, "\"beta\":0.25"));
    job_hyper_parse(buf, &back);
    assert_memory_equal(&h, &back, sizeof h);
    /* supervised: no beta written, so it reads back as the default */
    assert_true(job_hyper_format(&h, false, buf, sizeof buf));
    assert_null(strstr(buf, "beta"));
    /* too small a buffer is refused, not cut */
    assert_false(job_hyper_format(&h, true, buf, 20));
}

static void out_of_range_reads_as_default(void **state)
{
    (void)state;
    struct job_hyper h;
    job_hyper_parse("{\"max_seq_len\":1,\"lora_rank\":100000,\"lora_alpha\":-1,\"lora_dropout\":1,"
                    "\"lora_target_modules\":[\"nope\"],\"lr_scheduler\":\"step\","
                    "\"warmup_ratio\":3,\"weight_decay\":-2,\"packing\":1,\"beta\":0}",
                    &h);
    assert_int_equal(h.max_seq_len, JOB_HYPER_LEGACY_SEQ);
    assert_int_equal(h.lora_rank, 16);
    assert_true(h.lora_alpha == 32.0);
    assert_true(h.lora_dropout == 0.0);
    assert_int_equal(h.lora_targets, JOB_HYPER_ALL_TARGETS);
    assert_int_equal(h.lr_schedule, JOB_LR_COSINE);
    assert_true(h.warmup_ratio == 0.05);
    assert_true(h.weight_decay == 0.0);
    assert_true(h.packing);
    assert_true(h.dpo_beta == 0.1);
}

static void warmup_steps_and_names(void **state)
{
    (void)state;
    struct job_hyper h;
    job_hyper_defaults(&h);
    assert_int_equal(job_hyper_warmup_steps(&h, 1), 1);
    assert_int_equal(job_hyper_warmup_steps(&h, 100), 5);
    assert_int_equal(job_hyper_warmup_steps(&h, 101), 6);
    h.warmup_ratio = 0;
    assert_int_equal(job_hyper_warmup_steps(&h, 100), 0);
    assert_string_equal(job_hyper_target_name(6), "down_proj");
    assert_null(job_hyper_target_name(7));
    assert_int_equal(job_hyper_target_parse("gate_proj"), 4);
    assert_int_equal(job_hyper_target_parse("fc1"), -1);
    enum job_lr_schedule s;
    assert_true(job_hyper_schedule_parse("linear", &s));
    assert_int_equal(s, JOB_LR_LINEAR);
    assert_false(job_hyper_schedule_parse("step", &s));
}

/* validation_split's held-out count, as the trainer splits (at least one
 * held out, at least one trained on); -1 when a file cannot be split. */
static void split_held_out(void **state)
{
    (void)state;
    assert_int_equal(job_hyper_split_held_out(0, 1), 0); /* off: any file */
    assert_int_equal(job_hyper_split_held_out(0.2, 1), -1);
    assert_int_equal(job_hyper_split_held_out(0.2, 0), -1);
    assert_int_equal(job_hyper_split_held_out(0.5, 2), 1);
    assert_int_equal(job_hyper_split_held_out(0.1, 3), 1);  /* round(0.3) is 0: at least 1 */
    assert_int_equal(job_hyper_split_held_out(0.5, 3), 2);  /* round(1.5), one left */
    assert_int_equal(job_hyper_split_held_out(0.2, 200), 40);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_and_legacy),
        cmocka_unit_test(round_trip),
        cmocka_unit_test(out_of_range_reads_as_default),
        cmocka_unit_test(warmup_steps_and_names),
        cmocka_unit_test(split_held_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
