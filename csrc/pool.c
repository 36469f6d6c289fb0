/* weightsmith._native.pool: the kernel core's one thread pool, and batches of
 * quantization spans run on it.
 *
 *     quantize(spans, threads=1, unit_rows=0) -> int
 *
 * spans: a sequence of (kernel, src, src_type, dst, n_per_row, imatrix):
 *   kernel     a row kernel capsule of a codec module (its kernel(type) function)
 *   src        nrows * n_per_row values, C-contiguous, of src_type
 *              0 = float32, 1 = float16, 2 = bfloat16 (native byte order)
 *   dst        nrows * row bytes of the kernel's type, writable
 *   imatrix    float32 [n_per_row] (4-byte aligned) or None
 * Every span is checked first (a ValueError/TypeError, nothing written), then
 * all of them run as one call of the pool with the GIL released.  Returns the
 * index of the first span holding a NaN/inf its type cannot store, or -1.
 *
 * Work is cut into units of whole rows (about the kernel's unit_elems values,
 * or `unit_rows` rows) across all spans, and the pool's threads claim units one
 * at a time: a window of many tensors of several types keeps every thread busy
 * to the end, with no Python hand-over per span.  A unit of a float16/bfloat16
 * (or unaligned float32) span is widened into a per-thread scratch of one unit
 * first, in the thread that encodes it (the widening is exact and runs in
 * parallel, and the float32 copy of a tensor never exists whole).  A row's
 * bytes depend only on the row: nothing depends on the thread count, the unit
 * size or who took which unit.  When a unit finds NaN/inf, the units after it
 * are skipped but those before it still run, so the index returned is the
 * first such span whatever the timing.
 */
#define WS_POOL_IMPL
#include "ws_pool.h" /* Python.h first */
#include "ws_common.h"
#include "ws_threads.h"

#include <stdlib.h>

enum { SRC_F32 = 0, SRC_F16 = 1, SRC_BF16 = 2 };

typedef struct {
    const ws_kernel *k;
    const uint8_t *src;
    uint8_t *dst;
    const float *imatrix;
    int64_t n, nrows, row_bytes, unit_rows;
    int kind;  /* SRC_*; SRC_F32 with direct = 0 is copied (unaligned) */
    int direct; /* rows are read in place */
} span;

typedef struct {
    span *spans;
    int64_t *first; /* first unit of each span; first[nspans] = all units */
    int64_t nspans;
    float *scratch[WS_MAX_THREADS];
    int taken[WS_MAX_THREADS];
    int nslots;
    int64_t bad; /* lowest unit that found NaN/inf (atomic); INT64_MAX: none */
} batch;

WS_DISPATCH static void widen(const span *s, int64_t r0, int64_t r1, float *restrict out) {
    const int64_t count = (r1 - r0) * s->n;
    if (s->kind == SRC_F32) {
        memcpy(out, s->src + r0 * s->n * 4, (size_t)count * 4);
    } else if (s->kind == SRC_F16) {
        const uint8_t *p = s->src + r0 * s->n * 2;
        for (int64_t i = 0; i < count; ++i) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            out[i] = ws_f16_to_f32(h);
        }
    } else {
        const uint8_t *p = s->src + r0 * s->n * 2;
        for (int64_t i = 0; i < count; ++i) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            out[i] = ws_bf16_to_f32(h);
        }
    }
}

WS_DISPATCH static int any_nonfinite(const float *x, int64_t n) { return ws_any_nonfinite(x, n); }

static float *claim_scratch(batch *b, int *slot) {
    for (;;) {
        for (int i = 0; i < b->nslots; ++i) {
            int free_ = 0;
            if (__atomic_compare_exchange_n(&b->taken[i], &free_, 1, 0, __ATOMIC_ACQUIRE,
                                            __ATOMIC_RELAXED)) {
                *slot = i;
                return b->scratch[i];
            }
        }
        WS_PAUSE(); /* cannot happen: at most nslots parts run at once */
    }
}

static void batch_part(void *ctx, int64_t lo, int64_t hi) {
    batch *b = ctx;
    int slot = -1;
    float *scratch = NULL;
    /* the span of unit lo: the last one whose first unit is <= lo */
    int64_t a = 0, z = b->nspans - 1;
    while (a < z) {
        const int64_t mid = (a + z + 1) / 2;
        if (b->first[mid] <= lo) a = mid; else z = mid - 1;
    }
    for (int64_t u = lo, si = a; u < hi; ++u) {
        if (u > __atomic_load_n(&b->bad, __ATOMIC_RELAXED)) break;
        while (u >= b->first[si + 1]) ++si;
        const span *s = &b->spans[si];
        const int64_t r0 = (u - b->first[si]) * s->unit_rows;
        const int64_t r1 = r0 + s->unit_rows < s->nrows ? r0 + s->unit_rows : s->nrows;
        const float *x;
        if (s->direct) {
            x = (const float *)(s->src + r0 * s->n * 4);
        } else {
            if (scratch == NULL) scratch = claim_scratch(b, &slot);
            widen(s, r0, r1, scratch);
            x = scratch;
        }
        const int bad = (s->k->check_finite && any_nonfinite(x, (r1 - r0) * s->n)) ||
                        s->k->rows(s->k->arg, x, s->dst + r0 * s->row_bytes, r1 - r0, s->n,
                                   s->imatrix);
        if (bad) {
            int64_t seen = __atomic_load_n(&b->bad, __ATOMIC_RELAXED);
            while (u < seen && !__atomic_compare_exchange_n(&b->bad, &seen, u, 0, __ATOMIC_RELAXED,
                                                            __ATOMIC_RELAXED)) {
            }
        }
    }
    if (slot >= 0) __atomic_store_n(&b->taken[slot], 0, __ATOMIC_RELEASE);
}

/* Check span i of the Python sequence into s; its buffers go to views[3 * i ..]. */
static int parse_span(PyObject *item, Py_ssize_t i, span *s, Py_buffer *views, int *held,
                      int64_t unit_rows) {
    PyObject *kobj, *src_obj, *dst_obj, *im_obj;
    long long n;
    int kind;
    if (!PyArg_ParseTuple(item, "OOiOLO;span: (kernel, src, src_type, dst, n_per_row, imatrix)",
                          &kobj, &src_obj, &kind, &dst_obj, &n, &im_obj))
        return -1;
    const ws_kernel *k = PyCapsule_GetPointer(kobj, WS_KERNEL_CAPSULE);
    if (k == NULL) return -1;
    if (kind < SRC_F32 || kind > SRC_BF16) {
        PyErr_Format(PyExc_ValueError, "span %zd: src_type %d is not 0 (f32), 1 (f16) or 2 (bf16)",
                     i, kind);
        return -1;
    }
    if (n <= 0 || n % k->block_size) {
        PyErr_Format(PyExc_ValueError, "span %zd: row length %lld is not a positive multiple of %lld",
                     i, n, (long long)k->block_size);
        return -1;
    }
    if (PyObject_GetBuffer(src_obj, &views[0], PyBUF_C_CONTIGUOUS) < 0) return -1;
    ++*held;
    if (PyObject_GetBuffer(dst_obj, &views[1], PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) return -1;
    ++*held;
    const int have_im = im_obj != Py_None;
    if (have_im) {
        if (PyObject_GetBuffer(im_obj, &views[2], PyBUF_C_CONTIGUOUS) < 0) return -1;
        ++*held;
    }
    const int64_t esize = kind == SRC_F32 ? 4 : 2;
    const int64_t nrows = (int64_t)views[0].len / (n * esize);
    const int64_t row_bytes = n / k->block_size * k->type_size;
    if ((int64_t)views[0].len != nrows * n * esize) {
        PyErr_Format(PyExc_ValueError, "span %zd: %zd bytes are not whole rows of %lld values", i,
                     views[0].len, n);
        return -1;
    }
    if ((int64_t)views[1].len != nrows * row_bytes) {
        PyErr_Format(PyExc_ValueError, "span %zd: dst holds %zd bytes, %lld rows need %lld", i,
                     views[1].len, (long long)nrows, (long long)(nrows * row_bytes));
        return -1;
    }
    if (have_im && ((int64_t)views[2].len != n * 4 || (uintptr_t)views[2].buf % 4)) {
        PyErr_Format(PyExc_ValueError, "span %zd: imatrix must be %lld aligned float32, found %zd bytes",
                     i, n, views[2].len);
        return -1;
    }
    if (k->needs_imatrix && !have_im) {
        PyErr_Format(PyExc_ValueError, "span %zd: this type needs an importance matrix", i);
        return -1;
    }
    int64_t per_unit = unit_rows > 0 ? unit_rows : k->unit_elems / n;
    *s = (span){k, views[0].buf, views[1].buf, have_im ? views[2].buf : NULL, n, nrows, row_bytes,
                per_unit > 0 ? per_unit : 1, kind,
                kind == SRC_F32 && (uintptr_t)views[0].buf % 4 == 0};
    return 0;
}

static PyObject *py_quantize(PyObject *self, PyObject *args, PyObject *kwargs) {
    (void)self;
    static char *kwlist[] = {"spans", "threads", "unit_rows", NULL};
    PyObject *seq_obj;
    int threads = 1;
    long long unit_rows = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|iL:quantize", kwlist, &seq_obj, &threads,
                                     &unit_rows))
        return NULL;
    PyObject *seq = PySequence_Fast(seq_obj, "spans must be a sequence");
    if (seq == NULL) return NULL;
    const Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject *result = NULL;
    batch b = {0};
    Py_buffer *views = PyMem_Calloc((size_t)count * 3 + 1, sizeof *views);
    int *held = PyMem_Calloc((size_t)count + 1, sizeof *held);
    b.spans = PyMem_Calloc((size_t)count + 1, sizeof *b.spans);
    b.first = PyMem_Calloc((size_t)count + 1, sizeof *b.first);
    if (views == NULL || held == NULL || b.spans == NULL || b.first == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t units = 0, scratch_elems = 0;
    for (Py_ssize_t i = 0; i < count; ++i) {
        span *s = &b.spans[i];
        if (parse_span(PySequence_Fast_GET_ITEM(seq, i), i, s, &views[3 * i], &held[i], unit_rows) < 0)
            goto done;
        b.first[i] = units;
        units += (s->nrows + s->unit_rows - 1) / s->unit_rows;
        if (!s->direct && s->unit_rows * s->n > scratch_elems) scratch_elems = s->unit_rows * s->n;
    }
    b.first[count] = units;
    b.nspans = count;
    b.bad = INT64_MAX;
    if (units > 0) {
        b.nslots = threads < 1 ? 1 : threads < WS_MAX_THREADS ? threads : WS_MAX_THREADS;
        for (int i = 0; scratch_elems > 0 && i < b.nslots; ++i) {
            /* 64-byte aligned: the kernels read it as aligned float rows */
            b.scratch[i] = aligned_alloc(64, ((size_t)scratch_elems * 4 + 63) / 64 * 64);
            if (b.scratch[i] == NULL) {
                PyErr_NoMemory();
                goto done;
            }
        }
        /* every unit its own chunk: claimed one at a time, so threads finish together */
        Py_BEGIN_ALLOW_THREADS ws_run(threads, units, 1, units, batch_part, &b);
        Py_END_ALLOW_THREADS
    }
    Py_ssize_t bad_span = -1;
    if (b.bad != INT64_MAX) {
        bad_span = 0;
        while (b.first[bad_span + 1] <= b.bad) ++bad_span;
    }
    result = PyLong_FromSsize_t(bad_span);
done:
    for (int i = 0; i < b.nslots; ++i) free(b.scratch[i]);
    for (Py_ssize_t i = 0; views != NULL && held != NULL && i < count; ++i)
        for (int v = 0; v < held[i]; ++v) PyBuffer_Release(&views[3 * i + v]);
    PyMem_Free(views);
    PyMem_Free(held);
    PyMem_Free(b.spans);
    PyMem_Free(b.first);
    Py_DECREF(seq);
    return result;
}

static const ws_pool_api API = {ws_parallel};

static PyMethodDef methods[] = {
    {"quantize", (PyCFunction)(void (*)(void))py_quantize, METH_VARARGS | METH_KEYWORDS,
     "quantize(spans, threads=1, unit_rows=0) -> index of the first span with NaN/inf, or -1"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "weightsmith._native.pool",
    "The kernel core's one thread pool (csrc/ws_threads.h) and batches of quantization spans on it.",
    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_pool(void) {
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    PyObject *api = PyCapsule_New((void *)&API, WS_POOL_CAPSULE, NULL);
    if (api == NULL || PyModule_AddObject(m, "_C_API", api) < 0) {
        Py_XDECREF(api);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
