/* cuda_ctx.h - the GPU the trainer runs on: which one, what it has, and the
 * one stream and cuBLASLt handle every GPU product and kernel uses.
 *
 * Built only when CMake finds nvcc (ALALLO_HAVE_CUDA); the CPU-only build
 * has none of this. One context per process; the trainer is
 * single-threaded on the host side, so nothing here locks.
 *
 * Errors: CUDA reports many errors late (at the next synchronization). Every
 * function here returns 0 or -1; on -1 the reason is in cuda_ctx_error().
 * Kernels (cuda_ops.h) launch on cuda_ctx_stream() and return nothing; a
 * launch or execution error surfaces at the next cuda_ctx_sync().
 *
 * Ownership: the context owns its stream, its cuBLASLt handle and its
 * cuBLASLt workspace; cuda_ctx_close releases them. Device memory from
 * cuda_alloc is the caller's to cuda_free.
 */
#ifndef ALALLO_TRAIN_CUDA_CTX_H
#define ALALLO_TRAIN_CUDA_CTX_H

#include <stddef.h>

struct cuda_walk;

struct cuda_device_info {
    int index;             /* CUDA ordinal, after CUDA_VISIBLE_DEVICES */
    char name[256];        /* e.g. "NVIDIA H200" */
    size_t total_bytes;    /* device memory */
    int cc_major, cc_minor;/* compute capability, e.g. 9.0 */
    int sm_count;
};

/* How many GPUs this process can see (0 when none or no driver; never -1).
 * Cheap; does not create a context. */
int cuda_device_count(void);
/* Properties of device `index`. 0, or -1 with a reason. */
int cuda_device_query(int index, struct cuda_device_info *out /* OUT */);

/* Opens the context on device `index` (creates the stream, the cuBLASLt
 * handle and its workspace). 0, or -1 with a reason (no device, a compute
 * capability below 8.0: bf16 tensor cores are required). */
int cuda_ctx_open(int index);
void cuda_ctx_close(void); /* safe when not open */
/* The open device's properties (NULL when not open). */
const struct cuda_device_info *cuda_ctx_device(void);
/* The stream (a cudaStream_t) and cuBLASLt handle (a cublasLtHandle_t), as
 * void * so that C callers need no CUDA headers. */
void *cuda_ctx_stream(void);
void *cuda_ctx_lt(void);
/* cuBLASLt's workspace on the device and its size. */
void *cuda_ctx_workspace(size_t *bytes /* OUT */);
/* Waits for the stream; 0, or -1 with the first error any earlier launch
 * or product raised. */
int cuda_ctx_sync(void);
/* The reason for the last -1 (a sentence naming the call that failed). */
const char *cuda_ctx_error(void);
/* Sets that reason (printf-style) for the backend's other modules
 * (cuda_gemm.c ...), so that every GPU failure reads from one place.
 * Returns -1. */
int cuda_ctx_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The walk in progress (cuda_walk.h, cuda_graph.h), NULL when none. While
 * one is set, the launchers note what they would queue into it and queue
 * nothing; cuda_alloc, cuda_free, cuda_upload, cuda_download and
 * cuda_ctx_sync must not be called (they abort: a graph's body queues work
 * and nothing else). */
struct cuda_walk *cuda_ctx_walk(void);
void cuda_ctx_set_walk(struct cuda_walk *w);

/* Stream capture (cuda_graph.c's, which owns the policy): from
 * cuda_ctx_capture_begin to cuda_ctx_capture_end, what is queued on the
 * stream is recorded, not run, and ends as an executable graph (*graph)
 * that cuda_ctx_graph_launch queues whole, as often as asked; the same
 * calls as above must not be made while capturing (they abort). A capture
 * that fails (the driver refused something queued in it) ends with -1 and
 * a reason, and no graph. cuda_ctx_graph_free(NULL) is fine. */
int cuda_ctx_capture_begin(void);
int cuda_ctx_capture_end(void **graph /* OUT */);
int cuda_ctx_graph_launch(void *graph);
void cuda_ctx_graph_free(void *graph);

/* Device memory: bytes on the device (NULL with a reason when it does not
 * fit), zeroed when `zero`; cuda_free(NULL) is fine. */
void *cuda_alloc(size_t bytes, int zero);
void cuda_free(void *p);
/* Copies on the stream, then waits (host memory is pageable). 0 or -1. */
int cuda_upload(void *dst_dev, const void *src_host, size_t bytes);
int cuda_download(void *dst_host, const void *src_dev, size_t bytes);
/* Device to device, queued on the stream (no wait). 0, or -1 when it
 * could not be queued. */
int cuda_copy(void *dst_dev, const void *src_dev, size_t bytes);
/* Bytes in use on the device now and at most since the context opened
 * (through cuda_alloc; the peak a benchmark reports). */
size_t cuda_mem_in_use(void);
size_t cuda_mem_peak(void);

#endif
