/* dataset.c - line-by-line validation of JSONL data sets (dataset.h).
 *
 * The API checks an upload with dataset_check_buffer and the trainer walks
 * the same code through dataset_each, so a bad line gets the same words at
 * upload and at training time. Every problem text here is listed in
 * docs/data.md; change both together.
 */
#include "core/dataset.h"
#include "core/text.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BOM "\xEF\xBB\xBF" /* U+FEFF in UTF-8 */
#define MAX_TURNS 4096 /* messages in one example; a 1 MiB line allows no more anyway */

static const char *const role_names[] = {"system", "user", "assistant"};

const char *dataset_role_name(enum dataset_role r)
{
    return (unsigned)r <= DATASET_ASSISTANT ? role_names[r] : "?";
}


static void problem(struct dataset_check *c, long line, const char *fmt, ...)
{
    c->bad_line = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->problem, sizeof c->problem, fmt, ap);
    va_end(ap);
    text_one_line(c->problem);
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return 0;
    return 1;
}

/* Checks one message of a chat example; fills *turn on success. */
static int check_message(json_t *m, size_t idx, long line, struct dataset_turn *turn,
                         struct dataset_check *c)
{
    size_t k = idx + 1; /* people count messages from 1 */
    if (!json_is_object(m)) {
        problem(c, line, "message %zu is not an object", k);
        return -1;
    }
    json_t *role = json_object_get(m, "role");
    json_t *content = json_object_get(m, "content");
    if (!role) {
        problem(c, line, "message %zu: missing field \"role\"", k);
        return -1;
    }
    if (!json_is_string(role)) {
        problem(c, line, "message %zu: field \"role\" must be a string", k);
        return -1;
    }
    const char *r = json_string_value(role);
    int ri = -1;
    for (int i = 0; i <= DATASET_ASSISTANT; i++)
        if (strcmp(r, role_names[i]) == 0)
            ri = i;
    if (ri < 0) {
        problem(c, line, "message %zu: unknown role \"%.*s\" (use system, user or assistant)", k,
                text_utf8_prefix(r, 40), r);
        return -1;
    }
    if (!content) {
        problem(c, line, "message %zu: missing field \"content\"", k);
        return -1;
    }
    if (!json_is_string(content)) {
        problem(c, line, "message %zu: field \"content\" must be a string", k);
        return -1;
    }
    turn->role = (enum dataset_role)ri;
    turn->text = json_string_value(content);
    turn->len = json_string_length(content);
    return 0;
}

const char *dataset_format_name(enum dataset_format f)
{
    switch (f) {
    case DATASET_CHAT:
        return "chat";
    case DATASET_PROMPT_COMPLETION:
        return "prompt-completion";
    case DATASET_MIXED:
        return "mixed";
    case DATASET_PREFERENCE:
        return "preference";
    case DATASET_EMPTY:
        break;
    }
    return "";
}

/* One output of a preference pair: an array of one assistant message with
 * non-empty content. */
static int check_output(json_t *obj, const char *key, long line, const char **text,
                        size_t *len, struct dataset_check *c)
{
    json_t *o = json_object_get(obj, key);
    if (!o) {
        problem(c, line, "missing field \"%s\"", key);
        return -1;
    }
    json_t *m = json_array_get(o, 0);
    struct dataset_turn t;
    if (!json_is_array(o) || json_array_size(o) != 1) {
        problem(c, line, "field \"%s\" must be an array of one assistant message", key);
        return -1;
    }
    if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")) ||
        strcmp(json_string_value(json_object_get(m, "role")), "assistant") != 0) {
        problem(c, line, "field \"%s\": the message's role must be \"assistant\"", key);
        return -1;
    }
    if (check_message(m, 0, line, &t, c) < 0)
        return -1;
    if (t.len == 0) {
        problem(c, line, "field \"%s\": the message's content is empty", key);
        return -1;
    }
    *text = t.text;
    *len = t.len;
    c->bytes_of_text += (long)t.len;
    return 0;
}

static int check_messages(json_t *msgs, const char *field, long line, int need_assistant,
                          struct dataset_turn *turns, size_t *n_out, struct dataset_check *c);

static int check_pref(json_t *obj, long line, struct dataset_turn *turns,
                      struct dataset_example *ex, struct dataset_check *c)
{
    json_t *in = json_object_get(obj, "input");
    if (!in) {
        problem(c, line, "missing field \"input\"");
        return -1;
    }
    if (!json_is_object(in) || !json_object_get(in, "messages")) {
        problem(c, line, "field \"input\" must be an object with \"messages\"");
        return -1;
    }
    if (check_messages(json_object_get(in, "messages"), "input.messages", line, 0, turns,
                       &ex->n_turns, c) < 0 ||
        check_output(obj, "preferred_output", line, &ex->preferred, &ex->preferred_len, c) < 0 ||
        check_output(obj, "non_preferred_output", line, &ex->non_preferred,
                     &ex->non_preferred_len, c) < 0)
        return -1;
    ex->form = DATASET_PREFERENCE;
    ex->turns = turns;
    return 0;
}

static int check_chat(json_t *msgs, long line, struct dataset_turn *turns,
                      struct dataset_example *ex, struct dataset_check *c)
{
    size_t n;
    if (check_messages(msgs, "messages", line, 1, turns, &n, c) < 0)
        return -1;
    ex->form = DATASET_CHAT;
    ex->turns = turns;
    ex->n_turns = n;
    return 0;
}

/* A message array named `field`: non-empty, each message valid, and (when
 * need_assistant) one from the assistant at least. */
static int check_messages(json_t *msgs, const char *field, long line, int need_assistant,
                          struct dataset_turn *turns, size_t *n_out, struct dataset_check *c)
{
    if (!json_is_array(msgs)) {
        problem(c, line, "field \"%s\" must be an array", field);
        return -1;
    }
    size_t n = json_array_size(msgs);
    if (n == 0) {
        problem(c, line, "field \"%s\" is empty", field);
        return -1;
    }
    if (n > MAX_TURNS) {
        problem(c, line, "more than %d messages", MAX_TURNS);
        return -1;
    }
    int assistant = 0;
    for (size_t i = 0; i < n; i++) {
        if (check_message(json_array_get(msgs, i), i, line, &turns[i], c) < 0)
            return -1;
        if (turns[i].role == DATASET_ASSISTANT)
            assistant = 1;
        c->bytes_of_text += (long)turns[i].len;
    }
    if (!assistant && need_assistant) {
        problem(c, line, "no assistant message");
        return -1;
    }
    *n_out = n;
    return 0;
}

static int check_pc(json_t *obj, long line, struct dataset_example *ex, struct dataset_check *c)
{
    json_t *p = json_object_get(obj, "prompt");
    json_t *comp = json_object_get(obj, "completion");
    if (!p) {
        problem(c, line, "missing field \"prompt\"");
        return -1;
    }
    if (!comp) {
        problem(c, line, "missing field \"completion\"");
        return -1;
    }
    if (!json_is_string(p)) {
        problem(c, line, "field \"prompt\" must be a string");
        return -1;
    }
    if (!json_is_string(comp)) {
        problem(c, line, "field \"completion\" must be a string");
        return -1;
    }
    if (json_string_length(comp) == 0) {
        problem(c, line, "field \"completion\" is empty");
        return -1;
    }
    ex->form = DATASET_PROMPT_COMPLETION;
    ex->prompt = json_string_value(p);
    ex->prompt_len = json_string_length(p);
    ex->completion = json_string_value(comp);
    ex->completion_len = json_string_length(comp);
    c->bytes_of_text += (long)(ex->prompt_len + ex->completion_len);
    return 0;
}

/* The first character of a line that is not blank (n > 0). */
static char first_char(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t'))
        i++;
    return i < n ? s[i] : '\0';
}

/* A first line that is no JSON object means the file is in another format.
 * The problem carries no line number (the message names line 1 itself), so
 * dataset_check_error writes "NAME: alallo reads JSONL: ...". */
static void wrong_format(struct dataset_check *c, long line, const char *s, size_t n)
{
    unsigned char ch = (unsigned char)first_char(s, n);
    char shown[16];
    if (ch >= 0x20 && ch < 0x7f)
        snprintf(shown, sizeof shown, "'%c'", ch);
    else
        snprintf(shown, sizeof shown, "byte 0x%02X", ch);
    problem(c, 0, "alallo reads JSONL: one JSON object per line (line %ld starts with %s)", line,
            shown);
}

/* Checks one non-blank line; on success calls fn. */
static int check_line(const char *s, size_t n, long line, struct dataset_turn *turns,
                      dataset_example_fn fn, void *ctx, struct dataset_check *c)
{
    if (n > DATASET_MAX_LINE) {
        problem(c, line, "line is longer than 1 MiB");
        return -1;
    }
    json_error_t jerr;
    if (n >= 3 && memcmp(s, BOM, 3) == 0) {
        problem(c, line, "starts with a byte-order mark (U+FEFF), which is allowed only at the "
                         "start of the file; remove it");
        return -1;
    }
    json_t *obj = json_loadb(s, n, JSON_DECODE_ANY, &jerr);
    if (!json_is_object(obj) && c->examples == 0 && first_char(s, n) != '{') {
        /* The first line is not even the start of an object: a JSON array,
         * a CSV file, plain text. The parser's words would not say why. */
        wrong_format(c, line, s, n);
        json_decref(obj);
        return -1;
    }
    if (!obj) {
        problem(c, line, "not valid JSON (column %d: %s)", jerr.column, jerr.text);
        return -1;
    }
    int rc = -1;
    struct dataset_example ex = {0};
    if (!json_is_object(obj)) {
        problem(c, line, "not a JSON object");
        goto out;
    }
    json_t *msgs = json_object_get(obj, "messages");
    int has_pc = json_object_get(obj, "prompt") || json_object_get(obj, "completion");
    int has_pref = json_object_get(obj, "input") || json_object_get(obj, "preferred_output") ||
                   json_object_get(obj, "non_preferred_output");
    if (has_pref && (msgs || has_pc)) {
        problem(c, line, "has both a preference pair (\"input\", \"preferred_output\", "
                         "\"non_preferred_output\") and \"%s\"; use one form",
                msgs ? "messages" : "prompt");
        goto out;
    }
    if (has_pref) {
        if (check_pref(obj, line, turns, &ex, c) < 0)
            goto out;
    } else if (msgs && has_pc) {
        problem(c, line, "has both \"messages\" and \"prompt\"/\"completion\"; use one form");
        goto out;
    } else if (!msgs && !has_pc) {
        problem(c, line, "missing field \"messages\" (or \"prompt\" and \"completion\")");
        goto out;
    } else if ((msgs ? check_chat(msgs, line, turns, &ex, c) : check_pc(obj, line, &ex, c)) < 0) {
        goto out;
    }
    enum dataset_format f = ex.form;
    if (c->format != DATASET_EMPTY &&
        (c->format == DATASET_PREFERENCE) != (f == DATASET_PREFERENCE)) {
        problem(c, line, "a file of preference pairs holds nothing else (this line is %s)",
                f == DATASET_PREFERENCE ? "a preference pair" : "not a preference pair");
        goto out;
    }
    if (c->format == DATASET_EMPTY)
        c->format = f;
    else if (c->format != f)
        c->format = DATASET_MIXED;
    c->examples++;
    rc = fn ? fn(ctx, line, &ex) : 0;
out:
    json_decref(obj);
    return rc;
}

int dataset_each(const char *buf, size_t len, dataset_example_fn fn, void *ctx,
                 struct dataset_check *out)
{
    memset(out, 0, sizeof *out);
    struct dataset_turn *turns = malloc(MAX_TURNS * sizeof *turns);
    if (!turns) {
        problem(out, 0, "out of memory");
        return -1;
    }
    long line = 0;
    int rc = 0;
    size_t pos = 0;
    /* Editors on Windows start UTF-8 files with a byte-order mark, U+FEFF;
     * it is no part of the data. Elsewhere it is a mistake, named below. */
    if (len >= 3 && memcmp(buf, BOM, 3) == 0)
        pos = 3;
    for (; pos < len && rc == 0;) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) : len;
        line++;
        const char *s = buf + pos;
        size_t n = end - pos;
        if (n > 0 && s[n - 1] == '\r')
            n--;
        if (!blank(s, n))
            rc = check_line(s, n, line, turns, fn, ctx, out);
        pos = end + 1;
    }
    free(turns);
    if (rc != 0)
        return rc;
    if (out->examples == 0) {
        problem(out, 0, "the file has no examples");
        return -1;
    }
    return 0;
}

int dataset_check_buffer(const char *buf, size_t len, struct dataset_check *out)
{
    return dataset_each(buf, len, NULL, NULL, out);
}

char *dataset_check_error(const struct dataset_check *c, const char *name, char *buf, size_t cap)
{
    /* The name is the user's and may not even be UTF-8: one_line mends it. */
    if (c->bad_line > 0)
        snprintf(buf, cap, "line %ld of %s: %s", c->bad_line, name, c->problem);
    else
        snprintf(buf, cap, "%s: %s", name, c->problem);
    text_one_line(buf);
    return buf;
}
