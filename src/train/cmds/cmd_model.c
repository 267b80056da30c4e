/* cmd_model.c - `alallo model init`: a randomly initialised model folder in
 * Hugging Face layout (config.json, model.safetensors in F32, and the
 * tokenizer copied), for tests, benchmarks and pretraining from scratch.
 *
 *   alallo model init --shape tiny|small|124m|custom --tokenizer PATH --out DIR
 *                     [--seed S] [--hidden N --layers N --heads N --kv-heads N
 *                      --intermediate N --max-pos N --untied --qkv-bias]
 *   alallo model init --family llama3|qwen2|mistral|gemma|gemma2|gemma3|qwen3|qwen3_moe|phi3|
 *                     smollm3 --tokenizer PATH
 *                     --out DIR [--seed S] [--init-std X --norm-std X] [--attn-softcap X
 *                      --final-softcap X --query-scalar X --sliding-window N] [--experts N --experts-used K
 *                      --moe-intermediate N --sparse-step N --router-aux-coef X
 *                      --no-norm-topk] [--hidden N --layers N --heads N
 *                      --kv-heads N --head-dim N --intermediate N --max-pos N]
 *
 * A family makes the tiny shape with that family's switches as its
 * published configs set them (model_config_family_tiny), so that tests can
 * run every family without fetching weights. The Gemma 2 options override
 * its soft-caps and score scale (tests use small caps, where tanh bends);
 * the shape options give a family a real model's widths (bench/plan/rss.sh
 * sets Qwen3-1.7B's at a reduced depth), its switches kept.
 * The qwen3_moe options set the experts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cmd_help.h"
#include "core/fs.h"
#include "train/cmds/train_cmds.h"
#include "train/cmds/cmd_args.h"
#include "train/kernels/omp_policy.h"
#include "train/model/model.h"
#include "train/model/moe.h"
#include "train/formats/modelio.h"
#include "train/tokenizer/tokenizer.h"

#define USAGE                                                                              \
    "usage: alallo model init --shape tiny|small|124m|custom --tokenizer PATH --out DIR "    \
    "[--seed S]\n"                                                                           \
    "       alallo model init --family llama3|qwen2|mistral|gemma|gemma2|gemma3|qwen3|qwen3_moe|phi3|" \
    "smollm3 --tokenizer PATH --out DIR [--seed S] [--init-std X] [--norm-std X]\n"

/* qwen3_moe's experts; 0, or -1 after saying why. */
static int moe_options(int argc, char **argv, struct model_config *c)
{
    const char *cmd = "alallo model init";
    if (cmd_int_opt(cmd, argc, argv, "--experts", 1, MOE_MAX_EXPERTS, &c->n_experts) ||
        cmd_int_opt(cmd, argc, argv, "--experts-used", 1, MOE_MAX_EXPERTS, &c->n_experts_used) ||
        cmd_int_opt(cmd, argc, argv, "--moe-intermediate", 1, 8 * MODEL_MAX_HIDDEN,
                    &c->moe_intermediate) ||
        cmd_int_opt(cmd, argc, argv, "--sparse-step", 1, MODEL_MAX_LAYERS, &c->sparse_step))
        return -1;
    const char *v = cmd_arg_value(argc, argv, "--router-aux-coef");
    if (v) {
        char *end;
        double x = strtod(v, &end);
        if (end == v || *end || !(x >= 0.0 && x <= 100.0)) {
            fputs("alallo model init: --router-aux-coef takes a number in [0, 100]\n", stderr);
            return -1;
        }
        c->router_aux_coef = (float)x;
    }
    if (cmd_has_flag(argc, argv, "--no-norm-topk"))
        c->norm_topk_prob = 0;
    return 0;
}

/* The shape options over a family's tiny shape; 0, or -1 (said). */
static int family_shape(int argc, char **argv, struct model_config *c)
{
    static const char *const opt[] = {"--hidden", "--layers", "--heads", "--kv-heads",
                                      "--head-dim", "--intermediate", "--max-pos"};
    int *dst[] = {&c->hidden, &c->n_layers, &c->n_heads, &c->n_kv_heads,
                  &c->head_dim, &c->intermediate, &c->max_pos};
    static const long hi[] = {MODEL_MAX_HIDDEN, MODEL_MAX_LAYERS, 1024, 1024, 1024,
                              8L * MODEL_MAX_HIDDEN, 1L << 20};
    int had_layers = c->n_layers;
    for (int i = 0; i < 7; i++)
        if (cmd_int_opt("alallo model init", argc, argv, opt[i], 1, hi[i], dst[i]))
            return -1;
    if (cmd_arg_value(argc, argv, "--head-dim") && !cmd_arg_value(argc, argv, "--query-scalar"))
        c->query_scalar = (float)c->head_dim;
    if (cmd_arg_value(argc, argv, "--max-pos"))
        c->max_pos_config = c->max_pos;
    /* SmolLM3 leaves the positions out of every 4th layer, at any depth */
    for (int l = 0; c->family == FAM_SMOLLM3 && c->n_layers != had_layers && l < c->n_layers; l++)
        c->no_rope[l] = (l + 1) % 4 == 0;
    /* Gemma 2's local layers alternate and Gemma 3's tiny one keeps every 3rd global */
    for (int l = 0; c->n_layers != had_layers && l < c->n_layers; l++)
        c->swa[l] = c->family == FAM_GEMMA2 ? l % 2 == 0
                    : c->family == FAM_GEMMA3 ? (l + 1) % 3 != 0 : 0;
    if (c->longrope) { /* Phi-3: a factor per rotary pair of the head as now shaped, and
                        * the context within original_max_position_embeddings */
        model_config_longrope_factors(c);
        if (c->max_pos > c->rope_orig_max)
            c->max_pos = c->rope_orig_max;
    }
    char err[200];
    if (model_config_check(c, err, sizeof err)) {
        fprintf(stderr, "alallo model init: %s\n", err);
        return -1;
    }
    return 0;
}

/* --family NAME: "llama3" is Llama's model_type with Llama 3's rotary scaling. */
static int family_config(const char *name, int vocab, int argc, char **argv,
                         struct model_config *c)
{
    int fam = strcmp(name, "llama3") == 0   ? FAM_LLAMA
              : strcmp(name, "gemma3") == 0 ? FAM_GEMMA3
                                            : model_family_parse(name);
    if (fam < 0 || strcmp(name, "llama") == 0) {
        fprintf(stderr, "alallo model init: unknown family '%s' (llama3, qwen2, mistral, gemma, "
                        "gemma2, gemma3, qwen3, qwen3_moe, smollm3, phi3)\n", name);
        return -1;
    }
    if (model_config_family_tiny(fam, vocab, c)) {
        fprintf(stderr, "alallo model init: the tokenizer's %d tokens do not fit\n", vocab);
        return -1;
    }
    static const char *const opt[] = {"--attn-softcap", "--final-softcap", "--query-scalar"};
    float *dst[] = {&c->attn_softcap, &c->final_softcap, &c->query_scalar};
    for (int i = 0; i < 3; i++) {
        const char *v = cmd_arg_value(argc, argv, opt[i]);
        if (!v)
            continue;
        char *end;
        double x = strtod(v, &end);
        if ((fam != FAM_GEMMA2 && fam != FAM_GEMMA3) || *end || !(x > 0.0 && x < 1e6)) {
            fprintf(stderr, "alallo model init: %s takes a positive number, for gemma2 and "
                            "gemma3 only\n", opt[i]);
            return -1;
        }
        *dst[i] = (float)x;
    }
    if (cmd_arg_value(argc, argv, "--sliding-window") &&
        ((fam != FAM_GEMMA2 && fam != FAM_GEMMA3) ||
         cmd_int_opt("alallo model init", argc, argv, "--sliding-window", 1, 1 << 20,
                     &c->sliding_window))) {
        if (fam != FAM_GEMMA2 && fam != FAM_GEMMA3)
            fprintf(stderr, "alallo model init: --sliding-window is for gemma2 and gemma3 only\n");
        return -1;
    }
    if (fam == FAM_QWEN3_MOE && moe_options(argc, argv, c))
        return -1;
    return family_shape(argc, argv, c);
}

static int model_init(int argc, char **argv)
{
    const char *shape = cmd_arg_value(argc, argv, "--shape");
    const char *family = cmd_arg_value(argc, argv, "--family");
    const char *tok_path = cmd_arg_value(argc, argv, "--tokenizer");
    const char *out = cmd_arg_value(argc, argv, "--out");
    const char *seed_s = cmd_arg_value(argc, argv, "--seed");
    if (!(shape || family) || (shape && family) || !tok_path || !out) {
        fputs(USAGE, stderr);
        return 2;
    }
    char err[2048];
    struct tokenizer *tok = tokenizer_load(tok_path, err, sizeof err);
    if (!tok) {
        fprintf(stderr, "alallo model init: %s\n", err);
        return 1;
    }
    int vocab = tokenizer_vocab_size(tok);
    struct model_config c;
    if (family && family_config(family, vocab, argc, argv, &c)) {
        tokenizer_free(tok);
        return 2;
    }
    int custom = shape && strcmp(shape, "custom") == 0;
    if (shape && model_config_shape(custom ? "tiny" : shape, vocab, &c)) {
        fprintf(stderr, "alallo model init: unknown shape '%s' (or the tokenizer's %d tokens "
                        "do not fit it)\n", shape, vocab);
        tokenizer_free(tok);
        return 2;
    }
    if (custom) {
        if (cmd_int_opt("alallo model init", argc, argv, "--hidden", 8, MODEL_MAX_HIDDEN, &c.hidden) ||
            cmd_int_opt("alallo model init", argc, argv, "--layers", 1, MODEL_MAX_LAYERS, &c.n_layers) ||
            cmd_int_opt("alallo model init", argc, argv, "--heads", 1, 1024, &c.n_heads) ||
            cmd_int_opt("alallo model init", argc, argv, "--intermediate", 1, 8 * MODEL_MAX_HIDDEN, &c.intermediate) ||
            cmd_int_opt("alallo model init", argc, argv, "--max-pos", 8, 1 << 20, &c.max_pos)) {
            tokenizer_free(tok);
            return 2;
        }
        c.n_kv_heads = c.n_heads;
        if (cmd_int_opt("alallo model init", argc, argv, "--kv-heads", 1, 1024, &c.n_kv_heads)) {
            tokenizer_free(tok);
            return 2;
        }
        c.head_dim = c.hidden / c.n_heads;
        c.query_scalar = (float)c.head_dim;
        c.max_pos_config = c.max_pos;
        c.tied = !cmd_has_flag(argc, argv, "--untied");
        c.qkv_bias = cmd_has_flag(argc, argv, "--qkv-bias");
    }
    c.bos_id = tokenizer_bos_id(tok);
    c.eos_id = tokenizer_eos_id(tok);
    tokenizer_free(tok);
    unsigned long long seed = seed_s ? strtoull(seed_s, NULL, 10) : 0;
    const char *std_s = cmd_arg_value(argc, argv, "--init-std");
    char *std_end = NULL;
    double std = std_s ? strtod(std_s, &std_end) : 0.02;
    const char *nstd_s = cmd_arg_value(argc, argv, "--norm-std");
    char *nstd_end = NULL;
    double nstd = nstd_s ? strtod(nstd_s, &nstd_end) : 0.0;
    if ((std_s && (*std_end || !(std > 0.0 && std <= 10.0))) ||
        (nstd_s && (*nstd_end || !(nstd >= 0.0 && nstd <= 100.0)))) {
        fputs("alallo model init: --init-std takes a number in (0, 10], --norm-std in "
              "[0, 100]\n", stderr);
        return 2;
    }
    struct model_opts o = {.full = 1};
    struct model *m = model_create(&c, &o, err, sizeof err);
    if (!m || model_init_random_std(m, seed, (float)std, (float)nstd) ||
        modelio_save_merged(m, out, NULL, err, sizeof err)) {
        fprintf(stderr, "alallo model init: %s\n", m ? err : err);
        model_free(m);
        return 1;
    }
    model_free(m);
    char dst[MODELIO_MAX_PATH + 32];
    snprintf(dst, sizeof dst, "%s/tokenizer.json", out);
    if (fs_copy_file(tok_path, dst)) {
        fprintf(stderr, "alallo model init: cannot copy %s to %s\n", tok_path, dst);
        return 1;
    }
    printf("%s: %s, %zu parameters (hidden %d, %d layers, %d heads, vocabulary %d)\n", out,
           model_family_name(c.family), model_config_params(&c), c.hidden, c.n_layers,
           c.n_heads, c.vocab);
    if (c.n_experts > 0)
        printf("%s: %d experts, %d per token: %zu active parameters\n", out, c.n_experts,
               c.n_experts_used, model_config_active_params(&c));
    return 0;
}

int cmd_model(int argc, char **argv)
{
    if (cmd_help_asked(argc, argv)) {
        fputs(USAGE, stdout);
        return 0;
    }
    omp_policy_passive(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "init") == 0)
        return model_init(argc - 1, argv + 1);
    fputs(USAGE, stderr);
    return 2;
}
