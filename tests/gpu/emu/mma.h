/* mma.h (emulator) - the part of CUDA's warp matrix functions (nvcuda::wmma)
 * the backend's kernels use: 16x16x16 fragments of bf16 (matrix_a,
 * matrix_b, row- or column-major) and fp32 accumulators, loaded, stored,
 * filled and multiplied, for the CPU emulator (cuda_runtime.h beside this
 * says how).
 *
 * Like the GPU's, every function is warp-wide, and each lane holds 8 of an
 * accumulator's 256 elements (here lane l holds elements 8l..8l+7 of the
 * row-major 16x16 tile; the GPU's mapping is its own, so kernels must not
 * read fragment elements by index, and these ones do not). Each lane's
 * matrix_a and matrix_b fragments hold the whole tile, loaded by the lane
 * itself, so that mma_sync computes the lane's 8 sums (in fp32, in order)
 * with no exchange between lanes: a warp operation here costs no switch
 * between the emulator's threads. The GPU's requirements are checked: a
 * pointer on 32 bytes, a stride that is a multiple of 16 bytes.
 */
#ifndef ALALLO_EMU_MMA_H
#define ALALLO_EMU_MMA_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulator has 16x16x16 fragments only");
    /* an accumulator: the lane's 8 elements; matrix_a, matrix_b: all 256 */
    static const int num_elements = std::is_same<Use, accumulator>::value ? 8 : 256;
    T x[num_elements];
};

namespace detail {

inline float as_float(float v) { return v; }
inline float as_float(__nv_bfloat16 v) { return __bfloat162float(v); }
inline void set(float &d, float v) { d = v; }
inline void set(__nv_bfloat16 &d, float v) { d = __float2bfloat16_rn(v); }

inline void check(const void *p, unsigned ld, size_t elem, const char *what)
{
    if ((uintptr_t)p % 32 != 0 || (ld * elem) % 16 != 0 || ld < 16) {
        fprintf(stderr, "cuda emulator: wmma %s at %p with stride %u: the GPU needs the "
                        "pointer on 32 bytes and a stride of 16 bytes' multiple, >= 16\n",
                what, p, ld);
        abort();
    }
}

/* Accumulator element e of this lane: its row and column in the tile. */
inline int row_of(int e) { return (int)(emu::lane_id() * 8 + e) / 16; }
inline int col_of(int e) { return (int)(emu::lane_id() * 8 + e) % 16; }

/* n elements from e0 of the row-major tile, from p (row- or column-major). */
template <typename T>
inline void load(T *x, int e0, int n, const T *p, unsigned ld, bool col_major)
{
    check(p, ld, sizeof(T), "load");
    for (int e = 0; e < n; e++) {
        int r = (e0 + e) / 16, c = (e0 + e) % 16;
        x[e] = col_major ? p[(size_t)c * ld + r] : p[(size_t)r * ld + c];
    }
}

} // namespace detail

template <typename Use, typename T, typename Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const T *p, unsigned ld)
{
    static_assert(sizeof(Use) != 0 && !std::is_same<Layout, void>::value,
                  "matrix_a and matrix_b fragments load with their layout");
    detail::load(f.x, 0, 256, p, ld, std::is_same<Layout, col_major>::value);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                             unsigned ld, layout_t layout)
{
    detail::load(f.x, (int)emu::lane_id() * 8, 8, p, ld, layout == mem_col_major);
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ld, layout_t layout)
{
    detail::check(p, ld, sizeof(float), "store");
    for (int e = 0; e < 8; e++) {
        int r = detail::row_of(e), c = detail::col_of(e);
        p[layout == mem_col_major ? (size_t)c * ld + r : (size_t)r * ld + c] = f.x[e];
    }
}

template <typename Use, typename T, typename Layout>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, float v)
{
    for (int e = 0; e < f.num_elements; e++)
        detail::set(f.x[e], v);
}

template <typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c)
{
    for (int e = 0; e < 8; e++) {
        int r = detail::row_of(e), col = detail::col_of(e);
        float acc = c.x[e];
        for (int k = 0; k < 16; k++)
            acc += detail::as_float(a.x[r * 16 + k]) * detail::as_float(b.x[k * 16 + col]);
        d.x[e] = acc;
    }
}

} // namespace wmma
} // namespace nvcuda

#endif
