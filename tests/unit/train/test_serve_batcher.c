/* test_serve_batcher.c - the inference engine's decode path: a KV cache
 * holds what a sequence was fed (its length grows by each step, its keys
 * are those of recomputation); a short prompt's numbers are its tokens'
 * fed one at a time, bit for bit; continuous batching of several sequences
 * of one base, each with its own LoRA adapter or none, joining at
 * different steps, gives every one the tokens `alallo generate`'s path
 * (gen_ids, the adapter loaded into the model) gives it alone; prompts
 * joining at one step are prefilled in one pass over the weights, each
 * still answering as alone; an adapter
 * loaded apart from its base is refused when its shapes do not fit; the
 * log-probabilities a sequence keeps (greedy or sampled, batched, with an
 * adapter or none) are the model's own log-softmax at each answer token,
 * recomputed by the training forward pass over the whole sequence, and so
 * are a prompt's own tokens' when its prefill scores them; a stop text
 * ends an answer before it, streamed and whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/rng.h"
#include "test_train_fixture.h"
#include "train/formats/modelio.h"
#include "train/run/decode.h"
#include "train/run/generate.h"
#include "train/serve/adapter.h"
#include "train/run/batcher.h"
#include "train/serve/logprobs.h"
#include "train/tokenizer/tokenizer.h"

static char base[256], model_dir[300], ad1[300], ad2[300];

/* A tiny model with weights large enough for varied greedy output, and
 * two different adapters of it (B not zero: each changes the answer). */
static int setup(void **state)
{
    (void)state;
    snprintf(base, sizeof base, "/tmp/alallo-test-serve-%ld", (long)getpid());
    fs_remove_tree(base);
    if (mkdir(base, 0755))
        return -1;
    snprintf(model_dir, sizeof model_dir, "%s/m", base);
    if (fx_make_model_scaled(model_dir, NULL, 31, 8.0f))
        return -1;
    char err[512];
    for (int k = 0; k < 2; k++) {
        char *ad = k ? ad2 : ad1;
        snprintf(ad, sizeof ad1, "%s/adapter%d", base, k);
        struct model_opts lo = {.full = 0, .base_kind = WK_F32, .lora_r = 2 + 2 * k,
                                .lora_alpha = 8.0f,
                                .lora_targets = k ? MODEL_ALL_PROJ : (1u << PROJ_Q | 1u << PROJ_V)};
        struct model *lm = modelio_load(model_dir, &lo, err, sizeof err);
        if (!lm)
            return -1;
        struct rng r;
        rng_seed(&r, 40 + (uint64_t)k);
        for (size_t i = 0; i < lm->n_train; i++)
            lm->train[i] = 0.3f * rng_normal(&r);
        if (modelio_save_peft(lm, ad, "m", err, sizeof err))
            return -1;
        model_free(lm);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return fs_remove_tree(base);
}

static void kv_cache_grows_with_each_step(void **state)
{
    (void)state;
    char err[512];
    struct generator *g = gen_open(model_dir, NULL, err, sizeof err);
    assert_non_null(g);
    struct model *m = gen_model(g);
    struct kv_cache a = {0}, b = {0};
    assert_int_equal(kv_cache_init(&a, m, 16), 0);
    assert_int_equal(kv_cache_init(&b, m, 16), 0);
    assert_int_equal(a.len, 0);
    assert_int_equal(a.cap, 16);
    assert_true(kv_cache_bytes(m, 16) == 2 * sizeof(float) * (size_t)a.layers * 16 * a.kd);
    struct decode_work *w = decode_work_new();
    float *la = malloc(sizeof(float) * 257), *lb = malloc(sizeof(float) * 257);
    int32_t ids[5] = {256, 72, 105, 33, 32};
    /* a: the prompt in one pass; b: a token at a time */
    struct decode_seq sa = {&a, ids, 5, NULL, NULL};
    assert_int_equal(decode_forward(m, w, &sa, 1, la), 0);
    assert_int_equal(a.len, 5);
    for (int i = 0; i < 5; i++) {
        struct decode_seq sb = {&b, &ids[i], 1, NULL, NULL};
        assert_int_equal(decode_forward(m, w, &sb, 1, lb), 0);
        assert_int_equal(b.len, i + 1);
    }
    /* the same keys and values, and the same last logits, either way */
    size_t n = (size_t)a.layers * 16 * a.kd;
    for (int l = 0; l < a.layers; l++)
        for (size_t i = 0; i < (size_t)5 * a.kd; i++) {
            size_t at = (size_t)l * 16 * a.kd + i;
            assert_true(at < n);
            assert_float_equal(a.k[at], b.k[at], 1e-4);
            assert_float_equal(a.v[at], b.v[at], 1e-4);
        }
    for (int j = 0; j < 257; j++)
        assert_float_equal(la[j], lb[j], 1e-3);
    free(la);
    free(lb);
    decode_work_free(w);
    kv_cache_free(&a);
    kv_cache_free(&b);
    gen_close(g);
}

/* Feeds ids[0..n) to a fresh cache of cap 48 as one prompt (one = false)
 * or a token at a time; the last logits into out (257). */
static void feed(struct model *m, struct decode_work *w, struct kv_cache *kv, const int32_t *ids,
                 int n, bool one, float *out)
{
    assert_int_equal(kv_cache_init(kv, m, 48), 0);
    for (int i = 0; i < n; i += one ? 1 : n) {
        struct decode_seq s = {kv, ids + i, one ? 1 : n, NULL, NULL};
        assert_int_equal(decode_forward(m, w, &s, 1, out), 0);
    }
    assert_int_equal(kv->len, n);
}

/* A short prompt (at most 32 tokens) goes through the one-token rows'
 * products: its keys, values and last logits are the bits of its tokens
 * fed one at a time. A long one (40) goes through the packed product:
 * the same to float precision. In a batch of a long prompt, a short one
 * and a decode step, each gets the bits it gets alone. */
static void short_prompt_is_its_tokens_one_at_a_time(void **state)
{
    (void)state;
    char err[512];
    struct generator *g = gen_open(model_dir, NULL, err, sizeof err);
    assert_non_null(g);
    struct model *m = gen_model(g);
    struct decode_work *w = decode_work_new();
    int32_t ids[41];
    for (int i = 0; i < 41; i++)
        ids[i] = (int32_t)((i * 37 + 11) % 257);
    float la[257], lb[257];
    const int lens[] = {2, 5, 32, 40};
    for (size_t c = 0; c < sizeof lens / sizeof lens[0]; c++) {
        int n = lens[c];
        struct kv_cache a = {0}, b = {0};
        feed(m, w, &a, ids, n, false, la);
        feed(m, w, &b, ids, n, true, lb);
        size_t per = (size_t)n * a.kd;
        for (int l = 0; l < a.layers; l++) {
            size_t at = (size_t)l * a.cap * a.kd;
            if (n <= 32) {
                assert_memory_equal(a.k + at, b.k + at, per * sizeof(float));
                assert_memory_equal(a.v + at, b.v + at, per * sizeof(float));
            } else {
                for (size_t i = 0; i < per; i++) {
                    assert_float_equal(a.k[at + i], b.k[at + i], 1e-4);
                    assert_float_equal(a.v[at + i], b.v[at + i], 1e-4);
                }
            }
        }
        if (n <= 32)
            assert_memory_equal(la, lb, sizeof la);
        for (int j = 0; j < 257; j++)
            assert_float_equal(la[j], lb[j], 1e-3);
        kv_cache_free(&a);
        kv_cache_free(&b);
    }
    /* alone: a long prompt, a short one, and a step after 7 tokens */
    float alone_l[3][257];
    struct kv_cache kv[3] = {{0}};
    feed(m, w, &kv[0], ids, 40, false, alone_l[0]);
    feed(m, w, &kv[1], ids + 1, 9, false, alone_l[1]);
    feed(m, w, &kv[2], ids + 2, 7, false, alone_l[2]);
    struct decode_seq step = {&kv[2], ids + 9, 1, NULL, NULL};
    assert_int_equal(decode_forward(m, w, &step, 1, alone_l[2]), 0);
    for (int k = 0; k < 3; k++)
        kv_cache_free(&kv[k]);
    /* together, the step first */
    struct kv_cache t[3] = {{0}};
    for (int k = 0; k < 3; k++)
        assert_int_equal(kv_cache_init(&t[k], m, 48), 0);
    float ahead[257];
    struct decode_seq warm = {&t[2], ids + 2, 7, NULL, NULL};
    assert_int_equal(decode_forward(m, w, &warm, 1, ahead), 0);
    struct decode_seq both[3] = {{&t[2], ids + 9, 1, NULL, NULL},
                                 {&t[0], ids, 40, NULL, NULL},
                                 {&t[1], ids + 1, 9, NULL, NULL}};
    float together[3 * 257];
    assert_int_equal(decode_forward(m, w, both, 3, together), 0);
    assert_memory_equal(together, alone_l[2], sizeof alone_l[2]);
    assert_memory_equal(together + 257, alone_l[0], sizeof alone_l[0]);
    assert_memory_equal(together + 2 * 257, alone_l[1], sizeof alone_l[1]);
    for (int k = 0; k < 3; k++)
        kv_cache_free(&t[k]);
    decode_work_free(w);
    gen_close(g);
}

/* The tokens gen_ids gives alone for a prompt, with an adapter (loaded
 * into the model, as `alallo generate --adapter-dir` does) or none. */
static int alone(const char *adapter, const int32_t *ids, int n, int32_t *out, const char **fin)
{
    char err[512];
    struct generator *g = gen_open(model_dir, adapter, err, sizeof err);
    assert_non_null(g);
    struct gen_opts o = {20, 0.0f, 1.0f, 0};
    int k = gen_ids(g, ids, n, &o, out, fin, err, sizeof err);
    gen_close(g);
    return k;
}

/* The base model and its two adapters, loaded apart. */
static struct generator *open_base(struct serve_adapter **a1, struct serve_adapter **a2)
{
    char err[512];
    struct generator *g = gen_open(model_dir, NULL, err, sizeof err);
    assert_non_null(g);
    *a1 = serve_adapter_load(gen_model(g), ad1, err, sizeof err);
    *a2 = serve_adapter_load(gen_model(g), ad2, err, sizeof err);
    assert_non_null(*a1);
    assert_non_null(*a2);
    return g;
}

static void close_all(struct generator *g, struct serve_adapter *a1, struct serve_adapter *a2,
                      struct batcher *b, struct batch_seq *seqs, int n)
{
    for (int i = 0; i < n; i++)
        batch_seq_end(&seqs[i]);
    batcher_free(b);
    serve_adapter_free(a1);
    serve_adapter_free(a2);
    gen_close(g);
}

/* Starts seqs[0..n) on g, greedy, 20 tokens at most: prompts[i] (lens[i]
 * tokens) with adapter ads[i]. */
static void start_all(struct generator *g, struct batch_seq *seqs, const int32_t *const *prompts,
                      const int *lens, const struct decode_adapter *const *ads, int n)
{
    char err[512];
    struct gen_stops stops = {.id = {256}, .n = 1};
    struct gen_opts o = {20, 0.0f, 1.0f, 0};
    for (int i = 0; i < n; i++) {
        int32_t *ids = malloc(sizeof *ids * (size_t)lens[i]);
        memcpy(ids, prompts[i], sizeof *ids * (size_t)lens[i]);
        assert_int_equal(batch_seq_start(&seqs[i], g, ads[i], ids, (size_t)lens[i], &stops, &o,
                                         err, sizeof err), 0);
    }
}

/* Each of seqs[0..n) answered exactly as gen_ids answers alone with the
 * adapter in dirs[i] loaded into the model (NULL: the base). */
static void check_alone(const struct batch_seq *seqs, const int32_t *const *prompts,
                        const int *lens, const char *const *dirs, int n)
{
    int32_t want[20];
    const char *fin;
    for (int i = 0; i < n; i++) {
        int k = alone(dirs[i], prompts[i], lens[i], want, &fin);
        assert_int_equal(seqs[i].n_out, k);
        assert_memory_equal(seqs[i].out, want, sizeof(int32_t) * (size_t)k);
        assert_string_equal(seqs[i].finish, fin);
    }
}

static void batch_gives_each_its_own_answer(void **state)
{
    (void)state;
    struct serve_adapter *a1, *a2;
    struct generator *g = open_base(&a1, &a2);
    /* four sequences: base, adapter 1, adapter 2, adapter 1 on another
     * prompt; the last two join the batch three steps late */
    static const int32_t p0[] = {256, 72, 105, 33}, p1[] = {256, 72, 105, 33},
                         p2[] = {256, 72, 105, 33}, p3[] = {256, 97, 98, 99, 100, 101};
    const int32_t *prompts[] = {p0, p1, p2, p3};
    int lens[] = {4, 4, 4, 6};
    const struct decode_adapter *ads[] = {NULL, &a1->d, &a2->d, &a1->d};
    const char *dirs[] = {NULL, ad1, ad2, ad1};
    struct batch_seq seqs[4];
    start_all(g, seqs, prompts, lens, ads, 4);
    struct batcher *b = batcher_new();
    assert_non_null(b);
    int steps = 0;
    for (;;) {
        struct batch_seq *run[4];
        int n = 0;
        for (int i = 0; i < 4; i++)
            if (!seqs[i].finish && (i < 2 || steps >= 3))
                run[n++] = &seqs[i];
        if (n == 0)
            break;
        assert_int_equal(batcher_step(b, run, n), 0);
        steps++;
    }
    check_alone(seqs, prompts, lens, dirs, 4);
    /* the adapters matter: on one prompt the three answers differ */
    assert_true(seqs[0].n_out != seqs[1].n_out ||
                memcmp(seqs[0].out, seqs[1].out, sizeof(int32_t) * (size_t)seqs[0].n_out));
    assert_true(seqs[1].n_out != seqs[2].n_out ||
                memcmp(seqs[1].out, seqs[2].out, sizeof(int32_t) * (size_t)seqs[1].n_out));
    close_all(g, a1, a2, b, seqs, 4);
}

/* Prompts that join at one step, between sequences already decoding, are
 * prefilled together: one product a matrix for all their rows (one pass
 * over the weights, counted by batcher_passes), and each gets exactly the
 * tokens gen_ids gives it alone. */
static void joining_prompts_are_prefilled_in_one_pass(void **state)
{
    (void)state;
    struct serve_adapter *a1, *a2;
    struct generator *g = open_base(&a1, &a2);
    /* 0 and 1 decode already; 2..5 join together: the base and both
     * adapters, prompts of 3, 7, 5 and 11 tokens */
    static const int32_t r0[] = {256, 72, 105, 33}, r1[] = {256, 97, 98, 99, 100},
                         q0[] = {256, 84, 104}, q1[] = {256, 119, 104, 121, 32, 110, 111},
                         q2[] = {256, 97, 110, 100, 32},
                         q3[] = {256, 111, 110, 99, 101, 32, 109, 111, 114, 101, 33};
    const int32_t *prompts[] = {r0, r1, q0, q1, q2, q3};
    int lens[] = {4, 5, 3, 7, 5, 11};
    const struct decode_adapter *ads[] = {NULL, &a2->d, NULL, &a1->d, &a2->d, &a1->d};
    const char *dirs[] = {NULL, ad2, NULL, ad1, ad2, ad1};
    struct batch_seq seqs[6];
    start_all(g, seqs, prompts, lens, ads, 6);
    struct batcher *b = batcher_new();
    assert_non_null(b);
    struct batch_seq *first[] = {&seqs[0], &seqs[1]};
    assert_int_equal(batcher_step(b, first, 2), 0); /* their prompts */
    assert_int_equal(batcher_step(b, first, 2), 0); /* a decode step */
    assert_null(seqs[0].finish);
    assert_null(seqs[1].finish);
    struct decode_passes before = batcher_passes(b);
    assert_int_equal(before.prompt, 1);
    assert_int_equal(before.token, 1);
    /* the newcomers interleaved with the decoding ones */
    struct batch_seq *mixed[] = {&seqs[2], &seqs[0], &seqs[3], &seqs[1], &seqs[4], &seqs[5]};
    assert_int_equal(batcher_step(b, mixed, 6), 0);
    struct decode_passes after = batcher_passes(b);
    /* short prompts and decode rows through an fp32 weight: one product */
    assert_int_equal(after.prompt - before.prompt, 1);
    assert_int_equal(after.token - before.token, 0);
    for (;;) {
        struct batch_seq *run[6];
        int n = 0;
        for (int i = 0; i < 6; i++)
            if (!seqs[i].finish)
                run[n++] = &seqs[i];
        if (n == 0)
            break;
        assert_int_equal(batcher_step(b, run, n), 0);
    }
    assert_int_equal(batcher_passes(b).prompt, 2); /* no prompt after the step above */
    check_alone(seqs, prompts, lens, dirs, 6);
    /* the adapters matter on the newcomers' prompts too */
    int32_t base_ans[20];
    const char *fin;
    int kb = alone(NULL, q3, 11, base_ans, &fin);
    assert_true(kb != seqs[5].n_out || memcmp(base_ans, seqs[5].out, sizeof(int32_t) * (size_t)kb));
    close_all(g, a1, a2, b, seqs, 6);
}

/* Checks s's kept log-probabilities against the log-softmax of the logits
 * the training forward pass gives over its prompt and answer, in one pass
 * of the model with `adapter` loaded (as `alallo generate` loads it). */
/* ref[0..V) = the log-softmax of logits l, in doubles; returns its mass. */
static double log_softmax(const float *l, int V, double *ref)
{
    double mx = l[0], sum = 0.0, mass = 0.0;
    for (int j = 1; j < V; j++)
        mx = l[j] > mx ? l[j] : mx;
    for (int j = 0; j < V; j++)
        sum += exp(l[j] - mx);
    for (int j = 0; j < V; j++) {
        ref[j] = l[j] - mx - log(sum);
        mass += exp(ref[j]);
    }
    return mass;
}

/* Starts s on g after prompt p (n tokens, copied) with adapter ad and
 * options o, the stop token 256. */
static void start_one(struct generator *g, struct batch_seq *s, const struct decode_adapter *ad,
                      const int32_t *p, int n, const struct gen_opts *o)
{
    char err[512];
    struct gen_stops stops = {.id = {256}, .n = 1};
    int32_t *ids = malloc(sizeof *ids * (size_t)n);
    assert_non_null(ids);
    memcpy(ids, p, sizeof *ids * (size_t)n);
    assert_int_equal(batch_seq_start(s, g, ad, ids, (size_t)n, &stops, o, err, sizeof err), 0);
}

static void check_logprobs(const struct batch_seq *s, const char *adapter, bool greedy)
{
    char err[512];
    struct generator *g = gen_open(model_dir, adapter, err, sizeof err);
    assert_non_null(g);
    struct model *m = gen_model(g);
    int V = m->cfg.vocab, T = s->n_prompt + s->n_out;
    int32_t seq[64];
    assert_true(T <= 64);
    memcpy(seq, s->prompt, sizeof *seq * (size_t)s->n_prompt);
    memcpy(seq + s->n_prompt, s->out, sizeof *seq * (size_t)s->n_out);
    struct model_acts *a = model_acts_create(m, 1, T);
    float *logits = malloc(sizeof(float) * (size_t)T * (size_t)V);
    double *ref = malloc(sizeof(double) * (size_t)V);
    assert_non_null(a);
    model_forward_logits(m, a, seq, 1, T, logits);
    json_t *entries = serve_logprobs_json(s, 0, s->n_out);
    assert_int_equal(json_array_size(entries), s->n_out);
    for (int i = 0; i < s->n_out; i++) {
        const float *l = logits + (size_t)(s->n_prompt - 1 + i) * (size_t)V;
        assert_float_equal(log_softmax(l, V, ref), 1.0, 1e-6);
        assert_float_equal(s->lp[i], ref[s->out[i]], 2e-3);
        assert_true(s->lp[i] <= 0.0f);
        /* the top: the most likely tokens, most likely first, none left out */
        const struct batch_logprob *top = s->top + (size_t)i * (size_t)s->top_n;
        double top_mass = 0.0;
        for (int k = 0; k < s->top_n; k++) {
            assert_float_equal(top[k].lp, ref[top[k].id], 2e-3);
            if (k > 0)
                assert_true(top[k].lp <= top[k - 1].lp);
            top_mass += exp(top[k].lp);
        }
        int above = 0; /* tokens of the reference more likely than the last of the top */
        for (int j = 0; j < V; j++)
            above += ref[j] > ref[top[s->top_n - 1].id] + 1e-4;
        assert_true(above < s->top_n);
        assert_true(top_mass <= 1.0 + 1e-5);
        if (greedy) { /* the token taken is the first of the top */
            assert_int_equal(top[0].id, s->out[i]);
            assert_float_equal(top[0].lp, s->lp[i], 1e-6);
        }
        /* the protocol's entry: the token's byte (the fixture's tokens
         * below 256 are bytes), its log-probability, its top */
        json_t *e = json_array_get(entries, (size_t)i);
        assert_float_equal(json_real_value(json_object_get(e, "logprob")), s->lp[i], 1e-6);
        json_t *bytes = json_object_get(e, "bytes");
        if (s->out[i] < 256) {
            assert_int_equal(json_array_size(bytes), 1);
            assert_int_equal(json_integer_value(json_array_get(bytes, 0)), s->out[i]);
        }
        json_t *etop = json_object_get(e, "top_logprobs");
        assert_int_equal(json_array_size(etop), s->top_n);
        assert_float_equal(json_real_value(json_object_get(json_array_get(etop, 0), "logprob")),
                           top[0].lp, 1e-6);
    }
    json_decref(entries);
    free(ref);
    free(logits);
    model_acts_free(a);
    gen_close(g);
}

static void logprobs_are_the_models_log_softmax(void **state)
{
    (void)state;
    char err[512];
    struct generator *g = gen_open(model_dir, NULL, err, sizeof err);
    assert_non_null(g);
    struct serve_adapter *a1 = serve_adapter_load(gen_model(g), ad1, err, sizeof err);
    assert_non_null(a1);
    /* greedy on the base with the top 5; sampled (temperature 1.3, top_p
     * 0.9) with adapter 1 and the top 3: the log-probabilities are the
     * model's, before temperature and top_p; a third without any */
    struct gen_opts greedy = {20, 0.0f, 1.0f, 0}, sampled = {20, 1.3f, 0.9f, 7};
    static const int32_t p[] = {256, 72, 105, 33};
    struct batch_seq seqs[3];
    const struct gen_opts *opts[] = {&greedy, &sampled, &greedy};
    const struct decode_adapter *ads[] = {NULL, &a1->d, &a1->d};
    for (int i = 0; i < 3; i++)
        start_one(g, &seqs[i], ads[i], p, 4, opts[i]);
    assert_int_equal(batch_seq_logprobs(&seqs[0], 5), 0);
    assert_int_equal(batch_seq_logprobs(&seqs[1], 3), 0);
    assert_int_equal(batch_seq_logprobs(&seqs[2], BATCH_TOP_LOGPROBS_MAX + 1), -1);
    assert_int_equal(seqs[2].top_n, -1);
    struct batcher *b = batcher_new();
    for (;;) {
        struct batch_seq *run[3];
        int n = 0;
        for (int i = 0; i < 3; i++)
            if (!seqs[i].finish)
                run[n++] = &seqs[i];
        if (n == 0)
            break;
        assert_int_equal(batcher_step(b, run, n), 0);
    }
    assert_true(seqs[0].n_out > 3);
    assert_true(seqs[1].n_out > 3);
    check_logprobs(&seqs[0], NULL, true);
    check_logprobs(&seqs[1], ad1, false);
    assert_null(seqs[2].lp);
    for (int i = 0; i < 3; i++)
        batch_seq_end(&seqs[i]);
    batcher_free(b);
    serve_adapter_free(a1);
    gen_close(g);
}

/* The prompt's own tokens of s (prompt logprobs kept) against the training
 * forward pass over the prompt, through the adapter in `adapter` (NULL:
 * the base), and its protocol entries from `from`. */
static void check_prompt_logprobs(const struct batch_seq *s, const char *adapter, int from)
{
    char err[512];
    struct generator *g = gen_open(model_dir, adapter, err, sizeof err);
    assert_non_null(g);
    struct model *m = gen_model(g);
    int V = m->cfg.vocab, T = s->n_prompt;
    struct model_acts *a = model_acts_create(m, 1, T);
    float *logits = malloc(sizeof(float) * (size_t)T * (size_t)V);
    double *ref = malloc(sizeof(double) * (size_t)V);
    assert_non_null(a);
    assert_non_null(logits);
    assert_non_null(ref);
    model_forward_logits(m, a, s->prompt, 1, T, logits);
    assert_true(isnan(s->plp[0]));
    for (int i = 1; i < T; i++) {
        log_softmax(logits + (size_t)(i - 1) * (size_t)V, V, ref);
        assert_float_equal(s->plp[i], ref[s->prompt[i]], 2e-3);
        const struct batch_logprob *top = s->ptop + (size_t)i * (size_t)s->top_n;
        for (int k = 0; k < s->top_n; k++) {
            assert_float_equal(top[k].lp, ref[top[k].id], 2e-3);
            int above = 0; /* tokens more likely than the k-th of the top */
            for (int j = 0; j < V; j++)
                above += ref[j] > top[k].lp + 1e-4;
            assert_true(above <= k);
        }
    }
    json_t *e = serve_prompt_logprobs_json(s, from);
    assert_int_equal(json_array_size(e), T - from);
    for (int i = from; i < T; i++) {
        json_t *x = json_array_get(e, (size_t)(i - from));
        if (i == 0) { /* nothing before it */
            assert_true(json_is_null(json_object_get(x, "logprob")));
            assert_int_equal(json_array_size(json_object_get(x, "top_logprobs")), 0);
            continue;
        }
        assert_float_equal(json_real_value(json_object_get(x, "logprob")), s->plp[i], 1e-6);
        assert_int_equal(json_array_size(json_object_get(x, "top_logprobs")), s->top_n);
    }
    json_decref(e);
    free(ref);
    free(logits);
    model_acts_free(a);
    gen_close(g);
}

/* A prompt scored in its prefill (echo with logprobs): every token of it
 * gets the model's log-softmax at its place, a long prompt (past the
 * tiles, scored in two chunks) with an adapter and the top 3, a short one
 * on the base with the top 0, in one batch with a sequence that scores
 * nothing; the short one's numbers are those it gets alone, bit for bit;
 * a sequence already stepped cannot start scoring. */
static void prompt_logprobs_are_the_models_log_softmax(void **state)
{
    (void)state;
    struct serve_adapter *a1, *a2;
    struct generator *g = open_base(&a1, &a2);
    struct gen_opts o = {3, 0.0f, 1.0f, 0};
    int32_t longp[40], shortp[] = {72, 105, 33, 97, 98, 99};
    for (int i = 0; i < 40; i++)
        longp[i] = (int32_t)(40 + (i * 37) % 200);
    const int32_t *prompts[] = {longp, shortp, shortp, shortp};
    int lens[] = {40, 6, 6, 6}, tops[] = {3, 0, -1, 0};
    const struct decode_adapter *ads[] = {&a1->d, NULL, NULL, NULL};
    struct batch_seq seqs[4];
    for (int i = 0; i < 4; i++) {
        start_one(g, &seqs[i], ads[i], prompts[i], lens[i], &o);
        if (tops[i] >= 0) {
            assert_int_equal(batch_seq_logprobs(&seqs[i], tops[i]), 0);
            assert_int_equal(batch_seq_prompt_logprobs(&seqs[i]), 0);
        }
    }
    assert_int_equal(batch_seq_prompt_logprobs(&seqs[2]), -1); /* no logprobs asked */
    struct batcher *b = batcher_new();
    struct batch_seq *three[] = {&seqs[2], &seqs[0], &seqs[1]};
    assert_int_equal(batcher_step(b, three, 3), 0);
    struct batch_seq *alone = &seqs[3];
    assert_int_equal(batcher_step(b, &alone, 1), 0);
    assert_int_equal(batch_seq_prompt_logprobs(&seqs[3]), -1); /* stepped already */
    assert_null(seqs[2].plp);
    assert_memory_equal(seqs[1].plp + 1, seqs[3].plp + 1, sizeof(float) * 5);
    check_prompt_logprobs(&seqs[0], ad1, 0);
    check_prompt_logprobs(&seqs[1], NULL, 0);
    check_prompt_logprobs(&seqs[1], NULL, 2);
    close_all(g, a1, a2, b, seqs, 4);
}

/* What on_text was given, joined. */
struct pieces {
    char text[8192];
    size_t len;
};

static void collect(void *ctx, const char *piece, size_t len)
{
    struct pieces *p = ctx;
    assert_true(p->len + len < sizeof p->text);
    memcpy(p->text + p->len, piece, len);
    p->len += len;
}

/* Steps seqs[0..n) together until every one has finished. */
static void run_all(struct batcher *b, struct batch_seq *seqs, int n)
{
    for (;;) {
        struct batch_seq *run[8];
        int k = 0;
        for (int i = 0; i < n; i++)
            if (!seqs[i].finish)
                run[k++] = &seqs[i];
        if (k == 0)
            return;
        assert_int_equal(batcher_step(b, run, k), 0);
    }
}

/* How many of ids[0..n) have text that starts before byte `cut` of the
 * answer's text t: token k starts where the text of the tokens before it
 * ends, unless that ends in a character token k completes (the prefix's
 * text is then not a prefix of t). */
static int starting_before(struct generator *g, const int32_t *ids, int n, const char *t,
                           size_t cut)
{
    int k = 0;
    for (; k < n; k++) {
        char *p = tokenizer_decode(gen_tokenizer(g), ids, (size_t)k, 1);
        assert_non_null(p);
        size_t len = strlen(p);
        if (strncmp(p, t, len) != 0)
            while (len >= 3 && memcmp(p + len - 3, "\xef\xbf\xbd", 3) == 0)
                len -= 3;
        free(p);
        if (len >= cut)
            break;
    }
    return k;
}

/* The byte where the character after the one at `at` starts. */
static size_t next_char(const char *t, size_t len, size_t at)
{
    do
        at++;
    while (at < len && ((unsigned char)t[at] & 0xC0) == 0x80);
    return at;
}

/* Stop texts: a sequence whose answer comes to one ends there, its answer
 * the text before it (the first place it appears), its stream exactly
 * that text and never a byte of the stop text, its tokens those of the
 * answer alone up to there and its kept tokens (with log-probabilities)
 * those whose text starts before it; one at the answer's first character
 * leaves nothing; one that never comes changes nothing, in the same
 * batch. */
static void stop_texts_end_an_answer_before_them(void **state)
{
    (void)state;
    struct serve_adapter *a1, *a2;
    struct generator *g = open_base(&a1, &a2);
    struct gen_opts o = {40, 0.0f, 1.0f, 0};
    int32_t p[] = {72, 105, 33};
    struct batch_seq seqs[4];
    struct pieces got[4];
    memset(got, 0, sizeof got);
    struct batcher *b = batcher_new();
    start_one(g, &seqs[0], NULL, p, 3, &o); /* the answer alone, no stop texts */
    run_all(b, seqs, 1);
    size_t tlen;
    char *t = gen_whole_text(g, seqs[0].out, seqs[0].n_out, &tlen);
    assert_non_null(t);
    assert_true(tlen >= 8);
    /* a stop text of two characters from the answer, the first ASCII (a
     * stream shows it at once unless it is held back) */
    size_t k = 1;
    while (k + 1 < tlen && ((unsigned char)t[k] >= 0x80 || t[k] == t[0]))
        k++;
    assert_true(k + 1 < tlen);
    size_t k2 = next_char(t, tlen, k + 1);
    size_t cut = (size_t)((char *)memmem(t, tlen, t + k, k2 - k) - t);
    const char *stops[] = {NULL, "\x01\x02never", NULL};
    size_t stop_lens[] = {k2 - k, 8, next_char(t, tlen, 0)};
    const char *stop_at[] = {t + k, stops[1], t};
    const struct decode_adapter *ads[] = {NULL, &a1->d, NULL};
    for (int i = 0; i < 3; i++) {
        start_one(g, &seqs[1 + i], ads[i], p, 3, &o);
        assert_int_equal(stop_texts_add(&seqs[1 + i].stop_texts, stop_at[i], stop_lens[i]), 0);
        assert_int_equal(batch_seq_logprobs(&seqs[1 + i], 2), 0);
        seqs[1 + i].on_text = collect;
        seqs[1 + i].on_text_ctx = &got[1 + i];
    }
    run_all(b, seqs + 1, 3);
    struct batch_seq *s = &seqs[1];
    assert_string_equal(s->finish, "stop");
    assert_true(s->has_cut);
    assert_int_equal(s->cut, cut);
    assert_int_equal(got[1].len, cut);
    assert_memory_equal(got[1].text, t, cut);
    assert_true(s->n_out <= seqs[0].n_out);
    assert_memory_equal(s->out, seqs[0].out, sizeof *s->out * (size_t)s->n_out);
    assert_int_equal(s->n_kept, starting_before(g, s->out, s->n_out, t, cut));
    assert_true(s->n_kept >= 1 && s->n_kept <= s->n_out);
    /* one that never comes: no cut, every token kept, its stream a prefix
     * of its answer (an end may be held until the answer is sent whole) */
    s = &seqs[2];
    assert_false(s->has_cut);
    assert_int_equal(s->n_kept, s->n_out);
    size_t olen;
    char *other = gen_whole_text(g, s->out, s->n_out, &olen);
    assert_non_null(other);
    assert_true(got[2].len <= olen);
    assert_memory_equal(got[2].text, other, got[2].len);
    /* one at the first character: nothing shown, nothing kept */
    s = &seqs[3];
    assert_string_equal(s->finish, "stop");
    assert_true(s->has_cut);
    assert_int_equal(s->cut, 0);
    assert_int_equal(s->n_kept, 0);
    assert_int_equal(got[3].len, 0);
    free(other);
    free(t);
    close_all(g, a1, a2, b, seqs, 4);
}

static void bad_sequences_are_refused(void **state)
{
    (void)state;
    char err[512];
    struct generator *g = gen_open(model_dir, NULL, err, sizeof err);
    assert_non_null(g);
    struct gen_stops stops = {.id = {256}, .n = 1};
    struct gen_opts o = {20, 0.0f, 1.0f, 0};
    struct batch_seq s;
    int32_t *empty = malloc(sizeof *empty);
    assert_int_equal(batch_seq_start(&s, g, NULL, empty, 0, &stops, &o, err, sizeof err),
                     GEN_EMPTY);
    batch_seq_end(&s);
    int ctx = gen_model(g)->cfg.max_pos;
    int32_t *lots = calloc((size_t)ctx, sizeof *lots);
    assert_int_equal(batch_seq_start(&s, g, NULL, lots, (size_t)ctx, &stops, &o, err, sizeof err),
                     GEN_TOO_LONG);
    assert_non_null(strstr(err, "context"));
    batch_seq_end(&s);
    struct gen_opts many = {GEN_MAX_TOKENS + 1, 0.0f, 1.0f, 0};
    int32_t *one = calloc(1, sizeof *one);
    assert_int_equal(batch_seq_start(&s, g, NULL, one, 1, &stops, &many, err, sizeof err), -1);
    assert_non_null(strstr(err, "max_tokens"));
    batch_seq_end(&s);
    /* an adapter of another shape (a model of another width) is refused */
    struct model_config c;
    assert_int_equal(model_config_shape("small", 257, &c), 0);
    struct model_opts fo = {.full = 1};
    struct model *other = model_create(&c, &fo, err, sizeof err);
    assert_non_null(other);
    assert_null(serve_adapter_load(other, ad1, err, sizeof err));
    assert_non_null(strstr(err, "shape"));
    assert_null(serve_adapter_load(gen_model(g), model_dir, err, sizeof err));
    model_free(other);
    gen_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kv_cache_grows_with_each_step),
        cmocka_unit_test(short_prompt_is_its_tokens_one_at_a_time),
        cmocka_unit_test(batch_gives_each_its_own_answer),
        cmocka_unit_test(joining_prompts_are_prefilled_in_one_pass),
        cmocka_unit_test(logprobs_are_the_models_log_softmax),
        cmocka_unit_test(prompt_logprobs_are_the_models_log_softmax),
        cmocka_unit_test(stop_texts_end_an_answer_before_them),
        cmocka_unit_test(bad_sequences_are_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
