/* cpu_path.c - the run-time choice of matrix-product code (cpu_path.h). */
#include "train/kernels/cpu_path.h"

#include <assert.h>
#include <cpuid.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "train/kernels/onednn.h"

static const char *const names[CPU_PATH_COUNT] = {"avx2", "avx512", "avx512bf16",
                                                    "onednn"};
static int current = -1;

const char *cpu_path_name(enum cpu_path p)
{
    assert(p >= 0 && p < CPU_PATH_COUNT);
    return names[p];
}

int cpu_path_parse(const char *name)
{
    for (int i = 0; name && i < CPU_PATH_COUNT; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

bool cpu_path_has_amx(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return false;
    return (d & (1u << 22)) && (d & (1u << 24)); /* AMX-BF16, AMX-TILE */
}

/* Linux (5.16 on) gives a process AMX's tile data only when it asks. */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* Asked once per process, whichever thread asks first (pthread_once). */
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static bool amx_granted;

static void ask_amx(void)
{
    amx_granted = cpu_path_has_amx() &&
                  syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

bool cpu_path_amx_granted(void)
{
    pthread_once(&amx_once, ask_amx);
    return amx_granted;
}

bool cpu_path_supported(enum cpu_path p)
{
    __builtin_cpu_init();
    switch (p) {
    case CPU_PATH_AVX2:
        return true;
    case CPU_PATH_AVX512:
        return __builtin_cpu_supports("avx512f") != 0;
    case CPU_PATH_AVX512BF16:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
    case CPU_PATH_ONEDNN: /* its NF4 products run alallo's avx512bf16 kernels */
        (void)cpu_path_amx_granted(); /* before oneDNN looks at what it may use */
        return cpu_path_supported(CPU_PATH_AVX512BF16) && onednn_available(NULL, 0);
    case CPU_PATH_COUNT:
        break;
    }
    return false;
}

enum cpu_path cpu_path_best(void)
{
    for (int p = CPU_PATH_COUNT - 1; p > 0; p--)
        if (cpu_path_supported((enum cpu_path)p))
            return (enum cpu_path)p;
    return CPU_PATH_AVX2;
}

int cpu_path_init(const char *want, char *err, int errlen)
{
    if (!want || !*want)
        want = getenv("ALALLO_CPU_PATH");
    if (!want || !*want) {
        current = cpu_path_best();
        return 0;
    }
    int p = cpu_path_parse(want);
    if (p < 0) {
        snprintf(err, (size_t)errlen,
                 "unknown CPU path \"%s\" (avx2, avx512, avx512bf16 or onednn)", want);
        return -1;
    }
    char why[256];
    if (p == CPU_PATH_ONEDNN && cpu_path_supported(CPU_PATH_AVX512BF16) &&
        !onednn_available(why, sizeof why)) {
        snprintf(err, (size_t)errlen, "the onednn path needs oneDNN: %s", why);
        return -1;
    }
    if (!cpu_path_supported((enum cpu_path)p)) {
        snprintf(err, (size_t)errlen, "this CPU cannot run the %s path (it has: %s)", want,
                 cpu_path_flags());
        return -1;
    }
    current = p;
    return 0;
}

enum cpu_path cpu_path_current(void)
{
    if (current < 0) /* never the bf16 paths, nor opening oneDNN, unasked */
        current = cpu_path_supported(CPU_PATH_AVX512) ? CPU_PATH_AVX512 : CPU_PATH_AVX2;
    return (enum cpu_path)current;
}

void cpu_path_set(enum cpu_path p)
{
    assert(cpu_path_supported(p));
    current = p;
}

const char *cpu_path_detail(void)
{
    return cpu_path_current() == CPU_PATH_ONEDNN ? onednn_describe() : "";
}

void cpu_path_resume_note(const char *was, const char *was_detail, int was_threads,
                          int now_threads, char *out, int outlen)
{
    const char *now = cpu_path_name(cpu_path_current());
    const char *now_detail = cpu_path_detail();
    size_t cap = (size_t)outlen;
    out[0] = '\0';
    if (!was)
        return;
    if (strcmp(was, now) != 0)
        snprintf(out, cap,
                 "the checkpoint was written on the %s path and this attempt runs on the %s "
                 "path: from here on its numbers differ in their last bits from a run that "
                 "stayed on %s",
                 was, now, was);
    else if (was_detail && strcmp(was_detail, now_detail) != 0)
        snprintf(out, cap,
                 "the checkpoint was written on the %s path with %s and this attempt runs it "
                 "with %s: from here on its numbers differ in their last bits",
                 now, was_detail, now_detail);
    else if (was_threads > 0 && was_threads != now_threads)
        snprintf(out, cap, "the checkpoint was written with %d threads and this attempt runs %d",
                 was_threads, now_threads);
}

/* The CPU's flags do not change while the process runs: the line is
 * written once (pthread_once), then only read, so two threads may call
 * cpu_path_flags() at once and keep the pointer. */
static pthread_once_t flags_once = PTHREAD_ONCE_INIT;
static char flags_line[96];

static void write_flags(void)
{
    char *line = flags_line;
    __builtin_cpu_init();
    snprintf(line, sizeof flags_line, "%s%s%s%s%s", __builtin_cpu_supports("avx2") ? "avx2 " : "",
             __builtin_cpu_supports("fma") ? "fma " : "",
             __builtin_cpu_supports("avx512f") ? "avx512f " : "",
             __builtin_cpu_supports("avx512bf16") ? "avx512bf16 " : "",
             cpu_path_has_amx() ? "amx-bf16 " : "");
    size_t n = strlen(line);
    if (n)
        line[n - 1] = '\0';
}

const char *cpu_path_flags(void)
{
    pthread_once(&flags_once, write_flags);
    return flags_line;
}
