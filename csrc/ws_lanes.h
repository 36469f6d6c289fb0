/* Lane-parallel scale searches shared by the K-quants (csrc/kquants.c) and the
 * legacy types' importance-matrix paths (csrc/legacy.c): ggml's make_qx_quants
 * and make_qkx2/3_quants on NL independent groups at once.
 *
 * Layout: value i of group g is t[i * NL + g], so every inner loop runs over
 * the groups (lanes) and gcc vectorises it; each lane does exactly ggml's
 * scalar search of its group -- the same operations in the same order, its
 * sums added in index order -- and lanes never mix.  A step that improves
 * some lanes is taken by those lanes only (bitwise selects), and a lane that
 * ggml returns from early gets ggml's early result.
 */
#ifndef WS_LANES_H
#define WS_LANES_H

#include "ws_common.h"

#define GROUP_MAX_EPS 1e-15f
#define NL_MAX 32 /* most lanes a search runs at once */

/* c ? a : b through the bits: both sides are computed, so the compiler may
 * vectorise a lane loop with it (it will not speculate a division or a load
 * that C's ?: would only evaluate on one side). */
WS_INLINE float sel(int c, float a, float b) {
    const uint32_t m = 0u - (uint32_t)c;
    return ws_bits_f32((ws_f32_bits(a) & m) | (ws_f32_bits(b) & ~m));
}

/* MAX(lo, MIN(hi, nearest_int(v))), as int and as float (an exact small integer). */
WS_INLINE int level_i(float v, int lo, int hi) {
    int l = ws_nearest_int(v);
    l = l > hi ? hi : l;
    return l < lo ? lo : l;
}

WS_INLINE float level(float v, int lo, int hi) { return (float)level_i(v, lo, hi); }

/* make_qkx2_quants (qkx3 = 0) / make_qkx3_quants with weights (qkx3 = 1) on NL
 * groups of n values: x ~ scale * L - the_min, L in 0..nmax.  Requires nstep >= 1.
 * xt, wt: [n][NL].  Out: L [n][NL], scale [NL], the_min [NL]. */
WS_INLINE void qkx_lanes(const int n, const int NL, const int nmax, const float *restrict xt,
                         const float *restrict wt, float rmin, float rdelta, int nstep, int use_mad,
                         int qkx3, uint8_t *restrict L, float *restrict scale,
                         float *restrict the_min) {
    float mn[NL_MAX], mx[NL_MAX], sw[NL_MAX], sx[NL_MAX], isc[NL_MAX], sc[NL_MAX], best[NL_MAX];
    float win_isc[NL_MAX], win_mn[NL_MAX], sl[NL_MAX], sl2[NL_MAX], sxl[NL_MAX];
    float ts[NL_MAX], tm[NL_MAX], cur[NL_MAX], dd[NL_MAX];
    int flat[NL_MAX];
    float la[32 * NL_MAX];
    const float fnmax = (float)nmax;

    for (int g = 0; g < NL; ++g) {
        mn[g] = mx[g] = xt[g];
        sw[g] = wt[g];
        sx[g] = sw[g] * xt[g];
    }
    for (int i = 1; i < n; ++i) {
        const float *x = xt + i * NL, *w = wt + i * NL;
        for (int g = 0; g < NL; ++g) {
            mn[g] = sel(x[g] < mn[g], x[g], mn[g]);
            mx[g] = sel(x[g] > mx[g], x[g], mx[g]);
            sw[g] += w[g];
            sx[g] += w[g] * x[g];
        }
    }
    for (int g = 0; g < NL; ++g) {
        mn[g] = sel(mn[g] > 0, 0.0f, mn[g]);
        flat[g] = qkx3 ? mx[g] <= mn[g] : mx[g] == mn[g]; /* C returns early */
        isc[g] = fnmax / (mx[g] - mn[g]);
        sc[g] = 1 / isc[g];
        best[g] = 0;
        win_isc[g] = isc[g];
        win_mn[g] = mn[g];
    }
    for (int i = 0; i < n; ++i) {
        const float *x = xt + i * NL, *w = wt + i * NL;
        for (int g = 0; g < NL; ++g) {
            const float l = level(isc[g] * (x[g] - mn[g]), 0, nmax);
            float diff = sc[g] * l + mn[g] - x[g];
            diff = use_mad ? fabsf(diff) : diff * diff;
            best[g] += w[g] * diff;
        }
    }
    for (int is = 0; is <= nstep; ++is) {
        const float c = rmin + rdelta * (float)is + fnmax;
        for (int g = 0; g < NL; ++g) {
            isc[g] = c / (mx[g] - mn[g]);
            sl[g] = sl2[g] = sxl[g] = 0;
        }
        for (int i = 0; i < n; ++i) {
            const float *x = xt + i * NL, *w = wt + i * NL;
            float *lv = la + i * NL;
            for (int g = 0; g < NL; ++g) {
                const float l = level(isc[g] * (x[g] - mn[g]), 0, nmax);
                lv[g] = l;
                sl[g] += w[g] * l;
                sl2[g] += w[g] * l * l;
                sxl[g] += w[g] * l * x[g];
            }
        }
        for (int g = 0; g < NL; ++g) {
            dd[g] = sw[g] * sl2[g] - sl[g] * sl[g];
            float s = (sw[g] * sxl[g] - sx[g] * sl[g]) / dd[g];
            float m = (sl2[g] * sx[g] - sl[g] * sxl[g]) / dd[g];
            const float s0 = sxl[g] / sl2[g]; /* C's scale when the min would be > 0 */
            const int pos = m > 0;
            ts[g] = sel(pos, s0, s);
            tm[g] = sel(pos, 0.0f, m);
            cur[g] = 0;
        }
        for (int i = 0; i < n; ++i) {
            const float *x = xt + i * NL, *w = wt + i * NL, *lv = la + i * NL;
            for (int g = 0; g < NL; ++g) {
                float diff = ts[g] * lv[g] + tm[g] - x[g];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur[g] += w[g] * diff;
            }
        }
        for (int g = 0; g < NL; ++g) {
            const int better = !flat[g] & (dd[g] > 0) & (cur[g] < best[g]);
            best[g] = sel(better, cur[g], best[g]);
            sc[g] = sel(better, ts[g], sc[g]);
            win_isc[g] = sel(better, isc[g], win_isc[g]);
            win_mn[g] = sel(better, mn[g], win_mn[g]);
            mn[g] = sel(better, tm[g], mn[g]);
        }
    }
    for (int i = 0; i < n; ++i) {
        const float *x = xt + i * NL;
        for (int g = 0; g < NL; ++g) {
            const int l = level_i(win_isc[g] * (x[g] - win_mn[g]), 0, nmax);
            L[i * NL + g] = (uint8_t)(l & -!flat[g]);
        }
    }
    for (int g = 0; g < NL; ++g) {
        scale[g] = sel(flat[g], 0.0f, sc[g]);
        the_min[g] = -mn[g];
    }
}

/* C's `if (fabsf(x) > amax) { amax = fabsf(x); max = x; }` walk over each lane. */
WS_INLINE void signed_absmax_lanes(const int n, const int NL, const float *restrict xt,
                                   float *restrict amax, float *restrict mx) {
    for (int g = 0; g < NL; ++g) amax[g] = mx[g] = 0;
    for (int i = 0; i < n; ++i)
        for (int g = 0; g < NL; ++g) {
            const float v = xt[i * NL + g], a = fabsf(v);
            const int gt = a > amax[g];
            amax[g] = sel(gt, a, amax[g]);
            mx[g] = sel(gt, v, mx[g]);
        }
}

/* One trial of make_qx_quants: sumlx = sum (w*x)*l, suml2 = sum (w*l)*l over
 * l = MAX(-nmax, MIN(nmax-1, nearest_int(iscale*x))). */
WS_INLINE void qx_sums(const int n, const int NL, const int nmax, const float *restrict xt,
                       const float *restrict w, const float *restrict wx, const float *restrict isc,
                       float *restrict slx, float *restrict sl2) {
    for (int g = 0; g < NL; ++g) slx[g] = sl2[g] = 0;
    for (int i = 0; i < n; ++i) {
        const float *x = xt + i * NL, *wi = w + i * NL, *wxi = wx + i * NL;
        for (int g = 0; g < NL; ++g) {
            const float l = level(isc[g] * x[g], -nmax, nmax - 1);
            slx[g] += wxi[g] * l;
            sl2[g] += wi[g] * l * l;
        }
    }
}

/* make_qx_quants(n, nmax, x, L, rmse_type = 1, qw) on NL groups: x ~ scale * (L - nmax).
 * xt, qwt: [n][NL] (qwt NULL: weights x*x).  Out: L [n][NL] (0 for an all-zero
 * group), scale [NL]. */
WS_INLINE void qx_lanes(const int n, const int NL, const int nmax, const float *restrict xt,
                        const float *restrict qwt, int8_t *restrict L, float *restrict scale) {
    float amax[NL_MAX], mx[NL_MAX], isc[NL_MAX], win[NL_MAX], slx[NL_MAX], sl2[NL_MAX];
    float bst[NL_MAX], scl[NL_MAX];
    float w[32 * NL_MAX], wx[32 * NL_MAX];
    const float fnmax = (float)nmax;

    signed_absmax_lanes(n, NL, xt, amax, mx);
    for (int i = 0; i < n * NL; ++i) {
        w[i] = qwt ? qwt[i] : xt[i] * xt[i];
        wx[i] = w[i] * xt[i];
    }
    /* the first guess -nmax/max */
    for (int g = 0; g < NL; ++g) win[g] = (float)(-nmax) / mx[g];
    qx_sums(n, NL, nmax, xt, w, wx, win, slx, sl2);
    for (int g = 0; g < NL; ++g) {
        scl[g] = sl2[g] != 0 ? slx[g] / sl2[g] : 0.0f;
        bst[g] = scl[g] * slx[g];
    }
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        const float num = -(fnmax + 0.1f * (float)is);
        for (int g = 0; g < NL; ++g) isc[g] = num / mx[g];
        qx_sums(n, NL, nmax, xt, w, wx, isc, slx, sl2);
        for (int g = 0; g < NL; ++g) {
            const int acc = (sl2[g] > 0) & (slx[g] * slx[g] > bst[g] * sl2[g]);
            const float s = slx[g] / sl2[g];
            scl[g] = sel(acc, s, scl[g]);
            bst[g] = sel(acc, s * slx[g], bst[g]);
            win[g] = sel(acc, isc[g], win[g]);
        }
    }
    for (int i = 0; i < n; ++i)
        for (int g = 0; g < NL; ++g) {
            const int l = level_i(win[g] * xt[i * NL + g], -nmax, nmax - 1);
            L[i * NL + g] = (int8_t)((nmax + l) & -(amax[g] >= GROUP_MAX_EPS));
        }
    for (int g = 0; g < NL; ++g) scale[g] = sel(amax[g] < GROUP_MAX_EPS, 0.0f, scl[g]);
}

#endif
