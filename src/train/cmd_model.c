/* cmd_model.c - `alallo model init`: a randomly initialised model folder in
 * Hugging Face layout (config.json, model.safetensors in F32, and the
 * tokenizer copied), for tests, benchmarks and pretraining from scratch.
 *
 *   alallo model init --shape tiny|small|124m|custom --tokenizer PATH --out DIR
 *                     [--seed S] [--hidden N --layers N --heads N --kv-heads N
 *                      --intermediate N --max-pos N --untied --qkv-bias]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "train/train_cmds.h"
#include "train/cmd_args.h"
#include "train/omp_policy.h"
#include "train/model.h"
#include "train/modelio.h"
#include "train/tokenizer.h"

static int model_init(int argc, char **argv)
{
    const char *shape = cmd_arg_value(argc, argv, "--shape");
    const char *tok_path = cmd_arg_value(argc, argv, "--tokenizer");
    const char *out = cmd_arg_value(argc, argv, "--out");
    const char *seed_s = cmd_arg_value(argc, argv, "--seed");
    if (!shape || !tok_path || !out) {
        fputs("usage: alallo model init --shape tiny|small|124m|custom --tokenizer PATH "
              "--out DIR [--seed S]\n",
              stderr);
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
    int custom = strcmp(shape, "custom") == 0;
    if (model_config_shape(custom ? "tiny" : shape, vocab, &c)) {
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
        c.tied = !cmd_has_flag(argc, argv, "--untied");
        c.qkv_bias = cmd_has_flag(argc, argv, "--qkv-bias");
    }
    c.bos_id = tokenizer_bos_id(tok);
    c.eos_id = tokenizer_eos_id(tok);
    tokenizer_free(tok);
    unsigned long long seed = seed_s ? strtoull(seed_s, NULL, 10) : 0;
    struct model_opts o = {.full = 1};
    struct model *m = model_create(&c, &o, err, sizeof err);
    if (!m || model_init_random(m, seed) ||
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
    printf("%s: %zu parameters (hidden %d, %d layers, %d heads, vocabulary %d)\n", out,
           model_config_params(&c), c.hidden, c.n_layers, c.n_heads, c.vocab);
    return 0;
}

int cmd_model(int argc, char **argv)
{
    omp_policy_passive(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "init") == 0)
        return model_init(argc - 1, argv + 1);
    fputs("usage: alallo model init --shape tiny|small|124m|custom --tokenizer PATH --out DIR"
          " [--seed S]\n",
          stderr);
    return 2;
}
