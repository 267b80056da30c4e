/* bench_speed.c - bench's output read back (bench_speed.h). */
#include "core/bench_speed.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

static double number(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_number(v) ? json_number_value(v) : 0.0;
}

static bool is_small(const json_t *obj)
{
    const char *shape = json_string_value(json_object_get(obj, "shape"));
    return shape && strcmp(shape, BENCH_SPEED_SMALL_SHAPE) == 0;
}

/* One object of bench's output into *out (tokens_per_s, flops, params);
 * -1 when it is none, or is (is_small(obj)) other than `small`. */
static int parse_object(const char *text, size_t len, bool small, struct bench_speed *out)
{
    json_t *obj = json_loadb(text, len, 0, NULL);
    if (!json_is_object(obj) || is_small(obj) != small) {
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
    double params = number(obj, "params");
    json_decref(obj);
    out->tokens_per_s = tps;
    out->flops = flops > 0 && isfinite(flops) ? flops : 0;
    out->params = params > 0 && isfinite(params) ? params : 0;
    return 0;
}

/* The last line of text that parse_object reads (as `small` asks). */
static int last_line(const char *text, size_t n, bool small, struct bench_speed *out)
{
    size_t end = n;
    while (end > 0) {
        size_t start = end;
        while (start > 0 && text[start - 1] != '\n')
            start--;
        if (end > start && parse_object(text + start, end - start, small, out) == 0)
            return 0;
        end = start > 0 ? start - 1 : 0;
    }
    return -1;
}

int bench_speed_parse(const char *text, struct bench_speed *out)
{
    memset(out, 0, sizeof *out);
    if (!text)
        return -1;
    size_t n = strlen(text);
    /* The whole text may be one pretty-printed object; otherwise the last
     * line that is one: bench may print notes first, and the small shape's
     * line comes before. */
    if (parse_object(text, n, false, out) != 0 && last_line(text, n, false, out) != 0) {
        memset(out, 0, sizeof *out);
        return -1;
    }
    struct bench_speed small;
    memset(&small, 0, sizeof small);
    if (last_line(text, n, true, &small) == 0 && small.params > 0 && small.flops > 0) {
        out->small_params = small.params;
        out->small_flops = small.flops;
    }
    return 0;
}

static double positive(const json_t *obj, const char *key)
{
    double v = number(obj, key);
    return v > 0 && isfinite(v) ? v : 0;
}

json_t *bench_speed_json(const struct bench_speed *sp)
{
    json_t *o = json_pack("{s:f,s:f,s:s}", "tokens_per_s", sp->tokens_per_s, "flops", sp->flops,
                          "bench", BENCH_SPEED_MARK);
    if (o && sp->params > 0)
        json_object_set_new(o, "params", json_real(sp->params));
    if (o && sp->small_params > 0 && sp->small_flops > 0)
        json_object_set_new(o, "small",
                            json_pack("{s:f,s:f}", "params", sp->small_params, "flops",
                                      sp->small_flops));
    return o;
}

void bench_speed_from_json(const json_t *obj, struct bench_speed *out)
{
    memset(out, 0, sizeof *out);
    if (!json_is_object(obj))
        return;
    out->tokens_per_s = positive(obj, "tokens_per_s");
    out->flops = positive(obj, "flops");
    out->params = positive(obj, "params");
    const json_t *small = json_object_get(obj, "small");
    double sp = positive(small, "params"), sf = positive(small, "flops");
    if (sp > 0 && sf > 0) {
        out->small_params = sp;
        out->small_flops = sf;
    }
}

bool bench_speed_is_current(const char *speed)
{
    json_t *obj = speed ? json_loads(speed, 0, NULL) : NULL;
    const char *bench = json_string_value(json_object_get(obj, "bench"));
    bool current = bench && strcmp(bench, BENCH_SPEED_MARK) == 0;
    json_decref(obj);
    return current;
}
