/* rollout.c - many answers from one generator (see rollout.h). */
#include "train/run/rollout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/run/batcher.h"
#include "train/tokenizer/tokenizer.h"

/* What to call as answers are done or left out. */
struct calls {
    rollout_done_fn done;
    rollout_skip_fn skipped; /* NULL: an answer the model cannot answer fails all */
    void *ctx;
};

/* Whether rc is an answer the caller asked for and the model cannot give,
 * left out when there is someone to tell. */
static bool left_out(const struct calls *c, int i, int rc, const char *why)
{
    if (!c->skipped || (rc != GEN_TOO_LONG && rc != GEN_EMPTY && rc != GEN_BAD_CHAT))
        return false;
    c->skipped(c->ctx, i, rc, why);
    return true;
}

/* Answer r alone into *text and *tokens, as gen_run_chat, gen_run or
 * gen_ids gives it. Returns as they do. */
static int alone(struct generator *g, const struct rollout_req *r, char **text, int *tokens,
                 char *err, size_t errcap)
{
    if (!r->messages && !r->text) {
        int32_t *out = malloc(sizeof *out * (size_t)(r->opts.max_tokens > 0 ? r->opts.max_tokens
                                                                             : 1));
        if (!out) {
            snprintf(err, errcap, "out of memory for the answers");
            return -1;
        }
        const char *finish;
        int k = gen_ids(g, r->ids, r->n_ids, &r->opts, out, &finish, err, errcap);
        if (k >= 0) {
            *text = tokenizer_decode(gen_tokenizer(g), out, (size_t)k, 1);
            *tokens = k;
        }
        free(out);
        return k < 0 ? k : 0;
    }
    struct gen_result res;
    int rc = r->messages ? gen_run_chat(g, r->messages, r->tools, &r->opts, &res, err, errcap)
                         : gen_run(g, r->text, &r->opts, &res, err, errcap);
    if (rc == 0) {
        *text = strdup(res.text ? res.text : "");
        *tokens = res.completion_tokens;
    }
    gen_result_free(&res);
    return rc;
}

/* One after another, each alone. */
static int one_at_a_time(struct generator *g, const struct rollout_req *req, int n,
                         char **texts, int *tokens, const struct calls *c, char *err,
                         size_t errcap)
{
    for (int i = 0; i < n; i++) {
        int count = 0;
        int rc = alone(g, &req[i], &texts[i], &count, err, errcap);
        if (rc != 0 && left_out(c, i, rc, err))
            continue;
        if (rc != 0)
            return rc;
        if (tokens)
            tokens[i] = count;
        if (!texts[i]) {
            snprintf(err, errcap, "out of memory for the answers");
            return -1;
        }
        if (c->done)
            c->done(c->ctx, i);
    }
    return 0;
}

/* Answer i's sequence made ready in s (its prompt laid out). */
static int start(struct generator *g, const struct rollout_req *r, struct batch_seq *s,
                 char *err, size_t errcap)
{
    int32_t *ids = NULL;
    size_t len = 0;
    struct gen_stops stops;
    int rc;
    if (r->messages) {
        rc = gen_encode_chat(g, r->messages, r->tools, &ids, &len, &stops, err, errcap);
    } else if (r->text) {
        rc = gen_encode_prompt(g, r->text, &ids, &len, &stops, err, errcap);
    } else {
        len = r->n_ids > 0 ? (size_t)r->n_ids : 0;
        rc = gen_encode_ids(g, r->ids, len, &ids, &stops, err, errcap);
    }
    if (rc != 0) {
        free(ids);
        memset(s, 0, sizeof *s);
        return rc;
    }
    return batch_seq_start(s, g, NULL, ids, len, &stops, &r->opts, err, errcap);
}

/* All of them through the batcher, at most ROLLOUT_WIDTH at a time: the
 * running ones kept in the order they started, the next answer joining
 * as soon as one finishes. */
static int together(struct generator *g, const struct rollout_req *req, int n, char **texts,
                    int *tokens, const struct calls *c, char *err, size_t errcap)
{
    struct batch_seq *seqs = calloc((size_t)n, sizeof *seqs);
    struct batch_seq *run[ROLLOUT_WIDTH];
    struct batcher *b = batcher_new();
    int rc = -1, next = 0, live = 0, done = 0;
    if (!seqs || !b) {
        snprintf(err, errcap, "out of memory for the answers");
        goto out;
    }
    while (done < n) {
        while (live < ROLLOUT_WIDTH && next < n) {
            int s = start(g, &req[next], &seqs[next], err, errcap);
            if (s != 0 && left_out(c, next, s, err)) {
                next++;
                done++;
                continue;
            }
            if (s != 0) {
                rc = s;
                goto out;
            }
            run[live++] = &seqs[next++];
        }
        if (live == 0)
            break; /* the last ones were left out */
        if (batcher_step(b, run, live)) {
            snprintf(err, errcap, "out of memory for generation");
            goto out;
        }
        int kept = 0;
        for (int k = 0; k < live; k++) {
            struct batch_seq *s = run[k];
            if (!s->finish) {
                run[kept++] = s;
                continue;
            }
            int i = (int)(s - seqs);
            texts[i] = tokenizer_decode(gen_tokenizer(g), s->out, (size_t)s->n_out, 1);
            if (tokens)
                tokens[i] = s->n_out;
            batch_seq_end(s);
            done++;
            if (!texts[i]) {
                snprintf(err, errcap, "out of memory decoding");
                goto out;
            }
            if (c->done)
                c->done(c->ctx, i);
        }
        live = kept;
    }
    rc = 0;
out:
    for (int i = 0; seqs && i < n; i++)
        batch_seq_end(&seqs[i]);
    free(seqs);
    batcher_free(b);
    return rc;
}

static int run_all(struct generator *g, const struct rollout_req *req, int n, bool batched,
                   char **texts, int *tokens, const struct calls *c, char *err, size_t errcap)
{
    for (int i = 0; i < n; i++)
        texts[i] = NULL;
    return batched ? together(g, req, n, texts, tokens, c, err, errcap)
                   : one_at_a_time(g, req, n, texts, tokens, c, err, errcap);
}

int rollout_run_each(struct generator *g, const struct rollout_req *req, int n, bool batched,
                     char **texts, int *tokens, rollout_done_fn done, void *ctx, char *err,
                     size_t errcap)
{
    struct calls c = {.done = done, .ctx = ctx};
    return run_all(g, req, n, batched, texts, tokens, &c, err, errcap);
}

/* rc, after freeing the texts when it is a failure (nothing half-made is
 * handed back). */
static int texts_kept_on_success(int rc, char **texts, int n)
{
    for (int i = 0; rc != 0 && i < n; i++) {
        free(texts[i]);
        texts[i] = NULL;
    }
    return rc;
}

int rollout_run(struct generator *g, const struct rollout_req *req, int n, bool batched,
                char **texts, int *tokens, char *err, size_t errcap)
{
    int rc = rollout_run_each(g, req, n, batched, texts, tokens, NULL, NULL, err, errcap);
    return texts_kept_on_success(rc, texts, n);
}

int rollout_run_some(struct generator *g, const struct rollout_req *req, int n, bool batched,
                     char **texts, int *tokens, rollout_skip_fn skipped, void *ctx, char *err,
                     size_t errcap)
{
    struct calls c = {.skipped = skipped, .ctx = ctx};
    int rc = run_all(g, req, n, batched, texts, tokens, &c, err, errcap);
    return texts_kept_on_success(rc, texts, n);
}
