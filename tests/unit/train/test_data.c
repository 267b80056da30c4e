/* test_data.c - the text template, loss masks, truncation rule and error
 * lines of train/data/data.c, with a byte tokenizer (id = byte value, 256 =
 * <|endoftext|> as BOS and EOS) so expected ids can be written by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/tokenizer/chat_format.h"
#include "train/data/data.h"

static struct tokenizer *tok;
static char dir[64];

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

static int setup(void **state)
{
    (void)state;
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char s[4];
        byte_char_utf8(b, s);
        json_object_set_new(vocab, s, json_integer(b));
    }
    json_t *root = json_pack("{s:[{s:i,s:s,s:b}], s:{s:s,s:b,s:b}, s:{s:s}, s:{s:s,s:o,s:[]}}",
                             "added_tokens", "id", 256, "content", "<|endoftext|>", "special", 1,
                             "pre_tokenizer", "type", "ByteLevel", "add_prefix_space", 0,
                             "use_regex", 1, "decoder", "type", "ByteLevel", "model", "type",
                             "BPE", "vocab", vocab, "merges");
    char *s = json_dumps(root, 0);
    json_decref(root);
    char err[200];
    tok = tokenizer_load_json(s, strlen(s), err, sizeof err);
    free(s);
    snprintf(dir, sizeof dir, "/tmp/alallo-data-XXXXXX");
    return tok && mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tokenizer_free(tok);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

static const char *write_file(const char *name, const char *content)
{
    static char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    fputs(content, f);
    fclose(f);
    return path;
}

/* Appends the bytes of s as ids with mask m. */
static size_t put(int32_t *ids, uint8_t *mask, size_t n, const char *s, uint8_t m)
{
    for (; *s; s++) {
        ids[n] = (unsigned char)*s;
        mask[n++] = m;
    }
    return n;
}

static void expect_example(const struct example *e, const int32_t *ids, const uint8_t *mask,
                           size_t n)
{
    if (e->len != n)
        fail_msg("length %zu, want %zu", e->len, n);
    for (size_t i = 0; i < n; i++) {
        if (e->ids[i] != ids[i])
            fail_msg("id %zu is %d, want %d", i, e->ids[i], ids[i]);
        if (e->mask[i] != mask[i])
            fail_msg("mask %zu is %d, want %d", i, e->mask[i], mask[i]);
    }
}

static void prompt_completion_template(void **state)
{
    (void)state;
    const char *p = write_file("pc.jsonl", "{\"prompt\":\"ab\",\"completion\":\"cd\"}\n"
                                           "{\"prompt\":\"\",\"completion\":\"z\"}\n");
    char err[256];
    struct dataset *d = dataset_load(p, "pc.jsonl", tok, 64, err, sizeof err);
    assert_non_null(d);
    assert_int_equal(d->n, 2);
    expect_example(&d->ex[0], (int32_t[]){256, 'a', 'b', 'c', 'd', 256},
                   (uint8_t[]){0, 0, 0, 1, 1, 1}, 6);
    expect_example(&d->ex[1], (int32_t[]){256, 'z', 256}, (uint8_t[]){0, 1, 1}, 3);
    assert_int_equal(d->n_tokens, 9);
    assert_int_equal(d->n_truncated, 0);
    dataset_free(d);
    dataset_free(NULL);
}

static void chat_template(void **state)
{
    (void)state;
    const char *p = write_file(
        "chat.jsonl",
        "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U\"},"
        "{\"role\":\"assistant\",\"content\":\"A\"},{\"role\":\"user\",\"content\":\"V\"},"
        "{\"role\":\"assistant\",\"content\":\"B\"}]}\n");
    char err[256];
    struct dataset *d = dataset_load(p, "chat.jsonl", tok, 256, err, sizeof err);
    assert_non_null(d);
    int32_t ids[128];
    uint8_t mask[128];
    size_t n = 0;
    ids[n] = 256;
    mask[n++] = 0;
    n = put(ids, mask, n, "System:\nS\n\nUser:\nU\n\nAssistant:\n", 0);
    n = put(ids, mask, n, "A", 1);
    ids[n] = 256;
    mask[n++] = 1;
    n = put(ids, mask, n, "\n\nUser:\nV\n\nAssistant:\n", 0);
    n = put(ids, mask, n, "B", 1);
    ids[n] = 256;
    mask[n++] = 1;
    expect_example(&d->ex[0], ids, mask, n);
    dataset_free(d);

    /* Generation formats a conversation the same way, ending with the header. */
    struct dataset_turn turns[] = {{DATASET_USER, "U", 1}};
    int32_t *g;
    size_t gn;
    assert_int_equal(data_encode_chat(tok, turns, 1, &g, &gn), 0);
    size_t k = 0;
    ids[k] = 256;
    mask[k++] = 0;
    k = put(ids, mask, k, "User:\nU\n\nAssistant:\n", 0);
    assert_int_equal(gn, k);
    assert_memory_equal(g, ids, k * sizeof *g);
    free(g);
}

static void truncation_rule(void **state)
{
    (void)state;
    const char *p = write_file("long.jsonl",
                               "{\"prompt\":\"abcdefghijklmnopqrst\",\"completion\":\"ABCDEFGHIJKLMNOPQRST\"}\n"
                               "{\"prompt\":\"abcdefghijklmnopqrst\",\"completion\":\"x\"}\n"
                               "{\"prompt\":\"ab\",\"completion\":\"ABCDEFGHIJKLMNOPQRST\"}\n"
                               "{\"prompt\":\"ab\",\"completion\":\"ABCD\"}\n");
    char err[256];
    struct dataset *d = dataset_load(p, "long.jsonl", tok, 10, err, sizeof err);
    assert_non_null(d);
    assert_int_equal(d->n, 4);
    assert_int_equal(d->n_truncated, 3);
    /* Both long: BOS, the prompt's last 4 tokens (half of the 9 after BOS,
     * rounded down), the completion's first 5; no EOS, the answer was cut. */
    expect_example(&d->ex[0], (int32_t[]){256, 'q', 'r', 's', 't', 'A', 'B', 'C', 'D', 'E'},
                   (uint8_t[]){0, 0, 0, 0, 0, 1, 1, 1, 1, 1}, 10);
    /* Short completion: it keeps everything; the prompt gets the rest. */
    expect_example(&d->ex[1], (int32_t[]){256, 'n', 'o', 'p', 'q', 'r', 's', 't', 'x', 256},
                   (uint8_t[]){0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, 10);
    /* Short prompt: kept whole; the completion fills the rest. */
    expect_example(&d->ex[2], (int32_t[]){256, 'a', 'b', 'A', 'B', 'C', 'D', 'E', 'F', 'G'},
                   (uint8_t[]){0, 0, 0, 1, 1, 1, 1, 1, 1, 1}, 10);
    /* Exactly the context: untouched. */
    expect_example(&d->ex[3], (int32_t[]){256, 'a', 'b', 'A', 'B', 'C', 'D', 256},
                   (uint8_t[]){0, 0, 0, 1, 1, 1, 1, 1}, 8);
    for (size_t i = 0; i < d->n; i++)
        assert_true(d->ex[i].len <= 10);
    dataset_free(d);

    /* A chat whose first answer starts late keeps the end of the question. */
    p = write_file("longchat.jsonl",
                   "{\"messages\":[{\"role\":\"user\",\"content\":\"0123456789\"},"
                   "{\"role\":\"assistant\",\"content\":\"ok\"}]}\n");
    d = dataset_load(p, "longchat.jsonl", tok, 12, err, sizeof err);
    assert_non_null(d);
    assert_int_equal(d->n_truncated, 1);
    /* 11 after BOS: answer "ok"+EOS (3) whole, then 8 of the text before it:
     * "9\n\nAssistant:\n" ends with these 8 bytes: "sistant:\n"[1..]. */
    int32_t want[12];
    uint8_t wmask[12];
    size_t n = 0;
    want[n] = 256;
    wmask[n++] = 0;
    n = put(want, wmask, n, "istant:\n", 0);
    n = put(want, wmask, n, "ok", 1);
    want[n] = 256;
    wmask[n++] = 1;
    expect_example(&d->ex[0], want, wmask, n);
    dataset_free(d);
}

static void error_lines(void **state)
{
    (void)state;
    char err[256];
    const char *p = write_file("bad.jsonl", "{\"prompt\":\"a\",\"completion\":\"b\"}\n"
                                            "{\"prompt\":\"a\",\"completion\":\"b\"}\n"
                                            "{\"prompt\":\"a\"}\n");
    assert_null(dataset_load(p, "train.jsonl", tok, 64, err, sizeof err));
    assert_string_equal(err, "line 3 of train.jsonl: missing field \"completion\"");
    p = write_file("empty.jsonl", "");
    assert_null(dataset_load(p, "train.jsonl", tok, 64, err, sizeof err));
    assert_string_equal(err, "train.jsonl: the file has no examples");
    assert_null(dataset_load("/nonexistent/x.jsonl", "train.jsonl", tok, 64, err, sizeof err));
    assert_string_equal(err, "train.jsonl: cannot read (No such file or directory)");
    p = write_file("ok.jsonl", "{\"prompt\":\"a\",\"completion\":\"b\"}\n");
    assert_null(dataset_load(p, "train.jsonl", tok, 2, err, sizeof err));
    assert_non_null(strstr(err, "too short"));
}

static void prompt_for_generation(void **state)
{
    (void)state;
    int32_t *ids;
    size_t n;
    assert_int_equal(data_encode_prompt(tok, "hi", &ids, &n), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 256);
    assert_int_equal(ids[1], 'h');
    assert_int_equal(ids[2], 'i');
    free(ids);
    assert_int_equal(data_encode_prompt(tok, "", &ids, &n), 0);
    assert_int_equal(n, 1);
    free(ids);
}

/* A model's own chat template (train/tokenizer/chat_format.c): the ids are the text
 * Jinja2 renders (the fixtures of test_chat_template.c, bytes here) and the
 * loss falls exactly on the assistant turns as the template writes them. */
static struct chat_format *format_of(const char *fixture, const char *bos, const char *eos)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tests/unit/train/chat_templates/%s.jinja", ALALLO_SOURCE_DIR,
             fixture);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char src[8192];
    size_t n = fread(src, 1, sizeof src - 1, f);
    fclose(f);
    src[n] = '\0';
    json_t *cfg = json_pack("{s:s,s:s,s:{s:s}}", "chat_template", src, "bos_token", bos,
                            "eos_token", "content", eos);
    char *text = json_dumps(cfg, 0);
    char err[300];
    struct chat_format *fmt = chat_format_from_config(text, strlen(text), err, sizeof err);
    if (!fmt)
        fail_msg("%s", err);
    free(text);
    json_decref(cfg);
    return fmt;
}

static void expect_template_example(const struct example *e, const char *fixture_txt,
                                    const char *targets)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tests/unit/train/chat_templates/%s", ALALLO_SOURCE_DIR,
             fixture_txt);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char want[8192];
    size_t n = fread(want, 1, sizeof want - 1, f);
    fclose(f);
    want[n] = '\0';
    static char all[8192], masked[8192];
    size_t a = 0, m = 0;
    for (size_t i = 0; i < e->len && a < sizeof all - 1; i++) {
        all[a++] = (char)e->ids[i];
        if (e->mask[i])
            masked[m++] = (char)e->ids[i];
    }
    all[a] = masked[m] = '\0';
    assert_string_equal(all, want);
    assert_string_equal(masked, targets);
}

#define CONV_CHAT                                                                                  \
    "{\"messages\":[{\"role\":\"system\",\"content\":\"Answer briefly.\"},{\"role\":\"user\","    \
    "\"content\":\"Capital of France?\"},{\"role\":\"assistant\",\"content\":\" Paris. \"},"     \
    "{\"role\":\"user\",\"content\":\"And of Italy, \\\"please\\\"?\\n\"},{\"role\":\"assistant\"," \
    "\"content\":\"Rome — Roma.\"}]}\n"

/* The chat data set of file `path` (named `name`) laid out by fmt; fails
 * the test with the reason when it does not load. */
static struct dataset *load_with(const char *path, const char *name,
                                 const struct chat_format *fmt)
{
    char err[300];
    struct dataset *d = dataset_load_chat(path, name, tok, fmt, NULL, 4096, err, sizeof err);
    if (!d)
        fail_msg("%s", err);
    return d;
}

static void model_chat_templates(void **state)
{
    (void)state;
    const char *p = write_file("tpl.jsonl", CONV_CHAT);
    char err[300];
    struct chat_format *fmt = format_of("qwen2.5", "<s>", "</s>");
    struct dataset *d = load_with(p, "tpl.jsonl", fmt);
    expect_template_example(&d->ex[0], "qwen2.5.chat.txt",
                            " Paris. <|im_end|>\nRome — Roma.<|im_end|>\n");
    dataset_free(d);
    chat_format_free(fmt);

    /* Phi-4-mini: <|role|>content<|end|> turns, eos_token after the last;
     * an assistant turn trains its content and its <|end|> */
    fmt = format_of("phi4-mini", "<s>", "</s>");
    d = load_with(p, "tpl.jsonl", fmt);
    expect_template_example(&d->ex[0], "phi4-mini.chat.txt",
                            " Paris. <|end|>Rome — Roma.<|end|></s>");
    dataset_free(d);
    chat_format_free(fmt);

    /* Mistral writes the system message only into the last user message:
     * the turns are found from their content. */
    fmt = format_of("mistral-v0.3", "<s>", "</s>");
    d = load_with(p, "tpl.jsonl", fmt);
    expect_template_example(&d->ex[0], "mistral-v0.3.chat.txt", "Paris.</s>Rome — Roma.</s>");
    dataset_free(d);

    /* Tool calls go through the template too (arguments as an object). */
    p = write_file("tools.jsonl",
                   "{\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                   "\"parameters\":{\"type\":\"object\"}}}],\"messages\":[{\"role\":\"user\","
                   "\"content\":\"Weather?\"},{\"role\":\"assistant\",\"tool_calls\":[{\"id\":"
                   "\"call12345\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                   "\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},{\"role\":\"tool\","
                   "\"tool_call_id\":\"call12345\",\"content\":\"21\"},{\"role\":\"assistant\","
                   "\"content\":\"Warm.\"}]}\n");
    d = load_with(p, "tools.jsonl", fmt);
    size_t m = 0;
    char masked[512];
    for (size_t i = 0; i < d->ex[0].len; i++)
        if (d->ex[0].mask[i])
            masked[m++] = (char)d->ex[0].ids[i];
    masked[m] = '\0';
    assert_string_equal(masked, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": "
                                "{\"city\": \"Paris\"}, \"id\": \"call12345\"}]</s> Warm.</s>");
    dataset_free(d);
    chat_format_free(fmt);

    /* Qwen3 writes an empty think block into the last turn and drops the
     * reasoning of turns before the last query: the loss falls on the turns
     * as the whole conversation's text holds them. */
    fmt = format_of("qwen3", "<s>", "<|im_end|>");
    p = write_file("tpl.jsonl", CONV_CHAT);
    d = load_with(p, "tpl.jsonl", fmt);
    expect_template_example(&d->ex[0], "qwen3.chat.txt",
                            " Paris. <|im_end|>\n<think>\n\n</think>\n\nRome — Roma.<|im_end|>\n");
    dataset_free(d);
    p = write_file("think.jsonl",
                   "{\"messages\":[{\"role\":\"system\",\"content\":\"Think first.\"},"
                   "{\"role\":\"user\",\"content\":\"What is 2+2?\"},{\"role\":\"assistant\","
                   "\"content\":\"<think>\\nAdd them.\\n</think>\\n\\nIt is 4.\"},{\"role\":"
                   "\"user\",\"content\":\"And 3+3?\"},{\"role\":\"assistant\",\"reasoning_content\":"
                   "\"\\nThree and three.\\n\",\"content\":\"\\n6.\"}]}\n");
    d = load_with(p, "think.jsonl", fmt);
    expect_template_example(&d->ex[0], "qwen3.think.txt",
                            "It is 4.<|im_end|>\n<think>\nThree and three.\n</think>\n\n6.<|im_end|>\n");
    dataset_free(d);
    chat_format_free(fmt);

    /* A conversation the template refuses names the line and the reason. */
    fmt = format_of("gemma2", "<bos>", "<eos>");
    p = write_file("tpl.jsonl", "\n" CONV_CHAT);
    assert_null(dataset_load_chat(p, "train.jsonl", tok, fmt, NULL, 4096, err, sizeof err));
    assert_string_equal(err, "line 2 of train.jsonl: the chat template refused: System role not "
                             "supported");
    chat_format_free(fmt);

    /* A template alallo cannot read fails chat lines, not prompt/completion ones. */
    const char *why = "chat template line 1: unsupported statement \"include\"";
    assert_null(dataset_load_chat(p, "train.jsonl", tok, NULL, why, 4096, err, sizeof err));
    assert_string_equal(err, "line 2 of train.jsonl: the model's chat template cannot be used: "
                             "chat template line 1: unsupported statement \"include\"");
    p = write_file("pc.jsonl", "{\"prompt\":\"a\",\"completion\":\"b\"}\n");
    struct dataset *pc = dataset_load_chat(p, "pc.jsonl", tok, NULL, why, 64, err, sizeof err);
    assert_non_null(pc);
    dataset_free(pc);
}

/* A preference pair's two examples go through the model's template as a
 * chat line would: the input's messages, then one answer, the loss on it. */
static void preference_pair_template(void **state)
{
    (void)state;
    const char *p = write_file(
        "pref.jsonl",
        "{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"Capital of France?\"}]},"
        "\"preferred_output\":[{\"role\":\"assistant\",\"content\":\"Paris.\"}],"
        "\"non_preferred_output\":[{\"role\":\"assistant\",\"content\":\"Lyon.\"}]}\n");
    char err[300];
    struct chat_format *fmt = format_of("qwen2.5", "<s>", "</s>");
    struct dataset *d = dataset_load_chat(p, "pref.jsonl", tok, fmt, NULL, 4096, err, sizeof err);
    if (!d)
        fail_msg("%s", err);
    assert_int_equal(d->n, 2);
    assert_int_equal(d->pairs, 1);
    const char *want[2] = {"Paris.<|im_end|>\n", "Lyon.<|im_end|>\n"};
    for (int k = 0; k < 2; k++) {
        char all[2048], masked[256];
        size_t a = 0, m = 0;
        for (size_t i = 0; i < d->ex[k].len && a < sizeof all - 1; i++) {
            all[a++] = (char)d->ex[k].ids[i];
            if (d->ex[k].mask[i] && m < sizeof masked - 1)
                masked[m++] = (char)d->ex[k].ids[i];
        }
        all[a] = masked[m] = '\0';
        assert_string_equal(masked, want[k]);
        assert_non_null(strstr(all, "<|im_start|>user\nCapital of France?<|im_end|>\n"));
    }
    dataset_free(d);
    chat_format_free(fmt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(prompt_completion_template), cmocka_unit_test(chat_template),
        cmocka_unit_test(truncation_rule),            cmocka_unit_test(error_lines),
        cmocka_unit_test(prompt_for_generation),
        cmocka_unit_test(model_chat_templates),
        cmocka_unit_test(preference_pair_template),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
