/* Portable IEEE binary16 and bfloat16 <-> float conversion (exact; round to
 * nearest even on the way down). Internal, header-only, used by the CPU
 * backend, the core and the CLI. Vectorised kernels use F16C / AVX-512
 * instructions where available and fall back to these. */
#ifndef TODRE_SRC_HALF_H
#define TODRE_SRC_HALF_H

#include <stdint.h>
#include <string.h>

static inline float todre_bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t todre_f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float todre_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        if (man == 0) return todre_bits_to_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31) return todre_bits_to_f32(sign | 0x7f800000u | (man << 13));
    return todre_bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t todre_f32_to_f16(float f)
{
    uint32_t x = todre_f32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* Inf or NaN */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: subnormal or zero */
        float v = todre_bits_to_f32(ax) * 16777216.0f; /* * 2^24, exact */
        /* round half to even via the FPU's default rounding */
        uint32_t m = (uint32_t)(v + 0.0f);
        float r = v - (float)m;
        if (r > 0.5f || (r == 0.5f && (m & 1u))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t e = ((ax >> 23) - 112u) << 10;
    uint32_t m = (ax >> 13) & 0x3ffu;
    uint32_t rest = ax & 0x1fffu;
    uint32_t h = e | m;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

static inline float todre_bf16_to_f32(uint16_t b) { return todre_bits_to_f32((uint32_t)b << 16); }

static inline uint16_t todre_f32_to_bf16(float f)
{
    uint32_t x = todre_f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

#endif /* TODRE_SRC_HALF_H */
