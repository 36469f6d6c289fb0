/* Hand-vectorised x86 paths (AVX-512) beside the portable kernels.
 *
 * A function marked WS_AVX512 is compiled for AVX-512 (F, BW, VL, DQ) and F16C
 * whatever the baseline; the portable kernel calls it only when
 * ws_have_avx512() says the CPU has those extensions.  Both compute the same
 * IEEE float32 operations on the same operands (no FMA: -ffp-contract=off and
 * no fma intrinsics), so the choice never changes a byte; the exactness tests
 * run whichever path the machine takes, and WEIGHTSMITH_NO_AVX512=1 (read once,
 * at import) forces the portable one so that both can be checked on one machine.
 */
#ifndef WS_X86_H
#define WS_X86_H

#include <stdlib.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(WS_NO_DISPATCH)
#define WS_HAVE_X86 1
#include <immintrin.h>
#define WS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,f16c,avx2,popcnt")))

static int ws_avx512_state = -1; /* -1: not asked yet */

static inline int ws_have_avx512(void) {
    if (ws_avx512_state < 0) {
        const char *off = getenv("WEIGHTSMITH_NO_AVX512");
        __builtin_cpu_init();
        ws_avx512_state = !(off && *off && *off != '0') && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("f16c");
    }
    return ws_avx512_state;
}

/* fp32 -> fp16 of a finite or infinite value: F16C's round to nearest even is
 * IEEE's, as ws_f32_to_f16 (the two differ only in a NaN's payload; callers
 * pass no NaN). */
WS_AVX512 static inline void ws_put_f16_x86(uint8_t *p, float v) {
    const uint16_t h = (uint16_t)_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT);
    memcpy(p, &h, 2);
}

/* (max over 16 lanes of a, max over 16 lanes of b): 0 and 8 of the result. */
WS_AVX512 static inline __m512 ws_hmax2_x86(__m512 a, __m512 b) {
    __m512 c = _mm512_max_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    c = _mm512_max_ps(c, _mm512_shuffle_f32x4(c, c, 0xB1));
    c = _mm512_max_ps(c, _mm512_permute_ps(c, 0x4E));
    return _mm512_max_ps(c, _mm512_permute_ps(c, 0xB1));
}
#else
#define WS_HAVE_X86 0
static inline int ws_have_avx512(void) { return 0; }
#endif

#endif
