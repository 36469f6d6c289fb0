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

#define QK 32
#define LANES 8

/* ------------------------------------------------------------------ decode */

static void dequantize_q4_0(const uint8_t *src, float *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, src += 18, dst += QK) {
        const float d = ws_get_f16(src);
        const uint8_t *qs = src + 2;
        for (int j = 0; j < 16; ++j) {
            dst[j] = (float)((qs[j] & 0x0F) - 8) * d;
            dst[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequantize_q4_1(const uint8_t *src, float *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, src += 20, dst += QK) {
        const float d = ws_get_f16(src), m = ws_get_f16(src + 2);
        const uint8_t *qs = src + 4;
        for (int j = 0; j < 16; ++j) {
            dst[j] = (float)(qs[j] & 0x0F) * d + m;
            dst[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    }
}

static void dequantize_q5_0(const uint8_t *src, float *dst, int64_t nb) {
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

static void dequantize_q5_1(const uint8_t *src, float *dst, int64_t nb) {
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

static inline void dequantize_q8(const uint8_t *src, float *dst, int64_t nb, int size, int off) {
    for (int64_t i = 0; i < nb; ++i, src += size, dst += QK) {
        const float d = ws_get_f16(src);
        const int8_t *qs = (const int8_t *)(src + off);
        for (int j = 0; j < QK; ++j) dst[j] = (float)qs[j] * d;
    }
}

static void dequantize_q8_0(const uint8_t *src, float *dst, int64_t nb) {
    dequantize_q8(src, dst, nb, 34, 2);
}

static void dequantize_q8_1(const uint8_t *src, float *dst, int64_t nb) {
    dequantize_q8(src, dst, nb, 36, 4);
}

/* ------------------------------------------------------------------ block extremes */

/* quantize_row_q4_0_ref's `max`: the first value whose |v| is the largest
 * (`if (amax < fabsf(v))` keeps the first), +0.0 for an all-zero block. */
static inline float block_signed_absmax(const float *x) {
    const float amax = ws_absmax(x, QK);
    if (amax == 0.0f) return 0.0f;
    int pos = 0, neg = 0;
    for (int j = 0; j < QK; ++j) {
        pos |= x[j] == amax;
        neg |= x[j] == -amax;
    }
    if (!(pos && neg)) return pos ? amax : -amax;
    for (int j = 0;; ++j)  /* both signs: the first one wins */
        if (fabsf(x[j]) == amax) return x[j];
}

/* `if (v < min) min = v; if (v > max) max = v;` from FLT_MAX / -FLT_MAX.  Only
 * the sign of a zero extreme depends on the order: it is that of the first zero. */
static inline void block_min_max(const float *x, float *mn_out, float *mx_out) {
    float lo[LANES], hi[LANES];
    for (int k = 0; k < LANES; ++k) lo[k] = FLT_MAX, hi[k] = -FLT_MAX;
    for (int j = 0; j < QK; j += LANES)
        for (int k = 0; k < LANES; ++k) {
            const float v = x[j + k];
            lo[k] = v < lo[k] ? v : lo[k];
            hi[k] = v > hi[k] ? v : hi[k];
        }
    float mn = lo[0], mx = hi[0];
    for (int k = 1; k < LANES; ++k) {
        mn = lo[k] < mn ? lo[k] : mn;
        mx = hi[k] > mx ? hi[k] : mx;
    }
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

static inline void put_nibbles(uint8_t *qs, const uint8_t *q) {
    for (int j = 0; j < 16; ++j) qs[j] = (uint8_t)((q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4));
}

static inline void put_high_bits(uint8_t *p, const uint8_t *q) {
    uint32_t qh = 0;
    for (int j = 0; j < QK; ++j) qh |= (uint32_t)((q[j] >> 4) & 1) << j;
    memcpy(p, &qh, 4);
}

/* ------------------------------------------------------------------ reference encoders */

/* q = MIN(top, (int)(x * id + add)): the symmetric types' codes. */
static inline void codes_sym(const float *x, float id, float add, int top, uint8_t *q) {
    for (int j = 0; j < QK; ++j) {
        const int t = (int)(x[j] * id + add);
        q[j] = (uint8_t)(t < top ? t : top);
    }
}

/* q = MIN(top, (int)((x - min) * id + 0.5f)); top < 0: no clamp (Q5_1). */
static inline void codes_asym(const float *x, float mn, float id, int top, uint8_t *q) {
    for (int j = 0; j < QK; ++j) {
        const int t = (int)((x[j] - mn) * id + 0.5f);
        q[j] = (uint8_t)(top < 0 || t < top ? t : top);
    }
}

static inline float inv_or_zero(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

static void ref_q4_0(const float *x, uint8_t *y) {
    const float d = block_signed_absmax(x) / -8;
    uint8_t q[QK];
    codes_sym(x, inv_or_zero(d), 8.5f, 15, q);
    ws_put_f16(y, d);
    put_nibbles(y + 2, q);
}

static void ref_q4_1(const float *x, uint8_t *y) {
    float mn, mx;
    block_min_max(x, &mn, &mx);
    const float d = (mx - mn) / 15;
    uint8_t q[QK];
    codes_asym(x, mn, inv_or_zero(d), 15, q);
    ws_put_f16(y, d);
    ws_put_f16(y + 2, mn);
    put_nibbles(y + 4, q);
}

static void ref_q5_0(const float *x, uint8_t *y) {
    const float d = block_signed_absmax(x) / -16;
    uint8_t q[QK];
    codes_sym(x, inv_or_zero(d), 16.5f, 31, q);
    ws_put_f16(y, d);
    put_high_bits(y + 2, q);
    put_nibbles(y + 6, q);
}

static void ref_q5_1(const float *x, uint8_t *y) {
    float mn, mx;
    block_min_max(x, &mn, &mx);
    const float d = (mx - mn) / 31;
    uint8_t q[QK];
    codes_asym(x, mn, inv_or_zero(d), -1, q);
    ws_put_f16(y, d);
    ws_put_f16(y + 2, mn);
    put_high_bits(y + 4, q);
    put_nibbles(y + 8, q);
}

static void ref_q8_0(const float *x, uint8_t *y) {
    const float d = ws_absmax(x, QK) / 127;
    const float id = inv_or_zero(d);
    ws_put_f16(y, d);
    int8_t *qs = (int8_t *)(y + 2);
    for (int j = 0; j < QK; ++j) qs[j] = (int8_t)ws_round_away(x[j] * id);
}

/* ------------------------------------------------------------------ imatrix searches */

/* make_qx_quants(n, nmax, x, L, rmse_type = 1, qw) with weights: L[i] in 0 .. 2*nmax-1. */
static float make_qx_quants(int n, int nmax, const float *x, uint8_t *L, const float *qw) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < 1e-15f) { /* GROUP_MAX_EPS: all zero */
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = ws_nearest_int(iscale * x[i]);
        l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
        L[i] = (uint8_t)(l + nmax);
        sumlx += qw[i] * x[i] * l;
        suml2 += qw[i] * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = ws_nearest_int(iscale * x[i]);
            l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
            sumlx += qw[i] * x[i] * l;
            suml2 += qw[i] * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                int l = ws_nearest_int(iscale * x[i]);
                L[i] = (uint8_t)(nmax + (l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* make_qkx3_quants(n, nmax, x, weights, L, &the_min, Laux, rmin, rdelta, nstep,
 * use_mad = false) with weights. */
static float make_qkx3_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, float rmin, float rdelta, int nstep) {
    uint8_t Laux[QK];
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max <= min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_mad = 0;
    for (int i = 0; i < n; ++i) {
        const int l = ws_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        const float diff = scale * L[i] + min - x[i];
        best_mad += weights[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = ws_nearest_int(iscale * (x[i] - min));
            l = l < 0 ? 0 : l > nmax ? nmax : l;
            Laux[i] = (uint8_t)l;
            const float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float mad = 0;
            for (int i = 0; i < n; ++i) {
                const float diff = this_scale * Laux[i] + this_min - x[i];
                mad += weights[i] * (diff * diff);
            }
            if (mad < best_mad) {
                memcpy(L, Laux, (size_t)n);
                best_mad = mad;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* quantize_row_*_impl's weights of one block: qw[j] * sqrtf(sigma2 + x[j]*x[j]). */
static inline void block_weights(const float *x, const float *qw, float sigma2, float *w) {
    for (int j = 0; j < QK; ++j) w[j] = qw[j] * sqrtf(sigma2 + x[j] * x[j]);
}

/* sum_x2 / n_per_row, summed in index order as the C loop does. */
static float row_sigma2(const float *x, int64_t n) {
    float s = 0;
    for (int64_t j = 0; j < n; ++j) s += x[j] * x[j];
    return s / n;
}

static void imatrix_q4_0(const float *x, uint8_t *y, const float *qw, float sigma2) {
    float w[QK];
    uint8_t L[QK];
    block_weights(x, qw, sigma2, w);
    ws_put_f16(y, make_qx_quants(QK, 8, x, L, w));
    put_nibbles(y + 2, L);
}

static void imatrix_q5_0(const float *x, uint8_t *y, const float *qw, float sigma2) {
    float w[QK];
    uint8_t L[QK];
    block_weights(x, qw, sigma2, w);
    ws_put_f16(y, make_qx_quants(QK, 16, x, L, w));
    put_high_bits(y + 2, L);
    put_nibbles(y + 6, L);
}

static void imatrix_q4_1(const float *x, uint8_t *y, const float *qw, float sigma2) {
    float w[QK], min;
    uint8_t L[QK];
    block_weights(x, qw, sigma2, w);
    const float d = make_qkx3_quants(QK, 15, x, w, L, &min, -0.9f, 0.05f, 36);
    ws_put_f16(y, d);
    ws_put_f16(y + 2, -min);
    put_nibbles(y + 4, L);
}

static void imatrix_q5_1(const float *x, uint8_t *y, const float *qw, float sigma2) {
    float w[QK], min;
    uint8_t L[QK];
    block_weights(x, qw, sigma2, w);
    const float d = make_qkx3_quants(QK, 31, x, w, L, &min, -0.9f, 0.05f, 36);
    ws_put_f16(y, d);
    ws_put_f16(y + 2, -min);
    put_high_bits(y + 4, L);
    put_nibbles(y + 8, L);
}

/* ------------------------------------------------------------------ row drivers */

typedef void (*ref_fn)(const float *x, uint8_t *y);
typedef void (*imatrix_fn)(const float *x, uint8_t *y, const float *qw, float sigma2);

static inline int quantize_rows(const float *src, uint8_t *dst, int64_t nrows, int64_t n,
                                const float *imatrix, int size, ref_fn ref, imatrix_fn imp) {
    const int64_t nb = n / QK;
    for (int64_t r = 0; r < nrows; ++r, src += n, dst += nb * size) {
        if (ws_any_nonfinite(src, n)) return 1;
        if (imatrix == NULL || imp == NULL) {
            for (int64_t b = 0; b < nb; ++b) ref(src + b * QK, dst + b * size);
        } else {
            const float sigma2 = row_sigma2(src, n);
            for (int64_t b = 0; b < nb; ++b)
                imp(src + b * QK, dst + b * size, imatrix + b * QK, sigma2);
        }
    }
    return 0;
}

#define QUANTIZER(fname, size, ref, imp)                                                \
    static int fname(const float *src, uint8_t *dst, int64_t nrows, int64_t n,          \
                     const float *imatrix) {                                             \
        return quantize_rows(src, dst, nrows, n, imatrix, size, ref, imp);              \
    }

QUANTIZER(quantize_q4_0, 18, ref_q4_0, imatrix_q4_0)
QUANTIZER(quantize_q4_1, 20, ref_q4_1, imatrix_q4_1)
QUANTIZER(quantize_q5_0, 22, ref_q5_0, imatrix_q5_0)
QUANTIZER(quantize_q5_1, 24, ref_q5_1, imatrix_q5_1)
QUANTIZER(quantize_q8_0, 34, ref_q8_0, NULL) /* ggml's quantize_q8_0 ignores the imatrix */

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
