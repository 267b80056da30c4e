/* test_pool.c - --slurm-pool declarations: what parses, the error that
 * names each bad key, the default slots from a partition's capacity, and
 * the pool's part of a submission. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "exec/pool.h"

static void a_full_declaration(void **state)
{
    (void)state;
    struct exec_pool p;
    char err[256] = "";
    assert_int_equal(exec_pool_parse("name=a100,partition=gpu,gres=gpu:a100:2,cpus=8,mem=64G,"
                                     "class=on-demand,price=2.10/h,slots=8,qos=high,"
                                     "account=lab,constraint=ib&a100",
                                     &p, err, sizeof err),
                     ERR_OK);
    assert_string_equal(p.name, "a100");
    assert_string_equal(p.partition, "gpu");
    assert_string_equal(p.gres, "gpu:a100:2");
    assert_string_equal(p.gpu_type, "a100");
    assert_int_equal(p.gpus, 2);
    assert_int_equal(p.cpus, 8);
    assert_int_equal(p.mem_mb, 65536);
    assert_int_equal(p.class_, EXEC_POOL_ON_DEMAND);
    assert_true(p.price_per_hour > 2.0999 && p.price_per_hour < 2.1001);
    assert_int_equal(p.slots, 8);
    assert_string_equal(p.qos, "high");
    assert_string_equal(p.account, "lab");
    assert_string_equal(p.constraint, "ib&a100");
    assert_string_equal(exec_pool_class_name(p.class_), "on-demand");
    assert_int_equal(p.gpu_mem_mb, 0); /* GPUs without their memory: not judged as GPUs */
    assert_int_equal(exec_pool_parse("name=h,partition=gpu,gres=gpu:H100:4,gpu_mem=80G,mem=64G,"
                                     "class=spot,price=8/h",
                                     &p, err, sizeof err),
                     ERR_OK);
    assert_int_equal(p.gpus, 4);
    assert_int_equal(p.gpu_mem_mb, 80 * 1024);
    assert_int_equal(exec_pool_parse("name=a100,partition=gpu,gres=gpu:a100:2,cpus=8,mem=64G,"
                                     "class=on-demand,price=2.10/h,slots=8,qos=high,"
                                     "account=lab,constraint=ib&a100",
                                     &p, err, sizeof err),
                     ERR_OK);

    struct exec_submit s;
    memset(&s, 0, sizeof s);
    s.time_limit_min = 30;
    exec_pool_fill_submit(&p, &s);
    assert_string_equal(s.partition, "gpu");
    assert_string_equal(s.gres, "gpu:a100:2");
    assert_string_equal(s.qos, "high");
    assert_string_equal(s.account, "lab");
    assert_string_equal(s.constraint, "ib&a100");
    assert_int_equal(s.cpus, 8);
    assert_int_equal(s.mem_mb, 65536);
    assert_int_equal(s.time_limit_min, 30); /* the attempt's, untouched */
}

static void the_least_declaration_and_its_defaults(void **state)
{
    (void)state;
    struct exec_pool p;
    char err[256] = "";
    assert_int_equal(exec_pool_parse("name=cpu,partition=ondemand,mem=500,class=spot,price=0",
                                     &p, err, sizeof err),
                     ERR_OK);
    assert_int_equal(p.mem_mb, 500); /* a bare number is MiB, as in Slurm */
    assert_int_equal(p.cpus, 1);
    assert_int_equal(p.gpus, 0);
    assert_string_equal(p.gres, "");
    assert_int_equal(p.slots, 0);
    assert_int_equal(p.class_, EXEC_POOL_SPOT);
    assert_string_equal(exec_pool_class_name(p.class_), "spot");
    assert_int_equal(exec_pool_parse("name=g,partition=p,mem=1.5G,class=spot,price=0.8,"
                                     "gres=gpu:1",
                                     &p, err, sizeof err),
                     ERR_OK);
    assert_int_equal(p.mem_mb, 1536);
    assert_int_equal(p.gpus, 1);
    assert_string_equal(p.gpu_type, "");
}

/* SPEC fails, and the error holds `names`. */
static void refused(const char *spec, const char *names)
{
    struct exec_pool p;
    char err[256] = "";
    assert_int_equal(exec_pool_parse(spec, &p, err, sizeof err), ERR_INVALID);
    if (!strstr(err, names))
        fail_msg("'%s': error '%s' does not name '%s'", spec, err, names);
}

#define BASE "name=a,partition=p,mem=1G,class=spot,price=1/h"

static void each_bad_key_is_named(void **state)
{
    (void)state;
    refused("", "empty pool");
    refused(BASE ",colour=red", "unknown key 'colour'");
    refused(BASE ",name=b", "name= given twice");
    refused(BASE ",slots=", "slots= has no value");
    refused(BASE ",novalue", "'novalue': expected key=value");
    refused("name=a b,partition=p,mem=1G,class=spot,price=1", "name=a b");
    refused("name=a,partition=-p,mem=1G,class=spot,price=1", "partition=-p");
    refused("name=a,partition=p,mem=lots,class=spot,price=1", "mem=lots");
    refused("name=a,partition=p,mem=0,class=spot,price=1", "mem=0");
    refused("name=a,partition=p,mem=1G,class=cheap,price=1", "class=cheap");
    refused("name=a,partition=p,mem=1G,class=spot,price=-1", "price=-1");
    refused("name=a,partition=p,mem=1G,class=spot,price=1/day", "price=1/day");
    refused(BASE ",gres=gpu:0", "gres=gpu:0");
    refused(BASE ",gres=tpu:1", "gres=tpu:1");
    refused(BASE ",gres=gpu:a 100:1", "gres=gpu:a 100:1");
    refused(BASE ",gres=gpu:1,gpu_mem=lots", "gpu_mem=lots: expected the memory of one GPU");
    refused(BASE ",gres=gpu:1,gpu_mem=512M", "gpu_mem=512M");
    refused(BASE ",gpu_mem=80G", "gpu_mem= needs gres=");
    refused(BASE ",cpus=0", "cpus=0");
    refused(BASE ",slots=99999", "slots=99999");
    refused(BASE ",qos=a;b", "qos=a;b");
    refused(BASE ",account=$(id)", "account=$(id)");
    refused(BASE ",constraint=a b", "constraint=a b");
    refused("partition=p,mem=1G,class=spot,price=1", "name= is missing");
    refused("name=a,mem=1G,class=spot,price=1", "partition= is missing");
    refused("name=a,partition=p,class=spot,price=1", "mem= is missing");
    refused("name=a,partition=p,mem=1G,price=1", "class= is missing");
    refused("name=a,partition=p,mem=1G,class=spot", "price= is missing");
    char big[EXEC_POOL_SPEC_MAX + 10];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    refused(big, "too long");
}

static void default_slots_from_capacity(void **state)
{
    (void)state;
    struct exec_pool p;
    char err[256];
    assert_int_equal(exec_pool_parse("name=a,partition=p,mem=16G,cpus=4,gres=gpu:a100:2,"
                                     "class=spot,price=1",
                                     &p, err, sizeof err),
                     ERR_OK);
    struct exec_capacity c = {.nodes = 3, .nodes_up = 2, .cpus = 128, .mem_mb = 1024 * 1024,
                              .gpus = 16, .max_gpus_per_node = 8};
    assert_int_equal(exec_pool_default_slots(&p, &c), 8); /* GPUs bind: 16 / 2 */
    c.cpus = 12;
    assert_int_equal(exec_pool_default_slots(&p, &c), 3); /* CPUs bind: 12 / 4 */
    c.cpus = 128;
    c.mem_mb = 40 * 1024;
    assert_int_equal(exec_pool_default_slots(&p, &c), 2); /* memory binds */
    c.mem_mb = 1024 * 1024;
    c.max_gpus_per_node = 1; /* no node holds 2 GPUs: never fits */
    assert_int_equal(exec_pool_default_slots(&p, &c), 0);
    struct exec_capacity none = {0};
    assert_int_equal(exec_pool_default_slots(&p, &none), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_full_declaration),
        cmocka_unit_test(the_least_declaration_and_its_defaults),
        cmocka_unit_test(each_bad_key_is_named),
        cmocka_unit_test(default_slots_from_capacity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
