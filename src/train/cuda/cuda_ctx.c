/* cuda_ctx.c - the GPU context: device query, stream, cuBLASLt handle and
 * workspace, device memory accounting (contract in cuda_ctx.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "train/cuda/cuda_ctx.h"
#include "train/cuda/cuda_walk.h"

/* cuBLASLt's workspace: enough for its split-K and stream-K algorithms on
 * Hopper (NVIDIA advises 32 MiB there). */
#define LT_WORKSPACE_BYTES (32u << 20)

static struct {
    int open;
    struct cuda_device_info dev;
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *workspace;
    size_t in_use, peak;
    struct cuda_walk *walk; /* cuda_graph.h's walk, NULL when none */
    int capturing;
} ctx;

static char err_text[512];

int cuda_ctx_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_text, sizeof err_text, fmt, ap);
    va_end(ap);
    return -1;
}
#define fail cuda_ctx_fail /* this file's short name for it */

const char *cuda_ctx_error(void)
{
    return err_text;
}

int cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* clears "no driver" so later calls start clean */
        return 0;
    }
    return n;
}

int cuda_device_query(int index, struct cuda_device_info *out)
{
    struct cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, index);
    if (e != cudaSuccess)
        return fail("GPU %d: cudaGetDeviceProperties failed: %s", index, cudaGetErrorString(e));
    memset(out, 0, sizeof *out);
    out->index = index;
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->total_bytes = p.totalGlobalMem;
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->sm_count = p.multiProcessorCount;
    return 0;
}

int cuda_ctx_open(int index)
{
    if (ctx.open)
        return fail("the GPU context is already open (device %d)", ctx.dev.index);
    int n = cuda_device_count();
    if (n == 0)
        return fail("no GPU is visible to this process (CUDA_VISIBLE_DEVICES, driver)");
    if (index < 0 || index >= n)
        return fail("GPU %d does not exist: %d visible", index, n);
    if (cuda_device_query(index, &ctx.dev) < 0)
        return -1;
    if (ctx.dev.cc_major < 8)
        return fail("GPU %d (%s) has compute capability %d.%d; the trainer needs 8.0 or later "
                    "(bf16 tensor cores)",
                    index, ctx.dev.name, ctx.dev.cc_major, ctx.dev.cc_minor);
    cudaError_t e = cudaSetDevice(index);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking);
    if (e != cudaSuccess)
        return fail("GPU %d: could not start: %s", index, cudaGetErrorString(e));
    cublasStatus_t s = cublasLtCreate(&ctx.lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(ctx.stream);
        return fail("GPU %d: cublasLtCreate failed: %s", index, cublasLtGetStatusString(s));
    }
    e = cudaMalloc(&ctx.workspace, LT_WORKSPACE_BYTES);
    if (e != cudaSuccess) {
        cublasLtDestroy(ctx.lt);
        cudaStreamDestroy(ctx.stream);
        return fail("GPU %d: no room for cuBLASLt's workspace: %s", index, cudaGetErrorString(e));
    }
    ctx.open = 1;
    ctx.in_use = ctx.peak = LT_WORKSPACE_BYTES;
    return 0;
}

void cuda_ctx_close(void)
{
    if (!ctx.open)
        return;
    cudaStreamSynchronize(ctx.stream);
    cudaFree(ctx.workspace);
    cublasLtDestroy(ctx.lt);
    cudaStreamDestroy(ctx.stream);
    memset(&ctx, 0, sizeof ctx);
}

const struct cuda_device_info *cuda_ctx_device(void)
{
    return ctx.open ? &ctx.dev : NULL;
}

void *cuda_ctx_stream(void)
{
    return ctx.stream;
}

void *cuda_ctx_lt(void)
{
    return ctx.lt;
}

void *cuda_ctx_workspace(size_t *bytes)
{
    *bytes = LT_WORKSPACE_BYTES;
    return ctx.workspace;
}

/* The calls a graph's body may not make (cuda_ctx.h): a bug in the
 * backend's own code, so it stops here rather than queue a wrong graph. */
static void idle_or_abort(const char *what)
{
    if (!ctx.walk && !ctx.capturing)
        return;
    fprintf(stderr, "alallo: %s inside a CUDA graph's body (cuda_graph.h)\n", what);
    abort();
}

struct cuda_walk *cuda_ctx_walk(void)
{
    return ctx.walk;
}

void cuda_ctx_set_walk(struct cuda_walk *w)
{
    ctx.walk = w;
}

int cuda_ctx_capture_begin(void)
{
    idle_or_abort("a capture");
    cudaError_t e = cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return fail("could not start a CUDA graph's capture: %s", cudaGetErrorString(e));
    }
    ctx.capturing = 1;
    return 0;
}

int cuda_ctx_capture_end(void **graph)
{
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    *graph = NULL;
    ctx.capturing = 0;
    cudaError_t e = cudaStreamEndCapture(ctx.stream, &g);
    if (e == cudaSuccess)
        e = cudaGraphInstantiate(&x, g, 0);
    if (g)
        cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* a refused capture is not the stream's error */
        return fail("a CUDA graph's capture failed: %s", cudaGetErrorString(e));
    }
    *graph = x;
    return 0;
}

int cuda_ctx_graph_launch(void *graph)
{
    cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)graph, ctx.stream);
    if (e != cudaSuccess)
        return fail("a CUDA graph's launch failed: %s", cudaGetErrorString(e));
    return 0;
}

void cuda_ctx_graph_free(void *graph)
{
    if (graph)
        cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

int cuda_ctx_sync(void)
{
    idle_or_abort("cuda_ctx_sync");
    cudaError_t e = cudaStreamSynchronize(ctx.stream);
    if (e == cudaSuccess)
        e = cudaGetLastError();
    if (e != cudaSuccess)
        return fail("the GPU reported an error: %s (%s)", cudaGetErrorString(e),
                    cudaGetErrorName(e));
    return 0;
}

/* Each allocation carries its size in a header, so cuda_free can count it. */
#define HDR 256 /* keeps the caller's pointer 256-byte aligned */

void *cuda_alloc(size_t bytes, int zero)
{
    idle_or_abort("cuda_alloc");
    char *p = NULL;
    cudaError_t e = cudaMalloc((void **)&p, bytes + HDR);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        fail("the GPU has no room for %zu more MiB (%zu MiB in use): %s", bytes >> 20,
             ctx.in_use >> 20, cudaGetErrorString(e));
        return NULL;
    }
    size_t size = bytes;
    e = cudaMemcpy(p, &size, sizeof size, cudaMemcpyHostToDevice);
    if (e == cudaSuccess && zero)
        e = cudaMemsetAsync(p + HDR, 0, bytes, ctx.stream);
    if (e != cudaSuccess) {
        cudaFree(p);
        fail("GPU memory set-up failed: %s", cudaGetErrorString(e));
        return NULL;
    }
    ctx.in_use += bytes;
    if (ctx.in_use > ctx.peak)
        ctx.peak = ctx.in_use;
    return p + HDR;
}

void cuda_free(void *p)
{
    if (!p)
        return;
    idle_or_abort("cuda_free");
    char *base = (char *)p - HDR;
    size_t size = 0;
    cudaStreamSynchronize(ctx.stream);
    if (cudaMemcpy(&size, base, sizeof size, cudaMemcpyDeviceToHost) == cudaSuccess)
        ctx.in_use -= size <= ctx.in_use ? size : ctx.in_use;
    cudaFree(base);
}

int cuda_upload(void *dst, const void *src, size_t bytes)
{
    idle_or_abort("cuda_upload");
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx.stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(ctx.stream);
    if (e != cudaSuccess)
        return fail("copy of %zu bytes to the GPU failed: %s", bytes, cudaGetErrorString(e));
    return 0;
}

int cuda_copy(void *dst, const void *src, size_t bytes)
{
    if (ctx.walk) {
        size_t item[3] = {(size_t)dst, (size_t)src, bytes};
        cuda_walk_note(ctx.walk, CUDA_WALK_COPY, item, sizeof item);
        return 0;
    }
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx.stream);
    if (e != cudaSuccess)
        return fail("copy of %zu bytes on the GPU failed: %s", bytes, cudaGetErrorString(e));
    return 0;
}

int cuda_download(void *dst, const void *src, size_t bytes)
{
    idle_or_abort("cuda_download");
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx.stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(ctx.stream);
    if (e != cudaSuccess)
        return fail("copy of %zu bytes from the GPU failed: %s", bytes, cudaGetErrorString(e));
    return 0;
}

size_t cuda_mem_in_use(void)
{
    return ctx.in_use;
}

size_t cuda_mem_peak(void)
{
    return ctx.peak;
}
