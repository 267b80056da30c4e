/* cmd_generate.c - `alallo generate --model-dir DIR ...`: a completion from a
 * local model folder (with --json, one object {"text","prompt_tokens",
 * "completion_tokens","finish_reason"}).
 *
 *   alallo generate --model-dir DIR (--prompt TEXT | --chat JSON) [--max-tokens N]
 *                   [--temperature T] [--top-p P] [--seed S]
 *                   [--adapter-dir DIR] [--precision 16-bit|4-bit] [--quant q8_0|q4_0|q4_k_m]
 *                   [--threads N] [--json [--stream]] [--score]
 *
 * With --json --stream, lines {"delta": TEXT} come first, one as the text
 * grows by each token (flushed at once: the server streams them on), then
 * the final object as without --stream.
 * Exit status: 0 done; 1 the generator failed; 2 bad options; 3 the prompt
 * cannot be completed by this model (longer than its context, or empty for
 * a model without a start token). With --json, status 3 also prints one
 * object {"error": "context_length_exceeded" or "empty_prompt",
 * "prompt_tokens", "context_tokens"}, so a caller can tell its user what
 * to change without showing this process's messages (control/models.c).
 * --seed is a decimal integer from 0 to 2^64 - 1. --chat is a JSON object
 * {"messages": [...], "tools": [...]} (OpenAI's shapes): the answer is the
 * next assistant turn, laid out by the model's chat template
 * (generate.h's gen_run_chat); a conversation the template refuses exits
 * with status 3 and {"error": "invalid_chat", "message": ...}.
 * --precision 4-bit loads the base's matrices as NF4, as a 4-bit (QLoRA)
 * job trained on them (generate.h's gen_open_as): with the job's base and
 * --adapter-dir, the model as it was trained, which is what the inference
 * engine serves for a 4-bit job (docs/serving.md); not with --quant.
 * --quant runs the weights a quantized GGUF export of the folder holds
 * (generate.h's gen_quantize). --score prints {"loss","perplexity",
 * "tokens"} of the --prompt text instead of generating (gen_score).
 */
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cmd_help.h"
#include "train/cmds/train_cmds.h"
#include "train/cmds/cmd_args.h"
#include "train/kernels/omp_policy.h"
#include "train/kernels/gemm.h"
#include "train/run/generate.h"

/* A number option in [lo, hi]; absent keeps *out. */
static int num_opt(int argc, char **argv, const char *name, double lo, double hi, double *out)
{
    const char *v = cmd_arg_value(argc, argv, name);
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

/* --seed: decimal digits only, 0 to UINT64_MAX; absent keeps *out. */
static int seed_opt(int argc, char **argv, uint64_t *out)
{
    const char *v = cmd_arg_value(argc, argv, "--seed");
    if (!v)
        return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (!isdigit((unsigned char)v[0]) || *end || errno == ERANGE) {
        fputs("alallo generate: --seed must be an integer from 0 to 18446744073709551615\n",
              stderr);
        return -1;
    }
    *out = (uint64_t)x;
    return 0;
}

/* --stream: each piece of the text as it grows, one line {"delta": ...}
 * written at once, before the final object. */
static void print_delta(void *ctx, const char *piece, size_t len)
{
    (void)ctx;
    json_t *j = json_pack("{s:s%}", "delta", piece, len);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (s) {
        puts(s);
        fflush(stdout);
    }
    free(s);
    json_decref(j);
}

static void usage(FILE *f)
{
    fputs("usage: alallo generate --model-dir DIR (--prompt TEXT | --chat JSON) [--max-tokens N]"
          " [--temperature T] [--top-p P] [--seed S] [--adapter-dir DIR]"
          " [--precision 16-bit|4-bit] [--quant q8_0|q4_0|q4_k_m] [--json [--stream]]"
          " [--score]\n",
          f);
}

int cmd_generate_local(int argc, char **argv)
{
    if (cmd_help_asked(argc, argv)) {
        usage(stdout);
        return 0;
    }
    omp_policy_passive(argc, argv);
    const char *dir = cmd_arg_value(argc, argv, "--model-dir");
    const char *prompt = cmd_arg_value(argc, argv, "--prompt");
    const char *chat_text = cmd_arg_value(argc, argv, "--chat");
    json_t *chat = chat_text ? json_loads(chat_text, 0, NULL) : NULL;
    if (chat_text && !json_is_array(json_object_get(chat, "messages"))) {
        json_decref(chat);
        fputs("alallo generate: --chat must be a JSON object with a \"messages\" array\n", stderr);
        return 2;
    }
    if (!dir || (!prompt && !chat)) {
        json_decref(chat);
        usage(stderr);
        return 2;
    }
    double max_tokens = 64, temp = 0.0, top_p = 1.0;
    uint64_t seed = 0;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    double threads = cpus > 0 ? (double)cpus : 1.0;
    if (num_opt(argc, argv, "--max-tokens", 1, GEN_MAX_TOKENS, &max_tokens) ||
        num_opt(argc, argv, "--temperature", 0, 100, &temp) ||
        num_opt(argc, argv, "--top-p", 1e-6, 1, &top_p) ||
        seed_opt(argc, argv, &seed) ||
        num_opt(argc, argv, "--threads", 1, 1024, &threads)) {
        json_decref(chat);
        return 2;
    }
    const char *precision = cmd_arg_value(argc, argv, "--precision");
    bool four_bit = precision && strcmp(precision, "4-bit") == 0;
    if (precision && !four_bit && strcmp(precision, "16-bit") != 0) {
        json_decref(chat);
        fputs("alallo generate: --precision must be 16-bit or 4-bit\n", stderr);
        return 2;
    }
    if (four_bit && cmd_arg_value(argc, argv, "--quant")) {
        json_decref(chat);
        fputs("alallo generate: --quant runs a merged model's export; it does not take "
              "--precision 4-bit\n", stderr);
        return 2;
    }
    gemm_set_threads((int)threads);
    char err[2048];
    struct generator *g = gen_open_as(dir, cmd_arg_value(argc, argv, "--adapter-dir"), four_bit,
                                      err, sizeof err);
    if (!g) {
        json_decref(chat);
        fprintf(stderr, "alallo generate: %s\n", err);
        return 1;
    }
    const char *quant = cmd_arg_value(argc, argv, "--quant");
    if (quant && gen_quantize(g, quant, err, sizeof err) < 0) {
        gen_close(g);
        json_decref(chat);
        fprintf(stderr, "alallo generate: %s\n", err);
        return 2;
    }
    if (cmd_has_flag(argc, argv, "--score") && prompt) {
        double loss;
        long n;
        int src = gen_score(g, prompt, &loss, &n, err, sizeof err);
        gen_close(g);
        json_decref(chat);
        if (src < 0) {
            fprintf(stderr, "alallo generate: %s\n", err);
            return 1;
        }
        printf("{\"loss\":%.6f,\"perplexity\":%.4f,\"tokens\":%ld}\n", loss, exp(loss), n);
        return 0;
    }
    struct gen_opts o = {(int)max_tokens, (float)temp, (float)top_p, seed};
    if (cmd_has_flag(argc, argv, "--json") && cmd_has_flag(argc, argv, "--stream"))
        gen_set_on_text(g, print_delta, NULL);
    struct gen_result r;
    int rc = chat ? gen_run_chat(g, json_object_get(chat, "messages"),
                                 json_object_get(chat, "tools"), &o, &r, err, sizeof err)
                  : gen_run(g, prompt, &o, &r, err, sizeof err);
    gen_close(g);
    json_decref(chat);
    if (rc == GEN_BAD_CHAT) {
        fprintf(stderr, "alallo generate: %s\n", err);
        if (cmd_has_flag(argc, argv, "--json")) {
            json_t *j = json_pack("{ss ss}", "error", "invalid_chat", "message", err);
            char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
            if (s)
                puts(s);
            free(s);
            json_decref(j);
        }
        return 3;
    }
    if (rc == GEN_TOO_LONG || rc == GEN_EMPTY) {
        fprintf(stderr, "alallo generate: %s\n", err);
        if (cmd_has_flag(argc, argv, "--json")) {
            json_t *j = json_pack("{ss si si}", "error",
                                  rc == GEN_TOO_LONG ? "context_length_exceeded" : "empty_prompt",
                                  "prompt_tokens", r.prompt_tokens, "context_tokens",
                                  r.context_tokens);
            char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
            if (s)
                puts(s);
            free(s);
            json_decref(j);
        }
        gen_result_free(&r);
        return 3;
    }
    if (rc) {
        fprintf(stderr, "alallo generate: %s\n", err);
        return 1;
    }
    if (cmd_has_flag(argc, argv, "--json")) {
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
