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

/* POOL is 1 engine, POOL:N N of them, POOL:MIN-MAX a range; anything else
 * is refused with the forms it takes. */
static void inference_pool_forms(void **state)
{
    (void)state;
    struct engine_config c;
    char err[256];
    memset(&c, 0, sizeof c);
    assert_int_equal(engine_serve_parse("gpu", &c, err, sizeof err), 0);
    assert_string_equal(c.serve_pool, "gpu");
    assert_int_equal(c.serve_count, 1);
    assert_false(c.serve_scaled);
    assert_int_equal(engine_serve_parse("gpu:3", &c, err, sizeof err), 0);
    assert_int_equal(c.serve_count, 3);
    assert_int_equal(c.serve_min, 3);
    assert_false(c.serve_scaled);
    assert_int_equal(engine_serve_parse("gpu:0-4", &c, err, sizeof err), 0);
    assert_int_equal(c.serve_min, 0);
    assert_int_equal(c.serve_count, 4);
    assert_true(c.serve_scaled);
    assert_int_equal(engine_serve_parse("gpu:2-2", &c, err, sizeof err), 0);
    assert_false(c.serve_scaled); /* a range of one count is that count */
    const char *bad[] = {"", ":2", "gpu:", "gpu:0", "gpu:x", "gpu:3-1", "gpu:1-17", "gpu:-2",
                         "gpu:1-", "gpu:1-2-3", "gpu:2 "};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        assert_int_equal(engine_serve_parse(bad[i], &c, err, sizeof err), -1);
        assert_non_null(strstr(err, "POOL, POOL:N or POOL:MIN-MAX"));
    }
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
