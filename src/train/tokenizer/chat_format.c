/* chat_format.c - a model's chat template applied for training and
 * generation (chat_format.h). */
#include "train/tokenizer/chat_format.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/text.h"
#include "train/tokenizer/chat_template.h"

#define MAX_CONFIG (16 << 20) /* bytes of tokenizer_config.json */

struct chat_format {
    struct chat_template *tpl;      /* the default template */
    struct chat_template *tool_tpl; /* a "tool_use" template, when the config names one */
    json_t *tokens;                 /* bos_token, eos_token, ... as strings */
};

void chat_format_free(struct chat_format *f)
{
    if (!f)
        return;
    chat_template_free(f->tpl);
    chat_template_free(f->tool_tpl);
    json_decref(f->tokens);
    free(f);
}

static struct chat_template *parse(const char *src, char *err, size_t errcap)
{
    return chat_template_parse(src, strlen(src), err, errcap);
}

/* A special token of the config: a string, or {"content": string}. */
static const char *token_text(const json_t *v)
{
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_string_value(v);
}

static struct chat_format *from_config(json_t *cfg, const char *file_template, char *err,
                                       size_t errcap)
{
    err[0] = '\0';
    json_t *ct = json_object_get(cfg, "chat_template");
    const char *main_src = NULL, *tool_src = NULL;
    if (json_is_string(ct)) {
        main_src = json_string_value(ct);
    } else if (json_is_array(ct)) { /* named templates: "default", "tool_use", ... */
        size_t i;
        json_t *e;
        json_array_foreach(ct, i, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            const char *src = json_string_value(json_object_get(e, "template"));
            if (name && src && strcmp(name, "default") == 0)
                main_src = src;
            else if (name && src && strcmp(name, "tool_use") == 0)
                tool_src = src;
        }
    } else if (ct && !json_is_null(ct)) {
        text_error(err, errcap, "tokenizer_config.json: \"chat_template\" must be a string");
        return NULL;
    }
    if (!main_src)
        main_src = file_template ? file_template : tool_src;
    if (!main_src)
        return NULL; /* no template: the plain layout */
    struct chat_format *f = calloc(1, sizeof *f);
    if (!f) {
        text_error(err, errcap, "out of memory");
        return NULL;
    }
    f->tokens = json_object();
    static const char *const names[] = {"bos_token", "eos_token", "pad_token", "unk_token"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *t = token_text(json_object_get(cfg, names[i]));
        if (t)
            json_object_set_new(f->tokens, names[i], json_string(t));
    }
    f->tpl = parse(main_src, err, errcap);
    if (f->tpl && tool_src && tool_src != main_src)
        f->tool_tpl = parse(tool_src, err, errcap);
    if (!f->tpl || (tool_src && tool_src != main_src && !f->tool_tpl)) {
        chat_format_free(f);
        return NULL;
    }
    return f;
}

struct chat_format *chat_format_from_config(const char *config_json, size_t len, char *err,
                                            size_t errcap)
{
    json_error_t je;
    json_t *cfg = json_loadb(config_json, len, 0, &je);
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        text_error(err, errcap, "tokenizer_config.json: not a JSON object (line %d: %s)", je.line,
                   je.text);
        return NULL;
    }
    struct chat_format *f = from_config(cfg, NULL, err, errcap);
    json_decref(cfg);
    return f;
}

/* The file's text (malloc'd), or NULL with errno ENOENT when it is absent. */
static char *read_text(const char *path, char *err, size_t errcap)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    char *buf = malloc(MAX_CONFIG + 1);
    size_t n = buf ? fread(buf, 1, MAX_CONFIG + 1, fp) : 0;
    fclose(fp);
    if (!buf || n > MAX_CONFIG) {
        free(buf);
        text_error(err, errcap, "%s: larger than 16 MiB", path);
        errno = EFBIG;
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

struct chat_format *chat_format_load(const char *model_dir, char *err, size_t errcap)
{
    char path[4096];
    err[0] = '\0';
    snprintf(path, sizeof path, "%s/chat_template.jinja", model_dir);
    errno = 0;
    char *file_template = read_text(path, err, errcap);
    if (err[0])
        return NULL;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", model_dir);
    char *cfg_text = read_text(path, err, errcap);
    struct chat_format *f = NULL;
    if (err[0]) {
        /* too large, said */
    } else if (!cfg_text) {
        json_t *empty = json_object();
        f = file_template ? from_config(empty, file_template, err, errcap) : NULL;
        json_decref(empty);
    } else {
        json_error_t je;
        json_t *cfg = json_loads(cfg_text, 0, &je);
        if (!json_is_object(cfg))
            text_error(err, errcap, "tokenizer_config.json: not a JSON object (line %d: %s)",
                       je.line, je.text);
        else
            f = from_config(cfg, file_template, err, errcap);
        json_decref(cfg);
    }
    free(cfg_text);
    free(file_template);
    return f;
}

/* The messages as a template sees them: a tool call's "arguments" string
 * parsed into an object (as transformers' templates expect a dict). */
static json_t *template_messages(const json_t *messages, size_t n)
{
    json_t *out = json_array();
    for (size_t i = 0; i < n && out; i++) {
        json_t *m = json_deep_copy(json_array_get(messages, i));
        json_t *calls = json_object_get(m, "tool_calls");
        size_t k;
        json_t *tc;
        json_array_foreach(calls, k, tc) {
            json_t *fn = json_object_get(tc, "function");
            json_t *args = json_object_get(fn, "arguments");
            if (json_is_string(args)) {
                json_t *parsed = json_loads(json_string_value(args), 0, NULL);
                if (json_is_object(parsed))
                    json_object_set_new(fn, "arguments", parsed);
                else
                    json_decref(parsed);
            }
        }
        json_array_append_new(out, m);
    }
    return out;
}

/* Renders the first n messages. */
static int render_n(const struct chat_format *f, const json_t *messages, size_t n,
                    const json_t *tools, int agp, char **text, size_t *len, char *err,
                    size_t errcap)
{
    int with_tools = json_is_array(tools) && json_array_size(tools) > 0;
    const struct chat_template *t = with_tools && f->tool_tpl ? f->tool_tpl : f->tpl;
    json_t *vars = json_deep_copy(f->tokens);
    json_t *msgs = template_messages(messages, n);
    if (!vars || !msgs) {
        json_decref(vars);
        json_decref(msgs);
        text_error(err, errcap, "out of memory");
        return -1;
    }
    json_object_set_new(vars, "messages", msgs);
    json_object_set_new(vars, "add_generation_prompt", json_boolean(agp));
    if (with_tools)
        json_object_set(vars, "tools", (json_t *)tools);
    int rc = chat_template_render(t, vars, text, len, err, errcap);
    json_decref(vars);
    return rc;
}

int chat_format_render(const struct chat_format *f, const json_t *messages, const json_t *tools,
                       int add_generation_prompt, char **text, char *err, size_t errcap)
{
    size_t len;
    return render_n(f, messages, json_array_size(messages), tools, add_generation_prompt, text,
                    &len, err, errcap);
}

int chat_format_prompt(const struct chat_format *f, const json_t *messages, const json_t *tools,
                       char **text, char *err, size_t errcap)
{
    return chat_format_render(f, messages, tools, 1, text, err, errcap);
}

struct span {
    size_t lo, hi;
};

/* Moves *s past leading white space; the length left without the trailing. */
static size_t trim(const char **s, size_t n)
{
    while (n && strchr(" \n\t\r", **s)) {
        (*s)++;
        n--;
    }
    while (n && strchr(" \n\t\r", (*s)[n - 1]))
        n--;
    return n;
}

/* The last place `full` holds the n bytes of `anchor`, or NULL. */
static const char *last_in(const char *full, size_t fn, const char *anchor, size_t n)
{
    const char *last = NULL;
    for (const char *h = n ? memmem(full, fn, anchor, n) : NULL; h;
         h = memmem(h + 1, fn - (size_t)(h + 1 - full), anchor, n))
        last = h;
    return last;
}

/* Where an assistant turn the whole conversation writes differently from
 * F (the conversation up to it) is found: from the message's content, as
 * given, trimmed of white space, or (reasoning inline, "<think>...</think>
 * answer") its answer after the last "</think>" less leading newlines,
 * which is all a template that drops the reasoning of earlier turns keeps
 * (Qwen3), to the end of F. Tries each in `all` from `from`; the hit, its
 * length in *len, or NULL. */
static const char *find_by_content(const json_t *msg, const char *full, size_t fn,
                                   const char *all, size_t all_len, size_t from, size_t *len)
{
    const char *c = json_string_value(json_object_get(msg, "content"));
    if (!c || from > all_len)
        return NULL;
    const char *anchor[3];
    size_t an[3];
    anchor[0] = c;
    an[0] = strlen(c);
    anchor[1] = c;
    an[1] = trim(&anchor[1], an[0]);
    const char *think = last_in(c, an[0], "</think>", 8);
    anchor[2] = think ? think + 8 : c + an[0];
    while (*anchor[2] == '\n')
        anchor[2]++;
    an[2] = strlen(anchor[2]);
    for (int k = 0; k < 3; k++) {
        const char *at = last_in(full, fn, anchor[k], an[k]);
        if (!at)
            continue;
        *len = fn - (size_t)(at - full);
        const char *hit = memmem(all + from, all_len - from, at, *len);
        if (hit)
            return hit;
    }
    return NULL;
}

/* The bytes of eos_token that end the n bytes of turn, or 0. */
static size_t closing_len(const struct chat_format *f, const char *turn, size_t n)
{
    const char *eos = json_string_value(json_object_get(f->tokens, "eos_token"));
    size_t en = eos ? strlen(eos) : 0;
    return en && en <= n && memcmp(turn + n - en, eos, en) == 0 ? en : 0;
}

/* The assistant turns of the whole text `all` (see chat_format.h). */
static int find_turns(const struct chat_format *f, const json_t *messages, const json_t *tools,
                      const char *all, size_t all_len, struct span *spans, size_t *n_spans,
                      char *err, size_t errcap)
{
    size_t cursor = 0;
    *n_spans = 0;
    for (size_t i = 0; i < json_array_size(messages); i++) {
        const char *role = json_string_value(json_object_get(json_array_get(messages, i), "role"));
        if (!role || strcmp(role, "assistant") != 0)
            continue;
        char *p = NULL, *full = NULL;
        size_t pn = 0, fn = 0;
        char why[300];
        if (i > 0 && render_n(f, messages, i, tools, 1, &p, &pn, why, sizeof why) < 0) {
            text_error(err, errcap, "message %zu: %s", i + 1, why);
            return -1;
        }
        if (render_n(f, messages, i + 1, tools, 0, &full, &fn, why, sizeof why) < 0) {
            free(p);
            text_error(err, errcap, "message %zu: %s", i + 1, why);
            return -1;
        }
        size_t common = 0;
        while (common < pn && common < fn && p[common] == full[common])
            common++;
        const char *turn = full + common;
        size_t turn_len = fn - common;
        if (common < pn) {
            /* The template lays out earlier messages differently once this
             * one follows (Mistral moves the system message to the last
             * user message): the turn starts at its content, found last. */
            const char *c = json_string_value(
                json_object_get(json_array_get(messages, i), "content"));
            size_t cn = c ? trim(&c, strlen(c)) : 0;
            const char *last = last_in(full, fn, c, cn);
            turn = last;
            turn_len = last ? fn - (size_t)(last - full) : 0;
        }
        size_t from = cursor;
        if (common <= all_len && memcmp(all, full, common) == 0 && common > from)
            from = common;
        const char *hit =
            turn_len && from <= all_len ? memmem(all + from, all_len - from, turn, turn_len) : NULL;
        size_t closed = turn_len - closing_len(f, turn, turn_len);
        if (!hit && closed && closed < turn_len && from <= all_len) {
            /* what the template writes after a conversation's last message
             * (Phi-4-mini's eos_token) closes F, not this turn, when another
             * message follows */
            hit = memmem(all + from, all_len - from, turn, closed);
            turn_len = hit ? closed : turn_len;
        }
        if (!hit) /* an earlier turn the template shortens once a query follows (Qwen3) */
            hit = find_by_content(json_array_get(messages, i), full, fn, all, all_len, from,
                                  &turn_len);
        free(p);
        free(full);
        if (!hit) {
            text_error(err, errcap,
                       "message %zu: the chat template writes this assistant turn differently "
                       "inside the whole conversation, so alallo cannot find it to train on",
                       i + 1);
            return -1;
        }
        spans[*n_spans].lo = (size_t)(hit - all);
        spans[*n_spans].hi = spans[*n_spans].lo + turn_len;
        cursor = spans[*n_spans].hi;
        (*n_spans)++;
    }
    return 0;
}

struct ids {
    int32_t *ids;
    uint8_t *mask;
    size_t n, cap;
};

static int append(struct ids *s, const struct tokenizer *tok, const char *text, size_t len,
                  uint8_t m)
{
    if (len == 0)
        return 0;
    int32_t *ids;
    size_t n;
    if (tokenizer_encode_special(tok, text, len, &ids, &n) < 0)
        return -1;
    if (s->n + n > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->n + n)
            cap *= 2;
        int32_t *a = realloc(s->ids, cap * sizeof *a);
        uint8_t *b = a ? realloc(s->mask, cap) : NULL;
        if (a)
            s->ids = a;
        if (!a || !b) {
            free(ids);
            return -1;
        }
        s->mask = b;
        s->cap = cap;
    }
    memcpy(s->ids + s->n, ids, n * sizeof *ids);
    memset(s->mask + s->n, m, n);
    s->n += n;
    free(ids);
    return 0;
}

int chat_format_encode(const struct chat_format *f, const struct tokenizer *tok,
                       const json_t *messages, const json_t *tools, int32_t **ids, uint8_t **mask,
                       size_t *n, char *err, size_t errcap)
{
    *ids = NULL;
    *mask = NULL;
    *n = 0;
    char *all;
    size_t all_len;
    if (render_n(f, messages, json_array_size(messages), tools, 0, &all, &all_len, err, errcap) <
        0)
        return -1;
    size_t nm = json_array_size(messages);
    struct span *spans = malloc((nm + 1) * sizeof *spans);
    size_t ns = 0;
    int rc = spans ? find_turns(f, messages, tools, all, all_len, spans, &ns, err, errcap) : -1;
    if (!spans)
        text_error(err, errcap, "out of memory");
    struct ids s = {0};
    size_t at = 0;
    for (size_t i = 0; i < ns && rc == 0; i++) {
        rc = append(&s, tok, all + at, spans[i].lo - at, 0);
        if (rc == 0)
            rc = append(&s, tok, all + spans[i].lo, spans[i].hi - spans[i].lo, 1);
        at = spans[i].hi;
        if (rc)
            text_error(err, errcap, "out of memory");
    }
    if (rc == 0 && append(&s, tok, all + at, all_len - at, 0) < 0) {
        rc = -1;
        text_error(err, errcap, "out of memory");
    }
    free(spans);
    free(all);
    if (rc) {
        free(s.ids);
        free(s.mask);
        return -1;
    }
    *ids = s.ids;
    *mask = s.mask;
    *n = s.n;
    return 0;
}

int chat_format_stop_ids(const struct chat_format *f, const struct tokenizer *tok, int32_t *out,
                         int cap)
{
    static const char *const ends[] = {"<|im_end|>", "<|eot_id|>", "<|eom_id|>",
                                       "<end_of_turn>", "<|end|>"};
    int n = 0;
    int eos = tokenizer_eos_id(tok);
    if (eos >= 0 && n < cap)
        out[n++] = eos;
    const char *cfg_eos = f ? json_string_value(json_object_get(f->tokens, "eos_token")) : NULL;
    int id = cfg_eos ? tokenizer_token_id(tok, cfg_eos) : -1;
    if (id >= 0 && id != eos && n < cap)
        out[n++] = id;
    for (size_t i = 0; f && i < sizeof ends / sizeof *ends && n < cap; i++) {
        id = tokenizer_token_id(tok, ends[i]);
        int dup = 0;
        for (int k = 0; k < n; k++)
            dup |= out[k] == id;
        if (id >= 0 && !dup)
            out[n++] = id;
    }
    return n;
}
