/* The legacy ggml block types: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 (and Q8_1 decode).
 *
 * Every block holds 32 values; fields are little-endian, in this order:
 *
 *     Q4_0  18 B  d:f16 | qs[16]                     value = (q - 8) * d
 *     Q4_1  20 B  d:f16 | m:f16 | qs[16]             value = q * d + m
 *     Q5_0  22 B  d:f16 | qh:u32 | qs[16]            value = (q - 16) * d
 *     Q5_1  24 B  d:f16 | m:f16 | qh:u32 | qs[16]    value = q * d + m
 *     Q8_0  34 B  d:f16 | qs:i8[32]                  value = q * d
 *     Q8_1  36 B  d:f16 | s:f16 | qs:i8[32]          value = q * d
 *
 * qs[j] holds element j in its low nibble and element j + 16 in its high
 * nibble; bit j of qh is the fifth bit of element j.
 *
 * Encoding follows ggml-quants.c: without an importance matrix the
 * quantize_row_*_ref round trip of the block's extreme value; with one,
 * quantize_row_*_impl weights value j by qw[j] * sqrt(sigma2 + x[j]^2)
 * (sigma2 = mean square of the row, summed in order) and searches the scale
 * with make_qx_quants (Q4_0, Q5_0) or make_qkx3_quants (Q4_1, Q5_1).  Q8_0
 * ignores the importance matrix, as ggml does.
 *
 * Exactness: every float operation is the one ggml does, in its order.  The
 * per-block extremes are taken lane-wise (8 lanes) and then across lanes:
 * max/min of finite values do not depend on the order, and where C's
 * first-occurrence scan decides something (the sign of the value with the
 * largest |v|, the sign of a zero extreme) it is looked up afterwards.  The
 * rows are checked for NaN/inf on the way (the API's promise), so only finite
 * values reach the extremes.
 */
#include <float.h>
#include <stdbool.h>

#include "ws_module.h"
#include "ws_x86.h"
#include "ws_lanes.h"

#define QK 32

/* ------------------------------------------------------------------ decode */

WS_DISPATCH static void dequantize_q4_0(const uint8_t *restrict src, float *restrict dst,
                                        int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, src += 18, dst += QK) {
        const float d = ws_get_f16(src);
        const uint8_t *qs = src + 2;
        for (int j = 0; j < 16; ++j) {
            dst[j] = (float)((qs[j] & 0x0F) - 8) * d;
            dst[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

WS_DISPATCH static void dequantize_q4_1(const uint8_t *restrict src, float *restrict dst,
                                        int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, src += 20, dst += QK) {
        const float d = ws_get_f16(src), m = ws_get_f16(src + 2);
        const uint8_t *qs = src + 4;
        for (int j = 0; j < 16; ++j) {
            dst[j] = (float)(qs[j] & 0x0F) * d + m;
            dst[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    }
}

WS_DISPATCH static void dequantize_q5_0(const uint8_t *restrict src, float *restrict dst,
                                        int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, src += 22, dst += QK) {
        const float d = ws_get_f16(src);
        uint32_t qh;
        memcpy(&qh, src + 2, 4);
        const uint8_t *qs = src + 6;
        for (int j = 0; j < 16; ++j) {
            const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
            dst[j] = (float)(((qs[j] & 0x0F) | h0) - 16) * d;
            dst[j + 16] = (float)(((qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

WS_DISPATCH static void dequantize_q5_1(const uint8_t *restrict src, float *restrict dst,
                                        int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, src += 24, dst += QK) {
        const float d = ws_get_f16(src), m = ws_get_f16(src + 2);
        uint32_t qh;
        memcpy(&qh, src + 4, 4);
        const uint8_t *qs = src + 8;
        for (int j = 0; j < 16; ++j) {
            const int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
            dst[j] = (float)((qs[j] & 0x0F) | h0) * d + m;
            dst[j + 16] = (float)((qs[j] >> 4) | h1) * d + m;
        }
    }
}

static inline void dequantize_q8(const uint8_t *restrict src, float *restrict dst, int64_t nb,
                                 int size, int off) {
    for (int64_t i = 0; i < nb; ++i, src += size, dst += QK) {
        const float d = ws_get_f16(src);
        const int8_t *qs = (const int8_t *)(src + off);
        for (int j = 0; j < QK; ++j) dst[j] = (float)qs[j] * d;
    }
}

WS_DISPATCH static void dequantize_q8_0(const uint8_t *restrict src, float *restrict dst,
                                        int64_t nb) {
    dequantize_q8(src, dst, nb, 34, 2);
}

WS_DISPATCH static void dequantize_q8_1(const uint8_t *restrict src, float *restrict dst,
                                        int64_t nb) {
    dequantize_q8(src, dst, nb, 36, 4);
}

/* ------------------------------------------------------------------ block helpers
 *
 * A block is four 8-lane vectors (GCC vector extensions: SSE2 pairs on the
 * baseline, one AVX2 register in the AVX2 clone).  Only element-wise
 * operations, maxima/minima and ORs cross lanes -- never a float sum -- so each
 * value is computed exactly as ggml's scalar loop computes it. */

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint8_t v8u8 __attribute__((vector_size(8)));

WS_INLINE v8f load8(const float *p) {
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}
WS_INLINE v8f vsel(v8i m, v8f a, v8f b) { return (v8f)((m & (v8i)a) | (~m & (v8i)b)); }
WS_INLINE v8f vmax(v8f a, v8f b) { return vsel(a > b, a, b); }
WS_INLINE v8f vmin(v8f a, v8f b) { return vsel(a < b, a, b); }
WS_INLINE v8f vabs(v8f a) { return (v8f)((v8i)a & 0x7fffffff); }
/* Lane reductions by halving shuffles (3 steps, no lane extraction). */
static const v8i SWAP4 = {4, 5, 6, 7, 0, 1, 2, 3}, SWAP2 = {2, 3, 0, 1, 6, 7, 4, 5},
                 SWAP1 = {1, 0, 3, 2, 5, 4, 7, 6};
WS_INLINE int any8(v8i m) {
    m |= __builtin_shuffle(m, SWAP4);
    m |= __builtin_shuffle(m, SWAP2);
    m |= __builtin_shuffle(m, SWAP1);
    return m[0] != 0;
}
/* max / min over the lanes: order-independent for finite values */
WS_INLINE float hmax8(v8f m) {
    m = vmax(m, __builtin_shuffle(m, SWAP4));
    m = vmax(m, __builtin_shuffle(m, SWAP2));
    return vmax(m, __builtin_shuffle(m, SWAP1))[0];
}
WS_INLINE float hmin8(v8f m) {
    m = vmin(m, __builtin_shuffle(m, SWAP4));
    m = vmin(m, __builtin_shuffle(m, SWAP2));
    return vmin(m, __builtin_shuffle(m, SWAP1))[0];
}

typedef struct {
    v8f v[4];
} block32;

WS_INLINE block32 load_block(const float *x) {
    block32 b;
    for (int k = 0; k < 4; ++k) b.v[k] = load8(x + 8 * k);
    return b;
}

/* Lanes holding NaN/inf (exponent all ones): the row check, done on the block
 * already in registers instead of in a separate pass over the row. */
WS_INLINE v8i block_nonfinite(const block32 *b) {
    v8i m = {0};
    for (int k = 0; k < 4; ++k) m |= ((v8i)b->v[k] & 0x7f800000) == 0x7f800000;
    return m;
}

/* max |x| of a block (+0.0 if all zero): order-independent for finite values. */
WS_INLINE float block_absmax(const block32 *b) {
    return hmax8(vmax(vmax(vabs(b->v[0]), vabs(b->v[1])), vmax(vabs(b->v[2]), vabs(b->v[3]))));
}

/* quantize_row_q4_0_ref's `max`: the first value whose |v| is the largest
 * (`if (amax < fabsf(v))` keeps the first), +0.0 for an all-zero block. */
WS_INLINE float block_signed_absmax(const block32 *b, const float *x) {
    const float amax = block_absmax(b);
    if (amax == 0.0f) return 0.0f;
    v8i pos = {0}, neg = {0};
    for (int k = 0; k < 4; ++k) {
        pos |= b->v[k] == amax;
        neg |= b->v[k] == -amax;
    }
    const int p = any8(pos), n = any8(neg);
    if (!(p && n)) return p ? amax : -amax;
    for (int j = 0;; ++j) /* both signs: the first one wins */
        if (fabsf(x[j]) == amax) return x[j];
}

/* `if (v < min) min = v; if (v > max) max = v;` from FLT_MAX / -FLT_MAX.  Only
 * the sign of a zero extreme depends on the order: it is that of the first zero. */
WS_INLINE void block_min_max(const block32 *b, const float *x, float *mn_out, float *mx_out) {
    const v8f lo = vmin(vmin(b->v[0], b->v[1]), vmin(b->v[2], b->v[3]));
    const v8f hi = vmax(vmax(b->v[0], b->v[1]), vmax(b->v[2], b->v[3]));
    float mn = hmin8(lo), mx = hmax8(hi);
    if (mn == 0.0f || mx == 0.0f) {
        float z = 0.0f;
        for (int j = 0; j < QK; ++j)
            if (x[j] == 0.0f) {
                z = x[j];
                break;
            }
        if (mn == 0.0f) mn = z;
        if (mx == 0.0f) mx = z;
    }
    *mn_out = mn;
    *mx_out = mx;
}

/* qs: code j in the low nibble, code j + 16 in the high one.  Through an int
 * array: gcc narrows a plain loop with packs, a vector conversion lane by lane. */
WS_INLINE void put_nibbles(uint8_t *restrict qs, const v8i q[4]) {
    int32_t t[QK];
    memcpy(t, q, sizeof t);
    for (int j = 0; j < 16; ++j) qs[j] = (uint8_t)((t[j] & 15) | ((t[j + 16] & 15) << 4));
}

/* qh: bit j = the fifth bit of code j. */
WS_INLINE void put_high_bits(uint8_t *restrict p, const v8i q[4]) {
    int32_t t[QK];
    memcpy(t, q, sizeof t);
    uint32_t qh = 0;
    for (int j = 0; j < QK; ++j) qh |= (uint32_t)((t[j] >> 4) & 1) << j;
    memcpy(p, &qh, 4);
}

/* ------------------------------------------------------------------ reference encoders */

/* q = MIN(top, (int)(x * id + add)): the symmetric types' codes. */
WS_INLINE void codes_sym(const block32 *b, float id, float add, int top, v8i q[4]) {
    for (int k = 0; k < 4; ++k) {
        const v8i t = __builtin_convertvector(b->v[k] * id + add, v8i);
        const v8i m = t < top;
        q[k] = (t & m) | (top & ~m);
    }
}

/* q = MIN(top, (int)((x - min) * id + 0.5f)); top < 0: no clamp (Q5_1). */
WS_INLINE void codes_asym(const block32 *b, float mn, float id, int top, v8i q[4]) {
    for (int k = 0; k < 4; ++k) {
        const v8i t = __builtin_convertvector((b->v[k] - mn) * id + 0.5f, v8i);
        if (top < 0) {
            q[k] = t;
        } else {
            const v8i m = t < top;
            q[k] = (t & m) | (top & ~m);
        }
    }
}

static inline float inv_or_zero(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

/* Q4_0 / Q5_0: d = max / -(2**(bits-1)), codes MIN(top, (int)(x / d + add));
 * with_qh: the fifth bits go to qh before qs. */
WS_INLINE v8i ref_sym(const float *restrict x, uint8_t *restrict y, float div, float add, int top,
                      int with_qh) {
    const block32 b = load_block(x);
    const float d = block_signed_absmax(&b, x) / div;
    v8i q[4];
    codes_sym(&b, inv_or_zero(d), add, top, q);
    ws_put_f16(y, d);
    if (with_qh) put_high_bits(y + 2, q);
    put_nibbles(y + (with_qh ? 6 : 2), q);
    return block_nonfinite(&b);
}

/* Q4_1 / Q5_1: d = (max - min) / (2**bits - 1), m = min, codes from x - min
 * (top < 0: no clamp, as ggml's Q5_1); with_qh as above, after d and m. */
WS_INLINE v8i ref_asym(const float *restrict x, uint8_t *restrict y, float div, int top,
                       int with_qh) {
    const block32 b = load_block(x);
    float mn, mx;
    block_min_max(&b, x, &mn, &mx);
    const float d = (mx - mn) / div;
    v8i q[4];
    codes_asym(&b, mn, inv_or_zero(d), top, q);
    ws_put_f16(y, d);
    ws_put_f16(y + 2, mn);
    if (with_qh) put_high_bits(y + 4, q);
    put_nibbles(y + (with_qh ? 8 : 4), q);
    return block_nonfinite(&b);
}

WS_INLINE v8i ref_q4_0(const float *restrict x, uint8_t *restrict y) {
    return ref_sym(x, y, -8, 8.5f, 15, 0);
}
WS_INLINE v8i ref_q5_0(const float *restrict x, uint8_t *restrict y) {
    return ref_sym(x, y, -16, 16.5f, 31, 1);
}
WS_INLINE v8i ref_q4_1(const float *restrict x, uint8_t *restrict y) {
    return ref_asym(x, y, 15, 15, 0);
}
WS_INLINE v8i ref_q5_1(const float *restrict x, uint8_t *restrict y) {
    return ref_asym(x, y, 31, -1, 1);
}

WS_INLINE v8i ref_q8_0(const float *restrict x, uint8_t *restrict y) {
    const block32 b = load_block(x);
    const float d = block_absmax(&b) / 127;
    const float id = inv_or_zero(d);
    ws_put_f16(y, d);
    int8_t *qs = (int8_t *)(y + 2);
    for (int j = 0; j < QK; ++j) qs[j] = (int8_t)ws_round_away(x[j] * id);
    return block_nonfinite(&b);
}

/* ------------------------------------------------------------------ AVX-512 reference encoders
 *
 * The same block computations as ref_sym / ref_asym above, one block in two
 * 16-lane vectors, with the block's max and min taken in one shuffle tree
 * (max over -x for the min; order-independent for finite values, and the
 * sign of a zero extreme is looked up as above).  Element-wise steps are the
 * scalar ones lane by lane; d goes to fp16 with F16C (finite or inf here: the
 * rows are finite, checked on the way through the integer max of |x|'s bits).
 * Q4_0 1.8 -> 0.5 ms on a 4096 x 512 matrix (see docs/benchmarks.md). */
#if WS_HAVE_X86
/* kind: 0 Q4_0, 1 Q5_0 (symmetric), 2 Q4_1, 3 Q5_1 (min + scale) */
WS_AVX512 static inline __m512i avx512_block(const float *restrict x, uint8_t *restrict y,
                                             const int kind, __m512i bits_max) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff);
    bits_max = _mm512_max_epu32(bits_max, _mm512_and_si512(_mm512_castps_si512(v0), absmask));
    bits_max = _mm512_max_epu32(bits_max, _mm512_and_si512(_mm512_castps_si512(v1), absmask));
    const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u));
    const __m512 r = ws_hmax2_x86(_mm512_max_ps(v0, v1),
                                  _mm512_max_ps(_mm512_xor_ps(v0, sign), _mm512_xor_ps(v1, sign)));
    float mx = _mm512_cvtss_f32(r), mn = -_mm_cvtss_f32(_mm512_extractf32x4_ps(r, 2));
    __m512i q0, q1;
    int off;
    if (kind < 2) {
        /* quantize_row_q4_0_ref's `max`: the first value with the largest |v| */
        const float nmn = -mn; /* max |v| is mx or -mn: a blend, not a 50/50 branch */
        const __m128 lo = _mm512_castps512_ps128(r), hi = _mm512_extractf32x4_ps(r, 2);
        float max = _mm_cvtss_f32(_mm_mask_mov_ps(_mm_xor_ps(hi, _mm512_castps512_ps128(sign)),
                                                  _mm_cmp_ss_mask(lo, hi, _CMP_GT_OQ), lo));
        if (__builtin_expect(mx == nmn, 0)) {
            if (mx == 0.0f) {
                max = 0.0f;
            } else { /* both signs: the first one wins */
                int j = 0;
                while (fabsf(x[j]) != mx) ++j;
                max = x[j];
            }
        }
        const float d = max / (kind == 0 ? -8 : -16);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const __m512 vid = _mm512_set1_ps(id), add = _mm512_set1_ps(kind == 0 ? 8.5f : 16.5f);
        const __m512i top = _mm512_set1_epi32(kind == 0 ? 15 : 31);
        q0 = _mm512_min_epi32(_mm512_cvttps_epi32(_mm512_add_ps(_mm512_mul_ps(v0, vid), add)), top);
        q1 = _mm512_min_epi32(_mm512_cvttps_epi32(_mm512_add_ps(_mm512_mul_ps(v1, vid), add)), top);
        ws_put_f16_x86(y, d);
        off = 2;
    } else {
        if (mn == 0.0f || mx == 0.0f) { /* the sign of a zero extreme: the first zero's */
            float z = 0.0f;
            for (int j = 0; j < QK; ++j)
                if (x[j] == 0.0f) {
                    z = x[j];
                    break;
                }
            if (mn == 0.0f) mn = z;
            if (mx == 0.0f) mx = z;
        }
        const float d = (mx - mn) / (kind == 2 ? 15 : 31);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const __m512 vid = _mm512_set1_ps(id), vmn = _mm512_set1_ps(mn), half = _mm512_set1_ps(0.5f);
        q0 = _mm512_cvttps_epi32(_mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(v0, vmn), vid), half));
        q1 = _mm512_cvttps_epi32(_mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(v1, vmn), vid), half));
        if (kind == 2) {
            const __m512i top = _mm512_set1_epi32(15);
            q0 = _mm512_min_epi32(q0, top);
            q1 = _mm512_min_epi32(q1, top);
        }
        ws_put_f16_x86(y, d);
        ws_put_f16_x86(y + 2, mn);
        off = 4;
    }
    if (kind == 1 || kind == 3) { /* qh: bit j = the fifth bit of code j */
        const __m512i b4 = _mm512_set1_epi32(0x10);
        const uint32_t qh = (uint32_t)_mm512_test_epi32_mask(q0, b4) |
                            ((uint32_t)_mm512_test_epi32_mask(q1, b4) << 16);
        memcpy(y + off, &qh, 4);
        off += 4;
        q0 = _mm512_and_si512(q0, _mm512_set1_epi32(15));
    }
    /* qs[j] = code j | code j+16 << 4; vpmovdb keeps the low byte */
    _mm_storeu_si128((__m128i *)(y + off),
                     _mm512_cvtepi32_epi8(_mm512_or_si512(q0, _mm512_slli_epi32(q1, 4))));
    return bits_max;
}

WS_AVX512 static int avx512_rows(const float *restrict src, uint8_t *restrict dst, int64_t nrows,
                                 int64_t n, const int kind, const int size) {
    const int64_t nb = n / QK;
    for (int64_t r = 0; r < nrows; ++r, src += n, dst += nb * size) {
        __m512i bits_max = _mm512_setzero_si512();
        for (int64_t b = 0; b < nb; ++b)
            bits_max = avx512_block(src + b * QK, dst + b * size, kind, bits_max);
        if ((uint32_t)_mm512_reduce_max_epu32(bits_max) >= 0x7f800000u) return 1; /* NaN/inf */
    }
    return 0;
}
#endif

/* ------------------------------------------------------------------ imatrix searches
 *
 * make_qx_quants and make_qkx3_quants for LANES blocks at once, lane b = block b:
 * the searches the K-quants use (ws_lanes.h), on 32-value groups. */

#define LANES 16 /* blocks per search: two AVX2 vectors, one AVX-512 one */

typedef struct {
    float x[QK][LANES], w[QK][LANES]; /* x[i][b]: value i of block b; w: its weight */
} block_lanes;

/* sum_x2 / n_per_row, summed in index order as the C loop does. */
WS_INLINE float row_sigma2(const float *x, int64_t n) {
    float s = 0;
    for (int64_t j = 0; j < n; ++j) s += x[j] * x[j];
    return s / n;
}

/* Blocks b0 .. b0+k-1 of a row (k <= LANES) side by side, with quantize_row_*_impl's
 * weights qw[j] * sqrtf(sigma2 + x[j]*x[j]); lanes past k hold zeros (an
 * all-zero block, whose result is not stored). */
WS_INLINE void load_lanes(const float *x, const float *qw, float sigma2, int k, block_lanes *B) {
    for (int b = 0; b < LANES; ++b) {
        const float *xb = x + QK * b;
        for (int j = 0; j < QK; ++j) {
            B->x[j][b] = b < k ? xb[j] : 0.0f;
            B->w[j][b] = b < k ? qw[QK * b + j] * sqrtf(sigma2 + xb[j] * xb[j]) : 0.0f;
        }
    }
}

/* The levels of lane b as the packers' vectors. */
WS_INLINE void lane_levels(const int8_t *L, int b, v8i q[4]) {
    int32_t v[QK];
    for (int i = 0; i < QK; ++i) v[i] = L[i * LANES + b];
    memcpy(q, v, sizeof v);
}

WS_INLINE void lane_levels_u8(const uint8_t *L, int b, v8i q[4]) {
    int32_t v[QK];
    for (int i = 0; i < QK; ++i) v[i] = L[i * LANES + b];
    memcpy(q, v, sizeof v);
}

typedef void (*imatrix_fn)(const block_lanes *B, int k, uint8_t *y);

/* Q4_0 / Q5_0 with an imatrix: make_qx_quants(nmax = 8, 16); with_qh as in ref_sym. */
WS_INLINE void imatrix_sym(const block_lanes *B, int k, uint8_t *y, int nmax, int size, int with_qh) {
    int8_t L[QK * LANES];
    float d[LANES];
    v8i q[4];
    qx_lanes(QK, LANES, nmax, &B->x[0][0], &B->w[0][0], L, d);
    for (int b = 0; b < k; ++b, y += size) {
        ws_put_f16(y, d[b]);
        lane_levels(L, b, q);
        if (with_qh) put_high_bits(y + 2, q);
        put_nibbles(y + (with_qh ? 6 : 2), q);
    }
}

/* Q4_1 / Q5_1 with an imatrix: make_qkx3_quants(nmax = 15, 31), m = -the_min. */
WS_INLINE void imatrix_asym(const block_lanes *B, int k, uint8_t *y, int nmax, int size, int with_qh) {
    uint8_t L[QK * LANES];
    float d[LANES], the_min[LANES];
    v8i q[4];
    qkx_lanes(QK, LANES, nmax, &B->x[0][0], &B->w[0][0], -0.9f, 0.05f, 36, 0, 1, L, d, the_min);
    for (int b = 0; b < k; ++b, y += size) {
        ws_put_f16(y, d[b]);
        ws_put_f16(y + 2, -the_min[b]);
        lane_levels_u8(L, b, q);
        if (with_qh) put_high_bits(y + 4, q);
        put_nibbles(y + (with_qh ? 8 : 4), q);
    }
}

WS_INLINE void imatrix_q4_0(const block_lanes *B, int k, uint8_t *y) { imatrix_sym(B, k, y, 8, 18, 0); }
WS_INLINE void imatrix_q5_0(const block_lanes *B, int k, uint8_t *y) { imatrix_sym(B, k, y, 16, 22, 1); }
WS_INLINE void imatrix_q4_1(const block_lanes *B, int k, uint8_t *y) {
    imatrix_asym(B, k, y, 15, 20, 0);
}
WS_INLINE void imatrix_q5_1(const block_lanes *B, int k, uint8_t *y) {
    imatrix_asym(B, k, y, 31, 24, 1);
}

/* ------------------------------------------------------------------ row drivers */

/* A reference encoder returns the NaN/inf lanes of its block (nonzero: refuse the row). */
typedef v8i (*ref_fn)(const float *restrict x, uint8_t *restrict y);

WS_INLINE int quantize_rows(const float *restrict src, uint8_t *restrict dst, int64_t nrows,
                            int64_t n, const float *imatrix, int size, ref_fn ref,
                            imatrix_fn imp) {
    const int64_t nb = n / QK;
    for (int64_t r = 0; r < nrows; ++r, src += n, dst += nb * size) {
        if (imatrix == NULL || imp == NULL) {
            v8i bad = {0};
            for (int64_t b = 0; b < nb; ++b) bad |= ref(src + b * QK, dst + b * size);
            if (any8(bad)) return 1;
            continue;
        }
        if (ws_any_nonfinite(src, n)) return 1;
        const float sigma2 = row_sigma2(src, n);
        for (int64_t b0 = 0; b0 < nb; b0 += LANES) {
            const int k = nb - b0 < LANES ? (int)(nb - b0) : LANES;
            block_lanes B;
            load_lanes(src + b0 * QK, imatrix + b0 * QK, sigma2, k, &B);
            imp(&B, k, dst + b0 * size);
        }
    }
    return 0;
}

#define QUANTIZER(fname, size, ref, imp)                                                          \
    WS_DISPATCH static int fname##_c(const float *restrict src, uint8_t *restrict dst,            \
                                     int64_t nrows, int64_t n, const float *imatrix) {            \
        return quantize_rows(src, dst, nrows, n, imatrix, size, ref, imp);                        \
    }

QUANTIZER(quantize_q4_0, 18, ref_q4_0, imatrix_q4_0)
QUANTIZER(quantize_q4_1, 20, ref_q4_1, imatrix_q4_1)
QUANTIZER(quantize_q5_0, 22, ref_q5_0, imatrix_q5_0)
QUANTIZER(quantize_q5_1, 24, ref_q5_1, imatrix_q5_1)
QUANTIZER(quantize_q8_0, 34, ref_q8_0, NULL) /* ggml's quantize_q8_0 ignores the imatrix */

/* Without an imatrix on an AVX-512 CPU: the hand-vectorised encoders. */
#if WS_HAVE_X86
#define ENTRY(fname, size, kind)                                                                 \
    static int fname(const float *restrict src, uint8_t *restrict dst, int64_t nrows, int64_t n, \
                     const float *imatrix) {                                                     \
        if (imatrix == NULL && ws_have_avx512()) return avx512_rows(src, dst, nrows, n, kind, size); \
        return fname##_c(src, dst, nrows, n, imatrix);                                           \
    }
#else
#define ENTRY(fname, size, kind)                                                                 \
    static int fname(const float *restrict src, uint8_t *restrict dst, int64_t nrows, int64_t n, \
                     const float *imatrix) {                                                     \
        return fname##_c(src, dst, nrows, n, imatrix);                                           \
    }
#endif
ENTRY(quantize_q4_0, 18, 0)
ENTRY(quantize_q5_0, 22, 1)
ENTRY(quantize_q4_1, 20, 2)
ENTRY(quantize_q5_1, 24, 3)
#define quantize_q8_0 quantize_q8_0_c

static const ws_codec WS_CODECS[] = {
    {"Q4_0", QK, 18, dequantize_q4_0, quantize_q4_0},
    {"Q4_1", QK, 20, dequantize_q4_1, quantize_q4_1},
    {"Q5_0", QK, 22, dequantize_q5_0, quantize_q5_0},
    {"Q5_1", QK, 24, dequantize_q5_1, quantize_q5_1},
    {"Q8_0", QK, 34, dequantize_q8_0, quantize_q8_0},
    {"Q8_1", QK, 36, dequantize_q8_1, NULL},
    {NULL, 0, 0, NULL, NULL},
};

WS_CODEC_MODULE(legacy, "Kernels of the legacy ggml block types (Q4_0 .. Q8_1).")
