/* bigmem.c - huge pages for the trainer's large blocks (bigmem.h). */
#define _DEFAULT_SOURCE
#include "train/kernels/bigmem.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#define HUGE_PAGE ((uintptr_t)2 << 20)

/* Read on every call: large blocks are few, and a test can flip it. */
static int marking_on(void)
{
    const char *e = getenv("ALALLO_HUGEPAGES");
    return !(e && strcmp(e, "0") == 0);
}

void bigmem_mark(void *p, size_t bytes)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (!p || bytes < HUGE_PAGE || !marking_on())
        return;
    uintptr_t s = ((uintptr_t)p + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    uintptr_t e = ((uintptr_t)p + bytes) & ~(HUGE_PAGE - 1);
    if (e > s)
        (void)madvise((void *)s, e - s, MADV_HUGEPAGE); /* advice: failure is harmless */
#else
    (void)p;
    (void)bytes;
#endif
}

void *bigmem_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL; /* n * size overflows: refused here, as calloc would */
    void *p = calloc(n, size);
    if (p)
        bigmem_mark(p, n * size);
    return p;
}
