/* test_engine_paths.c - --cluster-data: the server's paths as the nodes
 * see them (engine_map_path). */
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(maps_the_prefix_only),
        cmocka_unit_test(no_map_copies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
