/* test_results_file.c - the results file's CSV from metrics events: rows by
 * step whatever order the events come in, two events of one step merged,
 * events that are not a step's metrics skipped, empty cells for what was
 * not measured; and the file id that names its job. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "api/results_file.h"

static void rows_by_step_merged(void **state)
{
    (void)state;
    struct results_csv *c = results_csv_new();
    assert_non_null(c);
    /* newest first, as the store lists events */
    assert_true(results_csv_add(c, "{\"step\":20,\"train_loss\":1.5,\"learning_rate\":0.1,"
                                   "\"train_mean_token_accuracy\":0.5,\"full_valid_loss\":1.75,"
                                   "\"full_valid_mean_token_accuracy\":0.25}"));
    assert_true(results_csv_add(c, "{\"peak_rss_bytes\":1000}"));
    assert_true(results_csv_add(c, "{\"step\":10,\"train_loss\":2,\"valid_loss\":2.5,"
                                   "\"valid_mean_token_accuracy\":0.125}"));
    assert_true(results_csv_add(c, ""));
    /* a later report of step 10 adds what it measured */
    assert_true(results_csv_add(c, "{\"step\":10,\"train_loss\":2,"
                                   "\"train_mean_token_accuracy\":0.375}"));
    size_t len;
    char *text = results_csv_text(c, &len);
    assert_non_null(text);
    assert_string_equal(text,
                        "step,train_loss,train_accuracy,valid_loss,valid_mean_token_accuracy,"
                        "full_valid_loss,full_valid_mean_token_accuracy\n"
                        "10,2,0.375,2.5,0.125,,\n"
                        "20,1.5,0.5,,,1.75,0.25\n");
    assert_int_equal(len, strlen(text));
    free(text);
    results_csv_free(c);
    results_csv_free(NULL);
}

static void ids_name_the_job(void **state)
{
    (void)state;
    struct store_job j;
    memset(&j, 0, sizeof j);
    strcpy(j.id, "ftjob-abc123");
    j.status = JOB_RUNNING;
    j.steps_done = 5;
    char id[IDS_MAX], job[IDS_MAX];
    assert_false(results_file_id(&j, id, sizeof id)); /* not ended */
    j.status = JOB_SUCCEEDED;
    assert_true(results_file_id(&j, id, sizeof id));
    assert_string_equal(id, "file-results-abc123");
    assert_true(results_file_job(id, job, sizeof job));
    assert_string_equal(job, "ftjob-abc123");
    j.steps_done = 0; /* ended without training: no file */
    assert_false(results_file_id(&j, id, sizeof id));
    assert_false(results_file_job("file-abc123", job, sizeof job));
    assert_false(results_file_job("file-results-", job, sizeof job));
    assert_false(results_file_job("file-results-a/b", job, sizeof job));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rows_by_step_merged),
        cmocka_unit_test(ids_name_the_job),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
