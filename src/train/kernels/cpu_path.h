/* cpu_path.h - which matrix-product code the trainer runs on this CPU,
 * chosen at run time from the CPU's own flags (never the build machine's).
 *
 * Paths, each a superset of the one before:
 *   avx2        fp32 products through OpenBLAS (sgemm, its AVX2 kernels or
 *               whatever core type OpenBLAS picked; one thread per block)
 *   avx512      fp32 products through alallo's AVX-512 kernels
 *               (train/gemm_kern.c); frozen bf16/NF4 weights are widened
 *               to fp32 as on avx2
 *   avx512bf16  as avx512 for trained (fp32) weights; products with a
 *               frozen bf16 or NF4 weight take bf16 inputs (the activation
 *               rounded to nearest-even bf16) with fp32 accumulation
 *               (vdpbf16ps)
 *   onednn      as avx512bf16, but the bf16 products with a frozen bf16
 *               or a trained weight go through oneDNN's matmul
 *               (train/onednn.h), AMX tiles where the CPU has them; a
 *               weight's gradient too where oneDNN runs AMX (without
 *               AMX alallo's kernels are faster there). NF4 weights keep
 *               alallo's kernels. Offered where avx512bf16 is and oneDNN
 *               opens (docs/trainer.md, "CPU paths").
 *
 * The path is process-wide state, set once before any product
 * (cpu_path_init) and read by gemm.c and linear.c. The same machine,
 * thread count and path give the same bits (train/gemm.h).
 */
#ifndef ALALLO_TRAIN_CPU_PATH_H
#define ALALLO_TRAIN_CPU_PATH_H

#include <stdbool.h>

enum cpu_path {
    CPU_PATH_AVX2 = 0,
    CPU_PATH_AVX512,
    CPU_PATH_AVX512BF16,
    CPU_PATH_ONEDNN,
    CPU_PATH_COUNT
};

/* The name of a path ("avx2", "avx512", "avx512bf16", "onednn"). */
const char *cpu_path_name(enum cpu_path p);

/* Parses a path name; -1 when it names none. */
int cpu_path_parse(const char *name);

/* True when this CPU (and its OS) can run path p. avx2 is always true:
 * OpenBLAS runs on any x86-64, with the kernels it picks itself. onednn
 * also needs the library (libdnnl2) to open. */
bool cpu_path_supported(enum cpu_path p);

/* The best path this CPU runs: the last of avx2, avx512, avx512bf16,
 * onednn it has (measured: docs/trainer.md, "CPU paths"). */
enum cpu_path cpu_path_best(void);

/* True when the CPU's flags say AMX tiles with bf16. Whether oneDNN gets
 * to use them (the kernel must grant a process the tile state; oneDNN
 * asks) shows in cpu_path_detail's isa. */
bool cpu_path_has_amx(void);

/* True when the CPU has AMX and the kernel granted this process the tile
 * state (asked once, through arch_prctl, before oneDNN is opened): where
 * oneDNN can run its AMX kernels. */
bool cpu_path_amx_granted(void);

/* Sets the process's path: `want` (a name, or NULL/"" for the environment's
 * ALALLO_CPU_PATH, else the best). Returns 0, or -1 with a sentence in
 * err when the named path is unknown or this CPU lacks it. */
int cpu_path_init(const char *want, char *err, int errlen);

/* The path in use. Until cpu_path_init is called it is the best fp32
 * path (avx512 or avx2): generation and export keep fp32 products, and
 * only a process that chose its path (train, bench train) takes bf16. */
enum cpu_path cpu_path_current(void);

/* Forces the path (tests and benchmarks). The CPU must support it. */
void cpu_path_set(enum cpu_path p);

/* What runs the products beyond the path's name: on onednn, the
 * library's version and the instruction set it uses ("oneDNN 2.6.3, isa
 * avx512_core_amx"); "" on the other paths. */
const char *cpu_path_detail(void);

/* The log line for a resume from a checkpoint written on path `was`
 * (with cpu_path_detail `was_detail`, NULL when none was kept) and
 * was_threads threads, by this process on its path with now_threads: a
 * sentence when the path, what runs it (oneDNN's isa) or the thread count
 * differ, else "". was NULL (an old checkpoint): "". */
void cpu_path_resume_note(const char *was, const char *was_detail, int was_threads,
                          int now_threads, char *out, int outlen);

/* CPU flags that matter to the paths, as one line ("avx2 fma avx512f
 * avx512bf16 amx-bf16"), for logs and benchmarks. */
const char *cpu_path_flags(void);

#endif
