/* cmd_train.c - `alallo train`: the trainer as a worker starts it, the
 * checkpoint materializer, and a hidden gradient dump for the PyTorch
 * comparison test (tests/torch/).
 *
 *   alallo train --config ATTEMPT.json
 *   alallo train --materialize CKPT_DIR --base MODEL_DIR --out DIR [--adapter-out DIR]
 *   alallo train --dump-grads --model-dir DIR --ids 1,2,3,... --out FILE.safetensors
 *                [--lora-rank R] [--precision 16-bit|4-bit] [--device cpu|cuda]
 *   alallo train --dump-dpo ... (dump_dpo.c)
 *   alallo train --dump-grpo ... (dump_grpo.c)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cmd_help.h"
#include "core/rng.h"
#include "train/cmds/train_cmds.h"
#include "train/cmds/cmd_args.h"
#include "train/kernels/omp_policy.h"
#include "train/model/model.h"
#include "train/formats/modelio.h"
#include "train/formats/safetensors.h"
#include "train/cmds/dump_lora.h"
#include "train/run/train_config.h"
#include "train/run/train_device.h"
#include "train/run/train_events.h"
#include "train/run/trainer.h"
#ifdef ALALLO_HAVE_CUDA
#include "train/cuda/cuda_train.h"
#include "train/model/optim.h"
#endif

#define MAX_DUMP_IDS 4096

static void usage(FILE *f)
{
    fputs("usage: alallo train --config ATTEMPT.json\n"
          "       alallo train --materialize CKPT_DIR --base MODEL_DIR --out DIR"
          " [--adapter-out DIR]\n",
          f);
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

/* "base.<tensor>" for every tensor of the model as its storage holds it
 * (bf16-rounded, or NF4 decoded), read before the adapters move (B is
 * zero, so nothing is merged in), into ts from index k: the frozen base a
 * 16-bit or 4-bit comparison must give PyTorch. Returns the next index, or
 * -1 out of memory; *vals OUT owns the values. */
static int dump_base(const struct model *m, struct st_tensor *ts, int k, float **vals)
{
    size_t total = 0;
    for (int i = 0; i < m->n_tensors; i++)
        total += (size_t)m->tensors[i].rows * m->tensors[i].cols;
    *vals = malloc(total * sizeof(float));
    if (!*vals)
        return -1;
    float *v = *vals;
    for (int i = 0; i < m->n_tensors; i++) {
        const struct model_tensor *mt = &m->tensors[i];
        struct st_tensor *t = &ts[k++];
        snprintf(t->name, sizeof t->name, "base.%s", mt->name);
        t->dtype = ST_F32;
        t->ndim = mt->is1d ? 1 : 2;
        t->shape[0] = mt->is1d ? mt->cols : mt->rows;
        t->shape[1] = mt->cols;
        t->nbytes = (size_t)mt->rows * mt->cols * 4;
        model_get_tensor(m, i, v);
        t->data = v;
        v += (size_t)mt->rows * mt->cols;
    }
    return k;
}

/* The pass on the GPU through the trainer's seam (cuda_train.h): *loss
 * OUT the summed loss, the gradients (times dscale) into m->grad. 0, or
 * -1 with a reason in err (no GPU, a model the GPU refuses). */
static int gpu_loss_grads(struct model *m, const int32_t *ids, const uint8_t *mask, int T,
                          float dscale, double *loss, char *err, size_t errcap)
{
#ifdef ALALLO_HAVE_CUDA
    static int32_t seg[MAX_DUMP_IDS]; /* all 0: one sequence */
    struct optim o;
    if (optim_init(&o, m->n_train, m->n_decay, 0.0f)) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    int user, rc = -1;
    size_t nt;
    struct cuda_train *t = cuda_train_open(0, m, &o, 1, T, err, errcap, &user);
    if (t) {
        if (cuda_train_pass(t, ids, mask, seg, 1, T, dscale, 1, 0.0f, 0, loss, &nt, NULL) ||
            cuda_train_grads_to_host(t, m))
            snprintf(err, errcap, "on the GPU: %s", cuda_ctx_error());
        else
            rc = 0;
    }
    cuda_train_close(t);
    optim_free(&o);
    return rc;
#else
    (void)m, (void)ids, (void)mask, (void)T, (void)dscale, (void)loss;
    snprintf(err, errcap, "this alallo was built without CUDA");
    return -1;
#endif
}

/* One sequence, every position after the first a target: writes "loss"
 * (1), "logits" (T,V) and, in full fine-tuning, "grad.<tensor>" for every
 * tensor; with lora_rank > 0, LoRA on every projection (A as PEFT starts
 * it, B random so that A's gradient is not zero) and the adapters with
 * their gradients (dump_lora_adapters). The LoRA base is fp32 (base_kind
 * WK_F32, the float64 comparison) or, with --precision, bf16 or NF4, and
 * then the dump holds that base too (dump_base). On the GPU (gpu set) the
 * pass is the trainer's GPU pass and there are no logits (the GPU never
 * holds the (T,V) block). All F32, for tests/torch/reference.py to
 * compare. */
static int dump_grads(const char *dir, const char *ids_s, const char *out, int lora_rank,
                      enum wkind base_kind, int gpu)
{
    char err[1024];
    struct model_opts o = {.full = lora_rank == 0, .base_kind = base_kind, .lora_r = lora_rank,
                           .lora_alpha = 2.0f * (float)lora_rank,
                           .lora_targets = MODEL_ALL_PROJ};
    struct model *m = modelio_load(dir, &o, err, sizeof err);
    if (!m) {
        fprintf(stderr, "alallo train: %s\n", err);
        return 1;
    }
    /* loss, logits, then the adapters (and lora_scale) or every tensor's
     * gradient, then the base; the base's entries are made now, before
     * the adapters move */
    size_t n_base = lora_rank && base_kind != WK_F32 ? (size_t)m->n_tensors : 0;
    size_t n_grads = lora_rank ? 1 + (size_t)m->cfg.n_layers * PROJ_COUNT * 4
                               : (size_t)m->n_tensors;
    size_t cap = 2 + n_grads + n_base;
    float *base_vals = NULL;
    struct st_tensor *ts = calloc(cap, sizeof *ts);
    if (!ts || (n_base && dump_base(m, ts, (int)(cap - n_base), &base_vals) < 0)) {
        fprintf(stderr, "alallo train: out of memory\n");
        free(ts);
        model_free(m);
        return 1;
    }
    if (lora_rank) {
        model_lora_init(m, 1);
        struct rng r;
        rng_seed(&r, 2);
        for (size_t i = 0; i < m->n_train; i++)
            m->train[i] += 0.05f * rng_normal(&r);
    }
    static int32_t ids[MAX_DUMP_IDS];
    static uint8_t mask[MAX_DUMP_IDS];
    int T = parse_ids(ids_s, ids, MAX_DUMP_IDS, m->cfg.vocab);
    int rc = 1;
    struct model_acts *a = NULL;
    float *logits = NULL;
    if (T < 2 || T > m->cfg.max_pos || model_rope_ensure(m, T)) {
        fprintf(stderr, "alallo train: --ids needs 2 to max_position_embeddings ids in the "
                        "vocabulary\n");
        goto out;
    }
    for (int t = 0; t < T; t++)
        mask[t] = t > 0;
    size_t nt = model_count_targets(mask, 1, T), got;
    float loss;
    int k = 1; /* the next entry after "loss" */
    if (gpu) {
        double sum;
        if (gpu_loss_grads(m, ids, mask, T, 1.0f / (float)nt, &sum, err, sizeof err)) {
            fprintf(stderr, "alallo train: --device cuda: %s\n", err);
            goto out;
        }
        loss = (float)(sum / (double)nt);
    } else {
        a = model_acts_create(m, 1, T);
        logits = malloc((size_t)T * m->cfg.vocab * sizeof(float));
        if (!a || !logits) {
            fprintf(stderr, "alallo train: out of memory\n");
            goto out;
        }
        /* the objective: the mean loss plus a mixture of experts' auxiliary term */
        loss = (float)(model_forward_backward(m, a, ids, mask, 1, T, 1.0f / (float)nt, 1, &got) /
                           (double)nt +
                       model_last_aux(a));
        model_forward_logits(m, a, ids, 1, T, logits);
        ts[k++] = (struct st_tensor){.name = "logits", .dtype = ST_F32, .ndim = 2,
                                     .shape = {T, m->cfg.vocab}, .data = logits,
                                     .nbytes = (size_t)T * m->cfg.vocab * 4};
    }
    ts[0] = (struct st_tensor){.name = "loss", .dtype = ST_F32, .ndim = 1, .shape = {1},
                               .data = &loss, .nbytes = 4};
    float scale;
    if (lora_rank) {
        k = dump_lora_adapters(m, ts, k, &scale);
    } else {
        modelio_grad_tensors(m, ts + k);
        k += (int)n_grads;
    }
    /* no logits, or projections without adapters: the base's entries move up */
    if (n_base && ts + k != ts + cap - n_base)
        memmove(ts + k, ts + cap - n_base, n_base * sizeof *ts);
    if (st_write(out, ts, (size_t)k + n_base, NULL, err, sizeof err)) {
        fprintf(stderr, "alallo train: %s\n", err);
        goto out;
    }
    rc = 0;
out:
    free(ts);
    free(base_vals);
    free(logits);
    model_acts_free(a);
    model_free(m);
    return rc;
}

int cmd_train(int argc, char **argv)
{
    if (cmd_help_asked(argc, argv)) {
        usage(stdout);
        return 0;
    }
    omp_policy_passive(argc, argv);
    tev_init();
    const char *config = cmd_arg_value(argc, argv, "--config");
    const char *ckpt = cmd_arg_value(argc, argv, "--materialize");
    if (cmd_has_flag(argc, argv, "--dump-dpo"))
        return cmd_train_dump_dpo(argc, argv);
    if (cmd_has_flag(argc, argv, "--dump-grpo"))
        return cmd_train_dump_grpo(argc, argv);
    if (cmd_has_flag(argc, argv, "--dump-grads")) {
        const char *dir = cmd_arg_value(argc, argv, "--model-dir");
        const char *ids = cmd_arg_value(argc, argv, "--ids");
        const char *out = cmd_arg_value(argc, argv, "--out");
        const char *prec = cmd_arg_value(argc, argv, "--precision");
        const char *dev = cmd_arg_value(argc, argv, "--device");
        int rank = 0;
        if (!dir || !ids || !out ||
            cmd_int_opt("alallo train", argc, argv, "--lora-rank", 1, 64, &rank) ||
            (prec && strcmp(prec, "16-bit") != 0 && strcmp(prec, "4-bit") != 0) ||
            (dev && strcmp(dev, "cpu") != 0 && strcmp(dev, "cuda") != 0)) {
            fputs("usage: alallo train --dump-grads --model-dir DIR --ids 1,2,... --out FILE"
                  " [--lora-rank R] [--precision 16-bit|4-bit] [--device cpu|cuda]\n",
                  stderr);
            return 2;
        }
        int gpu = dev && strcmp(dev, "cuda") == 0;
        if (gpu && !train_device_cuda_built()) {
            fputs("alallo train: this alallo was built without CUDA: --dump-grads --device cuda"
                  " needs an alallo built where nvcc is found (docs/trainer.md, \"GPU\")\n",
                  stderr);
            return 2;
        }
        if (prec && !rank) {
            fputs("alallo train: --precision is the LoRA base's (--lora-rank R); full "
                  "fine-tuning keeps fp32 weights\n",
                  stderr);
            return 2;
        }
        enum wkind kind = !prec ? WK_F32 : strcmp(prec, "4-bit") == 0 ? WK_NF4 : WK_BF16;
        if (gpu && rank && kind == WK_F32)
            kind = WK_BF16; /* the GPU's products read a bf16 base */
        return dump_grads(dir, ids, out, rank, kind, gpu);
    }
    if (ckpt) {
        const char *base = cmd_arg_value(argc, argv, "--base");
        const char *out = cmd_arg_value(argc, argv, "--out");
        if (!base || !out) {
            usage(stderr);
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
        usage(stderr);
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
    int on_gpu = 0;
    int rc = train_device_prepare(c, &on_gpu, err, sizeof err);
    if (rc)
        tev_error(rc == TRAIN_USER, err);
    else if (on_gpu)
        rc = train_device_run_gpu(c);
    else
        rc = trainer_run(c);
    train_device_release();
    free(c);
    return rc;
}
