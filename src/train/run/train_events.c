/* train_events.c - JSON event lines on stdout (see train_events.h). */
#include "train/run/train_events.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/trainer_protocol.h"

static double t0;

void tev_init(void)
{
    t0 = clock_mono_s();
}

double tev_now(void)
{
    return clock_mono_s() - t0;
}

/* Adds "event" and "t", prints the object on one line, flushes, and
 * releases it. */
static void emit(const char *name, json_t *o)
{
    if (!o)
        return;
    json_t *e = json_object();
    if (!e) {
        json_decref(o);
        return;
    }
    json_object_set_new(e, "event", json_string(name));
    json_object_set_new(e, "t", json_real((double)(long long)(tev_now() * 1000.0) / 1000.0));
    json_object_update(e, o);
    json_decref(o);
    char *s = json_dumps(e, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(8));
    json_decref(e);
    if (s) {
        fputs(s, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        free(s);
    }
}

void tev_started(uint64_t step, uint64_t max_steps, size_t examples, size_t tokens,
                 int64_t resumed_from, const char *cpu_path)
{
    emit(tproto_event_name(TPROTO_EVENT_STARTED),
         json_pack("{sI sI sI sI so ss}", "step", (json_int_t)step, "max_steps",
                   (json_int_t)max_steps, "examples", (json_int_t)examples, "tokens",
                   (json_int_t)tokens, "resumed_from",
                   resumed_from >= 0 ? json_integer(resumed_from) : json_null(), "cpu_path",
                   cpu_path));
}

/* A `log` event of the formatted line, with "level": "warn" when warn. */
static void log_event(int warn, const char *fmt, va_list ap)
{
    char line[1024];
    vsnprintf(line, sizeof line, fmt, ap);
    fprintf(stderr, "%s%s\n", warn ? "warning: " : "", line);
    json_t *o = json_pack("{ss}", "line", line);
    if (o && warn)
        json_object_set_new(o, "level", json_string("warn"));
    emit(tproto_event_name(TPROTO_EVENT_LOG), o);
}

void tev_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_event(0, fmt, ap);
    va_end(ap);
}

void tev_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_event(1, fmt, ap);
    va_end(ap);
}

void tev_metrics_clear(struct tev_metrics *m)
{
    for (int i = 0; i < TPROTO_METRIC_COUNT; i++)
        m->v[i] = NAN;
}

/* Sets each measured metric of m on o by its name. */
static void put_metrics(json_t *o, const struct tev_metrics *m)
{
    for (int i = 0; o && m && i < TPROTO_METRIC_COUNT; i++)
        if (isfinite(m->v[i]))
            json_object_set_new(o, tproto_metric_name((enum tproto_metric)i), json_real(m->v[i]));
}

void tev_step(uint64_t step, double loss, double lr, double tokens_per_s)
{
    tev_step_with(step, loss, lr, tokens_per_s, NULL);
}

void tev_step_with(uint64_t step, double loss, double lr, double tokens_per_s,
                   const struct tev_step_extra *x)
{
    json_t *o = json_pack("{sI sf sf sf}", "step", (json_int_t)step, "loss", loss, "lr", lr,
                          "tokens_per_s", tokens_per_s);
    if (o && x && x->packing_efficiency >= 0)
        json_object_set_new(o, "packing_efficiency", json_real(x->packing_efficiency));
    if (o && x && x->dpo) {
        json_object_set_new(o, "reward_margin", json_real(x->reward_margin));
        json_object_set_new(o, "reward_accuracy", json_real(x->reward_accuracy));
        json_object_set_new(o, "chosen_logp", json_real(x->chosen_logp));
        json_object_set_new(o, "rejected_logp", json_real(x->rejected_logp));
    }
    if (o && x && x->moe)
        json_object_set_new(o, "aux_loss", json_real(x->aux_loss));
    if (x)
        put_metrics(o, x->metrics);
    emit(tproto_event_name(TPROTO_EVENT_STEP), o);
}

void tev_memory(uint64_t peak_rss_bytes, uint64_t gpu_peak_bytes)
{
    json_t *o = json_pack("{sI}", "peak_rss_bytes", (json_int_t)peak_rss_bytes);
    if (o && gpu_peak_bytes)
        json_object_set_new(o, "gpu_peak_bytes", json_integer((json_int_t)gpu_peak_bytes));
    emit(tproto_event_name(TPROTO_EVENT_MEMORY), o);
}

void tev_checkpoint(uint64_t step, const char *path, double train_loss,
                    const struct tev_metrics *metrics)
{
    json_t *o = json_pack("{sI ss sf}", "step", (json_int_t)step, "path", path, "train_loss",
                          train_loss);
    if (o && metrics) {
        json_t *m = json_object();
        put_metrics(m, metrics);
        json_object_set_new(o, "metrics", m);
    }
    emit(tproto_event_name(TPROTO_EVENT_CHECKPOINT), o);
}

void tev_done(uint64_t step, double train_loss, const char *model_dir, const char *adapter_dir)
{
    emit(tproto_event_name(TPROTO_EVENT_DONE),
         json_pack("{sI sf ss so}", "step", (json_int_t)step, "train_loss", train_loss, "model_dir",
                   model_dir, "adapter_dir", adapter_dir ? json_string(adapter_dir) : json_null()));
}

void tev_done_early(uint64_t step, double train_loss, const char *model_dir,
                    const char *adapter_dir, uint64_t best_step)
{
    emit(tproto_event_name(TPROTO_EVENT_DONE),
         json_pack("{sI sf ss so sb sI}", "step", (json_int_t)step, "train_loss", train_loss,
                   "model_dir", model_dir, "adapter_dir",
                   adapter_dir ? json_string(adapter_dir) : json_null(), "early_stopped", 1,
                   "best_step", (json_int_t)best_step));
}

static json_t *sample_of(uint64_t step, int base, const char *prompt, const char *answer)
{
    return json_pack("{sI sb ss ss}", "step", (json_int_t)step, "base", base, "prompt", prompt,
                     "answer", answer);
}

void tev_sample(uint64_t step, int base, const char *prompt, const char *answer)
{
    emit(tproto_event_name(TPROTO_EVENT_SAMPLE), sample_of(step, base, prompt, answer));
}

void tev_sample_graded(uint64_t step, int base, const char *prompt, const char *answer,
                       double score, const json_t *scores)
{
    json_t *o = sample_of(step, base, prompt, answer);
    if (o) {
        json_object_set_new(o, "score", json_real(score));
        if (scores)
            json_object_set_new(o, "scores", json_deep_copy(scores));
    }
    emit(tproto_event_name(TPROTO_EVENT_SAMPLE), o);
}

void tev_error(int user, const char *line)
{
    fprintf(stderr, "alallo train: %s\n", line);
    emit(tproto_event_name(TPROTO_EVENT_ERROR),
         json_pack("{ss ss}", "kind",
                   tproto_error_kind_name(user ? TPROTO_ERROR_USER : TPROTO_ERROR_INTERNAL), "line",
                   line));
}

uint64_t tev_peak_rss(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024;
}
