/* cuemu (tests/cuemu/include/cuemu.h): nvcuda::wmma on the host.
 * Each lane's fragment holds the whole tile (rows x cols, row-major inside the fragment); of an
 * accumulator, only the lane's own elements (e % 32 == lane) are kept up to date.
 *   load_matrix_sync   every lane loads the whole tile; checks 32-byte alignment and ldm
 *   mma_sync           D = A B + C, fp32 accumulation in k order (products of bf16 are exact),
 *                      computed for this lane's elements (e % 32 == lane) only, like the hardware
 *   store_matrix_sync  lane L writes the elements e (row-major index in the tile) with
 *                      e % 32 == L: all 32 lanes must store before anyone reads the tile back. */
#ifndef CUEMU_MMA_H
#define CUEMU_MMA_H
#include <stdint.h>
#include "cuda_bf16.h"
#include "cuemu.h"

namespace nvcuda {
namespace wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K> struct tile_dims;
template <int M, int N, int K> struct tile_dims<matrix_a, M, N, K> { static const int R = M, C = K; };
template <int M, int N, int K> struct tile_dims<matrix_b, M, N, K> { static const int R = K, C = N; };
template <int M, int N, int K> struct tile_dims<accumulator, M, N, K> { static const int R = M, C = N; };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
    static const int rows = tile_dims<Use, M, N, K>::R, cols = tile_dims<Use, M, N, K>::C;
    enum { num_elements = rows * cols };
    T x[num_elements];
};

static inline void check_ptr(const void *p, unsigned ldm, size_t esz, const char *what) {
    if ((uintptr_t)p % 32) cuemu::fatal("wmma::%s: pointer %p is not 32-byte aligned", what, p);
    if ((ldm * esz) % 16) cuemu::fatal("wmma::%s: ldm %u is not a multiple of %zu elements", what, ldm, 16 / esz);
}

template <typename Use, int M, int N, int K, typename T, typename L, typename U>
void fill_fragment(fragment<Use, M, N, K, T, L> &f, const U &v) {
    for (int i = 0; i < f.num_elements; i++) f.x[i] = (T)v;
}

template <typename Use, int M, int N, int K, typename T>
void load_matrix_sync(fragment<Use, M, N, K, T, row_major> &f, const T *p, unsigned ldm) {
    check_ptr(p, ldm, sizeof(T), "load_matrix_sync");
    for (int r = 0; r < f.rows; r++)
        for (int c = 0; c < f.cols; c++) f.x[r * f.cols + c] = p[(size_t)r * ldm + c];
}
template <typename Use, int M, int N, int K, typename T>
void load_matrix_sync(fragment<Use, M, N, K, T, col_major> &f, const T *p, unsigned ldm) {
    check_ptr(p, ldm, sizeof(T), "load_matrix_sync");
    for (int r = 0; r < f.rows; r++)
        for (int c = 0; c < f.cols; c++) f.x[r * f.cols + c] = p[(size_t)c * ldm + r];
}
template <int M, int N, int K, typename T>
void load_matrix_sync(fragment<accumulator, M, N, K, T> &f, const T *p, unsigned ldm, layout_t l) {
    check_ptr(p, ldm, sizeof(T), "load_matrix_sync");
    for (int r = 0; r < f.rows; r++)
        for (int c = 0; c < f.cols; c++)
            f.x[r * f.cols + c] = l == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}
template <int M, int N, int K, typename T>
void store_matrix_sync(T *p, const fragment<accumulator, M, N, K, T> &f, unsigned ldm, layout_t l) {
    check_ptr(p, ldm, sizeof(T), "store_matrix_sync");
    int lane = cuemu::g_cur->lane;
    for (int e = lane; e < f.num_elements; e += 32) {
        int r = e / f.cols, c = e % f.cols;
        if (l == mem_row_major) p[(size_t)r * ldm + c] = f.x[e];
        else p[(size_t)c * ldm + r] = f.x[e];
    }
}
template <int M, int N, int K, typename TA, typename LA, typename LB, typename TC>
void mma_sync(fragment<accumulator, M, N, K, TC> &d, const fragment<matrix_a, M, N, K, TA, LA> &a,
              const fragment<matrix_b, M, N, K, TA, LB> &b, const fragment<accumulator, M, N, K, TC> &c) {
    if (cuemu::g_cur->lane == 0) cuemu::count_mma();
    /* only this lane's elements: they are all that store_matrix_sync writes */
    for (int e = cuemu::g_cur->lane; e < M * N; e += 32) {
        int i = e / N, j = e % N;
        float acc = (float)c.x[e];
        for (int k = 0; k < K; k++) acc += (float)a.x[i * K + k] * (float)b.x[k * N + j];
        d.x[e] = (TC)acc;
    }
}
}  // namespace wmma
}  // namespace nvcuda
#endif
