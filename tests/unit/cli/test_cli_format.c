/* test_cli_format.c - progress bars, money, time texts, tables and the job,
 * estimate and list views of the command-line client. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_format.h"

/* Runs a printer into a string (owned by the caller). */
static char *render(void (*fn)(FILE *, const json_t *), const char *json_text)
{
    json_error_t e;
    json_t *v = json_loads(json_text, 0, &e);
    if (!v)
        fail_msg("bad test JSON: %s", e.text);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fn(f, v);
    fclose(f);
    json_decref(v);
    return buf;
}

static void progress_bars(void **state)
{
    (void)state;
    char b[64];
    assert_string_equal(cli_progress_bar(b, sizeof b, 45), "[#########-----------]  45%");
    assert_string_equal(cli_progress_bar(b, sizeof b, 0), "[--------------------]   0%");
    assert_string_equal(cli_progress_bar(b, sizeof b, 100), "[####################] 100%");
    assert_string_equal(cli_progress_bar(b, sizeof b, 99), "[###################-]  99%");
    assert_string_equal(cli_progress_bar(b, sizeof b, 4), "[--------------------]   4%");
    assert_string_equal(cli_progress_bar(b, sizeof b, 5), "[#-------------------]   5%");
    assert_string_equal(cli_progress_bar(b, sizeof b, 150), "[####################] 100%");
    assert_string_equal(cli_progress_bar(b, sizeof b, -3), "[--------------------]   0%");
}

static void money(void **state)
{
    (void)state;
    char b[64];
    json_t *v = json_real(0.42);
    assert_string_equal(cli_money(b, sizeof b, v, "usd"), "$0.42");
    assert_string_equal(cli_money(b, sizeof b, v, NULL), "$0.42");
    assert_string_equal(cli_money(b, sizeof b, v, "eur"), "0.42 EUR");
    json_decref(v);
    v = json_real(0.00312);
    assert_string_equal(cli_money(b, sizeof b, v, "USD"), "$0.00312");
    json_decref(v);
    v = json_integer(3);
    assert_string_equal(cli_money(b, sizeof b, v, "USD"), "$3.00");
    json_decref(v);
    assert_string_equal(cli_money(b, sizeof b, NULL, "USD"), "-");
    json_t *lo = json_real(0.12), *hi = json_real(0.31), *same = json_real(0.12);
    assert_string_equal(cli_money_range(b, sizeof b, lo, hi, "usd"), "$0.12 to $0.31");
    assert_string_equal(cli_money_range(b, sizeof b, lo, same, "usd"), "$0.12");
    assert_string_equal(cli_money_range(b, sizeof b, NULL, hi, "usd"), "$0.31");
    json_decref(lo);
    json_decref(hi);
    json_decref(same);
}

static json_t *job(const char *text)
{
    json_error_t e;
    json_t *v = json_loads(text, 0, &e);
    if (!v)
        fail_msg("bad test JSON: %s", e.text);
    return v;
}

static void time_left_follows_the_help_page(void **state)
{
    (void)state;
    char b[64];
    /* Under 1.5 hours in minutes, longer in hours with one decimal: the
     * time-left rule, not the estimate rule (4800 s is "80 min" here). */
    json_t *j = job("{\"status\":\"running\",\"time_left\":{\"low_s\":2400,\"high_s\":4800,"
                    "\"text\":\"ignored\",\"basis\":\"pace\"}}");
    assert_string_equal(cli_job_time_left(b, sizeof b, j), "40 min to 80 min");
    json_decref(j);
    j = job("{\"status\":\"queued\",\"time_left\":{\"low_s\":2400,\"high_s\":8640}}");
    assert_string_equal(cli_job_time_left(b, sizeof b, j), "40 min to 2.4 h");
    json_decref(j);
    j = job("{\"status\":\"re-scheduling\",\"time_left\":{\"low_s\":600,\"high_s\":600}}");
    assert_string_equal(cli_job_time_left(b, sizeof b, j), "10 min");
    json_decref(j);
    /* Only the text: used as it is. */
    j = job("{\"status\":\"running\",\"time_left\":{\"text\":\"5 min\"}}");
    assert_string_equal(cli_job_time_left(b, sizeof b, j), "5 min");
    json_decref(j);
    /* Ended, cancelling or unknown: a dash. */
    j = job("{\"status\":\"succeeded\",\"time_left\":{\"low_s\":1,\"high_s\":2}}");
    assert_string_equal(cli_job_time_left(b, sizeof b, j), "-");
    json_decref(j);
    j = job("{\"status\":\"cancelling\",\"time_left\":{\"low_s\":1,\"high_s\":2}}");
    assert_string_equal(cli_job_time_left(b, sizeof b, j), "-");
    json_decref(j);
    j = job("{\"status\":\"running\",\"time_left\":null}");
    assert_string_equal(cli_job_time_left(b, sizeof b, j), "-");
    json_decref(j);
    /* The estimate rule: each end under 1 hour in minutes. */
    j = job("{\"time\":{\"low_s\":2400,\"high_s\":4680}}");
    assert_string_equal(cli_estimate_time(b, sizeof b, j), "40 min to 1.3 h");
    json_decref(j);
}

static void percent_and_method(void **state)
{
    (void)state;
    char b[128];
    json_t *j = job("{\"status\":\"running\",\"progress\":{\"steps_done\":54,\"max_steps\":120,"
                    "\"percent\":45}}");
    assert_int_equal(cli_job_percent(j), 45);
    json_decref(j);
    j = job("{\"status\":\"running\",\"progress\":{\"steps_done\":54,\"max_steps\":120}}");
    assert_int_equal(cli_job_percent(j), 45);
    json_decref(j);
    j = job("{\"status\":\"succeeded\",\"progress\":{\"steps_done\":3,\"max_steps\":120}}");
    assert_int_equal(cli_job_percent(j), 100);
    json_decref(j);
    j = job("{\"status\":\"queued\"}");
    assert_int_equal(cli_job_percent(j), 0);
    assert_string_equal(cli_job_method(b, sizeof b, j), "Supervised fine-tuning");
    json_decref(j);
    j = job("{\"precision\":\"4-bit\"}");
    assert_string_equal(cli_job_method(b, sizeof b, j), "Supervised fine-tuning, 4-bit");
    json_decref(j);
}

static void price_column(void **state)
{
    (void)state;
    char b[128];
    json_t *j = job("{\"status\":\"running\",\"estimate\":{\"price\":{\"low\":0.12,\"high\":0.31,"
                    "\"currency\":\"usd\"}},\"price\":{\"charged\":0,\"refunded\":0}}");
    assert_string_equal(cli_job_price(b, sizeof b, j), "$0.12 to $0.31 (estimate)");
    json_decref(j);
    j = job("{\"status\":\"succeeded\",\"price\":{\"charged\":0.30,\"refunded\":0.05,"
            "\"currency\":\"usd\"}}");
    assert_string_equal(cli_job_price(b, sizeof b, j), "$0.25 (charged)");
    json_decref(j);
    j = job("{\"status\":\"failed\",\"price\":{\"charged\":0.30,\"refunded\":0.30}}");
    assert_string_equal(cli_job_price(b, sizeof b, j), "$0.00 (not charged)");
    json_decref(j);
    j = job("{\"status\":\"queued\"}");
    assert_string_equal(cli_job_price(b, sizeof b, j), "-");
    json_decref(j);
}

static void tables_align_without_trailing_spaces(void **state)
{
    (void)state;
    static const char *const head[] = {"ID", "NAME", "NOTE"};
    struct cli_table t;
    cli_table_init(&t, 3, head);
    const char *r1[] = {"a", "naïve", "x"};
    const char *r2[] = {"long-id", "b", NULL};
    assert_int_equal(cli_table_add(&t, r1), 0);
    assert_int_equal(cli_table_add(&t, r2), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cli_table_print(&t, f);
    fclose(f);
    cli_table_free(&t);
    assert_string_equal(buf, "ID       NAME   NOTE\n"
                             "a        naïve  x\n"
                             "long-id  b\n");
    free(buf);
    assert_int_equal(cli_text_width("naïve"), 5);
}

static void jobs_table(void **state)
{
    (void)state;
    char *out = render(cli_print_jobs,
                       "{\"object\":\"list\",\"data\":["
                       "{\"id\":\"ftjob-b\",\"name\":\"second\",\"precision\":\"4-bit\","
                       "\"status\":\"running\",\"progress\":{\"steps_done\":54,\"max_steps\":120,"
                       "\"percent\":45},\"time_left\":{\"low_s\":2400,\"high_s\":3000},"
                       "\"estimate\":{\"price\":{\"low\":0.12,\"high\":0.31,\"currency\":\"usd\"}}},"
                       "{\"id\":\"ftjob-a\",\"name\":null,\"precision\":\"16-bit\","
                       "\"status\":\"succeeded\",\"progress\":{\"steps_done\":120,"
                       "\"max_steps\":120},\"price\":{\"charged\":0.2,\"refunded\":0}}],"
                       "\"has_more\":false}");
    const char *want =
        "ID       NAME    METHOD                          STATUS     PROGRESS                     "
        "TIME LEFT         PRICE\n"
        "ftjob-b  second  Supervised fine-tuning, 4-bit   running    [#########-----------]  45%  "
        "40 min to 50 min  $0.12 to $0.31 (estimate)\n"
        "ftjob-a  -       Supervised fine-tuning, 16-bit  succeeded  [####################] 100%  "
        "-                 $0.20 (charged)\n";
    assert_string_equal(out, want);
    free(out);
    out = render(cli_print_jobs, "{\"object\":\"list\",\"data\":[],\"has_more\":false}");
    assert_string_equal(out, "No jobs yet.\n");
    free(out);
}

static void print_job_with_checkpoints_fwd(FILE *f, const json_t *v)
{
    cli_print_job(f, json_object_get(v, "job"), NULL);
}

/* A name the server sends is the user's text: its control characters
 * are shown, never obeyed by the terminal. */
static void untrusted_text_is_escaped(void **state)
{
    (void)state;
    char *out = render(cli_print_jobs,
                       "{\"object\":\"list\",\"data\":[{\"id\":\"ftjob-e\","
                       "\"name\":\"a\\u001b[2J\\u009bb\\nc\",\"status\":\"queued\"}]}");
    assert_null(strchr(out, 0x1b));
    assert_null(strstr(out, "\xc2\x9b"));
    assert_non_null(strstr(out, "a\\x1b[2J\\u009bb\\x0ac"));
    free(out);
    out = render(print_job_with_checkpoints_fwd,
                 "{\"job\":{\"id\":\"ftjob-e\",\"name\":\"x\\u0007y\",\"status\":\"failed\","
                 "\"message\":\"Training failed: \\u001b]0;owned\\u0007\"}}");
    assert_null(strchr(out, 0x1b));
    assert_null(strchr(out, 0x07));
    assert_non_null(strstr(out, "ftjob-e  x\\x07y\n"));
    assert_non_null(strstr(out, "Training failed: \\x1b]0;owned\\x07\n"));
    free(out);
    char buf[8];
    assert_string_equal(cli_safe_text(buf, sizeof buf, "ab\x1b"), "ab\\x1b");
    assert_string_equal(cli_safe_text(buf, sizeof buf, "abcd\x1b"), "abcd"); /* no cut escape */
    char *log = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&log, &len);
    cli_write_safe(f, "step 1\tloss\n\x1b[31mred\n", 21);
    fclose(f);
    assert_string_equal(log, "step 1\tloss\n\\x1b[31mred\n");
    free(log);
}

static void print_job_with_checkpoints(FILE *f, const json_t *v)
{
    cli_print_job(f, json_object_get(v, "job"), json_object_get(v, "checkpoints"));
}

static void job_detail(void **state)
{
    (void)state;
    char *out = render(
        print_job_with_checkpoints,
        "{\"job\":{\"id\":\"ftjob-1\",\"name\":\"demo\",\"status\":\"running\",\"message\":null,"
        "\"model\":\"alallo-tiny\",\"precision\":\"16-bit\",\"goal\":\"lowest_cost\","
        "\"training_file\":\"file-1\",\"fine_tuned_model\":null,"
        "\"progress\":{\"steps_done\":54,\"max_steps\":120,\"percent\":45},"
        "\"time_left\":{\"low_s\":2400,\"high_s\":4800,\"basis\":\"pace\"},"
        "\"estimate\":{\"time\":{\"low_s\":2400,\"high_s\":4680},"
        "\"price\":{\"low\":0.12,\"high\":0.31,\"currency\":\"usd\"}},"
        "\"price\":{\"charged\":0.05,\"refunded\":0,\"cancel_now\":0.07,\"currency\":\"usd\"},"
        "\"attempts\":[{\"id\":\"att-1\",\"worker\":\"local\",\"status\":\"ended\","
        "\"start_step\":0,\"end_step\":40,\"reason\":\"worker lost\"},"
        "{\"id\":\"att-2\",\"worker\":\"big\",\"status\":\"running\",\"start_step\":40,"
        "\"end_step\":null,\"reason\":null}]},"
        "\"checkpoints\":{\"data\":[{\"id\":\"ck-1\",\"step_number\":40,"
        "\"metrics\":{\"train_loss\":2.31144},"
        "\"fine_tuned_model_checkpoint\":\"ftjob-1:ckpt-step-40\"}]}}");
    const char *want_lines[] = {
        "ftjob-1  demo\n",
        "Status:                running\n",
        "Progress:              [#########-----------]  45%  (54 / 120 steps)\n",
        "Time left (estimate):  40 min to 80 min  (from the job's pace)\n",
        "Estimate:              40 min to 1.3 h, $0.12 to $0.31\n",
        "Price:                 $0.05 (charged $0.05, refunded $0.00)\n",
        "Cancel now:            $0.07\n",
        "Training method:       Supervised fine-tuning, 16-bit\n",
        "Goal:                  Lowest cost\n",
        "Fine-tuned model:      -\n",
        "  att-1  local   ended    0 to 40  worker lost\n",
        "  att-2  big     running  from 40\n",
        "  40    2.3114      ftjob-1:ckpt-step-40\n",
    };
    for (size_t i = 0; i < sizeof want_lines / sizeof want_lines[0]; i++)
        if (!strstr(out, want_lines[i]))
            fail_msg("missing line '%s' in:\n%s", want_lines[i], out);
    assert_null(strstr(out, "Message:"));
    free(out);

    /* A failed job shows its message word for word. */
    out = render(print_job_with_checkpoints,
                 "{\"job\":{\"id\":\"ftjob-2\",\"status\":\"failed\",\"message\":"
                 "\"Training failed: line 3 of train.jsonl: missing field \\\"completion\\\"\","
                 "\"progress\":{\"steps_done\":0,\"max_steps\":10}}}");
    assert_non_null(strstr(out, "Message:               Training failed: line 3 of train.jsonl: "
                                "missing field \"completion\"\n"));
    assert_non_null(strstr(out, "Time left (estimate):  -\n"));
    free(out);

    /* An estimate without numbers reads as words, not "Estimate: -, -". */
    out = render(print_job_with_checkpoints,
                 "{\"job\":{\"id\":\"ftjob-3\",\"status\":\"failed\",\"estimate\":"
                 "{\"time\":{\"low_s\":null,\"high_s\":null},\"price\":{\"low\":null}}}}");
    assert_non_null(strstr(out, "Estimate:              none (the job was not estimated)\n"));
    free(out);
    out = render(print_job_with_checkpoints,
                 "{\"job\":{\"id\":\"ftjob-4\",\"status\":\"queued\",\"estimate\":"
                 "{\"time\":{\"low_s\":600,\"high_s\":600},\"price\":{}}}}");
    assert_non_null(strstr(out, "Estimate:              10 min, price not known\n"));
    free(out);
    /* A job capped at its estimate: what the user pays comes first. */
    out = render(print_job_with_checkpoints,
                 "{\"job\":{\"id\":\"ftjob-3\",\"status\":\"succeeded\","
                 "\"progress\":{\"steps_done\":10,\"max_steps\":10},"
                 "\"price\":{\"charged\":0.06,\"refunded\":0.0579,\"currency\":\"usd\"}}}");
    if (!strstr(out, "Price:                 $0.0021 (charged $0.06, refunded $0.0579)\n"))
        fail_msg("price line in:\n%s", out);
    free(out);
}

static void estimate_view(void **state)
{
    (void)state;
    char *out = render(cli_print_estimate,
                       "{\"time\":{\"low_s\":2400,\"high_s\":4680,\"text\":\"x\"},"
                       "\"price\":{\"low\":0.12,\"high\":0.31,\"currency\":\"usd\"},"
                       "\"plan\":{\"memory_bytes\":2147483648,\"worker\":\"local\"},"
                       "\"message\":\"No capacity is free right now; the job would wait in the "
                       "queue.\"}");
    assert_string_equal(out, "Time:                  40 min to 1.3 h\n"
                             "Price:                 $0.12 to $0.31\n"
                             "Plan:                  2.0 GiB of memory, on worker local\n"
                             "No capacity is free right now; the job would wait in the queue.\n");
    free(out);
    out = render(cli_print_estimate, "{\"time\":{\"low_s\":600,\"high_s\":600},"
                                     "\"price\":{\"low\":0.01,\"high\":0.01},\"message\":null}");
    assert_string_equal(out, "Time:                  10 min\n"
                             "Price:                 $0.01\n");
    free(out);
    /* Past the time limit: the estimate says so. */
    out = render(cli_print_estimate, "{\"time\":{\"low_s\":219600,\"high_s\":840240},"
                                     "\"time_limit_message\":\"The job would reach the 12-hour time "
                                     "limit before it finishes.\"}");
    assert_non_null(strstr(out, "The job would reach the 12-hour time limit before it finishes.\n"));
    free(out);
}

static void other_lists(void **state)
{
    (void)state;
    char *out = render(cli_print_workers,
                       "{\"data\":[{\"name\":\"local\",\"state\":\"active\",\"class\":\"spot\","
                       "\"resources\":{\"cpus\":2,\"mem_bytes\":2147483648,\"accelerator\":\"cpu\"},"
                       "\"price_per_hour\":0.4,\"speed\":{\"tokens_per_s\":4321.2},\"running\":null},"
                       "{\"name\":\"b\",\"state\":\"draining\",\"class\":\"on-demand\","
                       "\"resources\":{\"cpus\":1,\"mem_bytes\":1048576},\"price_per_hour\":0,"
                       "\"speed\":{\"tokens_per_s\":null},\"running\":\"ftjob-9\"},"
                       "{\"name\":\"g\",\"state\":\"active\",\"class\":\"on-demand\","
                       "\"resources\":{\"cpus\":16,\"mem_bytes\":137438953472,\"gpus\":"
                       "{\"count\":8,\"kind\":\"h200\",\"mem_bytes\":151397597184}},"
                       "\"price_per_hour\":20,\"speed\":{},\"running\":null}]}");
    assert_string_equal(out,
                        "NAME   STATE     CLASS      CPUS  MEMORY     GPUS                  "
                        "PRICE/H  SPEED          RUNNING\n"
                        "local  active    spot       2     2.0 GiB    -                     "
                        "$0.40    4321 tokens/s  -\n"
                        "b      draining  on-demand  1     1.0 MiB    -                     "
                        "$0.00    unknown        ftjob-9\n"
                        "g      active    on-demand  16    128.0 GiB  8 x h200 (141.0 GiB)  "
                        "$20.00   unknown        -\n");
    free(out);
    /* GPUs whose worker trains on its CPUs (a binary built without CUDA)
     * say so; a "cuda" trainer adds nothing. */
    out = render(cli_print_workers,
                 "{\"data\":[{\"name\":\"g\",\"state\":\"active\",\"class\":\"on-demand\","
                 "\"resources\":{\"cpus\":2,\"mem_bytes\":1073741824,\"trainer\":\"cpu\",\"gpus\":"
                 "{\"count\":1,\"kind\":\"h100\",\"mem_bytes\":85899345920}},"
                 "\"price_per_hour\":3,\"speed\":{},\"running\":null},"
                 "{\"name\":\"c\",\"state\":\"active\",\"class\":\"on-demand\","
                 "\"resources\":{\"cpus\":2,\"mem_bytes\":1073741824,\"trainer\":\"cuda\",\"gpus\":"
                 "{\"count\":1,\"kind\":\"h100\",\"mem_bytes\":85899345920}},"
                 "\"price_per_hour\":3,\"speed\":{},\"running\":null}]}");
    assert_non_null(
        strstr(out, "\ng     active  on-demand  2     1.0 GiB  1 x h100 (80.0 GiB) unused: no CUDA  "));
    assert_non_null(
        strstr(out, "\nc     active  on-demand  2     1.0 GiB  1 x h100 (80.0 GiB)                  "));
    free(out);
    out = render(cli_print_ledger,
                 "{\"data\":[{\"created_at\":0,\"job\":\"ftjob-1\",\"attempt\":\"att-1\","
                 "\"kind\":\"charge\",\"amount\":0.3,\"currency\":\"usd\",\"steps\":40},"
                 "{\"created_at\":0,\"job\":\"ftjob-1\",\"kind\":\"refund\",\"amount\":0.1,"
                 "\"currency\":\"usd\",\"steps\":10,\"from_step\":30,\"to_step\":40,"
                 "\"attempt\":\"att-1\",\"reason\":\"lost work (repeated for free)\"}]}");
    assert_non_null(strstr(out, "ftjob-1  charge  $0.30   40 steps, attempt att-1\n"));
    assert_non_null(strstr(out, "ftjob-1  refund  $0.10   10 steps (30 to 40), attempt att-1: lost "
                                "work (repeated for free)\n"));
    assert_non_null(strstr(out, "Total: $0.20\n"));
    free(out);
    out = render(cli_print_models,
                 "{\"data\":[{\"id\":\"alallo-tiny\",\"kind\":\"base\","
                 "\"size\":{\"parameters\":12500000,\"bytes\":50000000},"
                 "\"methods\":[{\"precision\":\"16-bit\",\"adapter\":\"lora\",\"available\":true},"
                 "{\"precision\":\"16-bit\",\"adapter\":\"full\",\"available\":false},"
                 "{\"precision\":\"4-bit\",\"adapter\":\"lora\",\"available\":true}]},"
                 "{\"id\":\"big\",\"kind\":\"base\",\"size\":{\"parameters\":7000000000},"
                 "\"methods\":[{\"precision\":\"16-bit\",\"adapter\":\"lora\",\"available\":false}]},"
                 "{\"id\":\"ft:alallo-tiny:x\",\"kind\":\"fine-tuned\",\"base_model\":\"alallo-tiny\"}]}");
    assert_non_null(strstr(out, "alallo-tiny       base        12.5M       16-bit LoRA, 4-bit LoRA\n"));
    assert_non_null(strstr(out, "big               base        7.0B        none now\n"));
    assert_non_null(strstr(out, "ft:alallo-tiny:x  fine-tuned  -           from alallo-tiny\n"));
    free(out);
    out = render(cli_print_files, "{\"data\":[]}");
    assert_string_equal(out, "No files yet.\n");
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(progress_bars),
        cmocka_unit_test(money),
        cmocka_unit_test(time_left_follows_the_help_page),
        cmocka_unit_test(percent_and_method),
        cmocka_unit_test(price_column),
        cmocka_unit_test(tables_align_without_trailing_spaces),
        cmocka_unit_test(jobs_table),
        cmocka_unit_test(job_detail),
        cmocka_unit_test(estimate_view),
        cmocka_unit_test(other_lists),
        cmocka_unit_test(untrusted_text_is_escaped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
