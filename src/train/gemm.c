/* gemm.c - products split over OpenMP threads and sent to the CPU path's
 * code (see gemm.h). */
#include "train/gemm.h"

#include <assert.h>
#include <cblas.h>
#include <omp.h>
#include <stddef.h>
#include <stdlib.h>

#include "train/cpu_path.h"
#include "train/gemm_kern.h"

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
    return cpu_path_current() == CPU_PATH_AVX512BF16;
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
 * (M,K); grows as needed and is kept, one per calling thread. */
static _Thread_local uint16_t *shared_ah;
static _Thread_local size_t shared_ah_cap;

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

static void run(const struct product *p)
{
    enum cpu_path path = cpu_path_current();
    int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
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
        size_t need = (size_t)p->M * p->K;
        if (need > shared_ah_cap) {
            free(shared_ah);
            shared_ah = malloc(need * sizeof(uint16_t));
            shared_ah_cap = shared_ah ? need : 0;
        }
        ah = shared_ah;
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
