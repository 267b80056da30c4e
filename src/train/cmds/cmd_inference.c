/* cmd_inference.c - `alallo inference --socket PATH ...`: the resident
 * inference engine (train/serve/engine.h) that `serve` starts and restarts
 * beside itself, or that `alallo serving run` starts on a cluster's node
 * (--listen; docs/serving.md).
 *
 *   alallo inference (--socket PATH | --listen HOST:PORT --key @FILE
 *                    [--port-file FILE]) [--model-memory BYTES]
 *                    [--max-running N] [--max-tokens-in-flight N]
 *                    [--max-queued N] [--threads N]
 *
 * The key is read from FILE (never given on the command line, where
 * other users of the node could read it).
 *
 * Exit status: 0 stopped by SIGTERM or SIGINT; 1 could not start; 2 bad
 * options.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/cmd_help.h"
#include "core/fs.h"
#include "train/cmds/cmd_args.h"
#include "train/cmds/train_cmds.h"
#include "train/kernels/gemm.h"
#include "train/kernels/omp_policy.h"
#include "train/serve/engine.h"

static void usage(FILE *f)
{
    fputs("usage: alallo inference (--socket PATH | --listen HOST:PORT --key @FILE"
          " [--port-file FILE]) [--model-memory BYTES] [--max-running N]"
          " [--max-tokens-in-flight N] [--max-queued N] [--threads N]\n",
          f);
}

/* A whole-number option in [lo, hi]; absent keeps *out. */
static int whole_opt(int argc, char **argv, const char *name, long long lo, long long hi,
                     long long *out)
{
    const char *v = cmd_arg_value(argc, argv, name);
    if (!v)
        return 0;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "alallo inference: %s must be a whole number from %lld to %lld\n", name,
                lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

/* The key in @FILE, its first line. 0, or -1 with the reason on stderr. */
static int read_key(const char *arg, char *out, size_t cap)
{
    if (!arg || arg[0] != '@' || fs_read_line(arg + 1, out, cap) != 0) {
        fprintf(stderr, "alallo inference: --key wants @FILE, a file whose first line is the "
                        "key\n");
        return -1;
    }
    return 0;
}

int cmd_inference(int argc, char **argv)
{
    if (cmd_help_asked(argc, argv)) {
        usage(stdout);
        return 0;
    }
    omp_policy_passive(argc, argv);
    const char *sock = cmd_arg_value(argc, argv, "--socket");
    const char *listen = cmd_arg_value(argc, argv, "--listen");
    const char *key_arg = cmd_arg_value(argc, argv, "--key");
    char key[ENGINE_KEY_MAX];
    if (!sock == !listen || (listen && read_key(key_arg, key, sizeof key))) {
        usage(stderr);
        return 2;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long long mem = 8LL << 30, running = 32, tokens = 65536, queued = 64;
    long long threads = cpus > 0 ? cpus : 1;
    if (whole_opt(argc, argv, "--model-memory", 1 << 20, 1LL << 50, &mem) ||
        whole_opt(argc, argv, "--max-running", 1, 4096, &running) ||
        whole_opt(argc, argv, "--max-tokens-in-flight", 1, 1LL << 30, &tokens) ||
        whole_opt(argc, argv, "--max-queued", 1, 1 << 20, &queued) ||
        whole_opt(argc, argv, "--threads", 1, 1024, &threads))
        return 2;
    gemm_set_threads((int)threads);
    struct engine_config cfg = {.socket_path = sock,
                                .listen = listen,
                                .key = listen ? key : NULL,
                                .port_file = cmd_arg_value(argc, argv, "--port-file"),
                                .max_model_bytes = (size_t)mem,
                                .limits = {(int)running, (long)tokens, (int)queued}};
    int rc = engine_run(&cfg);
    memset(key, 0, sizeof key);
    return rc;
}
