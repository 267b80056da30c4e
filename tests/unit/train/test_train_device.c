/* test_train_device.c - the attempt's device (train/run/train_device.h): the
 * field's parsing, the refusal of "cuda" by a CPU-only alallo (exit 3, a
 * sentence that says so) and, in a CUDA build, with no GPU visible (exit 1,
 * a sentence naming CUDA_VISIBLE_DEVICES), each before anything is written;
 * a "cpu" attempt that trains exactly as one without the field; and `bench
 * train --device cuda` refused likewise.
 *
 * CUDA_VISIBLE_DEVICES is set empty for the whole test, so the outcome is
 * the same on a machine with GPUs: the GPU's own tests are in tests/gpu/.
 */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "test_train_fixture.h"
#include "train/run/train_config.h"
#include "train/run/train_device.h"
#include "train/run/trainer.h"

static const char *const base_json =
    "{\"model_dir\":\"/nonexistent/model\",\"train_file\":\"/nonexistent/t.jsonl\","
    "\"checkpoint_dir\":\"/nonexistent/ck\",\"out_dir\":\"/nonexistent/out\","
    "\"max_steps\":3%s}";

static int parse_with(const char *extra, struct train_config *c, char *err, size_t cap)
{
    char json[1024];
    snprintf(json, sizeof json, base_json, extra);
    return train_config_parse(json, c, err, cap);
}

static void test_parse(void **state)
{
    (void)state;
    static struct train_config c;
    char err[512];
    assert_int_equal(parse_with("", &c, err, sizeof err), 0);
    assert_int_equal(c.device, TRAIN_DEVICE_CPU);
    assert_int_equal(parse_with(",\"device\":null", &c, err, sizeof err), 0);
    assert_int_equal(c.device, TRAIN_DEVICE_CPU);
    assert_int_equal(parse_with(",\"device\":\"cpu\"", &c, err, sizeof err), 0);
    assert_int_equal(c.device, TRAIN_DEVICE_CPU);
    assert_int_equal(parse_with(",\"device\":\"cuda\"", &c, err, sizeof err), 0);
    assert_int_equal(c.device, TRAIN_DEVICE_CUDA);
    assert_string_equal(train_device_name(TRAIN_DEVICE_CUDA), "cuda");
    assert_string_equal(train_device_name(TRAIN_DEVICE_CPU), "cpu");
    assert_null(train_device_name(7));
    assert_int_equal(parse_with(",\"device\":\"gpu\"", &c, err, sizeof err), -1);
    assert_string_equal(err, "settings: device must be \"cpu\" or \"cuda\"");
    assert_int_equal(parse_with(",\"device\":1", &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "\"device\""));
}

/* The choice itself, in this process. */
static void test_prepare(void **state)
{
    (void)state;
    static struct train_config c;
    char err[512] = "";
    int on_gpu = -1;
    assert_int_equal(parse_with("", &c, err, sizeof err), 0);
    assert_int_equal(train_device_prepare(&c, &on_gpu, err, sizeof err), 0);
    assert_int_equal(on_gpu, 0);
    assert_string_equal(err, "");
    c.device = TRAIN_DEVICE_CUDA;
    int rc = train_device_prepare(&c, &on_gpu, err, sizeof err);
    assert_int_equal(on_gpu, 0);
    if (train_device_cuda_built()) {
        assert_int_equal(rc, TRAIN_INTERNAL);
        assert_non_null(strstr(err, "no GPU is visible"));
        assert_non_null(strstr(err, "CUDA_VISIBLE_DEVICES="));
    } else {
        assert_int_equal(rc, TRAIN_USER);
        assert_non_null(strstr(err, "this alallo was built without CUDA: "));
    }
    train_device_release(); /* nothing open: a no-op */
}

struct run {
    int status;
    json_t *events;
};

/* `alallo train --config PATH`, its event lines collected. */
static struct run run_train(const char *config)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s train --config %s 2>/dev/null", ALALLO_BINARY, config);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    struct run r = {0, json_array()};
    char line[65536];
    while (fgets(line, sizeof line, p)) {
        json_t *e = json_loads(line, 0, NULL);
        assert_non_null(e); /* only event lines on stdout */
        json_array_append_new(r.events, e);
    }
    int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    return r;
}

static json_t *last_event(const struct run *r, const char *name)
{
    for (size_t i = json_array_size(r->events); i-- > 0;) {
        json_t *e = json_array_get(r->events, i);
        if (strcmp(json_string_value(json_object_get(e, "event")), name) == 0)
            return e;
    }
    return NULL;
}

static char root[256];

static void make_root(void)
{
    snprintf(root, sizeof root, "/tmp/alallo-tdev-%d", (int)getpid());
    char p[512];
    assert_int_equal(mkdir(root, 0755), 0);
    snprintf(p, sizeof p, "%s/model", root);
    assert_int_equal(fx_make_model(p, NULL, 11), 0);
    snprintf(p, sizeof p, "%s/train.jsonl", root);
    assert_int_equal(fx_write_data(p, 24), 0);
}

static void remove_root(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
}

/* A "cuda" attempt on a machine where it cannot run: the exit status and
 * the error event's kind and line, no `started`, and no checkpoint folder. */
static void test_cuda_refused_by_the_process(void **state)
{
    (void)state;
    make_root();
    char config[600], ck[600];
    snprintf(config, sizeof config, "%s/attempt.json", root);
    assert_int_equal(fx_write_attempt(config, root, "\"device\":\"cuda\",", 4, 2), 0);
    struct run r = run_train(config);
    json_t *e = last_event(&r, "error");
    assert_non_null(e);
    const char *line = json_string_value(json_object_get(e, "line"));
    const char *kind = json_string_value(json_object_get(e, "kind"));
    assert_non_null(line);
    if (train_device_cuda_built()) {
        assert_int_equal(r.status, TRAIN_INTERNAL);
        assert_string_equal(kind, "internal");
        assert_non_null(strstr(line, "CUDA_VISIBLE_DEVICES"));
    } else {
        assert_int_equal(r.status, TRAIN_USER);
        assert_string_equal(kind, "user");
        assert_non_null(strstr(line, "this alallo was built without CUDA: "));
    }
    assert_null(last_event(&r, "started"));
    struct stat st;
    snprintf(ck, sizeof ck, "%s/ck", root);
    assert_int_equal(stat(ck, &st), -1);
    json_decref(r.events);
    remove_root();
}

/* "device": "cpu" trains exactly as an attempt without the field: the same
 * losses at every step event and the same final loss, bit for bit. */
static void test_cpu_attempt_unchanged(void **state)
{
    (void)state;
    make_root();
    const char *extras[2] = {"", "\"device\":\"cpu\","};
    json_t *losses[2];
    for (int k = 0; k < 2; k++) {
        char config[600], cmd[700];
        snprintf(config, sizeof config, "%s/attempt%d.json", root, k);
        assert_int_equal(fx_write_attempt(config, root, extras[k], 6, 0), 0);
        struct run r = run_train(config);
        assert_int_equal(r.status, 0);
        assert_non_null(last_event(&r, "done"));
        losses[k] = json_array();
        for (size_t i = 0; i < json_array_size(r.events); i++) {
            json_t *e = json_array_get(r.events, i);
            if (strcmp(json_string_value(json_object_get(e, "event")), "step") == 0)
                json_array_append(losses[k], json_object_get(e, "loss"));
        }
        json_array_append(losses[k], json_object_get(last_event(&r, "done"), "train_loss"));
        json_decref(r.events);
        /* the next run starts fresh, as the first did */
        snprintf(cmd, sizeof cmd, "rm -rf %s/ck %s/out", root, root);
        assert_int_equal(system(cmd), 0);
    }
    assert_true(json_array_size(losses[0]) >= 2);
    assert_true(json_equal(losses[0], losses[1]));
    json_decref(losses[0]);
    json_decref(losses[1]);
    remove_root();
}

/* `bench train --device cuda` where it cannot run: a CPU-only alallo says
 * so (usage, exit 2); a CUDA build with no GPU names CUDA_VISIBLE_DEVICES
 * (exit 1). Neither prints a JSON result. */
/* Runs `alallo bench train --device cuda ARGS`: its exit status, with
 * stdout and stderr in out. */
static int bench_gpu(const char *args, char *out, size_t cap)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "%s bench train --device cuda%s 2>&1", ALALLO_BINARY, args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static void bench_gpu_refused_with(const char *args)
{
    char out[1024];
    int rc = bench_gpu(args, out, sizeof out);
    assert_null(strchr(out, '{'));
    if (train_device_cuda_built()) {
        assert_int_equal(rc, 1);
        assert_non_null(strstr(out, "no GPU is visible (CUDA_VISIBLE_DEVICES="));
    } else {
        assert_int_equal(rc, 2);
        assert_non_null(strstr(out, "this alallo was built without CUDA"));
    }
}

static void test_bench_gpu_refused(void **state)
{
    (void)state;
    bench_gpu_refused_with("");
    /* the model's timing is refused the same way, after its options */
    bench_gpu_refused_with(" --shape 124m --adapter full --steps 3");
    char out[1024];
    assert_int_equal(bench_gpu(" --shape 124m --adapter sideways", out, sizeof out), 2);
    assert_non_null(strstr(out, "--adapter lora|full"));
}

int main(void)
{
    setenv("CUDA_VISIBLE_DEVICES", "", 1); /* no GPU, on any machine */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_prepare),
        cmocka_unit_test(test_cuda_refused_by_the_process),
        cmocka_unit_test(test_cpu_attempt_unchanged),
        cmocka_unit_test(test_bench_gpu_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
