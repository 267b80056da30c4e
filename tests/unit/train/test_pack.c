/* test_pack.c - sample packing: the layout of a step's examples in rows
 * (pack.h), and that a packed batch computes what the same examples do one
 * per padded row: the same loss and the same gradient of every trainable
 * parameter (block-diagonal attention, positions restarting per example). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "train/model/model.h"
#include "train/data/pack.h"

static void first_fit_decreasing(void **state)
{
    (void)state;
    size_t len[6] = {3, 7, 2, 5, 3, 1};
    int row[6];
    size_t off[6];
    struct pack_layout p;
    assert_int_equal(pack_rows(len, 6, 8, 1, row, off, &p), 0);
    /* rows of 8 would take 3 x 8; rows of 7 hold all 21 in 3 x 7:
     * 7 -> row 0; 5 -> row 1; 3 (#0) -> row 2; 3 (#4) -> row 2 at 3;
     * 2 -> row 1 at 5; 1 -> row 2 at 6 */
    int want_row[6] = {2, 0, 1, 1, 2, 2};
    size_t want_off[6] = {0, 0, 5, 0, 3, 6};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(row[i], want_row[i]);
        assert_int_equal(off[i], want_off[i]);
    }
    assert_int_equal(p.rows, 3);
    assert_int_equal(p.T, 7);
    assert_int_equal(p.real, 21);
    /* without packing: a row each, as long as the longest */
    assert_int_equal(pack_rows(len, 6, 8, 0, row, off, &p), 0);
    assert_int_equal(p.rows, 6);
    assert_int_equal(p.T, 7);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(row[i], i);
        assert_int_equal(off[i], 0);
    }
}

/* Equal lengths gain nothing from sharing rows: the layout stays one
 * example a row, never more positions than padding. A shorter row length
 * than the context is chosen when it computes less. */
static void never_worse_than_padding(void **state)
{
    (void)state;
    size_t same[4] = {10, 10, 10, 10}, mixed[4] = {12, 3, 4, 5};
    int row[4];
    size_t off[4];
    struct pack_layout p;
    assert_int_equal(pack_rows(same, 4, 64, 1, row, off, &p), 0);
    assert_int_equal(p.rows * p.T, 40);
    assert_int_equal(p.T, 10); /* the tie goes to the shorter rows */
    assert_int_equal(pack_rows(mixed, 4, 64, 1, row, off, &p), 0);
    /* one row of 24 rather than 4 x 12 = 48, or 2 rows of 12 = 24 with
     * longer attention... both 24 positions: the shorter rows win */
    assert_int_equal(p.rows * p.T, 24);
    assert_int_equal(p.T, 12);
    assert_int_equal(p.rows, 2);
}

static void refuses_bad_input(void **state)
{
    (void)state;
    size_t len[2] = {3, 9};
    int row[2];
    size_t off[2];
    struct pack_layout p = {.rows = 42};
    assert_int_equal(pack_rows(len, 2, 8, 1, row, off, &p), -1); /* 9 > cap */
    assert_int_equal(pack_rows(len, 0, 8, 1, row, off, &p), -1);
    len[1] = 0;
    assert_int_equal(pack_rows(len, 2, 8, 1, row, off, &p), -1);
    assert_int_equal(p.rows, 42);
}

static const char *tiny_json =
    "{\"model_type\":\"llama\",\"hidden_size\":16,\"intermediate_size\":24,"
    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
    "\"vocab_size\":23,\"rms_norm_eps\":1e-5,\"rope_theta\":10000.0,"
    "\"max_position_embeddings\":64,\"tie_word_embeddings\":false,"
    "\"attention_bias\":true,\"hidden_act\":\"silu\"}";

enum { NEX = 4, CAP = 16 };

/* Loss and gradient of examples of lengths len[], packed or one per row. */
static double run_batch(struct model *m, const int32_t *const *ids, const uint8_t *const *mask,
                        const size_t *len, int packing, float *grad)
{
    int row[NEX];
    size_t off[NEX];
    struct pack_layout p;
    assert_int_equal(pack_rows(len, NEX, CAP, packing, row, off, &p), 0);
    size_t N = (size_t)p.rows * p.T;
    int32_t *bi = calloc(N, sizeof *bi), *seg = calloc(N, sizeof *seg);
    uint8_t *bm = calloc(N, 1);
    for (size_t i = 0; i < N; i++)
        seg[i] = (int32_t)(i % (size_t)p.T);
    for (int e = 0; e < NEX; e++) {
        size_t at = (size_t)row[e] * p.T + off[e];
        memcpy(bi + at, ids[e], len[e] * sizeof *bi);
        memcpy(bm + at, mask[e], len[e]);
        bm[at] = 0;
        for (size_t t = 0; t < len[e]; t++)
            seg[at + t] = (int32_t)off[e];
    }
    struct model_acts *a = model_acts_create(m, p.rows, p.T);
    assert_non_null(a);
    memset(m->grad, 0, m->n_train * sizeof(float));
    size_t nt = model_count_targets(bm, p.rows, p.T), got;
    double loss = model_forward_backward_packed(m, a, bi, bm, packing ? seg : NULL, p.rows, p.T,
                                                1.0f / (float)nt, 1, &got);
    assert_int_equal(got, nt);
    memcpy(grad, m->grad, m->n_train * sizeof(float));
    model_acts_free(a);
    free(bi);
    free(bm);
    free(seg);
    return loss / (double)nt;
}

static void packed_equals_unpacked(struct model_opts o, double tol)
{
    struct model_config cfg;
    char err[200];
    assert_int_equal(model_config_parse(tiny_json, &cfg, err, sizeof err), 0);
    struct model *m = model_create(&cfg, &o, err, sizeof err);
    assert_non_null(m);
    assert_int_equal(model_init_random(m, 9), 0);
    model_lora_init(m, 3);
    /* B of LoRA starts at zero: give it values so that its path counts */
    for (size_t i = 0; !o.full && i < m->n_train; i++)
        m->train[i] += 0.01f * (float)((i * 7) % 13) - 0.06f;
    size_t len[NEX] = {9, 3, 6, 5};
    int32_t ids[NEX][CAP];
    uint8_t mask[NEX][CAP];
    struct rng r;
    rng_seed(&r, 11);
    for (int e = 0; e < NEX; e++)
        for (size_t t = 0; t < len[e]; t++) {
            ids[e][t] = (int32_t)rng_below(&r, 23);
            mask[e][t] = t >= 1 + (size_t)e % 2; /* prompts of one or two tokens */
        }
    const int32_t *ip[NEX] = {ids[0], ids[1], ids[2], ids[3]};
    const uint8_t *mp[NEX] = {mask[0], mask[1], mask[2], mask[3]};
    float *g0 = malloc(m->n_train * sizeof(float)), *g1 = malloc(m->n_train * sizeof(float));
    double l0 = run_batch(m, ip, mp, len, 0, g0);
    double l1 = run_batch(m, ip, mp, len, 1, g1);
    assert_true(fabs(l0 - l1) < tol);
    double gmax = 0, dmax = 0;
    for (size_t i = 0; i < m->n_train; i++) {
        gmax = fmax(gmax, fabs(g0[i]));
        dmax = fmax(dmax, fabs((double)g0[i] - g1[i]));
    }
    assert_true(gmax > 1e-4); /* the comparison is not of zeros */
    assert_true(dmax < tol);
    free(g0);
    free(g1);
    model_free(m);
}

static void packed_full(void **state)
{
    (void)state;
    packed_equals_unpacked((struct model_opts){.full = 1}, 1e-5);
}

static void packed_lora(void **state)
{
    (void)state;
    packed_equals_unpacked((struct model_opts){.base_kind = WK_BF16, .lora_r = 4,
                                               .lora_alpha = 8, .lora_targets = MODEL_ALL_PROJ},
                           1e-5);
}

/* Without the segment mask, packing would let examples see each other:
 * the check above would fail (this proves the test can fail). */
static void cross_attention_differs(void **state)
{
    (void)state;
    struct model_config cfg;
    char err[200];
    assert_int_equal(model_config_parse(tiny_json, &cfg, err, sizeof err), 0);
    struct model_opts o = {.full = 1};
    struct model *m = model_create(&cfg, &o, err, sizeof err);
    assert_int_equal(model_init_random(m, 9), 0);
    int32_t ids[12] = {1, 4, 5, 6, 7, 8, 1, 9, 10, 11, 12, 13};
    uint8_t mask[12] = {0, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1};
    int32_t seg[12] = {0, 0, 0, 0, 0, 0, 6, 6, 6, 6, 6, 6};
    struct model_acts *a = model_acts_create(m, 1, 12);
    size_t nt;
    double with = model_forward_backward_packed(m, a, ids, mask, seg, 1, 12, 1, 0, &nt);
    double without = model_forward_backward_packed(m, a, ids, mask, NULL, 1, 12, 1, 0, &nt);
    /* the second example alone, in its own row */
    double alone0 = model_forward_backward_packed(m, a, ids, mask, NULL, 1, 6, 1, 0, &nt);
    double alone1 = model_forward_backward_packed(m, a, ids + 6, mask + 6, NULL, 1, 6, 1, 0, &nt);
    assert_true(fabs(with - (alone0 + alone1)) < 1e-4);
    assert_true(fabs(without - (alone0 + alone1)) > 1e-3);
    model_acts_free(a);
    model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(first_fit_decreasing),
        cmocka_unit_test(never_worse_than_padding),
        cmocka_unit_test(refuses_bad_input),
        cmocka_unit_test(packed_full),
        cmocka_unit_test(packed_lora),
        cmocka_unit_test(cross_attention_differs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
