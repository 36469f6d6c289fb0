/* The safetensors header validator in the style of HF's tensor.rs: a UTF-8 scan, then one pass
 * over the JSON (CPython json's errors and offsets: NaN / Infinity are floats there), the nesting
 * and the rules (their order: weightsmith/safetensors/_header.py), keeping a Row per tensor.  The
 * header is a buffer or a file read a window at a time (never held whole).  An error comes back as
 * (code, name, key, a1, e1, a2, e2, x, y): code - 1 is the row of _TABLE in _header.py, [a, e)
 * spans of JSON values re-read there, x / y offsets, counts, a dtype index or the JSON error.
 * Strings decode with lone surrogates as 3-byte UTF-8 (Python's "surrogatepass"), so equal names
 * are equal bytes.  The GIL is held throughout. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_DEPTH 128

enum { E_OK, E_IO, E_UTF8, E_NOT_BRACE, E_NOT_OBJECT, E_DEEP, E_JSON, E_PADDING, E_DUP_META };
enum { E_META = E_DUP_META + 1, E_META_KEY, E_META_VALUE, E_DUP_NAME, E_ENTRY, E_UNKNOWN_FIELD };
enum { E_DUP_FIELD = E_UNKNOWN_FIELD + 1, E_MISSING_FIELD, E_DTYPE, E_SHAPE, E_COUNT_OVERFLOW };
enum { E_OFFSETS = E_COUNT_OVERFLOW + 1, E_BITS_OVERFLOW, E_MISALIGNED, E_SIZE, E_HOLE };
enum { E_OVERLAP = E_HOLE + 1, E_TRAILING, E_TRUNCATED };
enum { J_VALUE = 64, J_PROP, J_COLON, J_COMMA, J_UNTERM, J_CONTROL, J_ESCAPE, J_UESCAPE };
enum { V_OBJ, V_ARR, V_STR, V_INT, V_BIGINT, V_FLOAT, V_BOOL, V_NULL }; /* top_kind in _header.py */
enum { K_ANY, K_TOP, K_META, K_ENTRY, K_SHAPE, K_OFFS };                /* what a container holds */

static uint8_t PLAIN[256]; /* bytes a string holds as they are */
static uint8_t HEX[256];   /* hex digit values; 16 for other bytes */
static size_t grow_limit;  /* the header's size: no buffer grows past it */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} Buf;
typedef struct {
    int type;
    uint64_t span[2], u; /* kind, [begin, end) in the header, integer value */
} Val;
typedef struct {
    int code;
    uint64_t a1, e1, a2, e2, x, y;
    Buf name, key;
} Err;

typedef struct __attribute__((packed)) { /* a tensor; 25 bytes: 1.4M of them in 100 MB */
    uint64_t begin, end;
    uint32_t name, dims; /* its name and dims start there in names.p and dims, end at the next's */
    uint8_t dtype;
} Row;

/* The tensors of a valid header (a capsule's payload): rows in JSON order, indexes of them
 * sorted by name (for duplicates and lookups) and by offsets (data order).  A rule broken in entry
 * n leaves row n with just its name. */
typedef struct {
    size_t n, cap, nnames, ndims, dcap; /* nnames: n, or n + 1 when a rule broke in entry n */
    Row *rows;
    uint64_t *dims;
    uint32_t *byname, *order;
    Buf names;
} Table;
#define NEXT(t, i, f, last) ((i) + 1 < (t)->nnames ? (t)->rows[(i) + 1].f : (last))
#define NAME(t, i) \
    (t)->names.p + (t)->rows[i].name, NEXT(t, i, name, (t)->names.n) - (t)->rows[i].name

typedef struct { /* the tensor entry being parsed */
    int bad, seen[3], dtype, shape_ev, offs_ok, nofs;
    uint64_t span[3][2], n, ofs[2]; /* value spans of dtype, shape, offsets */
} Entry;

typedef struct {
    const uint8_t *p; /* header bytes [base, base + len); the cursor is p[pos] */
    size_t len, pos, window;
    uint64_t base, total;
    int fd, io, seen_meta;
    Py_ssize_t ncodes, nbits; /* the dtype registry: codes NUL-padded to 16 bytes, their bits */
    const char *codes;
    const uint8_t *bits;
    long depth;
    uint8_t *win;
    Err stop, rule;           /* the error that stopped the pass; the first broken rule */
    Buf str, key, name, mkey; /* last string and key, tensor name, metadata key */
    PyObject *meta;
    Entry ent;
    Table *t;
} P;

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c += c / 2 + 1;
    if (c * elem > grow_limit && need * elem <= grow_limit) c = grow_limit / elem;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    return *p = q, *cap = c, 0;
}

static int put(Buf *b, const void *src, size_t k) {
    if (grow((void **)&b->p, &b->cap, b->n + k, 1)) return -1;
    if (k) memcpy(b->p + b->n, src, k);
    return b->n += k, 0;
}

static int copy(Buf *to, const Buf *from) { return to->n = 0, put(to, from->p, from->n); }

static inline uint64_t at(P *s) { return s->base + s->pos; }

/* Make `need` (< 16) bytes from the cursor available if the header has them; returns how
 * many are.  A buffer holds them all; a file is read a window at a time. */
static size_t more(P *s, size_t need) {
    size_t have = s->len - s->pos, want = s->window;
    if (s->fd < 0 || have >= need) return have;
    memmove(s->win, s->win + s->pos, have);
    s->base += s->pos, s->pos = 0, s->len = have, s->p = s->win;
    if (want > s->total - s->base) want = (size_t)(s->total - s->base);
    while (s->len < want) {
        ssize_t r = pread(s->fd, s->win + s->len, want - s->len, (off_t)(8 + s->base + s->len));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return s->io = r < 0 ? errno : -1, s->len;
        s->len += (size_t)r;
    }
    return s->len;
}

static inline int peek(P *s) { return s->pos < s->len || more(s, 1) ? s->p[s->pos] : -1; }

static inline void skip_ws(P *s) {
    for (int c; (c = peek(s)) == ' ' || c == '\t' || c == '\n' || c == '\r';) s->pos++;
}

static int fail(P *s, int code, uint64_t pos) { /* a syntax error */
    if (s->stop.code) return -1;
    s->stop.code = code < J_VALUE ? code : E_JSON, s->stop.x = pos, s->stop.y = code % J_VALUE;
    return -1;
}

/* Length of the valid UTF-8 sequence at the cursor (lead byte >= 0x80), or 0. */
static size_t utf8_len(P *s) {
    size_t have = more(s, 4), k;
    const uint8_t *p = s->p + s->pos, c = p[0];
    uint8_t lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    k = c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
    if (c == 0xF4) hi = 0x8F;
    if (!k || have < k || p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return k;
}

/* Before the pass, the whole header's UTF-8 (1 at its first invalid byte), then a rewind. */
static int bad_utf8(P *s) {
    size_t k = 1;
    while (k && peek(s) >= 0) {
        uint64_t w; /* ASCII 8 bytes at a time */
        while (s->pos + 8 <= s->len && !(memcpy(&w, s->p + s->pos, 8), w & 0x8080808080808080u))
            s->pos += 8;
        while (s->pos < s->len && s->p[s->pos] < 0x80) s->pos++;
        if (s->pos < s->len) s->pos += (k = utf8_len(s));
    }
    if (!k) fail(s, E_UTF8, at(s));
    if (!k || s->io) return 1;
    s->pos = 0;
    if (s->fd >= 0) s->base = s->len = 0;
    return 0;
}

static int hex4(const uint8_t *p, uint32_t *out) { /* 4 hex digits, or 0 */
    *out = (uint32_t)HEX[p[0]] << 12 | HEX[p[1]] << 8 | HEX[p[2]] << 4 | HEX[p[3]];
    return (HEX[p[0]] | HEX[p[1]] | HEX[p[2]] | HEX[p[3]]) < 16;
}

static int put_cp(Buf *b, uint32_t c) { /* UTF-8, surrogates included */
    uint8_t u[4];
    int k = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    if (k == 1) u[0] = (uint8_t)c;
    for (int i = k - 1; k > 1 && i > 0; i--, c >>= 6) u[i] = (uint8_t)(0x80 | (c & 63));
    if (k > 1) u[0] = (uint8_t)((0xF00 >> k) | c); /* 0xC0, 0xE0, 0xF0 */
    return put(b, u, (size_t)k);
}

/* A JSON string at the cursor ('"'), decoded into `out` (its UTF-8 is checked already). */
static int scan_string(P *s, Buf *out) {
    uint64_t q = at(s);
    s->pos++, out->n = 0;
    for (;;) {
        if (s->pos >= s->len && !more(s, 1)) return fail(s, J_UNTERM, q);
        size_t i = s->pos, j = i;
        while (j < s->len && PLAIN[s->p[j]]) j++;
        if (put(out, s->p + i, j - i)) return -1;
        if ((s->pos = j) == s->len) continue;
        if (s->p[j] == '"') return s->pos++, 0;
        if (s->p[j] < 0x20) return fail(s, J_CONTROL, at(s));
        size_t have = more(s, 13); /* a backslash: up to two \uXXXX and a byte after */
        const uint8_t *p = s->p + s->pos;
        if (have < 2) return s->pos = s->len, fail(s, J_UNTERM, q);
        if (p[1] != 'u') {
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            const char *e = p[1] ? memchr(from, p[1], 8) : NULL;
            if (!e) return fail(s, J_ESCAPE, at(s));
            if (put(out, &to[e - from], 1)) return -1;
            s->pos += 2;
            continue;
        }
        uint32_t cp, lo;
        size_t used = 6; /* CPython: 4 hex digits and a character after them */
        if (have < 7 || !hex4(p + 2, &cp)) return fail(s, J_UESCAPE, at(s) + 1);
        if (cp >= 0xD800 && cp <= 0xDBFF && have >= 13 && p[6] == '\\' && p[7] == 'u') {
            if (!hex4(p + 8, &lo)) return fail(s, J_UESCAPE, at(s) + 7);
            if (lo >= 0xDC00 && lo <= 0xDFFF) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            if (lo >= 0xDC00 && lo <= 0xDFFF) used = 12;
        }
        if (put_cp(out, cp)) return -1;
        s->pos += used;
    }
}

static int word(P *s, Val *v, const char *w, int type) { /* null, true, ... at the cursor */
    size_t k = strlen(w);
    if (peek(s) != w[0] || more(s, k) < k || memcmp(s->p + s->pos, w, k)) return 0;
    return s->pos += k, v->type = type, 1;
}

static inline int digit_at(P *s, size_t i) {
    if (s->len - s->pos <= i) more(s, i + 1);
    return s->len - s->pos > i && s->p[s->pos + i] >= '0' && s->p[s->pos + i] <= '9';
}

/* A number as CPython's json matches it: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)? */
static int scan_number(P *s, Val *v) {
    uint64_t start = at(s), u = 0;
    int neg = peek(s) == '-', over = 0;
    s->pos += (size_t)neg;
    if (!digit_at(s, 0)) return fail(s, J_VALUE, start);
    int first = s->p[s->pos];
    do {
        over |= __builtin_mul_overflow(u, 10, &u);
        over |= __builtin_add_overflow(u, (uint64_t)(s->p[s->pos++] - '0'), &u);
    } while (first != '0' && digit_at(s, 0));
    v->u = u, v->type = over || (neg && u) ? V_BIGINT : V_INT;
    if (peek(s) == '.' && digit_at(s, 1))
        for (v->type = V_FLOAT, s->pos++; digit_at(s, 0);) s->pos++;
    int c = peek(s), sign = more(s, 2) >= 2 && (s->p[s->pos + 1] == '+' || s->p[s->pos + 1] == '-');
    if ((c == 'e' || c == 'E') && digit_at(s, 1 + (size_t)sign))
        for (v->type = V_FLOAT, s->pos += 1 + (size_t)sign; digit_at(s, 0);) s->pos++;
    return 0;
}

/* Tables --------------------------------------------------------------------------------- */

static int cmp(const uint8_t *p, size_t n, const uint8_t *q, size_t m) { /* bytewise */
    int c = n && m ? memcmp(p, q, n < m ? n : m) : 0;
    return c ? c : (n > m) - (n < m);
}

static inline int eq(const uint8_t *p, size_t n, const void *q, size_t m) {
    return n == m && (!n || !memcmp(p, q, n));
}

static void table_free(Table *t) {
    if (t) free(t->rows), free(t->dims), free(t->byname), free(t->order), free(t->names.p);
    free(t);
}

/* Rules ---------------------------------------------------------------------------------- */

static int rule(P *s, int code, const Buf *key, const uint64_t *v1, const uint64_t *v2,
                uint64_t x) {
    Err *r = &s->rule;
    if (r->code) return 0;
    r->code = code, r->x = x;
    if (v1) r->a1 = v1[0], r->e1 = v1[1];
    if (v2) r->a2 = v2[0], r->e2 = v2[1];
    return copy(&r->name, &s->name) || (key && copy(&r->key, key)) ? -1 : 0;
}

/* A tensor entry closed: its checks, in the order of the rules. */
static int check_entry(P *s) {
    Entry *e = &s->ent;
    uint64_t bits, d = (uint64_t)e->dtype, *sh = e->span[1], *of = e->span[2];
    if (e->bad) return rule(s, e->bad, &s->mkey, NULL, NULL, 0);
    for (int f = 0; f < 3; f++)
        if (!e->seen[f]) return rule(s, E_MISSING_FIELD, NULL, NULL, NULL, (uint64_t)f);
    if (e->dtype < 0) return rule(s, E_DTYPE, NULL, e->span[0], NULL, 0);
    if (e->shape_ev) return rule(s, e->shape_ev, NULL, sh, NULL, 0);
    if (!e->offs_ok || e->nofs != 2 || e->ofs[0] > e->ofs[1])
        return rule(s, E_OFFSETS, NULL, of, NULL, 0);
    if (__builtin_mul_overflow(e->n, (uint64_t)s->bits[d], &bits))
        return rule(s, E_BITS_OVERFLOW, NULL, sh, NULL, d);
    if (bits & 7) return rule(s, E_MISALIGNED, NULL, sh, NULL, d);
    if (bits >> 3 != e->ofs[1] - e->ofs[0]) return rule(s, E_SIZE, NULL, sh, of, d);
    Table *t = s->t;
    Row *w = &t->rows[t->n]; /* its name and dims are in place */
    w->begin = e->ofs[0], w->end = e->ofs[1], w->dtype = (uint8_t)d;
    return t->n++, 0;
}

static int parse_value(P *s, int kind, Val *v);

static PyObject *decode(const uint8_t *p, size_t n) {
    return PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)n, "surrogatepass");
}

static int meta_member(P *s) { /* a key (in s->key) and its value in __metadata__ */
    Val v;
    if (copy(&s->mkey, &s->key) || parse_value(s, K_ANY, &v)) return -1;
    if (s->rule.code) return 0;
    Py_ssize_t had = PyDict_GET_SIZE(s->meta); /* None stands for a value not a string */
    PyObject *k = decode(s->mkey.p, s->mkey.n),
             *val = v.type == V_STR ? decode(s->str.p, s->str.n) : Py_NewRef(Py_None);
    int r = k && val && PyDict_SetDefault(s->meta, k, val) ? 0 : -1;
    if (!r && PyDict_GET_SIZE(s->meta) == had) r = rule(s, E_META_KEY, &s->mkey, NULL, NULL, 0);
    if (!r && !s->rule.code && v.type != V_STR) r = rule(s, E_META_VALUE, &s->mkey, v.span, 0, 0);
    Py_XDECREF(val), Py_XDECREF(k);
    return r;
}

/* A member of the top object (key in s->key): "__metadata__" or a tensor. */
static int top_member(P *s) {
    Val v;
    Table *t = s->t;
    if (copy(&s->name, &s->key)) return -1;
    if (eq(s->name.p, s->name.n, "__metadata__", 12)) {
        if (s->seen_meta && rule(s, E_DUP_META, NULL, NULL, NULL, 0)) return -1;
        s->seen_meta = 1;
        if (peek(s) == '{' && !s->rule.code) {
            Py_CLEAR(s->meta);
            return (s->meta = PyDict_New()) ? parse_value(s, K_META, &v) : -1;
        }
        if (parse_value(s, K_ANY, &v)) return -1;
        return v.type == V_NULL ? 0 : rule(s, E_META, NULL, v.span, NULL, 0);
    }
    if (!s->rule.code) { /* a row with its name: duplicates are found after the pass */
        if (grow((void **)&t->rows, &t->cap, t->n + 1, sizeof(Row))) return -1;
        t->rows[t->n] = (Row){.name = (uint32_t)t->names.n, .dims = (uint32_t)t->ndims};
        if (put(&t->names, s->name.p, s->name.n)) return -1;
        t->nnames = t->n + 1;
    }
    if (peek(s) != '{') return parse_value(s, K_ANY, &v) ? -1 : rule(s, E_ENTRY, 0, v.span, 0, 0);
    memset(&s->ent, 0, sizeof s->ent);
    s->ent.n = 1, s->ent.dtype = -1;
    if (parse_value(s, K_ENTRY, &v)) return -1;
    return s->rule.code ? 0 : check_entry(s);
}

/* A field of a tensor entry (key in s->key); the first misfit key goes to s->mkey. */
static int entry_member(P *s) {
    Entry *e = &s->ent;
    Val v;
    static const char *names[3] = {"dtype", "shape", "data_offsets"};
    static const size_t lens[3] = {5, 5, 12};
    int f = 2, list = peek(s) == '[';
    while (f >= 0 && !eq(s->key.p, s->key.n, names[f], lens[f])) f--;
    if (!e->bad && (f < 0 || e->seen[f])) {
        e->bad = f < 0 ? E_UNKNOWN_FIELD : E_DUP_FIELD;
        if (copy(&s->mkey, &s->key)) return -1;
    }
    if (f >= 0 && e->seen[f]) f = -1; /* a repeat is only parsed */
    if (f >= 0) e->seen[f] = 1;
    if (f == 1) e->shape_ev = list ? 0 : E_SHAPE;
    if (f == 2) e->offs_ok = list;
    if (parse_value(s, list && f > 0 ? K_SHAPE + f - 1 : K_ANY, &v)) return -1;
    if (f >= 0) memcpy(e->span[f], v.span, sizeof v.span);
    for (int i = 0; f == 0 && v.type == V_STR && e->dtype < 0 && i < s->ncodes; i++)
        if (eq(s->str.p, s->str.n, s->codes + 16 * i, strnlen(s->codes + 16 * i, 16))) e->dtype = i;
    return 0;
}

/* An element of a shape or data_offsets list. */
static int element(P *s, int kind, const Val *v) {
    Entry *e = &s->ent;
    Table *t = s->t;
    if (s->rule.code) return 0;
    if (kind == K_OFFS) {
        if (v->type != V_INT)
            e->offs_ok = 0;
        else if (e->nofs < 2)
            e->ofs[e->nofs] = v->u;
        return e->nofs += e->nofs < 3, 0;
    }
    if (e->shape_ev) return 0;
    if (v->type != V_INT) return e->shape_ev = E_SHAPE, 0;
    if (grow((void **)&t->dims, &t->dcap, t->ndims + 1, 8)) return -1;
    t->dims[t->ndims++] = v->u;
    if (__builtin_mul_overflow(e->n, v->u, &e->n)) e->shape_ev = E_COUNT_OVERFLOW;
    return 0;
}

/* An object or list at the cursor, of `kind`, with CPython's json errors. */
static int parse_container(P *s, int kind, int obj) {
    int c, close = obj ? '}' : ']';
    Val v;
    s->pos++;
    skip_ws(s);
    if (peek(s) == close) return s->pos++, 0;
    for (;;) {
        if (obj) {
            if (peek(s) != '"') return fail(s, J_PROP, at(s));
            if (scan_string(s, &s->key)) return -1;
            skip_ws(s);
            if (peek(s) != ':') return fail(s, J_COLON, at(s));
            s->pos++;
            skip_ws(s);
        }
        if (kind == K_TOP     ? top_member(s)
            : kind == K_ENTRY ? entry_member(s)
            : kind == K_META
                ? meta_member(s)
                : parse_value(s, K_ANY, &v) || (kind >= K_SHAPE && element(s, kind, &v)))
            return -1;
        skip_ws(s);
        if ((c = peek(s)) == close) return s->pos++, 0;
        if (c != ',') return fail(s, J_COMMA, at(s));
        s->pos++;
        skip_ws(s);
    }
}

/* A value at the cursor. */
static int parse_value(P *s, int kind, Val *v) {
    int c = peek(s), r = 0;
    v->span[0] = at(s), v->type = V_NULL;
    if ((c == '{' || c == '[') && s->depth >= MAX_DEPTH) /* too deep: where, and how deep */
        return fail(s, E_DEEP, at(s)), s->stop.y = (uint64_t)s->depth + 1, -1;
    if (c == '{' || c == '[') {
        s->depth++, v->type = c == '{' ? V_OBJ : V_ARR;
        if (!(r = parse_container(s, kind, c == '{'))) s->depth--; /* an error keeps its depth */
    } else if (c == '"')
        v->type = V_STR, r = scan_string(s, &s->str);
    else if (!word(s, v, "null", V_NULL) && !word(s, v, "true", V_BOOL) &&
             !word(s, v, "false", V_BOOL) && !word(s, v, "NaN", V_FLOAT) &&
             !word(s, v, "Infinity", V_FLOAT) && !word(s, v, "-Infinity", V_FLOAT))
        r = scan_number(s, v);
    v->span[1] = at(s);
    return r;
}

/* The passes ----------------------------------------------------------------------------- */

#define U(x) ((unsigned long long)(x))
static PyObject *report(const Err *r) {
    return Py_BuildValue("(iy#y#KKKKKK)", r->code, r->name.p ? (char *)r->name.p : "",
                         (Py_ssize_t)r->name.n, r->key.p ? (char *)r->key.p : "",
                         (Py_ssize_t)r->key.n, U(r->a1), U(r->e1), U(r->a2), U(r->e2), U(r->x),
                         U(r->y));
}
static PyObject *verdict(int code, uint64_t x, uint64_t y, const uint8_t *name, size_t n) {
    return report(&(Err){.code = code, .x = x, .y = y, .name = {(uint8_t *)name, n, 0}});
}

static const Table *sorting; /* qsort has no context argument; the GIL is held */
static int by_offsets(const void *x, const void *y) {
    const Row *a = &sorting->rows[*(const uint32_t *)x], *b = &sorting->rows[*(const uint32_t *)y];
    if (a->begin != b->begin) return (a->begin > b->begin) - (a->begin < b->begin);
    return a->end != b->end ? (a->end > b->end) - (a->end < b->end) : (a > b) - (a < b);
}

static int by_name(const void *x, const void *y) { /* ties in JSON order */
    uint32_t i = *(const uint32_t *)x, j = *(const uint32_t *)y;
    int c = cmp(NAME(sorting, i), NAME(sorting, j));
    return c ? c : (i > j) - (i < j);
}

static uint32_t *sorted(const Table *t, size_t n, int (*by)(const void *, const void *)) {
    uint32_t *ix = malloc(n * 4 + 4); /* 0 .. n - 1 in the order of `by`, or NULL */
    size_t k;
    for (k = 0; ix && k < n; k++) ix[k] = (uint32_t)k;
    for (sorting = t, k = 1; ix && k < n && by(ix + k - 1, ix + k) < 0;) k++; /* in order? */
    if (ix && k < n) qsort(ix, n, 4, by);
    return ix;
}

/* Sorted by name, a name's second occurrence first in JSON order (it comes before any rule
 * broken later: names are entered only while none is); NULL if no name repeats. */
static PyObject *duplicates(Table *t) {
    size_t dup = SIZE_MAX;
    if (!(t->byname = sorted(t, t->nnames, by_name))) return PyErr_NoMemory();
    for (size_t k = 1; k < t->nnames; k++) {
        uint32_t i = t->byname[k - 1], j = t->byname[k];
        if (j < dup && !cmp(NAME(t, i), NAME(t, j))) dup = j;
    }
    return dup == SIZE_MAX ? NULL : verdict(E_DUP_NAME, 0, 0, NAME(t, dup));
}

/* Sorted by offsets (stably), the tensors must tile [0, data_size): NULL if they do. */
static PyObject *coverage(Table *t, int64_t data_size) {
    uint64_t pos = 0;
    size_t i = 0;
    if (!(t->order = sorted(t, t->n, by_offsets))) return PyErr_NoMemory();
    for (size_t k = 0; k < t->n; k++, pos = t->rows[i].end)
        if (t->rows[i = t->order[k]].begin != pos)
            return verdict(t->rows[i].begin > pos ? E_HOLE : E_OVERLAP, t->rows[i].begin, pos,
                           NAME(t, i));
    if (pos <= INT64_MAX && (int64_t)pos == data_size) return NULL;
    if (pos <= INT64_MAX && (int64_t)pos < data_size) return verdict(E_TRAILING, pos, 0, NULL, 0);
    return t->n ? verdict(E_TRUNCATED, pos, 0, NAME(t, i)) : verdict(E_TRUNCATED, pos, 0, NULL, 0);
}

static void capsule_free(PyObject *cap) { table_free(PyCapsule_GetPointer(cap, "st_header")); }

static PyObject *run(P *s, int64_t file_size) {
    Val v = {0};
    int c = bad_utf8(s) ? -1 : peek(s), ok = 0, r = 0;
    if (s->stop.code || s->io) { /* invalid UTF-8, or no header to read */
    } else if (c != '{') {       /* another JSON value (HeaderNotObject) or not even that */
        skip_ws(s);              /* blanks then '{': not a brace, however deep */
        if ((c = peek(s)) != '{' && c >= 0 && !(r = parse_value(s, K_ANY, &v)))
            skip_ws(s), ok = peek(s) < 0;
        if ((!r || s->stop.code) && s->stop.code != E_DEEP)
            s->stop.code = ok ? E_NOT_OBJECT : E_NOT_BRACE, s->stop.x = v.type;
    } else if (!(r = parse_value(s, K_TOP, &v))) {
        while ((c = peek(s)) == ' ') s->pos++;
        if (c >= 0) fail(s, E_PADDING, at(s));
    }
    if (PyErr_Occurred() || (r && !s->stop.code)) return PyErr_Occurred() ? 0 : PyErr_NoMemory();
    if (s->io) return verdict(E_IO, at(s), 0, NULL, 0);
    if (s->stop.code) return report(&s->stop);
    PyObject *bad = duplicates(s->t), *cap;
    if (!bad && !PyErr_Occurred() && s->rule.code) return report(&s->rule);
    if (!bad && !PyErr_Occurred()) bad = coverage(s->t, file_size - 8 - (int64_t)s->total);
    if (bad || PyErr_Occurred() || !(cap = PyCapsule_New(s->t, "st_header", capsule_free)))
        return bad;
    size_t n = s->t->n;
    s->t = NULL;
    return Py_BuildValue("(NOn)", cap, s->meta ? s->meta : Py_None, (Py_ssize_t)n);
}

/* Python API ----------------------------------------------------------------------------- */

/* parse(buffer | None, fd, n, file_size, window) -> a report (an error) or
 * (table, metadata, tensor count) */
static PyObject *py_parse(PyObject *self, PyObject *args) {
    PyObject *src, *r = NULL;
    Py_buffer view = {0};
    long long n, file_size, window;
    P s = {.fd = -1};
    if (!PyArg_ParseTuple(args, "OiLLLy#y#", &src, &s.fd, &n, &file_size, &window, &s.codes,
                          &s.ncodes, &s.bits, &s.nbits) ||
        (src != Py_None && PyObject_GetBuffer(src, &view, PyBUF_SIMPLE)))
        return NULL;
    s.ncodes = s.ncodes / 16 < s.nbits ? s.ncodes / 16 : s.nbits;
    s.fd = src == Py_None ? s.fd : -1, s.window = window > 16 ? (size_t)window : 16;
    s.p = view.buf, s.len = (size_t)view.len, s.total = src == Py_None ? (uint64_t)n : s.len;
    grow_limit = s.total > 64 ? (size_t)s.total : 64;
    if (s.window > s.total) s.window = s.total > 16 ? s.total : 16; /* no more than the file */
    if (s.total > UINT32_MAX) /* 32-bit offsets in the tables */
        PyErr_Format(PyExc_ValueError, "header of %llu bytes: too large", U(s.total));
    else if (!(s.t = calloc(1, sizeof(Table))) || (s.fd >= 0 && !(s.win = malloc(s.window))))
        PyErr_NoMemory();
    else
        r = s.total ? run(&s, file_size) : verdict(E_NOT_BRACE, 0, 0, NULL, 0);
    if (src != Py_None) PyBuffer_Release(&view);
    table_free(s.t);
    free(s.win), free(s.str.p), free(s.key.p), free(s.name.p), free(s.mkey.p);
    free(s.rule.name.p), free(s.rule.key.p);
    Py_XDECREF(s.meta);
    return r;
}

/* Tensor i into out[k : k + 5]: name, dtypes[its dtype], shape, begin, end */
static void row(const Table *t, size_t i, PyObject *dtypes, PyObject *out, Py_ssize_t k) {
    const Row *w = &t->rows[i];
    size_t a = w->dims, e = NEXT(t, i, dims, t->ndims);
    PyObject *shape = PyTuple_New((Py_ssize_t)(e - a)), *d = PyTuple_GetItem(dtypes, w->dtype);
    for (size_t j = a; shape && j < e; j++) /* a NULL item (no memory) is seen by the caller */
        PyTuple_SET_ITEM(shape, (Py_ssize_t)(j - a), PyLong_FromUnsignedLongLong(t->dims[j]));
    if (shape) PyObject_GC_UnTrack(shape); /* ints only: never in a cycle, as CPython does */
    PyList_SET_ITEM(out, k, decode(NAME(t, i)));
    PyList_SET_ITEM(out, k + 1, Py_XNewRef(d));
    PyList_SET_ITEM(out, k + 2, shape);
    PyList_SET_ITEM(out, k + 3, PyLong_FromUnsignedLongLong(w->begin));
    PyList_SET_ITEM(out, k + 4, PyLong_FromUnsignedLongLong(w->end));
}

static int by_key(const void *key, const void *x) { /* a name (a Buf) against row *x's */
    return cmp(((const Buf *)key)->p, ((const Buf *)key)->n, NAME(sorting, *(const uint32_t *)x));
}

/* find(table, name, dtypes) -> [name, dtype, shape, begin, end], or None */
static PyObject *py_find(PyObject *self, PyObject *args) {
    PyObject *cap, *dtypes, *out;
    const uint8_t *name;
    Py_ssize_t n;
    Table *t;
    if (!PyArg_ParseTuple(args, "Oy#O", &cap, &name, &n, &dtypes)) return NULL;
    if (!(t = PyCapsule_GetPointer(cap, "st_header"))) return NULL;
    sorting = t; /* the names as duplicates() sorted them; a valid table has no two alike */
    const uint32_t *i = bsearch(&(Buf){(uint8_t *)name, (size_t)n, 0}, t->byname, t->n, 4, by_key);
    if (!i) Py_RETURN_NONE;
    if ((out = PyList_New(5))) row(t, *i, dtypes, out, 0);
    if (PyErr_Occurred()) Py_CLEAR(out);
    return out;
}

/* rows(table, dtypes) -> every row in data order, one flat list (5 items a row);
 * rows(table, None) -> the names in JSON order */
static PyObject *py_rows(PyObject *self, PyObject *args) {
    PyObject *cap, *dtypes, *out;
    Table *t;
    if (!PyArg_ParseTuple(args, "OO", &cap, &dtypes)) return NULL;
    if (!(t = PyCapsule_GetPointer(cap, "st_header"))) return NULL;
    int names = dtypes == Py_None;
    out = PyList_New((Py_ssize_t)t->n * (names ? 1 : 5));
    for (size_t k = 0; out && k < t->n; k++)
        if (names)
            PyList_SET_ITEM(out, (Py_ssize_t)k, decode(NAME(t, k)));
        else
            row(t, t->order[k], dtypes, out, (Py_ssize_t)k * 5);
    if (PyErr_Occurred()) Py_CLEAR(out);
    return out;
}

static PyMethodDef methods[] = {
    {"parse", py_parse, METH_VARARGS,
     "parse(buffer | None, fd, n, file_size, window, codes, bits)"},
    {"find", py_find, METH_VARARGS,
     "find(table, name, dtypes) -> [name, dtype, shape, begin, end]"},
    {"rows", py_rows, METH_VARARGS, "rows(table, dtypes | None) -> rows, or names"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "st_header", NULL, -1, methods};

PyMODINIT_FUNC PyInit_st_header(void) {
    for (int c = 0; c < 256; c++) {
        PLAIN[c] = c >= 0x20 && c != '"' && c != '\\';
        HEX[c] = c >= '0' && c <= '9'                 ? c - '0'
                 : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 87
                                                      : 16;
    }
    return PyModule_Create(&module);
}
