/* The K-quant kernels: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (both ways) and Q8_K (decode).
 *
 * The byte layouts are in the docstring of weightsmith/quant/kquants.py.  The
 * results are bit-exact with ggml's plain C reference (quantize_row_*_ref
 * without an importance matrix, quantize_row_*_impl with one, dequantize_row_*):
 *
 *  - every float operation that reaches the output is the one ggml's scalar code
 *    does, in its order, in float32, never fused (setup.py: -ffp-contract=off);
 *  - the scale searches (make_qkx2/qkx3, make_qx, make_q3 quants) run on NL
 *    sub-blocks ("lanes") at once: arrays are [value i][lane g], and every loop
 *    over a sub-block's values is sequential in i with a short inner loop over
 *    the lanes, which the compiler turns into SIMD without touching any lane's
 *    order of operations.  C's early-outs and data-dependent branches become
 *    per-lane selects; a lane that has converged simply repeats a no-op pass;
 *  - where ggml re-derives the levels of a winning trial, the lane code keeps the
 *    winning inverse scale (and min) and derives the levels once at the end with
 *    the same operations.
 *
 * Entry points (GIL released while the kernel runs, caller-owned buffers):
 *   dequantize(type, blocks, out)                     blocks: nb * type_size bytes,
 *                                                     out: float32 [nb * 256]
 *   quantize(type, x, n_per_row, imatrix, out)        x: float32 [nrows * n_per_row],
 *                                                     imatrix: float32 [n_per_row] or None,
 *                                                     out: nrows * n_per_row / 256 * type_size bytes
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "ws_common.h"
#include "ws_pool.h"
#include "ws_lanes.h"

#define QK_K 256

#if defined(__GNUC__) || defined(__clang__)
#define WS_INLINE static inline __attribute__((always_inline))
#else
#define WS_INLINE static inline
#endif

/* Runtime dispatch: an AVX2 copy of each quantizer next to the baseline one.
 * Only IEEE add/mul/div/sqrt and integer ops are vectorised (no FMA), so both
 * copies give identical bytes. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(WS_NO_DISPATCH) /* -DWS_NO_DISPATCH: baseline only (to test that copy) */
#define WS_DISPATCH __attribute__((target_clones("avx2", "default")))
#else
#define WS_DISPATCH
#endif

/* --------------------------------------------------------------------------- helpers */

static inline float f16_at(const uint8_t *p) { return ws_f16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

static inline void put_f16(uint8_t *p, float v) {
    uint16_t h = ws_f32_to_f16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}


/* Scale and min j of the 12 packed scale bytes of Q4_K/Q5_K (get_scale_min_k4). */
static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* t[i * NL + g] = x[g * n + i] for lanes g < lanes: a [lanes][n] block of values
 * as lanes. */
WS_INLINE void transpose_in(const float *restrict x, int lanes, int n, int NL, float *restrict t) {
    for (int g = 0; g < lanes; ++g)
        for (int i = 0; i < n; ++i) t[i * NL + g] = x[(size_t)g * n + i];
}

WS_INLINE void zero_lanes(int from, int n, int NL, float *t) {
    for (int g = from; g < NL; ++g)
        for (int i = 0; i < n; ++i) t[i * NL + g] = 0.0f;
}

/* Lay blocks out as lanes: lane g = (block g / per, sub-block g % per) of n
 * values, per = 256 / n; value i of lane g goes to t[i * NL + g] (the blocks are
 * contiguous, so lane g starts at x + g * n).  The lanes of missing blocks (past
 * `have`) are zeros: computed and thrown away. */
WS_INLINE void to_lanes(const float *restrict x, int have, int n, int NL, float *restrict t) {
    transpose_in(x, have * (QK_K / n), n, NL, t);
    zero_lanes(have * (QK_K / n), n, NL, t);
}

/* The imatrix slices of the blocks of a group as lanes (block b0 + b uses
 * column block (b0 + b) % nbr of the imatrix). */
WS_INLINE void qw_lanes(const float *restrict qw, int64_t b0, int64_t nbr, int have, int n, int NL,
                        float *restrict t) {
    const int per = QK_K / n;
    for (int b = 0; b < have; ++b) transpose_in(qw + (size_t)((b0 + b) % nbr) * QK_K, per, n, NL, t + b * per);
    zero_lanes(have * per, n, NL, t);
}

/* float s = 0; for (j < 256) s += x[j]*x[j]; for the `have` blocks at x, in lockstep. */
WS_INLINE void sum_x2_blocks(const float *x, int have, int nblk, float *s) {
    float acc[4] = {0, 0, 0, 0}; /* nblk <= 4 */
    for (int j = 0; j < QK_K; ++j)
        for (int b = 0; b < nblk; ++b) {
            const float v = b < have ? x[(size_t)b * QK_K + j] : 0.0f;
            acc[b] += v * v;
        }
    for (int b = 0; b < nblk; ++b) s[b] = acc[b];
}

/* The importance weights of a group as lanes, as the K quantize_row_*_impl:
 * w = qw * sqrtf(sigma2 + x*x) with sigma2 = factor * sum(x*x) / 256 over the
 * value's block (factor 2; Q2_K: 1), and sw[g] = the lane's sum of w (from 0).
 * xb: the group's blocks; xt: the same values as lanes. */
WS_INLINE void imatrix_lanes(const float *restrict xb, const float *restrict xt,
                             const float *restrict qw, int64_t b0, int64_t nbr, int have,
                             const int nblk, const int n, const int NL, float factor,
                             float *restrict wt, float *restrict sw) {
    float sig[4];
    sum_x2_blocks(xb, have, nblk, sig);
    for (int b = 0; b < nblk; ++b) sig[b] = factor * sig[b] / QK_K;
    qw_lanes(qw, b0, nbr, have, n, NL, wt);
    for (int i = 0; i < n; ++i)
        for (int g = 0; g < NL; ++g) {
            const float v = xt[i * NL + g];
            wt[i * NL + g] *= sqrtf(sig[g / (QK_K / n)] + v * v);
        }
    for (int g = 0; g < NL; ++g) sw[g] = 0;
    for (int i = 0; i < n; ++i)
        for (int g = 0; g < NL; ++g) sw[g] += wt[i * NL + g];
}

/* --------------------------------------------------------------------------- searches */

/* make_q3_quants(n, nmax, x, L, do_rmse = true) on NL groups: the first guess,
 * then up to five passes of coordinate descent on the levels. */
WS_INLINE void q3_lanes(const int n, const int NL, const int nmax, const float *restrict xt,
                        int8_t *restrict L, float *restrict scale) {
    float amax[NL_MAX], mx[NL_MAX], isc[NL_MAX], slx[NL_MAX], sl2[NL_MAX];
    float w[32 * NL_MAX], wx[32 * NL_MAX], lv[32 * NL_MAX];

    signed_absmax_lanes(n, NL, xt, amax, mx);
    for (int g = 0; g < NL; ++g) {
        isc[g] = (float)(-nmax) / mx[g];
        slx[g] = sl2[g] = 0;
    }
    for (int i = 0; i < n; ++i)
        for (int g = 0; g < NL; ++g) {
            const int k = i * NL + g;
            const float x = xt[k];
            w[k] = x * x;
            wx[k] = w[k] * x;
            lv[k] = level(isc[g] * x, -nmax, nmax - 1);
            slx[g] += wx[k] * lv[k];
            sl2[g] += w[k] * lv[k] * lv[k];
        }
    for (int itry = 0; itry < 5; ++itry) {
        int changed = 0;
        for (int i = 0; i < n; ++i)
            for (int g = 0; g < NL; ++g) {
                const int k = i * NL + g;
                const float li = lv[k];
                float s1 = slx[g] - wx[k] * li;
                float s2 = sl2[g] - w[k] * li * li;
                const float nl = level(xt[k] * s2 / s1, -nmax, nmax - 1);
                const int cand = (s1 > 0) & (nl != li);
                s1 += wx[k] * nl;
                s2 += w[k] * nl * nl;
                const int take = cand & (s2 > 0) & (s1 * s1 * sl2[g] > slx[g] * slx[g] * s2);
                lv[k] = sel(take, nl, li);
                slx[g] = sel(take, s1, slx[g]);
                sl2[g] = sel(take, s2, sl2[g]);
                changed |= take;
            }
        /* A lane whose pass changed nothing would change nothing again (C breaks). */
        if (!changed) break;
    }
    for (int i = 0; i < n; ++i)
        for (int g = 0; g < NL; ++g)
            L[i * NL + g] = (int8_t)(((int)lv[i * NL + g] + nmax) & -(amax[g] >= GROUP_MAX_EPS));
    for (int g = 0; g < NL; ++g) {
        const float s = slx[g] / sl2[g];
        scale[g] = sel((amax[g] >= GROUP_MAX_EPS) & (sl2[g] > 0.0f), s, 0.0f);
    }
}

/* The final levels of a block, re-derived from its stored scales as ggml does:
 * q = MAX(lo, MIN(hi, nearest_int((x + m[j]) / d[j]))) - lo (x / d[j] when m is
 * NULL) for sub-block j of `sub` values.  A sub-block with d[j] == 0 keeps its
 * search levels (C `continue`s): value i of sub-block j is keep[i * NL + j]. */
WS_INLINE void requantize(const float *restrict xs, const int sub, const float *restrict d,
                          const float *restrict m, const int lo, const int hi,
                          const uint8_t *restrict keep, const int NL, uint8_t *restrict q) {
    int32_t lv[QK_K]; /* computed for every sub-block, so the loop has no branch */
    for (int j = 0; j < QK_K / sub; ++j)
        for (int i = 0; i < sub; ++i) {
            const float v = xs[sub * j + i];
            lv[sub * j + i] = level_i((m ? v + m[j] : v) / d[j], lo, hi) - lo;
        }
    for (int j = 0; j < QK_K / sub; ++j)
        if (!d[j])
            for (int i = 0; i < sub; ++i) lv[sub * j + i] = keep[i * NL + j];
    for (int e = 0; e < QK_K; ++e) q[e] = (uint8_t)lv[e];
}

/* --------------------------------------------------------------------------- Q4_K / Q5_K */

#define K4_BLOCKS 2 /* super-blocks per search: 2 x 8 sub-blocks of 32 = 16 lanes */
#define K4_NL (K4_BLOCKS * 8)

/* quantize_row_q4_K/q5_K _ref (qw NULL) / _impl on nb super-blocks; nmax 15 or 31. */
WS_INLINE void quantize_k4(const float *x, uint8_t *y, int64_t nb, const float *qw, int64_t nbr,
                           const int nmax) {
    const size_t ts = nmax == 15 ? 144 : 176;
    float xt[32 * K4_NL], wt[32 * K4_NL], scales[K4_NL], mins[K4_NL], sw[K4_NL];
    uint8_t L[32 * K4_NL];
    for (int64_t b0 = 0; b0 < nb; b0 += K4_BLOCKS) {
        const int have = nb - b0 < K4_BLOCKS ? (int)(nb - b0) : K4_BLOCKS;
        const float *xb = x + (size_t)b0 * QK_K;
        to_lanes(xb, have, 32, K4_NL, xt);
        if (!qw) {
            float s[K4_NL], av[K4_NL];
            for (int g = 0; g < K4_NL; ++g) s[g] = 0;
            for (int i = 0; i < 32; ++i)
                for (int g = 0; g < K4_NL; ++g) s[g] += xt[i * K4_NL + g] * xt[i * K4_NL + g];
            for (int g = 0; g < K4_NL; ++g) av[g] = sqrtf(s[g] / 32);
            for (int i = 0; i < 32; ++i)
                for (int g = 0; g < K4_NL; ++g) wt[i * K4_NL + g] = av[g] + fabsf(xt[i * K4_NL + g]);
            if (nmax == 15)
                qkx_lanes(32, K4_NL, 15, xt, wt, -1.0f, 0.1f, 20, 0, 0, L, scales, mins);
            else
                qkx_lanes(32, K4_NL, 31, xt, wt, -0.5f, 0.1f, 15, 0, 0, L, scales, mins);
        } else {
            imatrix_lanes(xb, xt, qw, b0, nbr, have, K4_BLOCKS, 32, K4_NL, 2, wt, sw);
            qkx_lanes(32, K4_NL, nmax, xt, wt, -0.9f, 0.05f, 36, 0, 1, L, scales, mins);
        }
        for (int b = 0; b < have; ++b) {
            const float *xs = xb + (size_t)b * QK_K;
            const float *bs = scales + 8 * b, *bm = mins + 8 * b;
            uint8_t *yb = y + (size_t)(b0 + b) * ts, *sc = yb + 4;
            uint8_t ls[8], lm[8];
            if (!qw) {
                float max_scale = 0, max_min = 0;
                for (int j = 0; j < 8; ++j) {
                    if (bs[j] > max_scale) max_scale = bs[j];
                    if (bm[j] > max_min) max_min = bm[j];
                }
                const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
                const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
                for (int j = 0; j < 8; ++j) {
                    ls[j] = (uint8_t)ws_nearest_int(inv_scale * bs[j]);
                    lm[j] = (uint8_t)ws_nearest_int(inv_min * bm[j]);
                    ls[j] = ls[j] < 63 ? ls[j] : 63;
                    lm[j] = lm[j] < 63 ? lm[j] : 63;
                }
                put_f16(yb, max_scale / 63.f);
                put_f16(yb + 2, max_min / 63.f);
            } else {
                const float d_block = ws_make_qp_quants(8, 63, bs, ls, sw + 8 * b);
                const float m_block = ws_make_qp_quants(8, 63, bm, lm, sw + 8 * b);
                if (nmax == 31) /* only Q5_K's impl clamps the stored levels */
                    for (int j = 0; j < 8; ++j) {
                        ls[j] = ls[j] < 63 ? ls[j] : 63;
                        lm[j] = lm[j] < 63 ? lm[j] : 63;
                    }
                put_f16(yb, d_block);
                put_f16(yb + 2, m_block);
            }
            for (int j = 0; j < 4; ++j) {
                sc[j] = ls[j];
                sc[j + 4] = lm[j];
            }
            for (int j = 4; j < 8; ++j) {
                sc[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
                sc[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
                sc[j] |= (uint8_t)((lm[j] >> 4) << 6);
            }
            /* levels [256] of this block: the search's, re-derived from the stored scales */
            uint8_t q[QK_K];
            float dv[8], mv[8];
            const float d0 = f16_at(yb), m0 = f16_at(yb + 2);
            for (int j = 0; j < 8; ++j) {
                uint8_t s, m;
                scale_min_k4(j, sc, &s, &m);
                dv[j] = d0 * s;
                mv[j] = m0 * m;
            }
            requantize(xs, 32, dv, mv, 0, nmax, L + 8 * b, K4_NL, q);
            uint8_t *qs = yb + (nmax == 15 ? 16 : 48);
            if (nmax == 31) {
                uint8_t *qh = yb + 16;
                for (int l = 0; l < 32; ++l) {
                    uint8_t h = 0;
                    for (int c = 0; c < 4; ++c) {
                        h |= (uint8_t)((q[64 * c + l] >> 4) << (2 * c));
                        h |= (uint8_t)((q[64 * c + 32 + l] >> 4) << (2 * c + 1));
                    }
                    qh[l] = h;
                }
            }
            for (int c = 0; c < 4; ++c)
                for (int l = 0; l < 32; ++l)
                    qs[32 * c + l] = (uint8_t)((q[64 * c + l] & 0xF) | ((q[64 * c + 32 + l] & 0xF) << 4));
        }
    }
}

WS_DISPATCH static void quantize_q4_k(const float *x, uint8_t *y, int64_t nb, const float *qw, int64_t nbr) {
    quantize_k4(x, y, nb, qw, nbr, 15);
}

WS_DISPATCH static void quantize_q5_k(const float *x, uint8_t *y, int64_t nb, const float *qw, int64_t nbr) {
    quantize_k4(x, y, nb, qw, nbr, 31);
}

/* --------------------------------------------------------------------------- Q2_K */

#define Q2_BLOCKS 2
#define Q2_NL (Q2_BLOCKS * 16)

WS_DISPATCH static void quantize_q2_k(const float *x, uint8_t *y, int64_t nb, const float *qw, int64_t nbr) {
    float xt[16 * Q2_NL], wt[16 * Q2_NL], scales[Q2_NL], mins[Q2_NL], sw[Q2_NL];
    uint8_t L[16 * Q2_NL];
    for (int64_t b0 = 0; b0 < nb; b0 += Q2_BLOCKS) {
        const int have = nb - b0 < Q2_BLOCKS ? (int)(nb - b0) : Q2_BLOCKS;
        const float *xb = x + (size_t)b0 * QK_K;
        to_lanes(xb, have, 16, Q2_NL, xt);
        if (!qw) {
            for (int i = 0; i < 16 * Q2_NL; ++i) wt[i] = fabsf(xt[i]);
            qkx_lanes(16, Q2_NL, 3, xt, wt, -0.5f, 0.1f, 15, 1, 0, L, scales, mins);
        } else {
            imatrix_lanes(xb, xt, qw, b0, nbr, have, Q2_BLOCKS, 16, Q2_NL, 1, wt, sw);
            qkx_lanes(16, Q2_NL, 3, xt, wt, -0.9f, 0.05f, 36, 0, 1, L, scales, mins);
        }
        for (int b = 0; b < have; ++b) {
            const float *xs = xb + (size_t)b * QK_K;
            const float *bs = scales + 16 * b, *bm = mins + 16 * b;
            uint8_t *yb = y + (size_t)(b0 + b) * 84, *sc = yb;
            if (!qw) {
                float max_scale = 0, max_min = 0;
                for (int j = 0; j < 16; ++j) {
                    if (bs[j] > max_scale) max_scale = bs[j];
                    if (bm[j] > max_min) max_min = bm[j];
                }
                if (max_scale > 0) {
                    const float iscale = 15.f / max_scale;
                    for (int j = 0; j < 16; ++j) sc[j] = (uint8_t)ws_nearest_int(iscale * bs[j]);
                    put_f16(yb + 80, max_scale / 15.f);
                } else {
                    memset(sc, 0, 16);
                    put_f16(yb + 80, 0.f);
                }
                if (max_min > 0) {
                    const float iscale = 15.f / max_min;
                    for (int j = 0; j < 16; ++j) sc[j] |= (uint8_t)((unsigned)ws_nearest_int(iscale * bm[j]) << 4);
                    put_f16(yb + 82, max_min / 15.f);
                } else {
                    put_f16(yb + 82, 0.f);
                }
            } else {
                uint8_t ls[16], lm[16];
                put_f16(yb + 80, ws_make_qp_quants(16, 15, bs, ls, sw + 16 * b));
                put_f16(yb + 82, ws_make_qp_quants(16, 15, bm, lm, sw + 16 * b));
                for (int j = 0; j < 16; ++j) sc[j] = (uint8_t)(ls[j] | (lm[j] << 4));
            }
            uint8_t q[QK_K];
            float dv[16], mv[16];
            const float d0 = f16_at(yb + 80), m0 = f16_at(yb + 82);
            for (int j = 0; j < 16; ++j) {
                dv[j] = d0 * (sc[j] & 0xF);
                mv[j] = m0 * (sc[j] >> 4);
            }
            requantize(xs, 16, dv, mv, 0, 3, L + 16 * b, Q2_NL, q);
            uint8_t *qs = yb + 16;
            for (int h = 0; h < 2; ++h)
                for (int l = 0; l < 32; ++l) {
                    const uint8_t *p = q + 128 * h + l;
                    qs[32 * h + l] = (uint8_t)(p[0] | (p[32] << 2) | (p[64] << 4) | (p[96] << 6));
                }
        }
    }
}

/* --------------------------------------------------------------------------- Q6_K */

#define Q6_BLOCKS 2
#define Q6_NL (Q6_BLOCKS * 16)

WS_DISPATCH static void quantize_q6_k(const float *x, uint8_t *y, int64_t nb, const float *qw, int64_t nbr) {
    float xt[16 * Q6_NL], wt[16 * Q6_NL], scales[Q6_NL];
    int8_t L[16 * Q6_NL];
    for (int64_t b0 = 0; b0 < nb; b0 += Q6_BLOCKS) {
        const int have = nb - b0 < Q6_BLOCKS ? (int)(nb - b0) : Q6_BLOCKS;
        const float *xb = x + (size_t)b0 * QK_K;
        to_lanes(xb, have, 16, Q6_NL, xt);
        if (qw) qw_lanes(qw, b0, nbr, have, 16, Q6_NL, wt);
        qx_lanes(16, Q6_NL, 32, xt, qw ? wt : NULL, L, scales);
        for (int b = 0; b < have; ++b) {
            const float *xs = xb + (size_t)b * QK_K, *bs = scales + 16 * b;
            uint8_t *yb = y + (size_t)(b0 + b) * 210;
            float max_abs, max_scale;
            signed_absmax_lanes(16, 1, bs, &max_abs, &max_scale);
            if (max_abs < GROUP_MAX_EPS) {
                memset(yb, 0, 210);
                continue;
            }
            const float iscale = -128.f / max_scale;
            put_f16(yb + 208, 1 / iscale);
            int8_t *sc = (int8_t *)(yb + 192);
            for (int j = 0; j < 16; ++j) {
                const int l = ws_nearest_int(iscale * bs[j]);
                sc[j] = (int8_t)(l < 127 ? l : 127);
            }
            uint8_t q[QK_K];
            float dv[16];
            const float d0 = f16_at(yb + 208);
            for (int j = 0; j < 16; ++j) dv[j] = d0 * sc[j];
            requantize(xs, 16, dv, NULL, -32, 31, (const uint8_t *)L + 16 * b, Q6_NL, q);
            uint8_t *ql = yb, *qh = yb + 128;
            for (int h = 0; h < 2; ++h)
                for (int l = 0; l < 32; ++l) {
                    const uint8_t *p = q + 128 * h + l;
                    ql[64 * h + l] = (uint8_t)((p[0] & 0xF) | ((p[64] & 0xF) << 4));
                    ql[64 * h + 32 + l] = (uint8_t)((p[32] & 0xF) | ((p[96] & 0xF) << 4));
                    qh[32 * h + l] = (uint8_t)((p[0] >> 4) | ((p[32] >> 4) << 2) | ((p[64] >> 4) << 4) | ((p[96] >> 4) << 6));
                }
        }
    }
}

/* --------------------------------------------------------------------------- Q3_K */

#define Q3_BLOCKS 2
#define Q3_NL (Q3_BLOCKS * 16)

WS_DISPATCH static void quantize_q3_k(const float *x, uint8_t *y, int64_t nb, const float *qw, int64_t nbr) {
    float xt[16 * Q3_NL], wt[16 * Q3_NL], scales[Q3_NL], sw[Q3_NL];
    int8_t L[16 * Q3_NL];
    for (int64_t b0 = 0; b0 < nb; b0 += Q3_BLOCKS) {
        const int have = nb - b0 < Q3_BLOCKS ? (int)(nb - b0) : Q3_BLOCKS;
        const float *xb = x + (size_t)b0 * QK_K;
        to_lanes(xb, have, 16, Q3_NL, xt);
        if (!qw) {
            q3_lanes(16, Q3_NL, 4, xt, L, scales);
        } else {
            imatrix_lanes(xb, xt, qw, b0, nbr, have, Q3_BLOCKS, 16, Q3_NL, 2, wt, sw);
            qx_lanes(16, Q3_NL, 4, xt, wt, L, scales);
        }
        for (int b = 0; b < have; ++b) {
            const float *xs = xb + (size_t)b * QK_K, *bs = scales + 16 * b;
            uint8_t *yb = y + (size_t)(b0 + b) * 110, *sc = yb + 96;
            int8_t ls[16];
            memset(sc, 0, 12);
            if (!qw) {
                float amax, max_scale;
                signed_absmax_lanes(16, 1, bs, &amax, &max_scale);
                if (max_scale) {
                    const float iscale = -32.f / max_scale;
                    for (int j = 0; j < 16; ++j) {
                        int8_t l = (int8_t)ws_nearest_int(iscale * bs[j]);
                        l = l > 31 ? 31 : l;
                        ls[j] = (int8_t)((l < -32 ? -32 : l) + 32);
                    }
                    put_f16(yb + 108, 1 / iscale);
                } else {
                    memset(ls, 0, 16);
                    put_f16(yb + 108, 0.f);
                }
            } else {
                /* make_qx_quants over the block's 16 scales, weighted by the sub-block sums */
                float d_block;
                qx_lanes(16, 1, 32, bs, sw + 16 * b, ls, &d_block);
                put_f16(yb + 108, d_block);
            }
            for (int j = 0; j < 16; ++j) {
                const int l = ls[j]; /* 0..63 */
                if (j < 8)
                    sc[j] = (uint8_t)(l & 0xF);
                else
                    sc[j - 8] |= (uint8_t)((l & 0xF) << 4);
                sc[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            uint8_t q[QK_K];
            float dv[16];
            const float d0 = f16_at(yb + 108);
            for (int j = 0; j < 16; ++j) {
                int8_t s = (int8_t)(j < 8 ? sc[j] & 0xF : sc[j - 8] >> 4);
                s = (int8_t)((s | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
                dv[j] = d0 * s;
            }
            requantize(xs, 16, dv, NULL, -4, 3, (const uint8_t *)L + 16 * b, Q3_NL, q);
            uint8_t *hm = yb, *qs = yb + 32;
            for (int l = 0; l < 32; ++l) {
                uint8_t h = 0;
                for (int k = 0; k < 8; ++k) h |= (uint8_t)((q[32 * k + l] > 3) << k);
                hm[l] = h;
            }
            for (int e = 0; e < QK_K; ++e) q[e] = q[e] > 3 ? q[e] - 4 : q[e];
            for (int h = 0; h < 2; ++h)
                for (int l = 0; l < 32; ++l) {
                    const uint8_t *p = q + 128 * h + l;
                    qs[32 * h + l] = (uint8_t)(p[0] | (p[32] << 2) | (p[64] << 4) | (p[96] << 6));
                }
        }
    }
}

/* --------------------------------------------------------------------------- dequantize */

/* Each loop computes ggml's dequantize_row_* expression per value, in its order;
 * the loops are written so that the compiler vectorises them. */

WS_DISPATCH static void dequantize_q2_k(const uint8_t *restrict x, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += 84, y += QK_K) {
        const float d = f16_at(x + 80), min = f16_at(x + 82);
        for (int s = 0; s < 16; ++s) {
            /* sub-block s: elements 128*h + 32*k + 16*(s&1) + l, bits 2k of qs[32h + 16*(s&1) + l] */
            const int h = s / 8, k = (s / 2) % 4, half = s % 2;
            const uint8_t sc = x[s];
            const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
            const uint8_t *q = x + 16 + 32 * h + 16 * half;
            float *o = y + 128 * h + 32 * k + 16 * half;
            for (int l = 0; l < 16; ++l) o[l] = dl * (float)((q[l] >> (2 * k)) & 3) - ml;
        }
    }
}

WS_DISPATCH static void dequantize_q3_k(const uint8_t *restrict x, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += 110, y += QK_K) {
        const float d_all = f16_at(x + 108);
        const uint8_t *hm = x, *qs = x + 32, *sc = x + 96;
        for (int s = 0; s < 16; ++s) {
            const int h = s / 8, k = (s / 2) % 4, half = s % 2;
            const int raw = (s < 8 ? sc[s] & 0xF : sc[s - 8] >> 4) | (((sc[8 + s % 4] >> (2 * (s / 4))) & 3) << 4);
            const float dl = d_all * (float)(raw - 32);
            const uint8_t *q = qs + 32 * h + 16 * half, *m = hm + 16 * half;
            const int bit = 4 * h + k;
            float *o = y + 128 * h + 32 * k + 16 * half;
            for (int l = 0; l < 16; ++l)
                o[l] = dl * (float)(((q[l] >> (2 * k)) & 3) - (((m[l] >> bit) & 1) ? 0 : 4));
        }
    }
}

WS_INLINE void dequantize_k4(const uint8_t *restrict x, float *restrict y, int64_t nb, const int q5) {
    const size_t ts = q5 ? 176 : 144;
    for (int64_t i = 0; i < nb; ++i, x += ts, y += QK_K) {
        const float d = f16_at(x), min = f16_at(x + 2);
        const uint8_t *qh = x + 16;
        for (int c = 0; c < 4; ++c) { /* chunk c: sub-blocks 2c (low nibbles) and 2c + 1 (high) */
            const uint8_t *q = x + (q5 ? 48 : 16) + 32 * c;
            uint8_t sc, m;
            scale_min_k4(2 * c, x + 4, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            scale_min_k4(2 * c + 1, x + 4, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            float *o = y + 64 * c;
            if (q5) {
                const uint8_t u1 = (uint8_t)(1u << (2 * c)), u2 = (uint8_t)(2u << (2 * c));
                for (int l = 0; l < 32; ++l) o[l] = d1 * (float)((q[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
                for (int l = 0; l < 32; ++l) o[32 + l] = d2 * (float)((q[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            } else {
                for (int l = 0; l < 32; ++l) o[l] = d1 * (float)(q[l] & 0xF) - m1;
                for (int l = 0; l < 32; ++l) o[32 + l] = d2 * (float)(q[l] >> 4) - m2;
            }
        }
    }
}

WS_DISPATCH static void dequantize_q4_k(const uint8_t *restrict x, float *restrict y, int64_t nb) { dequantize_k4(x, y, nb, 0); }

WS_DISPATCH static void dequantize_q5_k(const uint8_t *restrict x, float *restrict y, int64_t nb) { dequantize_k4(x, y, nb, 1); }

WS_DISPATCH static void dequantize_q6_k(const uint8_t *restrict x, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += 210, y += QK_K) {
        const float d = f16_at(x + 208);
        const int8_t *sc = (const int8_t *)(x + 192);
        for (int s = 0; s < 16; ++s) {
            /* element 128*h + 32*c + l (l < 32): ql[64h + 32*(c&1) + l] nibble c/2, qh[32h + l] bits 2c */
            const int h = s / 8, c = (s / 2) % 4, half = s % 2;
            const float dl = d * sc[s];
            const uint8_t *ql = x + 64 * h + 32 * (c & 1) + 16 * half, *qh = x + 128 + 32 * h + 16 * half;
            const int shift = 4 * (c / 2);
            float *o = y + 128 * h + 32 * c + 16 * half;
            for (int l = 0; l < 16; ++l)
                o[l] = dl * (float)((int)(((ql[l] >> shift) & 0xF) | (((qh[l] >> (2 * c)) & 3) << 4)) - 32);
        }
    }
}

WS_DISPATCH static void dequantize_q8_k(const uint8_t *restrict x, float *restrict y, int64_t nb) {
    for (int64_t i = 0; i < nb; ++i, x += 292, y += QK_K) {
        float d;
        memcpy(&d, x, 4); /* little-endian hosts only: checked at import */
        const int8_t *q = (const int8_t *)(x + 4);
        for (int l = 0; l < QK_K; ++l) y[l] = d * (float)q[l];
    }
}

/* --------------------------------------------------------------------------- Python */

typedef void (*quantize_fn)(const float *, uint8_t *, int64_t, const float *, int64_t);
typedef void (*dequantize_fn)(const uint8_t *, float *, int64_t);

static const struct {
    const char *name;
    Py_ssize_t type_size;
    quantize_fn quantize;
    dequantize_fn dequantize;
} TYPES[] = {
    {"Q2_K", 84, quantize_q2_k, dequantize_q2_k},   {"Q3_K", 110, quantize_q3_k, dequantize_q3_k},
    {"Q4_K", 144, quantize_q4_k, dequantize_q4_k},  {"Q5_K", 176, quantize_q5_k, dequantize_q5_k},
    {"Q6_K", 210, quantize_q6_k, dequantize_q6_k},  {"Q8_K", 292, NULL, dequantize_q8_k},
};

static int find_type(const char *name) {
    for (size_t t = 0; t < sizeof TYPES / sizeof TYPES[0]; ++t)
        if (!strcmp(TYPES[t].name, name)) return (int)t;
    PyErr_Format(PyExc_ValueError, "kquants: unknown type %s (expected one of Q2_K..Q6_K, Q8_K)", name);
    return -1;
}

/* A C-contiguous buffer; float32 (format 'f') when want_f32. */
static int get_buffer(PyObject *obj, Py_buffer *view, int writable, int want_f32, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (want_f32) {
        const char *f = view->format ? view->format : "B";
        if (*f == '<' || *f == '=' || *f == '@') ++f;
        if (strcmp(f, "f") != 0 || view->itemsize != 4) {
            PyErr_Format(PyExc_TypeError, "kquants: %s must be float32, found format %s", what,
                         view->format ? view->format : "B");
            PyBuffer_Release(view);
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(dequantize_doc,
             "dequantize(type, blocks, out, threads=1)\n\n"
             "Decode nb whole blocks of a K type (bytes-like, nb * type_size bytes) into\n"
             "out (writable float32, nb * 256 values), on `threads` threads.");

#define GRAIN 65536 /* elements a thread is given at least */

typedef struct {
    dequantize_fn f;
    const uint8_t *src;
    float *dst;
    Py_ssize_t ts;
} deq_job;

static void deq_part(void *ctx, int64_t lo, int64_t hi) {
    const deq_job *j = ctx;
    j->f(j->src + lo * j->ts, j->dst + lo * QK_K, hi - lo);
}

typedef struct {
    quantize_fn f;
    const float *x;
    uint8_t *y;
    const float *qw;
    Py_ssize_t n_per_row, ts;
} q_job;

/* rows lo..hi: the imatrix column of a block depends only on its place in its row */
static void q_part(void *ctx, int64_t lo, int64_t hi) {
    const q_job *j = ctx;
    const int64_t nbr = j->n_per_row / QK_K;
    j->f(j->x + lo * j->n_per_row, j->y + lo * nbr * j->ts, (hi - lo) * nbr, j->qw, nbr);
}

static PyObject *py_dequantize(PyObject *self, PyObject *args) {
    const char *name;
    PyObject *src_obj, *out_obj;
    Py_buffer src, out;
    (void)self;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "sOO|i:dequantize", &name, &src_obj, &out_obj, &threads)) return NULL;
    const int t = find_type(name);
    if (t < 0) return NULL;
    if (get_buffer(src_obj, &src, 0, 0, "blocks") < 0) return NULL;
    if (get_buffer(out_obj, &out, 1, 1, "out") < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    const Py_ssize_t ts = TYPES[t].type_size, nb = src.len / ts;
    if (src.len % ts || out.len != nb * QK_K * 4) {
        PyErr_Format(PyExc_ValueError,
                     "kquants.dequantize %s: expected whole %zd-byte blocks and 256 float32 per block, "
                     "found %zd bytes of blocks and %zd bytes of output",
                     name, ts, src.len, out.len);
    } else {
        deq_job job = {TYPES[t].dequantize, (const uint8_t *)src.buf, (float *)out.buf, ts};
        Py_BEGIN_ALLOW_THREADS ws_parallel(threads, nb, GRAIN / QK_K, deq_part, &job);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&out);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(quantize_doc,
             "quantize(type, x, n_per_row, imatrix, out, threads=1)\n\n"
             "Encode float32 rows (x: nrows * n_per_row values, n_per_row a multiple of 256)\n"
             "into out (nrows * n_per_row / 256 * type_size bytes), as ggml_quantize_chunk:\n"
             "imatrix None uses the reference path, else float32 [n_per_row] weights.");

static PyObject *py_quantize(PyObject *self, PyObject *args) {
    const char *name;
    Py_ssize_t n_per_row;
    PyObject *x_obj, *im_obj, *out_obj;
    Py_buffer x, im, out;
    int have_im = 0;
    (void)self;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "sOnOO|i:quantize", &name, &x_obj, &n_per_row, &im_obj, &out_obj, &threads))
        return NULL;
    const int t = find_type(name);
    if (t < 0) return NULL;
    if (!TYPES[t].quantize) {
        PyErr_Format(PyExc_ValueError, "kquants: %s has no quantizer", name);
        return NULL;
    }
    if (n_per_row <= 0 || n_per_row % QK_K) {
        PyErr_Format(PyExc_ValueError, "kquants.quantize %s: n_per_row must be a positive multiple of 256, found %zd",
                     name, n_per_row);
        return NULL;
    }
    if (get_buffer(x_obj, &x, 0, 1, "x") < 0) return NULL;
    if (im_obj != Py_None) {
        if (get_buffer(im_obj, &im, 0, 1, "imatrix") < 0) {
            PyBuffer_Release(&x);
            return NULL;
        }
        have_im = 1;
    }
    if (get_buffer(out_obj, &out, 1, 0, "out") < 0) {
        PyBuffer_Release(&x);
        if (have_im) PyBuffer_Release(&im);
        return NULL;
    }
    const Py_ssize_t nx = x.len / 4, ts = TYPES[t].type_size;
    const Py_ssize_t nb = nx / QK_K;
    if (nx % n_per_row) {
        PyErr_Format(PyExc_ValueError, "kquants.quantize %s: %zd values are not whole rows of %zd", name, nx,
                     n_per_row);
    } else if (have_im && im.len != n_per_row * 4) {
        PyErr_Format(PyExc_ValueError, "kquants.quantize %s: imatrix must hold %zd float32, found %zd", name,
                     n_per_row, im.len / 4);
    } else if (out.len != nb * ts) {
        PyErr_Format(PyExc_ValueError, "kquants.quantize %s: out must hold %zd bytes, found %zd", name, nb * ts,
                     out.len);
    } else {
        const float *qw = have_im ? (const float *)im.buf : NULL;
        q_job job = {TYPES[t].quantize, (const float *)x.buf, (uint8_t *)out.buf, qw, n_per_row, ts};
        Py_BEGIN_ALLOW_THREADS ws_parallel(threads, nx / n_per_row, GRAIN / n_per_row + 1, q_part, &job);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&x);
    if (have_im) PyBuffer_Release(&im);
    PyBuffer_Release(&out);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

/* pool.quantize's row kernel; the K-quant encoders do not look for NaN/inf (check_finite) */
static int kq_rows(const void *arg, const float *src, uint8_t *dst, int64_t nrows, int64_t n,
                   const float *imatrix) {
    const quantize_fn f = *(const quantize_fn *)arg;
    f(src, dst, nrows * (n / QK_K), imatrix, n / QK_K);
    return 0;
}

static PyObject *py_kernel(PyObject *self, PyObject *arg) {
    (void)self;
    const char *name = PyUnicode_AsUTF8(arg);
    if (name == NULL) return NULL;
    const int t = find_type(name);
    if (t < 0) return NULL;
    if (!TYPES[t].quantize) {
        PyErr_Format(PyExc_ValueError, "kquants: %s has no quantizer", name);
        return NULL;
    }
    return ws_kernel_capsule(kq_rows, &TYPES[t].quantize, QK_K, TYPES[t].type_size, WS_UNIT_ELEMS, 1,
                             0);
}

static PyMethodDef methods[] = {
    {"dequantize", py_dequantize, METH_VARARGS, dequantize_doc},
    {"quantize", py_quantize, METH_VARARGS, quantize_doc},
    {"kernel", py_kernel, METH_O, "kernel(type): the type's row kernel for weightsmith._native.pool"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "weightsmith._native.kquants",
    "K-quant kernels (Q2_K..Q6_K, Q8_K), bit-exact with ggml's C reference.", -1, methods,
};

PyMODINIT_FUNC PyInit_kquants(void) {
    const uint16_t one = 1;
    uint8_t first;
    memcpy(&first, &one, 1);
    if (!first) {
        PyErr_SetString(PyExc_ImportError, "weightsmith._native.kquants needs a little-endian host");
        return NULL;
    }
    if (ws_pool_import() < 0) return NULL;
    return PyModule_Create(&module);
}
