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

/* Runs `bench train` on `shape` until it ends, `deadline` passes or *stop is
 * set, adding what it prints to c. 0, or -1 with the reason in err. */
static int run_bench(const char *alallo_bin, const char *shape, const char *threads,
                     const char *device, int timeout_s, double deadline,
                     volatile sig_atomic_t *stop, struct collected *c, char *err, size_t errcap)
{
    char *cpu_argv[] = {(char *)alallo_bin, "bench",   "train",           "--shape",
                        (char *)shape,      "--steps", BENCH_SPEED_STEPS, "--threads",
                        (char *)threads,    NULL};
    char *cuda_argv[] = {(char *)alallo_bin, "bench",   "train",           "--device",
                         "cuda",             "--shape", (char *)shape,     "--steps",
                         BENCH_SPEED_STEPS,  "--threads", (char *)threads, NULL};
    char **argv = device && strcmp(device, "cuda") == 0 ? cuda_argv : cpu_argv;
    struct trainer_proc p;
    if (trainer_proc_start(&p, argv, NULL, err, errcap) != 0)
        return -1;
    bool timed_out = false;
    while (trainer_proc_poll(&p, 200, on_line, c) > 0) {
        if (trainer_proc_now() > deadline || (stop && *stop)) {
            timed_out = true;
            break;
        }
    }
    trainer_proc_close(&p);
    if (timed_out && stop && *stop)
        snprintf(err, errcap, "bench interrupted: the worker is stopping");
    else if (timed_out)
        snprintf(err, errcap, "bench did not finish within %d s", timeout_s);
    else if (p.exit_status != 0)
        snprintf(err, errcap, "bench %s %d%s%s", p.term_signal ? "killed by signal" : "exited with",
                 p.term_signal ? p.term_signal : p.exit_status, c->last_err[0] ? ": " : "",
                 c->last_err);
    else
        return 0;
    return -1;
}

int worker_speed_measure(const char *alallo_bin, int threads, const char *device, int timeout_s,
                         volatile sig_atomic_t *stop, struct bench_speed *out, char *err,
                         size_t errcap)
{
    memset(out, 0, sizeof *out);
    char threads_s[16];
    snprintf(threads_s, sizeof threads_s, "%d", threads > 0 ? threads : 1);
    struct collected *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    double deadline = trainer_proc_now() + (timeout_s > 0 ? timeout_s : 1);
    int rc = -1, small_rc = 0;
    if (!device || strcmp(device, "cuda") != 0) {
        /* both points in one process (bench_speed.h); it measures each
         * shape even when one fails, so a failure of the small one only
         * leaves the second point out, as on a GPU */
        if (run_bench(alallo_bin, BENCH_SPEED_SHAPES, threads_s, device, timeout_s, deadline,
                      stop, c, err, errcap) != 0) {
            struct bench_speed kept;
            if ((stop && *stop) || bench_speed_parse(c->text, &kept) != 0)
                goto out;
            small_rc = -1; /* the bench's own shape measured, the small one not */
        }
    } else {
        /* The small shape first: its failure only leaves the second point
         * out (bench_speed.h); the bench's own shape's is the worker's. */
        char small_err[256];
        small_rc = run_bench(alallo_bin, BENCH_SPEED_SMALL_SHAPE, threads_s, device, timeout_s,
                             deadline, stop, c, small_err, sizeof small_err);
        if (small_rc != 0 && stop && *stop) {
            snprintf(err, errcap, "%s", small_err);
            goto out;
        }
        if (run_bench(alallo_bin, BENCH_SPEED_SHAPE, threads_s, device, timeout_s, deadline,
                      stop, c, err, errcap) != 0)
            goto out;
    }
    if (bench_speed_parse(c->text, out) != 0)
        snprintf(err, errcap, "bench printed no tokens_per_s");
    else
        rc = 0;
    if (rc == 0 && small_rc != 0)
        out->small_params = out->small_flops = 0;
out:
    free(c);
    return rc;
}
