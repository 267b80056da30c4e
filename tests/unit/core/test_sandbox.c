/* test_sandbox.c - python graders in the sandbox (core/sandbox.c,
 * core/grader_python.c): a grade gives its number; inside there is no
 * network, the file system is read-only and /tmp private; a busy loop, a
 * sleeper, a memory hog and a fork bomb are stopped at their limits; an
 * answer that is no number, an exception and a syntax error are errors
 * with a sentence.
 *
 * The sandbox must work where this runs (bubblewrap installed by
 * scripts/deps.sh, unprivileged user namespaces on): when it does not,
 * every test fails with the reason. A machine that has no user
 * namespaces says so with ALALLO_TEST_NO_USERNS=1; then the tests check
 * the other side instead: the sandbox says it is not there, and a python
 * grader is refused with that sentence. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/grader.h"
#include "core/grader_python.h"
#include "core/sandbox.h"

static bool no_userns(void)
{
    const char *e = getenv("ALALLO_TEST_NO_USERNS");
    return e && strcmp(e, "1") == 0;
}

static void need_sandbox(void)
{
    char why[400];
    if (!sandbox_available(why, sizeof why))
        fail_msg("the sandbox does not work here: %s (set ALALLO_TEST_NO_USERNS=1 only on a "
                 "machine without user namespaces)",
                 why);
}

/* Runs source on answer `answer` and item {"ref": "abc"}. */
static bool grade(const char *source, const struct sandbox_limits *lim, double *score,
                  char *err, size_t errcap)
{
    json_t *item = json_pack("{s:s}", "ref", "abc");
    bool ok = grader_python_run(source, "the answer is abc", item, lim, score, err, errcap);
    json_decref(item);
    return ok;
}

static void expect_error(const char *source, const struct sandbox_limits *lim, const char *says)
{
    double v = -1;
    char err[400] = "";
    bool ok = grade(source, lim, &v, err, sizeof err);
    if (ok || !strstr(err, says))
        fail_msg("expected an error saying \"%s\", got %s: %s (%g)", says, ok ? "ok" : "error",
                 err, v);
}

static void test_grade_gives_its_number(void **state)
{
    (void)state;
    need_sandbox();
    struct sandbox_limits lim = sandbox_default_limits();
    double v = -1;
    char err[400] = "";
    /* sample and item as the graders see them; a print does not pose as the score */
    bool ok = grade("def grade(sample, item):\n"
                    "    print('1.0')\n"
                    "    hit = item['ref'] in sample['output_text']\n"
                    "    return 0.75 if hit and sample['output_json'] is None else 0.25\n",
                    &lim, &v, err, sizeof err);
    if (!ok)
        fail_msg("%s", err);
    assert_true(v == 0.75);
    /* an answer that is JSON is parsed into output_json */
    json_t *item = json_object();
    ok = grader_python_run("def grade(s, i):\n    return s['output_json']['x'] + 1\n",
                           "{\"x\": 2}", item, &lim, &v, err, sizeof err);
    json_decref(item);
    if (!ok)
        fail_msg("%s", err);
    assert_true(v == 3.0);
    /* and through grader_run, as the trainer and graders/run call it */
    json_t *g = json_pack("{s:s,s:s}", "type", "python", "source",
                          "def grade(s, i):\n    return len(s['output_text'])\n");
    json_t *it = json_object();
    struct grader_result r;
    assert_true(grader_run(g, "four", it, NULL, &r, err, sizeof err));
    assert_true(r.reward == 4.0);
    json_decref(g);
    json_decref(it);
}

static void test_no_network(void **state)
{
    (void)state;
    need_sandbox();
    /* a port that listens on this machine: outside the sandbox the
     * connect below succeeds */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(s, 4), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(s, (struct sockaddr *)&a, &len), 0);
    char src[600];
    snprintf(src, sizeof src,
             "import socket\n"
             "def grade(sample, item):\n"
             "    try:\n"
             "        socket.create_connection(('127.0.0.1', %d), timeout=2)\n"
             "        return 1\n"
             "    except OSError:\n"
             "        pass\n"
             "    try:\n"
             "        socket.create_connection(('1.1.1.1', 80), timeout=2)\n"
             "        return 2\n"
             "    except OSError:\n"
             "        return 0\n",
             ntohs(a.sin_port));
    struct sandbox_limits lim = sandbox_default_limits();
    double v = -1;
    char err[400] = "";
    if (!grade(src, &lim, &v, err, sizeof err))
        fail_msg("%s", err);
    close(s);
    assert_true(v == 0.0);
}

static void test_read_only_files(void **state)
{
    (void)state;
    need_sandbox();
    /* a file of this machine's /tmp, which the sandbox must not see */
    char host[] = "/tmp/alallo-sandbox-XXXXXX";
    int fd = mkstemp(host);
    assert_true(fd >= 0);
    close(fd);
    /* the source tree, which is on this machine's disk */
    const char *tree = ALALLO_SOURCE_DIR;
    char src[3000];
    snprintf(src, sizeof src,
             "import os\n"
             "def wrote(p):\n"
             "    try:\n"
             "        with open(p, 'w') as f:\n"
             "            f.write('x')\n"
             "        return True\n"
             "    except OSError:\n"
             "        return False\n"
             "def grade(sample, item):\n"
             "    bits = 0\n"
             "    if wrote('/usr/alallo-sandbox-test'): bits |= 1\n"
             "    if wrote('/etc/alallo-sandbox-test'): bits |= 2\n"
             "    if wrote('%s/alallo-sandbox-test'): bits |= 4\n"
             "    if wrote('/alallo-sandbox-test'): bits |= 8\n"
             "    if os.path.exists('%s') or os.path.exists('%s'): bits |= 16\n"
             "    if os.path.exists('/etc/passwd') or os.path.exists('/home'): bits |= 32\n"
             "    if not wrote('/tmp/scratch'): bits |= 64\n"
             "    return bits\n",
             tree, host, tree);
    struct sandbox_limits lim = sandbox_default_limits();
    double v = -1;
    char err[400] = "";
    bool ok = grade(src, &lim, &v, err, sizeof err);
    unlink(host);
    if (!ok)
        fail_msg("%s", err);
    /* nothing written outside its own /tmp, nothing of the host seen */
    if (v != 0.0)
        fail_msg("the sandbox let through (bits) %g", v);
    assert_int_equal(access("/usr/alallo-sandbox-test", F_OK), -1);
}

static void test_time_limits(void **state)
{
    (void)state;
    need_sandbox();
    struct sandbox_limits lim = sandbox_default_limits();
    /* a busy loop: its CPU limit */
    lim.cpu_s = 1;
    lim.wall_ms = 20000;
    double t0 = clock_mono_s();
    expect_error("def grade(s, i):\n    while True:\n        pass\n", &lim, "s of CPU");
    assert_true(clock_mono_s() - t0 < 15);
    /* a sleeper (no CPU): the wall-clock limit, the whole group killed */
    lim = sandbox_default_limits();
    lim.wall_ms = 1500;
    t0 = clock_mono_s();
    expect_error("import time\ndef grade(s, i):\n    time.sleep(60)\n    return 1\n", &lim,
                 "time limit of 1.5 s");
    assert_true(clock_mono_s() - t0 < 5);
}

static void test_memory_and_processes(void **state)
{
    (void)state;
    need_sandbox();
    struct sandbox_limits lim = sandbox_default_limits();
    /* 1 GiB asked, 256 MiB allowed */
    expect_error("def grade(s, i):\n    b = bytearray(1 << 30)\n    return len(b)\n", &lim,
                 "MemoryError");
    /* a fork bomb meets the process limit */
    double t0 = clock_mono_s();
    expect_error("import os\ndef grade(s, i):\n    while True:\n        os.fork()\n", &lim,
                 "BlockingIOError");
    assert_true(clock_mono_s() - t0 < 10);
}

static void test_bad_answers(void **state)
{
    (void)state;
    need_sandbox();
    struct sandbox_limits lim = sandbox_default_limits();
    expect_error("def grade(s, i):\n    return 'high'\n", &lim, "grade returned str, not a number");
    expect_error("def grade(s, i):\n    return float('nan')\n", &lim, "not a finite number");
    expect_error("def grade(s, i):\n    raise ValueError('no code here')\n", &lim,
                 "ValueError: no code here");
    expect_error("def grade(s, i):\n    return 1 / 0\n", &lim, "ZeroDivisionError");
    expect_error("def grade(s, i) return 1\n", &lim, "does not compile");
    expect_error("def score(s, i):\n    return 1\n", &lim, "defines no function grade");
    char err[400] = "";
    assert_false(grader_python_compiles("def grade(:\n", &lim, err, sizeof err));
    assert_non_null(strstr(err, "does not compile"));
    assert_true(grader_python_compiles("def grade(s, i):\n    return 1\n", &lim, err, sizeof err));
}

static void test_ready(void **state)
{
    (void)state;
    json_t *g = json_pack("{s:s,s:{s:{s:s,s:s},s:{s:s,s:s,s:s,s:s}},s:s}", "type", "multi",
                          "graders", "p", "type", "python", "source", "def grade(:\n", "s",
                          "type", "string_check", "input", "a", "reference", "a", "operation",
                          "eq", "calculate_output", "p + s");
    char param[256], msg[600];
    bool ok = grader_python_ready(g, "grader", param, sizeof param, msg, sizeof msg);
    json_decref(g);
    assert_false(ok);
    if (no_userns()) {
        char why[400];
        assert_false(sandbox_available(why, sizeof why));
        assert_string_equal(param, "grader.graders.p");
        assert_non_null(strstr(msg, "python graders need a sandbox"));
        return;
    }
    need_sandbox();
    assert_string_equal(param, "grader.graders.p.source");
    assert_non_null(strstr(msg, "does not compile"));
}

int main(void)
{
    if (no_userns()) {
        const struct CMUnitTest refused[] = {cmocka_unit_test(test_ready)};
        return cmocka_run_group_tests(refused, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grade_gives_its_number), cmocka_unit_test(test_no_network),
        cmocka_unit_test(test_read_only_files),        cmocka_unit_test(test_time_limits),
        cmocka_unit_test(test_memory_and_processes),   cmocka_unit_test(test_bad_answers),
        cmocka_unit_test(test_ready),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
