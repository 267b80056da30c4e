/* main.c - the alallo binary: picks the sub-command. */
#include <stdio.h>
#include <string.h>

#include "app/cmds.h"
#include "core/cmd_help.h"
#include "train/run/train_device.h"

static void usage(FILE *f)
{
    fputs("usage: alallo COMMAND [ARGS]\n"
          "\n"
          "service:\n"
          "  serve [--port N] [--data DIR] [--store URL] [--local-worker SPEC|none]...\n"
          "  worker --server URL --token T [--name N] [--cpus N] [--mem SIZE] [--price P] [--class C]\n"
          "  attempt run --server URL --attempt ID --token @FILE --work-dir DIR   (engines start it)\n"
          "  serving run --server URL --id ID --token @FILE --work-dir DIR   (engines start it)\n"
          "  accounts create NAME --data DIR [--store URL]\n"
          "  store migrate URL | store copy sqlite:DIR postgresql://...\n"
          "client (reads ALALLO_URL and ALALLO_API_KEY):\n"
          "  jobs [list|show ID|create ...|cancel ID|log ID [--follow]]\n"
          "  files upload FILE | models | estimate ... | workers [drain NAME] | ledger\n"
          "  generate --model ID --prompt TEXT [--max-tokens N] [--temperature T]\n"
          "  export ID --format hf|peft|gguf|ollama [--dtype q8_0|q4_k_m|...] --out PATH\n"
          "trainer and tools:\n"
          "  train ...            the trainer, as a worker starts it (docs/trainer-protocol.md)\n"
          "  bench train ...      trainer throughput\n"
          "  bench gemm ...       the training step's matrix products alone\n"
          "  model init ...       a randomly initialised model folder\n"
          "  generate --model-dir DIR ...   generate from a local model folder\n"
          "  export --model-dir DIR ...     export a local model folder\n"
          "  tokenizer train ...  learn a byte-level BPE tokenizer\n"
          "  inference --socket PATH ...    the resident inference engine serve starts\n"
          "  inference --listen HOST:PORT --key @FILE ...   the engine on a node\n"
          "  sim --jobs N --workers M --seed S   fleet simulation\n"
          "  version              what this binary was built with (cuda: yes|no)\n",
          f);
}

/* `alallo version`: one "key: value" line per build fact, for scripts and
 * tests (docs/trainer.md, "GPU"). */
static int cmd_version(void)
{
    printf("alallo\ncuda: %s\n", train_device_cuda_built() ? "yes" : "no");
    return 0;
}

static int has_arg(int argc, char **argv, const char *name)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    int sub_argc = argc - 1;
    char **sub_argv = argv + 1;

    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "serve") == 0)
        return cmd_serve(sub_argc, sub_argv);
    if (strcmp(cmd, "accounts") == 0)
        return cmd_accounts(sub_argc, sub_argv);
    if (strcmp(cmd, "store") == 0)
        return cmd_store(sub_argc, sub_argv);
    if (strcmp(cmd, "worker") == 0)
        return cmd_worker(sub_argc, sub_argv, train_device_cuda_built() != 0);
    if (strcmp(cmd, "attempt") == 0)
        return cmd_attempt(sub_argc, sub_argv, train_device_cuda_built() != 0);
    if (strcmp(cmd, "serving") == 0)
        return cmd_serving(sub_argc, sub_argv);
    if (strcmp(cmd, "train") == 0)
        return cmd_train(sub_argc, sub_argv);
    if (strcmp(cmd, "bench") == 0)
        return cmd_bench(sub_argc, sub_argv);
    if (strcmp(cmd, "model") == 0)
        return cmd_model(sub_argc, sub_argv);
    if (strcmp(cmd, "tokenizer") == 0)
        return cmd_tokenizer(sub_argc, sub_argv);
    if (strcmp(cmd, "inference") == 0)
        return cmd_inference(sub_argc, sub_argv);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        if (cmd_help_asked(sub_argc, sub_argv)) {
            puts("usage: alallo version   what this binary was built with (cuda: yes|no)");
            return 0;
        }
        return cmd_version();
    }
    if (strcmp(cmd, "sim") == 0)
        return cmd_sim(sub_argc, sub_argv);
    if (strcmp(cmd, "generate") == 0 && has_arg(sub_argc, sub_argv, "--model-dir"))
        return cmd_generate_local(sub_argc, sub_argv);
    if (strcmp(cmd, "export") == 0 && has_arg(sub_argc, sub_argv, "--model-dir"))
        return cmd_export_local(sub_argc, sub_argv);
    static const char *const client_cmds[] = {"jobs", "files", "models", "estimate", "workers",
                                              "ledger", "generate", "export", NULL};
    for (int i = 0; client_cmds[i]; i++)
        if (strcmp(cmd, client_cmds[i]) == 0)
            return cmd_client(sub_argc, sub_argv);
    fprintf(stderr, "alallo: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
