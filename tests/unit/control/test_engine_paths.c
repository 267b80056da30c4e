/* test_engine_paths.c - what serve's command line gives an engine:
 * --cluster-data, the server's paths as the nodes see them
 * (engine_map_path), and --inference-pool (engine_serve_parse). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "control/engine.h"

static void maps_the_prefix_only(void **state)
{
    (void)state;
    struct engine_config c;
    memset(&c, 0, sizeof c);
    strcpy(c.map_from, "/srv/alallo");
    strcpy(c.map_to, "/lustre/alallo");
    char out[256];
    assert_true(engine_map_path(&c, "/srv/alallo/jobs/j1/attempts/a1", out, sizeof out));
    assert_string_equal(out, "/lustre/alallo/jobs/j1/attempts/a1");
    assert_true(engine_map_path(&c, "/srv/alallo", out, sizeof out));
    assert_string_equal(out, "/lustre/alallo");
    /* a sibling folder that shares the prefix's letters is not inside it */
    assert_true(engine_map_path(&c, "/srv/alallo2/x", out, sizeof out));
    assert_string_equal(out, "/srv/alallo2/x");
    assert_true(engine_map_path(&c, "/opt/models/tiny", out, sizeof out));
    assert_string_equal(out, "/opt/models/tiny");
    /* too long for out: refused, never cut */
    char small[16];
    assert_false(engine_map_path(&c, "/srv/alallo/jobs/j1/attempts/a1", small, sizeof small));
}

static void no_map_copies(void **state)
{
    (void)state;
    struct engine_config c;
    memset(&c, 0, sizeof c);
    char out[64];
    assert_true(engine_map_path(&c, "/data/jobs/x", out, sizeof out));
    assert_string_equal(out, "/data/jobs/x");
}

/* POOL is 1 engine, POOL:N N of them, POOL:MIN-MAX a range, each
 * --inference-pool adding a pool; anything else is refused with the forms
 * it takes, and a pool named twice or one pool too many with why. */
static void inference_pool_forms(void **state)
{
    (void)state;
    struct engine_config c;
    char err[256];
    memset(&c, 0, sizeof c);
    assert_int_equal(engine_serve_parse("gpu", &c, err, sizeof err), 0);
    assert_int_equal(c.n_serve, 1);
    assert_string_equal(c.serve[0].pool, "gpu");
    assert_int_equal(c.serve[0].count, 1);
    assert_false(c.serve[0].scaled);
    assert_int_equal(engine_serve_parse("cpu:3", &c, err, sizeof err), 0);
    assert_int_equal(c.serve[1].count, 3);
    assert_int_equal(c.serve[1].min, 3);
    assert_false(c.serve[1].scaled);
    assert_int_equal(engine_serve_parse("spot:0-4", &c, err, sizeof err), 0);
    assert_int_equal(c.serve[2].min, 0);
    assert_int_equal(c.serve[2].count, 4);
    assert_true(c.serve[2].scaled);
    assert_int_equal(engine_serve_parse("big:2-2", &c, err, sizeof err), 0);
    assert_false(c.serve[3].scaled); /* a range of one count is that count */
    assert_int_equal(c.n_serve, 4);
    const char *bad[] = {"", ":2", "gpu:", "gpu:0", "gpu:x", "gpu:3-1", "gpu:1-17", "gpu:-2",
                         "gpu:1-", "gpu:1-2-3", "gpu:2 "};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        assert_int_equal(engine_serve_parse(bad[i], &c, err, sizeof err), -1);
        assert_non_null(strstr(err, "POOL, POOL:N or POOL:MIN-MAX"));
    }
    assert_int_equal(engine_serve_parse("spot:1", &c, err, sizeof err), -1);
    assert_string_equal(err, "--inference-pool spot: the pool is named twice");
    for (int k = 4; k < ENGINE_SERVE_POOLS_MAX; k++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", k);
        assert_int_equal(engine_serve_parse(name, &c, err, sizeof err), 0);
    }
    assert_int_equal(engine_serve_parse("one-more", &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "more than 8 pools serve"));
    assert_int_equal(c.n_serve, ENGINE_SERVE_POOLS_MAX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(maps_the_prefix_only),
        cmocka_unit_test(no_map_copies),
        cmocka_unit_test(inference_pool_forms),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
