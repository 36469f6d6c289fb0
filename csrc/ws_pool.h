/* The one thread pool of the kernel core, as the codec modules see it.
 *
 * The pool itself (csrc/ws_threads.h) is compiled once, into
 * weightsmith._native.pool (csrc/pool.c), which exports it in a capsule;
 * every codec module imports that capsule when it is loaded
 * (ws_pool_import()), so a single set of worker threads serves every kernel
 * call of the process -- one tensor split over threads (quantize(x, workers=k),
 * the converters) and the batches of many tensors of pool.quantize
 * (quantize_file) alike.  (Each module compiling its own copy of the pool
 * would give each its own threads, up to one set per family.)
 *
 *     ws_parallel(threads, count, grain, fn, ctx)
 *
 * runs fn(ctx, lo, hi) over [0, count) in contiguous chunks of at least
 * `grain` items on the calling thread and up to threads - 1 pool threads, and
 * returns when all are done.
 *
 * A codec module also hands out row kernels for pool.quantize: a capsule
 * named WS_KERNEL_CAPSULE holding a ws_kernel (see ws_kernel_capsule()).
 */
#ifndef WS_POOL_H
#define WS_POOL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef void (*ws_part_fn)(void *ctx, int64_t lo, int64_t hi);

typedef struct {
    void (*parallel)(int threads, int64_t count, int64_t grain, ws_part_fn fn, void *ctx);
} ws_pool_api;

#define WS_POOL_CAPSULE "weightsmith._native.pool._C_API"

/* Encode nrows rows of n floats (src 4-byte aligned) into dst; imatrix (n
 * weights) may be NULL.  Returns 1 when the rows hold NaN/inf the type cannot
 * store (the kernel checks them itself, or the caller did: check_finite). */
typedef int (*ws_rows_fn)(const void *arg, const float *src, uint8_t *dst, int64_t nrows,
                          int64_t n, const float *imatrix);

typedef struct {
    ws_rows_fn rows;
    const void *arg;    /* the module's entry for the type */
    int64_t block_size; /* values per block */
    int64_t type_size;  /* bytes per block */
    int64_t unit_elems; /* values a batch unit holds at least (whole rows): ~1 ms of work */
    int check_finite;   /* the caller must refuse NaN/inf first (the kernel does not) */
    int needs_imatrix;  /* ggml asserts an importance matrix */
} ws_kernel;

/* A unit of ~64K values: 0.1-1 ms in the block and K-quant encoders, far more
 * than claiming it, and its float32 widening (256 KiB) stays in L2. */
#define WS_UNIT_ELEMS 65536

#define WS_KERNEL_CAPSULE "weightsmith._native.kernel"

#ifndef WS_POOL_IMPL
static const ws_pool_api *ws_pool_c;

/* In the module's PyInit: 0, or -1 with an ImportError set. */
static int ws_pool_import(void) {
    ws_pool_c = (const ws_pool_api *)PyCapsule_Import(WS_POOL_CAPSULE, 0);
    return ws_pool_c == NULL ? -1 : 0;
}

#define ws_parallel(threads, count, grain, fn, ctx) \
    ws_pool_c->parallel((threads), (count), (grain), (fn), (ctx))

static void ws_kernel_free(PyObject *capsule) {
    PyMem_Free(PyCapsule_GetPointer(capsule, WS_KERNEL_CAPSULE));
}

/* A new capsule for pool.quantize (the module's entry `arg` is static). */
static PyObject *ws_kernel_capsule(ws_rows_fn rows, const void *arg, int64_t block_size,
                                   int64_t type_size, int64_t unit_elems, int check_finite,
                                   int needs_imatrix) {
    ws_kernel *k = PyMem_Malloc(sizeof *k);
    if (k == NULL) return PyErr_NoMemory();
    *k = (ws_kernel){rows, arg, block_size, type_size, unit_elems, check_finite, needs_imatrix};
    PyObject *capsule = PyCapsule_New(k, WS_KERNEL_CAPSULE, ws_kernel_free);
    if (capsule == NULL) PyMem_Free(k);
    return capsule;
}
#endif

#endif
