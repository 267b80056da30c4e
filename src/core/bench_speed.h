/* bench_speed.h - what `alallo bench train` prints, read back: the pace
 * that a worker measures at its start (worker/worker_speed.h) and that the
 * engine measures for a pool with a bench job (control/engine.h). Pure: the
 * caller hands in the text. */
#ifndef ALALLO_CORE_BENCH_SPEED_H
#define ALALLO_CORE_BENCH_SPEED_H

struct bench_speed {
    double tokens_per_s;  /* 0 when unknown */
    double flops;         /* achieved FLOP/s; 0 when unknown */
};

/* Reads bench's output: the last line that is a JSON object with a positive
 * "tokens_per_s" (or the whole text as one pretty-printed object). FLOP/s
 * come from "flops_per_s" or "flops", else from "tokens_per_s" ×
 * "flops_per_token", else from "mfu" × "peak_fp32_flops" (or
 * "peak_flops"), else 0. Returns 0, or -1 with *out zeroed. text may be
 * NULL. */
int bench_speed_parse(const char *text, struct bench_speed *out /* OUT */);

#endif
