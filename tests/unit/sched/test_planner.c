/* test_planner.c - memory need, FLOPs per token and feasibility. */
#include <stdlib.h>
#include <string.h>

#include "sched_test.h"

#include "sched/planner.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* The project's `124m` shape (SPEC §6): hidden 768, 12 layers, 12 heads,
 * intermediate 2048, vocabulary 50257, tied embeddings. */
static struct plan_job job_124m(enum plan_precision p, enum plan_adapter a)
{
    struct plan_job j = {
        .model = {.layers = 12, .hidden = 768, .intermediate = 2048, .heads = 12,
                  .vocab = 50257, .tied = true},
        .precision = p,
        .adapter = a,
        .batch = 4,
        .seq_len = 64,
    };
    return j;
}

/* A Llama-3-8B-like shape: 32 layers, hidden 4096, GQA 32/8 heads,
 * intermediate 14336, vocabulary 128256, untied. */
static struct plan_job job_8b(enum plan_precision p, enum plan_adapter a)
{
    struct plan_job j = {
        .model = {.layers = 32, .hidden = 4096, .intermediate = 14336, .heads = 32,
                  .kv_heads = 8, .vocab = 128256, .tied = false},
        .precision = p,
        .adapter = a,
        .batch = 1,
        .seq_len = 512,
    };
    return j;
}

/* Qwen3-30B-A3B as its config.json says: 48 layers, hidden 2048, 32/4
 * heads of 128, 128 experts of width 768, 8 per token, every layer sparse,
 * vocabulary 151936, untied. Published: 30.5B parameters, 3.3B active. */
static void mixture_of_experts_active_and_total(void **state)
{
    (void)state;
    struct plan_job j = {
        .model = {.layers = 48, .hidden = 2048, .intermediate = 6144, .heads = 32,
                  .kv_heads = 4, .head_dim = 128, .vocab = 151936, .tied = false,
                  .experts = 128, .experts_used = 8, .moe_intermediate = 768},
        .precision = PLAN_16BIT, .adapter = PLAN_LORA, .batch = 1, .seq_len = 512,
    };
    struct plan_job n;
    char why[200];
    assert_int_equal(planner_normalize(&j, &n, why, sizeof why), ERR_OK);
    assert_true(n.model.params > 30.4e9 && n.model.params < 30.6e9);
    int64_t active = planner_active_params(&j);
    assert_true(active > 3.2e9 && active < 3.4e9);
    /* FLOPs on the active parameters, memory on all of them */
    assert_true(planner_flops_per_token(&j) < 4.0 * 3.4e9 + 6.0 * planner_lora_params(&n));
    struct plan_memory m;
    assert_int_equal(planner_memory(&j, &m, why, sizeof why), ERR_OK);
    assert_true(m.base >= 2 * n.model.params);
    /* LoRA adapts attention only: the experts take no adapter */
    struct plan_job dense = j, dn;
    dense.model.experts = 0;
    assert_int_equal(planner_normalize(&dense, &dn, why, sizeof why), ERR_OK);
    assert_true(planner_lora_params(&n) < planner_lora_params(&dn));
    /* a dense model is its own active size; bad experts are refused */
    assert_int_equal(planner_active_params(&dense), dn.model.params);
    /* the GPU trainer has no experts yet: no GPU holds the job, a CPU does */
    assert_int_equal(planner_gpu_need(&j), INT64_MAX);
    struct sched_worker ws[2] = {
        {.name = "gpu", .cpus = 16, .mem_bytes = 1LL << 40, .gpus = 8,
         .gpu_mem_bytes = 1LL << 40},
        {.name = "cpu", .cpus = 16, .mem_bytes = 1LL << 40},
    };
    assert_int_equal(planner_feasibility(&j, ws, 1, NULL), PLAN_FITS_NOWHERE);
    assert_int_equal(planner_feasibility(&j, ws, 2, NULL), PLAN_FITS);
    j.model.experts_used = 129;
    assert_int_equal(planner_normalize(&j, &n, why, sizeof why), ERR_INVALID);
    assert_non_null(strstr(why, "experts"));
}

static void derives_params_and_intermediate(void **state)
{
    (void)state;
    struct plan_job in = job_124m(PLAN_16BIT, PLAN_LORA), out;
    assert_int_equal(planner_normalize(&in, &out, NULL, 0), ERR_OK);
    /* embeddings 50257*768 + norms 25*768 + 12 * (4*768^2 + 3*768*2048) */
    assert_int_equal(out.model.params, 123551232);
    assert_int_equal(out.model.kv_heads, 12);
    assert_int_equal(out.lora_rank, 16);
    assert_int_equal(out.lora_targets, PLAN_T_ALL);

    /* Given only the parameter count, the MLP width comes back. */
    in.model.intermediate = 0;
    in.model.params = 123551232;
    assert_int_equal(planner_normalize(&in, &out, NULL, 0), ERR_OK);
    assert_int_equal(out.model.intermediate, 2048);

    struct plan_job p8 = job_8b(PLAN_16BIT, PLAN_LORA);
    assert_int_equal(planner_normalize(&p8, &out, NULL, 0), ERR_OK);
    /* ~8.03 B parameters, as the model card says */
    assert_true(out.model.params > 8000000000LL && out.model.params < 8100000000LL);
}

static void refuses_bad_input(void **state)
{
    (void)state;
    char why[128];
    struct plan_job j = job_124m(PLAN_4BIT, PLAN_FULL), out;
    assert_int_equal(planner_normalize(&j, &out, why, sizeof why), ERR_INVALID);
    assert_string_equal(why, "full fine-tuning needs 16-bit precision");
    j = job_124m(PLAN_16BIT, PLAN_LORA);
    j.batch = 0;
    assert_int_equal(planner_normalize(&j, &out, why, sizeof why), ERR_INVALID);
    assert_string_equal(why, "batch size out of range");
    j = job_124m(PLAN_16BIT, PLAN_LORA);
    j.model.layers = PLAN_MAX_LAYERS + 1;
    assert_int_equal(planner_normalize(&j, &out, why, sizeof why), ERR_INVALID);
    j = job_124m(PLAN_16BIT, PLAN_LORA);
    j.model.intermediate = 0; /* and no parameter count to derive it from */
    assert_int_equal(planner_normalize(&j, &out, why, sizeof why), ERR_INVALID);
    j = job_124m(PLAN_16BIT, PLAN_LORA);
    j.lora_targets = 0x80;
    assert_int_equal(planner_normalize(&j, &out, why, sizeof why), ERR_INVALID);
    assert_string_equal(why, "unknown LoRA target");
    assert_near(planner_flops_per_token(&j), 0, 0);
}

static void lora_params_and_flops(void **state)
{
    (void)state;
    struct plan_job j = job_124m(PLAN_16BIT, PLAN_LORA), n;
    planner_normalize(&j, &n, NULL, 0);
    /* r=16: q,o 16*(768+768); k,v the same (no GQA); gate, up, down 16*(768+2048) */
    assert_int_equal(planner_lora_params(&n), 12 * 16 * (4 * 1536 + 3 * 2816));
    /* LoRA: 4N + 6 N_lora */
    assert_near(planner_flops_per_token(&j), 4.0 * 123551232 + 6.0 * 2801664, 1);
    /* Full: 6N + 6 L d T */
    struct plan_job f = job_124m(PLAN_16BIT, PLAN_FULL);
    assert_near(planner_flops_per_token(&f), 6.0 * 123551232 + 6.0 * 12 * 768 * 64, 1);
    /* Only q and v, rank 8 */
    j.lora_rank = 8;
    j.lora_targets = PLAN_T_Q | PLAN_T_V;
    planner_normalize(&j, &n, NULL, 0);
    assert_int_equal(planner_lora_params(&n), 12 * 8 * (1536 + 1536));
}

static void memory_of_the_parts(void **state)
{
    (void)state;
    struct plan_memory lora, full, q4;
    struct plan_job j = job_124m(PLAN_16BIT, PLAN_LORA);
    assert_int_equal(planner_memory(&j, &lora, NULL, 0), ERR_OK);
    assert_int_equal(lora.base, 2 * 123551232LL);
    assert_int_equal(lora.trainable, 16 * 2801664LL);
    /* a block of logit rows (all 256 tokens: under 16 Mi floats) and two
     * h-wide rows, fp32 */
    assert_int_equal(lora.logits, 4LL * 256 * (50257 + 2 * 768));
    /* fp32, as model_acts_create allocates: kept per token and layer
     * 2h + 2 + 2qd + 2kd + heads + 2i + 7r, scratch per token
     * 7h + 1 + 2qd + 2kd + 4i + r, the 2 Mi-float dequantisation buffer and
     * 2 T*T score blocks per thread (16 assumed) */
    const long long kept = 2 * 768 + 2 + 2 * 768 + 2 * 768 + 12 + 2 * 2048 + 7 * 16;
    const long long scratch = 7 * 768 + 1 + 2 * 768 + 2 * 768 + 4 * 2048 + 16;
    assert_int_equal(lora.activations,
                     4LL * (256 * (kept * 12 + scratch) + 2097152 + 2LL * 64 * 64 * 16));
    assert_true(lora.total > lora.base + lora.trainable + lora.activations + lora.logits);

    struct plan_job f = job_124m(PLAN_16BIT, PLAN_FULL);
    assert_int_equal(planner_memory(&f, &full, NULL, 0), ERR_OK);
    assert_int_equal(full.trainable, 16 * 123551232LL);
    /* FACTS.md anchors for this shape at B=4 T=64: full ~3.0 GB, LoRA ~1.8 GB
     * peak RSS under PyTorch (which adds its own few hundred MB). */
    assert_true(full.total > 2.0e9 && full.total < 4.0e9);
    assert_true(lora.total > 0.6e9 && lora.total < 2.0e9);

    /* 4-bit: the linear weights shrink to ~4.127 bits. */
    struct plan_job big16 = job_8b(PLAN_16BIT, PLAN_LORA), big4 = job_8b(PLAN_4BIT, PLAN_LORA);
    struct plan_memory m16;
    planner_memory(&big16, &m16, NULL, 0);
    planner_memory(&big4, &q4, NULL, 0);
    assert_true(m16.base > 15.5 * GIB / 1.07 && m16.base < 16.5e9);
    assert_true(q4.base < m16.base / 2);
    assert_true(q4.base > 5.0e9 && q4.base < 7.0e9); /* 7 B linear at 0.516 B + 1 B bf16 */
    assert_true(q4.total < m16.total);

    /* Bigger batches need more. */
    struct plan_memory more;
    j.batch = 8;
    planner_memory(&j, &more, NULL, 0);
    assert_true(more.activations - lora.activations == 4LL * 256 * (kept * 12 + scratch));
}

/* A tiny Gemma 2 shape (alallo model init --family gemma2): heads *
 * head_dim = 128, twice hidden; post norms; both soft-caps. */
static struct plan_job job_gemma2(void)
{
    struct plan_job j = {
        .model = {.layers = 2, .hidden = 64, .intermediate = 172, .heads = 4, .kv_heads = 2,
                  .head_dim = 32, .vocab = 4096, .tied = true, .post_norms = true,
                  .attn_softcap = true, .final_softcap = true},
        .precision = PLAN_16BIT,
        .adapter = PLAN_LORA,
        .batch = 1,
        .seq_len = 512,
        .threads = 2,
    };
    return j;
}

static void memory_follows_wide_heads(void **state)
{
    (void)state;
    struct plan_job g = job_gemma2();
    g.model.post_norms = g.model.attn_softcap = g.model.final_softcap = false;
    struct plan_job narrow = g;
    narrow.model.head_dim = 0; /* hidden / heads = 16 */
    struct plan_job n;
    struct plan_memory wide, thin;
    assert_int_equal(planner_normalize(&g, &n, NULL, 0), ERR_OK);
    /* parameters: q and o are (64 x 128), k and v (64 x 64) per layer */
    assert_int_equal(n.model.params,
                     4096LL * 64 + 2 * (2 * 64 * 128 + 2 * 64 * 64 + 3 * 64 * 172) + 5 * 64);
    /* LoRA r=16 on q (64 -> 128), k, v (64 -> 64), o (128 -> 64), MLP */
    assert_int_equal(planner_lora_params(&n),
                     2 * 16 * ((64 + 128) * 2 + (64 + 64) * 2 + (64 + 172) * 3));
    assert_int_equal(planner_memory(&g, &wide, NULL, 0), ERR_OK);
    assert_int_equal(planner_memory(&narrow, &thin, NULL, 0), ERR_OK);
    /* qd = 128, kd = 64 against 64 and 32: 2 dq + 2 dkv more floats per
     * token in each layer's kept arrays and in the scratch */
    assert_int_equal(wide.activations - thin.activations, 4LL * 512 * 3 * (2 * 64 + 2 * 32));
    const long long kept = 2 * 64 + 2 + 2 * 128 + 2 * 64 + 4 + 2 * 172 + 7 * 16;
    const long long scratch = 7 * 64 + 1 + 2 * 128 + 2 * 64 + 4 * 172 + 16;
    assert_int_equal(wide.activations,
                     4LL * (512 * (kept * 2 + scratch) + 2097152 + 2LL * 512 * 512 * 2));
}

static void memory_counts_gemma2_extras(void **state)
{
    (void)state;
    struct plan_job g = job_gemma2(), plain = g;
    plain.model.post_norms = plain.model.attn_softcap = plain.model.final_softcap = false;
    struct plan_memory m, p;
    assert_int_equal(planner_memory(&g, &m, NULL, 0), ERR_OK);
    assert_int_equal(planner_memory(&plain, &p, NULL, 0), ERR_OK);
    /* post norms: two more (L, N, h) arrays and two (L, N) rstd; the
     * capped attention: a third T*T block per thread */
    assert_int_equal(m.activations - p.activations,
                     4LL * (512 * 2 * (2 * 64 + 2) + 512LL * 512 * 2));
    /* the capped final logits: a second block of logit rows */
    assert_int_equal(m.logits - p.logits, 4LL * 512 * 4096);
    /* what bench/plan/rss.sh measures on this model at T=512, 2 threads */
    assert_int_equal(m.activations, 22349824);
    assert_int_equal(m.logits, 17039360);
}

/* Qwen3 (alallo model init --family qwen3): the same tiny shape with each
 * head of q and k normalized before the rotation. */
static void memory_counts_qwen3_qk_norm(void **state)
{
    (void)state;
    struct plan_job plain = job_gemma2();
    plain.model.post_norms = plain.model.attn_softcap = plain.model.final_softcap = false;
    struct plan_job q = plain, nq, np;
    q.model.qk_norm = true;
    assert_int_equal(planner_normalize(&q, &nq, NULL, 0), ERR_OK);
    assert_int_equal(planner_normalize(&plain, &np, NULL, 0), ERR_OK);
    /* q_norm and k_norm: head_dim each, per layer */
    assert_int_equal(nq.model.params - np.model.params, 2 * 2 * 32);
    struct plan_memory m, p;
    assert_int_equal(planner_memory(&q, &m, NULL, 0), ERR_OK);
    assert_int_equal(planner_memory(&plain, &p, NULL, 0), ERR_OK);
    /* kept per token and layer: q (128) and k (64) before their norm, and a
     * norm scale per query head (4) and per key head (2) */
    assert_int_equal(m.activations - p.activations, 4LL * 512 * 2 * (128 + 64 + 4 + 2));
}

/* Gemma 3 (alallo model init --family gemma3's widths): Gemma 2's post
 * norms and Qwen3's per-head q/k norms together, no soft-caps. */
static void memory_counts_gemma3(void **state)
{
    (void)state;
    struct plan_job plain = job_gemma2();
    plain.model.post_norms = plain.model.attn_softcap = plain.model.final_softcap = false;
    struct plan_job g = plain, ng, np;
    g.model.post_norms = g.model.qk_norm = true;
    assert_int_equal(planner_normalize(&g, &ng, NULL, 0), ERR_OK);
    assert_int_equal(planner_normalize(&plain, &np, NULL, 0), ERR_OK);
    /* two more norms of hidden and q_norm, k_norm of head_dim, per layer */
    assert_int_equal(ng.model.params - np.model.params, 2 * (2 * 64 + 2 * 32));
    struct plan_memory m, p;
    assert_int_equal(planner_memory(&g, &m, NULL, 0), ERR_OK);
    assert_int_equal(planner_memory(&plain, &p, NULL, 0), ERR_OK);
    /* kept per token and layer: the blocks' outputs before their norms and
     * their scales, q and k before their norms and the heads' scales */
    assert_int_equal(m.activations - p.activations,
                     4LL * 512 * 2 * ((2 * 64 + 2) + (128 + 64 + 4 + 2)));
    assert_int_equal(m.logits, p.logits); /* no final cap */
}

/* Phi-4-mini's real shape (3072 wide, 32 layers, 24 heads of 128 over 8
 * key/value heads, 8192, 200064 tokens, tied): its fused tensors hold
 * Llama's parameters, 3.84 B; a 16-bit LoRA job at its 4096-token context
 * (longrope's short factors; docs/models.md) keeps its base in bf16. */
static void memory_phi4_mini(void **state)
{
    (void)state;
    struct plan_job j = {
        .model = {.layers = 32, .hidden = 3072, .intermediate = 8192, .heads = 24,
                  .kv_heads = 8, .head_dim = 128, .vocab = 200064, .tied = true},
        .precision = PLAN_16BIT,
        .adapter = PLAN_LORA,
        .lora_rank = 16,
        .batch = 1,
        .seq_len = 4096,
        .threads = 8,
    };
    struct plan_job n;
    assert_int_equal(planner_normalize(&j, &n, NULL, 0), ERR_OK);
    assert_int_equal(n.model.params, 3836021760LL);
    struct plan_memory m;
    assert_int_equal(planner_memory(&j, &m, NULL, 0), ERR_OK);
    assert_int_equal(m.base, 2LL * 3836021760LL);
    /* the adapters of q, k, v, gate and up apart (as alallo trains them, not one
     * on each fused tensor): rank 16 over in + out of each of the 7, weights,
     * gradients and AdamW's two moments in fp32 */
    int64_t lora = 32LL * 16 * (2 * (3072 + 3072) + 2 * (3072 + 1024) + 3 * (3072 + 8192));
    assert_int_equal(m.trainable, 16 * lora);
    assert_int_equal(m.total, m.base + m.trainable + m.activations + m.logits + m.overhead);
}

static void memory_at_long_context(void **state)
{
    (void)state;
    /* Llama 3.2 1B's shape at 32k tokens: scores are not kept, so the kept
     * arrays grow with T; only the per-thread score blocks grow with T*T. */
    struct plan_job j = {
        .model = {.layers = 16, .hidden = 2048, .intermediate = 8192, .heads = 32,
                  .kv_heads = 8, .vocab = 128256, .tied = true},
        .precision = PLAN_4BIT,
        .adapter = PLAN_LORA,
        .batch = 1,
        .seq_len = 32768,
        .threads = 8,
    };
    struct plan_memory m8, m16, half;
    assert_int_equal(planner_memory(&j, &m8, NULL, 0), ERR_OK);
    j.threads = 16;
    assert_int_equal(planner_memory(&j, &m16, NULL, 0), ERR_OK);
    /* eight more threads, eight more pairs of 32k x 32k fp32 blocks */
    assert_int_equal(m16.activations - m8.activations, 8LL * 2 * 32768 * 32768 * 4);
    /* a sixteenth of keeping every score (heads x T per token and layer:
     * 2 TiB), with 16 threads */
    assert_true((double)m16.activations < 32.0 * 32768 * 32768 * 16 * 4 / 10);
    /* without the score blocks, linear in T */
    j.seq_len = 16384;
    assert_int_equal(planner_memory(&j, &half, NULL, 0), ERR_OK);
    long long lin16 = m16.activations - 16LL * 2 * 32768 * 32768 * 4;
    long long linh = half.activations - 16LL * 2 * 16384 * 16384 * 4;
    long long fixed = 4LL * 2048 * 8192; /* the dequantisation buffer */
    assert_int_equal(lin16 - fixed, 2 * (linh - fixed));
    /* the thread count is checked */
    j.threads = -1;
    assert_int_equal(planner_memory(&j, &half, NULL, 0), ERR_INVALID);
}

static struct sched_worker worker(const char *name, int64_t mem, enum worker_state s)
{
    struct sched_worker w = {.cpus = 8, .mem_bytes = mem, .price_per_hour = 1, .flops = 1e12,
                             .state = s};
    strncpy(w.name, name, sizeof w.name - 1);
    return w;
}

static void feasibility_and_messages(void **state)
{
    (void)state;
    struct plan_job j16 = job_8b(PLAN_16BIT, PLAN_LORA), j4 = job_8b(PLAN_4BIT, PLAN_LORA);
    struct plan_job full = job_8b(PLAN_16BIT, PLAN_FULL);
    struct plan_memory m16, m4, mf;
    planner_memory(&j16, &m16, NULL, 0);
    planner_memory(&j4, &m4, NULL, 0);
    planner_memory(&full, &mf, NULL, 0);

    struct sched_worker ws[2] = {worker("small", m4.total, WORKER_ACTIVE),
                                 worker("big", m16.total, WORKER_ACTIVE)};
    int64_t need = 0;
    assert_int_equal(planner_feasibility(&j16, ws, 2, &need), PLAN_FITS);
    assert_int_equal(need, m16.total);
    assert_int_equal(planner_fit_message(PLAN_FITS), MSG_NONE);

    /* Only the small one: 16-bit fits nowhere, 4-bit would. */
    assert_int_equal(planner_feasibility(&j16, ws, 1, NULL), PLAN_FITS_LOWER_PRECISION);
    assert_string_equal(job_message_text(planner_fit_message(PLAN_FITS_LOWER_PRECISION)),
                        "Not available right now. Choose a lower precision.");
    assert_int_equal(planner_feasibility(&j4, ws, 1, NULL), PLAN_FITS);
    /* Full fine-tuning of 8B needs ~150 GB: lower precision suggested. */
    assert_true(mf.total > 140e9);
    assert_int_equal(planner_feasibility(&full, ws, 2, NULL), PLAN_FITS_LOWER_PRECISION);

    /* A byte short of 4-bit: nothing can ever run it. */
    ws[0].mem_bytes = m4.total - 1;
    assert_int_equal(planner_feasibility(&j16, ws, 1, NULL), PLAN_FITS_NOWHERE);
    assert_int_equal(planner_feasibility(&j4, ws, 1, NULL), PLAN_FITS_NOWHERE);
    assert_string_equal(job_message_text(planner_fit_message(PLAN_FITS_NOWHERE)),
                        "Not available right now.");

    /* A lost worker is not capacity to count on; a draining one is known. */
    ws[1].state = WORKER_LOST;
    assert_int_equal(planner_feasibility(&j16, ws, 2, NULL), PLAN_FITS_NOWHERE);
    /* ... unless it was heard from lately: it may come back, and the job
     * waits for it (capacity_may_run) */
    ws[1].silent_s = 60;
    assert_true(capacity_may_run(&ws[1]));
    assert_int_equal(planner_feasibility(&j16, ws, 2, NULL), PLAN_FITS);
    ws[1].silent_s = CAPACITY_RETURN_GRACE_S;
    assert_false(capacity_may_run(&ws[1]));
    assert_int_equal(planner_feasibility(&j16, ws, 2, NULL), PLAN_FITS_NOWHERE);
    ws[1].silent_s = 0; /* not known: gone */
    assert_false(capacity_may_run(&ws[1]));
    ws[1].state = WORKER_ACTIVE;
    ws[1].silent_s = CAPACITY_RETURN_GRACE_S * 2; /* only a lost worker's silence counts */
    assert_true(capacity_may_run(&ws[1]));
    ws[1].silent_s = 0;
    ws[1].state = WORKER_DRAINING;
    assert_int_equal(planner_feasibility(&j16, ws, 2, NULL), PLAN_FITS);
    assert_int_equal(planner_feasibility(&j16, ws, 0, NULL), PLAN_FITS_NOWHERE);
}

/* A Llama-3.2-1B-like shape at context 2048: hidden 2048, 16 layers, GQA
 * 32/8 heads, intermediate 8192, vocabulary 128256, tied embeddings. */
static struct plan_job job_1b(enum plan_precision p, enum plan_adapter a, int batch)
{
    struct plan_job j = {
        .model = {.layers = 16, .hidden = 2048, .intermediate = 8192, .heads = 32,
                  .kv_heads = 8, .vocab = 128256, .tied = true},
        .precision = p,
        .adapter = a,
        .batch = batch,
        .seq_len = 2048,
    };
    return j;
}

static struct sched_worker gpu_worker(const char *name, int64_t gpu_mem)
{
    struct sched_worker w = worker(name, (int64_t)(512 * GIB), WORKER_ACTIVE);
    w.gpus = 1;
    w.gpu_mem_bytes = gpu_mem;
    strcpy(w.gpu_kind, "h100");
    return w;
}

static void gpu_memory_model(void **state)
{
    (void)state;
    struct plan_job lora = job_1b(PLAN_16BIT, PLAN_LORA, 1);
    struct plan_memory cpu, gpu;
    assert_int_equal(planner_memory(&lora, &cpu, NULL, 0), ERR_OK);
    assert_int_equal(planner_memory_gpu(&lora, &gpu, NULL, 0), ERR_OK);
    /* Same adapters (plus the bf16 copy of A and B that the
     * GPU's LoRA products read: 18 bytes a parameter, not 16); the same
     * fp32 activations without T*T
     * score blocks or dequantisation buffer, but gate's and up's outputs
     * kept as bf16 and no fp32 dg and du; q, k, v, attention's output and the residual
     * stream bf16 too (changes 1i-1k); bf16 staging copies; the products' bf16 inputs
     * kept for the weight gradients (1n: q, k and v's, gate and up's, down's, LoRA's
     * columns beside) (at batch 1 and context 2048, 0.67 of the CPU's; 0.48 before 1n,
     * 0.58 before 1j, 0.62 before 1i, 0.89 before 1f and 1g); the logits
     * block (rows of 64 Mi values, four times the CPU's 16 Mi, as cuda_model.c holds it) as
     * bf16 alone (1h: 523 rows of 128,256 logits, their fp32 input and its gradient, its
     * bf16); a CUDA context's overhead. */
    /* the GPU's base: the CPU's, plus LoRA folded beside each adapted
     * matrix (rank 16, every projection adapted): 3r columns beside q, k
     * and v, 2r beside gate and up, r beside o and down, and r rows under
     * each, as wide */
    int64_t r = 16, folded = 3 * r * (2048 + 512 + 512) + r * 2048 + 2 * r * (2 * 8192) + r * 2048;
    folded += 3 * r * (2048 + 3 * r) + r * (2048 + r) + 2 * r * (2048 + 2 * r) + r * (8192 + r);
    folded += 3 * r * 2048 + 2 * r * 2048 + r * 8192; /* A stacked a group, o's apart (2c) */
    assert_int_equal(gpu.base - cpu.base, 2 * 16 * folded);
    assert_near((double)gpu.trainable, (double)cpu.trainable * 18.0 / 16.0, 1.0);
    assert_int_equal(gpu.logits, 523LL * (4 * 2 * 2048 + 2 * (128256 + 2048)));
    assert_int_equal(cpu.logits, 130LL * 4 * (128256 + 2 * 2048));
    assert_true(gpu.activations > cpu.activations * 0.64 &&
                gpu.activations < cpu.activations * 0.70);
    assert_true(gpu.overhead > (int64_t)GIB);
    assert_int_equal(gpu.total, planner_gpu_need(&lora));
    /* Linear in the batch: each example adds the same bytes. */
    struct plan_job two = job_1b(PLAN_16BIT, PLAN_LORA, 2),
                    three = job_1b(PLAN_16BIT, PLAN_LORA, 3);
    struct plan_memory gpu2, gpu3;
    planner_memory_gpu(&two, &gpu2, NULL, 0);
    planner_memory_gpu(&three, &gpu3, NULL, 0);
    assert_near((double)(gpu3.activations - gpu2.activations),
                (double)(gpu2.activations - gpu.activations), 8.0);
    /* Linear in the context too (fused attention): each 2048 positions add
     * the same bytes, where the CPU's T*T blocks grow faster. */
    struct plan_job longer = lora, longest = lora;
    longer.seq_len = 4096;
    longest.seq_len = 6144;
    struct plan_memory gl, gll, cl, cll;
    planner_memory_gpu(&longer, &gl, NULL, 0);
    planner_memory_gpu(&longest, &gll, NULL, 0);
    planner_memory(&longer, &cl, NULL, 0);
    planner_memory(&longest, &cll, NULL, 0);
    assert_near((double)(gll.activations - gl.activations),
                (double)(gl.activations - gpu.activations), 8.0);
    assert_true(cll.activations - cl.activations > cl.activations - cpu.activations);
    /* Full fine-tuning at 4-bit has no model, as on the CPU. */
    struct plan_job bad = job_1b(PLAN_4BIT, PLAN_FULL, 1);
    char why[100] = "";
    assert_int_equal(planner_memory_gpu(&bad, &gpu, why, sizeof why), ERR_INVALID);
    assert_string_equal(why, "full fine-tuning needs 16-bit precision");
}

static void gpu_batch_that_fits(void **state)
{
    (void)state;
    const int64_t g80 = (int64_t)(80 * GIB), g24 = (int64_t)(24 * GIB);
    /* LoRA 16-bit at batch 64 (about 196 GiB at once): micro-batches of 16
     * on 80 GiB (52.0 GiB; 32 needs 100.0), 4 on 24 GiB (16.0), each a
     * divisor of 64 (32 and 8 before the products' inputs were kept, change
     * 1n; 16 and 4 before the residual stream was kept as bf16, 1j). */
    struct plan_job lora = job_1b(PLAN_16BIT, PLAN_LORA, 64);
    assert_int_equal(planner_gpu_batch(&lora, g80), 16);
    assert_int_equal(planner_gpu_batch(&lora, g24), 4);
    struct plan_memory m;
    lora.batch = 16;
    planner_memory_gpu(&lora, &m, NULL, 0);
    assert_true(m.total <= g80);
    lora.batch = 32;
    planner_memory_gpu(&lora, &m, NULL, 0);
    assert_true(m.total > g80);
    /* A batch that fits whole is kept. */
    lora.batch = 4;
    assert_int_equal(planner_gpu_batch(&lora, g80), 4);
    /* A batch of 12 on 24 GiB: 12 does not fit, 6 does (22.0 GiB); on 12
     * GiB 3 does not fit (13.0), 2 does (10.0; 3 before change 1n). (Before
     * the GPU kept gate's and up's outputs as bf16: 4 and 2 on 24 and 13
     * GiB.) */
    lora.batch = 12;
    assert_int_equal(planner_gpu_batch(&lora, g24), 6);
    assert_int_equal(planner_gpu_batch(&lora, (int64_t)(12 * GIB)), 2);
    /* Full fine-tuning: 18 bytes a parameter (about 20 GiB) plus the rest:
     * 16 on 80 GiB (71.7 GiB with its inputs kept, 1n; 8 before g and u
     * were kept as bf16), nothing on 24 GiB. */
    struct plan_job full = job_1b(PLAN_16BIT, PLAN_FULL, 64);
    assert_int_equal(planner_gpu_batch(&full, g80), 16);
    assert_int_equal(planner_gpu_batch(&full, g24), 0);
    /* Nothing fits on a GPU smaller than the weights. */
    assert_int_equal(planner_gpu_batch(&lora, (int64_t)GIB), 0);
    /* 4-bit LoRA recomputes each layer in the backward pass (the GPU
     * trainer's default for it): each layer's input and one layer's other
     * activations are kept, so batch 64 fits whole on 80 GiB (46.3 GiB)
     * and 16 on 24 GiB (13.5); at batch 4 it needs a third of 16-bit LoRA
     * (5.3 of 16.0 GiB: 16-bit LoRA keeps every layer's g and u, which bf16
     * halved, and its products' inputs, 1n). */
    struct plan_job lora4 = job_1b(PLAN_4BIT, PLAN_LORA, 64);
    assert_int_equal(planner_gpu_batch(&lora4, g80), 64);
    assert_int_equal(planner_gpu_batch(&lora4, g24), 16);
    struct plan_memory m4, m16;
    lora4.batch = 4;
    lora.batch = 4;
    planner_memory_gpu(&lora4, &m4, NULL, 0);
    planner_memory_gpu(&lora, &m16, NULL, 0);
    assert_true(m4.total < m16.total * 0.35 && m4.total > m16.total * 0.31);
    assert_true(m4.activations < m16.activations / 3);
    /* the CPU trainer keeps every activation at either precision */
    planner_memory(&lora4, &m4, NULL, 0);
    planner_memory(&lora, &m16, NULL, 0);
    assert_true(m4.activations == m16.activations);
}

static void gpu_feasibility(void **state)
{
    (void)state;
    struct sched_worker ws[2] = {gpu_worker("h80", (int64_t)(80 * GIB)),
                                 gpu_worker("g24", (int64_t)(24 * GIB))};
    struct plan_job full = job_1b(PLAN_16BIT, PLAN_FULL, 64);
    struct plan_job lora4 = job_1b(PLAN_4BIT, PLAN_LORA, 64);
    assert_int_equal(planner_feasibility(&full, ws, 2, NULL), PLAN_FITS);
    /* Only the 24 GiB GPU: full fine-tuning of 1B fits not even at batch
     * 1; 4-bit LoRA does: the lower-precision message. */
    assert_int_equal(planner_feasibility(&full, ws + 1, 1, NULL), PLAN_FITS_LOWER_PRECISION);
    assert_int_equal(planner_feasibility(&lora4, ws + 1, 1, NULL), PLAN_FITS);
    /* A GPU smaller than even 4-bit LoRA at batch 1 runs nothing, however
     * much host memory its worker has. */
    ws[1].gpu_mem_bytes = planner_gpu_need(&lora4) - 1;
    assert_int_equal(planner_feasibility(&full, ws + 1, 1, NULL), PLAN_FITS_NOWHERE);
    assert_int_equal(planner_feasibility(&lora4, ws + 1, 1, NULL), PLAN_FITS_NOWHERE);
    ws[1].gpu_mem_bytes = planner_gpu_need(&lora4);
    assert_int_equal(planner_feasibility(&lora4, ws + 1, 1, NULL), PLAN_FITS);
    /* The host memory still counts (the trainer loads the weights there). */
    ws[0].mem_bytes = (int64_t)GIB;
    assert_int_equal(planner_feasibility(&full, ws, 1, NULL), PLAN_FITS_NOWHERE);
    /* Without a job (a measured need alone) no GPU worker is counted. */
    ws[0].mem_bytes = (int64_t)(512 * GIB);
    assert_int_equal(planner_fit_for_need(NULL, (int64_t)GIB, ws, 1), PLAN_FITS_NOWHERE);
}

/* Reinforcement fine-tuning's score_model graders' models: their fp32
 * weights in the process's memory (with the margin), none on a GPU, which
 * does not run them; a negative count is refused. */
static void memory_holds_the_grader_models(void **state)
{
    (void)state;
    struct plan_job j = job_8b(PLAN_4BIT, PLAN_LORA);
    struct plan_memory none, judged, g0, g1;
    assert_int_equal(planner_memory(&j, &none, NULL, 0), ERR_OK);
    assert_int_equal(none.grader, 0);
    assert_int_equal(planner_memory_gpu(&j, &g0, NULL, 0), ERR_OK);
    j.grader_params = 8000000000LL;
    assert_int_equal(planner_memory(&j, &judged, NULL, 0), ERR_OK);
    assert_int_equal(judged.grader, 32000000000LL);
    assert_true(llabs(judged.total - none.total - (int64_t)(32e9 * 1.05)) <= 2);
    assert_int_equal(judged.base, none.base);
    assert_int_equal(planner_memory_gpu(&j, &g1, NULL, 0), ERR_OK);
    assert_int_equal(g1.total, g0.total);
    assert_int_equal(g1.grader, 0);
    j.grader_params = -1;
    char why[120];
    assert_int_equal(planner_memory(&j, &judged, why, sizeof why), ERR_INVALID);
    assert_non_null(strstr(why, "grader"));
}

static void names_parse_back(void **state)
{
    (void)state;
    enum plan_precision p;
    enum plan_adapter a;
    assert_true(planner_precision_parse("4-bit", &p));
    assert_int_equal(p, PLAN_4BIT);
    assert_string_equal(planner_precision_name(PLAN_16BIT), "16-bit");
    assert_false(planner_precision_parse("8-bit", &p));
    assert_true(planner_adapter_parse("full", &a));
    assert_int_equal(a, PLAN_FULL);
    assert_false(planner_adapter_parse(NULL, &a));
    assert_int_equal(planner_method(PLAN_4BIT, PLAN_LORA), PLAN_METHOD_LORA_4);
    assert_int_equal(planner_method(PLAN_4BIT, PLAN_FULL), PLAN_METHOD_COUNT);
    assert_null(planner_precision_name(PLAN_PRECISION_COUNT));

    enum worker_class c;
    enum worker_state s;
    assert_true(capacity_class_parse("spot", &c));
    assert_int_equal(c, WORKER_SPOT);
    assert_string_equal(capacity_class_name(WORKER_ON_DEMAND), "on-demand");
    assert_false(capacity_class_parse("reserved", &c));
    assert_true(worker_state_parse("draining", &s));
    assert_string_equal(worker_state_name(WORKER_LOST), "lost");
}

static void pace_and_price(void **state)
{
    (void)state;
    struct sched_worker w = worker("w", 1, WORKER_ACTIVE);
    w.flops = 2e12;
    w.price_per_hour = 3.6;
    assert_near(capacity_train_seconds(4e12, 0, &w), 2.0, 1e-12);
    assert_near(capacity_pace_tokens_per_s(1e9, &w), 2000.0, 1e-9);
    /* 3.6 per hour for 1000 s = 1.0 */
    assert_int_equal(capacity_price_micros(3.6, 1000), 1000000);
    assert_int_equal(capacity_price_micros(0, 1000), 0);
    assert_near(capacity_flops_from_reference(100, 5e8), 5e10, 1);
    /* Not measured yet: slow on purpose, never zero. */
    w.flops = 0;
    assert_near(capacity_worker_flops(&w), 8e9, 1);
}

/* A model smaller than the bench's runs at fewer FLOP/s: read between the
 * bench's two points in logs of the parameters (bench_speed.h). */
static void a_smaller_model_is_read_between_the_two_points(void **state)
{
    (void)state;
    struct sched_worker w = worker("w", 2, WORKER_ACTIVE);
    w.flops = 1e11;
    /* one point only: the bench's figure for every size */
    assert_near(capacity_worker_flops_for(&w, 1e5), 1e11, 1);
    w.bench_params = 2.4e6;
    w.small_params = 1.2e5;
    w.small_flops = 2.5e10;
    assert_near(capacity_worker_flops_for(&w, 2.4e6), 1e11, 1);
    assert_near(capacity_worker_flops_for(&w, 1.24e8), 1e11, 1); /* larger: the bench's */
    assert_near(capacity_worker_flops_for(&w, 0), 1e11, 1);       /* unknown: the bench's */
    assert_near(capacity_worker_flops_for(&w, 1.2e5), 2.5e10, 1);
    assert_near(capacity_worker_flops_for(&w, 1e3), 2.5e10, 1); /* below: the small point's */
    /* halfway in logs: halfway in logs of the speed */
    assert_near(capacity_worker_flops_for(&w, sqrt(2.4e6 * 1.2e5)), 5e10, 1e3);
    assert_near(capacity_train_seconds(2.5e10, 1.2e5, &w), 1.0, 1e-12);
    /* never faster than the bench, never more than 64x slower */
    w.small_flops = 4e11;
    assert_near(capacity_worker_flops_for(&w, 1.2e5), 1e11, 1);
    w.small_flops = 1e8;
    assert_near(capacity_worker_flops_for(&w, 1.2e5), 1e11 / 64, 1);
    /* a worker not measured has no curve: its slow default */
    w.flops = 0;
    assert_near(capacity_worker_flops_for(&w, 1.2e5), 8e9, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_smaller_model_is_read_between_the_two_points),
        cmocka_unit_test(derives_params_and_intermediate),
        cmocka_unit_test(mixture_of_experts_active_and_total),
        cmocka_unit_test(refuses_bad_input),
        cmocka_unit_test(memory_holds_the_grader_models),
        cmocka_unit_test(lora_params_and_flops),
        cmocka_unit_test(memory_of_the_parts),
        cmocka_unit_test(memory_follows_wide_heads),
        cmocka_unit_test(memory_counts_gemma2_extras),
        cmocka_unit_test(memory_counts_qwen3_qk_norm),
        cmocka_unit_test(memory_counts_gemma3),
        cmocka_unit_test(memory_phi4_mini),
        cmocka_unit_test(memory_at_long_context),
        cmocka_unit_test(feasibility_and_messages),
        cmocka_unit_test(gpu_memory_model),
        cmocka_unit_test(gpu_batch_that_fits),
        cmocka_unit_test(gpu_feasibility),
        cmocka_unit_test(names_parse_back),
        cmocka_unit_test(pace_and_price),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
