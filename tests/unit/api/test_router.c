/* test_router.c - route matching, who may call what, and the dashboard. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api_harness.h"

static void patterns(void **state)
{
    (void)state;
    char p[HTTP_PARAMS_MAX][HTTP_VALUE_MAX];
    int n;
    assert_true(router_match("/v1/fine_tuning/jobs/{}/events", "/v1/fine_tuning/jobs/ftjob-1/events",
                             p, &n));
    assert_int_equal(n, 1);
    assert_string_equal(p[0], "ftjob-1");
    assert_true(router_match("/v1/files", "/v1/files/", p, &n));
    assert_false(router_match("/v1/files/{}", "/v1/files/", p, &n));
    assert_false(router_match("/v1/files/{}", "/v1/files/a/b", p, &n));
    assert_false(router_match("/v1/files", "/v1/filesx", p, &n));
    assert_true(router_match("/v1/models/{}", "/v1/models/ft:tiny:alallo:abc", p, &n));
    assert_string_equal(p[0], "ft:tiny:alallo:abc");
    char longseg[HTTP_VALUE_MAX + 20];
    memset(longseg, 'a', sizeof longseg);
    memcpy(longseg, "/v1/files/", 10);
    longseg[sizeof longseg - 1] = '\0';
    assert_false(router_match("/v1/files/{}", longseg, p, &n));
}

static void access_rules(void **state)
{
    (void)state;
    struct harness *h = h_new();
    struct reply r = h_call(h, "GET", "/v1/fine_tuning/jobs", NULL, NULL, NULL);
    assert_int_equal(r.status, 401);
    assert_string_equal(h_str(json_object_get(r.json, "error"), "code"), "invalid_api_key");
    reply_free(&r);
    r = h_call(h, "GET", "/v1/fine_tuning/jobs", NULL, "sk-alallo-wrong", NULL);
    assert_int_equal(r.status, 401);
    reply_free(&r);
    r = h_call(h, "GET", "/v1/fine_tuning/jobs", NULL, h->key, NULL);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    /* The API key is not the worker token, and the other way round. */
    r = h_call(h, "POST", "/internal/workers/register", NULL, h->key, "{}");
    assert_int_equal(r.status, 401);
    reply_free(&r);
    r = h_call(h, "GET", "/v1/workers", NULL, h->srv.worker_token, NULL);
    assert_int_equal(r.status, 401);
    reply_free(&r);
    /* Only the account default drains. */
    r = h_call(h, "POST", "/v1/workers/w1/drain", NULL, h->other_key, NULL);
    assert_int_equal(r.status, 403);
    reply_free(&r);
    r = h_call(h, "POST", "/v1/workers/w1/drain", NULL, h->key, NULL);
    assert_int_equal(r.status, 404);
    reply_free(&r);
    r = h_call(h, "DELETE", "/v1/fine_tuning/jobs", NULL, h->key, NULL);
    assert_int_equal(r.status, 405);
    reply_free(&r);
    r = h_call(h, "GET", "/v1/nothing", NULL, h->key, NULL);
    assert_int_equal(r.status, 404);
    assert_non_null(r.json);
    reply_free(&r);
    r = h_call(h, "GET", "/healthz", NULL, NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(h_str(r.json, "status"), "ok");
    reply_free(&r);
    h_free(h);
}

static void body_caps(void **state)
{
    (void)state;
    struct harness *h = h_new();
    h->srv.cfg.max_upload = 12345;
    assert_int_equal(router_body_cap(&h->srv, "POST", "/v1/files"), 12345);
    assert_int_equal(router_body_cap(&h->srv, "POST", "/v1/fine_tuning/jobs"),
                     h->srv.cfg.max_body);
    h_free(h);
}

static void dashboard(void **state)
{
    (void)state;
    struct harness *h = h_new();
    struct reply r = h_call(h, "GET", "/", NULL, NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.content_type, "text/html; charset=utf-8");
    assert_non_null(strstr(r.body, "<html"));
    reply_free(&r);
    r = h_call(h, "GET", "/no-such-file.js", NULL, NULL, NULL);
    assert_int_equal(r.status, 404);
    reply_free(&r);
    assert_string_equal(http_content_type_for("/app.js"), "text/javascript; charset=utf-8");
    assert_string_equal(http_content_type_for("/style.css"), "text/css; charset=utf-8");
    assert_string_equal(http_content_type_for("/x.svg"), "image/svg+xml");
    assert_string_equal(http_content_type_for("/noext"), "application/octet-stream");
    h_free(h);
}

static void metrics_text(void **state)
{
    (void)state;
    struct harness *h = h_new();
    struct reply r = h_call(h, "GET", "/v1/fine_tuning/jobs", NULL, NULL, NULL);
    reply_free(&r);
    r = h_call(h, "GET", "/metrics", NULL, NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.content_type, "text/plain"));
    assert_non_null(strstr(r.body, "alallo_http_requests_total{code=\"401\"} 1\n"));
    assert_non_null(strstr(r.body, "alallo_jobs{status=\"re-scheduling\"} 0\n"));
    assert_non_null(strstr(r.body, "alallo_internal_failures_total 0\n"));
    reply_free(&r);
    h_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(patterns),  cmocka_unit_test(access_rules), cmocka_unit_test(body_caps),
        cmocka_unit_test(dashboard), cmocka_unit_test(metrics_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
