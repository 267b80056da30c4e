/* test_worker_config.c - worker defaults and the --local-worker SPEC syntax. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include <unistd.h>

#include "worker/worker.h"

static void defaults_describe_this_machine(void **state)
{
    (void)state;
    struct worker_config c;
    worker_config_defaults(&c);
    assert_true(c.cpus >= 1);
    assert_true(c.mem_bytes > 64LL * 1024 * 1024);
    assert_string_equal(c.class_, "on-demand");
    assert_string_equal(c.accelerator, "cpu");
    /* A nominal on-demand price, so that money shows on a fresh server. */
    assert_true(c.price_per_hour > 0.3999 && c.price_per_hour < 0.4001);
    /* price=0 is kept: an operator's free worker. */
    char err[200] = "";
    assert_int_equal(worker_config_parse_spec(&c, "name=local,price=0", err, sizeof err), 0);
    assert_true(c.price_per_hour == 0.0);
    assert_string_equal(c.name, "local");
    assert_true(worker_name_valid(c.name));
    /* The running binary: this test program itself. */
    char self[512];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    assert_true(n > 0);
    self[n] = '\0';
    assert_string_equal(c.alallo_bin, self);
    assert_int_equal(c.stop_grace_s, 30);
    assert_int_equal(c.bench_timeout_s, 120);
}

static void spec_sets_every_key(void **state)
{
    (void)state;
    struct worker_config c;
    worker_config_defaults(&c);
    char err[200] = "";
    assert_int_equal(worker_config_parse_spec(&c, "name=small,cpus=1,mem=2G,price=0.40,class=spot",
                                              err, sizeof err),
                     0);
    assert_string_equal(c.name, "small");
    assert_int_equal(c.cpus, 1);
    assert_int_equal(c.mem_bytes, 2LL * 1024 * 1024 * 1024);
    assert_true(c.price_per_hour > 0.3999 && c.price_per_hour < 0.4001);
    assert_string_equal(c.class_, "spot");
    assert_int_equal(worker_config_parse_spec(&c, "accelerator=h200,mem=512M", err, sizeof err), 0);
    assert_string_equal(c.accelerator, "h200");
    assert_int_equal(c.mem_bytes, 512LL * 1024 * 1024);
    /* Keys not named keep their value. */
    assert_string_equal(c.name, "small");
}

static void sizes(void **state)
{
    (void)state;
    int64_t v;
    assert_int_equal(worker_parse_size("1048576", &v), 0);
    assert_int_equal(v, 1048576);
    assert_int_equal(worker_parse_size("4K", &v), 0);
    assert_int_equal(v, 4096);
    assert_int_equal(worker_parse_size("1.5G", &v), 0);
    assert_int_equal(v, 1536LL * 1024 * 1024);
    assert_int_equal(worker_parse_size("2GiB", &v), 0);
    assert_int_equal(v, 2LL << 30);
    assert_int_equal(worker_parse_size("1T", &v), 0);
    assert_int_equal(v, 1LL << 40);
    assert_int_equal(worker_parse_size("", &v), -1);
    assert_int_equal(worker_parse_size("G", &v), -1);
    assert_int_equal(worker_parse_size("-1G", &v), -1);
    assert_int_equal(worker_parse_size("2X", &v), -1);
    assert_int_equal(worker_parse_size("2G extra", &v), -1);
    assert_int_equal(worker_parse_size("99999999999T", &v), -1);
}

static void check_error(const char *spec, const char *want_in_err)
{
    struct worker_config c;
    worker_config_defaults(&c);
    char err[200] = "";
    assert_int_equal(worker_config_parse_spec(&c, spec, err, sizeof err), -1);
    if (!strstr(err, want_in_err))
        fail_msg("spec '%s': error '%s' lacks '%s'", spec, err, want_in_err);
}

static void bad_specs_say_why(void **state)
{
    (void)state;
    check_error("gpu=2", "unknown key 'gpu'");
    check_error("gpus=0", "gpus=0: expected a whole number from 1 to 64");
    check_error("gpus=-1", "gpus=-1");
    check_error("gpus=65", "gpus=65");
    check_error("gpus=two", "whole number");
    check_error("gpu_kind=h 200", "gpu_kind=h 200: expected a short name");
    check_error("gpu_mem=80X", "gpu_mem=80X");
    check_error("gpu_mem=512M", "at least 1G");
    check_error("cpus=0", "cpus=0");
    check_error("cpus=two", "whole number");
    check_error("mem=lots", "mem=lots");
    check_error("mem=10", "at least 1M");
    check_error("price=-1", "hourly price");
    check_error("class=reserved", "on-demand or spot");
    check_error("name=a/b", "name=a/b");
    check_error("name=", "key=value");
    check_error("cpus", "key=value");
    check_error("", "empty");
    check_error("name=.hidden", "name=.hidden");
}

static void check_error_after(const char *spec, const char *want_in_err)
{
    struct worker_config c;
    worker_config_defaults(&c);
    char err[200] = "";
    assert_int_equal(worker_config_parse_spec(&c, spec, err, sizeof err), 0);
    assert_int_equal(worker_config_check(&c, err, sizeof err), -1);
    if (!strstr(err, want_in_err))
        fail_msg("spec '%s': error '%s' lacks '%s'", spec, err, want_in_err);
}

static void gpus_are_declared_whole(void **state)
{
    (void)state;
    struct worker_config c;
    worker_config_defaults(&c);
    char err[200] = "";
    assert_int_equal(c.gpus, 0);
    assert_int_equal(worker_config_check(&c, err, sizeof err), 0);
    assert_int_equal(
        worker_config_parse_spec(&c, "name=g,gpus=8,gpu_kind=H200,gpu_mem=141G", err, sizeof err),
        0);
    assert_int_equal(worker_config_check(&c, err, sizeof err), 0);
    assert_int_equal(c.gpus, 8);
    assert_string_equal(c.gpu_kind, "h200"); /* one spelling per kind */
    assert_int_equal(c.gpu_mem_bytes, 141LL << 30);
    /* Parts of a declaration are refused once all is parsed. */
    check_error_after("gpus=2", "gpus=2 needs gpu_kind");
    check_error_after("gpus=2,gpu_kind=a100", "and gpu_mem");
    check_error_after("gpus=2,gpu_mem=40G", "needs gpu_kind");
    check_error_after("gpu_kind=a100,gpu_mem=40G", "need gpus");
    check_error_after("gpu_mem=40G", "need gpus");
}

static void names(void **state)
{
    (void)state;
    assert_true(worker_name_valid("local-1"));
    assert_true(worker_name_valid("a.b_c"));
    assert_false(worker_name_valid(""));
    assert_false(worker_name_valid("a b"));
    assert_false(worker_name_valid("../x"));
    char longname[80];
    memset(longname, 'a', 64);
    longname[64] = '\0';
    assert_false(worker_name_valid(longname));
    longname[63] = '\0';
    assert_true(worker_name_valid(longname));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_describe_this_machine),
        cmocka_unit_test(spec_sets_every_key),
        cmocka_unit_test(sizes),
        cmocka_unit_test(bad_specs_say_why),
        cmocka_unit_test(gpus_are_declared_whole),
        cmocka_unit_test(names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
