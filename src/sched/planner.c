/* planner.c - memory need, FLOPs per token and feasibility of a job. */
#include "sched/planner.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)
#define PROCESS_OVERHEAD_BYTES (256.0 * MIB)
#define MARGIN 0.05
/* a score_model grader's model, loaded for inference in fp32 */
#define GRADER_BYTES_PER_PARAM 4.0
#define NF4_BITS_PER_WEIGHT 4.127 /* 4 bits + 8-bit scale per 64 + fp32 per 256 scales */
#define ACT_BYTES 4.0             /* the trainer keeps activations in fp32 */
#define DEFAULT_LORA_RANK 16
/* The trainer's own sizes (src/train/model/model_pass.c): logits are computed a
 * block of rows of at most this many floats at a time, and the 4-bit
 * dequantisation buffer is at least this many floats. */
#define HEAD_MAX_FLOATS (16.0 * MIB)
#define DEQ_MIN_FLOATS (2.0 * MIB)
/* The GPU trainer's (src/train/cuda/cuda_model.c: CUDA_HEAD_MAX_FLOATS,
 * CUDA_DEQ_MIN): larger blocks of logits, for the tensor cores. */
#define GPU_HEAD_MAX_FLOATS (64.0 * MIB)
#define GPU_DEQ_MIN_FLOATS (4.0 * MIB)

static const char *const precision_names[PLAN_PRECISION_COUNT] = {"16-bit", "4-bit"};
static const char *const adapter_names[PLAN_ADAPTER_COUNT] = {"lora", "full"};

const char *planner_precision_name(enum plan_precision p)
{
    if ((int)p < 0 || p >= PLAN_PRECISION_COUNT)
        return NULL;
    return precision_names[p];
}

bool planner_precision_parse(const char *s, enum plan_precision *out)
{
    for (int i = 0; s && i < PLAN_PRECISION_COUNT; i++) {
        if (strcmp(s, precision_names[i]) == 0) {
            *out = (enum plan_precision)i;
            return true;
        }
    }
    return false;
}

const char *planner_adapter_name(enum plan_adapter a)
{
    if ((int)a < 0 || a >= PLAN_ADAPTER_COUNT)
        return NULL;
    return adapter_names[a];
}

bool planner_adapter_parse(const char *s, enum plan_adapter *out)
{
    for (int i = 0; s && i < PLAN_ADAPTER_COUNT; i++) {
        if (strcmp(s, adapter_names[i]) == 0) {
            *out = (enum plan_adapter)i;
            return true;
        }
    }
    return false;
}

enum plan_method planner_method(enum plan_precision p, enum plan_adapter a)
{
    if (p == PLAN_16BIT && a == PLAN_LORA)
        return PLAN_METHOD_LORA_16;
    if (p == PLAN_16BIT && a == PLAN_FULL)
        return PLAN_METHOD_FULL_16;
    if (p == PLAN_4BIT && a == PLAN_LORA)
        return PLAN_METHOD_LORA_4;
    return PLAN_METHOD_COUNT;
}

static enum alallo_err invalid(char *why, size_t cap, const char *reason)
{
    if (why && cap)
        snprintf(why, cap, "%s", reason);
    return ERR_INVALID;
}

/* Width of the query (and attention output) projections. */
static double q_dim(const struct plan_model *m)
{
    return m->head_dim > 0 ? (double)m->heads * m->head_dim : (double)m->hidden;
}

/* Width of the key/value projections. */
static double kv_dim(const struct plan_model *m)
{
    return q_dim(m) * m->kv_heads / m->heads;
}

/* Parameters of the attention projections of one layer. */
static double attn_params(const struct plan_model *m)
{
    double h = m->hidden;
    return 2.0 * h * q_dim(m) + 2.0 * h * kv_dim(m);
}

/* Embedding, output head (unless tied) and the norms. */
static double outside_block_params(const struct plan_model *m)
{
    double emb = (double)m->vocab * m->hidden;
    double head = m->tied ? 0 : emb;
    double norms = (2.0 * m->layers + 1.0) * m->hidden;
    if (m->post_norms) /* Gemma 2 and 3: after attention and after the MLP too */
        norms += 2.0 * m->layers * m->hidden;
    if (m->qk_norm) /* one q and one k scale of head_dim per layer */
        norms += 2.0 * m->layers * q_dim(m) / m->heads;
    return emb + head + norms;
}

/* Layers whose MLP is the experts. */
static double sparse_layers(const struct plan_model *m)
{
    return m->experts > 0 ? (m->sparse_layers > 0 ? m->sparse_layers : m->layers) : 0;
}

/* Parameters of every layer's MLP: all experts (active false) or the
 * experts_used a token goes through, plus each sparse layer's router. */
static double mlp_params(const struct plan_model *m, bool active)
{
    double h = m->hidden, sparse = sparse_layers(m);
    double dense = (m->layers - sparse) * 3.0 * h * (double)m->intermediate;
    double experts = active ? m->experts_used : m->experts;
    return dense + sparse * (m->experts * h + experts * 3.0 * h * (double)m->moe_intermediate);
}

enum alallo_err planner_normalize(const struct plan_job *in, struct plan_job *out, char *why,
                                  size_t whycap)
{
    struct plan_job j = *in;
    struct plan_model *m = &j.model;

    if (m->layers < 1 || m->layers > PLAN_MAX_LAYERS)
        return invalid(why, whycap, "model layers out of range");
    if (m->hidden < 1 || m->hidden > PLAN_MAX_HIDDEN)
        return invalid(why, whycap, "model hidden size out of range");
    if (m->vocab < 1 || m->vocab > PLAN_MAX_VOCAB)
        return invalid(why, whycap, "model vocabulary out of range");
    if (m->heads < 1 || m->heads > m->hidden)
        return invalid(why, whycap, "model attention heads out of range");
    if (m->head_dim < 0 || m->head_dim > PLAN_MAX_HIDDEN)
        return invalid(why, whycap, "model head dimension out of range");
    if (m->kv_heads == 0)
        m->kv_heads = m->heads;
    if (m->kv_heads < 1 || m->kv_heads > m->heads)
        return invalid(why, whycap, "model key/value heads out of range");
    if (m->intermediate < 0 || m->intermediate > 16 * PLAN_MAX_HIDDEN)
        return invalid(why, whycap, "model intermediate size out of range");
    if (m->params < 0)
        return invalid(why, whycap, "model parameter count is negative");
    if (m->experts < 0 || m->experts > 65536 ||
        (m->experts > 0 &&
         (m->experts_used < 1 || m->experts_used > m->experts || m->moe_intermediate < 1 ||
          m->moe_intermediate > 16 * PLAN_MAX_HIDDEN || m->sparse_layers < 0 ||
          m->sparse_layers > m->layers)))
        return invalid(why, whycap, "model experts out of range");
    if (m->experts > 0 && m->intermediate == 0)
        m->intermediate = m->moe_intermediate; /* only its dense layers use it */
    if (m->intermediate == 0) {
        /* Derive the MLP width from the parameter count: what is not
         * embeddings, norms or attention is the three MLP matrices. */
        double mlp = ((double)m->params - outside_block_params(m)) / m->layers - attn_params(m);
        double i = mlp / (3.0 * m->hidden);
        if (m->params == 0 || !(i >= 1) || i > 16.0 * PLAN_MAX_HIDDEN)
            return invalid(why, whycap, "model shape needs intermediate size or a parameter count");
        m->intermediate = (int)llround(i);
    }
    if (m->params == 0)
        m->params = (int64_t)(outside_block_params(m) + m->layers * attn_params(m) +
                              mlp_params(m, false));
    if ((int)j.precision < 0 || j.precision >= PLAN_PRECISION_COUNT)
        return invalid(why, whycap, "unknown precision");
    if ((int)j.adapter < 0 || j.adapter >= PLAN_ADAPTER_COUNT)
        return invalid(why, whycap, "unknown adapter");
    if (planner_method(j.precision, j.adapter) == PLAN_METHOD_COUNT)
        return invalid(why, whycap, "full fine-tuning needs 16-bit precision");
    if (j.adapter == PLAN_LORA) {
        if (j.lora_rank == 0)
            j.lora_rank = DEFAULT_LORA_RANK;
        if (j.lora_targets == 0)
            j.lora_targets = PLAN_T_ALL;
        if (j.lora_rank < 1 || j.lora_rank > PLAN_MAX_RANK)
            return invalid(why, whycap, "LoRA rank out of range");
        if (j.lora_targets & ~PLAN_T_ALL)
            return invalid(why, whycap, "unknown LoRA target");
    }
    if (j.batch < 1 || j.batch > PLAN_MAX_BATCH)
        return invalid(why, whycap, "batch size out of range");
    if (j.seq_len < 1 || j.seq_len > PLAN_MAX_SEQ)
        return invalid(why, whycap, "sequence length out of range");
    if (j.threads == 0)
        j.threads = PLAN_ASSUMED_THREADS;
    if (j.threads < 1 || j.threads > PLAN_MAX_THREADS)
        return invalid(why, whycap, "thread count out of range");
    if (j.grader_params < 0 || j.grader_params > PLAN_MAX_GRADER_PARAMS)
        return invalid(why, whycap, "grader model parameter count out of range");
    *out = j;
    return ERR_OK;
}

/* LoRA parameters as a double: r * (in + out) per targeted matrix. */
static double lora_params(const struct plan_job *job)
{
    if (job->adapter != PLAN_LORA)
        return 0;
    const struct plan_model *m = &job->model;
    double h = m->hidden, q = q_dim(m), kv = kv_dim(m), im = m->intermediate, r = job->lora_rank;
    unsigned t = job->lora_targets;
    double per_layer = 0;
    if (t & PLAN_T_Q)
        per_layer += r * (h + q);
    if (t & PLAN_T_K)
        per_layer += r * (h + kv);
    if (t & PLAN_T_V)
        per_layer += r * (h + kv);
    if (t & PLAN_T_O)
        per_layer += r * (q + h);
    double mlp = 0; /* the dense layers' MLP: the experts take no adapter */
    if (t & PLAN_T_GATE)
        mlp += r * (h + im);
    if (t & PLAN_T_UP)
        mlp += r * (h + im);
    if (t & PLAN_T_DOWN)
        mlp += r * (im + h);
    return per_layer * m->layers + mlp * (m->layers - sparse_layers(m));
}

int64_t planner_lora_params(const struct plan_job *job)
{
    return (int64_t)lora_params(job);
}

/* Bytes as int64, capped so that absurd shapes stay representable. */
static int64_t bytes(double b)
{
    if (b > 9e18)
        b = 9e18;
    return (int64_t)ceil(b);
}

/* The GPU trainer's LoRA folded into the base products on a 16-bit base
 * (src/train/cuda/cuda_model.c): each adapted matrix keeps, beside W, r
 * columns for every adapted projection of its group (q, k, v; o; gate,
 * up; down), and under it r rows (scale A) as wide; the forward's bf16
 * input of a group is as much wider. Returns the matrices' extra values;
 * *widest_cols OUT the widest group's columns. */
static double lora_fold_values(const struct plan_job *job, double *widest_cols)
{
    const struct plan_model *m = &job->model;
    double h = m->hidden, q = q_dim(m), kv = kv_dim(m), im = m->intermediate, r = job->lora_rank;
    unsigned t = job->lora_targets;
    double qkv = r * (!!(t & PLAN_T_Q) + !!(t & PLAN_T_K) + !!(t & PLAN_T_V));
    double gu = r * (!!(t & PLAN_T_GATE) + !!(t & PLAN_T_UP));
    double n_qkv = !!(t & PLAN_T_Q) + !!(t & PLAN_T_K) + !!(t & PLAN_T_V);
    double n_gu = !!(t & PLAN_T_GATE) + !!(t & PLAN_T_UP);
    double per_layer = qkv * ((t & PLAN_T_Q ? q : 0) + (t & PLAN_T_K ? kv : 0) +
                              (t & PLAN_T_V ? kv : 0)) + n_qkv * r * (h + qkv) +
                       (t & PLAN_T_O ? r * h + r * (q + r) : 0);
    double mlp = gu * ((t & PLAN_T_GATE ? im : 0) + (t & PLAN_T_UP ? im : 0)) +
                 n_gu * r * (h + gu) + (t & PLAN_T_DOWN ? r * h + r * (im + r) : 0);
    /* each group's A stacked as bf16 (change 2c), o's apart */
    per_layer += qkv * h;
    mlp += gu * h + (t & PLAN_T_DOWN ? r * im : 0);
    *widest_cols = fmax(qkv, fmax(gu, r));
    return per_layer * m->layers + mlp * (m->layers - sparse_layers(m));
}

/* The products' bf16 inputs the GPU trainer keeps a layer for the weight
 * gradients, in values a token (cuda_acts_create, change 1n): each group
 * with a weight that trains (q, k and v; gate and up; down; o's input is
 * attention's output, counted with it), LoRA's folded columns beside
 * (16-bit LoRA). 4-bit LoRA recomputes each layer and keeps none. */
static double gpu_kept_inputs(const struct plan_job *j)
{
    const struct plan_model *m = &j->model;
    double h = m->hidden, im = m->intermediate, r = j->lora_rank;
    if (j->adapter == PLAN_FULL)
        return 2.0 * h + im;
    if (j->precision == PLAN_4BIT)
        return 0;
    unsigned t = j->lora_targets;
    double nq = !!(t & PLAN_T_Q) + !!(t & PLAN_T_K) + !!(t & PLAN_T_V);
    double ng = !!(t & PLAN_T_GATE) + !!(t & PLAN_T_UP);
    return (nq ? h + r * nq : 0) + (ng ? h + r * ng : 0) + (t & PLAN_T_DOWN ? im + r : 0);
}

/* The scratch of the GPU's one pass for LoRA's dB and dy B
 * (cuda_lora_dbt_floats, change 2e), at most, in floats: each block of
 * 256 rows keeps its dB share of the widest output (its column tiles of
 * 64) and each slice of them its t share, with r rounded up to 16 and
 * slices for about 264 blocks. None past rank 64 (two products then). */
static double gpu_lora_dbt_floats(double tokens, double widest_out, double r)
{
    if (r <= 0 || r > 64)
        return 0;
    double rp = ceil(r / 16.0) * 16.0, blocks = ceil(tokens / 256.0);
    /* and a group's gathered T (bf16) and its dA (change 2d), q, k and v's
     * at most */
    double group = 3.0 * r * (tokens / 2.0 + widest_out);
    return rp * (blocks * ceil(widest_out / 64.0) * 64.0 + (264.0 + blocks) * 256.0) + group;
}

/* Both memory models: on_gpu selects the GPU's activations, overhead and
 * margin (planner.h says what differs). */
static enum alallo_err memory_model(const struct plan_job *job, bool on_gpu,
                                    struct plan_memory *out, char *why, size_t whycap)
{
    struct plan_job j;
    enum alallo_err e = planner_normalize(job, &j, why, whycap);
    if (e)
        return e;
    const struct plan_model *m = &j.model;
    double n = (double)m->params;
    double h = m->hidden, q = q_dim(m), kv = kv_dim(m), im = m->intermediate;
    double tokens = (double)j.batch * j.seq_len;
    /* the CPU trainer dequantises into a buffer of the largest projection;
     * the GPU one a chunk of rows at a time into a fixed one (NF4_BLOCK
     * rows of the widest input at least) */
    double largest = fmax(DEQ_MIN_FLOATS, fmax(h * fmax(q, kv), h * im));
    if (m->experts > 0)
        largest = fmax(largest, h * (double)m->moe_intermediate);
    if (on_gpu)
        largest = fmax(GPU_DEQ_MIN_FLOATS, 64.0 * fmax(h, fmax(q, im)));

    double base, trainable, fold_cols = 0;
    if (j.adapter == PLAN_FULL) {
        base = 2.0 * n;       /* bf16 working copy                  */
        trainable = 16.0 * n; /* fp32 master, grad, AdamW m and v    */
    } else {
        if (j.precision == PLAN_4BIT) {
            double linear = n - outside_block_params(m);
            base = linear * NF4_BITS_PER_WEIGHT / 8.0 + 2.0 * outside_block_params(m);
        } else {
            base = 2.0 * n;
        }
        double cols = 0;
        if (on_gpu && j.precision != PLAN_4BIT) {
            base += 2.0 * lora_fold_values(&j, &cols);
            fold_cols = cols;
        }
        /* fp32 A and B, grad, AdamW m and v; the GPU adds the bf16 copy
         * of A and B its products read (cuda_model.c) */
        trainable = (on_gpu ? 18.0 : 16.0) * lora_params(&j);
    }
    /* What model_acts_create (src/train/model/model_pass.c) allocates. */
    double r = j.adapter == PLAN_LORA ? j.lora_rank : 0;
    double kept = 2.0 * h + 2.0 + 2.0 * q + 2.0 * kv + m->heads + 2.0 * im + 7.0 * r;
    if (m->post_norms)
        kept += 2.0 * h + 2.0;
    if (m->qk_norm)
        kept += q + kv + m->heads + m->kv_heads;
    double scratch = 7.0 * h + 1.0 + 2.0 * q + 2.0 * kv + 4.0 * im + fmax(r, 1.0);
    double kept_all = kept * m->layers;
    if (m->experts > 0) { /* moe_acts_create (src/train/model/moe.c) */
        double sp = sparse_layers(m), k = m->experts_used, mi = m->moe_intermediate;
        if (sp >= m->layers)
            kept_all -= 2.0 * im * m->layers; /* no dense layer keeps g and u */
        kept_all += sp * (m->experts + 4.0 * k + 2.0 * k * mi);
        scratch += 3.0 * k * h + 4.0 * k * mi + m->experts + 2.0 * k;
    }
    double scores = (m->attn_softcap ? 3.0 : 2.0) * (double)j.seq_len * j.seq_len * j.threads;
    double activations =
        ACT_BYTES * (tokens * (kept_all + scratch) + largest + scores);
    /* What cuda_acts_create (src/train/cuda/cuda_model.c) allocates: the
     * same fp32 arrays, no T x T score blocks (fused attention), plus bf16
     * copies of a product's input (LoRA's folded columns beside it), of
     * LoRA's dropped input, of its dy and of du beside dg's (each at most
     * max(h, q, im) wide, the last two r more: dy B beside dy), and a
     * bf16 buffer of the largest projection (NF4 decoding), and the
     * products' inputs it keeps for the weight gradients (gpu_kept_inputs). */
    double widest = fmax(h, fmax(q, im));
    /* 4-bit LoRA on a GPU recomputes each layer in the backward pass
     * (cuda_train_recompute_auto): it keeps each layer's input (h) and one
     * layer's other activations */
    double layers_kept = kept_all, gated_layers = m->layers;
    if (on_gpu && j.adapter == PLAN_LORA && j.precision == PLAN_4BIT) {
        layers_kept = h * m->layers + kept;
        gated_layers = 1;
    }
    /* It keeps gate's and up's outputs as bf16 (half of their 2 im a
     * layer), and q, k, v and attention's output (half of 2 q + 2 kv:
     * changes 1i and 1k), and the residual stream
     * (half of each layer's input and middle, and the last layer's output:
     * change 1j), and its gated backward writes dg and du as bf16 alone (no
     * model has a bias on gate or up to want their fp32). */
    double residual = h * (m->layers + 1.0 + gated_layers);
    if (on_gpu)
        activations = ACT_BYTES * tokens *
                          (layers_kept - (im + q + kv) * gated_layers - 0.5 * residual +
                           scratch - 2.0 * im) +
                      2.0 * (tokens * (4.0 * widest + fold_cols + 2.0 * r +
                                       m->layers * gpu_kept_inputs(&j)) +
                             largest) +
                      ACT_BYTES * gpu_lora_dbt_floats(tokens, widest, r);
    double head_max = on_gpu ? GPU_HEAD_MAX_FLOATS : HEAD_MAX_FLOATS;
    double rows = fmin(tokens, fmax(16.0, floor(head_max / (double)m->vocab)));
    /* On the GPU the head's block of logits is bf16 alone unless capped
     * (its product writes them so, change 1h; a cap keeps fp32 logits and
     * their capped copy beside the bf16 dlogits), and its input is bf16
     * too. */
    double fp32_logits = m->final_softcap ? 2.0 : on_gpu ? 0.0 : 1.0;
    double logits = ACT_BYTES * rows * (fp32_logits * m->vocab + 2.0 * h);
    if (on_gpu)
        logits += 2.0 * rows * (m->vocab + h);
    double overhead = on_gpu ? (double)PLAN_GPU_OVERHEAD_BYTES : PROCESS_OVERHEAD_BYTES;
    /* the grader's models, held in fp32 in the process's memory */
    double grader = on_gpu ? 0.0 : GRADER_BYTES_PER_PARAM * (double)j.grader_params;
    double sum = base + trainable + activations + logits + grader + overhead;
    double total = sum * (1.0 + (on_gpu ? PLAN_GPU_MARGIN : MARGIN));

    out->base = bytes(base);
    out->trainable = bytes(trainable);
    out->activations = bytes(activations);
    out->logits = bytes(logits);
    out->grader = bytes(grader);
    out->overhead = bytes(total - base - trainable - activations - logits - grader);
    out->total = bytes(total);
    return ERR_OK;
}

enum alallo_err planner_memory(const struct plan_job *job, struct plan_memory *out, char *why,
                               size_t whycap)
{
    return memory_model(job, false, out, why, whycap);
}

enum alallo_err planner_memory_gpu(const struct plan_job *job, struct plan_memory *out,
                                   char *why, size_t whycap)
{
    return memory_model(job, true, out, why, whycap);
}

int64_t planner_gpu_need(const struct plan_job *job)
{
    if (job->model.experts > 0)
        return INT64_MAX; /* the GPU trainer refuses it (src/train/cuda/cuda_model.c) */
    struct plan_job one = *job;
    one.batch = 1;
    struct plan_memory m;
    return memory_model(&one, true, &m, NULL, 0) ? 0 : m.total;
}

int planner_gpu_batch(const struct plan_job *job, int64_t gpu_mem_bytes)
{
    struct plan_job j = *job;
    struct plan_memory m;
    if (job->batch < 1 || job->batch > PLAN_MAX_BATCH)
        return 0;
    /* The largest divisor of the batch that fits, so that micro-batches
     * times accumulation steps are exactly the batch the user chose. */
    for (int b = job->batch; b >= 1; b--) {
        if (job->batch % b != 0)
            continue;
        j.batch = b;
        if (memory_model(&j, true, &m, NULL, 0) != ERR_OK)
            return 0;
        if (m.total <= gpu_mem_bytes)
            return b;
    }
    return 0;
}

int64_t planner_active_params(const struct plan_job *job)
{
    struct plan_job j;
    if (planner_normalize(job, &j, NULL, 0))
        return 0;
    const struct plan_model *m = &j.model;
    if (m->experts == 0)
        return m->params;
    return (int64_t)((double)m->params - mlp_params(m, false) + mlp_params(m, true));
}

double planner_flops_per_token(const struct plan_job *job)
{
    struct plan_job j;
    if (planner_normalize(job, &j, NULL, 0))
        return 0;
    double n = (double)planner_active_params(&j);
    if (j.adapter == PLAN_FULL)
        return 6.0 * n + 6.0 * j.model.layers * (double)j.model.hidden * j.seq_len;
    return 4.0 * n + 6.0 * lora_params(&j);
}

double planner_reference_flops_per_token(const struct plan_job *job)
{
    struct plan_job j;
    if (planner_normalize(job, &j, NULL, 0))
        return 0;
    if (j.adapter == PLAN_FULL)
        return planner_flops_per_token(&j) / 3.0;
    return 2.0 * (double)planner_active_params(&j) + 2.0 * lora_params(&j);
}

double planner_work_flops(const struct plan_job *job, double train_tokens,
                          double reference_tokens)
{
    double ref = reference_tokens > 0 ? reference_tokens * planner_reference_flops_per_token(job)
                                      : 0;
    return train_tokens * planner_flops_per_token(job) + ref;
}

/* True when some worker that may run jobs (capacity_may_run: not lost, or
 * lost so recently that it may come back) offers `need` bytes, and, when
 * it has GPUs, holds `job` on one of them (never without a job). */
static bool fits_some(int64_t need, const struct plan_job *job, const struct sched_worker *workers,
                      size_t n)
{
    int64_t gpu_need = job ? planner_gpu_need(job) : 0;
    for (size_t i = 0; i < n; i++) {
        const struct sched_worker *w = &workers[i];
        if (!capacity_may_run(w) || w->mem_bytes < need)
            continue;
        if (w->gpus > 0 && !(gpu_need > 0 && gpu_need <= w->gpu_mem_bytes))
            continue;
        return true;
    }
    return false;
}

enum plan_fit planner_fit_for_need(const struct plan_job *job, int64_t need_bytes,
                                   const struct sched_worker *workers, size_t n_workers)
{
    if (need_bytes > 0 && fits_some(need_bytes, job, workers, n_workers))
        return PLAN_FITS;
    if (!job || job->precision != PLAN_16BIT)
        return PLAN_FITS_NOWHERE;
    struct plan_job lower = *job;
    lower.precision = PLAN_4BIT;
    lower.adapter = PLAN_LORA;
    struct plan_memory m16, m4;
    if (planner_memory(job, &m16, NULL, 0) || planner_memory(&lower, &m4, NULL, 0) ||
        m16.total <= 0)
        return PLAN_FITS_NOWHERE;
    /* A need raised above the plan (a measured peak) raises the 4-bit
     * need in the same ratio: only the 16-bit run was measured. */
    int64_t need4 = m4.total;
    if (need_bytes > m16.total)
        need4 = (int64_t)ceil((double)need_bytes * (double)m4.total / (double)m16.total);
    return fits_some(need4, &lower, workers, n_workers) ? PLAN_FITS_LOWER_PRECISION
                                                         : PLAN_FITS_NOWHERE;
}

enum plan_fit planner_feasibility(const struct plan_job *job, const struct sched_worker *workers,
                                  size_t n_workers, int64_t *need_out)
{
    struct plan_memory mem;
    if (need_out)
        *need_out = 0;
    if (planner_memory(job, &mem, NULL, 0))
        return PLAN_FITS_NOWHERE;
    if (need_out)
        *need_out = mem.total;
    return planner_fit_for_need(job, mem.total, workers, n_workers);
}

enum job_message planner_fit_message(enum plan_fit f)
{
    switch (f) {
    case PLAN_FITS:
        return MSG_NONE;
    case PLAN_FITS_LOWER_PRECISION:
        return MSG_NOT_AVAILABLE_LOWER_PRECISION;
    default:
        return MSG_NOT_AVAILABLE;
    }
}
