/* cmd_train.c - `alallo train`: the trainer as a worker starts it, the
 * checkpoint materializer, and a hidden gradient dump for the PyTorch
 * comparison test (tests/torch/).
 *
 *   alallo train --config ATTEMPT.json
 *   alallo train --materialize CKPT_DIR --base MODEL_DIR --out DIR [--adapter-out DIR]
 *   alallo train --dump-grads --model-dir DIR --ids 1,2,3,... --out FILE.safetensors
 *   alallo train --dump-dpo ... (dump_dpo.c)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_cmds.h"
#include "train/cmd_args.h"
#include "train/omp_policy.h"
#include "train/model.h"
#include "train/modelio.h"
#include "train/safetensors.h"
#include "train/train_config.h"
#include "train/train_events.h"
#include "train/trainer.h"

#define MAX_DUMP_IDS 4096

static void usage(void)
{
    fputs("usage: alallo train --config ATTEMPT.json\n"
          "       alallo train --materialize CKPT_DIR --base MODEL_DIR --out DIR"
          " [--adapter-out DIR]\n",
          stderr);
}

/* Parses "1,2,3" into ids (at most cap). Returns the count, or -1. */
static int parse_ids(const char *s, int32_t *ids, int cap, int vocab)
{
    int n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v >= vocab || n == cap)
            return -1;
        ids[n++] = (int32_t)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return n;
}

/* Full fine-tuning mode, one sequence, every position after the first a
 * target: writes "loss" (1), "logits" (T,V) and "grad.<tensor>" for every
 * tensor, all F32, for tests/torch/reference.py to compare. */
static int dump_grads(const char *dir, const char *ids_s, const char *out)
{
    char err[1024];
    struct model_opts o = {.full = 1};
    struct model *m = modelio_load(dir, &o, err, sizeof err);
    if (!m) {
        fprintf(stderr, "alallo train: %s\n", err);
        return 1;
    }
    static int32_t ids[MAX_DUMP_IDS];
    static uint8_t mask[MAX_DUMP_IDS];
    int T = parse_ids(ids_s, ids, MAX_DUMP_IDS, m->cfg.vocab);
    int rc = 1;
    struct model_acts *a = NULL;
    float *logits = NULL;
    struct st_tensor *ts = NULL;
    if (T < 2 || T > m->cfg.max_pos || model_rope_ensure(m, T)) {
        fprintf(stderr, "alallo train: --ids needs 2 to max_position_embeddings ids in the "
                        "vocabulary\n");
        goto out;
    }
    for (int t = 0; t < T; t++)
        mask[t] = t > 0;
    a = model_acts_create(m, 1, T);
    logits = malloc((size_t)T * m->cfg.vocab * sizeof(float));
    ts = calloc((size_t)m->n_tensors + 2, sizeof *ts);
    if (!a || !logits || !ts) {
        fprintf(stderr, "alallo train: out of memory\n");
        goto out;
    }
    size_t nt = model_count_targets(mask, 1, T), got;
    float loss = (float)(model_forward_backward(m, a, ids, mask, 1, T, 1.0f / (float)nt, 1, &got) /
                         (double)nt);
    model_forward_logits(m, a, ids, 1, T, logits);
    ts[0] = (struct st_tensor){.name = "loss", .dtype = ST_F32, .ndim = 1, .shape = {1},
                               .data = &loss, .nbytes = 4};
    ts[1] = (struct st_tensor){.name = "logits", .dtype = ST_F32, .ndim = 2,
                               .shape = {T, m->cfg.vocab}, .data = logits,
                               .nbytes = (size_t)T * m->cfg.vocab * 4};
    modelio_grad_tensors(m, ts + 2);
    if (st_write(out, ts, (size_t)m->n_tensors + 2, NULL, err, sizeof err)) {
        fprintf(stderr, "alallo train: %s\n", err);
        goto out;
    }
    rc = 0;
out:
    free(ts);
    free(logits);
    model_acts_free(a);
    model_free(m);
    return rc;
}

int cmd_train(int argc, char **argv)
{
    omp_policy_passive(argc, argv);
    tev_init();
    const char *config = cmd_arg_value(argc, argv, "--config");
    const char *ckpt = cmd_arg_value(argc, argv, "--materialize");
    if (cmd_has_flag(argc, argv, "--dump-dpo"))
        return cmd_train_dump_dpo(argc, argv);
    if (cmd_has_flag(argc, argv, "--dump-grads")) {
        const char *dir = cmd_arg_value(argc, argv, "--model-dir");
        const char *ids = cmd_arg_value(argc, argv, "--ids");
        const char *out = cmd_arg_value(argc, argv, "--out");
        if (!dir || !ids || !out) {
            fputs("usage: alallo train --dump-grads --model-dir DIR --ids 1,2,... --out FILE\n",
                  stderr);
            return 2;
        }
        return dump_grads(dir, ids, out);
    }
    if (ckpt) {
        const char *base = cmd_arg_value(argc, argv, "--base");
        const char *out = cmd_arg_value(argc, argv, "--out");
        if (!base || !out) {
            usage();
            return 2;
        }
        char err[2048];
        if (trainer_materialize(ckpt, base, out, cmd_arg_value(argc, argv, "--adapter-out"), err,
                                sizeof err)) {
            fprintf(stderr, "alallo train: %s\n", err);
            return 1;
        }
        return 0;
    }
    if (!config) {
        usage();
        return 2;
    }
    struct train_config *c = malloc(sizeof *c);
    char err[1024];
    if (!c) {
        tev_error(0, "out of memory");
        return TRAIN_INTERNAL;
    }
    if (train_config_load(config, c, err, sizeof err)) {
        tev_error(1, err);
        free(c);
        return TRAIN_USER;
    }
    int rc = trainer_run(c);
    free(c);
    return rc;
}
