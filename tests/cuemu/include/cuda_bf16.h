/* cuemu (tests/cuemu/include/cuemu.h): bf16 as in cuda_bf16.h. Conversions from fp32 round to
 * nearest even (NaN stays NaN); to fp32 they are exact. */
#ifndef CUEMU_CUDA_BF16_H
#define CUEMU_CUDA_BF16_H
#include <stdint.h>
#include <string.h>
#include "cuemu.h"

static inline unsigned short cuemu_f2bf_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
static inline float cuemu_bf2f(unsigned short b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(cuemu_f2bf_bits(f)) {}
    operator float() const { return cuemu_bf2f(__x); }
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
static_assert(sizeof(__nv_bfloat16) == 2 && sizeof(__nv_bfloat162) == 4, "bf16 layout");

static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 b) { return cuemu_bf2f(b.__x); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162{__nv_bfloat16(a), __nv_bfloat16(b)}; }
static inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __floats2bfloat162_rn(f.x, f.y); }
static inline float2 __bfloat1622float2(__nv_bfloat162 v) { return float2{cuemu_bf2f(v.x.__x), cuemu_bf2f(v.y.__x)}; }
static inline float __low2float(__nv_bfloat162 v) { return cuemu_bf2f(v.x.__x); }
static inline float __high2float(__nv_bfloat162 v) { return cuemu_bf2f(v.y.__x); }
#endif
