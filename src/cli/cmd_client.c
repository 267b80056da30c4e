/* cmd_client.c - the client commands: picks one by argv[0] and gives it the
 * connection read from ALALLO_URL / ALALLO_API_KEY. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cmd_client.h"
#include "core/cmd_help.h"

static const char usage_text[] =
    "usage (reads ALALLO_URL, default " CLI_DEFAULT_URL ", and ALALLO_API_KEY):\n"
    "  alallo jobs [list] [--limit N] [--after ID] [--all]\n"
    "  alallo jobs show ID\n"
    "  alallo jobs create --model M (--file FILE_ID | --upload PATH) [--name N]\n"
    "       [--precision 16-bit|4-bit] [--goal lowest_cost|fastest_finish|finish_by]\n"
    "       [--finish-by TIME (2026-12-03T18:00:00Z or Unix seconds)] [--epochs N]\n"
    "       [--batch-size N] [--learning-rate-multiplier X] [--seed S] [--suffix S]\n"
    "       [--adapter lora|full] [--validation-file FILE_ID] [--max-steps N]\n"
    "       [--method supervised|dpo] [--beta X] [--max-seq-len N] [--packing on|off]\n"
    "       [--lora-rank N] [--lora-alpha X] [--lora-dropout P] [--lora-target-modules q_proj,v_proj,...]\n"
    "       [--lr-scheduler cosine|linear|constant] [--warmup-ratio X]\n"
    "       [--weight-decay X] [--train-on-inputs on|off]\n"
    "  alallo jobs cancel ID\n"
    "  alallo jobs log ID [--follow]\n"
    "  alallo estimate --model M (--file FILE_ID | --upload PATH) [same options as create]\n"
    "  alallo files [list] | files upload FILE | files delete FILE_ID\n"
    "  alallo models\n"
    "  alallo workers [list] | workers drain NAME\n"
    "  alallo ledger\n"
    "  alallo generate --model ID --prompt TEXT [--max-tokens N] [--temperature T]\n"
    "       [--top-p P] [--seed S] [--stop TEXT]\n"
    "  alallo export ID --format hf|peft|gguf|ollama [--dtype q8_0|q4_k_m|...] --out PATH\n"
    "every command takes --json to print the server's JSON as it is\n";

int cmd_client(int argc, char **argv)
{
    struct cli_ctx cx = {.out = stdout, .err = stderr};
    const char *cmd = argv[0];
    if (cmd_help_asked(argc, argv)) {
        fputs(usage_text, stdout);
        return CLI_OK;
    }
    char err[300];
    if (cli_conn_from_env(&cx.conn, err, sizeof err) != 0) {
        fprintf(stderr, "alallo: %s\n", err);
        return CLI_USAGE;
    }
    static const struct {
        const char *name;
        int (*fn)(struct cli_ctx *, int, char **);
    } table[] = {
        {"jobs", cli_jobs},       {"estimate", cli_estimate}, {"files", cli_files},
        {"models", cli_models},   {"workers", cli_workers},   {"ledger", cli_ledger},
        {"generate", cli_generate}, {"export", cli_export},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(cmd, table[i].name) == 0)
            return table[i].fn(&cx, argc - 1, argv + 1);
    fprintf(stderr, "alallo: unknown command '%s'\n%s", cmd, usage_text);
    return CLI_USAGE;
}
