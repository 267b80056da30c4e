/* test_grpo_torch.c - GRPO's loss and gradients against PyTorch: a model
 * folder from `alallo model init`, `alallo train --dump-grpo` runs one GRPO
 * step of the run's own passes on nine fixed answers (three prompts'
 * groups of three), fixed rewards and an old policy moved from the current
 * one by fixed shifts, and tests/torch/grpo_reference.py recomputes the
 * advantages, the clipped objective with the KL penalty, and every
 * gradient in float64 from the published objective. Full fine-tuning (the
 * reference a second folder) and LoRA (the reference the base with the
 * adapters off). A missing torch is a failure with a clear message, never
 * a skip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fs.h"
#include "test_train_fixture.h"

static char base[256];
/* prompt/answer; every three one prompt's group */
static const char *samples =
    "256,72,101,108,108,111/32,119,111,114,108,100,33;"
    "256,72,101,108,108,111/32,116,104,101,114,101;"
    "256,72,101,108,108,111/33,33;"
    "256,84,104,101/32,113,117,105,99,107;"
    "256,84,104,101/32,115,108,111,119,32,114,101,100;"
    "256,84,104,101/46;"
    "256,65,98/99,100,101,102,103,104;"
    "256,65,98/122,121;"
    "256,65,98/99,100,101";
/* the second group's rewards are alike: it teaches nothing */
static const char *rewards = "1,0,0.5,0.3,0.3,0.3,0,0.25,1";
/* old log-probabilities = today's + shift: ratios e^-shift, most outside
 * [0.8, 1.2] on one side or the other, some inside */
static const char *shifts = "0.5,-0.5,0.1,-0.3,0.35,-0.1,0.7,-0.6";

static int setup(void **state)
{
    (void)state;
    snprintf(base, sizeof base, "/tmp/alallo-test-grpo-%ld", (long)getpid());
    fs_remove_tree(base);
    if (mkdir(base, 0755))
        return -1;
    char p[300], cmd[1000];
    snprintf(p, sizeof p, "%s/tokenizer.json", base);
    if (fx_write_tokenizer(p))
        return -1;
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd,
                 "%s model init --shape tiny --tokenizer %s --out %s/%s --seed %d >/dev/null",
                 ALALLO_BINARY, p, base, i ? "ref" : "policy", 9 + i);
        if (system(cmd) != 0)
            return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return fs_remove_tree(base);
}

static int sh(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* One step dumped with `extra` (the reference's source, LoRA's rank), then
 * recomputed by the reference (with ref_dir for full fine-tuning). */
static void compare(const char *name, const char *extra, const char *beta, const char *ref_dir)
{
    char cmd[4000];
    snprintf(cmd, sizeof cmd,
             "%s train --dump-grpo --model-dir %s/policy %s --samples '%s' --group 3 "
             "--rewards %s --old-shift %s --beta %s --out %s/%s.st",
             ALALLO_BINARY, base, extra, samples, rewards, shifts, beta, base, name);
    assert_int_equal(sh(cmd), 0);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/tests/torch/grpo_reference.py %s/policy %s/%s.st %s 3 %s %s "
             "'%s' %s",
             ALALLO_SOURCE_DIR, base, base, name, beta, rewards, shifts, samples,
             ref_dir ? ref_dir : "");
    int rc = sh(cmd);
    if (rc == 2)
        fprintf(stderr, "FAIL: PyTorch is not available to /usr/bin/python3: install Debian's "
                        "python3-torch (make deps-test)\n");
    assert_int_equal(rc, 0);
}

static void full_with_kl_matches_torch(void **state)
{
    (void)state;
    char extra[400], ref[300];
    snprintf(ref, sizeof ref, "%s/ref", base);
    snprintf(extra, sizeof extra, "--ref-dir %s", ref);
    compare("full", extra, "0.5", ref);
}

static void full_without_kl_matches_torch(void **state)
{
    (void)state;
    compare("full-nokl", "", "0", NULL);
}

static void lora_with_kl_to_the_base_matches_torch(void **state)
{
    (void)state;
    compare("lora", "--lora-rank 4", "0.5", NULL);
}

/* Inputs the dump cannot read are refused, not computed into nonsense. */
static void bad_inputs_refused(void **state)
{
    (void)state;
    char cmd[2000];
    const char *bad[] = {
        "--group 2 --rewards 1,0,1 --samples '256/1;256/2;256/3'",  /* not whole groups */
        "--group 1 --rewards 1,0 --samples '256/1'",               /* a reward too many */
        "--group 1 --rewards 1 --samples '256,1'",                 /* no answer */
        "--group 1 --rewards 1 --samples '256/99999999'",          /* outside the vocabulary */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(cmd, sizeof cmd,
                 "%s train --dump-grpo --model-dir %s/policy %s --old-shift 0 --out %s/bad.st "
                 "2>/dev/null",
                 ALALLO_BINARY, base, bad[i], base);
        assert_int_equal(sh(cmd), 1);
    }
    /* LoRA's reference is the base: a second folder is a usage error */
    snprintf(cmd, sizeof cmd,
             "%s train --dump-grpo --model-dir %s/policy --lora-rank 4 --ref-dir %s/ref "
             "--group 1 --rewards 1 --samples '256/1' --old-shift 0 --beta 0.1 --out %s/bad.st "
             "2>/dev/null",
             ALALLO_BINARY, base, base, base);
    assert_int_equal(sh(cmd), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(full_with_kl_matches_torch),
        cmocka_unit_test(full_without_kl_matches_torch),
        cmocka_unit_test(lora_with_kl_to_the_base_matches_torch),
        cmocka_unit_test(bad_inputs_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
