/* The plain ggml types (one value per "block"): F32 F16 BF16 F64 I8 I16 I32 I64.
 *
 * Decoding as ggml's to_float: F16 via ggml_compute_fp16_to_fp32 (a signalling
 * NaN comes back quiet), BF16 by a 16-bit shift (payload kept), the others by
 * C's conversion to float (round to nearest).  Encoding F32 (copy), F16
 * (ggml_fp32_to_fp16_row) and BF16 (ggml_fp32_to_bf16_row_ref); NaN and inf
 * are stored, never refused.  Values are read with memcpy: a tensor inside a
 * file mapping may sit at any address.
 */
#include "ws_module.h"
#include "ws_x86.h"

#define DECODE_CAST(fname, ctype)                                                                \
    WS_DISPATCH static void fname(const uint8_t *restrict src, float *restrict dst, int64_t n) { \
        for (int64_t i = 0; i < n; ++i) {                                                        \
            ctype v;                                                                             \
            memcpy(&v, src + i * (int64_t)sizeof(ctype), sizeof(ctype));                         \
            dst[i] = (float)v;                                                                   \
        }                                                                                        \
    }

DECODE_CAST(dequantize_f32, float)
DECODE_CAST(dequantize_f64, double)
DECODE_CAST(dequantize_i8, int8_t)
DECODE_CAST(dequantize_i16, int16_t)
DECODE_CAST(dequantize_i32, int32_t)
DECODE_CAST(dequantize_i64, int64_t)

#define DECODE_16(fname, convert)                                                                \
    WS_DISPATCH static void fname(const uint8_t *restrict src, float *restrict dst, int64_t n) { \
        for (int64_t i = 0; i < n; ++i) {                                                        \
            uint16_t h;                                                                          \
            memcpy(&h, src + 2 * i, 2);                                                          \
            dst[i] = convert(h);                                                                 \
        }                                                                                        \
    }

DECODE_16(dequantize_f16, ws_f16_to_f32)
DECODE_16(dequantize_bf16_c, ws_bf16_to_f32)

static void dequantize_bf16(const uint8_t *restrict src, float *restrict dst, int64_t n);

WS_DISPATCH static int quantize_f32(const float *restrict src, uint8_t *restrict dst, int64_t nrows,
                                    int64_t n, const float *imatrix) {
    (void)imatrix;
    memcpy(dst, src, (size_t)(nrows * n) * 4);
    return 0;
}

#define ENCODE_16(fname, convert)                                                                 \
    WS_DISPATCH static int fname(const float *restrict src, uint8_t *restrict dst, int64_t nrows, \
                                 int64_t n, const float *imatrix) {                               \
        (void)imatrix;                                                                            \
        const int64_t count = nrows * n;                                                          \
        for (int64_t i = 0; i < count; ++i) {                                                     \
            const uint16_t h = convert(src[i]);                                                   \
            memcpy(dst + 2 * i, &h, 2);                                                           \
        }                                                                                         \
        return 0;                                                                                 \
    }

ENCODE_16(quantize_f16, ws_f32_to_f16)
ENCODE_16(quantize_bf16_c, ws_f32_to_bf16)

/* BF16 both ways in AVX-512, 32 values a step: the same integer operations as
 * ws_f32_to_bf16 / ws_bf16_to_f32 lane by lane (round to nearest even on the
 * bits, a NaN keeps its top half with the quiet bit on).  Not vcvtneps2bf16:
 * it flushes subnormal inputs to zero, ggml does not.  Both sides of this
 * type run at memory speed; this only keeps ours there (see docs/benchmarks.md). */
#if WS_HAVE_X86
WS_AVX512 static inline __m256i bf16_round_x86(__m512i u) {
    const __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
                         _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))),
        16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    const __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(64));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, nan, q));
}

WS_AVX512 static void quantize_bf16_x86(const float *restrict src, uint8_t *restrict dst,
                                        int64_t count) {
    int64_t i = 0;
    for (; i + 32 <= count; i += 32) {
        const __m256i a = bf16_round_x86(_mm512_loadu_si512(src + i));
        const __m256i b = bf16_round_x86(_mm512_loadu_si512(src + i + 16));
        _mm256_storeu_si256((__m256i *)(dst + 2 * i), a);
        _mm256_storeu_si256((__m256i *)(dst + 2 * i + 32), b);
    }
    for (; i < count; ++i) {
        const uint16_t h = ws_f32_to_bf16(src[i]);
        memcpy(dst + 2 * i, &h, 2);
    }
}

WS_AVX512 static void dequantize_bf16_x86(const uint8_t *restrict src, float *restrict dst,
                                          int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512i a = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + 2 * i)));
        const __m512i b =
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + 2 * i + 32)));
        _mm512_storeu_si512(dst + i, _mm512_slli_epi32(a, 16));
        _mm512_storeu_si512(dst + i + 16, _mm512_slli_epi32(b, 16));
    }
    for (; i < n; ++i) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        dst[i] = ws_bf16_to_f32(h);
    }
}
#endif

static int quantize_bf16(const float *restrict src, uint8_t *restrict dst, int64_t nrows,
                         int64_t n, const float *imatrix) {
#if WS_HAVE_X86
    if (ws_have_avx512()) {
        quantize_bf16_x86(src, dst, nrows * n);
        return 0;
    }
#endif
    return quantize_bf16_c(src, dst, nrows, n, imatrix);
}

static void dequantize_bf16(const uint8_t *restrict src, float *restrict dst, int64_t n) {
#if WS_HAVE_X86
    if (ws_have_avx512()) {
        dequantize_bf16_x86(src, dst, n);
        return;
    }
#endif
    dequantize_bf16_c(src, dst, n);
}

static const ws_codec WS_CODECS[] = {
    {"F32", 1, 4, dequantize_f32, quantize_f32},
    {"F16", 1, 2, dequantize_f16, quantize_f16},
    {"BF16", 1, 2, dequantize_bf16, quantize_bf16},
    {"F64", 1, 8, dequantize_f64, NULL},
    {"I8", 1, 1, dequantize_i8, NULL},
    {"I16", 1, 2, dequantize_i16, NULL},
    {"I32", 1, 4, dequantize_i32, NULL},
    {"I64", 1, 8, dequantize_i64, NULL},
    {NULL, 0, 0, NULL, NULL},
};

WS_CODEC_MODULE(plain, "Kernels of the plain ggml types (F32, F16, BF16, F64, I8..I64).")
