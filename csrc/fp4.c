/* The FP4 (E2M1) ggml types: MXFP4 and NVFP4.
 *
 * Both store 4-bit E2M1 codes looked up in kvalues (twice the E2M1 value:
 * 0, 1, 2, 3, 4, 6, 8, 12 and their negatives; code 8 is -0 -> 0) and a
 * per-group scale:
 *
 *     MXFP4   32 values, 17 B:  e:u8 (E8M0) | qs[16]
 *             value = kvalues[q] * 2**(e - 128)      (ggml's E8M0 "half")
 *     NVFP4   64 values, 36 B:  d:u8[4] (UE4M3, one per 16 values) | qs[32]
 *             value = kvalues[q] * ue4m3(d[s]) / 2
 *
 * qs[j] holds element j of the group in its low nibble and element j + group/2
 * in its high nibble (per 16-value sub-block for NVFP4, whose sub-block s owns
 * qs[8s:8s+8]).
 *
 * Encoding follows quantize_row_mxfp4_ref / quantize_row_nvfp4_ref: the scale
 * from the group's max |x| (MXFP4: floorf(log2f(amax)) - 2 + 127, with the same
 * libm log2f as ggml; NVFP4: amax / 6 rounded to UE4M3 by ggml's round-half-up),
 * then each value takes the first code i minimising fabsf(kvalues[i] * d - x),
 * the 16-way scan done for all values of a group at once.  ggml ignores the
 * importance matrix for both types, and so do these kernels.
 */
static void fill_tables(void);
#define WS_MODULE_INIT() fill_tables()
#include "ws_module.h"
#include "ws_x86.h"

static const int8_t KVALUES[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static float UE4M3[256]; /* ggml_ue4m3_to_fp32 of every byte, filled at import */

WS_INLINE float ue4m3_to_fp32(uint8_t x) {
    if (x == 0 || x == 0x7F) return 0.0f;
    const int exp = (x >> 3) & 0xF, man = x & 0x7;
    const float raw = exp == 0 ? ldexpf((float)man, -9) : ldexpf(1.0f + (float)man / 8.0f, exp - 7);
    return raw * 0.5f;
}

static void fill_tables(void) {
    for (int i = 0; i < 256; ++i) UE4M3[i] = ue4m3_to_fp32((uint8_t)i);
}

WS_INLINE uint8_t fp32_to_ue4m3(float x) {
    if (!(x > 0.0f)) return 0;
    if (x > 448.0f) x = 448.0f;
    const uint32_t bits = ws_f32_bits(x);
    const int fp32_exp = (int)((bits >> 23) & 0xFF) - 127;
    const int fp32_man = (int)((bits >> 20) & 0x7);
    int exp = fp32_exp + 7;
    if (exp <= 0) { /* subnormal: man * 2**-9, man = round(x * 2**9) */
        int man = (int)(x * 512.0f + 0.5f);
        if (man > 7) man = 7;
        return man < 1 ? 0 : (uint8_t)man;
    }
    if (exp >= 15) return 0x7E;
    int man = fp32_man + (int)((bits >> 19) & 1);
    if (man > 7) {
        man = 0;
        if (++exp >= 15) return 0x7E;
    }
    return (uint8_t)((exp << 3) | man);
}

static inline float e8m0_half(uint8_t e) {
    return ws_bits_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

/* best_index_mxfp4 for n (<= 64) values, value j with scale d[j] (one loop over
 * a whole block even when its sub-blocks have their own scales), as ggml's 16-way scan
 * (first strict improvement) computes it, in 7 comparisons instead of 15.
 * kvalues[8:16] are the negatives of kvalues[0:8] and fl(|-v*d - x|) =
 * fl(|v*d - |x||) (rounding is symmetric), so: for x >= 0 a negative code is
 * never strictly better than code 0 (its error is v*d + x >= x) and the answer
 * is the magnitude scan m over 0, 1, 2, 3, 4, 6, 8, 12; for x < 0 the positive
 * codes never beat code 0 the same way, and the negative ones scan the same
 * magnitudes: m + 8, or 0 when m is 0.  The selects are integer masks (int32
 * lanes like the floats'), so gcc vectorises across the group's values. */
WS_INLINE void best_codes(const float *restrict x, const float *restrict d, int n,
                          uint8_t *restrict out) {
    static const float MAGS[8] = {0, 1, 2, 3, 4, 6, 8, 12};
    float a[64], best_err[64];
    int32_t best[64];
    for (int j = 0; j < n; ++j) {
        a[j] = fabsf(x[j]);
        best_err[j] = fabsf(MAGS[0] * d[j] - x[j]);
        best[j] = 0;
    }
    for (int32_t m = 1; m < 8; ++m) {
        for (int j = 0; j < n; ++j) {
            const float err = fabsf(MAGS[m] * d[j] - a[j]);
            const int32_t better = -(int32_t)(err < best_err[j]);
            best_err[j] = err < best_err[j] ? err : best_err[j];
            best[j] = (best[j] & ~better) | (m & better);
        }
    }
    for (int j = 0; j < n; ++j) {
        const int32_t neg = -(int32_t)(x[j] < 0.0f && best[j] > 0);
        out[j] = (uint8_t)(best[j] + (8 & neg));
    }
}

WS_INLINE void pack_codes(const uint8_t *restrict q, int n, uint8_t *restrict qs) {
    for (int j = 0; j < n / 2; ++j) qs[j] = (uint8_t)(q[j] | (q[j + n / 2] << 4));
}

WS_INLINE void ref_mxfp4(const float *restrict x, uint8_t *restrict y) {
    const float amax = ws_absmax(x, 32);
    /* the float converts through int; its low byte lands in the uint8 */
    const uint8_t e = amax > 0.0f ? (uint8_t)(int)(floorf(log2f(amax)) - 2 + 127) : 0;
    float d[32];
    for (int j = 0; j < 32; ++j) d[j] = e8m0_half(e);
    uint8_t q[32];
    best_codes(x, d, 32, q);
    y[0] = e;
    pack_codes(q, 32, y + 1);
}

WS_INLINE void ref_nvfp4(const float *restrict x, uint8_t *restrict y) {
    float d[64];
    for (int s = 0; s < 4; ++s) {
        y[s] = fp32_to_ue4m3(ws_absmax(x + 16 * s, 16) / 6.0f);
        for (int j = 0; j < 16; ++j) d[16 * s + j] = UE4M3[y[s]];
    }
    uint8_t q[64];
    best_codes(x, d, 64, q); /* one pass over the block: per-value scales */
    for (int s = 0; s < 4; ++s) pack_codes(q + 16 * s, 16, y + 4 + 8 * s);
}

/* ------------------------------------------------------------------ AVX-512 MXFP4 encoder
 *
 * The same codes as ref_mxfp4, by thresholds instead of the 16-way scan.
 * For e >= 2, d = 2**(e - 128) is a normal power of two, so with t = |x| / d
 * (exact: a power-of-two scaling that cannot overflow, t < 16) every error
 * fl(v*d - |x|) is d * fl(v - t) exactly (scaling by a power of two commutes
 * with rounding; a difference below 2**-126 is exact on both sides).  The
 * differences fl(v_m - t) increase strictly with m (the magnitudes are >= 1
 * apart, t < 16), so the scan's first minimum is between the last v_m <= t
 * and the next one; near their midpoint both differences are exact (Sterbenz:
 * every midpoint pair is within a factor 2), so the later code wins exactly
 * when t > the midpoint.  Hence magnitude code = #{midpoints < t} over
 * 0.5 1.5 2.5 3.5 5 7 10; the sign rule is best_codes'.
 * floorf(log2f(amax)) is the exponent of amax when the mantissa is not within
 * 2**-14 of the next power of two (log2f is faithful: its result cannot reach
 * k + 1 there, nor drop below k = log2f(2**k)); otherwise, and for subnormal
 * amax or e < 2, the block takes ref_mxfp4. */
#if WS_HAVE_X86
WS_AVX512 static inline __m512i mxfp4_codes_x86(__m512 v, __m512 inv_d) {
    static const float MIDS[7] = {0.5f, 1.5f, 2.5f, 3.5f, 5.0f, 7.0f, 10.0f};
    const __m512 t = _mm512_mul_ps(_mm512_abs_ps(v), inv_d);
    __m512i m = _mm512_setzero_si512();
    const __m512i one = _mm512_set1_epi32(1);
    for (int i = 0; i < 7; ++i)
        m = _mm512_mask_add_epi32(m, _mm512_cmp_ps_mask(t, _mm512_set1_ps(MIDS[i]), _CMP_GT_OQ),
                                  m, one);
    const __mmask16 neg = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ) &
                          _mm512_test_epi32_mask(m, m);
    return _mm512_mask_add_epi32(m, neg, m, _mm512_set1_epi32(8));
}

WS_AVX512 static int quantize_mxfp4_x86(const float *restrict src, uint8_t *restrict y,
                                        int64_t nrows, int64_t n) {
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff);
    for (int64_t r = 0; r < nrows; ++r) {
        __m512i bits_max = _mm512_setzero_si512();
        for (int64_t b = 0; b < n / 32; ++b, src += 32, y += 17) {
            const __m512 v0 = _mm512_loadu_ps(src), v1 = _mm512_loadu_ps(src + 16);
            const __m512i a = _mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(v0), absmask),
                                               _mm512_and_si512(_mm512_castps_si512(v1), absmask));
            bits_max = _mm512_max_epu32(bits_max, a);
            /* max |x| of finite values = the largest bit pattern of |x| */
            const uint32_t ab = (uint32_t)_mm512_reduce_max_epu32(a);
            const uint32_t expo = ab >> 23, mant = ab & 0x7fffffu;
            if (expo < 4 || expo >= 255 || mant >= 0x7ffc00u) {
                /* zero, subnormal, NaN/inf (refused below), near 2**(k+1), or e < 2 */
                ref_mxfp4(src, y);
                continue;
            }
            const uint32_t e = expo - 2; /* (uint8)(k - 2 + 127), k = expo - 127; < 253 */
            y[0] = (uint8_t)e;
            const __m512 inv_d = _mm512_castsi512_ps(_mm512_set1_epi32((int)((255 - e) << 23)));
            const __m512i q = _mm512_or_si512(mxfp4_codes_x86(v0, inv_d),
                                              _mm512_slli_epi32(mxfp4_codes_x86(v1, inv_d), 4));
            _mm_storeu_si128((__m128i *)(y + 1), _mm512_cvtepi32_epi8(q));
        }
        if ((uint32_t)_mm512_reduce_max_epu32(bits_max) >= 0x7f800000u) return 1;
    }
    return 0;
}
#endif

WS_DISPATCH static void dequantize_mxfp4(const uint8_t *restrict src, float *restrict y,
                                         int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, src += 17, y += 32) {
        const float d = e8m0_half(src[0]);
        for (int j = 0; j < 16; ++j) {
            y[j] = (float)KVALUES[src[1 + j] & 0x0F] * d;
            y[j + 16] = (float)KVALUES[src[1 + j] >> 4] * d;
        }
    }
}

WS_DISPATCH static void dequantize_nvfp4(const uint8_t *restrict src, float *restrict y,
                                         int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, src += 36) {
        for (int s = 0; s < 4; ++s, y += 16) {
            const float d = UE4M3[src[s]];
            const uint8_t *qs = src + 4 + 8 * s;
            for (int j = 0; j < 8; ++j) {
                y[j] = (float)KVALUES[qs[j] & 0x0F] * d;
                y[j + 8] = (float)KVALUES[qs[j] >> 4] * d;
            }
        }
    }
}

WS_DISPATCH static int quantize_mxfp4_c(const float *restrict src, uint8_t *restrict dst,
                                        int64_t nrows, int64_t n) {
    return ws_quantize_blocks(src, dst, nrows, n, 32, 17, ref_mxfp4);
}

static int quantize_mxfp4(const float *restrict src, uint8_t *restrict dst, int64_t nrows,
                          int64_t n, const float *imatrix) {
    (void)imatrix; /* ggml ignores it */
#if WS_HAVE_X86
    if (ws_have_avx512()) return quantize_mxfp4_x86(src, dst, nrows, n);
#endif
    return quantize_mxfp4_c(src, dst, nrows, n);
}

WS_DISPATCH static int quantize_nvfp4(const float *restrict src, uint8_t *restrict dst,
                                      int64_t nrows, int64_t n, const float *imatrix) {
    (void)imatrix; /* ggml ignores it */
    return ws_quantize_blocks(src, dst, nrows, n, 64, 36, ref_nvfp4);
}

static const ws_codec WS_CODECS[] = {
    {"MXFP4", 32, 17, dequantize_mxfp4, quantize_mxfp4},
    {"NVFP4", 64, 36, dequantize_nvfp4, quantize_nvfp4},
    {NULL, 0, 0, NULL, NULL},
};

WS_CODEC_MODULE(fp4, "Kernels of the FP4 ggml types (MXFP4, NVFP4).")
