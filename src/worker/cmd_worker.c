/* cmd_worker.c - `alallo worker`: a remote worker process.
 *
 *   alallo worker --server URL --token T [--name N] [--cpus N] [--mem SIZE]
 *                 [--price P] [--class on-demand|spot] [--work-dir DIR]
 *                 [--bench-timeout S] [--stop-grace S]
 *                 [--gpus N --gpu-kind K --gpu-mem SIZE]
 *
 * The only place in the worker module that installs signal handlers: SIGTERM
 * and SIGINT set the stop flag that worker_run watches.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/cmd_worker.h"
#include "core/cmd_help.h"
#include "core/fs.h"
#include "worker/worker.h"

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static void usage(FILE *f)
{
    fputs("usage: alallo worker --server URL --token T [--name N] [--cpus N] [--mem SIZE]\n"
          "                     [--price P] [--class on-demand|spot] [--work-dir DIR]\n"
          "                     [--bench-timeout S] [--stop-grace S]\n"
          "                     [--gpus N --gpu-kind K --gpu-mem SIZE]\n"
          "  --gpu-mem is the memory of one GPU (e.g. 80G); --price is the whole worker's\n"
          "  hourly price: an attempt holds all N GPUs, so a GPU-hour costs price / N\n"
          "  --token may be given as @FILE to read the token from FILE (e.g. DATA/worker-token)\n",
          f);
}

static int parse_seconds(const char *s, int *out)
{
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 0 || v > 86400)
        return -1;
    *out = (int)v;
    return 0;
}

int cmd_worker(int argc, char **argv, bool trainer_cuda)
{
    if (cmd_help_asked(argc, argv)) {
        usage(stdout);
        return 0;
    }
    struct worker_config cfg;
    worker_config_defaults(&cfg);
    cfg.trainer_cuda = trainer_cuda;
    char err[300];
    /* Options that map onto the SPEC syntax reuse its checks and messages. */
    static const char *const spec_opts[][2] = {
        {"--name", "name"},   {"--cpus", "cpus"},   {"--mem", "mem"},
        {"--price", "price"}, {"--class", "class"}, {"--accelerator", "accelerator"},
        {"--gpus", "gpus"},   {"--gpu-kind", "gpu_kind"}, {"--gpu-mem", "gpu_mem"},
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr, "alallo worker: %s needs a value\n", a);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        int done = 0;
        for (size_t k = 0; k < sizeof spec_opts / sizeof spec_opts[0]; k++) {
            if (strcmp(a, spec_opts[k][0]) != 0)
                continue;
            char spec[400];
            if (strchr(v, ',') ||
                snprintf(spec, sizeof spec, "%s=%s", spec_opts[k][1], v) >= (int)sizeof spec ||
                worker_config_parse_spec(&cfg, spec, err, sizeof err) != 0) {
                if (strchr(v, ','))
                    snprintf(err, sizeof err, "%s: a value may not contain ','", a);
                fprintf(stderr, "alallo worker: %s\n", err);
                return 2;
            }
            done = 1;
        }
        if (done)
            continue;
        if (strcmp(a, "--server") == 0) {
            if (strlen(v) >= sizeof cfg.server_url) {
                fprintf(stderr, "alallo worker: --server URL too long\n");
                return 2;
            }
            snprintf(cfg.server_url, sizeof cfg.server_url, "%s", v);
        } else if (strcmp(a, "--token") == 0) {
            if (worker_read_token(v, cfg.token, sizeof cfg.token) != 0) {
                fprintf(stderr, "alallo worker: cannot read the token from %s\n", v);
                return 2;
            }
        } else if (strcmp(a, "--work-dir") == 0) {
            if (strlen(v) >= sizeof cfg.work_dir - 64) {
                fprintf(stderr, "alallo worker: --work-dir too long\n");
                return 2;
            }
            snprintf(cfg.work_dir, sizeof cfg.work_dir, "%s", v);
        } else if (strcmp(a, "--bench-timeout") == 0) {
            if (parse_seconds(v, &cfg.bench_timeout_s) != 0) {
                fprintf(stderr, "alallo worker: --bench-timeout: expected seconds (0 skips)\n");
                return 2;
            }
        } else if (strcmp(a, "--stop-grace") == 0) {
            if (parse_seconds(v, &cfg.stop_grace_s) != 0) {
                fprintf(stderr, "alallo worker: --stop-grace: expected seconds\n");
                return 2;
            }
        } else {
            fprintf(stderr, "alallo worker: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (worker_config_check(&cfg, err, sizeof err) != 0) {
        fprintf(stderr, "alallo worker: %s\n", err);
        return 2;
    }
    if (!cfg.server_url[0] || !cfg.token[0]) {
        fprintf(stderr, "alallo worker: --server and --token are required\n");
        usage(stderr);
        return 2;
    }
    worker_catch_stop_signals(on_signal);
    fprintf(stderr,
            "alallo worker %s: serving %s with %d cpus, training on %s; log in %s%s/worker.log\n",
            cfg.name, cfg.server_url, cfg.cpus, worker_trainer_device(&cfg),
            cfg.work_dir[0] ? "" : "alallo-worker-", cfg.work_dir[0] ? cfg.work_dir : cfg.name);
    return worker_run(&cfg, &stop_flag) == 0 ? 0 : 1;
}
