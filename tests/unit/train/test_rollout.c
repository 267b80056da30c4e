/* test_rollout.c - reinforcement fine-tuning's rollouts (rollout.h): many
 * sampled answers decoded together through the batcher, more of them than
 * run at once, are each the answer gen_run_chat gives alone with its own
 * seed (fp32 weights), the same on a second run; the seeds matter; a
 * conversation the model cannot answer fails the rollout with its reason
 * and leaves no answers behind, either way. The trainer's sample answers:
 * prompts as text and as ids are answered as gen_run and gen_ids answer
 * them alone, and one the model cannot answer is left out, named, while
 * the others are answered. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "test_train_fixture.h"
#include "train/formats/modelio.h"
#include "train/run/generate.h"
#include "train/run/rollout.h"
#include "train/tokenizer/tokenizer.h"

static char base[256], model_dir[300];

/* A tiny fp32 model with weights large enough for varied answers. */
static int setup(void **state)
{
    (void)state;
    snprintf(base, sizeof base, "/tmp/alallo-test-rollout-%ld", (long)getpid());
    fs_remove_tree(base);
    if (mkdir(base, 0755))
        return -1;
    snprintf(model_dir, sizeof model_dir, "%s/m", base);
    return fx_make_model_scaled(model_dir, NULL, 31, 8.0f);
}

static int teardown(void **state)
{
    (void)state;
    return fs_remove_tree(base);
}

#define N (ROLLOUT_WIDTH + 6) /* more than run at once: some join late */

static const char *QUESTIONS[] = {"What of the harbor?", "Speak.", "Tell of the long road home."};

static void batched_answers_are_each_ones_own(void **state)
{
    (void)state;
    char err[512];
    struct generator *g = gen_open(model_dir, NULL, err, sizeof err);
    assert_non_null(g);
    json_t *chats[3];
    for (int q = 0; q < 3; q++)
        chats[q] = json_pack("[{s:s,s:s}]", "role", "user", "content", QUESTIONS[q]);
    struct rollout_req req[N];
    for (int i = 0; i < N; i++) /* answers of up to 3..22 tokens, each its own seed */
        req[i] = (struct rollout_req){.messages = chats[i % 3],
                                      .opts = {.max_tokens = 3 + i % 20, .temperature = 1.0f,
                                               .top_p = 1.0f, .seed = 1000 + (uint64_t)i}};
    char *together[N], *again[N], *alone[N];
    int tok_together[N], tok_alone[N];
    assert_int_equal(rollout_run(g, req, N, true, together, tok_together, err, sizeof err), 0);
    assert_int_equal(rollout_run(g, req, N, true, again, NULL, err, sizeof err), 0);
    assert_int_equal(rollout_run(g, req, N, false, alone, tok_alone, err, sizeof err), 0);
    int differ = 0;
    for (int i = 0; i < N; i++) {
        assert_string_equal(together[i], alone[i]);
        assert_string_equal(together[i], again[i]);
        assert_int_equal(tok_together[i], tok_alone[i]);
        assert_true(tok_together[i] >= 1 && tok_together[i] <= req[i].opts.max_tokens);
        /* the same question and limit, another seed: sampled apart */
        if (i >= 60 && strcmp(together[i], together[i - 60]) != 0)
            differ++;
    }
    assert_true(differ > 0);
    /* an answer alone through gen_run_chat, as the engine's path does */
    struct gen_result res;
    assert_int_equal(gen_run_chat(g, chats[(N - 1) % 3], NULL, &req[N - 1].opts, &res, err, sizeof err),
                     0);
    assert_string_equal(res.text, together[N - 1]);
    gen_result_free(&res);
    for (int i = 0; i < N; i++) {
        free(together[i]);
        free(again[i]);
        free(alone[i]);
    }
    for (int q = 0; q < 3; q++)
        json_decref(chats[q]);
    gen_close(g);
}

/* The test model's generator, and in longq a prompt longer than its
 * context of 512. */
static struct generator *open_with_long_prompt(char *longq, size_t cap, char *err,
                                               size_t errcap)
{
    struct generator *g = gen_open(model_dir, NULL, err, errcap);
    assert_non_null(g);
    memset(longq, 'a', cap - 1);
    longq[cap - 1] = '\0';
    return g;
}

static void a_prompt_too_long_fails_the_rollout(void **state)
{
    (void)state;
    char err[512], longq[700];
    struct generator *g = open_with_long_prompt(longq, sizeof longq, err, sizeof err);
    json_t *ok = json_pack("[{s:s,s:s}]", "role", "user", "content", "Speak.");
    json_t *bad = json_pack("[{s:s,s:s}]", "role", "user", "content", longq);
    struct gen_opts o = {.max_tokens = 4, .temperature = 1.0f, .top_p = 1.0f, .seed = 1};
    struct rollout_req req[3] = {
        {.messages = ok, .opts = o}, {.messages = ok, .opts = o}, {.messages = bad, .opts = o}};
    for (int batched = 0; batched < 2; batched++) {
        char *texts[3];
        err[0] = '\0';
        assert_int_equal(rollout_run(g, req, 3, batched, texts, NULL, err, sizeof err),
                         GEN_TOO_LONG);
        assert_non_null(strstr(err, "the model's context is 512"));
        for (int i = 0; i < 3; i++)
            assert_null(texts[i]);
    }
    json_decref(ok);
    json_decref(bad);
    gen_close(g);
}

struct skips {
    int n, at[4], rc[4];
};

static void note_skip(void *ctx, int i, int rc, const char *why)
{
    struct skips *k = ctx;
    assert_non_null(strstr(why, "the model's context is 512"));
    k->at[k->n] = i;
    k->rc[k->n++] = rc;
}

static void sample_prompts_as_text_and_ids(void **state)
{
    (void)state;
    char err[512], longq[700];
    struct generator *g = open_with_long_prompt(longq, sizeof longq, err, sizeof err);
    const int32_t ids[] = {5, 6, 7, 8, 9};
    json_t *chat = json_pack("[{s:s,s:s}]", "role", "user", "content", "Speak.");
    const struct gen_opts o = {.max_tokens = 12, .temperature = 0.0f, .top_p = 1.0f};
    struct rollout_req req[5] = {{.text = "Review: a good film", .opts = o},
                                 {.text = longq, .opts = o},
                                 {.ids = ids, .n_ids = 5, .opts = o},
                                 {.messages = chat, .opts = o},
                                 {.ids = ids, .n_ids = 3, .opts = o}};
    char *first[5] = {NULL};
    for (int batched = 1; batched >= 0; batched--) {
        char *texts[5];
        int tokens[5];
        struct skips k = {0};
        assert_int_equal(rollout_run_some(g, req, 5, batched, texts, tokens, note_skip, &k, err,
                                          sizeof err),
                         0);
        assert_int_equal(k.n, 1);
        assert_int_equal(k.at[0], 1);
        assert_int_equal(k.rc[0], GEN_TOO_LONG);
        assert_null(texts[1]);
        /* each as it is answered alone */
        struct gen_result res;
        assert_int_equal(gen_run(g, req[0].text, &o, &res, err, sizeof err), 0);
        assert_string_equal(texts[0], res.text);
        assert_int_equal(tokens[0], res.completion_tokens);
        gen_result_free(&res);
        assert_int_equal(gen_run_chat(g, chat, NULL, &o, &res, err, sizeof err), 0);
        assert_string_equal(texts[3], res.text);
        gen_result_free(&res);
        for (int i = 2; i < 5; i += 2) {
            int32_t out[12];
            const char *finish;
            int n = gen_ids(g, ids, req[i].n_ids, &o, out, &finish, err, sizeof err);
            assert_true(n >= 0);
            assert_int_equal(tokens[i], n);
            char *want = tokenizer_decode(gen_tokenizer(g), out, (size_t)n, 1);
            assert_string_equal(texts[i], want);
            free(want);
        }
        for (int i = 0; i < 5; i++) {
            if (batched)
                first[i] = texts[i];
            else {
                if (first[i])
                    assert_string_equal(first[i], texts[i]);
                free(first[i]);
                free(texts[i]);
            }
        }
    }
    json_decref(chat);
    gen_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(batched_answers_are_each_ones_own),
        cmocka_unit_test(a_prompt_too_long_fails_the_rollout),
        cmocka_unit_test(sample_prompts_as_text_and_ids),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
