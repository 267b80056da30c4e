/* estimate_provisional.c - the stand-in estimator (see the header). The
 * band factors below are where the real estimator puts calibration from
 * past jobs; they are documented in docs/api.md as provisional. */
#include "api/estimate_provisional.h"

#include <math.h>
#include <string.h>

#include "core/text.h"

#define OVERHEAD_BYTES (300LL << 20) /* the process, tokenizer, buffers */
#define LORA_RANK 16
/* When a worker has not measured its speed: what a CPU core sustains on
 * training work (an assumption, stated in docs/api.md). */
#define UNMEASURED_FLOPS_PER_CPU 5e9
#define STARTUP_S 15.0 /* start the trainer, load the model */

static int64_t lora_params(const struct catalog_model *m)
{
    int64_t h = m->hidden, kv = (int64_t)m->kv_heads * (h / m->heads), r = LORA_RANK;
    /* q, k, v, o, gate, up, down: r × (in + out) each */
    int64_t per_layer = r * ((h + h) * 2 + (h + kv) * 2 + (h + m->intermediate) * 3);
    return per_layer * m->layers;
}

int64_t memory_need_provisional(const struct catalog_model *m, const char *precision,
                                const char *adapter, int batch_size, int seq_len)
{
    double n = (double)m->params;
    bool full = adapter && strcmp(adapter, "full") == 0;
    bool nf4 = precision && strcmp(precision, "4-bit") == 0;
    double base = full ? n * 16.0                   /* fp32 master + grad + AdamW m, v */
                       : nf4 ? n * 4.127 / 8.0      /* NF4 + double-quantized scales */
                             : n * 2.0;             /* bf16 */
    double trainable = full ? 0 : (double)lora_params(m) * 16.0;
    double bt = (double)batch_size * seq_len;
    /* Kept activations per token per layer (fp32): about 16 hidden-sized
     * and 3 intermediate-sized vectors, plus attention scores. */
    double act = bt * m->layers *
                 (16.0 * m->hidden + 3.0 * m->intermediate + (double)m->heads * seq_len) * 4.0;
    double logits = bt * m->vocab * 4.0 * 2.0; /* logits and their gradient */
    return (int64_t)(base + trainable + act + logits) + OVERHEAD_BYTES;
}

double flops_per_token_provisional(const struct catalog_model *m, const char *adapter,
                                   int seq_len)
{
    double n = (double)m->params;
    if (adapter && strcmp(adapter, "full") == 0)
        return 6.0 * n + 6.0 * m->layers * m->hidden * (double)seq_len;
    return 4.0 * n + 6.0 * (double)lora_params(m);
}

int64_t tokens_per_epoch_provisional(long examples, int64_t text_bytes, int seq_len)
{
    if (examples <= 0)
        return 0;
    /* About 4 bytes of English per token, plus the template's tokens. */
    double per_example = (double)text_bytes / (double)examples / 4.0 + 8.0;
    if (per_example > seq_len)
        per_example = seq_len;
    return (int64_t)ceil(per_example * (double)examples);
}

static double worker_flops(const struct est_worker *w)
{
    if (w->flops > 0)
        return w->flops;
    return (w->cpus > 0 ? w->cpus : 1) * UNMEASURED_FLOPS_PER_CPU;
}

void estimate_provisional(const struct est_shape *s, const struct est_worker *w, int n,
                          long queued_ahead, struct estimate *out)
{
    memset(out, 0, sizeof *out);
    out->memory_bytes =
        memory_need_provisional(s->model, s->precision, s->adapter, s->batch_size, s->seq_len);
    int64_t need_4bit =
        memory_need_provisional(s->model, "4-bit", "lora", s->batch_size, s->seq_len);
    double fpt = flops_per_token_provisional(s->model, s->adapter, s->seq_len);
    if (strcmp(s->precision, "4-bit") == 0)
        fpt *= 1.2; /* dequantizing the base on every use */
    out->any_worker = n > 0;
    bool fastest = s->goal && strcmp(s->goal, "fastest_finish") == 0;
    int best = -1, fitting = 0, idle_fitting = 0;
    double best_score = 0, best_train = 0;
    for (int i = 0; i < n; i++) {
        if (w[i].mem_bytes >= need_4bit)
            out->fits_at_4bit = true;
        if (w[i].mem_bytes < out->memory_bytes)
            continue;
        fitting++;
        if (w[i].idle)
            idle_fitting++;
        double train = (double)s->tokens * fpt / worker_flops(&w[i]) + STARTUP_S;
        /* An idle worker wins over a busy one; then the goal decides. */
        double score = fastest ? train : train * w[i].price_per_hour + train * 1e-9;
        if (!w[i].idle)
            score += 1e12;
        if (best < 0 || score < best_score) {
            best = i;
            best_score = score;
            best_train = train;
        }
    }
    if (best < 0)
        return;
    out->fits = true;
    /* Free now: an idle worker that fits is left once the jobs already
     * waiting have taken theirs. */
    out->free_now = w[best].idle && idle_fitting > queued_ahead;
    text_copy(out->worker, sizeof out->worker, w[best].name);
    out->train_low_s = best_train * 0.75;
    out->train_high_s = best_train * 1.5;
    double wait_high = 0;
    if (!out->free_now || queued_ahead > 0)
        wait_high = best_train * (1.0 + (double)queued_ahead / (fitting ? fitting : 1));
    out->low_s = out->train_low_s;
    out->high_s = out->train_high_s + wait_high;
    out->price_low = w[best].price_per_hour * out->train_low_s / 3600.0;
    out->price_high = w[best].price_per_hour * out->train_high_s / 3600.0;
}

bool time_left_provisional(const struct store_job *j, int64_t now_ms, double *low_s,
                           double *high_s, const char **basis)
{
    double est_train_low_s = j->est_train_low_s, est_train_high_s = j->est_train_high_s;
    if (job_status_is_terminal(j->status) || j->max_steps <= 0)
        return false;
    long remaining = j->max_steps - j->steps_done;
    if (remaining < 0)
        remaining = 0;
    double frac = (double)remaining / (double)j->max_steps;
    long run_steps = j->steps_done - j->run_start_step;
    double elapsed_s = j->run_started_ms ? (double)(now_ms - j->run_started_ms) / 1000.0 : 0;
    long five_percent = (long)ceil(0.05 * (double)j->max_steps);
    if (j->status == JOB_RUNNING && j->run_started_ms && run_steps >= 1 &&
        j->steps_done >= five_percent && elapsed_s > 0) {
        double pace = elapsed_s / (double)run_steps;
        *low_s = pace * remaining * 0.85;
        *high_s = pace * remaining * 1.2;
        *basis = "pace";
        return true;
    }
    *basis = "estimate";
    if (j->status == JOB_QUEUED && j->steps_done == 0) {
        *low_s = j->est_low_s;
        *high_s = j->est_high_s;
    } else {
        *low_s = est_train_low_s * frac - elapsed_s;
        *high_s = est_train_high_s * frac - elapsed_s;
        if (*low_s < 60)
            *low_s = 60;
        if (*high_s < *low_s)
            *high_s = *low_s;
    }
    return true;
}
