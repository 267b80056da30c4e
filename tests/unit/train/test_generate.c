/* test_generate.c - generation: the KV-cache path gives the same greedy
 * tokens as full recomputation, an adapter applied at run time equals the
 * merged folder, sampling is deterministic per seed and top-p near zero is
 * greedy, and a model fine-tuned on prompt/completion pairs continues a
 * training prompt as trained. */
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
#include "train/formats/checkpoint.h"
#include "train/run/generate.h"

static char base[256];

static int setup(void **state)
{
    (void)state;
    snprintf(base, sizeof base, "/tmp/alallo-test-gen-%ld", (long)getpid());
    fs_remove_tree(base);
    return mkdir(base, 0755);
}

static int teardown(void **state)
{
    (void)state;
    return fs_remove_tree(base);
}

/* A tiny model whose weights are large enough for varied greedy output. */
static void make_model(const char *dir, uint64_t seed)
{
    struct model_config c;
    assert_int_equal(model_config_shape("tiny", 257, &c), 0);
    c.bos_id = c.eos_id = 256;
    c.n_kv_heads = 2;
    char err[512];
    struct model_opts o = {.full = 1};
    struct model *m = model_create(&c, &o, err, sizeof err);
    assert_non_null(m);
    assert_int_equal(model_init_random(m, seed), 0);
    for (size_t i = 0; i < m->n_decay; i++)
        m->train[i] *= 8.0f;
    assert_int_equal(modelio_save_merged(m, dir, NULL, err, sizeof err), 0);
    model_free(m);
    char p[512];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    assert_int_equal(fx_write_tokenizer(p), 0);
}

static void cache_matches_recompute(void **state)
{
    (void)state;
    char dir[300], err[512];
    snprintf(dir, sizeof dir, "%s/m1", base);
    make_model(dir, 21);
    struct generator *g = gen_open(dir, NULL, err, sizeof err);
    assert_non_null(g);
    int32_t prompt[5] = {256, 72, 105, 33, 32};
    int32_t out[24];
    const char *fin;
    struct gen_opts o = {24, 0.0f, 1.0f, 0};
    int n = gen_ids(g, prompt, 5, &o, out, &fin, err, sizeof err);
    assert_true(n > 0);
    /* the same by recomputing the whole sequence for every token */
    struct model_opts mo = {.full = 0, .base_kind = WK_F32};
    struct model *m = modelio_load(dir, &mo, err, sizeof err);
    assert_non_null(m);
    struct model_acts *a = model_acts_create(m, 1, 32);
    float *logits = malloc(sizeof(float) * 32 * 257);
    int32_t seq[32];
    memcpy(seq, prompt, sizeof prompt);
    int len = 5;
    for (int k = 0; k < n; k++) {
        model_forward_logits(m, a, seq, 1, len, logits);
        const float *last = logits + (size_t)(len - 1) * 257;
        int best = 0;
        for (int j = 1; j < 257; j++)
            if (last[j] > last[best])
                best = j;
        assert_int_equal(best, out[k]);
        seq[len++] = best;
    }
    fprintf(stderr, "greedy: %d tokens (%s), all match recomputation\n", n, fin);
    free(logits);
    model_acts_free(a);
    model_free(m);
    /* sampling: the same seed gives the same tokens; top-p near zero is greedy */
    int32_t s1[24], s2[24], s3[24];
    struct gen_opts so = {24, 1.0f, 1.0f, 5};
    int n1 = gen_ids(g, prompt, 5, &so, s1, &fin, err, sizeof err);
    int n2 = gen_ids(g, prompt, 5, &so, s2, &fin, err, sizeof err);
    assert_int_equal(n1, n2);
    assert_memory_equal(s1, s2, sizeof(int32_t) * (size_t)n1);
    struct gen_opts tp = {24, 1.0f, 1e-6f, 9};
    int n3 = gen_ids(g, prompt, 5, &tp, s3, &fin, err, sizeof err);
    assert_int_equal(n3, n);
    assert_memory_equal(s3, out, sizeof(int32_t) * (size_t)n);
    gen_close(g);
}

static void adapter_equals_merged(void **state)
{
    (void)state;
    char dir[300], ad[300], merged[300], err[512];
    snprintf(dir, sizeof dir, "%s/m2", base);
    snprintf(ad, sizeof ad, "%s/m2-adapter", base);
    snprintf(merged, sizeof merged, "%s/m2-merged", base);
    make_model(dir, 22);
    struct model_opts o = {.full = 0, .base_kind = WK_F32, .lora_r = 4, .lora_alpha = 8.0f,
                           .lora_targets = MODEL_ALL_PROJ};
    struct model *m = modelio_load(dir, &o, err, sizeof err);
    assert_non_null(m);
    struct rng r;
    rng_seed(&r, 4);
    for (size_t i = 0; i < m->n_train; i++)
        m->train[i] = 0.2f * rng_normal(&r);
    assert_int_equal(modelio_save_peft(m, ad, "m2", err, sizeof err), 0);
    assert_int_equal(modelio_save_merged(m, merged, dir, err, sizeof err), 0);
    model_free(m);
    struct generator *ga = gen_open(dir, ad, err, sizeof err);
    struct generator *gm = gen_open(merged, NULL, err, sizeof err);
    struct generator *gb = gen_open(dir, NULL, err, sizeof err);
    assert_non_null(ga);
    assert_non_null(gm);
    assert_non_null(gb);
    struct gen_opts go = {16, 0.0f, 1.0f, 0};
    struct gen_result ra, rm, rb;
    assert_int_equal(gen_run(ga, "Hi there", &go, &ra, err, sizeof err), 0);
    assert_int_equal(gen_run(gm, "Hi there", &go, &rm, err, sizeof err), 0);
    assert_int_equal(gen_run(gb, "Hi there", &go, &rb, err, sizeof err), 0);
    assert_string_equal(ra.text, rm.text);
    assert_int_equal(ra.prompt_tokens, 9); /* BOS + 8 bytes */
    /* the adapter changes the output (else the test proves nothing) */
    assert_string_not_equal(ra.text, rb.text);
    gen_result_free(&ra);
    gen_result_free(&rm);
    gen_result_free(&rb);
    /* a prompt longer than the context is refused with a reason */
    char *longp = malloc(600);
    memset(longp, 'a', 599);
    longp[599] = '\0';
    assert_int_equal(gen_run(gb, longp, &go, &rb, err, sizeof err), GEN_TOO_LONG);
    assert_non_null(strstr(err, "context"));
    free(longp);
    gen_close(ga);
    gen_close(gm);
    gen_close(gb);
}

static void finetuned_continues_as_trained(void **state)
{
    (void)state;
    char root[300], p[400], cfg[400];
    snprintf(root, sizeof root, "%s/ft", base);
    assert_int_equal(mkdir(root, 0755), 0);
    snprintf(p, sizeof p, "%s/model", root);
    assert_int_equal(fx_make_model(p, NULL, 11), 0);
    snprintf(p, sizeof p, "%s/train.jsonl", root);
    assert_int_equal(fx_write_data(p, 48), 0);
    snprintf(cfg, sizeof cfg, "%s/attempt.json", root);
    assert_int_equal(fx_write_attempt(cfg, root, "\"adapter\":\"full\",", 200, 0), 0);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "%s train --config %s >/dev/null 2>&1", ALALLO_BINARY, cfg);
    assert_int_equal(system(cmd), 0);
    snprintf(p, sizeof p, "%s/out/model", root);
    char err[512];
    struct generator *g = gen_open(p, NULL, err, sizeof err);
    assert_non_null(g);
    static const char *const words[] = {"apple", "river", "stone", "cloud", "ember", "frost"};
    for (int i = 0; i < 6; i++) {
        char prompt[64], want[64];
        snprintf(prompt, sizeof prompt, "%s says:", words[i]);
        snprintf(want, sizeof want, " %s", words[i]);
        struct gen_opts go = {16, 0.0f, 1.0f, 0};
        struct gen_result r;
        assert_int_equal(gen_run(g, prompt, &go, &r, err, sizeof err), 0);
        assert_string_equal(r.text, want);
        assert_string_equal(r.finish_reason, "stop");
        gen_result_free(&r);
    }
    gen_close(g);
    /* the command line: --json prints one object */
    snprintf(cmd, sizeof cmd, "%s generate --model-dir %s --prompt 'apple says:' --json "
             "--max-tokens 8 2>/dev/null", ALALLO_BINARY, p);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    assert_int_equal(pclose(f), 0);
    json_error_t je;
    json_t *o = json_loads(buf, 0, &je);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "text")), " apple");
    assert_int_equal(json_integer_value(json_object_get(o, "prompt_tokens")), 12);
    assert_int_equal(json_integer_value(json_object_get(o, "completion_tokens")), 6);
    assert_string_equal(json_string_value(json_object_get(o, "finish_reason")), "stop");
    json_decref(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cache_matches_recompute),
        cmocka_unit_test(adapter_equals_merged),
        cmocka_unit_test(finetuned_continues_as_trained),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
