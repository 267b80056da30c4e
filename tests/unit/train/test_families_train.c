/* test_families_train.c - every model family trains in every mode and then
 * answers: `alallo model init --family F` makes a tiny random model, `alallo
 * train` fine-tunes it (full in fp32, LoRA on a 16-bit base, QLoRA on a
 * 4-bit base) on "<word> says:" -> " <word>".
 *  - full: generation from the merged output continues each prompt with
 *    its word, as trained;
 *  - LoRA and QLoRA: the loss falls (the last logged losses average at
 *    least 0.1 nats under the first: a random tiny model learns slowly
 *    through adapters alone, so the words themselves are not asked for),
 *    and both the merged folder and the base plus the PEFT adapter load
 *    and generate.
 * The numerics of each family are proven
 * against PyTorch in test_model_torch.c; this proves the trainer, the
 * export folders and generation carry every family's switches through. */
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

#include "core/fs.h"
#include "test_train_fixture.h"
#include "train/run/generate.h"

static char base[256];

static int setup(void **state)
{
    (void)state;
    snprintf(base, sizeof base, "/tmp/alallo-test-families-%ld", (long)getpid());
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

/* Every prompt of the training data continues with its word. */
static void answers_as_trained(const char *model_dir, const char *adapter_dir)
{
    char err[512];
    struct generator *g = gen_open(model_dir, adapter_dir, err, sizeof err);
    if (!g)
        fail_msg("%s: %s", model_dir, err);
    static const char *const words[] = {"apple", "river", "stone", "cloud", "ember", "frost"};
    for (int i = 0; i < 6; i++) {
        char prompt[64], want[64];
        snprintf(prompt, sizeof prompt, "%s says:", words[i]);
        snprintf(want, sizeof want, " %s", words[i]);
        struct gen_opts go = {16, 0.0f, 1.0f, 0};
        struct gen_result r;
        assert_int_equal(gen_run(g, prompt, &go, &r, err, sizeof err), 0);
        if (strcmp(r.text, want) != 0)
            fail_msg("%s%s%s: '%s' continued with '%s', trained '%s'", model_dir,
                     adapter_dir ? " + " : "", adapter_dir ? adapter_dir : "", prompt, r.text,
                     want);
        gen_result_free(&r);
    }
    gen_close(g);
}

/* The attempt's settings: fx_write_attempt's, with this test's learning rate
 * (a random tiny model learns the words in LoRA's few parameters only at a
 * rate full fine-tuning would not stand). */
static int write_attempt(const char *path, const char *root, const char *extra, float lr,
                         int steps)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f,
            "{%s\"model_dir\":\"%s/model\",\"train_file\":\"%s/train.jsonl\","
            "\"checkpoint_dir\":\"%s/ck\",\"out_dir\":\"%s/out\",\"batch_size\":4,"
            "\"learning_rate\":%g,\"seed\":3,\"max_steps\":%d,\"seq_len\":64,"
            "\"threads\":2}\n",
            extra, root, root, root, root, (double)lr, steps);
    return fclose(f);
}

/* Mean of the first and the last `k` "step N/M: loss X" lines of a log. */
static void loss_ends(const char *log, int k, double *first, double *last)
{
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    double v[4096];
    int n = 0;
    char line[512];
    while (n < 4096 && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, ": loss ");
        if (strncmp(line, "step ", 5) == 0 && p)
            v[n++] = strtod(p + 7, NULL);
    }
    fclose(f);
    assert_true(n >= 2 * k);
    *first = *last = 0.0;
    for (int i = 0; i < k; i++) {
        *first += v[i] / k;
        *last += v[n - 1 - i] / k;
    }
}

/* The model (with the adapter, if any) loads and generates something. */
static void generates(const char *model_dir, const char *adapter_dir)
{
    char err[512];
    struct generator *g = gen_open(model_dir, adapter_dir, err, sizeof err);
    if (!g)
        fail_msg("%s: %s", model_dir, err);
    struct gen_opts go = {8, 0.0f, 1.0f, 0};
    struct gen_result r;
    assert_int_equal(gen_run(g, "apple says:", &go, &r, err, sizeof err), 0);
    assert_non_null(r.text);
    gen_result_free(&r);
    gen_close(g);
}

static void train_family(const char *family, const char *mode, const char *extra, float lr,
                         int steps)
{
    char root[400], p[500], cfg[500], cmd[2000];
    snprintf(root, sizeof root, "%s/%s-%s", base, family, mode);
    assert_int_equal(mkdir(root, 0755), 0);
    snprintf(cmd, sizeof cmd,
             "%s model init --family %s --tokenizer %s/tokenizer.json --out %s/model --seed 5 "
             ">/dev/null",
             ALALLO_BINARY, family, base, root);
    assert_int_equal(system(cmd), 0);
    snprintf(p, sizeof p, "%s/train.jsonl", root);
    assert_int_equal(fx_write_data(p, 48), 0);
    snprintf(cfg, sizeof cfg, "%s/attempt.json", root);
    assert_int_equal(write_attempt(cfg, root, extra, lr, steps), 0);
    snprintf(cmd, sizeof cmd, "%s train --config %s >%s/train.log 2>&1", ALALLO_BINARY, cfg,
             root);
    assert_int_equal(system(cmd), 0);
    if (strcmp(family, "qwen3_moe") == 0) { /* the step events carry the router's term */
        char log[500], line[1024];
        snprintf(log, sizeof log, "%s/train.log", root);
        FILE *f = fopen(log, "r");
        assert_non_null(f);
        int seen = 0;
        while (!seen && fgets(line, sizeof line, f))
            seen = strstr(line, "\"aux_loss\":") != NULL;
        fclose(f);
        assert_true(seen);
    }
    snprintf(p, sizeof p, "%s/out/model", root);
    if (strcmp(mode, "full") == 0) {
        answers_as_trained(p, NULL);
        return;
    }
    generates(p, NULL);
    char b[500], a[500], log[500];
    snprintf(b, sizeof b, "%s/model", root);
    snprintf(a, sizeof a, "%s/out/adapter", root);
    generates(b, a);
    double first, last;
    snprintf(log, sizeof log, "%s/train.log", root);
    loss_ends(log, 5, &first, &last);
    fprintf(stderr, "%s %s: loss %.4f -> %.4f\n", family, mode, first, last);
    if (!(last < first - 0.1))
        fail_msg("%s %s: loss %.4f -> %.4f", family, mode, first, last);
}

#define LORA_STEPS 300

/* LoRA's learning rate: 0.01, but 0.005 for gemma. Gemma's tiny model
 * (embeddings times sqrt(hidden)) learns erratically at 0.01: over 300
 * steps its loss fell by 0.09 to 0.42 depending on the seed, on the fp32
 * and the bf16 products alike; at 0.005 it falls by about 0.8 for every
 * seed on both. */
static float lora_lr(const char *family)
{
    return strcmp(family, "gemma") == 0 ? 0.005f : 0.01f;
}

#define FAMILY_TESTS(F)                                                                   \
    static void F##_full(void **state)                                                     \
    {                                                                                      \
        (void)state;                                                                       \
        train_family(#F, "full", "\"adapter\":\"full\",", 0.01f, 200);                            \
    }                                                                                      \
    static void F##_lora_16bit(void **state)                                               \
    {                                                                                      \
        (void)state;                                                                       \
        train_family(#F, "lora16", "", lora_lr(#F), LORA_STEPS);                   \
    }                                                                                      \
    static void F##_qlora_4bit(void **state)                                               \
    {                                                                                      \
        (void)state;                                                                       \
        train_family(#F, "qlora4", "\"precision\":\"4-bit\",", lora_lr(#F), LORA_STEPS);  \
    }

FAMILY_TESTS(llama3)
FAMILY_TESTS(qwen2)
FAMILY_TESTS(mistral)
FAMILY_TESTS(gemma)
FAMILY_TESTS(gemma2)
FAMILY_TESTS(qwen3)
FAMILY_TESTS(qwen3_moe)
FAMILY_TESTS(smollm3)
FAMILY_TESTS(gemma3)
FAMILY_TESTS(phi3)

#define FAMILY_ENTRIES(F)                                                                  \
    cmocka_unit_test(F##_full), cmocka_unit_test(F##_lora_16bit), cmocka_unit_test(F##_qlora_4bit)

int main(void)
{
    const struct CMUnitTest tests[] = {
        FAMILY_ENTRIES(llama3), FAMILY_ENTRIES(qwen2), FAMILY_ENTRIES(mistral),
        FAMILY_ENTRIES(gemma),  FAMILY_ENTRIES(gemma2), FAMILY_ENTRIES(qwen3),
        FAMILY_ENTRIES(qwen3_moe), FAMILY_ENTRIES(smollm3), FAMILY_ENTRIES(gemma3),
        FAMILY_ENTRIES(phi3),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
