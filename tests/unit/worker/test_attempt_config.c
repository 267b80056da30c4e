/* test_attempt_config.c - ATTEMPT.json from a claim's spec plus threads and
 * the device the worker decides (worker_trainer_device). */
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

#include "worker/attempt_config.h"
#include "worker/worker.h"

static char dir[256];

static int make_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/alallo-test-attempt-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void writes_spec_plus_threads(void **state)
{
    (void)state;
    json_t *spec = json_pack("{s:s,s:s,s:s,s:i,s:i,s:f,s:n,s:{s:i}}", "model_dir", "/m",
                             "train_file", "/d/train.jsonl", "precision", "4-bit", "max_steps",
                             120, "batch_size", 4, "learning_rate", 2e-4, "validation_file",
                             "lora", "r", 16);
    char path[300], err[200] = "";
    snprintf(path, sizeof path, "%s/ATTEMPT.json", dir);
    assert_int_equal(attempt_config_write(spec, 3, "cpu", path, err, sizeof err), 0);
    /* The spec itself is not changed. */
    assert_null(json_object_get(spec, "threads"));
    json_t *back = json_load_file(path, 0, NULL);
    assert_non_null(back);
    assert_int_equal(json_integer_value(json_object_get(back, "threads")), 3);
    assert_string_equal(json_string_value(json_object_get(back, "device")), "cpu");
    json_object_del(back, "threads");
    json_object_del(back, "device");
    assert_true(json_equal(back, spec));
    json_decref(back);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    /* No temporary file left behind. */
    char tmp[320];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_not_equal(access(tmp, F_OK), 0);
    /* threads from the spec is replaced by the worker's. */
    json_object_set_new(spec, "threads", json_integer(64));
    assert_int_equal(attempt_config_write(spec, 2, "cpu", path, err, sizeof err), 0);
    back = json_load_file(path, 0, NULL);
    assert_int_equal(json_integer_value(json_object_get(back, "threads")), 2);
    json_decref(back);
    json_decref(spec);
}

static void refuses_bad_input(void **state)
{
    (void)state;
    char path[300], err[200] = "";
    snprintf(path, sizeof path, "%s/A.json", dir);
    json_t *arr = json_array();
    assert_int_equal(attempt_config_write(arr, 1, "cpu", path, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a JSON object"));
    json_decref(arr);
    json_t *obj = json_object();
    assert_int_equal(attempt_config_write(obj, 0, "cpu", path, err, sizeof err), -1);
    assert_non_null(strstr(err, "threads"));
    assert_int_equal(attempt_config_write(obj, 1, "cpu", "/nonexistent-dir/x/A.json", err,
                                          sizeof err),
                     -1);
    assert_non_null(strstr(err, "cannot create"));
    /* Only the trainer's two devices; nothing is written for another. */
    assert_int_equal(attempt_config_write(obj, 1, "tpu", path, err, sizeof err), -1);
    assert_non_null(strstr(err, "device must be \"cpu\" or \"cuda\""));
    assert_int_equal(attempt_config_write(obj, 1, NULL, path, err, sizeof err), -1);
    assert_int_not_equal(access(path, F_OK), 0);
    char *big = malloc(ATTEMPT_CONFIG_MAX_BYTES + 10);
    memset(big, 'x', ATTEMPT_CONFIG_MAX_BYTES + 9);
    big[ATTEMPT_CONFIG_MAX_BYTES + 9] = '\0';
    json_object_set_new(obj, "model_dir", json_string(big));
    free(big);
    assert_int_equal(attempt_config_write(obj, 1, "cpu", path, err, sizeof err), -1);
    assert_non_null(strstr(err, "too large"));
    assert_int_not_equal(access(path, F_OK), 0);
    json_decref(obj);
}

/* The device the worker writes, read back from ATTEMPT.json. */
static const char *device_written(const struct worker_config *cfg, json_t *spec, char *out,
                                  size_t cap)
{
    char path[300], err[200] = "";
    snprintf(path, sizeof path, "%s/ATTEMPT.json", dir);
    assert_int_equal(attempt_config_write(spec, 2, worker_trainer_device(cfg), path, err,
                                          sizeof err),
                     0);
    json_t *back = json_load_file(path, 0, NULL);
    assert_non_null(back);
    snprintf(out, cap, "%s", json_string_value(json_object_get(back, "device")));
    json_decref(back);
    return out;
}

static void the_device_is_the_workers(void **state)
{
    (void)state;
    struct worker_config cfg;
    worker_config_defaults(&cfg);
    char err[200], got[16], warning[300];
    json_t *spec = json_pack("{s:s,s:i}", "model_dir", "/m", "max_steps", 5);
    /* A CPU worker: "cpu", whatever the binary was built with. */
    cfg.trainer_cuda = false;
    assert_string_equal(device_written(&cfg, spec, got, sizeof got), "cpu");
    cfg.trainer_cuda = true;
    assert_string_equal(device_written(&cfg, spec, got, sizeof got), "cpu");
    assert_false(worker_gpu_warning(&cfg, warning, sizeof warning));
    assert_string_equal(warning, "");
    /* A GPU worker whose trainer has CUDA: "cuda" in every attempt. */
    assert_int_equal(
        worker_config_parse_spec(&cfg, "gpus=1,gpu_kind=h200,gpu_mem=141G", err, sizeof err), 0);
    assert_int_equal(worker_config_check(&cfg, err, sizeof err), 0);
    assert_string_equal(device_written(&cfg, spec, got, sizeof got), "cuda");
    assert_false(worker_gpu_warning(&cfg, warning, sizeof warning));
    /* The server's spec does not choose: the worker's device replaces it. */
    json_object_set_new(spec, "device", json_string("cpu"));
    assert_string_equal(device_written(&cfg, spec, got, sizeof got), "cuda");
    /* A GPU worker on a binary built without CUDA: "cpu", and a warning
     * that says why and where the build is described. */
    cfg.trainer_cuda = false;
    json_object_set_new(spec, "device", json_string("cuda"));
    assert_string_equal(device_written(&cfg, spec, got, sizeof got), "cpu");
    assert_true(worker_gpu_warning(&cfg, warning, sizeof warning));
    assert_string_equal(warning, "warning: 1 GPU declared, but this alallo was built without "
                                 "CUDA: its attempts train on the CPU (build with CUDA as "
                                 "docs/trainer.md \"GPU\" says)");
    json_decref(spec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(writes_spec_plus_threads),
        cmocka_unit_test(refuses_bad_input),
        cmocka_unit_test(the_device_is_the_workers),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
