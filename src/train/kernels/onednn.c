/* onednn.c - bf16 products through oneDNN's matmul, opened at run time
 * (onednn.h). */
#include "train/kernels/onednn.h"

#include <assert.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef ALALLO_HAVE_ONEDNN
/* Built without oneDNN's header: the path is never offered. */
int onednn_available(char *why, int whylen)
{
    if (why && whylen > 0)
        snprintf(why, (size_t)whylen, "this alallo was built without oneDNN's header "
                                      "(libdnnl-dev; scripts/deps.sh installs it)");
    return 0;
}

int onednn_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A,
                     int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc)
{
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B;
    (void)ldb, (void)beta, (void)C, (void)ldc;
    assert(!"onednn_gemm_bf16 without oneDNN");
    return -1;
}

const char *onednn_last_impl(void)
{
    return "";
}

int onednn_uses_amx(void)
{
    return 0;
}

const char *onednn_describe(void)
{
    return "";
}
#else
#include <oneapi/dnnl/dnnl.h>

#define LIBNAME "libdnnl.so.2"

/* The library's entry points this file calls, found by name once. */
static struct {
    dnnl_status_t (*engine_create)(dnnl_engine_t *, dnnl_engine_kind_t, size_t);
    dnnl_status_t (*stream_create)(dnnl_stream_t *, dnnl_engine_t, unsigned);
    dnnl_status_t (*stream_wait)(dnnl_stream_t);
    dnnl_status_t (*md_init_by_strides)(dnnl_memory_desc_t *, int, const dnnl_dims_t,
                                        dnnl_data_type_t, const dnnl_dims_t);
    dnnl_status_t (*matmul_desc_init)(dnnl_matmul_desc_t *, const dnnl_memory_desc_t *,
                                      const dnnl_memory_desc_t *, const dnnl_memory_desc_t *,
                                      const dnnl_memory_desc_t *);
    dnnl_status_t (*attr_create)(dnnl_primitive_attr_t *);
    dnnl_status_t (*attr_destroy)(dnnl_primitive_attr_t);
    dnnl_status_t (*attr_set_output_scales)(dnnl_primitive_attr_t, dnnl_dim_t, int,
                                            const float *);
    dnnl_status_t (*attr_set_post_ops)(dnnl_primitive_attr_t, const_dnnl_post_ops_t);
    dnnl_status_t (*post_ops_create)(dnnl_post_ops_t *);
    dnnl_status_t (*post_ops_append_sum)(dnnl_post_ops_t, float);
    dnnl_status_t (*post_ops_destroy)(dnnl_post_ops_t);
    dnnl_status_t (*pd_create)(dnnl_primitive_desc_t *, const_dnnl_op_desc_t,
                               const_dnnl_primitive_attr_t, dnnl_engine_t,
                               const_dnnl_primitive_desc_t);
    dnnl_status_t (*pd_query)(const_dnnl_primitive_desc_t, dnnl_query_t, int, void *);
    dnnl_status_t (*pd_destroy)(dnnl_primitive_desc_t);
    dnnl_status_t (*prim_create)(dnnl_primitive_t *, const_dnnl_primitive_desc_t);
    dnnl_status_t (*prim_destroy)(dnnl_primitive_t);
    dnnl_status_t (*prim_execute)(const_dnnl_primitive_t, dnnl_stream_t, int,
                                  const dnnl_exec_arg_t *);
    dnnl_status_t (*memory_create)(dnnl_memory_t *, const dnnl_memory_desc_t *, dnnl_engine_t,
                                   void *);
    dnnl_status_t (*memory_set_data_handle)(dnnl_memory_t, void *);
    dnnl_status_t (*memory_destroy)(dnnl_memory_t);
    const dnnl_version_t *(*version)(void);
    dnnl_cpu_isa_t (*effective_isa)(void);
} fn;

/* One product shape's primitive and the memory objects it runs on. */
struct entry {
    int ta, tb, M, N, K, lda, ldb, ldc;
    float alpha, beta;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
    const char *impl; /* owned by pd */
    unsigned long used;
};

/* Process-wide: the library, one engine and stream, and the kept
 * primitives, whose memory objects each product rewrites. The lock
 * serialises products from different threads: reinforcement fine-tuning
 * runs a model grader's generation in a thread beside the rollouts
 * (train/run/rft_run.c), so two threads' products take turns here. */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int opened;
static char why_not[256];
static char described[96];
static int amx;
static dnnl_engine_t engine;
static dnnl_stream_t stream;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry cache[ONEDNN_CACHE];
static int n_cache;
static unsigned long clock_use;
static _Thread_local char last_impl[64]; /* a copy: an entry's pd may go */

static const char *isa_name(dnnl_cpu_isa_t isa)
{
    switch (isa) {
    case dnnl_cpu_isa_avx512_core_amx:
        return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16:
        return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni:
        return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core:
        return "avx512_core";
    case dnnl_cpu_isa_avx2_vnni:
        return "avx2_vnni";
    case dnnl_cpu_isa_avx2:
        return "avx2";
    default:
        return "older";
    }
}

/* dlsym into a function pointer of any type (POSIX guarantees the cast). */
#define FIND(field, name)                                                                    \
    do {                                                                                     \
        void *p_ = dlsym(h, name);                                                           \
        if (!p_) {                                                                           \
            snprintf(why_not, sizeof why_not, "%s has no %s (oneDNN 2.x is needed)", LIBNAME, \
                     name);                                                                  \
            return;                                                                          \
        }                                                                                    \
        memcpy(&fn.field, &p_, sizeof p_);                                                   \
    } while (0)

static void open_library(void)
{
    void *h = dlopen(LIBNAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why_not, sizeof why_not,
                 "oneDNN could not be opened (%s; Debian's package is libdnnl2): %s", LIBNAME,
                 e ? e : "not found");
        return;
    }
    FIND(engine_create, "dnnl_engine_create");
    FIND(stream_create, "dnnl_stream_create");
    FIND(stream_wait, "dnnl_stream_wait");
    FIND(md_init_by_strides, "dnnl_memory_desc_init_by_strides");
    FIND(matmul_desc_init, "dnnl_matmul_desc_init");
    FIND(attr_create, "dnnl_primitive_attr_create");
    FIND(attr_destroy, "dnnl_primitive_attr_destroy");
    FIND(attr_set_output_scales, "dnnl_primitive_attr_set_output_scales");
    FIND(attr_set_post_ops, "dnnl_primitive_attr_set_post_ops");
    FIND(post_ops_create, "dnnl_post_ops_create");
    FIND(post_ops_append_sum, "dnnl_post_ops_append_sum");
    FIND(post_ops_destroy, "dnnl_post_ops_destroy");
    FIND(pd_create, "dnnl_primitive_desc_create");
    FIND(pd_query, "dnnl_primitive_desc_query");
    FIND(pd_destroy, "dnnl_primitive_desc_destroy");
    FIND(prim_create, "dnnl_primitive_create");
    FIND(prim_destroy, "dnnl_primitive_destroy");
    FIND(prim_execute, "dnnl_primitive_execute");
    FIND(memory_create, "dnnl_memory_create");
    FIND(memory_set_data_handle, "dnnl_memory_set_data_handle");
    FIND(memory_destroy, "dnnl_memory_destroy");
    FIND(version, "dnnl_version");
    FIND(effective_isa, "dnnl_get_effective_cpu_isa");
    if (fn.engine_create(&engine, dnnl_cpu, 0) != dnnl_success ||
        fn.stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
        snprintf(why_not, sizeof why_not, "oneDNN opened but made no CPU engine");
        return;
    }
    amx = fn.effective_isa() == dnnl_cpu_isa_avx512_core_amx;
    const dnnl_version_t *v = fn.version();
    snprintf(described, sizeof described, "oneDNN %d.%d.%d, isa %s", v->major, v->minor,
             v->patch, isa_name(fn.effective_isa()));
    opened = 1;
}

int onednn_available(char *why, int whylen)
{
    pthread_once(&once, open_library);
    if (!opened && why && whylen > 0)
        snprintf(why, (size_t)whylen, "%s", why_not);
    return opened;
}

const char *onednn_describe(void)
{
    return onednn_available(NULL, 0) ? described : "";
}

const char *onednn_last_impl(void)
{
    return last_impl;
}

int onednn_uses_amx(void)
{
    return onednn_available(NULL, 0) && amx;
}

static void entry_free(struct entry *e)
{
    if (e->a)
        fn.memory_destroy(e->a);
    if (e->b)
        fn.memory_destroy(e->b);
    if (e->c)
        fn.memory_destroy(e->c);
    if (e->prim)
        fn.prim_destroy(e->prim);
    if (e->pd)
        fn.pd_destroy(e->pd);
    memset(e, 0, sizeof *e);
}

/* Makes e's primitive for its key. Returns 0, or -1 (e freed). */
static int entry_make(struct entry *e)
{
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t ad = {e->M, e->K}, bd = {e->K, e->N}, cd = {e->M, e->N};
    dnnl_dims_t as = {e->ta ? 1 : e->lda, e->ta ? e->lda : 1};
    dnnl_dims_t bs = {e->tb ? 1 : e->ldb, e->tb ? e->ldb : 1};
    dnnl_dims_t cs = {e->ldc, 1};
    dnnl_matmul_desc_t md;
    if (fn.md_init_by_strides(&a, 2, ad, dnnl_bf16, as) != dnnl_success ||
        fn.md_init_by_strides(&b, 2, bd, dnnl_bf16, bs) != dnnl_success ||
        fn.md_init_by_strides(&c, 2, cd, dnnl_f32, cs) != dnnl_success ||
        fn.matmul_desc_init(&md, &a, &b, NULL, &c) != dnnl_success)
        return -1;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    int bad = fn.attr_create(&attr) != dnnl_success;
    if (!bad && e->alpha != 1.0f)
        bad = fn.attr_set_output_scales(attr, 1, 0, &e->alpha) != dnnl_success;
    if (!bad && e->beta != 0.0f)
        bad = fn.post_ops_create(&po) != dnnl_success ||
              fn.post_ops_append_sum(po, e->beta) != dnnl_success ||
              fn.attr_set_post_ops(attr, po) != dnnl_success;
    if (!bad)
        bad = fn.pd_create(&e->pd, &md, attr, engine, NULL) != dnnl_success;
    if (po)
        fn.post_ops_destroy(po);
    if (attr)
        fn.attr_destroy(attr);
    if (!bad)
        bad = fn.pd_query(e->pd, dnnl_query_impl_info_str, 0, &e->impl) != dnnl_success ||
              fn.prim_create(&e->prim, e->pd) != dnnl_success ||
              fn.memory_create(&e->a, &a, engine, DNNL_MEMORY_NONE) != dnnl_success ||
              fn.memory_create(&e->b, &b, engine, DNNL_MEMORY_NONE) != dnnl_success ||
              fn.memory_create(&e->c, &c, engine, DNNL_MEMORY_NONE) != dnnl_success;
    if (bad) {
        entry_free(e);
        return -1;
    }
    return 0;
}

/* The kept primitive for this product, made (evicting the least recently
 * used) when new; NULL when oneDNN refused it. Under the lock. */
static struct entry *find(int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc,
                          float alpha, float beta)
{
    struct entry *lru = NULL;
    for (int i = 0; i < n_cache; i++) {
        struct entry *e = &cache[i];
        if (e->ta == ta && e->tb == tb && e->M == M && e->N == N && e->K == K &&
            e->lda == lda && e->ldb == ldb && e->ldc == ldc &&
            memcmp(&e->alpha, &alpha, sizeof alpha) == 0 &&
            memcmp(&e->beta, &beta, sizeof beta) == 0)
            return e;
        if (!lru || e->used < lru->used)
            lru = e;
    }
    struct entry *e = n_cache < ONEDNN_CACHE ? &cache[n_cache++] : lru;
    assert(e);
    entry_free(e);
    e->ta = ta, e->tb = tb, e->M = M, e->N = N, e->K = K;
    e->lda = lda, e->ldb = ldb, e->ldc = ldc, e->alpha = alpha, e->beta = beta;
    if (entry_make(e)) {
        if (e == &cache[n_cache - 1])
            n_cache--;
        return NULL;
    }
    return e;
}

int onednn_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A,
                     int lda, const uint16_t *B, int ldb, float beta, float *C, int ldc)
{
    assert(opened);
    assert(M >= 1 && N >= 1 && K >= 1);
    pthread_mutex_lock(&lock);
    struct entry *e = find(ta, tb, M, N, K, lda, ldb, ldc, alpha, beta);
    int rc = -1;
    if (e) {
        e->used = ++clock_use;
        /* oneDNN reads A and B only; its handles are not const */
        void *ah, *bh;
        memcpy(&ah, &A, sizeof ah);
        memcpy(&bh, &B, sizeof bh);
        dnnl_exec_arg_t args[3] = {
            {DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c}};
        if (fn.memory_set_data_handle(e->a, ah) == dnnl_success &&
            fn.memory_set_data_handle(e->b, bh) == dnnl_success &&
            fn.memory_set_data_handle(e->c, C) == dnnl_success) {
            /* C may be half written now: no way back but a crash (the
             * attempt resumes from its last checkpoint) */
            if (fn.prim_execute(e->prim, stream, 3, args) != dnnl_success ||
                fn.stream_wait(stream) != dnnl_success) {
                fprintf(stderr, "oneDNN failed to run a %dx%dx%d product it had accepted\n", M,
                        N, K);
                abort();
            }
            rc = 0;
            snprintf(last_impl, sizeof last_impl, "%s", e->impl ? e->impl : "");
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}
#endif
