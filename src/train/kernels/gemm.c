/* gemm.c - products split over OpenMP threads and sent to the CPU path's
 * code (see gemm.h). */
#include "train/kernels/gemm.h"

#include <assert.h>
#include <cblas.h>
#include <omp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "train/kernels/cpu_path.h"
#include "train/kernels/gemm_kern.h"
#include "train/kernels/nf4.h"
#include "train/kernels/onednn.h"

/* Below this many multiply-adds a product runs on one thread: splitting
 * costs more than it saves. */
#define PAR_MIN_WORK (1L << 18)

void gemm_set_threads(int threads)
{
    if (threads < 1)
        threads = 1;
    omp_set_num_threads(threads);
    openblas_set_num_threads(1);
}

int gemm_has_bf16(void)
{
    enum cpu_path p = cpu_path_current();
    return p == CPU_PATH_AVX512BF16 || p == CPU_PATH_ONEDNN;
}

/* One product, or one block of it, on one thread. */
struct product {
    int ta, tb, M, N, K;
    float alpha, beta;
    const float *A, *Bf;
    const uint16_t *Bh;
    int lda, ldb, ldc;
    float *C;
    int bf16;
    struct gemm_nf4 q; /* an NF4 B when q.t is set */
};

/* A bf16 product's A rounded once for every thread (see run), row-major
 * (M,K); grows as needed and is kept, one per calling thread. On the
 * onednn path, A as stored and an fp32 B rounded for oneDNN. */
static _Thread_local uint16_t *shared_ah, *shared_bh;
static _Thread_local size_t shared_ah_cap, shared_bh_cap;

/* *buf with room for n halves (grown, old contents dropped); NULL when
 * out of memory. */
static uint16_t *room(uint16_t **buf, size_t *cap, size_t n)
{
    if (n > *cap) {
        free(*buf);
        *buf = malloc(n * sizeof(uint16_t));
        *cap = *buf ? n : 0;
    }
    return *buf;
}

static void run_block(const struct product *p, enum cpu_path path, const uint16_t *ah)
{
    if (p->bf16 && ah) {
        gemm_kern_bf16_ah(p->M, p->N, p->K, p->alpha, ah, p->K, p->tb, p->Bh, p->Bf,
                          p->q.t ? &p->q : NULL, p->ldb, p->beta, p->C, p->ldc);
    } else if (p->bf16) {
        gemm_kern_bf16(p->ta, p->tb, p->M, p->N, p->K, p->alpha, p->A, p->lda, p->Bh, p->Bf,
                       p->q.t ? &p->q : NULL, p->ldb, p->beta, p->C, p->ldc);
    } else if (path == CPU_PATH_AVX2) {
        cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans,
                    p->tb ? CblasTrans : CblasNoTrans, p->M, p->N, p->K, p->alpha, p->A, p->lda,
                    p->Bf, p->ldb, p->beta, p->C, p->ldc);
    } else {
        gemm_kern_f32(p->ta, p->tb, p->M, p->N, p->K, p->alpha, p->A, p->lda, p->Bf, p->ldb,
                      p->beta, p->C, p->ldc);
    }
}

/* Rows [s, e) of op(A) and of C, or columns [s, e) of op(B) and of C. */
static struct product cut(const struct product *p, int by_rows, int s, int e)
{
    struct product b = *p;
    if (by_rows) {
        b.M = e - s;
        b.A = p->ta ? p->A + s : p->A + (long)s * p->lda;
        b.C = p->C + (long)s * p->ldc;
    } else {
        b.N = e - s;
        size_t off = p->tb ? (size_t)s * p->ldb : (size_t)s;
        if (p->q.t)
            b.q.base = p->q.base + off;
        else if (p->Bh)
            b.Bh = p->Bh + off;
        else
            b.Bf = p->Bf + off;
        b.C = p->C + s;
    }
    return b;
}

/* rows x cols of x (ldx apart) rounded to bf16 into out (cols apart),
 * the rows shared among nt threads: the same bits however they split. */
static void round_rows(const float *x, int ldx, int rows, int cols, uint16_t *out, int nt)
{
    if (nt <= 1 || (long)rows * cols < PAR_MIN_WORK / 16) {
        gemm_kern_round_bf16(x, ldx, rows, cols, out, cols);
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        int r0 = (int)((long)rows * t / nt), r1 = (int)((long)rows * (t + 1) / nt);
        gemm_kern_round_bf16(x + (long)r0 * ldx, ldx, r1 - r0, cols, out + (size_t)r0 * cols,
                             cols);
    }
}

/* Rows of an NF4 weight decoded into one strip for oneDNN: about this many
 * bf16 values (2 MiB, within a core's L2 on the CPUs measured), in whole
 * multiples of 64 rows. */
#define NF4_STRIP_VALUES (1L << 20)

/* rows [r0, r1) of the NF4 B (cols values each, ldb apart) decoded to
 * bf16 into out, cols apart: the values gemm_bf16_nf4's kernels read. */
static void decode_rows(const struct gemm_nf4 *q, int ldb, int r0, int r1, int cols,
                        uint16_t *out, int nt)
{
    if (ldb == cols) { /* one stretch: nf4_dequantize_bf16 shares it out */
        nf4_dequantize_bf16(q->t, q->base + (size_t)r0 * ldb, (size_t)(r1 - r0) * cols, out);
        return;
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int r = r0; r < r1; r++)
        nf4_dequantize_bf16_range(q->t, q->base + (size_t)r * ldb, (size_t)cols,
                                  out + (size_t)(r - r0) * cols);
}

/* An NF4 B on the onednn path, A rounded already (ah, lda apart): the
 * weight's rows decoded a strip at a time into a per-thread buffer, never
 * whole, each strip one oneDNN product. With op(B) = B^T (the forward
 * x W^T) a strip is a band of C's columns; with op(B) = B (an input's
 * gradient dy W) it is a band of K, each band after the first added to
 * C. The strips are fixed by the shape, so the bits are too. Returns 0,
 * or -1 with C untouched when oneDNN refused the first strip; a later
 * strip it refuses aborts (C is half done). */
static int run_onednn_nf4(const struct product *p, const uint16_t *ah, int lda, int nt)
{
    int rows = p->tb ? p->N : p->K, cols = p->tb ? p->K : p->N;
    long step = NF4_STRIP_VALUES / cols;
    step = step < 64 ? 64 : step & ~63L;
    if (step > rows)
        step = rows;
    uint16_t *buf = room(&shared_bh, &shared_bh_cap, (size_t)step * cols);
    if (!buf)
        return -1;
    for (int r0 = 0; r0 < rows; r0 += (int)step) {
        int r1 = r0 + (int)step < rows ? r0 + (int)step : rows, n = r1 - r0;
        decode_rows(&p->q, p->ldb, r0, r1, cols, buf, nt);
        int rc;
        if (p->tb)
            rc = onednn_gemm_bf16(p->ta, 1, p->M, n, p->K, p->alpha, ah, lda, buf, cols,
                                  p->beta, p->C + r0, p->ldc);
        else
            rc = onednn_gemm_bf16(p->ta, 0, p->M, p->N, n, p->alpha,
                                  p->ta ? ah + (size_t)r0 * lda : ah + r0, lda, buf, cols,
                                  r0 ? 1.0f : p->beta, p->C, p->ldc);
        if (rc && r0 == 0)
            return -1;
        if (rc) {
            fprintf(stderr, "oneDNN refused a strip of a %dx%dx%d product after its first\n",
                    p->M, p->N, p->K);
            abort();
        }
    }
    return 0;
}

/* A bf16 product on the onednn path: A (and an fp32 B) rounded to bf16 as
 * stored, then oneDNN's matmul on the process's threads. Returns 0, or -1
 * when oneDNN refused it or memory ran out (C untouched). */
static int run_onednn(const struct product *p, int nt)
{
    int arows = p->ta ? p->K : p->M, acols = p->ta ? p->M : p->K;
    int brows = p->tb ? p->N : p->K, bcols = p->tb ? p->K : p->N;
    uint16_t *ah = room(&shared_ah, &shared_ah_cap, (size_t)arows * acols);
    const uint16_t *bh = p->Bh;
    int ldb = p->ldb;
    if (!ah)
        return -1;
    if (p->Bf) {
        uint16_t *b = room(&shared_bh, &shared_bh_cap, (size_t)brows * bcols);
        if (!b)
            return -1;
        round_rows(p->Bf, p->ldb, brows, bcols, b, nt);
        bh = b;
        ldb = bcols;
    }
    round_rows(p->A, p->lda, arows, acols, ah, nt);
    if (p->q.t)
        return run_onednn_nf4(p, ah, acols, nt);
    return onednn_gemm_bf16(p->ta, p->tb, p->M, p->N, p->K, p->alpha, ah, acols, bh, ldb,
                            p->beta, p->C, p->ldc);
}

static void run(const struct product *p)
{
    enum cpu_path path = cpu_path_current();
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    /* oneDNN takes a bf16 product outside a parallel region with a bf16
     * or fp32 B, a weight's gradient (op(A) = A^T) only where it runs AMX
     * tiles (without them alallo's kernels are faster there: docs/trainer.md,
     * "CPU paths"), an NF4 B decoded a strip at a time; a product inside a
     * region and one oneDNN refuses (the same each time for one shape) run
     * alallo's kernels. */
    if (path == CPU_PATH_ONEDNN && p->bf16 && (!p->ta || onednn_uses_amx()) &&
        !omp_in_parallel() && p->M > 0 && p->N > 0 && p->K > 0 && run_onednn(p, nt) == 0)
        return;
    if (nt <= 1 || (long)p->M * p->N * p->K < PAR_MIN_WORK) {
        run_block(p, path, NULL);
        return;
    }
    /* Cut the longer side of C, in multiples of 32 so that every block
     * keeps whole register tiles. */
    int by_rows = p->M >= p->N;
    int len = by_rows ? p->M : p->N;
    int chunk = (len + nt - 1) / nt;
    chunk = (chunk + 31) & ~31;
    /* Cut by columns, every thread reads all of A: a bf16 product rounds
     * it once, the threads a share of its rows each, and they all read
     * that (the same bits as each rounding its own), in the same parallel
     * region as the product (a region more costs the threads a wake-up). */
    uint16_t *ah = NULL; /* the caller's: the team's threads have their own */
    if (p->bf16 && !p->ta && !by_rows) {
        ah = room(&shared_ah, &shared_ah_cap, (size_t)p->M * p->K);
    }
#pragma omp parallel num_threads(nt)
    {
        /* block t of nt on thread t % team, should the team be smaller */
        int me = omp_get_thread_num(), team = omp_get_num_threads();
        if (ah) { /* the same for every thread: all or none meet the barrier */
            for (int t = me; t < nt; t += team) {
                int r0 = (int)((long)p->M * t / nt), r1 = (int)((long)p->M * (t + 1) / nt);
                gemm_kern_round_bf16(p->A + (long)r0 * p->lda, p->lda, r1 - r0, p->K,
                                     ah + (size_t)r0 * p->K, p->K);
            }
#pragma omp barrier
        }
        for (int t = me; t < nt; t += team) {
            int s = t * chunk;
            int e = s + chunk < len ? s + chunk : len;
            if (s >= e)
                continue;
            struct product b = cut(p, by_rows, s, e);
            run_block(&b, path, ah);
        }
    }
}

void gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
          const float *B, int ldb, float beta, float *C, int ldc)
{
    struct product p = {ta, tb, M, N, K, alpha, beta, A, B, NULL, lda, ldb, ldc, C, 0, {0}};
    run(&p);
}

void gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
               const uint16_t *Bh, const float *Bf, int ldb, float beta, float *C, int ldc)
{
    assert(gemm_has_bf16());
    assert((Bh != NULL) != (Bf != NULL));
    struct product p = {ta, tb, M, N, K, alpha, beta, A, Bf, Bh, lda, ldb, ldc, C, 1, {0}};
    run(&p);
}

void gemm_bf16_nf4(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                   const struct gemm_nf4 *Bq, int ldb, float beta, float *C, int ldc)
{
    assert(gemm_has_bf16());
    assert(Bq && Bq->t);
    struct product p = {ta, tb, M, N, K, alpha, beta, A, NULL, NULL, lda, ldb, ldc, C, 1, *Bq};
    run(&p);
}
