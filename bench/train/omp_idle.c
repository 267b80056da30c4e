/* bench/train/omp_idle.c - where a trainer's OpenMP threads wait.
 * Preloaded into `alallo`, it wraps every parallel region and, at exit,
 * prints how many regions ran, the thread time spent inside them, how
 * much of that the threads sat idle (waiting at the region's end for the
 * slower thread), how late the second thread started (waking), and the
 * time between regions (one thread alone). For two threads.
 *
 *   gcc -O2 -shared -fPIC -fopenmp bench/train/omp_idle.c -o /tmp/omp_idle.so -ldl
 *   LD_PRELOAD=/tmp/omp_idle.so build/alallo bench train --adapter full --steps 8
 *
 * The figures include the bench's set-up (random weights, the peak loop).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

struct region {
    void (*fn)(void *);
    void *data;
    double start[2], end[2];
};

static long regions;
static double inside, busy, late, between, last_end;

static void run(void *p)
{
    struct region *r = p;
    int t = omp_get_thread_num();
    double s = now();
    r->fn(r->data);
    if (t < 2) {
        r->start[t] = s;
        r->end[t] = now();
    }
}

void GOMP_parallel(void (*fn)(void *), void *data, unsigned nt, unsigned flags)
{
    static void (*real)(void (*)(void *), void *, unsigned, unsigned);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "GOMP_parallel");
    struct region r = {fn, data, {0, 0}, {0, 0}};
    double t0 = now();
    if (last_end > 0.0)
        between += t0 - last_end;
    real(run, &r, nt, flags);
    double t1 = now();
    last_end = t1;
    regions++;
    inside += 2.0 * (t1 - t0);
    for (int t = 0; t < 2; t++)
        busy += r.end[t] - r.start[t];
    if (r.start[1] > 0.0)
        late += r.start[1] - t0;
}

__attribute__((destructor)) static void report(void)
{
    fprintf(stderr,
            "omp_idle: %ld regions; thread time inside %.3f s, busy %.3f, idle %.3f; "
            "second thread started late %.3f s in all; between regions %.3f s\n",
            regions, inside, busy, inside - busy, late, between);
}
