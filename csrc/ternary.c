/* Ternary and binary ggml types: TQ1_0, TQ2_0, Q1_0, Q2_0.
 *
 * All four store one fp16 scale d per block and small integer codes q with
 * value = (q - 1) * d (Q1_0: +d / -d).  Byte layouts (little-endian):
 *
 *     TQ1_0  256 values, 54 B:  qs[48] | qh[4] | d:f16
 *         qs[0:32]   byte m: trits of elements m + 32*n, n = 0..4
 *         qs[32:48]  byte m: trits of elements 160 + m + 16*n, n = 0..4
 *         qh[0:4]    byte j: trits of elements 240 + j + 4*n, n = 0..3 (then *3)
 *         a byte holds ceil(t * 256 / 243), t the base-3 number whose most
 *         significant trit is the first element; trit k comes back as
 *         ((uint8)(byte * 3**k) * 3) >> 8
 *     TQ2_0  256 values, 66 B:  qs[64] | d:f16
 *         byte 32*c + m, bits 2n..2n+1: element 128*c + 32*n + m
 *     Q1_0   128 values, 18 B:  d:f16 | qs[16]   bit j: x_j >= 0
 *     Q2_0    64 values, 18 B:  d:f16 | qs[16]   bits 2(j%4) of byte j/4: q_j
 *
 * Encoding follows the quantize_row_*_ref functions of ggml-quants.c: the scale
 * is the block's max |x| (Q1_0: the mean |x|, summed in index order), the codes
 * lroundf(x / d) + 1.  ggml ignores the importance matrix for all four types
 * (TQ*: unused; Q1_0/Q2_0: the imatrix path calls the same row function), and
 * so do these kernels.  max |x| of finite values does not depend on the order,
 * so it is taken lane-wise; rows holding NaN/inf are refused.
 */
#include "ws_module.h"

#define QK_K 256
/* ------------------------------------------------------------------ TQ1_0 */

/* Trits lroundf(x * id) + 1 of a block, in element order. */
static inline void trits(const float *restrict x, float id, uint8_t *restrict t) {
    for (int j = 0; j < QK_K; ++j) t[j] = (uint8_t)(ws_round_away(x[j] * id) + 1);
}

/* k trits t[m + stride*i], i = 0..k-1 (first most significant), as one byte. */
static inline uint8_t pack_base3(const uint8_t *t, int k, int stride, int shift_top) {
    uint8_t q = 0;
    for (int i = 0; i < k; ++i) q = (uint8_t)(q * 3 + t[stride * i]);
    if (shift_top) q = (uint8_t)(q * 3);
    return (uint8_t)(((uint16_t)q * 256 + 242) / 243);
}

WS_INLINE void ref_tq1_0(const float *restrict x, uint8_t *restrict y) {
    const float d = ws_absmax(x, QK_K);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t t[QK_K];
    trits(x, id, t);
    for (int m = 0; m < 32; ++m) y[m] = pack_base3(t + m, 5, 32, 0);
    for (int m = 0; m < 16; ++m) y[32 + m] = pack_base3(t + 160 + m, 5, 16, 0);
    for (int j = 0; j < 4; ++j) y[48 + j] = pack_base3(t + 240 + j, 4, 4, 1);
    ws_put_f16(y + 52, d);
}

static inline float trit(uint8_t byte, uint8_t pow3, float d) {
    const uint8_t q = (uint8_t)(byte * pow3);
    return (float)((int)(((uint16_t)q * 3) >> 8) - 1) * d;
}

WS_DISPATCH static void dequantize_tq1_0(const uint8_t *restrict src, float *restrict y,
                                         int64_t nb) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    for (int64_t i = 0; i < nb; ++i, src += 54) {
        const float d = ws_get_f16(src + 52);
        for (int n = 0; n < 5; ++n)
            for (int m = 0; m < 32; ++m) *y++ = trit(src[m], pow3[n], d);
        for (int n = 0; n < 5; ++n)
            for (int m = 0; m < 16; ++m) *y++ = trit(src[32 + m], pow3[n], d);
        for (int n = 0; n < 4; ++n)
            for (int j = 0; j < 4; ++j) *y++ = trit(src[48 + j], pow3[n], d);
    }
}

/* ------------------------------------------------------------------ TQ2_0 */

WS_INLINE void ref_tq2_0(const float *restrict x, uint8_t *restrict y) {
    const float d = ws_absmax(x, QK_K);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t t[QK_K];
    trits(x, id, t);
    for (int c = 0; c < 2; ++c)
        for (int m = 0; m < 32; ++m) {
            const uint8_t *e = t + 128 * c + m;
            y[32 * c + m] = (uint8_t)((e[0] & 3) | ((e[32] & 3) << 2) | ((e[64] & 3) << 4) |
                                      ((e[96] & 3) << 6));
        }
    ws_put_f16(y + 64, d);
}

WS_DISPATCH static void dequantize_tq2_0(const uint8_t *restrict src, float *restrict y,
                                         int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, src += 66) {
        const float d = ws_get_f16(src + 64);
        for (int c = 0; c < 2; ++c)
            for (int l = 0; l < 4; ++l)
                for (int m = 0; m < 32; ++m)
                    *y++ = (float)(((src[32 * c + m] >> (2 * l)) & 3) - 1) * d;
    }
}

/* ------------------------------------------------------------------ Q1_0 */

WS_INLINE void ref_q1_0(const float *restrict x, uint8_t *restrict y) {
    float sum_abs = 0.0f; /* in index order: the sum is ggml's */
    for (int j = 0; j < 128; ++j) sum_abs += fabsf(x[j]);
    ws_put_f16(y, sum_abs / 128);
    for (int b = 0; b < 16; ++b) {
        uint8_t q = 0;
        for (int k = 0; k < 8; ++k) q |= (uint8_t)((x[8 * b + k] >= 0.0f) << k);
        y[2 + b] = q;
    }
}

WS_DISPATCH static void dequantize_q1_0(const uint8_t *restrict src, float *restrict y,
                                        int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, src += 18, y += 128) {
        const float d = ws_get_f16(src);
        const float v[2] = {-d, d}; /* bit ? d : -d, as a lookup */
        for (int j = 0; j < 128; ++j) y[j] = v[(src[2 + j / 8] >> (j % 8)) & 1];
    }
}

/* ------------------------------------------------------------------ Q2_0 */

WS_INLINE void ref_q2_0(const float *restrict x, uint8_t *restrict y) {
    const float d = ws_absmax(x, 64);
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    ws_put_f16(y, d);
    for (int b = 0; b < 16; ++b) {
        uint8_t byte = 0;
        for (int k = 0; k < 4; ++k) {
            int q = ws_round_away(x[4 * b + k] * id) + 1;
            q = q < 0 ? 0 : q > 3 ? 3 : q;
            byte |= (uint8_t)(q << (2 * k));
        }
        y[2 + b] = byte;
    }
}

WS_DISPATCH static void dequantize_q2_0(const uint8_t *restrict src, float *restrict y,
                                        int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, src += 18, y += 64) {
        const float d = ws_get_f16(src);
        if (ws_nonfinite(d)) { /* gcc folds -1 * d into -d, which differs for a NaN */
            for (int j = 0; j < 64; ++j)
                y[j] = (float)(((src[2 + j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
            continue;
        }
        /* ((int)q - 1) * d for the four codes: the same products, looked up */
        const float v[4] = {(float)(0 - 1) * d, (float)(1 - 1) * d, (float)(2 - 1) * d,
                            (float)(3 - 1) * d};
        for (int j = 0; j < 64; ++j) y[j] = v[(src[2 + j / 4] >> (2 * (j % 4))) & 3];
    }
}

#define QUANTIZER(fname, bs, size, ref)                                                           \
    WS_DISPATCH static int fname(const float *restrict src, uint8_t *restrict dst, int64_t nrows, \
                                 int64_t n, const float *imatrix) {                               \
        (void)imatrix; /* ggml ignores it for this type */                                        \
        return ws_quantize_blocks(src, dst, nrows, n, bs, size, ref);                             \
    }

QUANTIZER(quantize_tq1_0, QK_K, 54, ref_tq1_0)
QUANTIZER(quantize_tq2_0, QK_K, 66, ref_tq2_0)
QUANTIZER(quantize_q1_0, 128, 18, ref_q1_0)
QUANTIZER(quantize_q2_0, 64, 18, ref_q2_0)

static const ws_codec WS_CODECS[] = {
    {"TQ1_0", QK_K, 54, dequantize_tq1_0, quantize_tq1_0},
    {"TQ2_0", QK_K, 66, dequantize_tq2_0, quantize_tq2_0},
    {"Q1_0", 128, 18, dequantize_q1_0, quantize_q1_0},
    {"Q2_0", 64, 18, dequantize_q2_0, quantize_q2_0},
    {NULL, 0, 0, NULL, NULL},
};

WS_CODEC_MODULE(ternary, "Kernels of the ternary and binary ggml types (TQ1_0, TQ2_0, Q1_0, Q2_0).")
