/* worker_speed.c - the speed measurement a worker runs at start. */
#include "worker/worker_speed.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/trainer_proc.h"

#define BENCH_OUTPUT_MAX (64 * 1024)

struct collected {
    char text[BENCH_OUTPUT_MAX];
    size_t len;
    char last_err[256];
};

static void on_line(void *ctx, int stream, const char *line, size_t len, bool truncated)
{
    struct collected *c = ctx;
    if (stream == 2) {
        if (len > 0)
            snprintf(c->last_err, sizeof c->last_err, "%s", line);
        return;
    }
    if (truncated || c->len + len + 2 > sizeof c->text)
        return;
    memcpy(c->text + c->len, line, len);
    c->len += len;
    c->text[c->len++] = '\n';
    c->text[c->len] = '\0';
}

int worker_speed_measure(const char *alallo_bin, int threads, const char *device, int timeout_s,
                         volatile sig_atomic_t *stop, struct bench_speed *out, char *err,
                         size_t errcap)
{
    memset(out, 0, sizeof *out);
    char threads_s[16];
    snprintf(threads_s, sizeof threads_s, "%d", threads > 0 ? threads : 1);
    char *cpu_argv[] = {(char *)alallo_bin, "bench",   "train",           "--shape",
                        BENCH_SPEED_SHAPE,  "--steps", BENCH_SPEED_STEPS, "--threads",
                        threads_s,          NULL};
    char *cuda_argv[] = {(char *)alallo_bin, "bench",   "train",           "--device",
                         "cuda",             "--shape", BENCH_SPEED_SHAPE, "--steps",
                         BENCH_SPEED_STEPS,  "--threads", threads_s,       NULL};
    char **argv = device && strcmp(device, "cuda") == 0 ? cuda_argv : cpu_argv;
    struct collected *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    struct trainer_proc p;
    if (trainer_proc_start(&p, argv, NULL, err, errcap) != 0) {
        free(c);
        return -1;
    }
    double deadline = trainer_proc_now() + (timeout_s > 0 ? timeout_s : 1);
    int timed_out = 0;
    while (trainer_proc_poll(&p, 200, on_line, c) > 0) {
        if (trainer_proc_now() > deadline || (stop && *stop)) {
            timed_out = 1;
            break;
        }
    }
    trainer_proc_close(&p);
    int rc = -1;
    if (timed_out && stop && *stop)
        snprintf(err, errcap, "bench interrupted: the worker is stopping");
    else if (timed_out)
        snprintf(err, errcap, "bench did not finish within %d s", timeout_s);
    else if (p.exit_status != 0)
        snprintf(err, errcap, "bench %s %d%s%s", p.term_signal ? "killed by signal" : "exited with",
                 p.term_signal ? p.term_signal : p.exit_status, c->last_err[0] ? ": " : "",
                 c->last_err);
    else if (bench_speed_parse(c->text, out) != 0)
        snprintf(err, errcap, "bench printed no tokens_per_s");
    else
        rc = 0;
    free(c);
    return rc;
}
