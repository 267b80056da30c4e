/* test_worker_speed.c - the speed measurement at start, with shell scripts
 * standing in for `alallo bench train`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "worker/trainer_proc.h"
#include "worker/worker_speed.h"

static char dir[256];

static int make_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/alallo-test-speed-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Writes an executable script standing in for the alallo binary. */
static void fake_bin(char *path, size_t cap, const char *name, const char *body)
{
    snprintf(path, cap, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    assert_int_equal(chmod(path, 0755), 0);
}

static void parses_bench_output(void **state)
{
    (void)state;
    struct bench_speed s;
    assert_int_equal(bench_speed_parse("{\"tokens_per_s\": 1234.5, \"mfu\": 0.1, "
                                        "\"peak_rss_bytes\": 100}",
                                        &s),
                     0);
    assert_true(s.tokens_per_s == 1234.5);
    assert_true(s.flops == 0);
    assert_int_equal(bench_speed_parse("note: warming up\n"
                                        "{\"tokens_per_s\": 10, \"flops_per_s\": 5e9}\n",
                                        &s),
                     0);
    assert_true(s.tokens_per_s == 10 && s.flops == 5e9);
    assert_int_equal(bench_speed_parse("{\n  \"tokens_per_s\": 7,\n  \"mfu\": 0.5,\n"
                                        "  \"peak_flops\": 2e9\n}\n",
                                        &s),
                     0);
    assert_true(s.tokens_per_s == 7 && s.flops == 1e9);
    /* What `alallo bench train` prints. */
    assert_int_equal(bench_speed_parse("{\"shape\":\"base\",\"tokens_per_s\":6492.34,"
                                        "\"mfu\":0.478567,\"flops_per_token\":716800.0,"
                                        "\"peak_fp32_flops\":9.72425e9}",
                                        &s),
                     0);
    assert_true(s.tokens_per_s == 6492.34);
    assert_true(s.flops > 4.65e9 && s.flops < 4.66e9);
    /* The CPU bench's median step is the pace, FLOP/s follow it. */
    assert_int_equal(bench_speed_parse("{\"tokens_per_s\":3000,\"tokens_per_s_median\":45000,"
                                        "\"flops_per_token\":1000.0}",
                                        &s),
                     0);
    assert_true(s.tokens_per_s == 45000 && s.flops == 4.5e7);
    assert_int_equal(bench_speed_parse("{\"tokens_per_s\":3000,\"tokens_per_s_median\":6000,"
                                        "\"mfu\":0.5,\"peak_flops\":2e9}",
                                        &s),
                     0);
    assert_true(s.tokens_per_s == 6000 && s.flops == 2e9);
    assert_int_equal(bench_speed_parse("{\"tokens_per_s\":10,\"tokens_per_s_median\":0}", &s), 0);
    assert_true(s.tokens_per_s == 10);
    assert_int_equal(bench_speed_parse("{\"tokens_per_s_median\": 5}", &s), -1);
    assert_int_equal(bench_speed_parse("{\"tokens_per_s\": 0}", &s), -1);
    assert_int_equal(bench_speed_parse("{\"mfu\": 0.3}", &s), -1);
    assert_int_equal(bench_speed_parse("garbage", &s), -1);
    assert_int_equal(bench_speed_parse("", &s), -1);
    assert_int_equal(bench_speed_parse(NULL, &s), -1);
    /* A kept speed is today's bench's only with its "bench" */
    assert_true(
        bench_speed_is_current("{\"tokens_per_s\":9e3,\"flops\":1e11,\"bench\":\"base+tiny\"}"));
    assert_false(bench_speed_is_current("{\"tokens_per_s\":9e3,\"flops\":1e11,\"bench\":\"base\"}"));
    assert_false(bench_speed_is_current("{\"tokens_per_s\":4e4,\"flops\":3e10}"));
    assert_false(bench_speed_is_current("{\"tokens_per_s\":4e4,\"bench\":\"tiny\"}"));
    assert_false(bench_speed_is_current("not json"));
    assert_false(bench_speed_is_current(NULL));
}

/* The small shape's line is the second point, never the worker's speed. */
static void the_small_shape_is_a_second_point(void **state)
{
    (void)state;
    struct bench_speed s;
    const char *both = "{\"shape\":\"tiny\",\"params\":123712,\"tokens_per_s\":30000,"
                       "\"flops_per_token\":716800.0}\n"
                       "note\n"
                       "{\"shape\":\"base\",\"params\":2410176,\"tokens_per_s\":9000,"
                       "\"tokens_per_s_median\":10000,\"flops_per_token\":1.1e7}\n";
    assert_int_equal(bench_speed_parse(both, &s), 0);
    assert_true(s.tokens_per_s == 10000 && s.flops == 1.1e11 && s.params == 2410176);
    assert_true(s.small_params == 123712 && s.small_flops == 30000 * 716800.0);
    /* The small shape alone is no speed; without it there is no second point. */
    assert_int_equal(bench_speed_parse("{\"shape\":\"tiny\",\"params\":1,\"tokens_per_s\":3}", &s),
                     -1);
    assert_true(s.tokens_per_s == 0 && s.small_flops == 0);
    assert_int_equal(bench_speed_parse(strchr(both, '\n') + 1, &s), 0);
    assert_true(s.flops == 1.1e11 && s.small_params == 0 && s.small_flops == 0);
    /* Kept as JSON and read back; a half or a bad small point is none. */
    assert_int_equal(bench_speed_parse(both, &s), 0);
    json_t *kept = bench_speed_json(&s);
    assert_non_null(kept);
    char *text = json_dumps(kept, JSON_COMPACT);
    assert_true(bench_speed_is_current(text));
    struct bench_speed back;
    bench_speed_from_json(kept, &back);
    assert_true(back.tokens_per_s == 10000 && back.flops == 1.1e11 && back.params == 2410176);
    assert_true(back.small_params == 123712 && back.small_flops == s.small_flops);
    free(text);
    json_decref(kept);
    json_t *bad = json_loads("{\"tokens_per_s\":1,\"flops\":-2,\"small\":{\"params\":5}}", 0, NULL);
    bench_speed_from_json(bad, &back);
    assert_true(back.tokens_per_s == 1 && back.flops == 0 && back.small_params == 0);
    json_decref(bad);
    bench_speed_from_json(NULL, &back);
    assert_true(back.tokens_per_s == 0);
}

/* A stand-in bench that prints `json` only when called with exactly
 * `args` (else exit 9), measured for `threads` on `device`: 0 or -1. */
static int measure_with(const char *args, const char *json, int threads, const char *device,
                        struct bench_speed *s, char *err, size_t errcap)
{
    char bin[300], body[1024];
    snprintf(body, sizeof body,
             "[ \"$*\" = '%s' ] || { echo \"bad args: $*\" >&2; exit 9; }\n"
             "echo 'loading' >&2\n"
             "echo '%s'",
             args, json);
    fake_bin(bin, sizeof bin, "alallo-args", body);
    return worker_speed_measure(bin, threads, device, 10, NULL, s, err, errcap);
}

static void measures_with_the_right_arguments(void **state)
{
    (void)state;
    char err[300] = "";
    struct bench_speed s;
    /* The exact command line the worker promises. */
    if (measure_with("bench train --shape tiny,base --steps 17 --threads 3",
                     "{\"tokens_per_s\": 4321, \"flops\": 1.5e10, \"mfu\": 0.01}", 3, "cpu", &s,
                     err, sizeof err) != 0)
        fail_msg("measure: %s", err);
    assert_true(s.tokens_per_s == 4321);
    assert_true(s.flops == 1.5e10);
}

static void a_cuda_worker_measures_the_gpu_trainer(void **state)
{
    (void)state;
    char err[300] = "";
    struct bench_speed s;
    /* What the GPU bench prints with --shape: FLOP/s from tokens/s times
     * the FLOPs of a token. */
    const char *args = "bench train --device cuda --shape base --steps 17 --threads 2";
    const char *json = "{\"device\":\"cuda\",\"peak_bf16_flops\":7.9e14,\"shape\":\"base\","
                       "\"tokens_per_s\":200000,\"flops_per_token\":716800.0,\"mfu\":0.0002}";
    if (measure_with(args, json, 2, "cuda", &s, err, sizeof err) != 0)
        fail_msg("measure: %s", err);
    assert_true(s.tokens_per_s == 200000);
    assert_true(s.flops > 1.43e11 && s.flops < 1.44e11);
    /* A CPU worker is asked for the CPU bench, not this one. */
    assert_int_equal(measure_with(args, json, 2, "cpu", &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "bench exited with 9"));
}

/* The worker measures the small shape and its own: both points, in one
 * process on a CPU, one after the other on a GPU. */
static void measures_both_points(void **state)
{
    (void)state;
    char bin[300], err[300] = "";
    struct bench_speed s;
    fake_bin(bin, sizeof bin, "alallo-both",
             "tiny='{\"shape\":\"tiny\",\"params\":100,\"tokens_per_s\":50,\"flops\":1e9}'\n"
             "base='{\"shape\":\"base\",\"params\":2000,\"tokens_per_s\":40,\"flops\":4e9}'\n"
             "case \"$*\" in\n"
             "'bench train --shape tiny,base --steps 17 --threads 2') "
             "echo \"$tiny\"; echo \"$base\";;\n"
             "'bench train --device cuda --shape tiny --steps 17 --threads 2') echo \"$tiny\";;\n"
             "'bench train --device cuda --shape base --steps 17 --threads 2') echo \"$base\";;\n"
             "*) exit 9;;\n"
             "esac");
    for (int gpu = 0; gpu < 2; gpu++) {
        if (worker_speed_measure(bin, 2, gpu ? "cuda" : "cpu", 10, NULL, &s, err, sizeof err))
            fail_msg("measure: %s", err);
        assert_true(s.tokens_per_s == 40 && s.flops == 4e9 && s.params == 2000);
        assert_true(s.small_params == 100 && s.small_flops == 1e9);
    }
}

/* On a CPU, one process measures both shapes and goes on past a failed
 * one: the small shape failing leaves only the second point out, as on a
 * GPU; the bench's own shape failing leaves the speed unknown. */
static void a_failed_shape_loses_only_its_point(void **state)
{
    (void)state;
    char bin[300], err[300] = "";
    struct bench_speed s;
    fake_bin(bin, sizeof bin, "alallo-small-fails",
             "echo 'tiny: out of memory' >&2\n"
             "echo '{\"shape\":\"base\",\"params\":2000,\"tokens_per_s\":40,\"flops\":4e9}'\n"
             "exit 1");
    if (worker_speed_measure(bin, 2, "cpu", 10, NULL, &s, err, sizeof err))
        fail_msg("measure: %s", err);
    assert_true(s.tokens_per_s == 40 && s.flops == 4e9 && s.params == 2000);
    assert_true(s.small_params == 0 && s.small_flops == 0);

    fake_bin(bin, sizeof bin, "alallo-base-fails",
             "echo '{\"shape\":\"tiny\",\"params\":100,\"tokens_per_s\":50,\"flops\":1e9}'\n"
             "echo 'base: out of memory' >&2; exit 1");
    assert_int_equal(worker_speed_measure(bin, 2, "cpu", 10, NULL, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "exited with 1: base: out of memory"));
    assert_true(s.tokens_per_s == 0);
}

static void failure_means_unknown(void **state)
{
    (void)state;
    char bin[300], err[300] = "";
    struct bench_speed s;
    fake_bin(bin, sizeof bin, "alallo-fail", "echo 'unknown shape tiny' >&2; exit 2");
    assert_int_equal(worker_speed_measure(bin, 1, "cpu", 10, NULL, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "exited with 2: unknown shape tiny"));
    assert_true(s.tokens_per_s == 0);

    fake_bin(bin, sizeof bin, "alallo-silent", "echo '{\"mfu\": 1}'");
    assert_int_equal(worker_speed_measure(bin, 1, "cpu", 10, NULL, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "no tokens_per_s"));

    assert_int_equal(
        worker_speed_measure("/nonexistent/alallo", 1, "cpu", 10, NULL, &s, err, sizeof err), -1);
    assert_non_null(strstr(err, "cannot run"));
}

static void bounded_in_time(void **state)
{
    (void)state;
    char bin[300], err[300] = "";
    struct bench_speed s;
    fake_bin(bin, sizeof bin, "alallo-slow", "sleep 60; echo '{\"tokens_per_s\": 1}'");
    double t0 = trainer_proc_now();
    assert_int_equal(worker_speed_measure(bin, 1, "cpu", 1, NULL, &s, err, sizeof err), -1);
    double took = trainer_proc_now() - t0;
    assert_true(took < 5);
    assert_non_null(strstr(err, "within 1 s"));
    /* A stop flag cuts it short too. */
    volatile sig_atomic_t stop = 1;
    t0 = trainer_proc_now();
    assert_int_equal(worker_speed_measure(bin, 1, "cpu", 60, &stop, &s, err, sizeof err), -1);
    assert_true(trainer_proc_now() - t0 < 5);
    assert_non_null(strstr(err, "stopping"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_bench_output),
        cmocka_unit_test(the_small_shape_is_a_second_point),
        cmocka_unit_test(measures_both_points),
        cmocka_unit_test(measures_with_the_right_arguments),
        cmocka_unit_test(a_cuda_worker_measures_the_gpu_trainer),
        cmocka_unit_test(a_failed_shape_loses_only_its_point),
        cmocka_unit_test(failure_means_unknown),
        cmocka_unit_test(bounded_in_time),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
