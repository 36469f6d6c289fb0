/* GGUF string arrays: find the strings in one linear pass, decode them to str on demand.
 *
 * A GGUF string array is `count` strings back to back, each a length prefix (u64, or u32 in
 * GGUF v1, in the file's byte order) and that many bytes; layout and rules in
 * weightsmith/gguf/_spec.py and _parse.py.  scan() follows the chain of prefixes and records
 * where each string's prefix sits, relative to the array's first byte, in a caller-owned array
 * of count + 1 offsets (the last one is the end): uint32 unless the strings span 4 GiB or
 * more, so they take no more bytes than the length prefixes themselves (bar a v1 array of
 * over 4 GiB: 4-byte prefixes, 8-byte offsets).  It
 * stops at the first string whose prefix or bytes are not all in the buffer or whose length
 * runs past the end of the file, and says where: the caller re-reads that string with its own
 * checks, which name the error (or ask for more bytes of a prefix).  Every length is compared
 * with the bytes left before it is used, and every step moves forward, so no input makes it
 * read outside the buffer, overflow or loop.  It holds no Python object and releases the GIL.
 * decode() turns the strings into a list of str (UTF-8, "surrogateescape": any bytes survive a
 * round trip) from the offsets scan() wrote, re-checking them against the buffer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* A length prefix: one unaligned load (memcpy), byte-swapped when the file's order is not the
 * machine's.  Inlined into walk() with constant width / order, so each case is one load. */
static inline uint64_t load_len(const uint8_t *p, int width, int big) {
    const int swap = big != (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__);
    if (width == 4) {
        uint32_t v;
        memcpy(&v, p, 4);
        return swap ? __builtin_bswap32(v) : v;
    }
    uint64_t v;
    memcpy(&v, p, 8);
    return swap ? __builtin_bswap64(v) : v;
}

static void put(void *out, int w4, uint64_t i, uint64_t v) {
    if (w4)
        ((uint32_t *)out)[i] = (uint32_t)v;
    else
        ((uint64_t *)out)[i] = v;
}

static uint64_t get(const void *out, int w4, uint64_t i) {
    return w4 ? ((const uint32_t *)out)[i] : ((const uint64_t *)out)[i];
}

/* The offsets buffer: C-contiguous, 4- or 8-byte unsigned items (the caller's uint32 / uint64),
 * at least `need` of them.  Returns the item size, or -1 with an exception set. */
static int get_offsets(PyObject *obj, Py_buffer *view, int writable, uint64_t need) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) return -1;
    if ((view->itemsize != 4 && view->itemsize != 8) ||
        (uint64_t)view->len / view->itemsize < need) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "offsets: 4- or 8-byte items, count + 1 of them");
        return -1;
    }
    return (int)view->itemsize;
}

/* Follow the chain of `count` strings from p[pos] through the bytes at hand p[:n] of a
 * file_size-byte file (n <= file_size, pos <= n).  Returns how many strings are whole and sets
 * *at to where the walk stopped: past the last one, or the prefix of the first string not
 * whole.  With `out`, string i's prefix offset (relative to pos) goes to out[i] and the end to
 * out[count]; with uint32 items (w4) a walk past 4 GiB stops with *overflow set. */
static inline uint64_t walk(const uint8_t *p, uint64_t n, uint64_t file_size, uint64_t pos,
                            uint64_t count, int width, int big, void *out, int w4, uint64_t *at,
                            int *overflow) {
    const uint64_t lw = (uint64_t)width;
    uint64_t i = 0, a = pos; /* invariant: a <= n <= file_size */
    for (; i <= count; i++) {
        if (out && w4 && a - pos > UINT32_MAX) {
            *overflow = 1;
            break;
        }
        if (out) put(out, w4, i, a - pos);
        if (i == count) break;
        if (n - a < lw) break; /* the prefix is not all here */
        uint64_t len = load_len(p + a, width, big), start = a + lw;
        if (len > file_size - start || len > n - start) break; /* past the file / the bytes */
        a = start + len;
    }
    *at = a;
    return i;
}

/* scan(buffer, n, pos, count, file_size, width, big_endian, offsets | None) -> (strings found,
 * where the walk stopped): see walk().  buffer[:n] are the bytes at hand (a whole file or a
 * prefix of a file_size-byte file).  The caller scans once without offsets, then, when all
 * strings were found, allocates count + 1 offsets of the width their span needs and scans
 * again to fill them: nothing is allocated for strings that are not in the file. */
static PyObject *py_scan(PyObject *self, PyObject *args) {
    PyObject *src, *dst;
    Py_buffer buf, off = {0};
    unsigned long long n, pos, count, file_size;
    int width, big, w = 0, overflow = 0;
    if (!PyArg_ParseTuple(args, "OKKKKiiO", &src, &n, &pos, &count, &file_size, &width, &big, &dst))
        return NULL;
    if (width != 4 && width != 8) return PyErr_Format(PyExc_ValueError, "width must be 4 or 8");
    if (count >= UINT64_MAX / 8) return PyErr_Format(PyExc_ValueError, "count too large");
    if (PyObject_GetBuffer(src, &buf, PyBUF_SIMPLE) < 0) return NULL;
    if (dst != Py_None && (w = get_offsets(dst, &off, 1, count + 1)) < 0)
        return PyBuffer_Release(&buf), NULL;
    if (n > (uint64_t)buf.len) n = (uint64_t)buf.len; /* never past the buffer */
    if (file_size < n) n = file_size;                 /* nor past the file */
    uint64_t found = 0, at = pos;
    Py_BEGIN_ALLOW_THREADS;
    /* constant width / order / storage per call: each case compiles to its own loop */
    if (pos <= n) {
        const uint8_t *p = buf.buf;
        void *o = off.buf;
        if (width == 8 && !big && !o)
            found = walk(p, n, file_size, pos, count, 8, 0, NULL, 0, &at, &overflow);
        else if (width == 8 && !big && w == 4)
            found = walk(p, n, file_size, pos, count, 8, 0, o, 1, &at, &overflow);
        else
            found = walk(p, n, file_size, pos, count, width, big, o, w == 4, &at, &overflow);
    }
    Py_END_ALLOW_THREADS;
    if (w) PyBuffer_Release(&off);
    PyBuffer_Release(&buf);
    if (overflow) return PyErr_Format(PyExc_ValueError, "offsets: uint32 cannot reach the end");
    return Py_BuildValue("(KK)", (unsigned long long)found, (unsigned long long)at);
}

/* decode(buffer, base, offsets, width) -> list of str: string i is the bytes between
 * base + offsets[i] + width and base + offsets[i + 1]. */
static PyObject *py_decode(PyObject *self, PyObject *args) {
    PyObject *src, *dst, *list = NULL;
    Py_buffer buf, off;
    unsigned long long base;
    int width;
    if (!PyArg_ParseTuple(args, "OKOi", &src, &base, &dst, &width)) return NULL;
    if (PyObject_GetBuffer(src, &buf, PyBUF_SIMPLE) < 0) return NULL;
    int w = get_offsets(dst, &off, 0, 1);
    if (w < 0) return PyBuffer_Release(&buf), NULL;
    const uint64_t m = (uint64_t)off.len / (uint64_t)w - 1, size = (uint64_t)buf.len;
    const char *p = buf.buf;
    if (!(list = PyList_New((Py_ssize_t)m))) goto done;
    for (uint64_t i = 0; i < m; i++) {
        uint64_t a = get(off.buf, w == 4, i), e = get(off.buf, w == 4, i + 1);
        if (base > size || e > size - base || a > e || e - a < (uint64_t)width) {
            PyErr_SetString(PyExc_ValueError, "offsets do not describe strings in the buffer");
            Py_CLEAR(list);
            goto done;
        }
        a += base + (uint64_t)width, e += base;
        PyObject *s = PyUnicode_DecodeUTF8(p + a, (Py_ssize_t)(e - a), "surrogateescape");
        if (!s) {
            Py_CLEAR(list);
            goto done;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, s);
    }
done:
    PyBuffer_Release(&off);
    PyBuffer_Release(&buf);
    return list;
}

static PyMethodDef methods[] = {
    {"scan", py_scan, METH_VARARGS,
     "scan(buffer, n, pos, count, file_size, width, big_endian, offsets) -> (found, next)"},
    {"decode", py_decode, METH_VARARGS, "decode(buffer, base, offsets, width) -> list of str"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "gguf_meta", NULL, -1, methods};

PyMODINIT_FUNC PyInit_gguf_meta(void) { return PyModule_Create(&module); }
