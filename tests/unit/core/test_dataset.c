/* test_dataset.c - JSONL validation (core/dataset.c): what passes, and the
 * exact line users read for each kind of bad line (docs/data.md). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dataset.h"

static void expect_error(const char *jsonl, const char *want)
{
    struct dataset_check c;
    char msg[300];
    int rc = dataset_check_buffer(jsonl, strlen(jsonl), &c);
    if (rc == 0)
        fail_msg("accepted: %s", jsonl);
    dataset_check_error(&c, "train.jsonl", msg, sizeof msg);
    if (strcmp(msg, want) != 0)
        fail_msg("got  \"%s\"\nwant \"%s\"", msg, want);
}

static void valid_files(void **state)
{
    (void)state;
    const char *pc = "{\"prompt\":\"2+2=\",\"completion\":\" 4\"}\n"
                     "\n"
                     "{\"prompt\":\"\",\"completion\":\"x\"}\r\n";
    struct dataset_check c;
    assert_int_equal(dataset_check_buffer(pc, strlen(pc), &c), 0);
    assert_int_equal(c.examples, 2);
    assert_int_equal(c.format, DATASET_PROMPT_COMPLETION);
    assert_int_equal(c.bytes_of_text, 4 + 2 + 0 + 1);
    assert_int_equal(c.bad_line, 0);

    const char *chat = "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                       "{\"role\":\"user\",\"content\":\"Hi\"},"
                       "{\"role\":\"assistant\",\"content\":\"\"}]}";
    assert_int_equal(dataset_check_buffer(chat, strlen(chat), &c), 0);
    assert_int_equal(c.examples, 1);
    assert_int_equal(c.format, DATASET_CHAT);
    assert_int_equal(c.bytes_of_text, 9 + 2);

    char mixed[512];
    snprintf(mixed, sizeof mixed, "%s\n%s", chat, "{\"prompt\":\"a\",\"completion\":\"b\"}");
    assert_int_equal(dataset_check_buffer(mixed, strlen(mixed), &c), 0);
    assert_int_equal(c.format, DATASET_MIXED);
    /* Unknown extra fields are ignored, as hosted services do. */
    const char *extra = "{\"prompt\":\"a\",\"completion\":\"b\",\"weight\":1}";
    assert_int_equal(dataset_check_buffer(extra, strlen(extra), &c), 0);
    assert_string_equal(dataset_role_name(DATASET_ASSISTANT), "assistant");
}

static void bad_lines(void **state)
{
    (void)state;
    /* The help page's own example. */
    expect_error("{\"prompt\":\"a\",\"completion\":\"b\"}\n"
                 "{\"prompt\":\"a\",\"completion\":\"b\"}\n"
                 "{\"prompt\":\"a\"}\n",
                 "line 3 of train.jsonl: missing field \"completion\"");
    expect_error("{\"completion\":\"b\"}", "line 1 of train.jsonl: missing field \"prompt\"");
    /* Past the first example a stray value is a bad line... */
    expect_error("{\"prompt\":\"a\",\"completion\":\"b\"}\n[1,2]",
                 "line 2 of train.jsonl: not a JSON object");
    expect_error("{\"prompt\":\"a\",\"completion\":\"b\"}\n\"text\"",
                 "line 2 of train.jsonl: not a JSON object");
    /* ...on the first line, a file in another format: say what is read. */
    expect_error("[1,2]", "train.jsonl: alallo reads JSONL: one JSON object per line "
                          "(line 1 starts with '[')");
    expect_error("\"text\"", "train.jsonl: alallo reads JSONL: one JSON object per line "
                             "(line 1 starts with '\"')");
    expect_error("{\"text\":\"hello\"}",
                 "line 1 of train.jsonl: missing field \"messages\" (or \"prompt\" and \"completion\")");
    expect_error("{\"prompt\":1,\"completion\":\"b\"}",
                 "line 1 of train.jsonl: field \"prompt\" must be a string");
    expect_error("{\"prompt\":\"a\",\"completion\":null}",
                 "line 1 of train.jsonl: field \"completion\" must be a string");
    expect_error("{\"prompt\":\"a\",\"completion\":\"\"}",
                 "line 1 of train.jsonl: field \"completion\" is empty");
    expect_error("{\"messages\":{}}", "line 1 of train.jsonl: field \"messages\" must be an array");
    expect_error("{\"messages\":[]}", "line 1 of train.jsonl: field \"messages\" is empty");
    expect_error("{\"messages\":[\"hi\"]}", "line 1 of train.jsonl: message 1 is not an object");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"content\":\"b\"}]}",
                 "line 1 of train.jsonl: message 2: missing field \"role\"");
    expect_error("{\"messages\":[{\"role\":\"user\"}]}",
                 "line 1 of train.jsonl: message 1: missing field \"content\"");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":[\"a\"]}]}",
                 "line 1 of train.jsonl: message 1: field \"content\" must be a string");
    expect_error("{\"messages\":[{\"role\":7,\"content\":\"a\"}]}",
                 "line 1 of train.jsonl: message 1: field \"role\" must be a string");
    expect_error("{\"messages\":[{\"role\":\"bot\",\"content\":\"a\"}]}",
                 "line 1 of train.jsonl: message 1: unknown role \"bot\" (use system, user, assistant or tool)");
    expect_error("{\"messages\":[{\"role\":\"system\",\"content\":\"a\"}]}",
                 "line 1 of train.jsonl: no assistant message");
    expect_error("{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\"}],\"prompt\":\"x\"}",
                 "line 1 of train.jsonl: has fields of several forms (\"messages\", \"prompt\"/\"completion\", \"instruction\"/\"output\", \"conversations\"); use one form");
    expect_error("", "train.jsonl: the file has no examples");
    expect_error("\n  \n\r\n", "train.jsonl: the file has no examples");
    /* Blank lines still count in line numbers. */
    expect_error("\n\n{\"prompt\":\"a\",\"completion\":\"b\"}\n\n{oops}\n",
                 "line 5 of train.jsonl: not valid JSON (column 5: string or '}' expected near 'oops')");
    expect_error("{\"prompt\":\"a\",\"completion\":\"b\"} trailing",
                 "line 1 of train.jsonl: not valid JSON (column 40: end of file expected near 'trailing')");
}

/* Whole files in the wrong format: a JSON array (pretty-printed or on one
 * line), a CSV file, a file that starts with blank lines. */
static void wrong_format(void **state)
{
    (void)state;
    expect_error("[\n  {\"prompt\": \"a\", \"completion\": \"b\"},\n  {\"prompt\": \"c\"}\n]\n",
                 "train.jsonl: alallo reads JSONL: one JSON object per line "
                 "(line 1 starts with '[')");
    expect_error("[{\"prompt\":\"a\",\"completion\":\"b\"}]",
                 "train.jsonl: alallo reads JSONL: one JSON object per line "
                 "(line 1 starts with '[')");
    expect_error("prompt,completion\n2+2=,4\n",
                 "train.jsonl: alallo reads JSONL: one JSON object per line "
                 "(line 1 starts with 'p')");
    expect_error("\n  \n\tprompt\tcompletion\n",
                 "train.jsonl: alallo reads JSONL: one JSON object per line "
                 "(line 3 starts with 'p')");
    expect_error("\x01\x02",
                 "train.jsonl: alallo reads JSONL: one JSON object per line "
                 "(line 1 starts with byte 0x01)");
    /* A broken object on line 1 is still JSONL: the parser's words. */
    expect_error("{oops}",
                 "line 1 of train.jsonl: not valid JSON (column 5: string or '}' expected near 'oops')");
}

static void not_json_details(void **state)
{
    (void)state;
    struct dataset_check c;
    char msg[300];
    const char *bad_utf8 = "{\"prompt\":\"\xff\",\"completion\":\"b\"}";
    assert_int_equal(dataset_check_buffer(bad_utf8, strlen(bad_utf8), &c), -1);
    dataset_check_error(&c, "t.jsonl", msg, sizeof msg);
    assert_non_null(strstr(msg, "line 1 of t.jsonl: not valid JSON"));
    /* The parser quotes the broken input, here cut inside "ö": the stray
     * byte becomes '?'. */
    const char *esc = "{\"a\\\xc3\xb6t\xff\xfc\x83\"}";
    assert_int_equal(dataset_check_buffer(esc, strlen(esc), &c), -1);
    assert_string_equal(c.problem, "not valid JSON (column 5: invalid escape near '\"a\\?')");
    const char *raw = "{\"a\":\"\xc3\xb6\xff\"}";
    assert_int_equal(dataset_check_buffer(raw, strlen(raw), &c), -1);
    for (const unsigned char *p = (const unsigned char *)c.problem; *p; p++)
        assert_true(*p != 0xff);
}

/* Quoted user text is cut on a character boundary: the problem text goes
 * into JSON error bodies, which must be valid UTF-8. */
static void quoted_text_stays_utf8(void **state)
{
    (void)state;
    char line[256] = "{\"messages\":[{\"role\":\"a";
    for (int i = 0; i < 30; i++)
        strcat(line, "\xc3\xb6"); /* ö */
    strcat(line, "\",\"content\":\"x\"}]}");
    struct dataset_check c;
    assert_int_equal(dataset_check_buffer(line, strlen(line), &c), -1);
    /* "a" + 19 whole ö = 39 bytes; the 20th would end at byte 41. */
    char want[200] = "message 1: unknown role \"a";
    for (int i = 0; i < 19; i++)
        strcat(want, "\xc3\xb6");
    strcat(want, "\" (use system, user, assistant or tool)");
    assert_string_equal(c.problem, want);
}

/* Names and texts from users never break the one-line, UTF-8 error. */
static void error_line_is_clean(void **state)
{
    (void)state;
    struct dataset_check c;
    const char *bad = "{\"prompt\":\"a\"}";
    assert_int_equal(dataset_check_buffer(bad, strlen(bad), &c), -1);
    char msg[300];
    dataset_check_error(&c, "caf\xe9\n.jsonl", msg, sizeof msg); /* Latin-1 and a newline */
    assert_string_equal(msg, "line 1 of caf??.jsonl: missing field \"completion\"");
    /* A buffer too small cuts whole characters only. */
    char small[24];
    dataset_check_error(&c, "\xc3\xb6\xc3\xb6\xc3\xb6\xc3\xb6\xc3\xb6\xc3\xb6\xc3\xb6", small, sizeof small);
    assert_string_equal(small, "line 1 of \xc3\xb6\xc3\xb6\xc3\xb6\xc3\xb6\xc3\xb6\xc3\xb6");
}

static void long_line(void **state)
{
    (void)state;
    size_t n = DATASET_MAX_LINE + 100;
    char *buf = malloc(n + 1);
    memset(buf, ' ', n);
    memcpy(buf, "{\"prompt\":\"", 11);
    memcpy(buf + n - 20, "\",\"completion\":\"b\"}", 19);
    buf[n] = 0;
    char *two = malloc(n + 64);
    snprintf(two, n + 64, "{\"prompt\":\"a\",\"completion\":\"b\"}\n%s", buf);
    expect_error(two, "line 2 of train.jsonl: line is longer than 1 MiB");
    free(buf);
    free(two);
}

struct seen {
    long lines[8];
    int n;
    int stop_at;
};

/* A byte-order mark starts many files saved on Windows: skipped at the
 * start of the file (line numbers unchanged), named clearly elsewhere. */
static void byte_order_mark(void **state)
{
    (void)state;
    const char *pc = "\xEF\xBB\xBF{\"prompt\":\"2+2=\",\"completion\":\" 4\"}\n"
                     "{\"prompt\":\"1+1=\",\"completion\":\" 2\"}\n";
    struct dataset_check c;
    assert_int_equal(dataset_check_buffer(pc, strlen(pc), &c), 0);
    assert_int_equal(c.examples, 2);
    assert_int_equal(c.format, DATASET_PROMPT_COMPLETION);
    expect_error("\xEF\xBB\xBF{\"prompt\":\"a\",\"completion\":\"b\"}\n{\"prompt\":\"c\"}\n",
                 "line 2 of train.jsonl: missing field \"completion\"");
    expect_error("{\"prompt\":\"a\",\"completion\":\"b\"}\n"
                 "\xEF\xBB\xBF{\"prompt\":\"a\",\"completion\":\"b\"}\n",
                 "line 2 of train.jsonl: starts with a byte-order mark (U+FEFF), which is "
                 "allowed only at the start of the file; remove it");
    expect_error("\xEF\xBB\xBF", "train.jsonl: the file has no examples");
}

static int collect(void *ctx, long line, const struct dataset_example *ex)
{
    struct seen *s = ctx;
    if (s->n < 8)
        s->lines[s->n++] = line;
    if (ex->form == DATASET_CHAT) {
        assert_int_equal(ex->n_turns, 2);
        assert_int_equal(ex->turns[1].role, DATASET_ASSISTANT);
        assert_int_equal(ex->turns[1].len, 3);
        assert_memory_equal(ex->turns[1].text, "a\0b", 3); /* \u0000 is refused by JSON; see below */
    }
    return s->n == s->stop_at ? 7 : 0;
}

static void each_walks_examples(void **state)
{
    (void)state;
    const char *buf = "{\"prompt\":\"p\",\"completion\":\"c\"}\n\n"
                      "{\"prompt\":\"p\",\"completion\":\"c\"}\n"
                      "{\"prompt\":\"p\",\"completion\":\"c\"}\n";
    struct seen s = {.stop_at = 0};
    struct dataset_check c;
    assert_int_equal(dataset_each(buf, strlen(buf), collect, &s, &c), 0);
    assert_int_equal(s.n, 3);
    assert_int_equal(s.lines[0], 1);
    assert_int_equal(s.lines[1], 3);
    assert_int_equal(s.lines[2], 4);
    /* A callback's non-zero value stops the walk and is returned. */
    struct seen s2 = {.stop_at = 2};
    assert_int_equal(dataset_each(buf, strlen(buf), collect, &s2, &c), 7);
    assert_int_equal(s2.n, 2);
    /* NUL inside a string is not valid JSON here: content is text. */
    const char *nul = "{\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
                      "{\"role\":\"assistant\",\"content\":\"a\\u0000b\"}]}";
    assert_int_equal(dataset_each(nul, strlen(nul), collect, &s, &c), -1);
    assert_int_equal(c.bad_line, 1);
}

#define PAIR(IN, A, B)                                                                         \
    "{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"" IN "\"}]},"                 \
    "\"preferred_output\":[{\"role\":\"assistant\",\"content\":\"" A "\"}],"                 \
    "\"non_preferred_output\":[{\"role\":\"assistant\",\"content\":\"" B "\"}]}"

#define PROMPT(Q, REF)                                                                         \
    "{\"messages\":[{\"role\":\"system\",\"content\":\"Answer.\"},{\"role\":\"user\","         \
    "\"content\":\"" Q "\"}],\"reference\":\"" REF "\",\"meta\":{\"n\":1}}"

/* Prompts for reinforcement fine-tuning: chats that end with the user's
 * message, their other fields kept for the graders; a file of them holds
 * nothing else, and an unanswered chat among answered ones is refused as
 * before. */
static void reinforcement_prompts(void **state)
{
    (void)state;
    const char *ok = PROMPT("Code?", "K7") "\n" PROMPT("Again?", "Q2") "\n";
    struct dataset_check c;
    assert_int_equal(dataset_check_buffer(ok, strlen(ok), &c), 0);
    assert_int_equal(c.examples, 2);
    assert_int_equal(c.format, DATASET_REINFORCEMENT);
    assert_string_equal(dataset_format_name(c.format), "reinforcement");
    expect_error(PROMPT("a", "b") "\n{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
                 "{\"role\":\"assistant\",\"content\":\"b\"}]}",
                 "line 2 of train.jsonl: a file of prompts for reinforcement fine-tuning (chats "
                 "that end with the user's message) holds nothing else (this line has an "
                 "answer)");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
                 "{\"role\":\"assistant\",\"content\":\"b\"}]}\n" PROMPT("a", "b"),
                 "line 2 of train.jsonl: no assistant message");
    /* the last message must be the user's */
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
                 "{\"role\":\"system\",\"content\":\"b\"}]}",
                 "line 1 of train.jsonl: no assistant message");
}

/* DPO's preference pairs, in OpenAI's form: valid files, and each mistake
 * named with its line. */
static void preference_pairs(void **state)
{
    (void)state;
    const char *ok = PAIR("Hi", "Hello!", "Go away.") "\n" PAIR("2+2?", "4", "5") "\n";
    struct dataset_check c;
    assert_int_equal(dataset_check_buffer(ok, strlen(ok), &c), 0);
    assert_int_equal(c.examples, 2);
    assert_int_equal(c.format, DATASET_PREFERENCE);
    assert_string_equal(dataset_format_name(c.format), "preference");
    assert_int_equal(c.bytes_of_text, 2 + 6 + 8 + 4 + 1 + 1);
    expect_error(PAIR("a", "b", "c") "\n{\"input\":{\"messages\":[]},\"preferred_output\":[],"
                 "\"non_preferred_output\":[]}",
                 "line 2 of train.jsonl: field \"input.messages\" is empty");
    expect_error("{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]},"
                 "\"non_preferred_output\":[{\"role\":\"assistant\",\"content\":\"b\"}]}",
                 "line 1 of train.jsonl: missing field \"preferred_output\"");
    expect_error("{\"input\":{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]},"
                 "\"preferred_output\":[{\"role\":\"user\",\"content\":\"b\"}],"
                 "\"non_preferred_output\":[{\"role\":\"assistant\",\"content\":\"b\"}]}",
                 "line 1 of train.jsonl: field \"preferred_output\": the message's role must be "
                 "\"assistant\"");
    expect_error(PAIR("a", "b", ""),
                 "line 1 of train.jsonl: field \"non_preferred_output\": the message's content "
                 "is empty");
    expect_error("{\"input\":\"hi\",\"preferred_output\":[],\"non_preferred_output\":[]}",
                 "line 1 of train.jsonl: field \"input\" must be an object with \"messages\"");
    expect_error(PAIR("a", "b", "c") "\n{\"prompt\":\"a\",\"completion\":\"b\"}",
                 "line 2 of train.jsonl: a file of preference pairs holds nothing else (this "
                 "line is not a preference pair)");
    expect_error("{\"prompt\":\"a\",\"completion\":\"b\"}\n" PAIR("a", "b", "c"),
                 "line 2 of train.jsonl: a file of preference pairs holds nothing else (this "
                 "line is a preference pair)");
    expect_error("{\"messages\":[],\"input\":{}}",
                 "line 1 of train.jsonl: has both a preference pair (\"input\", "
                 "\"preferred_output\", \"non_preferred_output\") and \"messages\"; use one "
                 "form");
}

#define TOOLS "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"," \
              "\"parameters\":{\"type\":\"object\"}}}]"
#define CALL(id) "{\"id\":\"" id "\",\"type\":\"function\",\"function\":{\"name\":" \
                 "\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}"

static int tool_turns(void *ctx, long line, const struct dataset_example *ex)
{
    (void)ctx;
    (void)line;
    assert_int_equal(ex->form, DATASET_CHAT);
    assert_non_null(ex->messages);
    assert_non_null(ex->tools);
    assert_int_equal(ex->turns[1].role, DATASET_ASSISTANT);
    assert_string_equal(ex->turns[1].text,
                        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}"
                        "</tool_call>\n<tool_call>{\"name\": \"get_weather\", \"arguments\": "
                        "{\"city\":\"Paris\"}}</tool_call>");
    assert_int_equal(ex->turns[2].role, DATASET_TOOL);
    assert_string_equal(ex->turns[2].text, "21 C");
    return 0;
}

/* Reasoning: "reasoning_content" on assistant messages, or a think block
 * in the content; counted per example, an empty think block not. */
static void reasoning_examples(void **state)
{
    (void)state;
    const char *ok =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"2+2?\"},{\"role\":\"assistant\","
        "\"reasoning_content\":\"Add.\",\"content\":\"4\"},{\"role\":\"user\",\"content\":"
        "\"3+3?\"},{\"role\":\"assistant\",\"content\":\"<think>\\nAdd.\\n</think>\\n\\n6\"}]}\n"
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\","
        "\"content\":\"<think>\\n\\n</think>\\n\\nHello\"}]}\n"
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\","
        "\"reasoning_content\":null,\"content\":\"Hello\"}]}\n"
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\","
        "\"reasoning_content\":\"Greet back.\",\"content\":\"Hello\"}]}\n";
    struct dataset_check c;
    assert_int_equal(dataset_check_buffer(ok, strlen(ok), &c), 0);
    assert_int_equal(c.examples, 4);
    assert_int_equal(c.reasoning_examples, 2);
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"reasoning_content\":"
                 "\"x\"},{\"role\":\"assistant\",\"content\":\"b\"}]}",
                 "line 1 of train.jsonl: message 1: only assistant messages have "
                 "\"reasoning_content\"");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\","
                 "\"content\":\"b\",\"reasoning_content\":[\"x\"]}]}",
                 "line 1 of train.jsonl: message 2: field \"reasoning_content\" must be a string or "
                 "null");
}

static void tool_calls(void **state)
{
    (void)state;
    const char *ok = "{" TOOLS ",\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},"
                     "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[" CALL("c1") ","
                     CALL("c2") "]},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"21 C\"},"
                     "{\"role\":\"tool\",\"tool_call_id\":\"c2\",\"content\":\"21 C\"},"
                     "{\"role\":\"assistant\",\"content\":\"Warm.\"}]}\n";
    struct dataset_check c;
    assert_int_equal(dataset_each(ok, strlen(ok), tool_turns, NULL, &c), 0);
    assert_int_equal(c.tool_examples, 1);

    expect_error("{\"parallel_tool_calls\":false,\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
                 "{\"role\":\"assistant\",\"tool_calls\":[" CALL("c1") "," CALL("c2") "]}]}",
                 "line 1 of train.jsonl: message 2: 2 tool calls in one message, but "
                 "\"parallel_tool_calls\" is false");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\","
                 "\"tool_calls\":[{\"id\":\"c1\",\"function\":{\"name\":\"f\",\"arguments\":\"{x\"}}]}]}",
                 "line 1 of train.jsonl: message 2: tool call 1: \"arguments\" is not a JSON object");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\","
                 "\"tool_calls\":[{\"id\":\"c1\",\"function\":{\"name\":\"f\",\"arguments\":{}}}]}]}",
                 "line 1 of train.jsonl: message 2: tool call 1: \"arguments\" must be a string of "
                 "JSON (as OpenAI writes it)");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\","
                 "\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]}",
                 "line 1 of train.jsonl: message 2: tool call 1 needs an \"id\" string");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"tool\","
                 "\"tool_call_id\":\"zz\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":\"b\"}]}",
                 "line 1 of train.jsonl: message 2: \"tool_call_id\" \"zz\" answers no earlier tool call");
    expect_error("{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"tool_calls\":[" CALL("c") "]},"
                 "{\"role\":\"assistant\",\"content\":\"b\"}]}",
                 "line 1 of train.jsonl: message 1: only assistant messages have \"tool_calls\"");
    expect_error("{\"tools\":[{\"type\":\"function\"}],\"messages\":[{\"role\":\"assistant\","
                 "\"content\":\"b\"}]}",
                 "line 1 of train.jsonl: tool 1 must be {\"type\": \"function\", \"function\": "
                 "{\"name\": ..., \"parameters\": {...}}}");
    expect_error("{\"parallel_tool_calls\":1,\"messages\":[{\"role\":\"assistant\",\"content\":\"b\"}]}",
                 "line 1 of train.jsonl: field \"parallel_tool_calls\" must be true or false");
}

static void alpaca_and_sharegpt(void **state)
{
    (void)state;
    const char *in = "{\"instruction\":\"Add\",\"input\":\"2 and 2\",\"output\":\"4\"}\n"
                     "\n"
                     "{\"conversations\":[{\"from\":\"system\",\"value\":\"Be brief.\"},"
                     "{\"from\":\"human\",\"value\":\"Hi\"},{\"from\":\"gpt\",\"value\":\"Hello\"}]}\n"
                     "{\"instruction\":\"Say hi\",\"input\":\"\",\"output\":\"hi\",\"system\":\"S\"}\n"
                     "{\"prompt\":\"p\",\"completion\":\"c\"}";
    char *out;
    size_t n;
    struct dataset_check c;
    assert_int_equal(dataset_convert(in, strlen(in), &out, &n, &c), 0);
    assert_int_equal(c.examples, 4);
    assert_int_equal(c.alpaca, 2);
    assert_int_equal(c.sharegpt, 1);
    assert_string_equal(dataset_check_converted_from(&c), "alpaca+sharegpt");
    assert_string_equal(
        out,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"Add\\n\\n2 and 2\"},"
        "{\"role\":\"assistant\",\"content\":\"4\"}]}\n"
        "\n"
        "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\","
        "\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Hello\"}]}\n"
        "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":"
        "\"Say hi\"},{\"role\":\"assistant\",\"content\":\"hi\"}]}\n"
        "{\"prompt\":\"p\",\"completion\":\"c\"}\n");
    /* the converted file checks as chat, with nothing left to convert */
    struct dataset_check c2;
    assert_int_equal(dataset_check_buffer(out, n, &c2), 0);
    assert_null(dataset_check_converted_from(&c2));
    assert_int_equal(c2.examples, 4);
    free(out);

    expect_error("{\"instruction\":\"a\"}", "line 1 of train.jsonl: Alpaca form: field \"output\" must be a string");
    expect_error("{\"instruction\":\"a\",\"output\":\"b\",\"input\":3}",
                 "line 1 of train.jsonl: Alpaca form: field \"input\" must be a string");
    expect_error("{\"conversations\":[{\"from\":\"bot\",\"value\":\"x\"}]}",
                 "line 1 of train.jsonl: ShareGPT form: turn 1: unknown speaker \"bot\" (use "
                 "system, human or gpt)");
    expect_error("{\"conversations\":[{\"from\":\"system\",\"value\":\"x\"}]}",
                 "line 1 of train.jsonl: no assistant message");
    expect_error("{\"conversations\":{}}",
                 "line 1 of train.jsonl: ShareGPT form: field \"conversations\" must be an array");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(valid_files),      cmocka_unit_test(bad_lines),
        cmocka_unit_test(wrong_format),
        cmocka_unit_test(not_json_details), cmocka_unit_test(long_line),
        cmocka_unit_test(quoted_text_stays_utf8),
        cmocka_unit_test(error_line_is_clean),
        cmocka_unit_test(each_walks_examples),
        cmocka_unit_test(byte_order_mark),
        cmocka_unit_test(preference_pairs),
        cmocka_unit_test(reinforcement_prompts),
        cmocka_unit_test(tool_calls),
        cmocka_unit_test(reasoning_examples),
        cmocka_unit_test(alpaca_and_sharegpt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
