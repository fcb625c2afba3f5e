/* A vectorized expf for the CPU backend's loops (SwiGLU, the attention and compressor
 * softmaxes, decode attention): 8 lanes at a time in GCC vector extensions (AVX2 code under
 * -march=x86-64-v3) instead of one libm call per element.
 *
 *   exp(x) = 2^n exp(r),  n = round(x log2 e),  r = x - n ln 2  (|r| <= ln2 / 2; ln 2 split into
 *            C1 + C2, C1 exact in 9 bits, so n C1 is exact)
 *   exp(r) ~= 1 + r + r^2 P(r), P the degree-5 polynomial of Cephes' expf
 *   2^n by writing n + 127 into the exponent field (n in -126..127 after the clamp).
 * x is clamped to [-87.336, 88.376] (2^n stays a normal float); below -87.336 (and for -inf, a
 * masked score) the result is exactly 0 (the lane computes exp(0), then is zeroed: no subnormal
 * intermediate), so a masked key adds exactly nothing to a softmax
 * (probe evaluation at a prompt's own length relies on that; issue 18). NaN stays NaN. Round to
 * nearest uses the 1.5 * 2^23 trick (no -ffast-math assumed).
 * Accuracy (tests/test_cpu_expf.c): within 2 ulp of exp. Deterministic: the scalar form runs
 * the same vector code in lane 0, so every element gets the same bits wherever it falls (a
 * full vector or the tail of an array). */
#ifndef PHASELAB_CPU_EXPF_H
#define PHASELAB_CPU_EXPF_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef float cpu_v8f __attribute__((vector_size(32)));
typedef int32_t cpu_v8i __attribute__((vector_size(32)));

static inline cpu_v8f cpu_v8_select(cpu_v8i mask, cpu_v8f a, cpu_v8f b) {   /* mask ? a : b */
    return (cpu_v8f)(((cpu_v8i)a & mask) | ((cpu_v8i)b & ~mask));
}

static inline cpu_v8f cpu_expf8(cpu_v8f x) {
    const cpu_v8f zero = {0}, lo = zero - 87.3365479f, hi = zero + 88.3762626f;   /* broadcasts */
    cpu_v8i below = x < lo;
    /* a lane below lo computes exp(0) and is zeroed at the end: computing exp(lo) there would make
     * y = e 2^-126 with e < 1, a subnormal product, and each subnormal result costs a microcode
     * assist (~150 cycles on Intel): masked attention scores (-inf) made the attention softmax
     * 3x slower. The lanes that are kept get the same bits either way. */
    cpu_v8f xc = cpu_v8_select(below, zero, x);
    xc = cpu_v8_select(xc > hi, hi, xc);
    const float shift = 12582912.0f;                  /* 1.5 * 2^23 */
    cpu_v8f n = (xc * 1.44269504088896341f + shift) - shift;
    cpu_v8f r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    cpu_v8f p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    cpu_v8f e = p * (r * r) + r + 1.0f;
    cpu_v8i bits = (__builtin_convertvector(n, cpu_v8i) + 127) << 23;
    cpu_v8f y = e * (cpu_v8f)bits;
    return (cpu_v8f)((cpu_v8i)y & ~below);
}

static inline float cpu_expf(float x) {
    cpu_v8f v = {x, x, x, x, x, x, x, x};
    return cpu_expf8(v)[0];
}

/* Full vectors take the constant-size copy (one unaligned vector load or store); only a tail
 * (n < 8) goes through the variable-size one, which compiles to a copy through the stack and
 * made SwiGLU ~4x slower when every vector took it (issue 18). */
static inline cpu_v8f cpu_v8_load(const float *p, size_t n) {    /* n < 8: the rest 0 */
    cpu_v8f v = {0};
    if (n >= 8) memcpy(&v, p, sizeof v);
    else memcpy(&v, p, sizeof(float) * n);
    return v;
}
static inline void cpu_v8_store(float *p, cpu_v8f v, size_t n) {
    if (n >= 8) memcpy(p, &v, sizeof v);
    else memcpy(p, &v, sizeof(float) * n);
}

/* y[i] = exp(x[i] - sub), i < n (y may be x) */
static inline void cpu_exp_shifted(float *y, const float *x, float sub, size_t n) {
    for (size_t i = 0; i < n; i += 8) cpu_v8_store(y + i, cpu_expf8(cpu_v8_load(x + i, n - i) - sub), n - i);
}
#endif
