/* test_job_request.c - job_request_parse (api/job_request.h) alone: a
 * job's body as JSON into a struct job_request, with no store and no
 * control. A JSON error is kept with its place in the order of checks
 * (control/job_draft.h), so that control_job_draft can answer whichever
 * comes first; the whole path is in test_jobs_api.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "api/job_request.h"

static struct job_request rq; /* large: not on the stack */

static bool parse(const char *text)
{
    json_t *body = json_loads(text, 0, NULL);
    assert_non_null(body);
    bool ok = job_request_parse(body, &rq);
    json_decref(body); /* the fields read below are not the borrowed strings */
    return ok;
}

static void a_plain_body_is_accepted_with_auto_everywhere(void **state)
{
    (void)state;
    assert_true(parse("{\"model\":\"tiny\",\"training_file\":\"file-a\"}"));
    assert_int_equal(rq.err.at, JOB_AT_NONE);
    assert_true(rq.epochs == 0 && rq.batch == 0 && rq.lr == 0);
    assert_false(rq.seq_given);
    assert_false(rq.seed_given);
    assert_false(rq.dpo);
    assert_string_equal(rq.metadata, "");
}

static void errors_keep_their_place_in_the_order(void **state)
{
    (void)state;
    assert_false(parse("{\"training_file\":\"f\"}"));
    assert_int_equal(rq.err.at, JOB_AT_FIELDS);
    assert_string_equal(rq.err.param, "model");
    assert_string_equal(rq.err.message, "model is required.");

    assert_false(parse("{\"model\":\"m\",\"training_file\":\"f\",\"hyperparameters\":{\"n_epochs\":0}}"));
    assert_int_equal(rq.err.at, JOB_AT_HYPER);
    assert_int_equal(rq.err.code, ERR_INVALID);
    assert_string_equal(rq.err.param, "hyperparameters.n_epochs");

    assert_false(parse("{\"model\":\"m\",\"training_file\":\"f\",\"hyperparameters\":{\"packing\":3}}"));
    assert_int_equal(rq.err.at, JOB_AT_MORE_HYPER);
    assert_string_equal(rq.err.message, "packing must be true or false.");

    assert_false(parse("{\"model\":\"m\",\"training_file\":\"f\",\"seed\":-1,\"max_steps\":0}"));
    assert_int_equal(rq.err.at, JOB_AT_SETTINGS);
    assert_string_equal(rq.err.param, "seed");

    assert_false(parse("{\"model\":\"m\",\"training_file\":\"f\",\"max_steps\":0}"));
    assert_int_equal(rq.err.at, JOB_AT_MAX_STEPS);
    assert_string_equal(rq.err.param, "max_steps");
}

static void max_seq_len_is_left_to_control_with_its_model(void **state)
{
    (void)state;
    /* Out of any model's context, but the bound is the model's: control's. */
    assert_true(parse("{\"model\":\"m\",\"training_file\":\"f\",\"hyperparameters\":{\"max_seq_len\":\"long\"}}"));
    assert_true(rq.seq_given);
    assert_false(rq.seq_integer);
    assert_true(parse("{\"model\":\"m\",\"training_file\":\"f\",\"hyperparameters\":{\"max_seq_len\":999999}}"));
    assert_true(rq.seq_given && rq.seq_integer && rq.seq == 999999);
    assert_int_equal(rq.more.max_seq_len, 0);
}

#define RFT(GRADER, HP)                                                                      \
    "{\"model\":\"m\",\"training_file\":\"f\",\"method\":{\"type\":\"reinforcement\","          \
    "\"reinforcement\":{" GRADER "\"hyperparameters\":" HP "}}}"
#define CHECK_GRADER                                                                           \
    "\"grader\":{\"type\":\"string_check\",\"input\":\"{{sample.output_text}}\","              \
    "\"reference\":\"{{item.reference}}\",\"operation\":\"eq\"},"

/* Reinforcement fine-tuning: the grader checked at the edge, the sampling
 * hyper-parameters read (docs/rft.md), and what it refuses. */
static void reinforcement_reads_its_grader_and_sampling(void **state)
{
    (void)state;
    assert_true(parse(RFT(CHECK_GRADER, "{\"compute_multiplier\":2,\"reasoning_effort\":"
                                        "\"low\",\"eval_interval\":3,\"eval_samples\":2,"
                                        "\"beta\":0.05}")));
    assert_true(rq.rft);
    assert_false(rq.dpo);
    assert_int_equal(rq.more.rft_group, 8);
    assert_int_equal(rq.more.rft_answer_tokens, 64);
    assert_int_equal(rq.more.rft_eval_interval, 3);
    assert_int_equal(rq.more.rft_eval_samples, 2);
    assert_true(rq.more.rft_kl == 0.05);
    assert_true(parse(RFT(CHECK_GRADER, "{}")));
    assert_int_equal(rq.more.rft_group, 4);
    assert_int_equal(rq.more.rft_answer_tokens, 128);

    assert_false(parse(RFT("", "{}")));
    assert_int_equal(rq.err.at, JOB_AT_HYPER);
    assert_string_equal(rq.err.param, "method.reinforcement.grader");
    /* a python grader's shape is checked here; whether it runs, by control */
    assert_false(parse(RFT("\"grader\":{\"type\":\"python\"},", "{}")));
    assert_string_equal(rq.err.param, "method.reinforcement.grader.source");
    assert_false(parse(RFT("\"grader\":{\"type\":\"label_model\"},", "{}")));
    assert_string_equal(rq.err.param, "method.reinforcement.grader.type");
    assert_false(parse(RFT(CHECK_GRADER, "{\"compute_multiplier\":11}")));
    assert_string_equal(rq.err.param, "hyperparameters.compute_multiplier");
    assert_false(parse(RFT(CHECK_GRADER, "{\"validation_split\":0.1}")));
    assert_int_equal(rq.err.at, JOB_AT_MORE_HYPER);
    assert_string_equal(rq.err.param, "hyperparameters.validation_split");
    /* beta belongs to DPO and reinforcement, not to supervised training */
    assert_false(parse("{\"model\":\"m\",\"training_file\":\"f\",\"hyperparameters\":"
                       "{\"beta\":0.1}}"));
    assert_string_equal(rq.err.param, "hyperparameters.beta");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_plain_body_is_accepted_with_auto_everywhere),
        cmocka_unit_test(reinforcement_reads_its_grader_and_sampling),
        cmocka_unit_test(errors_keep_their_place_in_the_order),
        cmocka_unit_test(max_seq_len_is_left_to_control_with_its_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
