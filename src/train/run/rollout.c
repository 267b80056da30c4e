/* rollout.c - many answers from one generator (see rollout.h). */
#include "train/run/rollout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/run/batcher.h"
#include "train/tokenizer/tokenizer.h"

/* One after another, each through gen_run_chat. */
static int one_at_a_time(struct generator *g, const struct rollout_req *req, int n,
                         char **texts, int *tokens, rollout_done_fn done, void *ctx, char *err,
                         size_t errcap)
{
    for (int i = 0; i < n; i++) {
        struct gen_result res;
        int rc = gen_run_chat(g, req[i].messages, req[i].tools, &req[i].opts, &res, err, errcap);
        if (rc != 0)
            return rc;
        texts[i] = strdup(res.text ? res.text : "");
        if (tokens)
            tokens[i] = res.completion_tokens;
        gen_result_free(&res);
        if (!texts[i]) {
            snprintf(err, errcap, "out of memory for the answers");
            return -1;
        }
        if (done)
            done(ctx, i);
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
    int rc = gen_encode_chat(g, r->messages, r->tools, &ids, &len, &stops, err, errcap);
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
                    int *tokens, rollout_done_fn on_done, void *ctx, char *err, size_t errcap)
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
            if (s != 0) {
                rc = s;
                goto out;
            }
            run[live++] = &seqs[next++];
        }
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
            if (on_done)
                on_done(ctx, i);
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

int rollout_run_each(struct generator *g, const struct rollout_req *req, int n, bool batched,
                     char **texts, int *tokens, rollout_done_fn done, void *ctx, char *err,
                     size_t errcap)
{
    for (int i = 0; i < n; i++)
        texts[i] = NULL;
    return batched ? together(g, req, n, texts, tokens, done, ctx, err, errcap)
                   : one_at_a_time(g, req, n, texts, tokens, done, ctx, err, errcap);
}

int rollout_run(struct generator *g, const struct rollout_req *req, int n, bool batched,
                char **texts, int *tokens, char *err, size_t errcap)
{
    int rc = rollout_run_each(g, req, n, batched, texts, tokens, NULL, NULL, err, errcap);
    if (rc != 0)
        for (int i = 0; i < n; i++) {
            free(texts[i]);
            texts[i] = NULL;
        }
    return rc;
}
