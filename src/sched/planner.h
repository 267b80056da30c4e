/* planner.h - what a job needs: memory in bytes and model FLOPs per token,
 * from the model's shape, the precision, the adapter, batch and sequence
 * length; and whether any known worker can ever run it. Pure: no I/O, no
 * clock, no allocation.
 *
 * Memory of one training process (docs/scheduler.md has the table):
 *   frozen base   16-bit: 2 bytes per parameter (bf16)
 *                 4-bit:  NF4 linear weights of the blocks at 4.127 bits
 *                         (one absmax per 64, double-quantised scales),
 *                         embeddings, head and norms in bf16
 *   LoRA          fp32 adapter + gradient + AdamW m and v: 16 bytes each
 *   full (16-bit) fp32 master + gradient + AdamW m and v + a bf16 working
 *                 copy: 18 bytes per parameter
 *   activations   what the trainer allocates (model_acts_create in
 *                 src/train/model/model_pass.c), fp32, per token and layer
 *                 2h + 2 + 2qd + 2kd + heads + 2i + 7r (+ 2h + 2 with
 *                 Gemma 2's post norms, + qd + kd + heads + kv_heads
 *                 with Qwen3's q/k norms), qd = heads*head_dim,
 *                 kd = kv_heads*head_dim; one layer's scratch per token
 *                 7h + 1 + 2qd + 2kd + 4i + r; a dequantisation buffer of
 *                 the largest projection (at least 8 MiB); and the
 *                 attention score blocks each training thread holds while
 *                 it runs: 2 T*T floats (3 with soft-capped attention);
 *                 a mixture of experts keeps per token and sparse layer
 *                 E + 4k + 2k*mi (router probabilities, the k choices, the
 *                 experts' gate and up), drops the dense 2i when every
 *                 layer is sparse, and adds one layer's scratch of
 *                 3k*h + 4k*mi + E + 2k (E experts, k per token, width mi)
 *   logits        a block of rows of logits at a time (64 MiB of fp32,
 *                 twice with final soft-capping) and two h-wide rows
 *   grader models reinforcement fine-tuning's score_model graders' models,
 *                 which the trainer loads beside the policy for inference
 *                 in fp32 (train/run/generate.c's gen_open): 4 bytes per
 *                 parameter (grader_params); not on a GPU, where the loop
 *                 does not run them
 *   overhead      256 MiB for the process, then 5% on top of everything
 * The trainer reports its measured peak after the first steps; a job that
 * needs more than its worker offers is moved (resched.h).
 */
#ifndef ALALLO_SCHED_PLANNER_H
#define ALALLO_SCHED_PLANNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/job.h"
#include "sched/capacity.h"

enum plan_precision { PLAN_16BIT = 0, PLAN_4BIT, PLAN_PRECISION_COUNT };
enum plan_adapter { PLAN_LORA = 0, PLAN_FULL, PLAN_ADAPTER_COUNT };

/* The three ways a job can train; the estimator keeps its calibration per
 * method. Full fine-tuning exists only at 16-bit. */
enum plan_method { PLAN_METHOD_LORA_16 = 0, PLAN_METHOD_FULL_16, PLAN_METHOD_LORA_4,
                   PLAN_METHOD_COUNT };

/* LoRA target modules, as a bit set. */
#define PLAN_T_Q (1u << 0)
#define PLAN_T_K (1u << 1)
#define PLAN_T_V (1u << 2)
#define PLAN_T_O (1u << 3)
#define PLAN_T_GATE (1u << 4)
#define PLAN_T_UP (1u << 5)
#define PLAN_T_DOWN (1u << 6)
#define PLAN_T_ALL 0x7fu

/* Limits on every input; a shape outside them is refused. */
#define PLAN_MAX_LAYERS 1024
#define PLAN_MAX_HIDDEN 131072
#define PLAN_MAX_VOCAB 10000000
#define PLAN_MAX_BATCH 65536
#define PLAN_MAX_SEQ 1048576
#define PLAN_MAX_RANK 65536
#define PLAN_MAX_GRADER_PARAMS (1LL << 44) /* 17.6 T: several of the largest models */

/* A Llama-style decoder, as config.json describes it. */
struct plan_model {
    int64_t params;   /* all parameters N; 0 = compute from the shape      */
    int layers;
    int hidden;       /* d                                                  */
    int intermediate; /* MLP width; 0 = derive it from params              */
    int heads;
    int kv_heads;     /* 0 = heads                                          */
    int vocab;
    bool tied;        /* embeddings shared with the output head             */
    int head_dim;     /* 0 = hidden / heads; Gemma's may be wider           */
    bool post_norms;  /* Gemma 2: norms after attention and MLP too         */
    bool attn_softcap; /* Gemma 2: attention logits soft-capped             */
    bool final_softcap; /* Gemma 2: final logits soft-capped                */
    bool qk_norm;     /* Qwen3: q and k kept before their per-head norm too */
    /* A mixture of experts (Qwen3-MoE): the MLP of its sparse layers is a
     * router over `experts` SwiGLU experts of width moe_intermediate, of
     * which each token goes through experts_used. params counts them all;
     * planner_active_params what one token goes through. */
    int experts;          /* num_experts; 0 = a dense model                 */
    int experts_used;     /* num_experts_per_tok                            */
    int moe_intermediate; /* moe_intermediate_size                          */
    int sparse_layers;    /* layers whose MLP is the experts; 0 = all       */
};

struct plan_job {
    struct plan_model model;
    enum plan_precision precision;
    enum plan_adapter adapter;
    int lora_rank;          /* LoRA only; 0 = 16                            */
    unsigned lora_targets;  /* LoRA only; 0 = PLAN_T_ALL                    */
    int batch;
    int seq_len;
    int threads;            /* training threads (the worker's cpus); 0 =
                               PLAN_ASSUMED_THREADS                          */
    int64_t grader_params;  /* reinforcement: the parameters of the models
                               its score_model graders ask (each once); 0
                               for any other grader or method               */
};

/* Threads assumed when the worker is not known yet: the attention score
 * blocks (T*T floats each) are held per thread. */
#define PLAN_ASSUMED_THREADS 16
#define PLAN_MAX_THREADS 4096

/* Where the bytes go; total is what a worker must offer. */
struct plan_memory {
    int64_t base;        /* frozen (LoRA) or working (full) weights          */
    int64_t trainable;   /* trainable parameters: weights, grads, AdamW      */
    int64_t activations;
    int64_t logits;
    int64_t grader;      /* the grader's models (grader_params, fp32)      */
    int64_t overhead;    /* process, plus the margin                         */
    int64_t total;
};

/* Whether a job can run on the capacity the service knows. */
enum plan_fit {
    PLAN_FITS = 0,           /* some known worker has the memory             */
    PLAN_FITS_LOWER_PRECISION, /* 16-bit fits nowhere; 4-bit LoRA would     */
    PLAN_FITS_NOWHERE,       /* no known worker can ever run it              */
};

/* "16-bit" / "4-bit", "lora" / "full"; NULL when out of range. */
const char *planner_precision_name(enum plan_precision p);
bool planner_precision_parse(const char *s, enum plan_precision *out /* OUT */);
const char *planner_adapter_name(enum plan_adapter a);
bool planner_adapter_parse(const char *s, enum plan_adapter *out /* OUT */);

/* The method of (precision, adapter); full at 4-bit has none: returns
 * PLAN_METHOD_COUNT. */
enum plan_method planner_method(enum plan_precision p, enum plan_adapter a);

/* Checks the job against the limits and fills the derived fields of the
 * model (params, intermediate, kv_heads, rank, targets) into *out. Returns
 * ERR_OK, or ERR_INVALID with a one-line reason in why. */
enum alallo_err planner_normalize(const struct plan_job *in, struct plan_job *out /* OUT */,
                                  char *why, size_t whycap);

/* Parameters of the LoRA adapters of a normalized job (0 for full). */
int64_t planner_lora_params(const struct plan_job *job);

/* Memory the job needs, after planner_normalize(). ERR_INVALID (full at
 * 4-bit, or a shape out of range) with a reason in why. */
enum alallo_err planner_memory(const struct plan_job *job, struct plan_memory *out /* OUT */,
                               char *why, size_t whycap);

/* GPU memory of the job on one GPU (docs/scheduler.md, "GPU memory"): the
 * same weights, adapters and optimizer state as planner_memory, and a bf16
 * copy of LoRA's A and B (the GPU's LoRA products read it); the same
 * fp32 activations with no T*T score blocks (fused attention holds a tile,
 * so memory grows linearly with the context), plus what the GPU trainer
 * adds (cuda_acts_create): bf16 copies of a product's input and output, a
 * bf16 buffer of the largest projection for NF4 decoding, and the head's
 * block of logits again in bf16; PLAN_GPU_OVERHEAD_BYTES for the CUDA context and the cuBLASLt
 * workspace, then PLAN_GPU_MARGIN on top for the allocator. threads is
 * ignored. ERR_INVALID as planner_memory. */
#define PLAN_GPU_OVERHEAD_BYTES (1024LL * 1024 * 1024)
#define PLAN_GPU_MARGIN 0.10
enum alallo_err planner_memory_gpu(const struct plan_job *job, struct plan_memory *out /* OUT */,
                                   char *why, size_t whycap);

/* The batch the job runs at on a GPU of gpu_mem_bytes: its own batch when
 * that fits, else the largest divisor of it that does (a micro-batch; the
 * batch the user chose is kept by accumulating batch / micro-batch
 * steps). 0 when even a batch of 1 does not fit, or the job is invalid. */
int planner_gpu_batch(const struct plan_job *job, int64_t gpu_mem_bytes);

/* The GPU memory the job needs at its smallest micro-batch (1): what a GPU
 * must offer to run it at all. 0 for an invalid job; INT64_MAX for a
 * mixture of experts, which the GPU trainer does not run yet (no GPU holds
 * it: it goes to CPU workers). */
int64_t planner_gpu_need(const struct plan_job *job);

/* Parameters one token goes through: params for a dense model; for a
 * mixture of experts, the router and the experts_used experts of each
 * sparse layer in place of all of them. 0 for an invalid job. */
int64_t planner_active_params(const struct plan_job *job);

/* Model FLOPs per trained token (FACTS.md): full 6N + 6LdT, LoRA and
 * 4-bit LoRA 4N + 6N_lora, N the active parameters (planner_active_params).
 * 0 for an invalid job. */
double planner_flops_per_token(const struct plan_job *job);

/* FLOPs per token of one forward pass of the frozen reference (DPO reads
 * every example once through it at the start of each attempt, before the
 * first step): full 2N + 2LdT (a third of training's), LoRA and 4-bit LoRA
 * 2N + 2N_lora (the adapters run, adding zero). 0 for an invalid job. */
double planner_reference_flops_per_token(const struct plan_job *job);

/* A job's work in FLOPs: train_tokens x planner_flops_per_token plus
 * reference_tokens x planner_reference_flops_per_token (reference_tokens:
 * the tokens the DPO reference reads, 0 for supervised jobs). The one rule
 * the estimate and the queue's placement share. */
double planner_work_flops(const struct plan_job *job, double train_tokens,
                          double reference_tokens);

/* The one rule for which "not available" message a job gets: whether a
 * job that needs `need_bytes` can run on any of `workers` (lost ones
 * excluded; a GPU worker must also hold the job on one of its GPUs at a
 * batch of at least 1, planner_gpu_need, which needs `job`). When it
 * cannot and the job is 16-bit, the same job as 4-bit LoRA is tried (its
 * need scaled up in the ratio need_bytes / planned 16-bit need when
 * need_bytes is above the plan), to tell PLAN_FITS_LOWER_PRECISION from
 * PLAN_FITS_NOWHERE. `job` may be NULL (no lower-precision check, and no
 * GPU worker counts). Job creation (the estimate), the scheduling
 * pass and a memory report that finds no worker all decide through it. */
enum plan_fit planner_fit_for_need(const struct plan_job *job, int64_t need_bytes,
                                   const struct sched_worker *workers, size_t n_workers);

/* Whether `job` can run on any of `workers` (lost ones excluded: they are
 * not capacity the service can count on). A 16-bit job that fits nowhere
 * is tried again as 4-bit LoRA, to tell PLAN_FITS_LOWER_PRECISION from
 * PLAN_FITS_NOWHERE. *need_out (may be NULL) gets the job's memory need. */
enum plan_fit planner_feasibility(const struct plan_job *job, const struct sched_worker *workers,
                                  size_t n_workers, int64_t *need_out /* OUT, may be NULL */);

/* The failed job's message for a fit: MSG_NONE for PLAN_FITS,
 * MSG_NOT_AVAILABLE_LOWER_PRECISION ("Not available right now. Choose a
 * lower precision.") or MSG_NOT_AVAILABLE ("Not available right now."). */
enum job_message planner_fit_message(enum plan_fit f);

#endif
