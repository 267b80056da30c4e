/* onednn.h - bf16 matrix products through oneDNN's matmul (Debian's
 * libdnnl 2.6), the trainer's way to AMX tiles (train/cpu_path.h, the
 * `onednn` path). oneDNN picks its own kernels from the CPU's flags:
 * AMX tiles where the CPU has them (`brg:avx512_core_amx`), its
 * AVX512-BF16 kernels otherwise.
 *
 * The library is opened at run time (dlopen "libdnnl.so.2"), the first
 * time a process asks for it: a process that never takes the path (the
 * server, a worker on another path) neither loads its 40 MB nor its
 * OpenCL loader. Where it is missing, onednn_available says why and the
 * path is not offered.
 *
 * Numerics: bf16 inputs, fp32 accumulation, C = alpha op(A) op(B) +
 * beta C in fp32 (beta through oneDNN's sum post-op). oneDNN's order of
 * the sums is its own: the bits differ from alallo's kernels (within the
 * bf16 tolerance of gemm.h), and are the same run to run on one machine,
 * thread count and oneDNN build (tests/unit/train/test_gemm_paths.c).
 *
 * Threads: oneDNN runs on the process's OpenMP threads (the same libgomp
 * runtime), as many as omp_get_max_threads() says when it runs.
 * Primitives are made once per product shape and kept for the process
 * (at most ONEDNN_CACHE of them; the least recently used goes). One lock
 * serialises products called from different threads (reinforcement
 * fine-tuning's grading thread runs a model grader's products beside the
 * rollouts'); each call's result is the same whichever thread makes it.
 */
#ifndef ALALLO_TRAIN_ONEDNN_H
#define ALALLO_TRAIN_ONEDNN_H

#include <stdint.h>

#define ONEDNN_CACHE 64

/* True when oneDNN could be opened (once per process; later calls are
 * free). Otherwise false, with a sentence in why (when why is not NULL). */
int onednn_available(char *why, int whylen);

/* Row-major C (M,N) = alpha * op(A) op(B) + beta * C with bf16 A and B:
 * op(A) is (M,K) (A stored (K,M) when ta), op(B) is (K,N) (B stored (N,K)
 * when tb), leading dimensions as cblas. beta 0 never reads C. M, N and
 * K at least 1. Returns 0, or -1 when oneDNN refused the product (out of
 * memory, or a shape it has no kernel for), with C untouched: the caller
 * computes it another way. A product oneDNN accepted and then failed to
 * run may have written part of C: that aborts the process, with a line
 * on stderr. Only after onednn_available(). */
int onednn_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A,
                     int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc);

/* What oneDNN ran the last product on this thread with (its
 * implementation name, e.g. "brg:avx512_core_amx"), or "" before any. */
const char *onednn_last_impl(void);

/* True when oneDNN runs AMX tiles on this CPU (its effective instruction
 * set is avx512_core_amx: the CPU has them and the kernel granted the tile
 * state). */
int onednn_uses_amx(void);

/* "oneDNN 2.6.3, isa avx512_core_bf16": the library's version and the
 * newest instruction set it will use on this CPU; "" when unavailable. */
const char *onednn_describe(void);

#endif
