/* test_tokenizer.c - train/tokenizer/tokenizer.c on small hand-made tokenizer.json
 * files whose right answers can be worked out by hand: byte-level BPE
 * (GPT-2 and Llama 3 layouts) and SentencePiece-style BPE with byte
 * fallback (legacy normalizer layout and Metaspace layout). The comparison
 * with an independent GPT-2 implementation is tests/integration/tokenizer.test.mjs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/tokenizer/tokenizer.h"

/* GPT-2's byte -> character table, written independently of the library's. */
static void byte_char_utf8(int b, char out[4])
{
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    int cp = b;
    if (!printable) {
        int n = 0;
        for (int i = 0; i < b; i++)
            if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255)))
                n++;
        cp = 256 + n;
    }
    memset(out, 0, 4);
    if (cp < 0x80) {
        out[0] = (char)cp;
    } else {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
    }
}

/* A byte-level vocabulary: ids 0..255 are the bytes in byte order, then
 * the merged tokens, then <|endoftext|>. */
static json_t *byte_level_model(const char *const *merges, int n_merges)
{
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char s[4];
        byte_char_utf8(b, s);
        json_object_set_new(vocab, s, json_integer(b));
    }
    json_t *ml = json_array();
    for (int i = 0; i < n_merges; i++) {
        char joined[64];
        const char *sp = strchr(merges[i], ' ');
        snprintf(joined, sizeof joined, "%.*s%s", (int)(sp - merges[i]), merges[i], sp + 1);
        json_object_set_new(vocab, joined, json_integer(256 + i));
        json_array_append_new(ml, json_string(merges[i]));
    }
    return json_pack("{s:s, s:o, s:o, s:n}", "type", "BPE", "vocab", vocab, "merges", ml,
                     "unk_token");
}

static struct tokenizer *load(json_t *root)
{
    char *s = json_dumps(root, 0);
    json_decref(root);
    char err[256] = "";
    struct tokenizer *t = tokenizer_load_json(s, strlen(s), err, sizeof err);
    if (!t)
        fail_msg("load failed: %s", err);
    free(s);
    return t;
}

static void expect_ids(const struct tokenizer *t, const char *text, int special,
                       const int32_t *want, size_t nwant)
{
    int32_t *ids;
    size_t n;
    int rc = special ? tokenizer_encode_special(t, text, strlen(text), &ids, &n)
                     : tokenizer_encode(t, text, strlen(text), &ids, &n);
    assert_int_equal(rc, 0);
    if (n != nwant) {
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, "%d ", ids[i]);
        fail_msg("\"%s\": %zu ids, want %zu", text, n, nwant);
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] != want[i])
            fail_msg("\"%s\": id %zu is %d, want %d", text, i, ids[i], want[i]);
    free(ids);
}

static void expect_round_trip(const struct tokenizer *t, const char *text, size_t len)
{
    int32_t *ids;
    size_t n;
    assert_int_equal(tokenizer_encode(t, text, len, &ids, &n), 0);
    char *back = tokenizer_decode(t, ids, n, 0);
    assert_non_null(back);
    assert_int_equal(strlen(back), len);
    assert_memory_equal(back, text, len);
    free(back);
    free(ids);
}

/* Round trip of a string literal, NUL bytes and all. */
#define ROUND_TRIP(t, lit) expect_round_trip((t), (lit), sizeof(lit) - 1)

/* Merges: "Ġ t", "h e", "Ġt he", "l l", "e ll" ... ids 256.. in this order. */
static const char *const gpt2ish_merges[] = {"\xc4\xa0 t", "h e", "\xc4\xa0t he", "l l",
                                             "e ll", "h ell", "a a"};

static struct tokenizer *gpt2ish(void)
{
    json_t *root = json_pack(
        "{s:[{s:i, s:s, s:b}], s:n, s:{s:s, s:b, s:b}, s:{s:s}, s:o}", "added_tokens", "id", 263,
        "content", "<|endoftext|>", "special", 1, "normalizer", "pre_tokenizer", "type",
        "ByteLevel", "add_prefix_space", 0, "use_regex", 1, "decoder", "type", "ByteLevel",
        "model", byte_level_model(gpt2ish_merges, 7));
    return load(root);
}

/* Token `id` alone: its text and its bytes (tokenizer_token_piece). */
static void expect_piece(const struct tokenizer *t, int id, const char *text, const char *bytes,
                         size_t len)
{
    char *b;
    size_t n;
    char *s = tokenizer_token_piece(t, id, &b, &n);
    assert_non_null(s);
    assert_string_equal(s, text);
    assert_int_equal(n, len);
    assert_memory_equal(b, bytes, len);
    free(s);
    free(b);
}

static void byte_level_merges(void **state)
{
    (void)state;
    struct tokenizer *t = gpt2ish();
    assert_int_equal(tokenizer_vocab_size(t), 264);
    assert_int_equal(tokenizer_bos_id(t), 263);
    assert_int_equal(tokenizer_eos_id(t), 263);
    assert_int_equal(tokenizer_token_id(t, "<|endoftext|>"), 263);
    assert_int_equal(tokenizer_token_id(t, "\xc4\xa0the"), 258);
    assert_int_equal(tokenizer_token_id(t, "nope"), -1);
    assert_true(tokenizer_is_byte_level(t));

    /* " the" -> Ġ t h e -> Ġt h e (rank 0) -> Ġt he (rank 1) -> Ġthe (rank 2). */
    expect_ids(t, " the", 0, (int32_t[]){258}, 1);
    /* "the": no Ġ, so t + he. */
    expect_ids(t, "the", 0, (int32_t[]){'t', 257}, 2);
    /* "hello": h e l l o -> he l l o (rank 1) -> he ll o (rank 3); "e ll"
     * no longer applies because e was merged first; "h ell" never forms. */
    expect_ids(t, "hello", 0, (int32_t[]){257, 259, 'o'}, 3);
    /* Ties go left: aaa -> aa a. */
    expect_ids(t, "aaa", 0, (int32_t[]){262, 'a'}, 2);
    /* The regex splits "the the": "the", " the". */
    expect_ids(t, "the the", 0, (int32_t[]){'t', 257, 258}, 3);
    /* Trailing spaces: "\s+(?!\S)" leaves the last space to the next word. */
    expect_ids(t, "a  the", 0, (int32_t[]){'a', ' ', 258}, 3);

    /* Special tokens are text unless asked for. */
    int32_t *ids;
    size_t n;
    assert_int_equal(tokenizer_encode(t, "<|endoftext|>", 13, &ids, &n), 0);
    assert_true(n > 1);
    for (size_t i = 0; i < n; i++)
        assert_int_not_equal(ids[i], 263);
    free(ids);
    expect_ids(t, "the<|endoftext|> the", 1, (int32_t[]){'t', 257, 263, 258}, 4);

    /* Decoding: special tokens kept or skipped. */
    int32_t seq[] = {258, 263, 't'};
    char *s = tokenizer_decode(t, seq, 3, 0);
    assert_string_equal(s, " the<|endoftext|>t");
    free(s);
    s = tokenizer_decode(t, seq, 3, 1);
    assert_string_equal(s, " thet");
    free(s);
    /* A lone continuation byte decodes to U+FFFD. */
    int32_t bad[] = {0xc3, 'a'};
    s = tokenizer_decode(t, bad, 2, 0);
    assert_string_equal(s, "\xef\xbf\xbd" "a");
    free(s);
    /* One token alone: its text and its bytes; a byte that is no whole
     * character is U+FFFD in the text and itself in the bytes. */
    expect_piece(t, 258, " the", " the", 4);
    expect_piece(t, 0xc3, "\xef\xbf\xbd", "\xc3", 1);
    expect_piece(t, 263, "<|endoftext|>", "<|endoftext|>", 13);
    char *b = (char *)1;
    size_t bn = 1;
    assert_null(tokenizer_token_piece(t, 264, &b, &bn));
    assert_null(b);
    assert_int_equal(bn, 0);

    /* Every byte string survives encode + decode, including invalid UTF-8
     * and NUL bytes. */
    char all[256];
    for (int i = 0; i < 256; i++)
        all[i] = (char)(255 - i);
    int32_t *ids2;
    size_t n2;
    assert_int_equal(tokenizer_encode(t, all, 256, &ids2, &n2), 0);
    assert_int_equal(n2, 256);
    free(ids2);
    ROUND_TRIP(t, "Hello, world! It's 2024.\n\n  Ünïcödé \xe2\x80\x94 ok\t");
    ROUND_TRIP(t, "");
    tokenizer_free(t);
    tokenizer_free(NULL);
}

/* Llama 3 layout: Split(regex, Isolated) then ByteLevel without its own regex,
 * ignore_merges, and BOS from the TemplateProcessing post-processor. */
static void llama3_layout(void **state)
{
    (void)state;
    const char *pat = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    json_t *model = byte_level_model(gpt2ish_merges, 7);
    json_object_set_new(model, "ignore_merges", json_true());
    /* A whole-word token that merges alone could not build: "hell" via ignore_merges. */
    json_object_set_new(json_object_get(model, "vocab"), "hello", json_integer(270));
    json_t *root = json_pack(
        "{s:[{s:i, s:s, s:b}, {s:i, s:s, s:b}], s:n,"
        " s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]},"
        " s:{s:s, s:[{s:s, s:b}, {s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}]}]},"
        " s:{s:s}, s:o}",
        "added_tokens", "id", 271, "content", "<|begin_of_text|>", "special", 1, "id", 272,
        "content", "<|end_of_text|>", "special", 1, "normalizer", "pre_tokenizer", "type",
        "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex", pat, "behavior",
        "Isolated", "invert", 0, "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1,
        "use_regex", 0, "post_processor", "type", "Sequence", "processors", "type", "ByteLevel",
        "trim_offsets", 0, "type", "TemplateProcessing", "single", "SpecialToken", "id",
        "<|begin_of_text|>", "type_id", 0, "Sequence", "id", "A", "type_id", 0, "decoder", "type",
        "ByteLevel", "model", model);
    struct tokenizer *t = load(root);
    assert_int_equal(tokenizer_bos_id(t), 271);
    assert_int_equal(tokenizer_eos_id(t), 272);
    assert_int_equal(tokenizer_vocab_size(t), 273);
    expect_ids(t, "hello", 0, (int32_t[]){270}, 1); /* whole word, merges ignored */
    /* Numbers split in threes: "12345" -> "123", "45". */
    expect_ids(t, "12345", 0, (int32_t[]){'1', '2', '3', '4', '5'}, 5);
    expect_ids(t, " the", 0, (int32_t[]){258}, 1);
    ROUND_TRIP(t, "Hello there 12345!!\r\n\r\n  x");
    tokenizer_free(t);
}

/* SentencePiece-style vocabulary: <unk> <s> </s>, 256 byte tokens, then
 * pieces. Merges build ▁h ▁he ... */
static json_t *sp_model(int with_merges)
{
    json_t *vocab = json_object();
    json_object_set_new(vocab, "<unk>", json_integer(0));
    json_object_set_new(vocab, "<s>", json_integer(1));
    json_object_set_new(vocab, "</s>", json_integer(2));
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        json_object_set_new(vocab, name, json_integer(3 + b));
    }
    const char *pieces[] = {"\xe2\x96\x81", "h", "e", "l", "o", "w", "r", "d",
                            "\xe2\x96\x81h", "ll", "\xe2\x96\x81he", "\xe2\x96\x81hell",
                            "\xe2\x96\x81hello", "\xe2\x96\x81w"};
    for (int i = 0; i < 14; i++)
        json_object_set_new(vocab, pieces[i], json_integer(259 + i));
    json_t *merges = json_array();
    if (with_merges) {
        /* order: ▁ h, l l, ▁h e, ▁he ll, ▁hell o, ▁ w */
        json_array_append_new(merges, json_pack("[s,s]", "\xe2\x96\x81", "h"));
        json_array_append_new(merges, json_string("l l"));
        json_array_append_new(merges, json_string("\xe2\x96\x81h e"));
        json_array_append_new(merges, json_string("\xe2\x96\x81he ll"));
        json_array_append_new(merges, json_string("\xe2\x96\x81hell o"));
        json_array_append_new(merges, json_string("\xe2\x96\x81 w"));
    }
    return json_pack("{s:s, s:o, s:o, s:s, s:b, s:b}", "type", "BPE", "vocab", vocab, "merges",
                     merges, "unk_token", "<unk>", "byte_fallback", 1, "fuse_unk", 1);
}

static json_t *sp_added(void)
{
    return json_pack("[{s:i, s:s, s:b}, {s:i, s:s, s:b}, {s:i, s:s, s:b}]", "id", 0, "content",
                     "<unk>", "special", 1, "id", 1, "content", "<s>", "special", 1, "id", 2,
                     "content", "</s>", "special", 1);
}

static void check_sp(struct tokenizer *t)
{
    assert_false(tokenizer_is_byte_level(t));
    assert_int_equal(tokenizer_bos_id(t), 1);
    assert_int_equal(tokenizer_eos_id(t), 2);
    /* "hello" -> "▁hello" -> one piece. */
    expect_ids(t, "hello", 0, (int32_t[]){271}, 1);
    /* "hello wö": ▁hello ▁w then ö (U+00F6, C3 B6) by byte fallback. */
    expect_ids(t, "hello w\xc3\xb6", 0, (int32_t[]){271, 272, 3 + 0xc3, 3 + 0xb6}, 4);
    ROUND_TRIP(t, "hello w\xc3\xb6rld");
    int32_t seq[] = {1, 271, 2};
    char *s = tokenizer_decode(t, seq, 3, 1);
    assert_string_equal(s, "hello");
    free(s);
    /* alone, a piece keeps the space its mark stands for; a fallback byte
     * is its byte */
    expect_piece(t, 271, " hello", " hello", 6);
    expect_piece(t, 3 + 0xb6, "\xef\xbf\xbd", "\xb6", 1);
}

/* Llama 2 layout: normalizer Prepend + Replace, no pre-tokenizer, decoder
 * Replace / ByteFallback / Fuse / Strip. */
static void sentencepiece_legacy(void **state)
{
    (void)state;
    json_t *root = json_pack(
        "{s:o, s:{s:s, s:[{s:s, s:s}, {s:s, s:{s:s}, s:s}]}, s:n,"
        " s:{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}, {s:s, s:s, s:i, s:i}]}, s:o}",
        "added_tokens", sp_added(), "normalizer", "type", "Sequence", "normalizers", "type",
        "Prepend", "prepend", "\xe2\x96\x81", "type", "Replace", "pattern", "String", " ",
        "content", "\xe2\x96\x81", "pre_tokenizer", "decoder", "type", "Sequence", "decoders",
        "type", "Replace", "pattern", "String", "\xe2\x96\x81", "content", " ", "type",
        "ByteFallback", "type", "Fuse", "type", "Strip", "content", " ", "start", 1, "stop", 0,
        "model", sp_model(1));
    struct tokenizer *t = load(root);
    check_sp(t);
    ROUND_TRIP(t, "  two  spaces ");
    /* The legacy normalizer marks every segment, even after <s>. */
    expect_ids(t, "<s>hello", 1, (int32_t[]){1, 271}, 2);
    tokenizer_free(t);
}

/* Newer layout: Metaspace pre-tokenizer and decoder; and a file without
 * merges, where a pair merges when its concatenation is a token. */
static void sentencepiece_metaspace(void **state)
{
    (void)state;
    for (int with_merges = 1; with_merges >= 0; with_merges--) {
        json_t *root = json_pack(
            "{s:o, s:n, s:{s:s, s:s, s:s, s:b}, s:{s:s, s:[{s:s, s:s, s:s}, {s:s}]}, s:o}",
            "added_tokens", sp_added(), "normalizer", "pre_tokenizer", "type", "Metaspace",
            "replacement", "\xe2\x96\x81", "prepend_scheme", "first", "split", 0, "decoder",
            "type", "Sequence", "decoders", "type", "Metaspace", "replacement", "\xe2\x96\x81",
            "prepend_scheme", "first", "type", "ByteFallback", "model", sp_model(with_merges));
        struct tokenizer *t = load(root);
        check_sp(t);
        /* prepend_scheme "first": only the start of the text gets a mark. */
        expect_ids(t, "<s>hello", 1, (int32_t[]){1, 260, 261, 268, 263}, 5);
        /* As in Hugging Face tokenizers, text that starts with a space gets
         * no extra mark, and decoding strips one: a leading space is lost. */
        int32_t *ids;
        size_t n;
        assert_int_equal(tokenizer_encode(t, " hello", 6, &ids, &n), 0);
        assert_int_equal(n, 1);
        assert_int_equal(ids[0], 271);
        char *s = tokenizer_decode(t, ids, n, 0);
        assert_string_equal(s, "hello");
        free(s);
        free(ids);
        tokenizer_free(t);
    }
}

static void expect_load_error(const char *json, const char *want)
{
    char err[256] = "";
    struct tokenizer *t = tokenizer_load_json(json, strlen(json), err, sizeof err);
    if (t)
        fail_msg("loaded: %s", json);
    if (!strstr(err, want))
        fail_msg("error \"%s\" lacks \"%s\"", err, want);
}

static void load_errors(void **state)
{
    (void)state;
    expect_load_error("{", "not valid JSON");
    expect_load_error("{}", "no \"model\"");
    expect_load_error("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}",
                      "unsupported model type \"WordPiece\"");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{}}}", "non-empty");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a c\"]}}",
                      "not in the vocabulary");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"abc\"]}}",
                      "merge 0");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-1}}}", "not in 0..");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},"
                      "\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"}}",
                      "unsupported pre-tokenizer \"BertPreTokenizer\"");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},"
                      "\"normalizer\":{\"type\":\"Lowercase\"}}",
                      "unsupported normalizer \"Lowercase\"");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}},"
                      "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"}}}",
                      "does not compile");
    char err[256];
    assert_null(tokenizer_load("/nonexistent/tokenizer.json", err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/tokenizer.json"));
}

struct job {
    const struct tokenizer *t;
    const char *text;
    size_t len;
    size_t n;
    int32_t sum;
};

static void *encode_job(void *arg)
{
    struct job *j = arg;
    for (int rep = 0; rep < 20; rep++) {
        int32_t *ids;
        size_t n;
        if (tokenizer_encode(j->t, j->text, j->len, &ids, &n) < 0)
            return NULL;
        j->n = n;
        j->sum = 0;
        for (size_t i = 0; i < n; i++)
            j->sum += ids[i] * (int32_t)(i % 7 + 1);
        free(ids);
    }
    return NULL;
}

static void threads_share_a_tokenizer(void **state)
{
    (void)state;
    struct tokenizer *t = gpt2ish();
    const char *text = "the hello theaaa the the hello, 123 hello";
    struct job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct job){.t = t, .text = text, .len = strlen(text)};
        pthread_create(&th[i], NULL, encode_job, &jobs[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 1; i < 4; i++) {
        assert_int_equal(jobs[i].n, jobs[0].n);
        assert_int_equal(jobs[i].sum, jobs[0].sum);
    }
    assert_true(jobs[0].n > 0);
    tokenizer_free(t);
}

static void input_limit(void **state)
{
    (void)state;
    struct tokenizer *t = gpt2ish();
    int32_t *ids = (int32_t *)1;
    size_t n = 1;
    /* The length is checked before the text is read, so no 64 MiB buffer. */
    assert_int_equal(tokenizer_encode(t, "x", ((size_t)64 << 20) + 1, &ids, &n), -1);
    assert_null(ids);
    tokenizer_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(byte_level_merges),       cmocka_unit_test(llama3_layout),
        cmocka_unit_test(sentencepiece_legacy),    cmocka_unit_test(sentencepiece_metaspace),
        cmocka_unit_test(load_errors),             cmocka_unit_test(threads_share_a_tokenizer),
        cmocka_unit_test(input_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
