/* dump_dpo.c - `alallo train --dump-dpo`: one DPO step on given preference
 * pairs, dumped for tests/torch/dpo_reference.py to recompute in PyTorch.
 *
 *   alallo train --dump-dpo --model-dir DIR --ref-dir DIR --beta B
 *                --pairs P/C/R;P/C/R... --out FILE.safetensors
 *
 * P, C, R are comma-separated token ids: the input, the preferred and the
 * other answer. The policy (DIR, full fine-tuning) runs the pairs packed
 * into rows as training does; the reference (a second folder here, so that
 * the reference's part of the loss is not trivially zero) gives each
 * sequence's log-probability as training computes it. Written, all F32:
 * "loss" (1), "logp" and "ref_logp" (2 per pair: preferred, other) and
 * "grad.<tensor>" for every tensor.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/cmds/cmd_args.h"
#include "train/model/dpo.h"
#include "train/model/model.h"
#include "train/formats/modelio.h"
#include "train/data/pack.h"
#include "train/formats/safetensors.h"
#include "train/cmds/train_cmds.h"

#define MAX_PAIRS 16
#define MAX_PART 512

struct ex {
    int32_t ids[2 * MAX_PART];
    uint8_t mask[2 * MAX_PART];
    size_t len;
};

/* Appends comma-separated ids from s up to the first `stop` character. */
static const char *parse_part(const char *s, char stop, struct ex *e, uint8_t target, int vocab)
{
    size_t start = e->len;
    while (*s && *s != stop && *s != ';') {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v >= vocab || e->len - start >= MAX_PART)
            return NULL;
        e->ids[e->len] = (int32_t)v;
        e->mask[e->len++] = target;
        s = *end == ',' ? end + 1 : end;
    }
    return e->len > start ? s : NULL;
}

/* "P/C/R;..." into examples 2k (P+C) and 2k+1 (P+R). Returns the pair count or -1. */
static int parse_pairs(const char *s, struct ex *ex, int vocab)
{
    int n = 0;
    while (*s) {
        if (n == MAX_PAIRS)
            return -1;
        struct ex *c = &ex[2 * n], *r = &ex[2 * n + 1];
        c->len = r->len = 0;
        const char *p = parse_part(s, '/', c, 0, vocab);
        if (!p || *p != '/')
            return -1;
        r->len = c->len;
        memcpy(r->ids, c->ids, c->len * sizeof *c->ids);
        memcpy(r->mask, c->mask, c->len);
        const char *q = parse_part(p + 1, '/', c, 1, vocab);
        if (!q || *q != '/')
            return -1;
        q = parse_part(q + 1, ';', r, 1, vocab);
        if (!q)
            return -1;
        s = *q == ';' ? q + 1 : q;
        n++;
    }
    return n > 0 ? n : -1;
}

static int dump(const char *dir, const char *ref_dir, const char *pairs, double beta,
                const char *out)
{
    char err[1024];
    struct model_opts o = {.full = 1};
    struct model *m = modelio_load(dir, &o, err, sizeof err);
    struct model *ref = m ? modelio_load(ref_dir, &o, err, sizeof err) : NULL;
    static struct ex ex[2 * MAX_PAIRS];
    int rc = 1, n = -1;
    size_t N = 0;
    int32_t *ids = NULL, *seg = NULL;
    uint8_t *mask = NULL;
    double *tok = NULL;
    float *w = NULL;
    struct st_tensor *ts = NULL;
    struct model_acts *a = NULL;
    if (!m || !ref) {
        fprintf(stderr, "alallo train: %s\n", err);
        goto out;
    }
    n = parse_pairs(pairs, ex, m->cfg.vocab);
    if (n < 0) {
        fputs("alallo train: --pairs needs P/C/R;... of token ids in the vocabulary\n", stderr);
        goto out;
    }
    int n_ex = 2 * n;
    size_t len[2 * MAX_PAIRS], off[2 * MAX_PAIRS];
    int row[2 * MAX_PAIRS];
    for (int i = 0; i < n_ex; i++)
        len[i] = ex[i].len;
    int cap = m->cfg.max_pos < 2 * MAX_PART ? m->cfg.max_pos : 2 * MAX_PART;
    struct pack_layout p;
    if (pack_rows(len, n_ex, (size_t)cap, 1, row, off, &p) || model_rope_ensure(m, p.T) ||
        model_rope_ensure(ref, cap)) {
        fputs("alallo train: the pairs do not fit the model's context\n", stderr);
        goto out;
    }
    N = (size_t)p.rows * p.T;
    ids = calloc(N, sizeof *ids);
    seg = calloc(N, sizeof *seg);
    mask = calloc(N, 1);
    tok = calloc(N > (size_t)cap ? N : (size_t)cap, sizeof *tok);
    w = calloc(N, sizeof *w);
    ts = calloc((size_t)m->n_tensors + 3, sizeof *ts);
    a = model_acts_create(m, p.rows, p.T);
    if (!ids || !seg || !mask || !tok || !w || !ts || !a) {
        fputs("alallo train: out of memory\n", stderr);
        goto out;
    }
    /* the reference: each sequence alone, as its log-probability */
    double refl[2 * MAX_PAIRS], logp[2 * MAX_PAIRS];
    struct model_acts *ra = model_acts_create(ref, 1, cap);
    if (!ra) {
        fputs("alallo train: out of memory\n", stderr);
        goto out;
    }
    for (int i = 0; i < n_ex; i++) {
        size_t nt, zero = 0;
        int r0 = 0;
        model_token_losses(ref, ra, ex[i].ids, ex[i].mask, NULL, 1, (int)ex[i].len, tok, &nt);
        struct dpo_batch one = {.n_ex = 1, .row = &r0, .off = &zero, .len = &ex[i].len,
                                .T = (int)ex[i].len};
        dpo_example_logps(&one, tok, &refl[i]);
    }
    model_acts_free(ra);
    /* the policy: packed, as a training step */
    for (size_t i = 0; i < N; i++)
        seg[i] = (int32_t)(i % (size_t)p.T);
    for (int i = 0; i < n_ex; i++) {
        size_t at = (size_t)row[i] * p.T + off[i];
        memcpy(ids + at, ex[i].ids, len[i] * sizeof *ids);
        memcpy(mask + at, ex[i].mask, len[i]);
        mask[at] = 0;
        for (size_t t = 0; t < len[i]; t++)
            seg[at + t] = (int32_t)off[i];
    }
    struct dpo_batch b = {.n_ex = n_ex, .row = row, .off = off, .len = len, .T = p.T,
                          .ref = refl, .beta = beta};
    size_t got;
    memset(m->grad, 0, m->n_train * sizeof(float));
    model_forward_backward_weighted(m, a, ids, mask, seg, p.rows, p.T, dpo_batch_weights, &b,
                                    tok, w, &got);
    dpo_example_logps(&b, tok, logp);
    float loss = (float)b.st.loss, fl[2 * MAX_PAIRS], fr[2 * MAX_PAIRS];
    for (int i = 0; i < n_ex; i++) {
        fl[i] = (float)logp[i];
        fr[i] = (float)refl[i];
    }
    ts[0] = (struct st_tensor){.name = "loss", .dtype = ST_F32, .ndim = 1, .shape = {1},
                               .data = &loss, .nbytes = 4};
    ts[1] = (struct st_tensor){.name = "logp", .dtype = ST_F32, .ndim = 1, .shape = {n_ex},
                               .data = fl, .nbytes = (size_t)n_ex * 4};
    ts[2] = (struct st_tensor){.name = "ref_logp", .dtype = ST_F32, .ndim = 1, .shape = {n_ex},
                               .data = fr, .nbytes = (size_t)n_ex * 4};
    modelio_grad_tensors(m, ts + 3);
    if (st_write(out, ts, (size_t)m->n_tensors + 3, NULL, err, sizeof err)) {
        fprintf(stderr, "alallo train: %s\n", err);
        goto out;
    }
    printf("%d pairs in %d rows of %d: loss %.6f, reward margin %.6f\n", n, p.rows, p.T,
           b.st.loss, b.st.reward_margin);
    rc = 0;
out:
    free(ids);
    free(seg);
    free(mask);
    free(tok);
    free(w);
    free(ts);
    model_acts_free(a);
    model_free(ref);
    model_free(m);
    return rc;
}

int cmd_train_dump_dpo(int argc, char **argv)
{
    const char *dir = cmd_arg_value(argc, argv, "--model-dir");
    const char *ref = cmd_arg_value(argc, argv, "--ref-dir");
    const char *pairs = cmd_arg_value(argc, argv, "--pairs");
    const char *beta = cmd_arg_value(argc, argv, "--beta");
    const char *out = cmd_arg_value(argc, argv, "--out");
    double b = beta ? strtod(beta, NULL) : 0.1;
    if (!dir || !ref || !pairs || !out || !(b > 0)) {
        fputs("usage: alallo train --dump-dpo --model-dir DIR --ref-dir DIR --beta B "
              "--pairs P/C/R;... --out FILE\n",
              stderr);
        return 2;
    }
    return dump(dir, ref, pairs, b, out);
}
