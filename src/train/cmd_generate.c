/* cmd_generate.c - `alallo generate --model-dir DIR ...`: a completion from a
 * local model folder (with --json, one object {"text","prompt_tokens",
 * "completion_tokens","finish_reason"}).
 *
 *   alallo generate --model-dir DIR --prompt TEXT [--max-tokens N]
 *                   [--temperature T] [--top-p P] [--seed S]
 *                   [--adapter-dir DIR] [--threads N] [--json]
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/train_cmds.h"
#include "train/omp_policy.h"
#include "train/gemm.h"
#include "train/generate.h"

static const char *arg_value(int argc, char **argv, const char *name)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return argv[i + 1];
    return NULL;
}

static int has_flag(int argc, char **argv, const char *name)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return 1;
    return 0;
}

/* A number option in [lo, hi]; absent keeps *out. */
static int num_opt(int argc, char **argv, const char *name, double lo, double hi, double *out)
{
    const char *v = arg_value(argc, argv, name);
    if (!v)
        return 0;
    char *end;
    double x = strtod(v, &end);
    if (*end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "alallo generate: %s must be a number from %g to %g\n", name, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int cmd_generate_local(int argc, char **argv)
{
    omp_policy_passive(argc, argv);
    const char *dir = arg_value(argc, argv, "--model-dir");
    const char *prompt = arg_value(argc, argv, "--prompt");
    if (!dir || !prompt) {
        fputs("usage: alallo generate --model-dir DIR --prompt TEXT [--max-tokens N]"
              " [--temperature T] [--top-p P] [--seed S] [--adapter-dir DIR] [--json]\n",
              stderr);
        return 2;
    }
    double max_tokens = 64, temp = 0.0, top_p = 1.0, seed = 0;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    double threads = cpus > 0 ? (double)cpus : 1.0;
    if (num_opt(argc, argv, "--max-tokens", 1, GEN_MAX_TOKENS, &max_tokens) ||
        num_opt(argc, argv, "--temperature", 0, 100, &temp) ||
        num_opt(argc, argv, "--top-p", 1e-6, 1, &top_p) ||
        num_opt(argc, argv, "--seed", 0, 9007199254740992.0, &seed) ||
        num_opt(argc, argv, "--threads", 1, 1024, &threads))
        return 2;
    gemm_set_threads((int)threads);
    char err[2048];
    struct generator *g = gen_open(dir, arg_value(argc, argv, "--adapter-dir"), err, sizeof err);
    if (!g) {
        fprintf(stderr, "alallo generate: %s\n", err);
        return 1;
    }
    struct gen_opts o = {(int)max_tokens, (float)temp, (float)top_p, (uint64_t)seed};
    struct gen_result r;
    int rc = gen_run(g, prompt, &o, &r, err, sizeof err);
    gen_close(g);
    if (rc) {
        fprintf(stderr, "alallo generate: %s\n", err);
        return 1;
    }
    if (has_flag(argc, argv, "--json")) {
        json_t *j = json_pack("{ss si si ss}", "text", r.text, "prompt_tokens", r.prompt_tokens,
                              "completion_tokens", r.completion_tokens, "finish_reason",
                              r.finish_reason);
        char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
        if (s)
            puts(s);
        free(s);
        json_decref(j);
    } else {
        fputs(r.text, stdout);
        fputc('\n', stdout);
    }
    gen_result_free(&r);
    return 0;
}
