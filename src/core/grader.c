/* grader.c - checking and running graders (grader.h). */
#include "core/grader.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/grader_formula.h"
#include "core/grader_python.h"
#include "core/grader_text.h"
#include "core/text.h"

#define PATH_MAX_LEN 256

/* ------------------------------------------------------------ templates */

/* The variable of the template tag at t (just past "{{"): its trimmed name
 * in name, *end past the "}}". false when the tag does not close. */
static bool tag(const char *t, char *name, size_t cap, const char **end)
{
    const char *close = strstr(t, "}}");
    if (!close)
        return false;
    const char *a = t, *b = close;
    while (a < b && (*a == ' ' || *a == '\t'))
        a++;
    while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
        b--;
    size_t n = (size_t)(b - a);
    if (n >= cap)
        n = cap - 1;
    memcpy(name, a, n);
    name[n] = '\0';
    *end = close + 2;
    return true;
}

/* The item path of a variable ("item.a.b" gives "a.b"); NULL when it is
 * sample.output_text; "" when it is neither. */
static const char *item_path(const char *var)
{
    if (strcmp(var, "sample.output_text") == 0)
        return NULL;
    if (strncmp(var, "item.", 5) == 0 && var[5] && var[strlen(var) - 1] != '.' &&
        !strstr(var, ".."))
        return var + 5;
    return "";
}

/* Checks the tags of template t. false with a sentence in msg. */
static bool template_check(const char *t, char *msg, size_t cap)
{
    for (const char *p = strstr(t, "{{"); p; p = strstr(p, "{{")) {
        char var[PATH_MAX_LEN];
        const char *end;
        if (!tag(p + 2, var, sizeof var, &end)) {
            text_error(msg, cap, "a template tag \"{{\" is not closed by \"}}\".");
            return false;
        }
        const char *path = item_path(var);
        if (path && !*path) {
            text_error(msg, cap,
                       "{{%s}} is no variable a grader reads: use {{sample.output_text}} or "
                       "{{item.FIELD}}.",
                       var);
            return false;
        }
        p = end;
    }
    return true;
}

/* The value at dotted path in item; NULL when it is missing. */
static const json_t *item_get(const json_t *item, const char *path)
{
    char key[PATH_MAX_LEN];
    const json_t *v = item;
    while (v && *path) {
        const char *dot = strchr(path, '.');
        size_t n = dot ? (size_t)(dot - path) : strlen(path);
        if (n >= sizeof key)
            return NULL;
        memcpy(key, path, n);
        key[n] = '\0';
        v = json_is_object(v) ? json_object_get(v, key) : NULL;
        path += n + (dot != NULL);
    }
    return v;
}

struct buf {
    char *s;
    size_t n, cap;
    bool too_long;
};

static void put(struct buf *b, const char *s, size_t n)
{
    if (b->too_long || b->n + n + 1 > GRADER_MAX_TEXT) {
        b->too_long = true;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *s2 = realloc(b->s, cap);
        if (!s2) {
            b->too_long = true;
            return;
        }
        b->s = s2;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

bool grader_render(const char *t, const char *sample, const json_t *item, char **out, char *err,
                   size_t errcap)
{
    struct buf b = {0};
    put(&b, "", 0);
    const char *p = t;
    for (const char *open = strstr(p, "{{"); open; open = strstr(p, "{{")) {
        put(&b, p, (size_t)(open - p));
        char var[PATH_MAX_LEN];
        const char *end;
        if (!tag(open + 2, var, sizeof var, &end)) {
            text_error(err, errcap, "a template tag \"{{\" is not closed by \"}}\"");
            free(b.s);
            return false;
        }
        const char *path = item_path(var);
        if (!path) {
            put(&b, sample, strlen(sample));
        } else {
            const json_t *v = *path ? item_get(item, path) : NULL;
            if (!v) {
                text_error(err, errcap, "the line has no field \"%s\" that {{%s}} reads", path,
                           var);
                free(b.s);
                return false;
            }
            if (json_is_string(v)) {
                put(&b, json_string_value(v), json_string_length(v));
            } else {
                char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
                put(&b, s ? s : "", s ? strlen(s) : 0);
                free(s);
            }
        }
        p = end;
    }
    put(&b, p, strlen(p));
    if (b.too_long) {
        text_error(err, errcap, "a rendered template is longer than %d bytes", GRADER_MAX_TEXT);
        free(b.s);
        return false;
    }
    *out = b.s;
    return true;
}

/* ------------------------------------------------------------ checking */

struct check {
    char *param, *msg;
    size_t paramcap, msgcap;
};

static bool bad(struct check *c, const char *at, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bool bad(struct check *c, const char *at, const char *field, const char *fmt, ...)
{
    if (field)
        snprintf(c->param, c->paramcap, "%s.%s", at, field);
    else
        snprintf(c->param, c->paramcap, "%s", at);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, c->msgcap, fmt, ap);
    va_end(ap);
    text_one_line(c->msg);
    return false;
}

/* A string field holding a template. */
static bool check_template_field(struct check *c, const json_t *g, const char *at,
                                 const char *field)
{
    const char *s = json_string_value(json_object_get(g, field));
    if (!s)
        return bad(c, at, field, "%s is required and must be a string.", field);
    char why[200];
    if (!template_check(s, why, sizeof why))
        return bad(c, at, field, "%s: %s", field, why);
    return true;
}

static bool check_threshold(struct check *c, const json_t *g, const char *at)
{
    const json_t *t = json_object_get(g, "pass_threshold");
    if (t && !json_is_null(t) && !(json_is_number(t) && isfinite(json_number_value(t))))
        return bad(c, at, "pass_threshold", "pass_threshold must be a number.");
    return true;
}

static bool check_string_check(struct check *c, const json_t *g, const char *at)
{
    if (!check_template_field(c, g, at, "input") || !check_template_field(c, g, at, "reference"))
        return false;
    const char *op = json_string_value(json_object_get(g, "operation"));
    if (!op || (strcmp(op, "eq") && strcmp(op, "ne") && strcmp(op, "like") && strcmp(op, "ilike")))
        return bad(c, at, "operation",
                   "operation must be \"eq\", \"ne\", \"like\" or \"ilike\".");
    return true;
}

static bool check_text_similarity(struct check *c, const json_t *g, const char *at)
{
    if (!check_template_field(c, g, at, "input") || !check_template_field(c, g, at, "reference"))
        return false;
    const char *m = json_string_value(json_object_get(g, "evaluation_metric"));
    enum grader_metric metric;
    if (m && strcmp(m, "cosine") == 0)
        return bad(c, at, "evaluation_metric",
                   "evaluation_metric \"cosine\" compares embeddings, and alallo serves no "
                   "embedding model: use \"fuzzy_match\", \"bleu\", \"gleu\" or a ROUGE metric.");
    if (m && strcmp(m, "meteor") == 0)
        return bad(c, at, "evaluation_metric",
                   "evaluation_metric \"meteor\" needs a synonym dictionary alallo does not "
                   "ship: use \"fuzzy_match\", \"bleu\", \"gleu\" or a ROUGE metric.");
    if (!m || !grader_metric_parse(m, &metric))
        return bad(c, at, "evaluation_metric",
                   "evaluation_metric must be \"fuzzy_match\", \"bleu\", \"gleu\", \"rouge_1\", "
                   "\"rouge_2\", \"rouge_3\", \"rouge_4\", \"rouge_5\" or \"rouge_l\".");
    return check_threshold(c, g, at);
}

/* A message's content as a template: a string, or OpenAI's
 * {"type": "input_text", "text": ...}. NULL when it is neither. */
static const char *content_of(const json_t *msg)
{
    const json_t *content = json_object_get(msg, "content");
    if (json_is_string(content))
        return json_string_value(content);
    if (json_is_object(content))
        return json_string_value(json_object_get(content, "text"));
    return NULL;
}

static bool check_score_model(struct check *c, const json_t *g, const char *at)
{
    const char *model = json_string_value(json_object_get(g, "model"));
    if (!model || !*model)
        return bad(c, at, "model",
                   "model is required: a base or fine-tuned model this alallo serves.");
    const json_t *in = json_object_get(g, "input");
    if (!json_is_array(in) || json_array_size(in) == 0 || json_array_size(in) > 64)
        return bad(c, at, "input", "input must be an array of 1 to 64 messages.");
    for (size_t i = 0; i < json_array_size(in); i++) {
        const json_t *m = json_array_get(in, i);
        char field[64];
        snprintf(field, sizeof field, "input[%zu]", i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role || (strcmp(role, "system") && strcmp(role, "developer") &&
                      strcmp(role, "user") && strcmp(role, "assistant")))
            return bad(c, at, field,
                       "each message has a role: \"system\", \"developer\", \"user\" or "
                       "\"assistant\".");
        const char *content = content_of(m);
        if (!content)
            return bad(c, at, field,
                       "each message's content is a string or {\"type\": \"input_text\", "
                       "\"text\": ...}.");
        char why[200];
        if (!template_check(content, why, sizeof why))
            return bad(c, at, field, "%s", why);
    }
    const json_t *r = json_object_get(g, "range");
    if (r && !json_is_null(r)) {
        const json_t *lo = json_array_get(r, 0), *hi = json_array_get(r, 1);
        if (!json_is_array(r) || json_array_size(r) != 2 || !json_is_number(lo) ||
            !json_is_number(hi) || !isfinite(json_number_value(lo)) ||
            !isfinite(json_number_value(hi)) || json_number_value(lo) >= json_number_value(hi))
            return bad(c, at, "range", "range must be [low, high] with low below high.");
    }
    const json_t *sp = json_object_get(g, "sampling_params");
    if (sp && !json_is_null(sp)) {
        if (!json_is_object(sp))
            return bad(c, at, "sampling_params", "sampling_params must be an object.");
        const json_t *t = json_object_get(sp, "temperature");
        if (t && !json_is_null(t) &&
            !(json_is_number(t) && json_number_value(t) >= 0 && json_number_value(t) <= 2))
            return bad(c, at, "sampling_params.temperature",
                       "temperature must be a number from 0 to 2.");
        const json_t *p = json_object_get(sp, "top_p");
        if (p && !json_is_null(p) &&
            !(json_is_number(p) && json_number_value(p) > 0 && json_number_value(p) <= 1))
            return bad(c, at, "sampling_params.top_p", "top_p must be above 0 and at most 1.");
        const json_t *mt = json_object_get(sp, "max_completions_tokens");
        if (mt && !json_is_null(mt) &&
            !(json_is_integer(mt) && json_integer_value(mt) >= 1 &&
              json_integer_value(mt) <= GRADER_MODEL_MAX_TOKENS))
            return bad(c, at, "sampling_params.max_completions_tokens",
                       "max_completions_tokens must be an integer from 1 to %d.",
                       GRADER_MODEL_MAX_TOKENS);
        const json_t *seed = json_object_get(sp, "seed");
        if (seed && !json_is_null(seed) && !json_is_integer(seed))
            return bad(c, at, "sampling_params.seed", "seed must be an integer.");
    }
    return check_threshold(c, g, at);
}

/* A python grader's shape; whether it can run here is
 * grader_python_ready's (it needs the sandbox). */
static bool check_python(struct check *c, const json_t *g, const char *at)
{
    const char *src = json_string_value(json_object_get(g, "source"));
    if (!src || !*src)
        return bad(c, at, "source",
                   "source is required: Python code that defines grade(sample, item).");
    if (strlen(src) > GRADER_MAX_TEXT)
        return bad(c, at, "source", "source is longer than %d bytes.", GRADER_MAX_TEXT);
    const json_t *tag = json_object_get(g, "image_tag");
    if (tag && !json_is_null(tag) && !json_is_string(tag))
        return bad(c, at, "image_tag", "image_tag must be a string.");
    return check_threshold(c, g, at);
}

static bool check_one(struct check *c, const json_t *g, const char *at, int depth);

struct names {
    const json_t *graders;
    const char *bad_name;
};

static bool name_known(void *ctx, const char *name)
{
    struct names *n = ctx;
    n->bad_name = name;
    return json_object_get(n->graders, name) != NULL;
}

static bool check_multi(struct check *c, const json_t *g, const char *at, int depth)
{
    const json_t *gs = json_object_get(g, "graders");
    if (!json_is_object(gs) || json_object_size(gs) == 0 ||
        json_object_size(gs) > GRADER_MAX_CHILDREN)
        return bad(c, at, "graders", "graders must be an object of 1 to %d named graders.",
                   GRADER_MAX_CHILDREN);
    const char *name;
    const json_t *child;
    json_object_foreach((json_t *)gs, name, child)
    {
        char sub[256];
        snprintf(sub, sizeof sub, "%s.graders.%s", at, name);
        if (!check_one(c, child, sub, depth + 1))
            return false;
    }
    const char *calc = json_string_value(json_object_get(g, "calculate_output"));
    if (!calc)
        return bad(c, at, "calculate_output",
                   "calculate_output is required: a formula over the graders' names.");
    struct formula *f = malloc(sizeof *f);
    if (!f)
        return bad(c, at, "calculate_output", "out of memory");
    char why[200];
    bool ok = formula_parse(calc, f, why, sizeof why);
    if (!ok) {
        bad(c, at, "calculate_output", "%s.", why);
    } else {
        struct names n = {.graders = gs};
        ok = formula_each_name(f, name_known, &n);
        if (!ok)
            bad(c, at, "calculate_output",
                "calculate_output reads \"%s\", which is none of the graders' names.",
                n.bad_name);
    }
    free(f);
    return ok;
}

static bool check_one(struct check *c, const json_t *g, const char *at, int depth)
{
    if (!json_is_object(g))
        return bad(c, at, NULL, "a grader is an object with a type.");
    const char *type = json_string_value(json_object_get(g, "type"));
    if (!type)
        return bad(c, at, "type", "a grader has a type.");
    const json_t *name = json_object_get(g, "name");
    if (name && !json_is_string(name))
        return bad(c, at, "name", "name must be a string.");
    if (strcmp(type, "string_check") == 0)
        return check_string_check(c, g, at);
    if (strcmp(type, "text_similarity") == 0)
        return check_text_similarity(c, g, at);
    if (strcmp(type, "score_model") == 0)
        return check_score_model(c, g, at);
    if (strcmp(type, "multi") == 0) {
        if (depth + 1 >= GRADER_MAX_DEPTH)
            return bad(c, at, "type", "a multi grader's graders may not be multi themselves.");
        return check_multi(c, g, at, depth);
    }
    if (strcmp(type, "python") == 0)
        return check_python(c, g, at);
    if (strcmp(type, "label_model") == 0)
        return bad(c, at, "type",
                   "label_model graders are not run by alallo: use score_model, whose reply is "
                   "a number.");
    return bad(c, at, "type",
               "type must be \"string_check\", \"text_similarity\", \"score_model\", "
               "\"python\" or \"multi\".");
}

bool grader_check(const json_t *g, const char *at, char *param, size_t paramcap, char *msg,
                  size_t msgcap)
{
    struct check c = {.param = param, .paramcap = paramcap, .msg = msg, .msgcap = msgcap};
    return check_one(&c, g, at, 0);
}

/* How many times t reads the answer ({{sample.output_text}}, spaces
 * allowed inside the braces). */
static int answer_reads(const char *t)
{
    int n = 0;
    for (const char *p = t ? strstr(t, "{{") : NULL; p; p = strstr(p, "{{")) {
        char var[PATH_MAX_LEN];
        const char *end;
        if (!tag(p + 2, var, sizeof var, &end))
            break;
        n += strcmp(var, "sample.output_text") == 0;
        p = end;
    }
    return n;
}

bool grader_each_leaf(const json_t *g, const char *at,
                      bool (*fn)(void *ctx, const json_t *leaf, const char *at), void *ctx)
{
    const char *type = json_string_value(json_object_get(g, "type"));
    if (!type || strcmp(type, "multi") != 0)
        return fn(ctx, g, at);
    const char *name;
    json_t *child;
    json_object_foreach(json_object_get(g, "graders"), name, child)
    {
        char sub[256];
        snprintf(sub, sizeof sub, "%s.graders.%s", at, name);
        if (!grader_each_leaf(child, sub, fn, ctx))
            return false;
    }
    return true;
}

struct model_walk {
    bool (*fn)(void *ctx, const struct grader_ask *a);
    void *ctx;
};

/* grader_each_model's step: a score_model grader's ask, to fn. */
static bool ask_of(void *ctx, const json_t *g, const char *at)
{
    struct model_walk *w = ctx;
    const char *type = json_string_value(json_object_get(g, "type"));
    if (!type || strcmp(type, "score_model") != 0)
        return true;
    char param[256];
    snprintf(param, sizeof param, "%s.model", at);
    struct grader_ask a = {.model = json_string_value(json_object_get(g, "model")),
                           .param = param,
                           .max_tokens = GRADER_MODEL_DEFAULT_TOKENS};
    const json_t *in = json_object_get(g, "input");
    for (size_t i = 0; i < json_array_size(in); i++) {
        const char *content = content_of(json_array_get(in, i));
        a.template_bytes += content ? strlen(content) : 0;
        a.answer_reads += answer_reads(content);
        a.messages++;
    }
    const json_t *mt =
        json_object_get(json_object_get(g, "sampling_params"), "max_completions_tokens");
    if (json_is_integer(mt))
        a.max_tokens = (int)json_integer_value(mt);
    return w->fn(w->ctx, &a);
}

bool grader_each_model(const json_t *g, const char *at,
                       bool (*fn)(void *ctx, const struct grader_ask *a), void *ctx)
{
    struct model_walk w = {fn, ctx};
    return grader_each_leaf(g, at, ask_of, &w);
}

/* ------------------------------------------------------------ item fields */

static bool template_fields(const char *t, const json_t *item, char *field, size_t cap)
{
    for (const char *p = t ? strstr(t, "{{") : NULL; p; p = strstr(p, "{{")) {
        char var[PATH_MAX_LEN];
        const char *end;
        if (!tag(p + 2, var, sizeof var, &end))
            return true;
        const char *path = item_path(var);
        if (path && *path && !item_get(item, path)) {
            text_copy(field, cap, path);
            return false;
        }
        p = end;
    }
    return true;
}

bool grader_item_has_fields(const json_t *g, const json_t *item, char *field, size_t cap)
{
    const char *type = json_string_value(json_object_get(g, "type"));
    if (!type)
        return true;
    if (strcmp(type, "multi") == 0) {
        const char *name;
        json_t *child;
        json_object_foreach(json_object_get(g, "graders"), name, child)
        {
            if (!grader_item_has_fields(child, item, field, cap))
                return false;
        }
        return true;
    }
    if (strcmp(type, "score_model") == 0) {
        const json_t *in = json_object_get(g, "input");
        for (size_t i = 0; i < json_array_size(in); i++)
            if (!template_fields(content_of(json_array_get(in, i)), item, field, cap))
                return false;
        return true;
    }
    return template_fields(json_string_value(json_object_get(g, "input")), item, field, cap) &&
           template_fields(json_string_value(json_object_get(g, "reference")), item, field, cap);
}

/* ------------------------------------------------------------ running */

/* Whether needle occurs in hay, letters compared without case when fold. */
static bool contains(const char *hay, const char *needle, bool fold)
{
    size_t n = strlen(needle);
    for (const char *p = hay;; p++) {
        if ((fold ? strncasecmp(p, needle, n) : strncmp(p, needle, n)) == 0)
            return true;
        if (!*p)
            return false;
    }
}

/* Renders field `field` of g into *out. */
static bool render_field(const json_t *g, const char *field, const char *sample,
                         const json_t *item, char **out, char *err, size_t errcap)
{
    char why[300];
    if (grader_render(json_string_value(json_object_get(g, field)), sample, item, out, why,
                      sizeof why))
        return true;
    text_error(err, errcap, "%s: %s", field, why);
    return false;
}

static bool run_two(const json_t *g, const char *type, const char *sample, const json_t *item,
                    double *score, char *err, size_t errcap)
{
    char *in = NULL, *ref = NULL;
    bool ok = render_field(g, "input", sample, item, &in, err, errcap) &&
              render_field(g, "reference", sample, item, &ref, err, errcap);
    if (ok && strcmp(type, "string_check") == 0) {
        const char *op = json_string_value(json_object_get(g, "operation"));
        bool hit = strcmp(op, "eq") == 0     ? strcmp(in, ref) == 0
                   : strcmp(op, "ne") == 0   ? strcmp(in, ref) != 0
                   : strcmp(op, "like") == 0 ? contains(in, ref, false)
                                             : contains(in, ref, true);
        *score = hit ? 1.0 : 0.0;
    } else if (ok) {
        enum grader_metric m = GRADER_FUZZY;
        (void)grader_metric_parse(json_string_value(json_object_get(g, "evaluation_metric")), &m);
        *score = grader_text_score(m, in, ref);
    }
    free(in);
    free(ref);
    return ok;
}

/* The first number in s (a sign, digits, a point), or NAN. */
static double first_number(const char *s)
{
    for (const char *p = s; *p; p++) {
        bool digit = *p >= '0' && *p <= '9';
        bool signed_digit = (*p == '-' || *p == '+' || *p == '.') && p[1] >= '0' && p[1] <= '9';
        if (digit || signed_digit) {
            char *end;
            double v = strtod(p, &end);
            if (end != p && isfinite(v))
                return v;
        }
    }
    return NAN;
}

static bool run_model(const json_t *g, const char *sample, const json_t *item,
                      const struct grader_model *mdl, struct grader_result *res, double *score,
                      char *err, size_t errcap)
{
    if (!mdl || !mdl->fn) {
        text_error(err, errcap, "no model is at hand to run a score_model grader here");
        return false;
    }
    json_t *msgs = json_array();
    const json_t *in = json_object_get(g, "input");
    for (size_t i = 0; i < json_array_size(in); i++) {
        const json_t *m = json_array_get(in, i);
        char *text;
        char why[300];
        if (!grader_render(content_of(m), sample, item, &text, why, sizeof why)) {
            text_error(err, errcap, "input[%zu]: %s", i, why);
            json_decref(msgs);
            return false;
        }
        const char *role = json_string_value(json_object_get(m, "role"));
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role",
                                              strcmp(role, "developer") == 0 ? "system" : role,
                                              "content", text));
        free(text);
    }
    const json_t *sp = json_object_get(g, "sampling_params");
    json_t *sampling = json_is_object(sp) ? json_incref((json_t *)sp) : json_object();
    char *reply = NULL;
    int rc = mdl->fn(mdl->ctx, json_string_value(json_object_get(g, "model")), msgs, sampling,
                     &reply, err, errcap);
    json_decref(msgs);
    json_decref(sampling);
    res->model_calls++;
    if (rc != 0) {
        free(reply);
        return false;
    }
    double lo = 0, hi = 1;
    const json_t *r = json_object_get(g, "range");
    if (json_is_array(r)) {
        lo = json_number_value(json_array_get(r, 0));
        hi = json_number_value(json_array_get(r, 1));
    }
    double v = first_number(reply ? reply : "");
    free(reply);
    *score = isnan(v) ? lo : v < lo ? lo : v > hi ? hi : v;
    return true;
}

static bool run_one(const json_t *g, const char *sample, const json_t *item,
                    const struct grader_model *mdl, struct grader_result *res, double *score,
                    char *err, size_t errcap);

struct scores {
    const json_t *values;
};

static double score_of(void *ctx, const char *name)
{
    struct scores *s = ctx;
    return json_number_value(json_object_get(s->values, name));
}

static bool run_multi(const json_t *g, const char *sample, const json_t *item,
                      const struct grader_model *mdl, struct grader_result *res, double *score,
                      char *err, size_t errcap)
{
    json_t *values = json_object();
    const char *name;
    json_t *child;
    json_object_foreach(json_object_get(g, "graders"), name, child)
    {
        double v;
        char why[300];
        if (!run_one(child, sample, item, mdl, res, &v, why, sizeof why)) {
            text_error(err, errcap, "grader %s: %s", name, why);
            json_decref(values);
            return false;
        }
        json_object_set_new(values, name, json_real(v));
    }
    struct formula *f = malloc(sizeof *f);
    bool ok = f && formula_parse(json_string_value(json_object_get(g, "calculate_output")), f,
                                 err, errcap);
    struct scores s = {values};
    ok = ok && formula_eval(f, score_of, &s, score, err, errcap);
    free(f);
    if (ok && !res->sub_rewards)
        res->sub_rewards = json_incref(values);
    json_decref(values);
    return ok;
}

static bool run_one(const json_t *g, const char *sample, const json_t *item,
                    const struct grader_model *mdl, struct grader_result *res, double *score,
                    char *err, size_t errcap)
{
    const char *type = json_string_value(json_object_get(g, "type"));
    if (!type) {
        text_error(err, errcap, "a grader has a type");
        return false;
    }
    if (strcmp(type, "string_check") == 0 || strcmp(type, "text_similarity") == 0)
        return run_two(g, type, sample, item, score, err, errcap);
    if (strcmp(type, "score_model") == 0)
        return run_model(g, sample, item, mdl, res, score, err, errcap);
    if (strcmp(type, "multi") == 0)
        return run_multi(g, sample, item, mdl, res, score, err, errcap);
    if (strcmp(type, "python") == 0) {
        struct sandbox_limits lim = sandbox_default_limits();
        return grader_python_run(json_string_value(json_object_get(g, "source")), sample, item,
                                 &lim, score, err, errcap);
    }
    text_error(err, errcap, "graders of type %s are not run here", type);
    return false;
}

bool grader_run(const json_t *g, const char *sample, const json_t *item,
                const struct grader_model *mdl, struct grader_result *out, char *err,
                size_t errcap)
{
    memset(out, 0, sizeof *out);
    double v = 0;
    if (!run_one(g, sample ? sample : "", item, mdl, out, &v, err, errcap)) {
        json_decref(out->sub_rewards);
        out->sub_rewards = NULL;
        return false;
    }
    out->reward = v;
    return true;
}
