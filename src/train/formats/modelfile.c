/* modelfile.c - an Ollama Modelfile read off the model's chat template
 * (modelfile.h). */
#include "train/formats/modelfile.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fs.h"
#include "core/growbuf.h"
#include "core/text.h"
#include "train/tokenizer/chat_format.h"
#include "train/tokenizer/tokenizer.h"

#define MAX_MODELFILE ((size_t)1 << 20)

/* Probe contents: plain letters, so that no template trims or escapes them. */
#define MK_SYS "QzSysProbeQz"
#define MK_U1 "QzUserOneQz"
#define MK_A1 "QzAsstOneQz"
#define MK_U2 "QzUserTwoQz"
#define MK_A2 "QzAsstTwoQz"

/* A Modelfile is written into a growbuf of at most MAX_MODELFILE bytes:
 * past it, or out of memory, the text is refused as a whole. */
static void put_n(struct growbuf *b, const char *s, size_t n) { growbuf_append(b, s, n); }

static void put(struct growbuf *b, const char *s) { growbuf_puts(b, s); }

/* Template literal text: "{{" would open an action, so it is written as one. */
static void put_literal(struct growbuf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '{' && i + 1 < n && s[i + 1] == '{') {
            put(b, "{{ \"{{\" }}");
            i++;
        } else {
            put_n(b, &s[i], 1);
        }
    }
}

static json_t *msg(const char *role, const char *content)
{
    return json_pack("{ss ss}", "role", role, "content", content);
}

/* Renders messages (taken: freed here) into *text (OUT: NULL when
 * messages is NULL or the template fails). The result goes through the
 * caller's pointer, not a local of this function, so that gcc 12 at -O3
 * never suspects it of pointing into this frame (-Wdangling-pointer). */
static void render(const struct chat_format *f, json_t *messages, int gen, char **text)
{
    char err[300];
    *text = NULL;
    if (messages && chat_format_render(f, messages, NULL, gen, text, err, sizeof err) < 0)
        *text = NULL;
    json_decref(messages);
}

/* The text of `s` between the end of marker a (or the start when a is
 * NULL) and marker b (or the end when b is NULL). -1 when a marker is
 * missing. */
static int between(const char *s, const char *a, const char *b, const char **from, size_t *len)
{
    const char *p = s;
    if (a) {
        p = strstr(s, a);
        if (!p)
            return -1;
        p += strlen(a);
    }
    const char *q = b ? strstr(p, b) : p + strlen(p);
    if (!q)
        return -1;
    *from = p;
    *len = (size_t)(q - p);
    return 0;
}

/* The parts of a template around each role's content. */
struct layout {
    const char *start, *sys_pre, *sys_post, *user_pre, *asst_pre, *asst_post, *gen;
    size_t start_n, sys_pre_n, sys_post_n, user_pre_n, asst_pre_n, asst_post_n, gen_n;
    int has_sys;
};

static int read_layout(const char *two, const char *one_gen, const char *with_sys,
                       struct layout *l)
{
    const char *h, *x, *y, *z;
    size_t hn, xn, yn, zn;
    if (between(two, NULL, MK_U1, &h, &hn) || between(two, MK_U1, MK_A1, &x, &xn) ||
        between(two, MK_A1, MK_U2, &y, &yn) || between(two, MK_A2, NULL, &z, &zn) ||
        between(one_gen, MK_U1, NULL, &l->gen, &l->gen_n))
        return -1;
    /* y = what ends an assistant turn + what opens a user turn; z = the end */
    size_t k = 0;
    while (k < yn && k < zn && y[k] == z[k])
        k++;
    l->asst_post = y;
    l->asst_post_n = k;
    l->user_pre = y + k;
    l->user_pre_n = yn - k;
    l->asst_pre = x;
    l->asst_pre_n = xn;
    l->start = h;
    l->start_n = hn;
    if (hn >= l->user_pre_n && memcmp(h + hn - l->user_pre_n, l->user_pre, l->user_pre_n) == 0)
        l->start_n = hn - l->user_pre_n;
    const char *sh, *sw;
    size_t shn, swn;
    l->has_sys = with_sys && !between(with_sys, NULL, MK_SYS, &sh, &shn) &&
                 !between(with_sys, MK_SYS, MK_U1, &sw, &swn) && shn >= l->start_n &&
                 memcmp(sh, l->start, l->start_n) == 0;
    if (l->has_sys) {
        l->sys_pre = sh + l->start_n;
        l->sys_pre_n = shn - l->start_n;
        l->sys_post = sw;
        l->sys_post_n = swn;
        if (swn >= l->user_pre_n && memcmp(sw + swn - l->user_pre_n, l->user_pre, l->user_pre_n) == 0)
            l->sys_post_n = swn - l->user_pre_n;
    }
    return 0;
}

static void put_template(struct growbuf *b, const struct layout *l)
{
    put(b, "TEMPLATE \"\"\"");
    put_literal(b, l->start, l->start_n);
    put(b, "{{ range .Messages }}");
    if (l->has_sys) {
        put(b, "{{ if eq .Role \"system\" }}");
        put_literal(b, l->sys_pre, l->sys_pre_n);
        put(b, "{{ .Content }}");
        put_literal(b, l->sys_post, l->sys_post_n);
        put(b, "{{ else if eq .Role \"user\" }}");
    } else {
        put(b, "{{ if eq .Role \"user\" }}");
    }
    put_literal(b, l->user_pre, l->user_pre_n);
    put(b, "{{ .Content }}{{ else if eq .Role \"assistant\" }}");
    put_literal(b, l->asst_pre, l->asst_pre_n);
    put(b, "{{ .Content }}");
    put_literal(b, l->asst_post, l->asst_post_n);
    put(b, "{{ end }}{{ end }}");
    put_literal(b, l->gen, l->gen_n);
    put(b, "\"\"\"\n");
}

/* alallo's plain layout (docs/data.md), EOS after each assistant turn. */
static void put_plain_template(struct growbuf *b, const char *eos)
{
    put(b, "TEMPLATE \"\"\"{{ range $i, $m := .Messages }}{{ if $i }}\n\n{{ end }}"
           "{{ if eq .Role \"system\" }}System:\n{{ else if eq .Role \"user\" }}User:\n"
           "{{ else if eq .Role \"assistant\" }}Assistant:\n{{ else }}Tool:\n{{ end }}"
           "{{ .Content }}{{ if eq .Role \"assistant\" }}");
    put_literal(b, eos, strlen(eos));
    put(b, "{{ end }}{{ end }}\n\nAssistant:\n\"\"\"\n");
}

static void put_stop(struct growbuf *b, const char *text)
{
    put(b, "PARAMETER stop \"");
    for (const char *c = text; *c; c++) {
        if (*c == '"' || *c == '\\')
            put(b, "\\");
        put_n(b, c, 1);
    }
    put(b, "\"\n");
}

char *modelfile_text(const char *model_dir, const char *gguf_name, char *err, size_t errcap)
{
    char path[4200];
    text_printf(path, sizeof path, "%s/tokenizer.json", model_dir);
    struct tokenizer *tok = tokenizer_load(path, err, errcap);
    if (!tok)
        return NULL;
    char ferr[400] = "";
    struct chat_format *f = chat_format_load(model_dir, ferr, sizeof ferr);
    struct growbuf b;
    growbuf_init(&b, MAX_MODELFILE);
    int ok = 0;
    char *two = NULL, *one_gen = NULL, *with_sys = NULL;
    if (!f && ferr[0]) {
        text_error(err, errcap, "the chat template cannot be read: %s", ferr);
        goto out;
    }
    put(&b, "# Made by alallo export. Run: ollama create NAME -f THIS_FILE\nFROM ./");
    put(&b, gguf_name);
    put(&b, "\n");
    int eos = tokenizer_eos_id(tok);
    const char *eos_text = eos >= 0 ? tokenizer_token_text(tok, eos) : NULL;
    if (!f) {
        put_plain_template(&b, eos_text ? eos_text : "");
    } else {
        render(f, json_pack("[o o o o]", msg("user", MK_U1), msg("assistant", MK_A1),
                            msg("user", MK_U2), msg("assistant", MK_A2)), 0, &two);
        render(f, json_pack("[o]", msg("user", MK_U1)), 1, &one_gen);
        render(f, json_pack("[o o o]", msg("system", MK_SYS), msg("user", MK_U1),
                            msg("assistant", MK_A1)), 0, &with_sys);
        struct layout l;
        if (!two || !one_gen || read_layout(two, one_gen, with_sys, &l) < 0) {
            text_error(err, errcap, "the chat template does not lay out a plain conversation");
            goto out;
        }
        if (strstr(two, "\"\"\"")) {
            text_error(err, errcap, "the chat template's text holds \"\"\"");
            goto out;
        }
        put_template(&b, &l);
    }
    int32_t stop[8];
    int n = chat_format_stop_ids(f, tok, stop, 8);
    for (int i = 0; i < n; i++) {
        const char *t = tokenizer_token_text(tok, stop[i]);
        if (t)
            put_stop(&b, t);
    }
    if (b.err)
        text_error(err, errcap, "the Modelfile is too large or memory ran out");
    ok = !b.err;
out:
    free(two);
    free(one_gen);
    free(with_sys);
    chat_format_free(f);
    tokenizer_free(tok);
    if (!ok) {
        growbuf_free(&b);
        return NULL;
    }
    return growbuf_take(&b);
}

int modelfile_write(const char *model_dir, const char *gguf_name, const char *out_path, char *err,
                    size_t errcap)
{
    struct stat st;
    if (lstat(out_path, &st) == 0) {
        text_error(err, errcap, "%s already exists", out_path);
        return -1;
    }
    err[0] = '\0';
    char *text = modelfile_text(model_dir, gguf_name, err, errcap);
    if (!text)
        return -1;
    int rc = fs_write_durably(out_path, text, strlen(text), 0644);
    free(text);
    if (rc < 0)
        text_error(err, errcap, "%s cannot be written", out_path);
    return rc;
}
