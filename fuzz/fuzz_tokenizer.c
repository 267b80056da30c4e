/* fuzz_tokenizer.c - libFuzzer driver for tokenizer.json loading and
 * encode/decode (train/tokenizer/tokenizer.h). A base model's folder, and so its
 * tokenizer.json, may come from a user, so the loader meets hostile input.
 *
 * Two kinds of input, told apart by the first byte:
 *  - '{': a tokenizer.json (up to the first NUL byte), then text to encode
 *    (after that NUL; a fixed sample when there is none). The file is loaded
 *    with tokenizer_load_json; when it loads, the text is encoded plainly and
 *    with special tokens, and the ids decoded again.
 *  - anything else: text, encoded by three fixed tokenizers built here
 *    (GPT-2-style byte-level BPE, the Llama 3 layout, and Llama 2-style
 *    SentencePiece BPE with byte fallback).
 *
 * Properties: no crash or bad memory access; a refused file gets a reason,
 * one line of valid UTF-8 (it reaches JSON answers);
 * every id is in [0, vocab size); decode returns valid UTF-8 (the API puts
 * it into JSON), skipping special tokens never lengthens it; and for the
 * fixed tokenizers, decode(encode(text)) == text for valid UTF-8 text
 * without NUL bytes (decode returns a C string, so NUL cannot survive) and,
 * for SentencePiece, without U+2581 (its space mark).
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "train/tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_TEXT 4096 /* bytes of text per input; BPE is quadratic in a word */

static const char sample_text[] =
    "Hello, world! It's 2024.\n\n  \xc3\x9cn\xc3\xaf" "c\xc3\xb6" "d\xc3\xa9 \xe2\x80\x94 ok\t"
    "<|endoftext|><s></s> the hello aaa 12345";

/* GPT-2's byte -> printable character map, as UTF-8 (independent of the
 * module's own table). */
static void byte_char(int b, char out[4])
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

static json_t *byte_level_model(void)
{
    static const char *const merges[] = {"\xc4\xa0 t", "h e", "\xc4\xa0t he", "l l", "e ll",
                                         "h ell", "a a"};
    json_t *vocab = json_object(), *ml = json_array();
    for (int b = 0; b < 256; b++) {
        char s[4];
        byte_char(b, s);
        json_object_set_new(vocab, s, json_integer(b));
    }
    for (int i = 0; i < 7; i++) {
        char joined[64];
        const char *sp = strchr(merges[i], ' ');
        snprintf(joined, sizeof joined, "%.*s%s", (int)(sp - merges[i]), merges[i], sp + 1);
        json_object_set_new(vocab, joined, json_integer(256 + i));
        json_array_append_new(ml, json_string(merges[i]));
    }
    return json_pack("{s:s, s:o, s:o, s:n}", "type", "BPE", "vocab", vocab, "merges", ml,
                     "unk_token");
}

static json_t *gpt2_json(void)
{
    return json_pack("{s:[{s:i, s:s, s:b}], s:n, s:{s:s, s:b, s:b}, s:{s:s}, s:o}",
                     "added_tokens", "id", 263, "content", "<|endoftext|>", "special", 1,
                     "normalizer", "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0,
                     "use_regex", 1, "decoder", "type", "ByteLevel", "model",
                     byte_level_model());
}

static json_t *llama3_json(void)
{
    const char *pat = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                      "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    json_t *model = byte_level_model();
    json_object_set_new(model, "ignore_merges", json_true());
    json_object_set_new(json_object_get(model, "vocab"), "hello", json_integer(270));
    return json_pack("{s:[{s:i, s:s, s:b}, {s:i, s:s, s:b}], s:n,"
                     " s:{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]},"
                     " s:{s:s}, s:o}",
                     "added_tokens", "id", 271, "content", "<|begin_of_text|>", "special", 1,
                     "id", 272, "content", "<|end_of_text|>", "special", 1, "normalizer",
                     "pre_tokenizer", "type", "Sequence", "pretokenizers", "type", "Split",
                     "pattern", "Regex", pat, "behavior", "Isolated", "invert", 0, "type",
                     "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 0,
                     "decoder", "type", "ByteLevel", "model", model);
}

static json_t *sentencepiece_json(void)
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
    static const char *const pieces[] = {
        "\xe2\x96\x81", "h", "e", "l", "o", "w", "r", "d", "\xe2\x96\x81h", "ll",
        "\xe2\x96\x81he", "\xe2\x96\x81hell", "\xe2\x96\x81hello", "\xe2\x96\x81w"};
    for (int i = 0; i < 14; i++)
        json_object_set_new(vocab, pieces[i], json_integer(259 + i));
    json_t *merges = json_pack("[s,s,s,s,s,s]", "\xe2\x96\x81 h", "l l", "\xe2\x96\x81h e",
                               "\xe2\x96\x81he ll", "\xe2\x96\x81hell o", "\xe2\x96\x81 w");
    json_t *model = json_pack("{s:s, s:o, s:o, s:s, s:b, s:b}", "type", "BPE", "vocab", vocab,
                              "merges", merges, "unk_token", "<unk>", "byte_fallback", 1,
                              "fuse_unk", 1);
    json_t *added = json_pack("[{s:i, s:s, s:b}, {s:i, s:s, s:b}, {s:i, s:s, s:b}]", "id", 0,
                              "content", "<unk>", "special", 1, "id", 1, "content", "<s>",
                              "special", 1, "id", 2, "content", "</s>", "special", 1);
    return json_pack("{s:o, s:{s:s, s:[{s:s, s:s}, {s:s, s:{s:s}, s:s}]}, s:n,"
                     " s:{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}, {s:s, s:s, s:i, s:i}]},"
                     " s:o}",
                     "added_tokens", added, "normalizer", "type", "Sequence", "normalizers",
                     "type", "Prepend", "prepend", "\xe2\x96\x81", "type", "Replace",
                     "pattern", "String", " ", "content", "\xe2\x96\x81", "pre_tokenizer",
                     "decoder", "type", "Sequence", "decoders", "type", "Replace", "pattern",
                     "String", "\xe2\x96\x81", "content", " ", "type", "ByteFallback", "type",
                     "Fuse", "type", "Strip", "content", " ", "start", 1, "stop", 0, "model",
                     model);
}

static struct tokenizer *load_fixed(json_t *root)
{
    FUZZ_CHECK(root != NULL);
    char *s = json_dumps(root, 0);
    json_decref(root);
    FUZZ_CHECK(s != NULL);
    char err[256] = "";
    struct tokenizer *t = tokenizer_load_json(s, strlen(s), err, sizeof err);
    if (!t) {
        fprintf(stderr, "a fixed tokenizer does not load: %s\n", err);
        abort();
    }
    free(s);
    return t;
}

#define N_FIXED 3
static struct tokenizer *fixed[N_FIXED];

/* Decodes ids both ways and checks what decode promises. Returns the plain
 * decoding (caller frees). */
static char *decode_checked(const struct tokenizer *t, const int32_t *ids, size_t n)
{
    char *all = tokenizer_decode(t, ids, n, 0);
    char *plain = tokenizer_decode(t, ids, n, 1);
    FUZZ_CHECK(all != NULL && plain != NULL);
    size_t la = strlen(all), lp = strlen(plain);
    if (!fuzz_utf8_valid((const uint8_t *)all, la) ||
        !fuzz_utf8_valid((const uint8_t *)plain, lp)) {
        fprintf(stderr, "tokenizer_decode returned invalid UTF-8\n");
        abort();
    }
    FUZZ_CHECK(lp <= la);
    free(plain);
    return all;
}

/* Encodes text plainly and with special tokens; checks the ids. Returns the
 * plain ids (caller frees) in *out, their count in *n_out. */
static void encode_checked(const struct tokenizer *t, const char *text, size_t len,
                           int32_t **out, size_t *n_out)
{
    int vocab = tokenizer_vocab_size(t);
    FUZZ_CHECK(vocab > 0);
    int32_t *ids = NULL, *sids = NULL;
    size_t n = 0, sn = 0;
    FUZZ_CHECK(tokenizer_encode(t, text, len, &ids, &n) == 0);
    FUZZ_CHECK(ids != NULL);
    FUZZ_CHECK(tokenizer_encode_special(t, text, len, &sids, &sn) == 0);
    FUZZ_CHECK(sids != NULL);
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(ids[i] >= 0 && ids[i] < vocab);
    for (size_t i = 0; i < sn; i++)
        FUZZ_CHECK(sids[i] >= 0 && sids[i] < vocab);
    char *back = decode_checked(t, sids, sn);
    free(back);
    free(sids);
    *out = ids;
    *n_out = n;
}

static void fuzz_fixed(const char *text, size_t len)
{
    int round_trip = fuzz_utf8_valid((const uint8_t *)text, len) && !memchr(text, '\0', len);
    for (int k = 0; k < N_FIXED; k++) {
        int32_t *ids;
        size_t n;
        encode_checked(fixed[k], text, len, &ids, &n);
        char *back = decode_checked(fixed[k], ids, n);
        /* SentencePiece marks spaces with U+2581 and decodes every U+2581 as
         * a space (so does Hugging Face's): text holding that character
         * cannot come back unchanged. */
        bool exact = round_trip && !(k == 2 && memmem(text, len, "\xe2\x96\x81", 3));
        if (exact && (strlen(back) != len || memcmp(back, text, len) != 0)) {
            fprintf(stderr, "tokenizer %d: decode(encode(text)) != text (%zu -> %zu bytes)\n",
                    k, len, strlen(back));
            abort();
        }
        free(back);
        free(ids);
    }
}

static void fuzz_file(const char *json, size_t jlen, const char *text, size_t tlen)
{
    char err[256];
    memset(err, 0, sizeof err);
    struct tokenizer *t = tokenizer_load_json(json, jlen, err, sizeof err);
    if (!t) {
        /* A reason, as one line of valid UTF-8: model errors reach JSON. */
        FUZZ_CHECK(err[0] != '\0' && memchr(err, '\0', sizeof err) != NULL);
        FUZZ_CHECK(strchr(err, '\n') == NULL);
        if (!fuzz_utf8_valid((const uint8_t *)err, strlen(err))) {
            fprintf(stderr, "tokenizer_load_json error is not valid UTF-8: %s\n", err);
            abort();
        }
        return;
    }
    int vocab = tokenizer_vocab_size(t);
    FUZZ_CHECK(vocab > 0);
    int bos = tokenizer_bos_id(t), eos = tokenizer_eos_id(t);
    FUZZ_CHECK(bos >= -1 && bos < vocab && eos >= -1 && eos < vocab);
    FUZZ_CHECK(tokenizer_token_text(t, -1) == NULL && tokenizer_token_text(t, vocab) == NULL);
    int32_t *ids;
    size_t n;
    encode_checked(t, text, tlen, &ids, &n);
    for (size_t i = 0; i < n; i++) {
        const char *s = tokenizer_token_text(t, ids[i]);
        FUZZ_CHECK(s != NULL); /* an id encode gave out has a text */
    }
    char *back = decode_checked(t, ids, n);
    free(back);
    free(ids);
    /* Ids encode never gives (out of range, gaps) are skipped, not trusted. */
    int32_t odd[] = {-5, vocab, vocab + 100, 0, INT32_MAX, INT32_MIN};
    back = decode_checked(t, odd, sizeof odd / sizeof odd[0]);
    free(back);
    tokenizer_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!fixed[0]) {
        fixed[0] = load_fixed(gpt2_json());
        fixed[1] = load_fixed(llama3_json());
        fixed[2] = load_fixed(sentencepiece_json());
    }
    const char *in = (const char *)data;
    if (size > 0 && in[0] == '{') {
        const char *nul = memchr(in, '\0', size);
        size_t jlen = nul ? (size_t)(nul - in) : size;
        const char *text = nul ? nul + 1 : sample_text;
        size_t tlen = nul ? size - jlen - 1 : sizeof sample_text - 1;
        if (tlen > MAX_TEXT)
            tlen = MAX_TEXT;
        fuzz_file(in, jlen, text, tlen);
        return 0;
    }
    if (size > MAX_TEXT)
        size = MAX_TEXT;
    fuzz_fixed(in, size);
    return 0;
}
