/* bigmem.h - the trainer's large blocks (weights, gradients, optimizer
 * moments, activations) on huge pages where the kernel allows them.
 *
 * Why: a 124m model in full fine-tuning touches 2 GB a step, the weights
 * twice over in long strided reads; with 4 KiB pages every panel the
 * products pack crosses hundreds of pages and the TLB misses (under a
 * hypervisor, two-level walks) stall the packing. Linux backs a region
 * with 2 MiB pages when it is marked MADV_HUGEPAGE and transparent huge
 * pages are "madvise" or "always" (/sys/kernel/mm/transparent_hugepage/
 * enabled); where they are "never", or on another OS, the mark is a no-op.
 *
 * Contract: bigmem_calloc is calloc (zeroed, free() releases it; NULL when
 * n * size overflows, without calling calloc) that also marks the 2 MiB-aligned inside of a block of 2 MiB or more; bigmem_mark
 * marks an existing block the same way (best done before first touch).
 * Nothing about the numbers changes: pages hold the same bytes either way.
 * ALALLO_HUGEPAGES=0 in the environment turns the marking off (for
 * bench/train/hugepages.sh's side-by-side runs).
 */
#ifndef ALALLO_TRAIN_BIGMEM_H
#define ALALLO_TRAIN_BIGMEM_H

#include <stddef.h>

void *bigmem_calloc(size_t n, size_t size);
void bigmem_mark(void *p, size_t bytes);

#endif
