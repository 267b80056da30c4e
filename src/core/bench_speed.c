/* bench_speed.c - bench's output read back (bench_speed.h). */
#include "core/bench_speed.h"

#include <jansson.h>
#include <string.h>

static double number(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_number(v) ? json_number_value(v) : 0.0;
}

static int parse_object(const char *text, size_t len, struct bench_speed *out)
{
    json_t *obj = json_loadb(text, len, 0, NULL);
    if (!json_is_object(obj)) {
        json_decref(obj);
        return -1;
    }
    double tps = number(obj, "tokens_per_s");
    double mean_tps = tps;
    if (!(mean_tps > 0)) {
        json_decref(obj);
        return -1;
    }
    if (number(obj, "tokens_per_s_median") > 0)
        tps = number(obj, "tokens_per_s_median");
    double flops = number(obj, "flops_per_s");
    if (flops <= 0)
        flops = number(obj, "flops");
    /* Achieved FLOP/s: what the model's FLOPs per token make of the pace. */
    if (flops <= 0 && number(obj, "flops_per_token") > 0)
        flops = tps * number(obj, "flops_per_token");
    double peak = number(obj, "peak_fp32_flops");
    if (peak <= 0)
        peak = number(obj, "peak_flops");
    if (flops <= 0 && number(obj, "mfu") > 0 && peak > 0)
        flops = number(obj, "mfu") * peak * tps / mean_tps;
    json_decref(obj);
    out->tokens_per_s = tps;
    out->flops = flops > 0 ? flops : 0;
    return 0;
}

int bench_speed_parse(const char *text, struct bench_speed *out)
{
    memset(out, 0, sizeof *out);
    if (!text)
        return -1;
    size_t n = strlen(text);
    /* The whole text may be one pretty-printed object. */
    if (parse_object(text, n, out) == 0)
        return 0;
    /* Otherwise the last line that is an object: bench may print notes first. */
    size_t end = n;
    while (end > 0) {
        size_t start = end;
        while (start > 0 && text[start - 1] != '\n')
            start--;
        if (end > start && parse_object(text + start, end - start, out) == 0)
            return 0;
        end = start > 0 ? start - 1 : 0;
    }
    return -1;
}

bool bench_speed_is_current(const char *speed)
{
    json_t *obj = speed ? json_loads(speed, 0, NULL) : NULL;
    const char *bench = json_string_value(json_object_get(obj, "bench"));
    bool current = bench && strcmp(bench, BENCH_SPEED_SHAPE) == 0;
    json_decref(obj);
    return current;
}
