/* The Python binding every codec family module shares (csrc/<family>.c).
 *
 * A family defines a table of codecs, then WS_CODEC_MODULE(name, doc):
 *
 *     static const ws_codec WS_CODECS[] = {
 *         {"Q4_0", 32, 18, dequantize_q4_0, quantize_q4_0},
 *         {NULL, 0, 0, NULL, NULL},
 *     };
 *     WS_CODEC_MODULE(legacy, "The legacy ggml block types.")
 *
 * which gives the module two functions on caller-owned, C-contiguous buffers:
 *
 *     dequantize(type: str, blocks, out, threads=1) -> None
 *         blocks: nblocks * type_size bytes; out: nblocks * block_size float32
 *     quantize(type: str, rows, out, n_per_row: int, imatrix=None, threads=1) -> bool
 *         rows: nrows * n_per_row float32; out: nrows * row bytes;
 *         imatrix: n_per_row float32 or None.  False: the input holds NaN/inf
 *         that the type cannot store (``out`` is then unspecified).
 *
 *     kernel(type: str) -> capsule
 *         the type's row kernel for weightsmith._native.pool.quantize
 *
 * and a tuple TYPES of the names in the table.  Sizes are checked here, once;
 * the kernels run with the GIL released, split over `threads` threads of the
 * one pool (ws_pool.h) by blocks / rows: the bytes do not depend on the count.
 */
#ifndef WS_MODULE_H
#define WS_MODULE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "ws_common.h"
#include "ws_pool.h"

/* Decode nblocks blocks of src into nblocks * block_size floats. */
typedef void (*ws_dequantize_fn)(const uint8_t *restrict src, float *restrict dst, int64_t nblocks);
/* Encode nrows rows of n_per_row floats; imatrix (n_per_row weights) may be NULL.
 * Returns 0, or 1 when the rows hold a value the type cannot store (NaN/inf). */
typedef int (*ws_quantize_fn)(const float *restrict src, uint8_t *restrict dst, int64_t nrows,
                              int64_t n_per_row, const float *imatrix);

typedef struct {
    const char *name;
    int64_t block_size;
    int64_t type_size;
    ws_dequantize_fn dequantize; /* NULL: no decoder */
    ws_quantize_fn quantize;     /* NULL: no encoder */
} ws_codec;

/* Encode rows block by block with a per-block function, for the types whose
 * blocks ignore the importance matrix; a row holding NaN/inf stops it (1). */
typedef void (*ws_block_fn)(const float *restrict x, uint8_t *restrict y);

WS_INLINE int ws_quantize_blocks(const float *restrict src, uint8_t *restrict dst, int64_t nrows,
                                 int64_t n, int64_t block_size, int64_t type_size,
                                 ws_block_fn block) {
    const int64_t nb = n / block_size;
    for (int64_t r = 0; r < nrows; ++r, src += n, dst += nb * type_size) {
        if (ws_any_nonfinite(src, n)) return 1;
        for (int64_t b = 0; b < nb; ++b) block(src + b * block_size, dst + b * type_size);
    }
    return 0;
}

static const ws_codec *ws_find_codec(const ws_codec *table, const char *name) {
    for (; table->name != NULL; ++table) {
        if (strcmp(table->name, name) == 0) return table;
    }
    PyErr_Format(PyExc_KeyError, "no kernel for ggml type %s", name);
    return NULL;
}

static int ws_get_buffer(PyObject *obj, Py_buffer *view, int writable, const char *what) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: expected a C-contiguous%s buffer", what,
                     writable ? " writable" : "");
        return -1;
    }
    return 0;
}

static int ws_check_aligned(const Py_buffer *view, size_t align, const char *what) {
    if (((uintptr_t)view->buf) % align) {
        PyErr_Format(PyExc_ValueError, "%s: buffer is not %zu-byte aligned", what, align);
        return -1;
    }
    return 0;
}

/* Elements a thread is given at least: below that a second thread costs more
 * than it saves. */
#define WS_GRAIN 65536

typedef struct {
    const ws_codec *c;
    const uint8_t *src;
    float *dst;
} ws_deq_job;

static void ws_deq_part(void *ctx, int64_t lo, int64_t hi) {
    const ws_deq_job *j = ctx;
    j->c->dequantize(j->src + lo * j->c->type_size, j->dst + lo * j->c->block_size, hi - lo);
}

typedef struct {
    const ws_codec *c;
    const float *src;
    uint8_t *dst;
    int64_t n, row_bytes;
    const float *imatrix;
    int bad; /* any part found NaN/inf */
} ws_q_job;

static void ws_q_part(void *ctx, int64_t lo, int64_t hi) {
    ws_q_job *j = ctx;
    if (j->c->quantize(j->src + lo * j->n, j->dst + lo * j->row_bytes, hi - lo, j->n, j->imatrix))
        __atomic_store_n(&j->bad, 1, __ATOMIC_RELAXED);
}

static PyObject *ws_dequantize_impl(const ws_codec *table, PyObject *args) {
    const char *name;
    PyObject *src_obj, *dst_obj;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "sOO|i:dequantize", &name, &src_obj, &dst_obj, &threads)) return NULL;
    const ws_codec *c = ws_find_codec(table, name);
    if (c == NULL) return NULL;
    if (c->dequantize == NULL) {
        PyErr_Format(PyExc_KeyError, "no decoder kernel for ggml type %s", name);
        return NULL;
    }
    Py_buffer src, dst;
    if (ws_get_buffer(src_obj, &src, 0, "blocks") < 0) return NULL;
    if (ws_get_buffer(dst_obj, &dst, 1, "out") < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    PyObject *result = NULL;
    const int64_t nblocks = (int64_t)src.len / c->type_size;
    if ((int64_t)src.len % c->type_size != 0) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes are not whole %lld-byte blocks", name,
                     src.len, (long long)c->type_size);
    } else if ((int64_t)dst.len != nblocks * c->block_size * 4) {
        PyErr_Format(PyExc_ValueError, "%s: out holds %zd bytes, %lld blocks need %lld", name,
                     dst.len, (long long)nblocks, (long long)(nblocks * c->block_size * 4));
    } else if (ws_check_aligned(&dst, 4, "out") == 0) {
        ws_deq_job job = {c, (const uint8_t *)src.buf, (float *)dst.buf};
        Py_BEGIN_ALLOW_THREADS ws_parallel(threads, nblocks, WS_GRAIN / c->block_size + 1,
                                           ws_deq_part, &job);
        Py_END_ALLOW_THREADS result = Py_None;
        Py_INCREF(result);
    }
    PyBuffer_Release(&dst);
    PyBuffer_Release(&src);
    return result;
}

static PyObject *ws_quantize_impl(const ws_codec *table, PyObject *args) {
    const char *name;
    PyObject *src_obj, *dst_obj, *im_obj = Py_None;
    long long n;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "sOOL|Oi:quantize", &name, &src_obj, &dst_obj, &n, &im_obj,
                          &threads))
        return NULL;
    const ws_codec *c = ws_find_codec(table, name);
    if (c == NULL) return NULL;
    if (c->quantize == NULL) {
        PyErr_Format(PyExc_KeyError, "no encoder kernel for ggml type %s", name);
        return NULL;
    }
    if (n <= 0 || n % c->block_size) {
        PyErr_Format(PyExc_ValueError, "%s: row length %lld is not a positive multiple of %lld",
                     name, n, (long long)c->block_size);
        return NULL;
    }
    Py_buffer src, dst, im = {0};
    int have_im = im_obj != Py_None;
    if (ws_get_buffer(src_obj, &src, 0, "rows") < 0) return NULL;
    if (ws_get_buffer(dst_obj, &dst, 1, "out") < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    if (have_im && ws_get_buffer(im_obj, &im, 0, "imatrix") < 0) {
        PyBuffer_Release(&dst);
        PyBuffer_Release(&src);
        return NULL;
    }
    PyObject *result = NULL;
    const int64_t row_floats = (int64_t)n;
    const int64_t row_bytes = row_floats / c->block_size * c->type_size;
    const int64_t nrows = (int64_t)src.len / (row_floats * 4);
    if ((int64_t)src.len != nrows * row_floats * 4) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes are not whole rows of %lld float32", name,
                     src.len, n);
    } else if ((int64_t)dst.len != nrows * row_bytes) {
        PyErr_Format(PyExc_ValueError, "%s: out holds %zd bytes, %lld rows need %lld", name,
                     dst.len, (long long)nrows, (long long)(nrows * row_bytes));
    } else if (have_im && (int64_t)im.len != row_floats * 4) {
        PyErr_Format(PyExc_ValueError, "%s: imatrix holds %zd bytes, expected %lld", name, im.len,
                     (long long)(row_floats * 4));
    } else if (ws_check_aligned(&src, 4, "rows") == 0 &&
               (!have_im || ws_check_aligned(&im, 4, "imatrix") == 0)) {
        ws_q_job job = {c, (const float *)src.buf, (uint8_t *)dst.buf, row_floats, row_bytes,
                        have_im ? (const float *)im.buf : NULL, 0};
        Py_BEGIN_ALLOW_THREADS ws_parallel(threads, nrows, WS_GRAIN / row_floats + 1, ws_q_part, &job);
        Py_END_ALLOW_THREADS result = PyBool_FromLong(!job.bad);
    }
    if (have_im) PyBuffer_Release(&im);
    PyBuffer_Release(&dst);
    PyBuffer_Release(&src);
    return result;
}

/* The table's encoders check NaN/inf themselves (or store them): no check_finite. */
static int ws_codec_rows(const void *arg, const float *src, uint8_t *dst, int64_t nrows, int64_t n,
                         const float *imatrix) {
    return ((const ws_codec *)arg)->quantize(src, dst, nrows, n, imatrix);
}

static PyObject *ws_kernel_impl(const ws_codec *table, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8(arg);
    if (name == NULL) return NULL;
    const ws_codec *c = ws_find_codec(table, name);
    if (c == NULL) return NULL;
    if (c->quantize == NULL) {
        PyErr_Format(PyExc_KeyError, "no encoder kernel for ggml type %s", name);
        return NULL;
    }
    return ws_kernel_capsule(ws_codec_rows, c, c->block_size, c->type_size, WS_UNIT_ELEMS, 0, 0);
}

static PyObject *ws_type_names(const ws_codec *table) {
    Py_ssize_t count = 0;
    for (const ws_codec *c = table; c->name != NULL; ++c) ++count;
    PyObject *names = PyTuple_New(count);
    if (names == NULL) return NULL;
    for (Py_ssize_t i = 0; i < count; ++i) {
        PyObject *s = PyUnicode_FromString(table[i].name);
        if (s == NULL) {
            Py_DECREF(names);
            return NULL;
        }
        PyTuple_SET_ITEM(names, i, s);
    }
    return names;
}

/* Optional per-module set-up (tables); define WS_MODULE_INIT before including. */
#ifndef WS_MODULE_INIT
#define WS_MODULE_INIT() ((void)0)
#endif

#define WS_CODEC_MODULE(modname, doc)                                                  \
    static PyObject *ws_py_dequantize(PyObject *self, PyObject *args) {                \
        (void)self;                                                                    \
        return ws_dequantize_impl(WS_CODECS, args);                                    \
    }                                                                                  \
    static PyObject *ws_py_quantize(PyObject *self, PyObject *args) {                  \
        (void)self;                                                                    \
        return ws_quantize_impl(WS_CODECS, args);                                      \
    }                                                                                  \
    static PyObject *ws_py_kernel(PyObject *self, PyObject *arg) {                     \
        (void)self;                                                                    \
        return ws_kernel_impl(WS_CODECS, arg);                                         \
    }                                                                                  \
    static PyMethodDef ws_methods[] = {                                                \
        {"dequantize", ws_py_dequantize, METH_VARARGS,                                 \
         "dequantize(type, blocks, out, threads=1): decode blocks into float32 out"},  \
        {"quantize", ws_py_quantize, METH_VARARGS,                                     \
         "quantize(type, rows, out, n_per_row, imatrix=None, threads=1) -> False if "  \
         "NaN/inf"},                                                                   \
        {"kernel", ws_py_kernel, METH_O,                                               \
         "kernel(type): the type's row kernel for weightsmith._native.pool.quantize"}, \
        {NULL, NULL, 0, NULL}};                                                        \
    static struct PyModuleDef ws_moduledef = {                                         \
        PyModuleDef_HEAD_INIT, #modname, doc, -1, ws_methods, NULL, NULL, NULL, NULL}; \
    PyMODINIT_FUNC PyInit_##modname(void) {                                            \
        if (ws_pool_import() < 0) return NULL;                                         \
        WS_MODULE_INIT();                                                              \
        PyObject *m = PyModule_Create(&ws_moduledef);                                  \
        if (m == NULL) return NULL;                                                    \
        PyObject *names = ws_type_names(WS_CODECS);                                    \
        if (names == NULL || PyModule_AddObject(m, "TYPES", names) < 0) {              \
            Py_XDECREF(names);                                                         \
            Py_DECREF(m);                                                              \
            return NULL;                                                               \
        }                                                                              \
        return m;                                                                      \
    }

#endif
