/* data.c - JSONL data set -> token ids and loss masks (data.h).
 *
 * Validation is core/dataset.c's, walked with dataset_each, so the trainer
 * reports a bad line with the very words the upload check uses. This file
 * adds the text template and the truncation rule, both documented in
 * docs/data.md:
 *
 *   prompt/completion:  BOS  prompt  completion  EOS
 *   chat:               BOS  "System:\n" content  "\n\nUser:\n" content
 *                       "\n\nAssistant:\n" content EOS  ...
 *
 * Loss falls on completion / assistant tokens and the EOS closing each.
 * Every segment (header, content) is tokenized on its own, so a content's
 * tokens never depend on what precedes it.
 */
#include "train/data/data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/rng.h"
#include "core/dataset.h"
#include "core/text.h"
#include "train/tokenizer/chat_format.h"

#define DATA_MAX_FILE ((size_t)4 << 30)
#define DATA_MIN_CONTEXT 4

/* Role headers: the first message's, and every later one's (which carries
 * the blank line that separates messages). */
static const char *const header_first[] = {"System:\n", "User:\n", "Assistant:\n", "Tool:\n"};
static const char *const header_next[] = {"\n\nSystem:\n", "\n\nUser:\n", "\n\nAssistant:\n",
                                          "\n\nTool:\n"};

struct seq {
    int32_t *ids;
    uint8_t *mask;
    size_t n, cap;
};

struct loader {
    const struct tokenizer *tok;
    const struct chat_format *fmt; /* the model's chat template, or NULL */
    const char *fmt_err;           /* why the model's template cannot be used, or NULL */
    char why[300];                 /* what the template said, when it failed */
    size_t max_len;
    const char *name;
    struct dataset *d;
    size_t cap; /* of d->ex */
    struct seq s;
    char *err;
    size_t errcap;
};

static int seq_push(struct seq *s, int32_t id, uint8_t m)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        int32_t *ids = realloc(s->ids, cap * sizeof *ids);
        if (!ids)
            return -1;
        s->ids = ids;
        uint8_t *mask = realloc(s->mask, cap);
        if (!mask)
            return -1;
        s->mask = mask;
        s->cap = cap;
    }
    s->ids[s->n] = id;
    s->mask[s->n] = m;
    s->n++;
    return 0;
}

/* Tokenizes `len` bytes of text and appends them with mask m. */
static int seq_text(struct seq *s, const struct tokenizer *tok, const char *text, size_t len,
                    uint8_t m)
{
    if (len == 0)
        return 0;
    int32_t *ids;
    size_t n;
    if (tokenizer_encode(tok, text, len, &ids, &n) < 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = seq_push(s, ids[i], m);
    free(ids);
    return rc;
}

/* A chat example through the model's own template (chat_format.h). */
static int render_template(struct loader *L, const struct dataset_example *ex, struct seq *s)
{
    int32_t *ids;
    uint8_t *mask;
    size_t n;
    if (chat_format_encode(L->fmt, L->tok, ex->messages, ex->tools, &ids, &mask, &n, L->why,
                           sizeof L->why) < 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = seq_push(s, ids[i], mask[i]);
    free(ids);
    free(mask);
    if (rc)
        snprintf(L->why, sizeof L->why, "out of memory");
    return rc;
}

/* The whole example per the template, before truncation. */
static int render(struct loader *L, const struct dataset_example *ex, struct seq *s)
{
    const struct tokenizer *tok = L->tok;
    s->n = 0;
    snprintf(L->why, sizeof L->why, "could not be tokenized (out of memory)");
    if (L->fmt_err && ex->form == DATASET_CHAT) {
        snprintf(L->why, sizeof L->why, "the model's chat template cannot be used: %s", L->fmt_err);
        return -1;
    }
    if (L->fmt && ex->form == DATASET_CHAT)
        return render_template(L, ex, s);
    int bos = tokenizer_bos_id(tok), eos = tokenizer_eos_id(tok);
    if (bos >= 0 && seq_push(s, bos, 0) < 0)
        return -1;
    if (ex->form == DATASET_PROMPT_COMPLETION) {
        if (seq_text(s, tok, ex->prompt, ex->prompt_len, 0) < 0 ||
            seq_text(s, tok, ex->completion, ex->completion_len, 1) < 0)
            return -1;
        return eos >= 0 ? seq_push(s, eos, 1) : 0;
    }
    for (size_t i = 0; i < ex->n_turns; i++) {
        const struct dataset_turn *t = &ex->turns[i];
        const char *h = i == 0 ? header_first[t->role] : header_next[t->role];
        uint8_t target = t->role == DATASET_ASSISTANT;
        if (seq_text(s, tok, h, strlen(h), 0) < 0 || seq_text(s, tok, t->text, t->len, target) < 0)
            return -1;
        if (target && eos >= 0 && seq_push(s, eos, 1) < 0)
            return -1;
    }
    return 0;
}

/* The truncation rule of docs/data.md: BOS stays; of what precedes the first
 * target token, the end is kept, up to half the context; the rest of the
 * context goes to the targets from their start (and back to the preceding
 * text when the targets are shorter). Returns the window as [lo, hi) of
 * s after BOS; *cut is set when anything was dropped. */
static void window(const struct seq *s, int has_bos, size_t max_len, size_t *lo, size_t *hi,
                   int *cut)
{
    size_t b = has_bos ? 1 : 0;
    *lo = b;
    *hi = s->n;
    *cut = 0;
    if (s->n <= max_len)
        return;
    *cut = 1;
    size_t f = b;
    while (f < s->n && !s->mask[f])
        f++;
    size_t budget = max_len - b;
    size_t ctx_avail = f - b, tgt_avail = s->n - f;
    size_t ctx_keep = ctx_avail < budget / 2 ? ctx_avail : budget / 2;
    size_t tgt_keep = tgt_avail < budget - ctx_keep ? tgt_avail : budget - ctx_keep;
    ctx_keep = ctx_avail < budget - tgt_keep ? ctx_avail : budget - tgt_keep;
    *lo = f - ctx_keep;
    *hi = f + tgt_keep;
}

static int add_example(struct loader *L, long line, const struct dataset_example *ex);

/* The input's messages followed by one answer, as JSON for a chat
 * template (NULL when out of memory). */
static json_t *pair_messages(const struct dataset_example *ex, const json_t *answer)
{
    json_t *msgs = json_copy((json_t *)ex->messages);
    if (msgs && json_array_append((json_t *)msgs, (json_t *)answer) < 0) {
        json_decref(msgs);
        return NULL;
    }
    return msgs;
}

/* A preference pair becomes two examples side by side: the input's
 * messages followed by the preferred answer (ex[2i]), then by the other
 * (ex[2i+1]); the loss mask covers each answer (data.h). Through the
 * model's chat template when it has one, as chat examples are. */
static int add_pair(struct loader *L, long line, const struct dataset_example *ex)
{
    struct dataset_turn *turns = malloc((ex->n_turns + 1) * sizeof *turns);
    json_t *msgs_a = ex->messages ? pair_messages(ex, ex->preferred_msg) : NULL;
    json_t *msgs_b = ex->messages ? pair_messages(ex, ex->non_preferred_msg) : NULL;
    if (!turns || (ex->messages && (!msgs_a || !msgs_b))) {
        free(turns);
        json_decref(msgs_a);
        json_decref(msgs_b);
        text_error(L->err, L->errcap, "line %ld of %s: out of memory", line, L->name);
        return 1;
    }
    memcpy(turns, ex->turns, ex->n_turns * sizeof *turns);
    struct dataset_example one = {.form = DATASET_CHAT, .turns = turns,
                                  .n_turns = ex->n_turns + 1, .messages = msgs_a,
                                  .tools = ex->tools};
    turns[ex->n_turns] = (struct dataset_turn){DATASET_ASSISTANT, ex->preferred,
                                               ex->preferred_len};
    int rc = add_example(L, line, &one);
    turns[ex->n_turns] = (struct dataset_turn){DATASET_ASSISTANT, ex->non_preferred,
                                               ex->non_preferred_len};
    one.messages = msgs_b;
    if (rc == 0)
        rc = add_example(L, line, &one);
    free(turns);
    json_decref(msgs_a);
    json_decref(msgs_b);
    L->d->pairs = 1;
    return rc;
}

static int on_example(void *ctx, long line, const struct dataset_example *ex)
{
    struct loader *L = ctx;
    if (ex->form == DATASET_PREFERENCE)
        return add_pair(L, line, ex);
    if (ex->form == DATASET_REINFORCEMENT) {
        text_error(L->err, L->errcap,
                   "line %ld of %s: a prompt for reinforcement fine-tuning, with no answer to "
                   "train on: train on it with method \"reinforcement\"",
                   line, L->name);
        return 1;
    }
    return add_example(L, line, ex);
}

static int add_example(struct loader *L, long line, const struct dataset_example *ex)
{
    struct dataset *d = L->d;
    if (render(L, ex, &L->s) < 0) {
        text_error(L->err, L->errcap, "line %ld of %s: %s", line, L->name, L->why);
        return 1;
    }
    /* A chat template decides itself whether the text starts with BOS. */
    int bos = tokenizer_bos_id(L->tok);
    int has_bos = bos >= 0 && L->s.n > 0 && L->s.ids[0] == bos;
    size_t lo, hi;
    int cut;
    window(&L->s, has_bos, L->max_len, &lo, &hi, &cut);
    size_t b = has_bos ? 1 : 0;
    size_t len = b + (hi - lo);
    if (d->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 64;
        struct example *e = realloc(d->ex, cap * sizeof *e);
        if (!e)
            goto oom;
        d->ex = e;
        L->cap = cap;
    }
    struct example *e = &d->ex[d->n];
    e->ids = malloc(len * sizeof *e->ids);
    e->mask = malloc(len);
    e->len = len;
    if (!e->ids || !e->mask) {
        free(e->ids);
        free(e->mask);
        goto oom;
    }
    if (has_bos) {
        e->ids[0] = L->s.ids[0];
        e->mask[0] = 0;
    }
    memcpy(e->ids + b, L->s.ids + lo, (hi - lo) * sizeof *e->ids);
    memcpy(e->mask + b, L->s.mask + lo, hi - lo);
    d->n++;
    d->n_tokens += len;
    d->n_truncated += (size_t)cut;
    return 0;
oom:
    text_error(L->err, L->errcap, "line %ld of %s: out of memory", line, L->name);
    return 1;
}

struct dataset *dataset_load(const char *path, const char *display_name,
                             const struct tokenizer *tok, size_t max_len, char *err,
                             size_t errcap)
{
    return dataset_load_chat(path, display_name, tok, NULL, NULL, max_len, err, errcap);
}

struct dataset *dataset_load_chat(const char *path, const char *display_name,
                                  const struct tokenizer *tok, const struct chat_format *fmt,
                                  const char *fmt_err, size_t max_len, char *err, size_t errcap)
{
    const char *name = display_name ? display_name : path;
    if (max_len < DATA_MIN_CONTEXT) {
        text_error(err, errcap, "context length %zu is too short (at least %d)", max_len,
               DATA_MIN_CONTEXT);
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        text_error(err, errcap, "%s: cannot read (%s)", name, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || (size_t)sb.st_size > DATA_MAX_FILE) {
        text_error(err, errcap, "%s: not a regular file of at most 4 GiB", name);
        close(fd);
        return NULL;
    }
    size_t size = (size_t)sb.st_size;
    void *map = NULL;
    if (size > 0) {
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            text_error(err, errcap, "%s: cannot read (%s)", name, strerror(errno));
            close(fd);
            return NULL;
        }
    }
    close(fd);
    struct dataset *d = dataset_from_buffer(map ? map : "", size, name, tok, fmt, fmt_err,
                                            max_len, err, errcap);
    if (map)
        munmap(map, size);
    return d;
}

struct dataset *dataset_from_buffer(const char *buf, size_t len, const char *name,
                                    const struct tokenizer *tok, const struct chat_format *fmt,
                                    const char *fmt_err, size_t max_len, char *err,
                                    size_t errcap)
{
    struct dataset *d = calloc(1, sizeof *d);
    struct loader L = {.tok = tok, .fmt = fmt, .fmt_err = fmt_err, .max_len = max_len, .name = name, .d = d, .err = err,
                       .errcap = errcap};
    int rc = -1;
    if (!d) {
        text_error(err, errcap, "%s: out of memory", name);
    } else {
        struct dataset_check c;
        rc = dataset_each(buf, len, on_example, &L, &c);
        if (rc < 0)
            dataset_check_error(&c, name, err, errcap);
    }
    free(L.s.ids);
    free(L.s.mask);
    if (rc != 0) {
        dataset_free(d);
        return NULL;
    }
    return d;
}

void dataset_free(struct dataset *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n; i++) {
        free(d->ex[i].ids);
        free(d->ex[i].mask);
    }
    free(d->ex);
    free(d);
}

struct dataset *dataset_split_off(struct dataset *d, double share, uint64_t seed)
{
    if (!d || d->n < 2 || d->pairs || !(share > 0.0 && share < 1.0))
        return NULL;
    size_t k = (size_t)llround(share * (double)d->n);
    k = k < 1 ? 1 : k > d->n - 1 ? d->n - 1 : k;
    struct dataset *v = calloc(1, sizeof *v);
    uint8_t *take = calloc(d->n, 1);
    struct example *ex = v && take ? malloc(k * sizeof *ex) : NULL;
    if (!ex) {
        free(v);
        free(take);
        return NULL;
    }
    /* k distinct indices: a partial Fisher-Yates over 0..n */
    size_t *idx = malloc(d->n * sizeof *idx);
    if (!idx) {
        free(v);
        free(take);
        free(ex);
        return NULL;
    }
    for (size_t i = 0; i < d->n; i++)
        idx[i] = i;
    struct rng g;
    rng_seed(&g, rng_derive(seed, 0x7a1dULL));
    for (size_t i = 0; i < k; i++) {
        size_t j = i + (size_t)rng_below(&g, (uint64_t)(d->n - i));
        size_t t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
        take[idx[i]] = 1;
    }
    free(idx);
    size_t kept = 0, moved = 0;
    for (size_t i = 0; i < d->n; i++) {
        if (take[i]) {
            ex[moved++] = d->ex[i];
            v->n_tokens += d->ex[i].len;
            d->n_tokens -= d->ex[i].len;
        } else {
            d->ex[kept++] = d->ex[i];
        }
    }
    free(take);
    d->n = kept;
    v->ex = ex;
    v->n = moved;
    return v;
}

/* Hands s's ids to the caller (a valid pointer even for no tokens). */
static int finish(struct seq *s, int rc, int32_t **ids, size_t *n)
{
    free(s->mask);
    if (rc == 0 && !s->ids && !(s->ids = malloc(sizeof *s->ids)))
        rc = -1;
    if (rc < 0) {
        free(s->ids);
        return -1;
    }
    *ids = s->ids;
    *n = s->n;
    return 0;
}

int data_encode_prompt(const struct tokenizer *tok, const char *prompt, int32_t **ids, size_t *n)
{
    struct seq s = {0};
    int bos = tokenizer_bos_id(tok);
    int rc = 0;
    if (bos >= 0)
        rc = seq_push(&s, bos, 0);
    if (rc == 0)
        rc = seq_text(&s, tok, prompt, strlen(prompt), 0);
    return finish(&s, rc, ids, n);
}

int data_encode_chat(const struct tokenizer *tok, const struct dataset_turn *turns,
                     size_t n_turns, int32_t **ids, size_t *n)
{
    struct seq s = {0};
    int bos = tokenizer_bos_id(tok), eos = tokenizer_eos_id(tok);
    int rc = bos >= 0 ? seq_push(&s, bos, 0) : 0;
    for (size_t i = 0; i < n_turns && rc == 0; i++) {
        const struct dataset_turn *t = &turns[i];
        if ((unsigned)t->role > DATASET_TOOL) {
            rc = -1;
            break;
        }
        const char *h = i == 0 ? header_first[t->role] : header_next[t->role];
        rc = seq_text(&s, tok, h, strlen(h), 0);
        if (rc == 0)
            rc = seq_text(&s, tok, t->text, t->len, 0);
        if (rc == 0 && t->role == DATASET_ASSISTANT && eos >= 0)
            rc = seq_push(&s, eos, 0);
    }
    if (rc == 0) {
        const char *h = n_turns == 0 ? header_first[DATASET_ASSISTANT]
                                     : header_next[DATASET_ASSISTANT];
        rc = seq_text(&s, tok, h, strlen(h), 0);
    }
    return finish(&s, rc, ids, n);
}
