/* test_tokenizer_train.c - byte-level BPE training (train/tokenizer/bpe_train.c):
 * merges equal a slow, obviously-correct trainer's; the written
 * tokenizer.json reloads with tokenizer_load and round-trips text exactly;
 * runs are deterministic; and `alallo tokenizer train` works end to end. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/tokenizer/bpe_train.h"
#include "train/tokenizer/tokenizer.h"

/* Deterministic pseudo-English: words drawn with a skewed distribution so
 * some pairs are far more frequent than others, plus digits, punctuation,
 * newlines and a few multi-byte characters. */
static char *make_text(size_t len, uint32_t seed)
{
    static const char *const words[] = {"the", "of", "and", "to", "in", "that", "he", "was",
                                        "thee", "unto", "shall", "lord", "théâtre", "naïve",
                                        "1234", "x", "—", "don't", "they're", "π"};
    char *t = malloc(len + 64);
    size_t n = 0;
    uint32_t s = seed;
    while (n < len) {
        s = s * 1664525u + 1013904223u;
        uint32_t r = (s >> 8) % 100;
        const char *w = words[r < 40 ? r % 4 : r % 20];
        size_t wl = strlen(w);
        memcpy(t + n, w, wl);
        n += wl;
        t[n++] = (s >> 4) % 13 == 0 ? '\n' : ((s >> 4) % 11 == 0 ? ',' : ' ');
    }
    t[len] = '\0';
    return t;
}

/* The obviously-correct trainer: recount every pair after each merge. */
static int naive_merges(const char *text, size_t len, int vocab, int min_freq, char (*out)[2][64],
                        int max_out)
{
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile(
        (PCRE2_SPTR) "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
        PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &off, NULL);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    /* words as symbol lists; tokens as byte strings */
    enum { MAXW = 200000, MAXT = 512 };
    static int32_t syms[MAXW][24];
    static int nsym[MAXW];
    static char tok[MAXT][64];
    static int tlen[MAXT];
    int nw = 0, nt = 256;
    for (int b = 0; b < 256; b++) {
        tok[b][0] = (char)b;
        tlen[b] = 1;
    }
    for (size_t pos = 0; pos < len;) {
        if (pcre2_match(re, (PCRE2_SPTR)text, len, pos, 0, md, NULL) < 0)
            break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        assert_true(ov[1] - ov[0] <= 24 && nw < MAXW);
        nsym[nw] = (int)(ov[1] - ov[0]);
        for (size_t i = ov[0]; i < ov[1]; i++)
            syms[nw][i - ov[0]] = (unsigned char)text[i];
        nw++;
        pos = ov[1];
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    int nm = 0;
    static long counts[MAXT][MAXT];
    while (nt < vocab - 1 && nm < max_out) {
        memset(counts, 0, sizeof counts);
        for (int w = 0; w < nw; w++)
            for (int i = 0; i + 1 < nsym[w]; i++)
                counts[syms[w][i]][syms[w][i + 1]]++;
        long best = 0;
        int ba = -1, bb = -1;
        for (int a = 0; a < nt; a++)
            for (int b = 0; b < nt; b++)
                if (counts[a][b] > best) {
                    best = counts[a][b];
                    ba = a;
                    bb = b;
                }
        if (best < min_freq)
            break;
        int id = -1;
        for (int i = 0; i < nt; i++)
            if (tlen[i] == tlen[ba] + tlen[bb] && memcmp(tok[i], tok[ba], (size_t)tlen[ba]) == 0 &&
                memcmp(tok[i] + tlen[ba], tok[bb], (size_t)tlen[bb]) == 0)
                id = i;
        if (id < 0) {
            id = nt++;
            memcpy(tok[id], tok[ba], (size_t)tlen[ba]);
            memcpy(tok[id] + tlen[ba], tok[bb], (size_t)tlen[bb]);
            tlen[id] = tlen[ba] + tlen[bb];
        }
        memcpy(out[nm][0], tok[ba], (size_t)tlen[ba]);
        out[nm][0][tlen[ba]] = 0;
        memcpy(out[nm][1], tok[bb], (size_t)tlen[bb]);
        out[nm][1][tlen[bb]] = 0;
        nm++;
        for (int w = 0; w < nw; w++) {
            int o = 0;
            for (int i = 0; i < nsym[w];) {
                if (i + 1 < nsym[w] && syms[w][i] == ba && syms[w][i + 1] == bb) {
                    syms[w][o++] = id;
                    i += 2;
                } else {
                    syms[w][o++] = syms[w][i++];
                }
            }
            nsym[w] = o;
        }
    }
    return nm;
}

/* Maps raw bytes to GPT-2's printable form, as tokenizer.json writes them. */
static void printable(const char *raw, char *out)
{
    for (; *raw; raw++) {
        unsigned b = (unsigned char)*raw;
        int ok = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        unsigned cp = b;
        if (!ok) {
            unsigned n = 0;
            for (unsigned k = 0; k < b; k++)
                if (!((k >= 33 && k <= 126) || (k >= 161 && k <= 172) || k >= 174))
                    n++;
            cp = 256 + n;
        }
        if (cp < 0x80) {
            *out++ = (char)cp;
        } else {
            *out++ = (char)(0xc0 | cp >> 6);
            *out++ = (char)(0x80 | (cp & 0x3f));
        }
    }
    *out = 0;
}

static void merges_match_naive_trainer(void **state)
{
    (void)state;
    size_t len = 30000;
    char *text = make_text(len, 7);
    static char want[400][2][64];
    int nw = naive_merges(text, len, 400, 2, want, 400);
    assert_true(nw > 50);

    struct bpe_trainer *bt = bpe_train_new();
    char err[256];
    /* Two calls, split before a space that starts a word, count the same
     * pre-tokens as one call. */
    size_t half = len / 2;
    while (!(text[half] == ' ' && text[half + 1] >= 'a' && text[half + 1] <= 'z'))
        half++;
    assert_int_equal(bpe_train_add_text(bt, text, half, err, sizeof err), 0);
    assert_int_equal(bpe_train_add_text(bt, text + half, len - half, err, sizeof err), 0);
    struct bpe_train_result res;
    assert_int_equal(bpe_train_run(bt, 400, 2, &res, err, sizeof err), 0);
    char *js = bpe_train_json(bt);
    json_t *root = json_loads(js, 0, NULL);
    json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
    size_t check = (size_t)nw;
    assert_int_equal(json_array_size(merges), check);
    for (size_t i = 0; i < check; i++) {
        char a[160], b[160], line[330];
        printable(want[i][0], a);
        printable(want[i][1], b);
        snprintf(line, sizeof line, "%s %s", a, b);
        const char *got = json_string_value(json_array_get(merges, i));
        if (strcmp(got, line) != 0)
            fail_msg("merge %zu: got \"%s\", want \"%s\"", i, got, line);
    }
    json_decref(root);
    free(js);
    bpe_train_free(bt);

    /* In one piece, the same. */
    bt = bpe_train_new();
    assert_int_equal(bpe_train_add_text(bt, text, len, err, sizeof err), 0);
    assert_int_equal(bpe_train_run(bt, 400, 2, &res, err, sizeof err), 0);
    assert_int_equal(res.n_merges, nw);
    js = bpe_train_json(bt);
    root = json_loads(js, 0, NULL);
    merges = json_object_get(json_object_get(root, "model"), "merges");
    assert_int_equal(json_array_size(merges), (size_t)nw);
    for (int i = 0; i < nw; i++) {
        char a[160], b[160], line[330];
        printable(want[i][0], a);
        printable(want[i][1], b);
        snprintf(line, sizeof line, "%s %s", a, b);
        assert_string_equal(json_string_value(json_array_get(merges, (size_t)i)), line);
    }
    json_decref(root);
    free(js);
    bpe_train_free(bt);
    free(text);
}

static void reload_and_round_trip(void **state)
{
    (void)state;
    size_t len = 200000;
    char *text = make_text(len, 11);
    struct bpe_trainer *bt = bpe_train_new();
    char err[256];
    struct bpe_train_result res;
    assert_int_equal(bpe_train_add_text(bt, text, len, err, sizeof err), 0);
    assert_int_equal(bpe_train_run(bt, 600, 2, &res, err, sizeof err), 0);
    assert_true(res.vocab_size <= 600);
    char *js = bpe_train_json(bt);
    bpe_train_free(bt);
    struct tokenizer *t = tokenizer_load_json(js, strlen(js), err, sizeof err);
    if (!t)
        fail_msg("%s", err);
    assert_int_equal(tokenizer_vocab_size(t), res.vocab_size);
    int eot = tokenizer_token_id(t, "<|endoftext|>");
    assert_int_equal(eot, res.vocab_size - 1);
    assert_int_equal(tokenizer_bos_id(t), eot);
    assert_int_equal(tokenizer_eos_id(t), eot);
    const char *samples[] = {"the lord shall", "Completely unseen text: QXZ 9876 ∑∫ \xf0\x9f\x98\x80!",
                             "", "  leading and trailing  ", "\xff\xfe raw bytes \x01"};
    for (int i = 0; i < 5; i++) {
        int32_t *ids;
        size_t n;
        assert_int_equal(tokenizer_encode(t, samples[i], strlen(samples[i]), &ids, &n), 0);
        char *back = tokenizer_decode(t, ids, n, 0);
        if (i < 4)
            assert_string_equal(back, samples[i]);
        else
            assert_string_equal(back, "\xef\xbf\xbd\xef\xbf\xbd raw bytes \x01");
        free(back);
        free(ids);
    }
    /* Frequent words became single tokens. */
    int32_t *ids;
    size_t n;
    assert_int_equal(tokenizer_encode(t, " the", 4, &ids, &n), 0);
    assert_int_equal(n, 1);
    free(ids);
    /* Training text compresses well: under 0.5 tokens per byte. */
    assert_int_equal(tokenizer_encode(t, text, len, &ids, &n), 0);
    assert_true(n < len / 2);
    free(ids);
    tokenizer_free(t);
    free(js);
    free(text);
}

static void deterministic_and_limits(void **state)
{
    (void)state;
    size_t len = 50000;
    char *text = make_text(len, 3);
    char *out[2];
    for (int r = 0; r < 2; r++) {
        struct bpe_trainer *bt = bpe_train_new();
        char err[256];
        struct bpe_train_result res;
        assert_int_equal(bpe_train_add_text(bt, text, len, err, sizeof err), 0);
        assert_int_equal(bpe_train_run(bt, 500, 2, &res, err, sizeof err), 0);
        out[r] = bpe_train_json(bt);
        bpe_train_free(bt);
    }
    assert_string_equal(out[0], out[1]);
    free(out[0]);
    free(out[1]);

    /* min_frequency stops early: a tiny text cannot fill a big vocabulary. */
    struct bpe_trainer *bt = bpe_train_new();
    char err[256];
    struct bpe_train_result res;
    assert_int_equal(bpe_train_add_text(bt, "abab abab cd", 12, err, sizeof err), 0);
    assert_int_equal(bpe_train_run(bt, 1000, 2, &res, err, sizeof err), 0);
    assert_true(res.n_merges >= 1 && res.n_merges <= 4);
    assert_int_equal(res.vocab_size, 256 + res.n_merges + 1);
    assert_int_equal(bpe_train_run(bt, 1000, 2, &res, err, sizeof err), -1);
    bpe_train_free(bt);

    bt = bpe_train_new();
    assert_int_equal(bpe_train_run(bt, 1000, 2, &res, err, sizeof err), -1);
    assert_string_equal(err, "no text to learn from");
    assert_int_equal(bpe_train_run(bt, 10, 2, &res, err, sizeof err), -1);
    bpe_train_free(bt);
    bpe_train_free(NULL);
    free(text);
}

static void command_line(void **state)
{
    (void)state;
    char dir[] = "/tmp/alallo-bpe-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char in[128], outp[128], cmd[512];
    snprintf(in, sizeof in, "%s/in.txt", dir);
    snprintf(outp, sizeof outp, "%s/tokenizer.json", dir);
    char *text = make_text(100000, 5);
    FILE *f = fopen(in, "w");
    fputs(text, f);
    fclose(f);
    free(text);
    snprintf(cmd, sizeof cmd,
             "%s tokenizer train --input %s %s --vocab-size 700 --out %s > %s/out.json",
             ALALLO_BINARY, in, in, outp, dir);
    assert_int_equal(system(cmd), 0);
    char err[256];
    struct tokenizer *t = tokenizer_load(outp, err, sizeof err);
    if (!t)
        fail_msg("%s", err);
    assert_true(tokenizer_vocab_size(t) <= 700 && tokenizer_vocab_size(t) > 300);
    tokenizer_free(t);
    snprintf(cmd, sizeof cmd, "%s tokenizer encode --tokenizer %s --text 'the lord' > %s/ids.json",
             ALALLO_BINARY, outp, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s tokenizer train --input %s --vocab-size 10 --out %s 2>/dev/null",
             ALALLO_BINARY, in, outp);
    assert_int_not_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(merges_match_naive_trainer),
        cmocka_unit_test(reload_and_round_trip),
        cmocka_unit_test(deterministic_and_limits),
        cmocka_unit_test(command_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
