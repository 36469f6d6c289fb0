/* Shared scalar helpers of the compiled kernel core (weightsmith._native.*).
 *
 * Everything here reproduces ggml's plain C reference bit for bit:
 *  - fp16 <-> fp32: IEEE round to nearest even, overflow to inf; every NaN becomes
 *    sign|0x7E00 on the way to fp16 (ggml drops the payload), and a signalling NaN
 *    comes back quiet on the way to fp32 (ggml multiplies by 2**-112).
 *  - fp32 -> bf16: round to nearest even on the bit pattern; a NaN keeps its top
 *    16 bits with the quiet bit (0x40) forced on.
 *  - ws_nearest_int: round half to even, as ggml's nearest_int (the 12582912.f trick).
 * Build flags (setup.py) forbid FMA contraction and value-changing math.
 */
#ifndef WS_COMMON_H
#define WS_COMMON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t ws_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float ws_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float ws_f16_to_f32(uint16_t h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = 0xE0u << 23;
    const float exp_scale = ws_bits_f32(0x7800000u); /* 2**-112 */
    const float normalized = ws_bits_f32((two_w >> 4) + exp_offset) * exp_scale;
    const uint32_t magic_mask = 126u << 23;
    const float magic_bias = 0.5f;
    const float denormalized = ws_bits_f32((two_w >> 17) | magic_mask) - magic_bias;
    const uint32_t denormalized_cutoff = 1u << 27;
    const uint32_t result = sign | (two_w < denormalized_cutoff ? ws_f32_bits(denormalized)
                                                                : ws_f32_bits(normalized));
    return ws_bits_f32(result);
}

static inline uint16_t ws_f32_to_f16(float f) {
    const float scale_to_inf = ws_bits_f32(0x77800000u);  /* 2**112 */
    const float scale_to_zero = ws_bits_f32(0x08800000u); /* 2**-110 */
    float base = (fabsf(f) * scale_to_inf) * scale_to_zero;
    const uint32_t w = ws_f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = ws_bits_f32((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = ws_f32_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

static inline uint16_t ws_f32_to_bf16(float f) {
    uint32_t u = ws_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64u);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

static inline float ws_bf16_to_f32(uint16_t h) { return ws_bits_f32((uint32_t)h << 16); }

static inline int ws_nearest_int(float fval) {
    float val = fval + 12582912.f;
    int i; memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

/* ggml's make_qp_quants(n, nmax, x, L, qw): non-negative x ~ scale * L with
 * integer L <= nmax (stored in uint8 L[n]), weights qw; returns the scale.
 * ggml's float operations in ggml's order (a 9-point scale search, then up
 * to 5 rounds of single-level moves).  Below 1e-15 (ggml's GROUP_MAX_EPS)
 * everything is zero. */
static inline float ws_make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *qw) {
    float max = 0;
    for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
    if (max < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = (float)nmax / max;
    for (int i = 0; i < n; ++i) L[i] = (uint8_t)ws_nearest_int(iscale * x[i]);
    const float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; ++i) {
        const float diff = x[i] - scale * (float)L[i];
        best_mse += qw[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * (float)is + (float)nmax) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            int l = ws_nearest_int(iscale_is * x[i]);
            l = l < nmax ? l : nmax;
            const float diff = x[i] - scale_is * (float)l;
            mse += qw[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = ws_nearest_int(iscale * x[i]);
        l = l < nmax ? l : nmax;
        L[i] = (uint8_t)l;
        sumlx += qw[i] * x[i] * (float)l;
        suml2 += qw[i] * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = qw[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            float sl2 = suml2 - w * (float)L[i] * (float)L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = ws_nearest_int(x[i] * sl2 / slx);
                new_l = new_l < nmax ? new_l : nmax;
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* C's roundf / lroundf to an int: round half away from zero.
 * x + copysign(0.49999997f, x) then truncation is exact for every float32 in
 * round-to-nearest-even: a tie n + 0.5 lands on n + 0.99999997, which rounds
 * up to n + 1, while 0.49999997 itself stays below 1 (floor(x + 0.5) gets that
 * one wrong).  Branch-free, so loops over it vectorise; |x| < 2**31. */
static inline int ws_round_away(float x) { return (int)(x + copysignf(0.49999997f, x)); }

/* NaN or +-inf, tested on the bits (vectorises; no floating-point compare). */
static inline int ws_nonfinite(float x) {
    return (ws_f32_bits(x) & 0x7f800000u) == 0x7f800000u;
}

/* Any NaN/inf among n values (bit test: vectorises). */
static inline int ws_any_nonfinite(const float *x, int64_t n) {
    int bad = 0;
    for (int64_t j = 0; j < n; ++j) bad |= ws_nonfinite(x[j]);
    return bad;
}

/* max |x| of n finite values (n a multiple of 8; +0.0 if all zero).  Taken in
 * 8 lanes, then across them: for finite values the max does not depend on the
 * order, so this equals C's sequential `if (amax < fabsf(v)) amax = fabsf(v)`
 * (or MAX(amax, fabsf(v))), and it vectorises. */
static inline float ws_absmax(const float *x, int n) {
    float m[8] = {0};
    for (int j = 0; j < n; j += 8)
        for (int k = 0; k < 8; ++k) {
            const float a = fabsf(x[j + k]);
            m[k] = a > m[k] ? a : m[k];
        }
    float amax = m[0];
    for (int k = 1; k < 8; ++k) amax = m[k] > amax ? m[k] : amax;
    return amax;
}

/* Little-endian fp16 fields at any address. */
static inline void ws_put_f16(uint8_t *p, float v) {
    const uint16_t h = ws_f32_to_f16(v);
    memcpy(p, &h, 2);
}

static inline float ws_get_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return ws_f16_to_f32(h);
}

/* Runtime CPU dispatch for a kernel's outer function: gcc compiles it (and
 * what it inlines) twice, for AVX2 and for the baseline, and picks one at load
 * time.  Results are identical: -ffp-contract=off keeps FMA out of both, and
 * the vector instructions round exactly as the scalar ones. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define WS_DISPATCH __attribute__((target_clones("avx2", "default")))
#else
#define WS_DISPATCH
#endif

/* For the per-block functions a kernel calls through a pointer argument: forced
 * inline, so the call is direct and the block code is compiled into each
 * WS_DISPATCH clone (a plain static function would stay baseline-only). */
#if defined(__GNUC__)
#define WS_INLINE static inline __attribute__((always_inline))
#else
#define WS_INLINE static inline
#endif

#endif
