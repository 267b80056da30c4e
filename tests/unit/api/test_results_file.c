/* test_results_file.c - the results file's CSV from metrics events: rows by
 * step whatever order the events come in, two events of one step merged,
 * events that are not a step's metrics skipped, empty cells for what was
 * not measured; and the file id that names its job. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
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
    assert_int_equal(results_csv_size(c), len);
    /* a row added after the text still merges with its step's row */
    assert_true(results_csv_add(c, "{\"step\":20,\"train_loss\":1.25}"));
    assert_true(results_csv_add(c, "{\"step\":15,\"train_loss\":1.75}"));
    size_t size = results_csv_size(c);
    free(text);
    text = results_csv_text(c, &len);
    assert_string_equal(text,
                        "step,train_loss,train_accuracy,valid_loss,valid_mean_token_accuracy,"
                        "full_valid_loss,full_valid_mean_token_accuracy\n"
                        "10,2,0.375,2.5,0.125,,\n"
                        "15,1.75,,,,,\n"
                        "20,1.25,0.5,,,1.75,0.25\n");
    assert_int_equal(size, len);
    free(text);
    results_csv_free(c);
    results_csv_free(NULL);
}

/* Merging is linear in the events: 20,000 steps, newest first as the store
 * lists them, every tenth reported twice; each add looks at a bounded
 * number of rows (its lookup, and its share of the index's regrowth: about
 * 4 here), not at all of them (a search of every row: 2.2e8 in all). */
static void merging_is_linear(void **state)
{
    (void)state;
    struct results_csv *c = results_csv_new();
    assert_non_null(c);
    const long steps = 20000;
    size_t events = 0;
    char ev[160];
    for (long s = steps; s >= 1; s--) {
        snprintf(ev, sizeof ev, "{\"step\":%ld,\"train_loss\":%g}", s * 10, 2.0 - 1e-5 * (double)s);
        assert_true(results_csv_add(c, ev));
        events++;
        if (s % 10 == 0) {
            snprintf(ev, sizeof ev, "{\"step\":%ld,\"train_loss\":1,\"valid_loss\":0.5}", s * 10);
            assert_true(results_csv_add(c, ev));
            events++;
        }
    }
    size_t work = results_csv_work(c);
    if (work > 8 * events)
        fprintf(stderr, "%zu events looked at %zu rows\n", events, work);
    assert_true(work <= 8 * events);
    size_t len = 0;
    char *text = results_csv_text(c, &len);
    assert_non_null(text);
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    assert_int_equal(lines, 1 + steps);
    assert_non_null(strstr(text, "\n100,1,,0.5,,,\n"));
    free(text);
    results_csv_free(c);
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
        cmocka_unit_test(merging_is_linear),
        cmocka_unit_test(ids_name_the_job),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
