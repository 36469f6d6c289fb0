/* The IQ ("importance") quant family of ggml, both directions, bit for bit with
 * ggml's plain C reference: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
 * IQ3_S, IQ4_NL, IQ4_XS.  weightsmith._native.iquants.
 *
 * Byte layouts: the docstring of weightsmith/quant/iquants.py.
 *
 * Tables.  The grids, sign tables and the IQ4 code book are format data kept in
 * Python (quant/_iq_tables.py); set_table() copies them in once, at import of
 * quant/iquants.py.  Everything else is derived here from them on first use:
 *  - the float grids and +-1 sign tables the decoders read;
 *  - for the quantizers, ggml's iq2xs/iq3xs_init_impl data: the level of every
 *    grid coordinate, the map from a packed point of levels to its grid index,
 *    and for every off-grid point the list of grid points within its `nwant`
 *    smallest squared distances, ordered by (distance, index).  Built from the
 *    passed grid, not pasted: one source of truth, and the lists are derived
 *    by counting distances (a few ms), not by sorting every candidate.
 * Derived tables are built while the caller holds the GIL, so two threads
 * never build the same table; kernels then only read them.
 *
 * Exactness.  Every per-block computation keeps ggml's float32 operations in
 * ggml's order; the speed comes from work ggml repeats (binary searches become
 * one table lookup, grid bytes are converted to float once) and from running
 * independent ordered sums side by side (the scale trials of one sub-block are
 * summed in parallel lanes, each lane in ggml's element order).
 *
 * Kernels take caller buffers, validate every size before touching memory and
 * release the GIL while they run.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <stdlib.h>

#include "ws_common.h"
#include "ws_pool.h"
#include "ws_x86.h"

#define QK_K 256
#define QK4_NL 32

/* ggml's type numbers */
enum {
    T_IQ2_XXS = 16, T_IQ2_XS = 17, T_IQ3_XXS = 18, T_IQ1_S = 19, T_IQ4_NL = 20,
    T_IQ3_S = 21, T_IQ2_S = 22, T_IQ4_XS = 23, T_IQ1_M = 29,
};

#define GROUP_MAX_EPS 1e-15f
#define GROUP_MAX_EPS_IQ3_XXS 1e-8f
#define GROUP_MAX_EPS_IQ2_S 1e-8f
#define GROUP_MAX_EPS_IQ1_M 1e-7f
#define GROUP_MAX_EPS_IQ1_S 1e-12f
#define IQ1_DELTA 0.125f

/* Four float lanes (GCC/clang vector extension): every lane does exactly the
 * scalar IEEE operation, so lane l equals the scalar code's value. */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));
typedef int8_t v4c __attribute__((vector_size(4)));

static inline v4f load4(const float *p) { v4f v; memcpy(&v, p, sizeof v); return v; }

/* whether any of the first nl lanes of any of the m candidate sets passes
 * ggml's update test sumq2 > 0 && sumqx*sumqx > best*sumq2 */
static inline int any_improves(const v4f *qx, const v4f *q2, int m, float best, int nl) {
    v4i hit = {0, 0, 0, 0};
    for (int k = 0; k < m; ++k) hit |= (q2[k] > 0) & (qx[k] * qx[k] > best * q2[k]);
    const v4i lanes = {0, 1, 2, 3};
    hit &= lanes < nl;
#if defined(__SSE__) && defined(__GNUC__) && !defined(__clang__)
    return __builtin_ia32_movmskps((v4f)hit) != 0; /* one instruction, not a lane-by-lane OR */
#else
    return (hit[0] | hit[1] | hit[2] | hit[3]) != 0;
#endif
}

/* Eight lanes for the IQ1 split searches (four i2 per step took twice the steps;
 * an SSE pair on the baseline clone, one AVX2 register in the AVX2 one). */
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

static inline v8f load8(const float *p) { v8f v; memcpy(&v, p, sizeof v); return v; }

static inline int any_improves8(const v8f *qx, const v8f *q2, int m, float best, int nl) {
    v8i hit = {0};
    for (int k = 0; k < m; ++k) hit |= (q2[k] > 0) & (qx[k] * qx[k] > best * q2[k]);
    const v8i lanes = {0, 1, 2, 3, 4, 5, 6, 7};
    hit &= lanes < nl;
    const v8i h2 = hit | __builtin_shuffle(hit, (v8i){4, 5, 6, 7, 0, 1, 2, 3});
    const v8i h1 = h2 | __builtin_shuffle(h2, (v8i){2, 3, 0, 1, 6, 7, 4, 5});
    return (h1[0] | h1[1]) != 0;
}

static inline float fmax_c(float a, float b) { return a > b ? a : b; } /* ggml's MAX */
static inline int imin_c(int a, int b) { return a < b ? a : b; }
static inline int imax_c(int a, int b) { return a > b ? a : b; }

/* ------------------------------------------------------------------ tables */

enum { G_IQ2XXS, G_IQ2XS, G_IQ2S, G_IQ3XXS, G_IQ3S, G_IQ1S, G_COUNT };

typedef struct {
    const char *name; /* name in _iq_tables */
    int ngrid, dim;   /* entries, values per entry (bytes) */
    int is_signed;    /* entries are int8 (IQ1S) */
    int nwant, kmax;  /* ggml's init parameters: distinct distances kept, levels used */
} grid_spec;

static const grid_spec SPECS[G_COUNT] = {
    {"iq2xxs_grid", 256, 8, 0, 2, 3},  {"iq2xs_grid", 512, 8, 0, 2, 3},
    {"iq2s_grid", 1024, 8, 0, 1, 3},   {"iq3xxs_grid", 256, 4, 0, 2, 8},
    {"iq3s_grid", 512, 4, 0, 3, 8},    {"iq1s_grid", 2048, 8, 1, 3, 3},
};

typedef struct {
    int have;        /* raw grid received */
    float *val;      /* [ngrid*dim] the grid values, for the decoders */
    /* quantizer data, built on first use */
    int ready;
    int bits;        /* bits per level in a packed point */
    int8_t *lev;     /* [ngrid*dim] level of each coordinate */
    float *q;        /* [ngrid*dim] 2*level+1 */
    int32_t *map;    /* [1 << bits*dim]: grid index, or -(1 + offset into nb) */
    uint16_t *nb;    /* per off-grid point: count, then that many grid indices */
    uint8_t *nbo;    /* not IQ1S, [len(nb)*dim]: for entry p of nb, offsets 8*i + level_i
                      * into a terms table */
    uint16_t *nbu;   /* IQ1S only, [len(nb)]: the lists of nb with each entry's levels packed
                      * 2 bits each (its map key) in place of its index: a fifth of the bytes
                      * of nb + nbo to walk (the walks were waiting on cache misses) */
} grid_t;

static grid_t GRIDS[G_COUNT];

static uint8_t IQ1_PREFIX[256]; /* first four packed IQ1 levels l -> l0 + 3*l1 + 9*l2 + 27*l3 */
static int8_t KVALUES[16];
static float KVALUES_F[16];
static uint8_t KSIGNS[128];
static int have_kvalues, have_ksigns;
static float SIGNS8[256][8];     /* sign byte -> eight factors +-1 (bit j set: negative) */
static uint8_t IQ4_F2IDX[1024];  /* floor(2x) + 512 -> best_index_int8(kvalues, x) */

static void build_iq4_lut(void) {
    /* ggml's best_index_int8 flips between neighbours k-1, k exactly at their
     * midpoint (kvalues[k-1] + kvalues[k]) / 2, a half-integer, ties going up;
     * so the index is the number of doubled midpoints <= floor(2x). */
    for (int f = -512; f < 512; ++f) {
        int idx = 0;
        for (int k = 1; k < 16; ++k) idx += (KVALUES[k - 1] + KVALUES[k]) <= f;
        IQ4_F2IDX[f + 512] = (uint8_t)idx;
    }
}

static inline int best_index_iq4nl(float x) {
    float a = x * 2.0f; /* exact */
    if (!(a >= -512.0f)) return a == a ? 0 : 15; /* below range: 0; NaN: top, as ggml */
    if (a >= 512.0f) return 15;
    int i = (int)a;
    if ((float)i > a) --i; /* floor */
    return IQ4_F2IDX[i + 512];
}

#if WS_HAVE_X86
static void iq1m_pairs_init(void);
#endif

static void free_quant_tables(grid_t *g) {
    free(g->lev);
    free(g->q);
    free(g->map);
    free(g->nb);
    free(g->nbo);
    free(g->nbu);
    g->lev = NULL;
    g->q = NULL;
    g->map = NULL;
    g->nb = NULL;
    g->nbo = NULL;
    g->nbu = NULL;
}

/* ggml's iq2xs/iq3xs_init_impl: map and neighbour lists from the grid. */
static int build_quant_tables(int gid) {
    const grid_spec *s = &SPECS[gid];
    grid_t *g = &GRIDS[gid];
    const int n = s->ngrid, dim = s->dim;
    g->bits = dim == 4 ? 3 : 2;
    const int nlev = 1 << g->bits, size = 1 << (g->bits * dim);
    /* levels: rank of each value among the distinct values of the grid */
    float distinct[8];
    int nd = 0;
    for (int k = 0; k < n * dim; ++k) {
        float v = g->val[k];
        int seen = 0;
        for (int j = 0; j < nd; ++j) seen |= distinct[j] == v;
        if (!seen) {
            if (nd == nlev) return -1;
            distinct[nd++] = v;
        }
    }
    g->lev = malloc((size_t)n * dim);
    g->q = malloc(sizeof(float) * n * dim);
    g->map = malloc(sizeof(int32_t) * size);
    if (!g->lev || !g->q || !g->map) goto fail;
    for (int k = 0; k < n * dim; ++k) {
        int r = 0;
        for (int j = 0; j < nd; ++j) r += distinct[j] < g->val[k];
        g->lev[k] = (int8_t)r;
        g->q[k] = (float)(2 * r + 1);
    }
    for (int u = 0; u < size; ++u) g->map[u] = INT32_MIN;
    for (int k = 0; k < n; ++k) {
        int u = 0;
        for (int i = 0; i < dim; ++i) u |= g->lev[k * dim + i] << (g->bits * i);
        g->map[u] = k;
    }
    /* neighbour lists of the off-grid points a quantizer can reach (levels < kmax);
     * offset 0 holds an empty list for the unreachable ones */
    size_t cap = 1 << 16, used = 1;
    g->nb = malloc(sizeof(uint16_t) * cap);
    if (!g->nb) goto fail;
    g->nb[0] = 0;
    /* grid values transposed, so that the distances of one point to every grid
     * entry are computed across entries (int16: squared distances stay < 800) */
    int16_t *qT = malloc(sizeof(int16_t) * (size_t)n * dim);
    int16_t *dd = malloc(sizeof(int16_t) * (size_t)n);
    uint16_t *bucket = malloc(sizeof(uint16_t) * (size_t)n * 3);
    if (!qT || !dd || !bucket) { free(qT); free(dd); free(bucket); goto fail; }
    for (int k = 0; k < n; ++k)
        for (int i = 0; i < dim; ++i) qT[i * n + k] = (int16_t)(2 * g->lev[k * dim + i] + 1);
    for (int u = 0; u < size; ++u) {
        if (g->map[u] != INT32_MIN) continue;
        int pos[8], reach = 1;
        for (int i = 0; i < dim; ++i) {
            int l = (u >> (g->bits * i)) & (nlev - 1);
            reach &= l < s->kmax;
            pos[i] = 2 * l + 1;
        }
        if (!reach) { g->map[u] = -1; continue; }
        for (int k = 0; k < n; ++k) dd[k] = 0;
        for (int i = 0; i < dim; ++i) {
            const int16_t p = (int16_t)pos[i], *qi = qT + (size_t)i * n;
            for (int k = 0; k < n; ++k) {
                const int16_t e = (int16_t)(qi[k] - p);
                dd[k] = (int16_t)(dd[k] + e * e);
            }
        }
        /* the nwant smallest distinct distances (nwant <= 3) */
        int keep[3] = {-1, -1, -1}, nk = 0, lo = -1;
        while (nk < s->nwant) {
            int16_t m = INT16_MAX;
            for (int k = 0; k < n; ++k) {
                const int16_t v = dd[k] > lo ? dd[k] : INT16_MAX;
                m = v < m ? v : m;
            }
            if (m == INT16_MAX) break;
            keep[nk++] = lo = m;
        }
        /* the list: by distance, then by index (ggml's sort of (d2, index) pairs) */
        int cnt[3] = {0, 0, 0};
        for (int k = 0; k < n; ++k) {
            if (dd[k] > lo) continue;
            const int r = dd[k] == keep[0] ? 0 : dd[k] == keep[1] ? 1 : 2;
            bucket[r * n + cnt[r]++] = (uint16_t)k;
        }
        const int count = cnt[0] + cnt[1] + cnt[2];
        if (used + 1 + (size_t)count > cap) {
            while (used + 1 + (size_t)count > cap) cap *= 2;
            uint16_t *nn = realloc(g->nb, sizeof(uint16_t) * cap);
            if (!nn) { free(qT); free(dd); free(bucket); goto fail; }
            g->nb = nn;
        }
        g->map[u] = -(int32_t)(1 + used);
        g->nb[used++] = (uint16_t)count;
        for (int r = 0; r < nk; ++r) {
            memcpy(g->nb + used, bucket + r * n, sizeof(uint16_t) * cnt[r]);
            used += cnt[r];
        }
    }
    free(qT);
    free(dd);
    free(bucket);
    if (gid == G_IQ1S) { /* the IQ1 walks read packed levels, 2 bytes a candidate */
        g->nbu = malloc(sizeof(uint16_t) * used);
        if (!g->nbu) goto fail;
        for (size_t p = 0; p < used;) { /* a list: its count, then its entries */
            const int cnt = g->nb[p];
            g->nbu[p++] = (uint16_t)cnt;
            for (int j = 0; j < cnt; ++j, ++p) {
                int u = 0;
                for (int i = 0; i < dim; ++i) u |= g->lev[g->nb[p] * dim + i] << (2 * i);
                g->nbu[p] = (uint16_t)u;
            }
        }
        for (int u = 0; u < 256; ++u) { /* four packed levels -> base-3 prefix index */
            int r = 0;
            for (int i = 3; i >= 0; --i) r = 3 * r + imin_c((u >> 2 * i) & 3, 2);
            IQ1_PREFIX[u] = (uint8_t)r;
        }
    } else {
        g->nbo = calloc(used, (size_t)dim);
        if (!g->nbo) goto fail;
        for (size_t p = 0; p < used;) { /* a list: its count, then its entries */
            const int cnt = g->nb[p++];
            for (int j = 0; j < cnt; ++j, ++p)
                for (int i = 0; i < dim; ++i)
                    g->nbo[p * dim + i] = (uint8_t)(8 * i + g->lev[g->nb[p] * dim + i]);
        }
    }
#if WS_HAVE_X86
    if (gid == G_IQ1S) iq1m_pairs_init();
#endif
    g->ready = 1;
    return 0;
fail:
    free_quant_tables(g);
    return -1;
}

/* ------------------------------------------------------------------ dequantize */

static inline float f16_at(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return ws_f16_to_f32(h); }
static inline uint16_t u16_at(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t u32_at(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* y[j] = db * grid[j] * sign[j] for the 8 values of one group */
static inline void put8(float *y, float db, const float *grid, const float *sign) {
    for (int j = 0; j < 8; ++j) y[j] = db * grid[j] * sign[j];
}

static void deq_iq2_xxs(const uint8_t *b, float *y) {
    const float d = f16_at(b);
    const float *grid = GRIDS[G_IQ2XXS].val;
    for (int ib = 0; ib < 8; ++ib, y += 32) {
        const uint8_t *q = b + 2 + 8 * ib;
        const uint32_t a = u32_at(q + 4);
        const float db = d * (0.5f + (float)(a >> 28)) * 0.25f;
        for (int l = 0; l < 4; ++l)
            put8(y + 8 * l, db, grid + 8 * q[l], SIGNS8[KSIGNS[(a >> 7 * l) & 127]]);
    }
}

static void deq_iq2_xs(const uint8_t *b, float *y) {
    const float d = f16_at(b);
    const float *grid = GRIDS[G_IQ2XS].val;
    for (int ib = 0; ib < 8; ++ib, y += 32) {
        const uint8_t sc = b[66 + ib];
        const float db[2] = {d * (0.5f + (float)(sc & 15)) * 0.25f, d * (0.5f + (float)(sc >> 4)) * 0.25f};
        for (int l = 0; l < 4; ++l) {
            const uint16_t q = u16_at(b + 2 + 2 * (4 * ib + l));
            put8(y + 8 * l, db[l / 2], grid + 8 * (q & 511), SIGNS8[KSIGNS[q >> 9]]);
        }
    }
}

static void deq_iq2_s(const uint8_t *b, float *y) {
    const float d = f16_at(b);
    const float *grid = GRIDS[G_IQ2S].val;
    for (int ib = 0; ib < 8; ++ib, y += 32) {
        const uint8_t sc = b[74 + ib], qh = b[66 + ib];
        const float db[2] = {d * (0.5f + (float)(sc & 15)) * 0.25f, d * (0.5f + (float)(sc >> 4)) * 0.25f};
        for (int l = 0; l < 4; ++l) {
            const int idx = b[2 + 4 * ib + l] | ((qh << (8 - 2 * l)) & 0x300);
            put8(y + 8 * l, db[l / 2], grid + 8 * idx, SIGNS8[b[34 + 4 * ib + l]]);
        }
    }
}

static void deq_iq3_xxs(const uint8_t *b, float *y) {
    const float d = f16_at(b);
    const float *grid = GRIDS[G_IQ3XXS].val;
    for (int ib = 0; ib < 8; ++ib, y += 32) {
        const uint8_t *qs = b + 2 + 8 * ib;
        const uint32_t a = u32_at(b + 66 + 4 * ib);
        const float db = d * (0.5f + (float)(a >> 28)) * 0.5f;
        for (int l = 0; l < 4; ++l) {
            const float *sg = SIGNS8[KSIGNS[(a >> 7 * l) & 127]];
            const float *g1 = grid + 4 * qs[2 * l], *g2 = grid + 4 * qs[2 * l + 1];
            float *o = y + 8 * l;
            for (int j = 0; j < 4; ++j) {
                o[j] = db * g1[j] * sg[j];
                o[j + 4] = db * g2[j] * sg[j + 4];
            }
        }
    }
}

static void deq_iq3_s(const uint8_t *b, float *y) {
    const float d = f16_at(b);
    const float *grid = GRIDS[G_IQ3S].val;
    for (int ib = 0; ib < 8; ++ib, y += 32) {
        const uint8_t *qs = b + 2 + 8 * ib, *signs = b + 74 + 4 * ib;
        const int qh = b[66 + ib];
        const uint8_t sc = b[106 + ib / 2];
        const float db = d * (float)(1 + 2 * ((ib & 1) ? sc >> 4 : sc & 15));
        for (int l = 0; l < 4; ++l) {
            const float *sg = SIGNS8[signs[l]];
            const float *g1 = grid + 4 * (qs[2 * l] | ((qh << (8 - 2 * l)) & 256));
            const float *g2 = grid + 4 * (qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256));
            float *o = y + 8 * l;
            for (int j = 0; j < 4; ++j) {
                o[j] = db * g1[j] * sg[j];
                o[j + 4] = db * g2[j] * sg[j + 4];
            }
        }
    }
}

static void deq_iq1_s(const uint8_t *b, float *y) {
    const float d = f16_at(b);
    const float *grid = GRIDS[G_IQ1S].val;
    for (int ib = 0; ib < 8; ++ib, y += 32) {
        const uint16_t qh = u16_at(b + 34 + 2 * ib);
        const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
        const float delta = qh & 0x8000 ? -IQ1_DELTA : IQ1_DELTA;
        for (int l = 0; l < 4; ++l) {
            const float *g = grid + 8 * (b[2 + 4 * ib + l] | (((qh >> 3 * l) & 7) << 8));
            for (int j = 0; j < 8; ++j) y[8 * l + j] = dl * (g[j] + delta);
        }
    }
}

static void deq_iq1_m(const uint8_t *b, float *y) {
    const float *grid = GRIDS[G_IQ1S].val;
    uint16_t sc[4];
    for (int i = 0; i < 4; ++i) sc[i] = u16_at(b + 48 + 2 * i);
    const uint16_t u = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
    const float d = ws_f16_to_f32(u);
    for (int ib = 0; ib < 8; ++ib, y += 32) {
        const uint8_t *qs = b + 4 * ib, *qh = b + 32 + 2 * ib;
        const float dl1 = d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 0)) & 7) + 1);
        const float dl2 = d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1);
        const int idx[4] = {qs[0] | ((qh[0] << 8) & 0x700), qs[1] | ((qh[0] << 4) & 0x700),
                            qs[2] | ((qh[1] << 8) & 0x700), qs[3] | ((qh[1] << 4) & 0x700)};
        const float delta[4] = {qh[0] & 0x08 ? -IQ1_DELTA : IQ1_DELTA, qh[0] & 0x80 ? -IQ1_DELTA : IQ1_DELTA,
                                qh[1] & 0x08 ? -IQ1_DELTA : IQ1_DELTA, qh[1] & 0x80 ? -IQ1_DELTA : IQ1_DELTA};
        for (int l = 0; l < 4; ++l) {
            const float *g = grid + 8 * idx[l];
            const float dl = l < 2 ? dl1 : dl2;
            for (int j = 0; j < 8; ++j) y[8 * l + j] = dl * (g[j] + delta[l]);
        }
    }
}

static void deq_iq4_nl(const uint8_t *b, float *y) {
    const float d = f16_at(b);
    for (int j = 0; j < 16; ++j) {
        y[j] = d * KVALUES_F[b[2 + j] & 15];
        y[j + 16] = d * KVALUES_F[b[2 + j] >> 4];
    }
}

static void deq_iq4_xs(const uint8_t *b, float *y) {
    const float d = f16_at(b);
    const uint16_t sh = u16_at(b + 2);
    for (int ib = 0; ib < 8; ++ib, y += 32) {
        const int ls = ((b[4 + ib / 2] >> 4 * (ib % 2)) & 15) | (((sh >> 2 * ib) & 3) << 4);
        const float dl = d * (float)(ls - 32);
        const uint8_t *qs = b + 8 + 16 * ib;
        for (int j = 0; j < 16; ++j) {
            y[j] = dl * KVALUES_F[qs[j] & 15];
            y[j + 16] = dl * KVALUES_F[qs[j] >> 4];
        }
    }
}

/* ------------------------------------------------------------------ IQ4 quantize */

/* ggml's quantize_row_iq4_nl_impl with ntry = 7 for one super-block of sb
 * values (32: IQ4_NL, 256: IQ4_XS); qw the super-block's importance or NULL. */
static void quant_iq4(const float *x, const float *qw, int sb, uint8_t *out) {
    const int nb = sb / 32;
    float sigma2 = 0;
    for (int j = 0; j < sb; ++j) sigma2 += x[j] * x[j];
    sigma2 *= 2.f / (float)sb;
    float scales[8];
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < nb; ++ib) {
        const float *xb = x + 32 * ib;
        float w[32];
        if (qw) {
            for (int j = 0; j < 32; ++j) w[j] = qw[32 * ib + j] * sqrtf(sigma2 + xb[j] * xb[j]);
        } else {
            for (int j = 0; j < 32; ++j) w[j] = xb[j] * xb[j];
        }
        float amax = 0, max = 0;
        for (int j = 0; j < 32; ++j) {
            float ax = fabsf(xb[j]);
            if (ax > amax) { amax = ax; max = xb[j]; }
        }
        if (amax < GROUP_MAX_EPS) { scales[ib] = 0; continue; }
        /* trial 0 at d = -max/values[0], trials 1..15 at itry = -7..7; each
         * lane's sums run over j in ggml's order */
        float id[16], sqx[16], sq2[16];
        id[0] = 1 / (-max / (float)KVALUES[0]);
        for (int t = 1; t < 16; ++t) id[t] = (float)(t - 8 + KVALUES[0]) / max;
        for (int t = 0; t < 16; ++t) sqx[t] = sq2[t] = 0;
        for (int j = 0; j < 32; ++j) {
            const float xj = xb[j], wj = w[j];
            for (int t = 0; t < 16; ++t) {
                const float q = KVALUES_F[best_index_iq4nl(id[t] * xj)];
                const float wq = wj * q;
                sqx[t] += wq * xj;
                sq2[t] += wq * q;
            }
        }
        float d = sq2[0] > 0 ? sqx[0] / sq2[0] : 0.f;
        float best = d * sqx[0];
        for (int t = 1; t < 16; ++t) {
            if (sq2[t] > 0 && sqx[t] * sqx[t] > best * sq2[t]) {
                d = sqx[t] / sq2[t];
                best = d * sqx[t];
            }
        }
        scales[ib] = d;
        float abs_d = fabsf(d);
        if (abs_d > amax_scale) { amax_scale = abs_d; max_scale = d; }
    }
    uint8_t L[256];
    uint8_t *qs;
    if (nb > 1) {
        uint16_t scales_h = 0;
        uint8_t *scales_l = out + 4;
        float d = -max_scale / 32;
        uint16_t dh = ws_f32_to_f16(d);
        memcpy(out, &dh, 2);
        float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < nb; ++ib) {
            int l = ws_nearest_int(id * scales[ib]);
            l = imax_c(-32, imin_c(31, l));
            float dl = d * (float)l;
            float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; ++j) L[32 * ib + j] = (uint8_t)best_index_iq4nl(idl * x[32 * ib + j]);
            l += 32;
            if (ib % 2 == 0) scales_l[ib / 2] = (uint8_t)(l & 15);
            else scales_l[ib / 2] |= (uint8_t)((l & 15) << 4);
            scales_h |= (uint16_t)((l >> 4) << 2 * (ib % 8));
        }
        memcpy(out + 2, &scales_h, 2);
        qs = out + 8;
    } else {
        uint16_t dh = ws_f32_to_f16(scales[0]);
        memcpy(out, &dh, 2);
        float id = scales[0] ? 1 / scales[0] : 0;
        for (int j = 0; j < 32; ++j) L[j] = (uint8_t)best_index_iq4nl(id * x[j]);
        qs = out + 2;
    }
    for (int i = 0; i < sb / 32; ++i)
        for (int j = 0; j < 16; ++j) qs[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

/* ------------------------------------------------------------------ grid quantizers */

/* Lane-wise select: where m, a, else b. */
static inline v4f sel4f(v4i m, v4f a, v4f b) { return (v4f)(((v4i)a & m) | ((v4i)b & ~m)); }
static inline v4i sel4i(v4i m, v4i a, v4i b) { return (a & m) | (b & ~m); }

/* ggml's iq2/iq3_find_best_neighbour for up to four scales at once: the
 * candidates of the off-grid point u are walked in list order and every lane
 * keeps ggml's strict-< first minimum of d2 = sum w[i]*diff*diff, diff =
 * s*q[i] - x[i], summed in ggml's order; one lane per scale (the trials of a
 * sub-block that put this group on the same point).  Grid indices into gi.
 * With non-finite input (no candidate below FLT_MAX) ggml aborts; we take
 * grid index 0. */
static void best_neighbours(const grid_t *g, int dim, int u, const float *xv, const float *w, v4f s, int *gi) {
    const size_t off = (size_t)(-g->map[u] - 1);
    const uint16_t *nb = g->nb + off;
    const int n = nb[0];
    v4f best = {FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX};
    v4i bi = {0, 0, 0, 0};
    if (dim == 4) { /* short lists: the distance straight from the grid values */
        for (int j = 1; j <= n; ++j) {
            const float *pg = g->q + 4 * nb[j];
            v4f d2 = {0, 0, 0, 0};
            for (int i = 0; i < 4; ++i) {
                const v4f diff = s * pg[i] - xv[i];
                d2 += w[i] * diff * diff;
            }
            const v4i lt = d2 < best;
            best = sel4f(lt, d2, best);
            bi = sel4i(lt, (v4i){nb[j], nb[j], nb[j], nb[j]}, bi);
        }
    } else { /* 8 values, 3 levels, long lists: the terms per (value, level) once */
        v4f e[64];
        for (int i = 0; i < 8; ++i)
            for (int l = 0; l < 3; ++l) {
                const v4f diff = s * (float)(2 * l + 1) - xv[i];
                e[8 * i + l] = w[i] * diff * diff;
            }
        const uint8_t *o = g->nbo + 8 * off;
        for (int j = 1; j <= n; ++j) {
            v4f d2 = {0, 0, 0, 0};
            for (int i = 0; i < 8; ++i) d2 += e[o[8 * j + i]];
            const v4i lt = d2 < best;
            best = sel4f(lt, d2, best);
            bi = sel4i(lt, (v4i){nb[j], nb[j], nb[j], nb[j]}, bi);
        }
    }
    for (int l = 0; l < 4; ++l) gi[l] = bi[l];
}

/* best_neighbours for one scale on an 8-value grid: the terms of the
 * (value, level) pairs are built across pairs instead of across scales. */
static int best_neighbour8(const grid_t *g, int u, const float *xv, const float *w, float scale) {
    float e[64];
    for (int i = 0; i < 8; ++i)
        for (int l = 0; l < 4; ++l) { /* level 3 is never used; computing it keeps the loop vectorisable */
            const float diff = scale * (float)(2 * l + 1) - xv[i];
            e[8 * i + l] = w[i] * diff * diff;
        }
    const size_t off = (size_t)(-g->map[u] - 1);
    const uint16_t *nb = g->nb + off;
    const uint8_t *o = g->nbo + 8 * off;
    float best = FLT_MAX;
    int gi = 0;
    for (int j = 1; j <= nb[0]; ++j) {
        float d2 = 0;
        for (int i = 0; i < 8; ++i) d2 += e[o[8 * j + i]];
        if (d2 < best) { best = d2; gi = nb[j]; }
    }
    return gi;
}

/* Levels L[t] (n values) of every group for each of T inverse scales id[t]
 * (scale 1/id[t] for the neighbour search): rounded and clamped as ggml,
 * off-grid groups moved to their best neighbour.  Groups with mask[k] == 0
 * are left alone (mask NULL: all); on[t][k] (if given) gets whether the
 * rounded group was on the grid.  The trials that put a group on the same
 * off-grid point are searched together, one lane each. */
static void grid_levels(const grid_t *g, int n, const float *xv, const float *waux, int T, const float *id,
                        const float *scale, const uint8_t *mask, int8_t (*L)[32], uint8_t (*on)[8]) {
    const int dim = g->bits == 3 ? 4 : 8;
    const int kmax1 = (g->bits == 3 ? 8 : 3) - 1;
    /* levels and packed points of every (trial, group), four values per step:
     * ws_nearest_int(0.5f*(id*x - 1)) lane-wise, clamped to 0..kmax-1 */
    int upt[31][8];
    const v4i zero = {0, 0, 0, 0}, top = {kmax1, kmax1, kmax1, kmax1};
    for (int t = 0; t < T; ++t) {
        const float idt = id[t];
        for (int k = 0; k < n / dim; ++k) {
            uint32_t word[2] = {0, 0}; /* the group's levels, one byte each */
            for (int c = 0; c < dim; c += 4) {
                const v4f a = 0.5f * (idt * load4(xv + dim * k + c) - 1) + 12582912.f;
                v4i l;
                memcpy(&l, &a, sizeof l);
                l = (l & 0x007fffff) - 0x00400000;
                l = sel4i(l < zero, zero, l);
                l = sel4i(l > top, top, l);
                const v4c b = __builtin_convertvector(l, v4c);
                memcpy(&L[t][dim * k + c], &b, 4);
                memcpy(&word[c / 4], &b, 4);
            }
            /* levels (one per byte, little endian) -> bits-wide fields of the point */
            if (dim == 4) {
                const uint32_t w = word[0];
                upt[t][k] = (int)((w & 7) | ((w >> 5) & 0x38) | ((w >> 10) & 0x1c0) | ((w >> 15) & 0xe00));
            } else {
                uint32_t u2[2];
                for (int h = 0; h < 2; ++h) {
                    const uint32_t w = word[h];
                    u2[h] = (w & 3) | ((w >> 6) & 0xc) | ((w >> 12) & 0x30) | ((w >> 18) & 0xc0);
                }
                upt[t][k] = (int)(u2[0] | (u2[1] << 8));
            }
        }
    }
    for (int k = 0; k < n / dim; ++k) {
        if (mask && !mask[k]) continue;
        int us[31], pend[31], np = 0;
        for (int t = 0; t < T; ++t) {
            const int u = upt[t][k];
            const int gi = g->map[u];
            if (on) on[t][k] = gi >= 0;
            us[t] = u;
            if (gi < 0) pend[np++] = t;
        }
        /* pending trials ordered by point (insertion sort: a few dozen at most), so
         * that each point's trials form one run */
        for (int p = 1; p < np; ++p) {
            const int t = pend[p];
            int q = p;
            while (q > 0 && us[pend[q - 1]] > us[t]) { pend[q] = pend[q - 1]; --q; }
            pend[q] = t;
        }
        for (int p = 0; p < np;) {
            /* the trials on one point, four at a time */
            const int u = us[pend[p]];
            int lanes[4] = {0, 0, 0, 0}, nl = 0;
            while (p < np && nl < 4 && us[pend[p]] == u) lanes[nl++] = pend[p++];
            float sv[4];
            for (int l = 0; l < 4; ++l) sv[l] = scale[lanes[l < nl ? l : 0]];
            int gi[4];
            if (nl == 1 && dim == 8) gi[0] = best_neighbour8(g, u, xv + 8 * k, waux + 8 * k, sv[0]);
            else best_neighbours(g, dim, u, xv + dim * k, waux + dim * k, load4(sv), gi);
            for (int l = 0; l < nl; ++l) memcpy(L[lanes[l]] + dim * k, g->lev + dim * gi[l], (size_t)dim);
        }
    }
}

enum { FINAL_OFFGRID, FINAL_ALL, FINAL_ALWAYS };

/* The per-sub-block scale search shared by IQ3_XXS, IQ3_S, IQ2_S, IQ2_XS and
 * IQ2_XXS (n = 16 or 32 magnitudes xv, weights w, sqrt weights waux): trial
 * inverse scales (2*kmax-1 + is*step)/denom for is = -tries..tries, best by
 * sumqx^2/sumq2, then a final re-quantization at the best scale.  Returns
 * the scale; L gets the levels (all on the grid). */
static float grid_search(const grid_t *g, int n, const float *xv, const float *w, const float *waux, float denom,
                         float scale, int tries, float step, int on_init, int final_mode, int8_t *L) {
    const int dim = g->bits == 3 ? 4 : 8, ng = n / dim;
    const int kmax = g->bits == 3 ? 8 : 3;
    int8_t Lt[31][32];
    uint8_t ont[31][8];
    float ids[31], scs[31], sqx[31], sq2[31];
    const int T = 2 * tries + 1;
    for (int t = 0; t < T; ++t) {
        ids[t] = ((float)(2 * kmax - 1) + (float)(t - tries) * step) / denom;
        scs[t] = 1 / ids[t];
    }
    grid_levels(g, n, xv, waux, T, ids, scs, NULL, Lt, ont);
    /* every trial's sums in its own lane, each in ggml's element order */
    for (int t0 = 0; t0 < T; t0 += 4) {
        const int t1 = t0 + 1 < T ? t0 + 1 : t0, t2 = t0 + 2 < T ? t0 + 2 : t0, t3 = t0 + 3 < T ? t0 + 3 : t0;
        v4f ax = {0, 0, 0, 0}, a2 = {0, 0, 0, 0};
        for (int i = 0; i < n; ++i) {
            const float wi = w[i], wx = wi * xv[i];
            const v4i l = {Lt[t0][i], Lt[t1][i], Lt[t2][i], Lt[t3][i]};
            const v4f q = __builtin_convertvector(2 * l + 1, v4f);
            ax += wx * q;
            a2 += wi * q * q;
        }
        for (int k = 0; k < 4 && t0 + k < T; ++k) sqx[t0 + k] = ax[k], sq2[t0 + k] = a2[k];
    }
    float best = 0;
    int bt = -1;
    for (int t = 0; t < T; ++t) {
        if (sq2[t] > 0 && sqx[t] * sqx[t] > best * sq2[t]) {
            scale = sqx[t] / sq2[t];
            best = scale * sqx[t];
            bt = t;
        }
    }
    uint8_t on[8];
    if (bt >= 0) {
        memcpy(L, Lt[bt], (size_t)n);
        memcpy(on, ont[bt], (size_t)ng);
    } else {
        memset(L, 0, (size_t)n);
        memset(on, on_init, (size_t)ng);
    }
    int redo = scale > 0;
    if (final_mode != FINAL_ALWAYS) {
        int off = 0;
        for (int k = 0; k < ng; ++k) off += !on[k];
        redo = redo && off > 0;
    }
    if (redo) {
        uint8_t mask[8];
        for (int k = 0; k < ng; ++k) mask[k] = final_mode == FINAL_OFFGRID ? !on[k] : 1;
        const float id = 1 / scale;
        int8_t Lf[1][32];
        memcpy(Lf[0], L, (size_t)n);
        grid_levels(g, n, xv, waux, 1, &id, &scale, mask, Lf, NULL);
        for (int k = 0; k < ng; ++k)
            if (mask[k]) memcpy(L + dim * k, Lf[0] + dim * k, (size_t)dim);
        float sumqx = 0, sumq2 = 0;
        for (int i = 0; i < n; ++i) {
            const float q = (float)(2 * L[i] + 1);
            sumqx += w[i] * xv[i] * q;
            sumq2 += w[i] * q * q;
        }
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    return scale;
}

/* grid index of the levels of group k (they are on the grid; 0 if not, which
 * only non-finite input can cause and where ggml aborts) */
static inline int grid_index_of(const grid_t *g, const int8_t *L) {
    const int dim = g->bits == 3 ? 4 : 8;
    int u = 0;
    for (int i = 0; i < dim; ++i) u |= (L[i] & ((1 << g->bits) - 1)) << (g->bits * i);
    return g->map[u] >= 0 ? g->map[u] : 0;
}

/* sigma2 of a super-block: sum of x*x in element order, over QK_K, times `two` */
static inline float superblock_sigma2(const float *x, int two) {
    float sumx2 = 0;
    for (int i = 0; i < QK_K; ++i) sumx2 += x[i] * x[i];
    return two ? 2 * sumx2 / QK_K : sumx2 / QK_K;
}

/* magnitudes and sign bits of 8-groups; with parity (the ksigns types) an odd
 * number of negatives flips the least important element (first minimum of w*x*x) */
static void group_signs(const float *xb, const float *w, int n, int parity, float *xv, uint8_t *signs) {
    for (int k = 0; k < n / 8; ++k) {
        int nflip = 0;
        uint8_t s = 0;
        for (int i = 0; i < 8; ++i) {
            if (xb[8 * k + i] >= 0) xv[8 * k + i] = xb[8 * k + i];
            else { xv[8 * k + i] = -xb[8 * k + i]; ++nflip; s |= (uint8_t)(1 << i); }
        }
        if (parity && nflip % 2) {
            int imin = 0;
            float min = w[8 * k] * xb[8 * k] * xb[8 * k];
            for (int i = 1; i < 8; ++i) {
                float ax = w[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
                if (ax < min) { min = ax; imin = i; }
            }
            xv[8 * k + imin] = -xv[8 * k + imin];
            s ^= (uint8_t)(1 << imin);
        }
        signs[k] = parity ? (uint8_t)(s & 127) : s;
    }
}

/* importance weights of a sub-block */
static inline void subblock_weights(const float *xb, const float *qw, int n, float sigma2, int plain_sigma, float *w) {
    if (qw) {
        for (int i = 0; i < n; ++i) w[i] = qw[i] * sqrtf(sigma2 + xb[i] * xb[i]);
    } else if (plain_sigma) {
        for (int i = 0; i < n; ++i) w[i] = 0.25f * sigma2 + xb[i] * xb[i];
    } else {
        for (int i = 0; i < n; ++i) w[i] = xb[i] * xb[i];
    }
}

/* A sub-block of the grid types: importance weights w, their square roots
 * waux, magnitudes xv and sign bytes (see group_signs); returns ggml's
 * running max of the magnitudes. */
static inline float prepare_subblock(const float *xb, const float *qw, int n, float sigma2, int plain_sigma,
                                     int parity, float *w, float *waux, float *xv, uint8_t *signs) {
    subblock_weights(xb, qw, n, sigma2, plain_sigma, w);
    for (int i = 0; i < n; ++i) waux[i] = sqrtf(w[i]);
    group_signs(xb, w, n, parity, xv, signs);
    float max = xv[0];
    for (int i = 1; i < n; ++i) max = fmax_c(max, xv[i]);
    return max;
}

/* ggml stores only positive sub-block scales: a negative one ("should never
 * happen" there) is flipped together with the first `count` sign bytes. */
static inline float positive_scale(float scale, uint8_t *signs, int count, uint8_t mask) {
    if (scale < 0) {
        scale = -scale;
        for (int k = 0; k < count; ++k) signs[k] = (uint8_t)(~signs[k] & mask);
    }
    return scale;
}

/* 4-bit super-block code of a sub-block scale: nearest_int(0.5*(id*s-1)) in 0..15 */
static inline int scale_code(float id, float s, int top) {
    int l = ws_nearest_int(0.5f * (id * s - 1));
    return imax_c(0, imin_c(top, l));
}

static void quant_iq3_xxs(const float *x, const float *qw, uint8_t *out) {
    const grid_t *g = &GRIDS[G_IQ3XXS];
    const float sigma2 = superblock_sigma2(x, 1);
    float scales[8], max_scale = 0;
    uint8_t q3[96];
    memset(q3, 0, sizeof q3);
    for (int ib = 0; ib < 8; ++ib) {
        const float *xb = x + 32 * ib;
        float w[32], waux[32], xv[32];
        uint8_t signs[4];
        int8_t L[32];
        const float max = prepare_subblock(xb, qw ? qw + 32 * ib : NULL, 32, sigma2, 0, 1, w, waux, xv, signs);
        if (max < GROUP_MAX_EPS_IQ3_XXS) { scales[ib] = 0; continue; }
        float scale = grid_search(g, 32, xv, w, waux, max, max / 15, 15, 0.2f, 1, FINAL_OFFGRID, L);
        scale = positive_scale(scale, signs, 4, 127);
        for (int k = 0; k < 8; ++k) q3[8 * ib + k] = (uint8_t)grid_index_of(g, L + 4 * k);
        uint32_t ss = signs[0] | (signs[1] << 7) | (signs[2] << 14) | ((uint32_t)signs[3] << 21);
        memcpy(q3 + 64 + 4 * ib, &ss, 4);
        scales[ib] = scale;
        max_scale = fmax_c(max_scale, scale);
    }
    memset(out, 0, 98);
    if (!max_scale) return;
    const float d = max_scale / 31;
    uint16_t dh = ws_f32_to_f16(d * 1.0125f);
    memcpy(out, &dh, 2);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ++ib) {
        uint32_t ss;
        memcpy(&ss, q3 + 64 + 4 * ib, 4);
        ss |= (uint32_t)scale_code(id, scales[ib], 15) << 28;
        memcpy(q3 + 64 + 4 * ib, &ss, 4);
    }
    memcpy(out + 2, q3, 96);
}

/* The tail of quantize_row_iq3_s_impl / iq2_s_impl: d = max_scale / 31 stored
 * as fp16 of d * factor at out[0], and the n sub-block scales as 4-bit codes,
 * two to a byte from out[off]; nothing when every sub-block was zero. */
static void put_scale_nibbles(uint8_t *out, const float *scales, int n, float max_scale,
                              float factor, int off) {
    if (!max_scale) return;
    const float d = max_scale / 31;
    uint16_t dh = ws_f32_to_f16(d * factor);
    memcpy(out, &dh, 2);
    const float id = 1 / d;
    for (int ib = 0; ib < n; ib += 2)
        out[off + ib / 2] = (uint8_t)(scale_code(id, scales[ib], 15) | (scale_code(id, scales[ib + 1], 15) << 4));
}

static void quant_iq3_s(const float *x, const float *qw, uint8_t *out) {
    const grid_t *g = &GRIDS[G_IQ3S];
    memset(out, 0, 110);
    uint8_t *qs = out + 2, *qh = out + 66, *signs_out = out + 74;
    const float sigma2 = superblock_sigma2(x, 1);
    float scales[8], max_scale = 0;
    for (int ib = 0; ib < 8; ++ib) {
        const float *xb = x + 32 * ib;
        float w[32], waux[32], xv[32];
        uint8_t signs[4];
        int8_t L[32];
        const float max = prepare_subblock(xb, qw ? qw + 32 * ib : NULL, 32, sigma2, 0, 0, w, waux, xv, signs);
        if (!max) { scales[ib] = 0; continue; }
        float scale = grid_search(g, 32, xv, w, waux, max, max / 15, 9, 0.2f, 0, FINAL_ALL, L);
        scale = positive_scale(scale, signs, 4, 255);
        for (int k = 0; k < 8; ++k) {
            int gi = grid_index_of(g, L + 4 * k);
            qs[k] = (uint8_t)(gi & 255);
            qh[ib] |= (uint8_t)((gi >> 8) << k);
        }
        /* ggml advances qs and signs only past sub-blocks it quantized */
        qs += 8;
        memcpy(signs_out, signs, 4);
        signs_out += 4;
        scales[ib] = scale;
        max_scale = fmax_c(max_scale, scale);
    }
    put_scale_nibbles(out, scales, 8, max_scale, 1.033f, 106);
}

static void quant_iq2_s(const float *x, const float *qw, uint8_t *out) {
    const grid_t *g = &GRIDS[G_IQ2S];
    memset(out, 0, 82);
    const float sigma2 = superblock_sigma2(x, 1);
    float scales[16], max_scale = 0;
    for (int ib = 0; ib < 16; ++ib) {
        const float *xb = x + 16 * ib;
        float w[16], waux[16], xv[16];
        uint8_t signs[2];
        int8_t L[16];
        const float max = prepare_subblock(xb, qw ? qw + 16 * ib : NULL, 16, sigma2, 1, 0, w, waux, xv, signs);
        if (max < GROUP_MAX_EPS_IQ2_S) { scales[ib] = 0; continue; }
        float scale = grid_search(g, 16, xv, w, waux, max, max / 5, 9, 0.1f, 1, FINAL_OFFGRID, L);
        scale = positive_scale(scale, signs, 2, 255);
        for (int k = 0; k < 2; ++k) {
            int gi = grid_index_of(g, L + 8 * k);
            const int i8 = 2 * ib + k;
            out[2 + i8] = (uint8_t)(gi & 255);
            out[66 + i8 / 4] |= (uint8_t)((gi >> 8) << 2 * (i8 % 4));
            out[34 + i8] = signs[k];
        }
        scales[ib] = scale;
        max_scale = fmax_c(max_scale, scale);
    }
    put_scale_nibbles(out, scales, 16, max_scale, 0.9875f, 74);
}

static void quant_iq2_xxs(const float *x, const float *qw, uint8_t *out) {
    const grid_t *g = &GRIDS[G_IQ2XXS];
    const float sigma2 = superblock_sigma2(x, 0);
    float scales[8], max_scale = 0;
    uint32_t q2[16];
    memset(q2, 0, sizeof q2);
    for (int ib = 0; ib < 8; ++ib) {
        const float *xb = x + 32 * ib;
        float w[32], waux[32], xv[32];
        uint8_t signs[4];
        int8_t L[32];
        const float max = prepare_subblock(xb, qw + 32 * ib, 32, sigma2, 0, 1, w, waux, xv, signs);
        if (max < GROUP_MAX_EPS) { scales[ib] = 0; continue; }
        uint8_t Lqp[32];
        const float scale0 = ws_make_qp_quants(32, 4, xv, Lqp, w); /* the start scale */
        const float eff_max = scale0 * 3;
        if (eff_max <= 0) { scales[ib] = 0; continue; }
        float scale = grid_search(g, 32, xv, w, waux, eff_max, scale0, 6, 0.1f, 1, FINAL_ALWAYS, L);
        scale = positive_scale(scale, signs, 4, 127);
        for (int k = 0; k < 4; ++k) {
            q2[2 * ib] |= (uint32_t)grid_index_of(g, L + 8 * k) << 8 * k;
            q2[2 * ib + 1] |= (uint32_t)signs[k] << 7 * k;
        }
        scales[ib] = scale;
        max_scale = fmax_c(max_scale, scale);
    }
    memset(out, 0, 66);
    if (!max_scale) return;
    const float d = max_scale / 31;
    uint16_t dh = ws_f32_to_f16(d);
    memcpy(out, &dh, 2);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ++ib) q2[2 * ib + 1] |= (uint32_t)scale_code(id, scales[ib], 15) << 28;
    memcpy(out + 2, q2, 64);
}

static void quant_iq2_xs(const float *x, const float *qw, uint8_t *out) {
    const grid_t *g = &GRIDS[G_IQ2XS];
    const float sigma2 = superblock_sigma2(x, 0);
    float scales[16], max_scale = 0;
    uint16_t q2[32];
    memset(q2, 0, sizeof q2);
    for (int ib = 0; ib < 16; ++ib) {
        const float *xb = x + 16 * ib;
        float w[16], waux[16], xv[16];
        uint8_t signs[2];
        int8_t L[16];
        const float max = prepare_subblock(xb, qw + 16 * ib, 16, sigma2, 0, 1, w, waux, xv, signs);
        if (max < GROUP_MAX_EPS) { scales[ib] = 0; continue; }
        float scale = grid_search(g, 16, xv, w, waux, max, max / 5, 9, 0.1f, 1, FINAL_OFFGRID, L);
        scale = positive_scale(scale, signs, 2, 127);
        for (int k = 0; k < 2; ++k) q2[2 * ib + k] = (uint16_t)(grid_index_of(g, L + 8 * k) | (signs[k] << 9));
        scales[ib] = scale;
        max_scale = fmax_c(max_scale, scale);
    }
    memset(out, 0, 74);
    if (!max_scale) return;
    const float d = max_scale / 31;
    uint16_t dh = ws_f32_to_f16(d);
    memcpy(out, &dh, 2);
    const float id = 1 / d;
    for (int ib = 0; ib < 16; ib += 2)
        out[66 + ib / 2] = (uint8_t)(scale_code(id, scales[ib], 15) | (scale_code(id, scales[ib + 1], 15) << 4));
    memcpy(out + 2, q2, 64);
}

/* ------------------------------------------------------------------ IQ1 quantizers */

static const float IQ1_XP[3] = {-1 + IQ1_DELTA, IQ1_DELTA, 1 + IQ1_DELTA};
static const float IQ1_XM[3] = {-1 - IQ1_DELTA, -IQ1_DELTA, 1 - IQ1_DELTA};

/* stable ascending order of n (<= 32) values (ggml's qsort of (value, index)
 * pairs, a stable merge sort in glibc for these sizes), by ranks: value j goes
 * to place #{i: x[i] < x[j]} + #{i < j: x[i] == x[j]}.  Branch-free compares
 * that vectorise; an insertion sort was a fifth of IQ1_S's time in
 * mispredicted shifts. */
WS_INLINE void sort_index(const float *x, int n, int *idx) {
    int r[32];
    uint32_t seen = 0;
    for (int j = 0; j < n; ++j) {
        const float v = x[j];
        int k = 0;
        for (int i = 0; i < n; ++i) k += (x[i] < v) | ((x[i] == v) & (i < j));
        r[j] = k;
        seen |= 1u << k;
    }
    if (seen == (n == 32 ? 0xffffffffu : (1u << n) - 1)) {
        for (int j = 0; j < n; ++j) idx[r[j]] = j;
        return;
    }
    /* NaN breaks the order (ranks collide): insertion sort, which any input keeps in bounds */
    for (int j = 0; j < n; ++j) {
        int k = j;
        while (k > 0 && x[idx[k - 1]] > x[j]) { idx[k] = idx[k - 1]; --k; }
        idx[k] = j;
    }
}

/* ggml's iq1_find_best_neighbour2: the candidate of the off-grid point u
 * nearest at `scale` when level l stands for xx[l], first minimum in list
 * order.  A candidate's d2 is ((0 + t0) + t1) + ... + t7 with terms
 * t_i = w[i]*diff*diff that depend only on (value, level): the terms are
 * computed once, and so are the 81 partial sums over the first four values,
 * which candidates share; each candidate then adds its last four terms, in
 * ggml's order.  ggml's full-grid fallback only runs on non-finite input
 * (where it reads past its arrays); we take grid index 0 there. */
WS_DISPATCH static int iq1_neighbour(const grid_t *g, int u, const float *xv, const float *w, float scale, const float *xx) {
    float e[64], p1[3], p2[9], p3[27], p4[81];
    for (int i = 0; i < 8; ++i)
        for (int l = 0; l < 3; ++l) {
            const float diff = scale * xx[l] - xv[i];
            e[8 * i + l] = w[i] * diff * diff;
        }
    for (int a = 0; a < 3; ++a) p1[a] = 0.f + e[a];
    for (int b = 0; b < 3; ++b)
        for (int a = 0; a < 3; ++a) p2[a + 3 * b] = p1[a] + e[8 + b];
    for (int c = 0; c < 3; ++c)
        for (int a = 0; a < 9; ++a) p3[a + 9 * c] = p2[a] + e[16 + c];
    for (int d = 0; d < 3; ++d)
        for (int a = 0; a < 27; ++a) p4[a + 27 * d] = p3[a] + e[24 + d];
    const size_t off = (size_t)(-g->map[u] - 1);
    const uint16_t *cu = g->nbu + off; /* count, then packed levels */
    for (int j = 0; j <= cu[0]; j += 32) __builtin_prefetch(g->nb + off + j); /* for the winner */
    float best = FLT_MAX;
    int bj = 0;
    /* With every term >= 0 a sum never falls below its partial sums (rounding
     * to nearest is monotone), so a candidate whose first four already reach
     * the best cannot beat it: skipped without changing the outcome. */
    int nonneg = 1;
    for (int i = 0; i < 8; ++i) nonneg &= w[i] >= 0;
    for (int j = 1; j <= cu[0]; ++j) {
        const unsigned uj = cu[j];
        float d2 = p4[IQ1_PREFIX[uj & 255]];
        if (nonneg && !(d2 < best)) continue;
        for (int i = 4; i < 8; ++i) d2 += e[8 * i + ((uj >> 2 * i) & 3)];
        if (d2 < best) best = d2, bj = j;
    }
    return bj ? g->nb[off + bj] : 0;
}

#if WS_HAVE_X86
/* iq1_neighbour across the candidates, sixteen per vector (AVX-512): lane 4*i + l
 * of e[i / 4] holds the term of value i at level l, and a candidate's
 * d2 = ((0 + t0) + t1) + ... + t7 is summed in ggml's order in its lane from
 * terms picked by its packed levels (nbu).  Each lane keeps its first strict
 * minimum; across lanes the smallest value wins, then the earliest candidate:
 * ggml's first minimum in list order.  d2 < FLT_MAX never holding gives grid
 * index 0, as the portable walk. */
WS_AVX512 static int iq1_neighbour_x86(const grid_t *g, int u, const float *xv, const float *w,
                                       float scale, const float *xx) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i three = _mm512_set1_epi32(3);
    const __m512i at_value = _mm512_srli_epi32(lane, 2);
    const __m512 X = _mm512_maskz_loadu_ps(0xff, xv), W = _mm512_maskz_loadu_ps(0xff, w);
    /* scale * xx[l] per lane; l == 3 (no level) reads the zero past the three */
    const __m512 SQ = _mm512_mul_ps(
        _mm512_set1_ps(scale),
        _mm512_permutexvar_ps(_mm512_and_si512(lane, three), _mm512_maskz_loadu_ps(0x7, xx)));
    __m512 e[2];
    for (int h = 0; h < 2; ++h) {
        const __m512i at = _mm512_add_epi32(at_value, _mm512_set1_epi32(4 * h));
        const __m512 diff = _mm512_sub_ps(SQ, _mm512_permutexvar_ps(at, X));
        e[h] = _mm512_mul_ps(_mm512_mul_ps(_mm512_permutexvar_ps(at, W), diff), diff);
    }
    const size_t off = (size_t)(-g->map[u] - 1);
    const int cnt = g->nbu[off];
    const uint16_t *ci = g->nb + off + 1, *cu = g->nbu + off + 1;
    for (int j = 0; j <= cnt; j += 32) __builtin_prefetch(g->nb + off + j); /* for the winner */
    __m512 best = _mm512_set1_ps(FLT_MAX);
    __m512i best_j = _mm512_setzero_si512();
    for (int j = 0; j < cnt; j += 16) {
        const __mmask16 m = cnt - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cnt - j)) - 1);
        const __m512i U = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, cu + j));
        __m512 d2 = _mm512_setzero_ps();
        for (int i = 0; i < 8; ++i) {
            const __m512i li = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(U, 2 * i), three),
                                               _mm512_set1_epi32(4 * (i & 3)));
            d2 = _mm512_add_ps(d2, _mm512_permutexvar_ps(li, e[i >> 2]));
        }
        const __mmask16 lt = _mm512_mask_cmp_ps_mask(m, d2, best, _CMP_LT_OQ);
        best = _mm512_mask_mov_ps(best, lt, d2);
        best_j = _mm512_mask_mov_epi32(best_j, lt, _mm512_add_epi32(lane, _mm512_set1_epi32(j)));
    }
    const float mn = _mm512_reduce_min_ps(best);
    if (!(mn < FLT_MAX)) return 0;
    const __mmask16 eq = _mm512_cmp_ps_mask(best, _mm512_set1_ps(mn), _CMP_EQ_OQ);
    return ci[_mm512_mask_reduce_min_epi32(eq, best_j)];
}
#endif

/* grid indices of the 8-groups of levels L (n values), moving off-grid groups;
 * xx(k) the level values of group k.  Returns 1 if all were on the grid.
 * x86: the AVX-512 neighbour walk (same result). */
WS_INLINE int iq1_groups(const grid_t *g, int n, const int8_t *L, const float *xb, const float *w,
                         float scale, const float *const *xx, int *index, int x86) {
    int all_on = 1;
    for (int k = 0; k < n / 8; ++k) {
        int u = 0;
        for (int j = 0; j < 8; ++j) u |= L[8 * k + j] << 2 * j;
        int gi = g->map[u];
        if (gi < 0) {
            all_on = 0;
#if WS_HAVE_X86
            if (x86)
                gi = iq1_neighbour_x86(g, u, xb + 8 * k, w + 8 * k, scale, xx[k]);
            else
#endif
                gi = iq1_neighbour(g, u, xb + 8 * k, w + 8 * k, scale, xx[k]);
        }
        index[k] = gi;
    }
    (void)x86;
    return all_on;
}

WS_DISPATCH static void quant_iq1_s(const float *x, const float *qw, uint8_t *out) {
    const grid_t *g = &GRIDS[G_IQ1S];
    memset(out, 0, 50);
    const float sigma2 = superblock_sigma2(x, 1);
    float scales[8], max_scale = 0;
    int shifts[8];
    uint16_t qh[8] = {0};
    for (int ib = 0; ib < 8; ++ib) {
        const float *xb = x + 32 * ib;
        float w[32];
        subblock_weights(xb, qw + 32 * ib, 32, sigma2, 0, w);
        float max = fabsf(xb[0]);
        for (int i = 1; i < 32; ++i) max = fmax_c(max, fabsf(xb[i]));
        scales[ib] = 0;
        shifts[ib] = 1;
        if (max < GROUP_MAX_EPS_IQ1_S) continue;
        int idx[32];
        sort_index(xb, 32, idx);
        float sumx[40], sumw[40];
        sumx[0] = sumw[0] = 0;
        for (int j = 0; j < 32; ++j) {
            int i = idx[j];
            sumx[j + 1] = sumx[j] + w[i] * xb[i];
            sumw[j + 1] = sumw[j] + w[i];
        }
        for (int j = 33; j < 40; ++j) sumx[j] = sumx[32], sumw[j] = sumw[32]; /* lane padding */
        float best_score = -FLT_MAX, scale = max;
        int besti1 = -1, besti2 = -1, best_shift = 0;
        for (int i1 = 0; i1 <= 32; ++i1) {
            const float ax = sumx[i1] - sumx[0], aw = sumw[i1] - sumw[0];
            for (int i2 = i1; i2 <= 32; i2 += 8) {
                /* eight consecutive i2 in lanes; the sums are ggml's expressions lane by lane */
                const v8f sx2 = load8(sumx + i2), sw2 = load8(sumw + i2);
                const v8f bx = sx2 - sumx[i1], cx = sumx[32] - sx2;
                const v8f bw = sw2 - sumw[i1], cw = sumw[32] - sw2;
                v8f qx[2], q2[2];
                qx[0] = ax * IQ1_XP[0] + bx * IQ1_XP[1] + cx * IQ1_XP[2];
                q2[0] = aw * IQ1_XP[0] * IQ1_XP[0] + bw * IQ1_XP[1] * IQ1_XP[1] + cw * IQ1_XP[2] * IQ1_XP[2];
                qx[1] = ax * IQ1_XM[0] + bx * IQ1_XM[1] + cx * IQ1_XM[2];
                q2[1] = aw * IQ1_XM[0] * IQ1_XM[0] + bw * IQ1_XM[1] * IQ1_XM[1] + cw * IQ1_XM[2] * IQ1_XM[2];
                const int nl = 33 - i2 < 8 ? 33 - i2 : 8;
                /* ggml updates only where sumq2 > 0 && sumqx^2 > best*sumq2; while no
                 * lane passes against the current best, nothing changes */
                if (!any_improves8(qx, q2, 2, best_score, nl)) continue;
                for (int l = 0; l < nl; ++l)
                    for (int h = 0; h < 2; ++h) {
                        const float sqx = qx[h][l], sq2 = q2[h][l];
                        if (sq2 > 0 && sqx * sqx > best_score * sq2) {
                            scale = sqx / sq2; best_score = scale * sqx;
                            besti1 = i1; besti2 = i2 + l; best_shift = h == 0 ? 1 : -1;
                        }
                    }
            }
        }
        if (besti1 < 0 || besti2 < 0 || best_shift == 0) continue;
        int8_t L[32];
        for (int j = 0; j < 32; ++j) L[idx[j]] = (int8_t)(j < besti1 ? 0 : j < besti2 ? 1 : 2);
        if (scale < 0) {
            for (int j = 0; j < 32; ++j) L[j] = (int8_t)(2 - L[j]);
            scale = -scale;
            best_shift = -best_shift;
        }
        const float *xx = best_shift == 1 ? IQ1_XP : IQ1_XM;
        const float *xxs[4] = {xx, xx, xx, xx};
        int index[4];
        if (!iq1_groups(g, 32, L, xb, w, scale, xxs, index, 0)) {
            float sumqx = 0, sumq2 = 0;
            for (int k = 0; k < 4; ++k) {
                const int8_t *pl = g->lev + 8 * index[k];
                for (int j = 0; j < 8; ++j) {
                    float wj = w[8 * k + j], q = xx[pl[j]];
                    sumqx += wj * q * xb[8 * k + j];
                    sumq2 += wj * q * q;
                }
            }
            if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
        }
        uint16_t h = 0;
        for (int k = 0; k < 4; ++k) {
            out[2 + 4 * ib + k] = (uint8_t)(index[k] & 255);
            h |= (uint16_t)((index[k] >> 8) << 3 * k);
        }
        qh[ib] = h;
        scales[ib] = scale;
        shifts[ib] = best_shift;
        max_scale = fmax_c(max_scale, scale);
    }
    if (max_scale) {
        const float d = max_scale / 15;
        uint16_t dh = ws_f32_to_f16(d * 1.125f);
        memcpy(out, &dh, 2);
        const float id = 1 / d;
        for (int ib = 0; ib < 8; ++ib) {
            int l = scale_code(id, scales[ib], 7);
            if (shifts[ib] == -1) l |= 8;
            qh[ib] |= (uint16_t)(l << 12);
        }
    }
    memcpy(out + 34, qh, 16);
}

/* IQ1_M's constants of ggml's collapsed split sums (the same float expressions) */
#define IQ1M_CP1 (IQ1_XP[0] * IQ1_XP[0] - IQ1_XP[1] * IQ1_XP[1])
#define IQ1M_CP2 (IQ1_XP[1] * IQ1_XP[1] - IQ1_XP[2] * IQ1_XP[2])
#define IQ1M_CM1 (IQ1_XM[0] * IQ1_XM[0] - IQ1_XM[1] * IQ1_XM[1])
#define IQ1M_CM2 (IQ1_XM[1] * IQ1_XM[1] - IQ1_XM[2] * IQ1_XM[2])

/* Lane helpers of the portable IQ1_M split search (select, exact max/min). */
static inline v8f sel8f(v8i m, v8f a, v8f b) { return (v8f)(((v8i)a & m) | ((v8i)b & ~m)); }
static inline v8i sel8i(v8i m, v8i a, v8i b) { return (a & m) | (b & ~m); }
static inline v8f max8f(v8f a, v8f b) { return sel8f(a > b, a, b); }
static inline v8i min8i(v8i a, v8i b) { return sel8i(a < b, a, b); }
static inline v8i max8i(v8i a, v8i b) { return sel8i(a > b, a, b); }
static inline int hmin8i(v8i a) {
    a = min8i(a, __builtin_shuffle(a, (v8i){4, 5, 6, 7, 0, 1, 2, 3}));
    a = min8i(a, __builtin_shuffle(a, (v8i){2, 3, 0, 1, 6, 7, 4, 5}));
    return imin_c(a[0], a[1]);
}
static inline int hmax8i(v8i a) {
    a = max8i(a, __builtin_shuffle(a, (v8i){4, 5, 6, 7, 0, 1, 2, 3}));
    a = max8i(a, __builtin_shuffle(a, (v8i){2, 3, 0, 1, 6, 7, 4, 5}));
    return imax_c(a[0], a[1]);
}
/* lane l: the max of lanes < l (-inf for lane 0); max is exact, any grouping */
static inline v8f excl_prefix_max8(v8f a) {
    const v8f n = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                   -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    a = __builtin_shuffle(a, n, (v8i){8, 0, 1, 2, 3, 4, 5, 6});
    a = max8f(a, __builtin_shuffle(a, n, (v8i){8, 0, 1, 2, 3, 4, 5, 6}));
    a = max8f(a, __builtin_shuffle(a, n, (v8i){8, 8, 0, 1, 2, 3, 4, 5}));
    return max8f(a, __builtin_shuffle(a, n, (v8i){8, 8, 8, 8, 0, 1, 2, 3}));
}

/* ggml's split search of an IQ1_M sub-block over the per-half prefix sums px,
 * pw (17 used, padded to 32) and their totals: (i1, i2) for i1 <= i2 in order,
 * four sign choices k each.  Returns best_k (-1: none) and sets scale, i1, i2.
 *
 * ggml runs the candidates in the order (pair, k); one with sumq2 > 0 "passes"
 * against the best b when sumqx^2 > fl(b*sumq2), and a passing candidate c
 * becomes the new best (a record) with b = fl(fl(sumqx/sumq2)*sumqx) =: S_c.
 * A sub-block sets ~40 records, and replaying each one (divide, multiply,
 * re-test: one long dependency chain) was most of the search.  Only the last
 * record decides the result, and the state after a record c is (S_c, c)
 * whatever came before it.  So the search jumps from record to record:
 *  - passing is monotone in b (sumq2 > 0: fl(b*sumq2) never decreases as b
 *    grows), and the best in force when c is reached is b or the S of an
 *    earlier candidate; so if c passes against the max of b and every earlier
 *    S (NaN counted as +inf), c is certainly a record: jump to the last such c;
 *  - if there is none, the first candidate passing against b is the next
 *    record (those before it fail against the same b, as in ggml).
 * A step is done when nothing after the last record passes against its S. */
WS_INLINE int iq1m_split(const float (*px)[32], const float (*pw)[32], const float *txs,
                         const float *tws, float *scale, int *besti1, int *besti2) {
    const float p2 = IQ1_XP[2], m2 = IQ1_XM[2];
    const float cp1 = IQ1M_CP1, cp2 = IQ1M_CP2, cm1 = IQ1M_CM1, cm2 = IQ1M_CM2;
    float best_score = -FLT_MAX;
    int best_k = -1;
    for (int i1 = 0; i1 <= 16; ++i1) {
        for (int i2 = i1; i2 <= 16; i2 += 8) {
            /* eight consecutive i2 in lanes; the sums are ggml's expressions lane by lane */
            v8f qx_p[2], qx_m[2], q2_p[2], q2_m[2], sumqx[4], sumq2[4];
            for (int h = 0; h < 2; ++h) {
                const v8f sx = px[h][i1] + load8(px[h] + i2);
                const v8f pw2 = load8(pw[h] + i2);
                qx_p[h] = txs[h] * p2 - sx;
                qx_m[h] = txs[h] * m2 - sx;
                q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw2 * cp2;
                q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw2 * cm2;
            }
            sumqx[0] = qx_p[0] + qx_p[1];
            sumqx[1] = qx_p[0] + qx_m[1];
            sumqx[2] = qx_m[0] + qx_p[1];
            sumqx[3] = qx_m[0] + qx_m[1];
            sumq2[0] = q2_p[0] + q2_p[1];
            sumq2[1] = q2_p[0] + q2_m[1];
            sumq2[2] = q2_m[0] + q2_p[1];
            sumq2[3] = q2_m[0] + q2_m[1];
            const int nl = 17 - i2 < 8 ? 17 - i2 : 8;
            if (!any_improves8(sumqx, sumq2, 4, best_score, nl)) continue;
            /* ggml's updates over the candidates t = 4*l + k of this step, by jumps
             * to records (above) */
            const v8i lane = {0, 1, 2, 3, 4, 5, 6, 7}, none = {99, 99, 99, 99, 99, 99, 99, 99};
            const v8f ninf = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                              -INFINITY, -INFINITY, -INFINITY, -INFINITY};
            v8i alive[4];
            v8f qq[4], Sx[4];
            float fsc[4][8], fs[4][8];
            for (int k = 0; k < 4; ++k) {
                const v8f sc = sumqx[k] / sumq2[k], sv = sc * sumqx[k];
                memcpy(fsc[k], &sc, sizeof fsc[k]), memcpy(fs[k], &sv, sizeof fs[k]);
                alive[k] = (sumq2[k] > 0) & (lane < nl);
                qq[k] = sumqx[k] * sumqx[k];
                Sx[k] = sel8f(sv != sv, -ninf, sv); /* NaN as +inf */
            }
            for (;;) {
                const float b = best_score;
                const v8f B = {b, b, b, b, b, b, b, b};
                v8i first = none, last = -none;
                v8f Sa[4];
                for (int k = 0; k < 4; ++k) {
                    const v8i code = 4 * lane + k;
                    first = min8i(first, sel8i(alive[k] & (qq[k] > B * sumq2[k]), code, none));
                    Sa[k] = sel8f(alive[k], Sx[k], ninf);
                }
                const int t_first = hmin8i(first);
                if (t_first == 99) break;
                v8f bound =
                    max8f(B, excl_prefix_max8(max8f(max8f(Sa[0], Sa[1]), max8f(Sa[2], Sa[3]))));
                for (int k = 0; k < 4; ++k) {
                    const v8i code = 4 * lane + k;
                    last = max8i(last, sel8i(alive[k] & (qq[k] > bound * sumq2[k]), code, -none));
                    bound = max8f(bound, Sa[k]);
                }
                const int t_last = hmax8i(last);
                const int t = t_last >= 0 ? t_last : t_first;
                const int l = t >> 2, k = t & 3;
                *scale = fsc[k][l];
                best_score = fs[k][l];
                *besti1 = i1, *besti2 = i2 + l, best_k = k;
                for (int kk = 0; kk < 4; ++kk) alive[kk] &= 4 * lane + kk > t;
            }
        }
    }
    return best_k;
}

#if WS_HAVE_X86
/* The 153 (i1, i2) pairs of the split search in ggml's order, padded to ten
 * vectors of sixteen (filled with the G_IQ1S tables). */
#define IQ1M_PAIRS 153
static int32_t IQ1M_I1[160], IQ1M_I2[160];

static void iq1m_pairs_init(void) {
    int p = 0;
    for (int i1 = 0; i1 <= 16; ++i1)
        for (int i2 = i1; i2 <= 16; ++i2) IQ1M_I1[p] = i1, IQ1M_I2[p++] = i2;
    for (; p < 160; ++p) IQ1M_I1[p] = IQ1M_I2[p] = 16;
}

/* Exclusive prefix max over the lanes of a: lane l gets the max of lanes < l
 * (-inf for lane 0).  Max is exact, so the grouping does not matter. */
WS_AVX512 static inline __m512 excl_prefix_max_x86(__m512 a) {
    const __m512i ninf = _mm512_castps_si512(_mm512_set1_ps(-INFINITY));
    __m512i t = _mm512_alignr_epi32(_mm512_castps_si512(a), ninf, 15);
    t = _mm512_castps_si512(_mm512_max_ps(_mm512_castsi512_ps(t),
                                          _mm512_castsi512_ps(_mm512_alignr_epi32(t, ninf, 15))));
    t = _mm512_castps_si512(_mm512_max_ps(_mm512_castsi512_ps(t),
                                          _mm512_castsi512_ps(_mm512_alignr_epi32(t, ninf, 14))));
    t = _mm512_castps_si512(_mm512_max_ps(_mm512_castsi512_ps(t),
                                          _mm512_castsi512_ps(_mm512_alignr_epi32(t, ninf, 12))));
    t = _mm512_castps_si512(_mm512_max_ps(_mm512_castsi512_ps(t),
                                          _mm512_castsi512_ps(_mm512_alignr_epi32(t, ninf, 8))));
    return _mm512_castsi512_ps(t);
}

/* iq1m_split with the pairs packed sixteen to a vector (AVX-512): every lane
 * computes ggml's expressions for its pair, and the updates are resolved by
 * iq1m_split's jumps to records, on lane masks. */
WS_AVX512 static int iq1m_split_x86(const float (*px)[32], const float (*pw)[32], const float *txs,
                                    const float *tws, float *scale, int *besti1, int *besti2) {
    const float p2 = IQ1_XP[2], m2 = IQ1_XM[2];
    const __m512 cp1 = _mm512_set1_ps(IQ1M_CP1), cp2 = _mm512_set1_ps(IQ1M_CP2);
    const __m512 cm1 = _mm512_set1_ps(IQ1M_CM1), cm2 = _mm512_set1_ps(IQ1M_CM2);
    const __m512 zero = _mm512_setzero_ps(), ninf = _mm512_set1_ps(-INFINITY);
    const __m512 pinf = _mm512_set1_ps(INFINITY);
    __m512 PX[2][2], PW[2][2], TXP[2], TXM[2], TWP[2], TWM[2];
    for (int h = 0; h < 2; ++h) {
        PX[h][0] = _mm512_loadu_ps(px[h]), PX[h][1] = _mm512_maskz_loadu_ps(1, px[h] + 16);
        PW[h][0] = _mm512_loadu_ps(pw[h]), PW[h][1] = _mm512_maskz_loadu_ps(1, pw[h] + 16);
        TXP[h] = _mm512_set1_ps(txs[h] * p2), TXM[h] = _mm512_set1_ps(txs[h] * m2);
        TWP[h] = _mm512_set1_ps(tws[h] * p2 * p2), TWM[h] = _mm512_set1_ps(tws[h] * m2 * m2);
    }
    float best_score = -FLT_MAX;
    int best_k = -1;
    for (int v = 0; v < 160; v += 16) {
        const __mmask16 valid =
            v + 16 <= IQ1M_PAIRS ? (__mmask16)0xffff : (__mmask16)((1u << (IQ1M_PAIRS - v)) - 1);
        const __m512i I1 = _mm512_loadu_si512(IQ1M_I1 + v), I2 = _mm512_loadu_si512(IQ1M_I2 + v);
        __m512 qx_p[2], qx_m[2], q2_p[2], q2_m[2];
        for (int h = 0; h < 2; ++h) {
            const __m512 x1 = _mm512_permutex2var_ps(PX[h][0], I1, PX[h][1]);
            const __m512 x2 = _mm512_permutex2var_ps(PX[h][0], I2, PX[h][1]);
            const __m512 w1 = _mm512_permutex2var_ps(PW[h][0], I1, PW[h][1]);
            const __m512 w2 = _mm512_permutex2var_ps(PW[h][0], I2, PW[h][1]);
            const __m512 sx = _mm512_add_ps(x1, x2);
            qx_p[h] = _mm512_sub_ps(TXP[h], sx);
            qx_m[h] = _mm512_sub_ps(TXM[h], sx);
            q2_p[h] = _mm512_add_ps(_mm512_add_ps(TWP[h], _mm512_mul_ps(w1, cp1)),
                                    _mm512_mul_ps(w2, cp2));
            q2_m[h] = _mm512_add_ps(_mm512_add_ps(TWM[h], _mm512_mul_ps(w1, cm1)),
                                    _mm512_mul_ps(w2, cm2));
        }
        const __m512 sqx[4] = {_mm512_add_ps(qx_p[0], qx_p[1]), _mm512_add_ps(qx_p[0], qx_m[1]),
                               _mm512_add_ps(qx_m[0], qx_p[1]), _mm512_add_ps(qx_m[0], qx_m[1])};
        const __m512 sq2[4] = {_mm512_add_ps(q2_p[0], q2_p[1]), _mm512_add_ps(q2_p[0], q2_m[1]),
                               _mm512_add_ps(q2_m[0], q2_p[1]), _mm512_add_ps(q2_m[0], q2_m[1])};
        __m512 qq[4];
        __mmask16 alive[4], pass[4]; /* alive: sumq2 > 0 and not before the last record */
        __m512 B = _mm512_set1_ps(best_score);
        for (int k = 0; k < 4; ++k) {
            qq[k] = _mm512_mul_ps(sqx[k], sqx[k]);
            alive[k] = _mm512_mask_cmp_ps_mask(valid, sq2[k], zero, _CMP_GT_OQ);
            pass[k] =
                _mm512_mask_cmp_ps_mask(alive[k], qq[k], _mm512_mul_ps(B, sq2[k]), _CMP_GT_OQ);
        }
        if (!(pass[0] | pass[1] | pass[2] | pass[3])) continue;
        /* the scale and score each candidate would set, ggml's two operations */
        float fsc[4][16], fs[4][16];
        __m512 Sx[4]; /* S for the max bound: NaN as +inf */
        for (int k = 0; k < 4; ++k) {
            const __m512 sc = _mm512_div_ps(sqx[k], sq2[k]), S = _mm512_mul_ps(sc, sqx[k]);
            _mm512_storeu_ps(fsc[k], sc), _mm512_storeu_ps(fs[k], S);
            Sx[k] = _mm512_mask_mov_ps(S, _mm512_cmp_ps_mask(S, S, _CMP_UNORD_Q), pinf);
        }
        for (;;) {
            /* bound_c = max(b, S of the alive candidates before c) */
            __m512 Sa[4];
            for (int k = 0; k < 4; ++k) Sa[k] = _mm512_mask_mov_ps(ninf, alive[k], Sx[k]);
            const __m512 lane_max =
                _mm512_max_ps(_mm512_max_ps(Sa[0], Sa[1]), _mm512_max_ps(Sa[2], Sa[3]));
            __m512 bound = _mm512_max_ps(B, excl_prefix_max_x86(lane_max));
            unsigned sure[4], any_sure = 0;
            for (int k = 0; k < 4; ++k) {
                sure[k] = _mm512_mask_cmp_ps_mask(alive[k], qq[k], _mm512_mul_ps(bound, sq2[k]),
                                                  _CMP_GT_OQ);
                any_sure |= sure[k];
                bound = _mm512_max_ps(bound, Sa[k]);
            }
            int l, k;
            if (any_sure) { /* the last certain record */
                l = 31 - __builtin_clz(any_sure);
                k = (sure[3] >> l) & 1 ? 3 : (sure[2] >> l) & 1 ? 2 : (sure[1] >> l) & 1 ? 1 : 0;
            } else { /* the first candidate passing against b */
                l = __builtin_ctz((unsigned)(pass[0] | pass[1] | pass[2] | pass[3]));
                k = (pass[0] >> l) & 1 ? 0 : (pass[1] >> l) & 1 ? 1 : (pass[2] >> l) & 1 ? 2 : 3;
            }
            *scale = fsc[k][l];
            best_score = fs[k][l];
            *besti1 = IQ1M_I1[v + l], *besti2 = IQ1M_I2[v + l], best_k = k;
            /* what follows (l, k): lanes after l, and lane l for the later k */
            const __mmask16 after = (__mmask16)(0xffffu << (l + 1));
            B = _mm512_set1_ps(best_score);
            unsigned any = 0;
            for (int kk = 0; kk < 4; ++kk) {
                alive[kk] &= after | (kk > k ? (__mmask16)(1u << l) : 0);
                pass[kk] = _mm512_mask_cmp_ps_mask(alive[kk], qq[kk], _mm512_mul_ps(B, sq2[kk]),
                                                   _CMP_GT_OQ);
                any |= pass[kk];
            }
            if (!any) break;
        }
    }
    return best_k;
}
#endif

/* One IQ1_M super-block; x86: the AVX-512 split search and neighbour walk
 * (same bytes). */
WS_INLINE void iq1m_block(const float *x, const float *qw, uint8_t *out, int x86) {
    const grid_t *g = &GRIDS[G_IQ1S];
    static const uint8_t masks[4] = {0x00, 0x80, 0x08, 0x88};
    memset(out, 0, 56);
    uint8_t *qs = out, *qh = out + 32;
    const float sigma2 = superblock_sigma2(x, 1);
    float scales[16], max_scale = 0;
    int shifts[16];
    for (int ib = 0; ib < 16; ++ib) {
        const float *xb = x + 16 * ib;
        float w[16];
        subblock_weights(xb, qw ? qw + 16 * ib : NULL, 16, sigma2, 0, w);
        float max = fabsf(xb[0]);
        for (int i = 1; i < 16; ++i) max = fmax_c(max, fabsf(xb[i]));
        scales[ib] = 0;
        shifts[ib] = 0;
        if (max < GROUP_MAX_EPS_IQ1_M) continue;
        int idx[16];
        sort_index(xb, 16, idx);
        float px[2][32], pw[2][32];
        px[0][0] = px[1][0] = pw[0][0] = pw[1][0] = 0;
        for (int j = 0; j < 16; ++j) {
            const int i = idx[j], h = i < 8 ? 0 : 1;
            px[h][j + 1] = px[h][j] + w[i] * xb[i];
            px[1 - h][j + 1] = px[1 - h][j];
            pw[h][j + 1] = pw[h][j] + w[i];
            pw[1 - h][j + 1] = pw[1 - h][j];
        }
        const float txs[2] = {px[0][16], px[1][16]}, tws[2] = {pw[0][16], pw[1][16]};
        for (int h = 0; h < 2; ++h)
            for (int j = 17; j < 32; ++j)
                px[h][j] = px[h][16], pw[h][j] = pw[h][16]; /* lane padding */
        float scale = max;
        int besti1 = -1, besti2 = -1, best_k;
#if WS_HAVE_X86
        if (x86)
            best_k = iq1m_split_x86(px, pw, txs, tws, &scale, &besti1, &besti2);
        else
#endif
            best_k = iq1m_split(px, pw, txs, tws, &scale, &besti1, &besti2);
        if (besti1 < 0 || besti2 < 0 || best_k < 0) continue;
        int8_t L[16];
        for (int j = 0; j < 16; ++j) L[idx[j]] = (int8_t)(j < besti1 ? 0 : j < besti2 ? 1 : 2);
        if (scale < 0) {
            for (int j = 0; j < 16; ++j) L[j] = (int8_t)(2 - L[j]);
            scale = -scale;
            best_k = 3 - best_k;
        }
        const float *xxs[2] = {best_k < 2 ? IQ1_XP : IQ1_XM, best_k % 2 == 0 ? IQ1_XP : IQ1_XM};
        int index[2];
        if (!iq1_groups(g, 16, L, xb, w, scale, xxs, index, x86)) {
            float sumqx = 0, sumq2 = 0;
            for (int k = 0; k < 2; ++k) {
                const int8_t *pl = g->lev + 8 * index[k];
                for (int j = 0; j < 8; ++j) {
                    float wj = w[8 * k + j], q = xxs[k][pl[j]];
                    sumqx += wj * q * xb[8 * k + j];
                    sumq2 += wj * q * q;
                }
            }
            if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
        }
        qs[2 * ib] = (uint8_t)(index[0] & 255);
        qs[2 * ib + 1] = (uint8_t)(index[1] & 255);
        qh[ib] = (uint8_t)((index[0] >> 8) | ((index[1] >> 8) << 4));
        scales[ib] = scale;
        shifts[ib] = best_k;
        max_scale = fmax_c(max_scale, scale);
    }
    if (!max_scale) return;
    uint16_t sc[4] = {0, 0, 0, 0};
    float d = max_scale / 15;
    const float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int ib = 0; ib < 16; ++ib) {
        const int l = scale_code(id, scales[ib], 7);
        sc[ib / 4] |= (uint16_t)(l << 3 * (ib % 4));
        qh[ib] |= masks[shifts[ib]];
        const float *xb = x + 16 * ib;
        float w[16];
        subblock_weights(xb, qw ? qw + 16 * ib : NULL, 16, sigma2, 0, w);
        for (int k = 0; k < 2; ++k) {
            const float *xx = k == 0 ? (shifts[ib] < 2 ? IQ1_XP : IQ1_XM) : (shifts[ib] % 2 == 0 ? IQ1_XP : IQ1_XM);
            const int8_t *pl = g->lev + 8 * (qs[2 * ib + k] + ((qh[ib] << (8 - 4 * k)) & 0x700));
            for (int j = 0; j < 8; ++j) {
                float wj = w[8 * k + j], q = xx[pl[j]] * (float)(2 * l + 1);
                sumqx += wj * q * xb[8 * k + j];
                sumq2 += wj * q * q;
            }
        }
    }
    if (sumq2 > 0) d = sumqx / sumq2;
    const uint16_t s = ws_f32_to_f16(d * 1.1125f);
    sc[0] |= (uint16_t)((s & 0x000f) << 12);
    sc[1] |= (uint16_t)((s & 0x00f0) << 8);
    sc[2] |= (uint16_t)((s & 0x0f00) << 4);
    sc[3] |= (uint16_t)(s & 0xf000);
    memcpy(out + 48, sc, 8);
    (void)x86;
}

WS_DISPATCH static void quant_iq1_m(const float *x, const float *qw, uint8_t *out) {
    iq1m_block(x, qw, out, 0);
}

#if WS_HAVE_X86
WS_AVX512 static void quant_iq1_m_x86(const float *x, const float *qw, uint8_t *out) {
    iq1m_block(x, qw, out, 1);
}
#endif

/* ------------------------------------------------------------------ type table */

typedef void (*deq_fn)(const uint8_t *, float *);
typedef void (*quant_fn)(const float *, const float *, uint8_t *);

typedef struct {
    int id;
    const char *name;
    int block_size, type_size;
    deq_fn deq;
    int grid;          /* the grid the type reads (-1: none) */
    int needs_imatrix; /* ggml asserts an imatrix */
} type_info;

static void quant_iq4_nl(const float *x, const float *qw, uint8_t *out) { quant_iq4(x, qw, 32, out); }
static void quant_iq4_xs(const float *x, const float *qw, uint8_t *out) { quant_iq4(x, qw, 256, out); }

static const type_info TYPES[] = {
    {T_IQ2_XXS, "IQ2_XXS", 256, 66, deq_iq2_xxs, G_IQ2XXS, 1},
    {T_IQ2_XS, "IQ2_XS", 256, 74, deq_iq2_xs, G_IQ2XS, 1},
    {T_IQ3_XXS, "IQ3_XXS", 256, 98, deq_iq3_xxs, G_IQ3XXS, 0},
    {T_IQ1_S, "IQ1_S", 256, 50, deq_iq1_s, G_IQ1S, 1},
    {T_IQ4_NL, "IQ4_NL", 32, 18, deq_iq4_nl, -1, 0},
    {T_IQ3_S, "IQ3_S", 256, 110, deq_iq3_s, G_IQ3S, 0},
    {T_IQ2_S, "IQ2_S", 256, 82, deq_iq2_s, G_IQ2S, 0},
    {T_IQ4_XS, "IQ4_XS", 256, 136, deq_iq4_xs, -1, 0},
    {T_IQ1_M, "IQ1_M", 256, 56, deq_iq1_m, G_IQ1S, 0},
};

static quant_fn quantizer(int id) {
    switch (id) {
    case T_IQ2_XXS: return quant_iq2_xxs;
    case T_IQ2_XS: return quant_iq2_xs;
    case T_IQ3_XXS: return quant_iq3_xxs;
    case T_IQ1_S: return quant_iq1_s;
    case T_IQ4_NL: return quant_iq4_nl;
    case T_IQ3_S: return quant_iq3_s;
    case T_IQ2_S: return quant_iq2_s;
    case T_IQ4_XS: return quant_iq4_xs;
#if WS_HAVE_X86
    case T_IQ1_M:
        return ws_have_avx512() ? quant_iq1_m_x86 : quant_iq1_m;
#else
    case T_IQ1_M: return quant_iq1_m;
#endif
    }
    return NULL;
}

static const type_info *find_type(int id) {
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; ++i)
        if (TYPES[i].id == id) return &TYPES[i];
    PyErr_Format(PyExc_ValueError, "ggml type %d is not an IQ type", id);
    return NULL;
}

static int tables_ready(const type_info *t) {
    if (!have_kvalues || !have_ksigns || (t->grid >= 0 && !GRIDS[t->grid].have)) {
        PyErr_SetString(PyExc_RuntimeError, "IQ tables not set: call set_table() for every table first");
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------ Python API */

static PyObject *py_set_table(PyObject *self, PyObject *args) {
    const char *name;
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "sy*", &name, &buf)) return NULL;
    PyObject *ret = NULL;
    if (strcmp(name, "kvalues_iq4nl") == 0) {
        if (buf.len != 16) goto size;
        memcpy(KVALUES, buf.buf, 16);
        for (int i = 0; i < 16; ++i) KVALUES_F[i] = (float)KVALUES[i];
        build_iq4_lut();
        have_kvalues = 1;
    } else if (strcmp(name, "ksigns_iq2xs") == 0) {
        if (buf.len != 128) goto size;
        memcpy(KSIGNS, buf.buf, 128);
        for (int b = 0; b < 256; ++b)
            for (int j = 0; j < 8; ++j) SIGNS8[b][j] = (b >> j) & 1 ? -1.f : 1.f;
        have_ksigns = 1;
    } else {
        int gid = -1;
        for (int i = 0; i < G_COUNT; ++i)
            if (strcmp(name, SPECS[i].name) == 0) gid = i;
        if (gid < 0) {
            PyErr_Format(PyExc_ValueError, "unknown IQ table %s", name);
            goto done;
        }
        const grid_spec *s = &SPECS[gid];
        grid_t *g = &GRIDS[gid];
        if (buf.len != (Py_ssize_t)s->ngrid * s->dim) goto size;
        if (g->have) { /* already set (a re-import): the format data cannot change */
            ret = Py_None;
            goto done;
        }
        g->val = malloc(sizeof(float) * s->ngrid * s->dim);
        if (!g->val) { PyErr_NoMemory(); goto done; }
        const uint8_t *p = buf.buf;
        for (int k = 0; k < s->ngrid * s->dim; ++k) g->val[k] = s->is_signed ? (float)(int8_t)p[k] : (float)p[k];
        g->have = 1;
    }
    ret = Py_None;
    goto done;
size:
    PyErr_Format(PyExc_ValueError, "IQ table %s: wrong size %zd", name, buf.len);
done:
    PyBuffer_Release(&buf);
    Py_XINCREF(ret);
    return ret;
}

#define GRAIN 65536 /* elements a thread is given at least */

typedef struct {
    deq_fn f;
    const uint8_t *s;
    float *y;
    int ts, bs;
} deq_job;

static void deq_part(void *ctx, int64_t lo, int64_t hi) {
    const deq_job *j = ctx;
    for (int64_t i = lo; i < hi; ++i) j->f(j->s + i * j->ts, j->y + i * j->bs);
}

typedef struct {
    quant_fn f;
    const float *x, *qw;
    uint8_t *y;
    Py_ssize_t n_per_row, per_row;
    int ts, bs;
} q_job;

static void q_part(void *ctx, int64_t lo, int64_t hi) {
    const q_job *j = ctx;
    for (int64_t r = lo; r < hi; ++r)
        for (Py_ssize_t b = 0; b < j->per_row; ++b)
            j->f(j->x + r * j->n_per_row + b * j->bs, j->qw ? j->qw + b * j->bs : NULL,
                 j->y + (r * j->per_row + b) * j->ts);
}

static PyObject *py_dequantize(PyObject *self, PyObject *args) {
    int id, threads = 1;
    Py_buffer src, dst;
    if (!PyArg_ParseTuple(args, "iy*w*|i", &id, &src, &dst, &threads)) return NULL;
    PyObject *ret = NULL;
    const type_info *t = find_type(id);
    if (!t || !tables_ready(t)) goto done;
    if (src.len % t->type_size) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes are not a whole number of %d-byte blocks", t->name, src.len,
                     t->type_size);
        goto done;
    }
    const Py_ssize_t nb = src.len / t->type_size;
    if (dst.len != nb * t->block_size * (Py_ssize_t)sizeof(float)) {
        PyErr_Format(PyExc_ValueError, "%s: output holds %zd bytes, expected %zd (float32 [%zd, %d])", t->name,
                     dst.len, nb * t->block_size * (Py_ssize_t)sizeof(float), nb, t->block_size);
        goto done;
    }
    {
        const uint8_t *s = src.buf;
        float *y = dst.buf;
        const deq_fn f = t->deq;
        const int ts = t->type_size, bs = t->block_size;
        deq_job job = {f, s, y, ts, bs};
        Py_BEGIN_ALLOW_THREADS ws_parallel(threads, nb, GRAIN / bs, deq_part, &job);
        Py_END_ALLOW_THREADS
    }
    ret = Py_None;
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_XINCREF(ret);
    return ret;
}

static PyObject *py_quantize(PyObject *self, PyObject *args) {
    int id, threads = 1;
    Py_ssize_t n_per_row;
    Py_buffer src, dst, imat = {0};
    PyObject *imat_obj;
    if (!PyArg_ParseTuple(args, "iy*w*nO|i", &id, &src, &dst, &n_per_row, &imat_obj, &threads))
        return NULL;
    PyObject *ret = NULL;
    int have_imat = 0;
    const type_info *t = find_type(id);
    if (!t || !tables_ready(t)) goto done;
    if (imat_obj != Py_None) {
        if (PyObject_GetBuffer(imat_obj, &imat, PyBUF_SIMPLE) < 0) goto done;
        have_imat = 1;
    }
    if (t->needs_imatrix && !have_imat) {
        PyErr_Format(PyExc_ValueError, "%s needs an importance matrix", t->name);
        goto done;
    }
    if (n_per_row <= 0 || n_per_row % t->block_size || src.len % (n_per_row * (Py_ssize_t)sizeof(float))) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes are not float32 rows of %zd values (a multiple of %d)",
                     t->name, src.len, n_per_row, t->block_size);
        goto done;
    }
    const Py_ssize_t nrows = src.len / (n_per_row * (Py_ssize_t)sizeof(float));
    const Py_ssize_t per_row = n_per_row / t->block_size;
    if (dst.len != nrows * per_row * t->type_size) {
        PyErr_Format(PyExc_ValueError, "%s: output holds %zd bytes, expected %zd", t->name, dst.len,
                     nrows * per_row * t->type_size);
        goto done;
    }
    if (have_imat && imat.len != n_per_row * (Py_ssize_t)sizeof(float)) {
        PyErr_Format(PyExc_ValueError, "%s: imatrix holds %zd bytes, expected float32 [%zd]", t->name, imat.len,
                     n_per_row);
        goto done;
    }
    if (t->grid >= 0 && !GRIDS[t->grid].ready && build_quant_tables(t->grid) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    {
        const float *x = src.buf;
        const float *qw = have_imat ? imat.buf : NULL;
        uint8_t *y = dst.buf;
        const quant_fn f = quantizer(id);
        const int ts = t->type_size, bs = t->block_size;
        q_job job = {f, x, qw, y, n_per_row, per_row, ts, bs};
        /* grid types cost ~100x more per element: rows are worth a thread sooner */
        Py_BEGIN_ALLOW_THREADS ws_parallel(threads, nrows, t->grid >= 0 ? 1 : GRAIN / n_per_row + 1,
                                           q_part, &job);
        Py_END_ALLOW_THREADS
    }
    ret = Py_None;
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    if (have_imat) PyBuffer_Release(&imat);
    Py_XINCREF(ret);
    return ret;
}

/* pool.quantize's row kernel; the IQ encoders do not look for NaN/inf (check_finite) */
static int iq_rows(const void *arg, const float *src, uint8_t *dst, int64_t nrows, int64_t n,
                   const float *imatrix) {
    const type_info *t = arg;
    q_job job = {quantizer(t->id), src, imatrix, dst, n, n / t->block_size, t->type_size, t->block_size};
    q_part(&job, 0, nrows);
    return 0;
}

/* The row kernel of a type, its tables ready (they are read with the GIL released). */
static PyObject *py_kernel(PyObject *self, PyObject *args) {
    int id;
    if (!PyArg_ParseTuple(args, "i", &id)) return NULL;
    const type_info *t = find_type(id);
    if (!t || !tables_ready(t)) return NULL;
    if (t->grid >= 0 && !GRIDS[t->grid].ready && build_quant_tables(t->grid) < 0) return PyErr_NoMemory();
    /* grid types cost ~100x more per value: a row is already ~1 ms of work */
    return ws_kernel_capsule(iq_rows, t, t->block_size, t->type_size, t->grid >= 0 ? 1 : WS_UNIT_ELEMS,
                             1, t->needs_imatrix);
}

static PyObject *py_iq4nl_index(PyObject *self, PyObject *args) {
    Py_buffer src, dst;
    if (!PyArg_ParseTuple(args, "y*w*", &src, &dst)) return NULL;
    PyObject *ret = NULL;
    if (!have_kvalues) {
        PyErr_SetString(PyExc_RuntimeError, "IQ tables not set: call set_table() for every table first");
        goto done;
    }
    if (src.len % 4 || dst.len != src.len / 4) {
        PyErr_Format(PyExc_ValueError, "iq4nl_index: %zd input bytes, %zd output bytes; expected float32 [n], uint8 [n]",
                     src.len, dst.len);
        goto done;
    }
    {
        const float *x = src.buf;
        uint8_t *y = dst.buf;
        for (Py_ssize_t i = 0; i < dst.len; ++i) {
            float v;
            memcpy(&v, x + i, 4);
            y[i] = (uint8_t)best_index_iq4nl(v);
        }
    }
    ret = Py_None;
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&dst);
    Py_XINCREF(ret);
    return ret;
}

static PyMethodDef METHODS[] = {
    {"iq4nl_index", py_iq4nl_index, METH_VARARGS,
     "iq4nl_index(x, out): ggml's best_index_int8(16, kvalues_iq4nl, x) of float32 x into uint8 out."},
    {"set_table", py_set_table, METH_VARARGS,
     "set_table(name, data): copy one IQ table (bytes of quant/_iq_tables.py) into the module."},
    {"dequantize", py_dequantize, METH_VARARGS,
     "dequantize(ggml_type, blocks, out): decode whole blocks into the float32 buffer out."},
    {"quantize", py_quantize, METH_VARARGS,
     "quantize(ggml_type, rows, out, n_per_row, imatrix_or_None): encode float32 rows into out."},
    {"kernel", py_kernel, METH_VARARGS, "kernel(ggml_type): the type's row kernel for weightsmith._native.pool"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "iquants", "ggml's IQ quant family, compiled.", -1,
                                    METHODS};

PyMODINIT_FUNC PyInit_iquants(void) {
    if (ws_pool_import() < 0) return NULL;
    return PyModule_Create(&MODULE);
}
