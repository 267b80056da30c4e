/* test_dpo_torch.c - DPO's loss and gradients against PyTorch: two model
 * folders from `alallo model init` (the policy and, with another seed, the
 * reference), `alallo train --dump-dpo` runs one DPO step on three pairs
 * packed into rows as training packs them, and tests/torch/dpo_reference.py
 * recomputes the sequences' log-probabilities, the loss and every gradient in
 * float64. A missing torch is a failure with a clear message, never a skip. */
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
/* P/C/R: the input, the preferred answer, the other answer */
static const char *pairs = "256,72,101,108,108,111/32,119,111,114,108,100,33/32,116,104,101,114,101;"
                           "256,84,104,101/32,113,117,105,99,107/32,115,108,111,119,32,114,101,100;"
                           "256,65,98/99,100,101,102,103,104/122";

static int setup(void **state)
{
    (void)state;
    snprintf(base, sizeof base, "/tmp/alallo-test-dpo-%ld", (long)getpid());
    fs_remove_tree(base);
    if (mkdir(base, 0755))
        return -1;
    char p[300];
    snprintf(p, sizeof p, "%s/tokenizer.json", base);
    return fx_write_tokenizer(p);
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

static void dpo_matches_torch(void **state)
{
    (void)state;
    char cmd[3000];
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd,
                 "%s model init --shape tiny --tokenizer %s/tokenizer.json --out %s/%s --seed %d",
                 ALALLO_BINARY, base, base, i ? "ref" : "policy", 9 + i);
        assert_int_equal(sh(cmd), 0);
    }
    snprintf(cmd, sizeof cmd,
             "%s train --dump-dpo --model-dir %s/policy --ref-dir %s/ref --beta 0.5 "
             "--pairs '%s' --out %s/dump.st",
             ALALLO_BINARY, base, base, pairs, base);
    assert_int_equal(sh(cmd), 0);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/tests/torch/dpo_reference.py %s/policy %s/ref %s/dump.st 0.5 "
             "'%s'",
             ALALLO_SOURCE_DIR, base, base, base, pairs);
    int rc = sh(cmd);
    if (rc == 2)
        fprintf(stderr, "FAIL: PyTorch is not available to /usr/bin/python3: install Debian's "
                        "python3-torch (make deps-test)\n");
    assert_int_equal(rc, 0);
}

/* The dump refuses pairs it cannot read, rather than computing nonsense. */
static void bad_pairs_refused(void **state)
{
    (void)state;
    char cmd[1000];
    snprintf(cmd, sizeof cmd,
             "%s train --dump-dpo --model-dir %s/policy --ref-dir %s/ref --beta 0.5 "
             "--pairs '1,2/3' --out %s/bad.st 2>/dev/null",
             ALALLO_BINARY, base, base, base);
    assert_int_equal(sh(cmd), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(dpo_matches_torch),
        cmocka_unit_test(bad_pairs_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
