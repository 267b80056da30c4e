/* test_cuda_torch.c - the GPU trainer's pass against PyTorch +
 * transformers + peft on the GPU: `alallo model init` writes a model
 * folder, `alallo train --dump-grads --device cuda` runs the trainer's GPU
 * pass (cuda_train.h: open, pass, the gradients down) on one sequence and
 * dumps the loss and the gradients, and `tests/torch/reference.py --bf16
 * --device cuda` runs the same weights and tokens through transformers'
 * AutoModelForCausalLM (peft's LoRA on every projection) under bf16
 * autocast on the GPU and compares within bf16 tolerances (BF16_TOL in
 * reference.py: the loss within 1e-2 relative, each gradient tensor
 * within 1e-1 relative L2; docs/trainer.md, "GPU", says why).
 *
 * Cases (a dump each, then one run of reference.py for all: its imports
 * take seconds): LoRA on a 16-bit base, QLoRA (PyTorch gets the dump's "base.*",
 * the NF4-decoded base alallo trained on, so bitsandbytes is not needed)
 * and full fine-tuning on the tiny llama (tied head, grouped-query
 * attention), and LoRA on qwen2 (q/k/v biases).
 *
 * Without a GPU it prints one `skip:` line and exits 77. `--cpu-twin` runs
 * the same cases with `--device cpu` on both sides (alallo's CPU pass on
 * the same bf16 or NF4 base, PyTorch's autocast on the CPU): a check of
 * the harness, the dump and the bf16 mode of reference.py on any machine
 * with PyTorch, never a stand-in for the GPU. The python is $ALALLO_PYTHON,
 * else python3 on PATH (the GPU machine's, which has transformers).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/train/test_train_fixture.h"
#include "core/fs.h"
#include "gpu_test.h"

static char base[256];
static const char *device = "cuda"; /* "cpu" with --cpu-twin */
static const char *ids =
    "256,72,101,108,108,111,32,119,111,114,108,100,33,10,84,104,101,32,113,117,105,99,107,32,98,"
    "114,111,119,110,32,102,111,120,46";

static int setup(void **state)
{
    (void)state;
    return fx_torch_root(base, sizeof base, "gpu-torch");
}

static int teardown(void **state)
{
    (void)state;
    return fs_remove_tree(base);
}

/* name, `model init` arguments, `--dump-grads` arguments */
static const char *const cases[][3] = {
    {"llama-lora", "--shape tiny", "--lora-rank 4 --precision 16-bit"},
    {"llama-qlora", "--shape tiny", "--lora-rank 4 --precision 4-bit"},
    {"llama-full", "--shape tiny", ""},
    {"qwen2-lora", "--family qwen2", "--lora-rank 4 --precision 16-bit"},
};
enum { N_CASES = sizeof cases / sizeof cases[0] };

/* One case's model folder, and alallo's dump on `device` in it. */
static void dump_case(void **state)
{
    const char *const *c = *state;
    char cmd[2000], dir[400];
    snprintf(dir, sizeof dir, "%s/%s", base, c[0]);
    snprintf(cmd, sizeof cmd, "%s model init %s --tokenizer %s/tokenizer.json --out %s --seed 9",
             ALALLO_BINARY, c[1], base, dir);
    assert_int_equal(fx_sh(cmd), 0);
    snprintf(cmd, sizeof cmd,
             "%s train --dump-grads --device %s --model-dir %s --ids %s --out %s/dump.st %s",
             ALALLO_BINARY, device, dir, ids, dir, c[2]);
    assert_int_equal(fx_sh(cmd), 0);
}

/* Every case against PyTorch in one run of reference.py (transformers and
 * peft import once: seconds each). */
static void pytorch_agrees(void **state)
{
    (void)state;
    static char cmd[16384];
    const char *py = getenv("ALALLO_PYTHON");
    int n = snprintf(cmd, sizeof cmd, "%s %s/tests/torch/reference.py --bf16 --device %s",
                     py && *py ? py : "python3", ALALLO_SOURCE_DIR, device);
    for (int i = 0; i < N_CASES; i++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " %s/%s %s/%s/dump.st %s", base,
                      cases[i][0], base, cases[i][0], ids);
    assert_true(n < (int)sizeof cmd);
    int rc = fx_sh(cmd);
    if (rc == 2)
        fprintf(stderr, "FAIL: reference.py could not run (PyTorch missing, or torch sees no "
                        "GPU): set ALALLO_PYTHON to a python with torch\n");
    assert_int_equal(rc, 0);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--cpu-twin") == 0) {
        device = "cpu";
        printf("test_cuda_torch --cpu-twin: alallo and PyTorch on the CPU (the harness's "
               "check)\n");
    } else {
        int rc = gpu_test_open("test_cuda_torch");
        if (rc)
            return rc;
        cuda_ctx_close(); /* the GPU is alallo's and PyTorch's processes' */
    }
    struct CMUnitTest tests[N_CASES + 1];
    for (int i = 0; i < N_CASES; i++)
        tests[i] = (struct CMUnitTest){.name = cases[i][0], .test_func = dump_case,
                                       .initial_state = (void *)cases[i]};
    tests[N_CASES] = (struct CMUnitTest){.name = "pytorch_agrees", .test_func = pytorch_agrees};
    return cmocka_run_group_tests(tests, setup, teardown);
}
