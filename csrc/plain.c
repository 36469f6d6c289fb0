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
DECODE_16(dequantize_bf16, ws_bf16_to_f32)

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
ENCODE_16(quantize_bf16, ws_f32_to_bf16)

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
