/* The safetensors header validator: one linear pass, in the style of HF's tensor.rs.
 *
 * Layout and rules: see weightsmith/safetensors/_header.py.  The pass reads the N
 * header bytes once, from a buffer or (for a big header) from the file a window at
 * a time, and never holds more than the window and the tables it returns.
 *
 * Error precedence is that of decoding, then parsing, then validating, as Python's
 * json would find them: the first invalid UTF-8 byte anywhere; nesting deeper than
 * MAX_DEPTH anywhere; the first JSON syntax error (messages as CPython's json
 * scanner, NaN / Infinity accepted as floats); padding not spaces; then the first
 * broken rule in JSON order (a rule break is recorded and the pass goes on checking
 * the syntax); then the coverage of the data section.  A failure returns a tuple
 * (code, name, key, a1, e1, a2, e2, x, y) that _header.py turns into the named
 * error: codes are the order of the enum below, spans [a, e) are header offsets of
 * JSON values that Python re-reads for the message, names and keys are decoded.
 * Strings decode to UTF-8 with lone surrogates as 3-byte sequences (Python's
 * "surrogatepass"), so equal names are equal bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_DEPTH 128
#define MAX_CODES 64

enum {
    E_OK, E_IO, E_UTF8, E_NOT_BRACE, E_NOT_OBJECT, E_DEEP,
    E_VALUE, E_PROP, E_COLON, E_COMMA, E_UNTERM, E_CONTROL, E_ESCAPE, E_UESCAPE, E_PADDING,
    E_DUP_META, E_META, E_META_KEY, E_META_VALUE, E_DUP_NAME, E_ENTRY, E_UNKNOWN_FIELD,
    E_DUP_FIELD, E_MISSING_FIELD, E_DTYPE, E_SHAPE, E_COUNT_OVERFLOW, E_OFFSETS,
    E_BITS_OVERFLOW, E_MISALIGNED, E_SIZE, E_HOLE, E_OVERLAP, E_TRAILING, E_TRUNCATED,
};
enum { V_OBJ, V_ARR, V_STR, V_INT, V_BIGINT, V_HUGE, V_FLOAT, V_TRUE, V_FALSE, V_NULL };
enum { K_ANY, K_TOP, K_META, K_ENTRY, K_SHAPE, K_OFFS };

static char codes[MAX_CODES][16];
static size_t code_len[MAX_CODES];
static uint64_t code_bits[MAX_CODES];
static int n_codes;
static uint64_t seed = 0x9E3779B97F4A7C15u;

typedef struct { uint8_t *p; size_t n, cap; } Buf;

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c += c / 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static int put(Buf *b, const void *src, size_t k) {
    if (grow((void **)&b->p, &b->cap, b->n + k, 1)) return -1;
    if (k) memcpy(b->p + b->n, src, k);
    b->n += k;
    return 0;
}

typedef struct { int type; uint64_t a, e, u; } Val;

/* The tensors of a valid header, in JSON order (a capsule's payload).  Column i of
 * name_off / dims_off (n + 1 entries) bounds tensor i's name / dims in the arenas. */
typedef struct {
    size_t n, cap, dcap, hcap, ndims;
    uint64_t *begin, *end, *dims;
    uint32_t *name_off, *dims_off, *hash, *order;
    uint8_t *dtype;
    Buf names;
    int sorted; /* names strictly increasing: bisection, no hash table */
} Table;

/* The tensor entry being parsed: the fields seen, the first misfit key, the value
 * spans of dtype / shape / data_offsets, the element count, the offsets. */
typedef struct {
    int bad, seen[3], dtype, shape_ev, offs_ok, nofs;
    uint64_t va[3], ve[3], n, ofs[2];
} Entry;

typedef struct {
    /* source: header bytes [base, base + len) are at p; the cursor is p[pos] */
    const uint8_t *p;
    size_t len, pos, cap;
    uint64_t base, total;
    int fd, io, max_digits;
    uint8_t *win;
    size_t window; /* bytes read from a file at a time */
    /* the error that stopped the pass; what the tail scan finds after it */
    int err, in_str, utf8, deep;
    long depth;
    uint64_t err_pos, utf8_pos, deep_pos, deepest;
    /* the first broken rule: code, tensor name, key, value spans, dtype */
    int rule, rx;
    Buf rname, rkey;
    uint64_t ra1, re1, ra2, re2;
    /* scratch: last string, last key, tensor name, metadata key, bad field key */
    Buf str, key, name, mkey, fkey;
    int seen_meta;
    PyObject *meta;
    Entry ent;
    Table *t;
} P;

static inline uint64_t at(P *s) { return s->base + s->pos; }

/* Make `need` bytes from the cursor available if the header has them; returns
 * how many are.  A buffer holds them all; a file is read a window at a time. */
static size_t more(P *s, size_t need) {
    size_t have = s->len - s->pos;
    if (s->fd < 0 || have >= need) return have;
    if (have) memmove(s->win, s->win + s->pos, have);
    s->base += s->pos;
    s->pos = 0;
    s->len = have;
    uint64_t left = s->total - s->base;
    size_t want = need > s->window ? need : s->window;
    if (want > left) want = (size_t)left;
    if (want > s->cap) {
        uint8_t *w = realloc(s->win, want);
        if (!w) { s->io = ENOMEM; return have; }
        s->win = w;
        s->cap = want;
    }
    s->p = s->win;
    while (s->len < want) {
        ssize_t r = pread(s->fd, s->win + s->len, want - s->len, (off_t)(8 + s->base + s->len));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) { s->io = r < 0 ? errno : -1; break; }
        s->len += (size_t)r;
    }
    return s->len - s->pos;
}

static inline int peek(P *s) {
    if (s->pos < s->len || more(s, 1)) return s->p[s->pos];
    return -1;
}

static inline void skip_ws(P *s) {
    for (int c; (c = peek(s)) == ' ' || c == '\t' || c == '\n' || c == '\r';) s->pos++;
}

static int fail(P *s, int code, uint64_t pos) {
    if (!s->err) {
        s->err = code;
        s->err_pos = pos;
        s->in_str = code == E_CONTROL || code == E_ESCAPE || code == E_UESCAPE;
    }
    return -1;
}

/* Length of the valid UTF-8 sequence at the cursor (lead byte >= 0x80), or 0. */
static size_t utf8_len(P *s) {
    size_t have = more(s, 4);
    const uint8_t *p = s->p + s->pos;
    uint8_t c = p[0], lo = 0x80, hi = 0xBF;
    size_t k;
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c >= 0xE0 && c <= 0xEF) { k = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { k = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return 0;
    if (have < k || p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return k;
}

static int bad_utf8(P *s) {
    s->utf8 = 1;
    s->utf8_pos = at(s);
    return fail(s, E_UTF8, at(s));
}

/* After the error that stopped the pass: the rest of the header, for the first
 * invalid UTF-8 and for nesting (brackets outside strings) past MAX_DEPTH. */
static void tail(P *s, int in_str, long depth, int count_depth) {
    for (int c; !s->utf8 && (c = peek(s)) >= 0;) {
        if (c >= 0x80) {
            size_t k = utf8_len(s);
            if (!k) { s->utf8 = 1; s->utf8_pos = at(s); return; }
            s->pos += k;
            continue;
        }
        uint64_t here = at(s);
        s->pos++;
        if (in_str) {
            if (c == '"') in_str = 0;
            else if (c == '\\' && peek(s) >= 0 && peek(s) < 0x80) s->pos++;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '[' || c == '{') {
            if (++depth > MAX_DEPTH && count_depth) {
                if (!s->deep) { s->deep = 1; s->deep_pos = here; }
                if ((uint64_t)depth > s->deepest) s->deepest = (uint64_t)depth;
            }
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
}

static uint8_t PLAIN[256]; /* bytes a string holds as they are */

static int hex4(const uint8_t *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

static int put_cp(Buf *b, uint32_t c) {
    uint8_t u[4];
    size_t k;
    if (c < 0x80) { u[0] = (uint8_t)c; k = 1; }
    else if (c < 0x800) { u[0] = (uint8_t)(0xC0 | c >> 6); u[1] = (uint8_t)(0x80 | (c & 63)); k = 2; }
    else if (c < 0x10000) {
        u[0] = (uint8_t)(0xE0 | c >> 12); u[1] = (uint8_t)(0x80 | (c >> 6 & 63));
        u[2] = (uint8_t)(0x80 | (c & 63)); k = 3;
    } else {
        u[0] = (uint8_t)(0xF0 | c >> 18); u[1] = (uint8_t)(0x80 | (c >> 12 & 63));
        u[2] = (uint8_t)(0x80 | (c >> 6 & 63)); u[3] = (uint8_t)(0x80 | (c & 63)); k = 4;
    }
    return put(b, u, k);
}

/* A JSON string at the cursor ('"'), decoded into `out`. */
static int scan_string(P *s, Buf *out) {
    uint64_t q = at(s);
    s->pos++;
    out->n = 0;
    for (;;) {
        if (s->pos >= s->len && !more(s, 1)) return fail(s, E_UNTERM, q);
        const uint8_t *p = s->p;
        size_t i = s->pos, j = i, n = s->len;
        while (j < n && PLAIN[p[j]]) j++;
        if (put(out, p + i, j - i)) return -1;
        s->pos = j;
        if (j == n) continue;
        uint8_t c = p[j];
        if (c == '"') { s->pos++; return 0; }
        if (c < 0x20) return fail(s, E_CONTROL, at(s));
        if (c >= 0x80) {
            size_t k = utf8_len(s);
            if (!k) return bad_utf8(s);
            if (put(out, s->p + s->pos, k)) return -1;
            s->pos += k;
            continue;
        }
        size_t have = more(s, 13);  /* a backslash: up to two \uXXXX and one byte */
        p = s->p + s->pos;
        if (have < 2) { s->pos = s->len; return fail(s, E_UNTERM, q); }
        if (p[1] != 'u') {
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            const char *e = memchr(from, p[1], 8);
            if (!e || !p[1]) return fail(s, E_ESCAPE, at(s));
            if (put(out, &to[e - from], 1)) return -1;
            s->pos += 2;
            continue;
        }
        uint32_t cp, lo;
        size_t used = 6;
        if (have < 7 || !hex4(p + 2, &cp)) return fail(s, E_UESCAPE, at(s) + 1);
        if (cp >= 0xD800 && cp <= 0xDBFF && have >= 13 && p[6] == '\\' && p[7] == 'u') {
            if (!hex4(p + 8, &lo)) return fail(s, E_UESCAPE, at(s) + 7);
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                used = 12;
            }
        }
        if (put_cp(out, cp)) return -1;
        s->pos += used;
    }
}

static int literal(P *s, const char *lit, size_t k) {
    if (more(s, k) < k || memcmp(s->p + s->pos, lit, k)) return 0;
    s->pos += k;
    return 1;
}

static inline int digit_at(P *s, size_t i) {
    return s->len - s->pos > i && s->p[s->pos + i] >= '0' && s->p[s->pos + i] <= '9';
}

/* A number as CPython's json matches it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int scan_number(P *s, Val *v) {
    uint64_t start = at(s), u = 0;
    int neg = 0, over = 0;
    long digits = 0;
    if (peek(s) == '-') { neg = 1; s->pos++; }
    int c = peek(s);
    if (c < '0' || c > '9') return fail(s, E_VALUE, start);
    int first = c;
    do {
        over |= __builtin_mul_overflow(u, 10, &u) | __builtin_add_overflow(u, (uint64_t)(c - '0'), &u);
        digits++;
        s->pos++;
    } while (first != '0' && (c = peek(s)) >= '0' && c <= '9');
    v->type = V_INT;
    if (s->max_digits > 0 && digits > s->max_digits) v->type = V_HUGE;
    else if (over || (neg && u)) v->type = V_BIGINT;
    v->u = u;
    size_t h = more(s, 3);
    const uint8_t *p = s->p + s->pos;
    if (h >= 2 && p[0] == '.' && p[1] >= '0' && p[1] <= '9') {
        v->type = V_FLOAT;
        for (s->pos++; digit_at(s, 0) || (more(s, 1) && digit_at(s, 0));) s->pos++;
        h = more(s, 3);
        p = s->p + s->pos;
    }
    if (h >= 2 && (p[0] == 'e' || p[0] == 'E') &&
        ((p[1] >= '0' && p[1] <= '9') ||
         (h >= 3 && (p[1] == '+' || p[1] == '-') && p[2] >= '0' && p[2] <= '9'))) {
        v->type = V_FLOAT;
        for (s->pos += 2; digit_at(s, 0) || (more(s, 1) && digit_at(s, 0));) s->pos++;
    }
    return 0;
}


/* Tables --------------------------------------------------------------------- */

static uint64_t hash(const uint8_t *p, size_t n) {
    uint64_t h = seed ^ ((uint64_t)n * 0x9E3779B97F4A7C15u);
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = 0;
        memcpy(&w, p + i, n - i < 8 ? n - i : 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9u;
        h ^= h >> 31;
    }
    h *= 0x94D049BB133111EBu;
    return h ^ (h >> 29);
}

static inline const uint8_t *name_of(const Table *t, size_t i, size_t *n) {
    *n = t->name_off[i + 1] - t->name_off[i];
    return t->names.p + t->name_off[i];
}
#define NAME(t, i) ((t)->names.p + (t)->name_off[i])
#define NAME_LEN(t, i) ((size_t)((t)->name_off[(i) + 1] - (t)->name_off[i]))

static inline int same(const uint8_t *p, size_t n, const uint8_t *q, size_t m) {
    return n == m && (n == 0 || !memcmp(p, q, n));
}

/* The hash slot holding the name p[0:n], or the empty slot where it would go. */
static size_t slot(const Table *t, const uint8_t *p, size_t n) {
    size_t mask = t->hcap - 1, h = (size_t)hash(p, n) & mask;
    for (; t->hash[h]; h = (h + 1) & mask)
        if (same(p, n, NAME(t, t->hash[h] - 1), NAME_LEN(t, t->hash[h] - 1))) break;
    return h;
}

/* Enter name i (already in the arena): 1 if it came before, -1 out of memory. */
static int add_name(Table *t, size_t i) {
    size_t n, m = 0;
    const uint8_t *p = name_of(t, i, &n);
    if (t->sorted) {
        const uint8_t *q = i ? name_of(t, i - 1, &m) : NULL;
        int c = i && m && n ? memcmp(q, p, n < m ? n : m) : 0;
        if (!i || c < 0 || (c == 0 && m < n)) return 0;
        t->sorted = 0; /* out of order: hash every name so far */
        for (size_t j = 0; j < i; j++)
            if (add_name(t, j) < 0) return -1;
    }
    if (2 * (i + 1) > t->hcap) {
        free(t->hash);
        for (t->hcap = t->hcap ? t->hcap : 1024; t->hcap < 2 * (i + 1);) t->hcap *= 2;
        if (!(t->hash = calloc(t->hcap, 4))) return -1;
        for (size_t j = 0; j < i; j++) t->hash[slot(t, NAME(t, j), NAME_LEN(t, j))] = (uint32_t)j + 1;
    }
    size_t h = slot(t, p, n);
    if (t->hash[h]) return 1;
    t->hash[h] = (uint32_t)i + 1;
    return 0;
}

/* Index of the tensor named p[0:n], or -1. */
static Py_ssize_t find(const Table *t, const uint8_t *p, size_t n) {
    size_t m = 0;
    if (!t->sorted) {
        if (!t->n) return -1;
        uint32_t k = t->hash[slot(t, p, n)];
        return k ? (Py_ssize_t)k - 1 : -1;
    }
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const uint8_t *q = name_of(t, mid, &m);
        int c = m && n ? memcmp(q, p, n < m ? n : m) : 0;
        if (c < 0 || (c == 0 && m < n)) lo = mid + 1;
        else hi = mid;
    }
    return lo < t->n && same(p, n, NAME(t, lo), NAME_LEN(t, lo)) ? (Py_ssize_t)lo : -1;
}

static int reserve(Table *t, size_t n) {
    if (n <= t->cap) return 0;
    size_t c = t->cap ? t->cap + t->cap / 2 : 64;
    if (c < n) c = n;
#define RE(f, k) { void *q = realloc(t->f, (k) * sizeof *t->f); if (!q) return -1; t->f = q; }
    RE(begin, c) RE(end, c) RE(dtype, c) RE(name_off, c + 1) RE(dims_off, c + 1)
#undef RE
    if (!t->cap) t->name_off[0] = t->dims_off[0] = 0;
    t->cap = c;
    return 0;
}

static void table_free(Table *t) {
    if (!t) return;
    free(t->begin); free(t->end); free(t->dims); free(t->name_off); free(t->dims_off);
    free(t->hash); free(t->order); free(t->dtype); free(t->names.p);
    free(t);
}

/* Rules ---------------------------------------------------------------------- */

static int rule(P *s, int code, const Buf *key, uint64_t a1, uint64_t e1, uint64_t a2, uint64_t e2) {
    if (s->rule) return 0;
    s->rule = code;
    s->ra1 = a1, s->re1 = e1, s->ra2 = a2, s->re2 = e2;
    s->rname.n = s->rkey.n = 0;
    if (put(&s->rname, s->name.p, s->name.n) || (key && put(&s->rkey, key->p, key->n))) return -1;
    return 0;
}

/* A tensor entry closed: its checks, in the order of the rules. */
static int check_entry(P *s) {
    Entry *e = &s->ent;
    if (e->bad) return rule(s, e->bad, &s->fkey, 0, 0, 0, 0);
    for (int f = 0; f < 3; f++)
        if (!e->seen[f]) return s->rx = f, rule(s, E_MISSING_FIELD, NULL, 0, 0, 0, 0);
    if (e->dtype < 0) return rule(s, E_DTYPE, NULL, e->va[0], e->ve[0], 0, 0);
    if (e->shape_ev) return rule(s, e->shape_ev, NULL, e->va[1], e->ve[1], 0, 0);
    if (!e->offs_ok || e->nofs != 2 || e->ofs[0] > e->ofs[1])
        return rule(s, E_OFFSETS, NULL, e->va[2], e->ve[2], 0, 0);
    uint64_t bits;
    s->rx = e->dtype;
    if (__builtin_mul_overflow(e->n, code_bits[e->dtype], &bits))
        return rule(s, E_BITS_OVERFLOW, NULL, e->va[1], e->ve[1], 0, 0);
    if (bits & 7) return rule(s, E_MISALIGNED, NULL, e->va[1], e->ve[1], 0, 0);
    if (bits >> 3 != e->ofs[1] - e->ofs[0])
        return rule(s, E_SIZE, NULL, e->va[1], e->ve[1], e->va[2], e->ve[2]);
    Table *t = s->t;
    size_t i = t->n; /* name_off[i + 1] is set, and the columns reserved */
    t->begin[i] = e->ofs[0];
    t->end[i] = e->ofs[1];
    t->dtype[i] = (uint8_t)e->dtype;
    t->dims_off[i + 1] = (uint32_t)t->ndims;
    t->n = i + 1;
    return 0;
}

static int parse_value(P *s, int kind, Val *v);

static int meta_member(P *s, const Val *v) {
    PyObject *k = PyUnicode_DecodeUTF8((char *)s->mkey.p, (Py_ssize_t)s->mkey.n, "surrogatepass");
    PyObject *val = NULL;
    if (!k) return -1;
    int r = PyDict_Contains(s->meta, k);
    if (r == 1) r = rule(s, E_META_KEY, &s->mkey, 0, 0, 0, 0);
    else if (r == 0 && v->type != V_STR) r = rule(s, E_META_VALUE, &s->mkey, v->a, v->e, 0, 0);
    else if (r == 0) {
        val = PyUnicode_DecodeUTF8((char *)s->str.p, (Py_ssize_t)s->str.n, "surrogatepass");
        r = val ? PyDict_SetItem(s->meta, k, val) : -1;
    }
    Py_XDECREF(val);
    Py_DECREF(k);
    return r;
}

/* A member of the top object: "__metadata__" or a tensor. */
static int top_member(P *s) {
    Val v;
    Table *t = s->t;
    s->name.n = 0;
    if (put(&s->name, s->key.p, s->key.n)) return -1;
    if (same(s->name.p, s->name.n, (const uint8_t *)"__metadata__", 12)) {
        if (s->seen_meta && rule(s, E_DUP_META, NULL, 0, 0, 0, 0)) return -1;
        s->seen_meta = 1;
        if (peek(s) == '{' && !s->rule) {
            Py_CLEAR(s->meta);
            if (!(s->meta = PyDict_New())) return -1;
            return parse_value(s, K_META, &v);
        }
        if (parse_value(s, K_ANY, &v)) return -1;
        return v.type == V_NULL ? 0 : rule(s, E_META, NULL, v.a, v.e, 0, 0);
    }
    if (!s->rule) {
        size_t i = t->n;
        if (reserve(t, i + 1) || put(&t->names, s->name.p, s->name.n)) return -1;
        t->name_off[i + 1] = (uint32_t)t->names.n;
        int dup = add_name(t, i);
        if (dup < 0 || (dup && rule(s, E_DUP_NAME, NULL, 0, 0, 0, 0))) return -1;
    }
    if (peek(s) != '{') {
        if (parse_value(s, K_ANY, &v)) return -1;
        return rule(s, E_ENTRY, NULL, v.a, v.e, 0, 0);
    }
    memset(&s->ent, 0, sizeof s->ent);
    s->ent.n = 1;
    s->ent.dtype = -1;
    if (parse_value(s, K_ENTRY, &v)) return -1;
    return s->rule ? 0 : check_entry(s);
}

/* A field of a tensor entry. */
static int entry_member(P *s) {
    Entry *e = &s->ent;
    Val v;
    int f = same(s->key.p, s->key.n, (const uint8_t *)"dtype", 5)          ? 0
            : same(s->key.p, s->key.n, (const uint8_t *)"shape", 5)        ? 1
            : same(s->key.p, s->key.n, (const uint8_t *)"data_offsets", 12) ? 2
                                                                           : -1;
    if (!e->bad && (f < 0 || e->seen[f])) {
        e->bad = f < 0 ? E_UNKNOWN_FIELD : E_DUP_FIELD;
        s->fkey.n = 0;
        if (put(&s->fkey, s->key.p, s->key.n)) return -1;
    }
    if (f >= 0 && e->seen[f]) f = -1; /* a repeat is only parsed */
    int sub = K_ANY;
    if (f >= 0) {
        e->seen[f] = 1;
        int list = peek(s) == '[';
        if (f == 1) sub = list ? K_SHAPE : K_ANY, e->shape_ev = list ? 0 : E_SHAPE;
        if (f == 2) sub = list ? K_OFFS : K_ANY, e->offs_ok = list;
    }
    if (parse_value(s, sub, &v)) return -1;
    if (f < 0) return 0;
    e->va[f] = v.a;
    e->ve[f] = v.e;
    if (f == 0 && v.type == V_STR)
        for (int i = 0; i < n_codes; i++)
            if (same(s->str.p, s->str.n, (const uint8_t *)codes[i], code_len[i])) e->dtype = i;
    return 0;
}

/* An element of a shape or data_offsets list. */
static int element(P *s, int kind, const Val *v) {
    Entry *e = &s->ent;
    if (s->rule) return 0;
    if (kind == K_OFFS) {
        if (v->type != V_INT) e->offs_ok = 0;
        else if (e->nofs < 2) e->ofs[e->nofs] = v->u;
        e->nofs += e->nofs < 3;
        return 0;
    }
    if (e->shape_ev) return 0;
    if (v->type != V_INT) {
        e->shape_ev = E_SHAPE;
        return 0;
    }
    Table *t = s->t;
    if (grow((void **)&t->dims, &t->dcap, t->ndims + 1, 8)) return -1;
    t->dims[t->ndims++] = v->u;
    if (__builtin_mul_overflow(e->n, v->u, &e->n)) e->shape_ev = E_COUNT_OVERFLOW;
    return 0;
}

static int parse_object(P *s, int kind) {
    s->pos++;
    skip_ws(s);
    int c = peek(s);
    if (c == '}') return s->pos++, 0;
    for (;;) {
        if (c != '"') return fail(s, E_PROP, at(s));
        if (scan_string(s, &s->key)) return -1;
        skip_ws(s);
        if (peek(s) != ':') return fail(s, E_COLON, at(s));
        s->pos++;
        skip_ws(s);
        Val v;
        int r = kind == K_TOP     ? top_member(s)
                : kind == K_ENTRY ? entry_member(s)
                : kind == K_META  ? (s->mkey.n = 0, put(&s->mkey, s->key.p, s->key.n) ||
                                                   parse_value(s, K_ANY, &v) ||
                                                   (!s->rule && meta_member(s, &v)))
                                  : parse_value(s, K_ANY, &v);
        if (r) return -1;
        skip_ws(s);
        c = peek(s);
        if (c == '}') return s->pos++, 0;
        if (c != ',') return fail(s, E_COMMA, at(s));
        s->pos++;
        skip_ws(s);
        c = peek(s);
    }
}

static int parse_array(P *s, int kind) {
    Val v;
    s->pos++;
    skip_ws(s);
    if (peek(s) == ']') return s->pos++, 0;
    for (;;) {
        if (parse_value(s, K_ANY, &v) || (kind != K_ANY && element(s, kind, &v))) return -1;
        skip_ws(s);
        int c = peek(s);
        if (c == ']') return s->pos++, 0;
        if (c != ',') return fail(s, E_COMMA, at(s));
        s->pos++;
        skip_ws(s);
    }
}

static int parse_value(P *s, int kind, Val *v) {
    int c = peek(s), r = 0;
    v->a = at(s);
    v->type = V_NULL;
    if (c == '{' || c == '[') {
        if (s->depth + 1 > MAX_DEPTH) {
            s->deep = 1, s->deep_pos = at(s), s->deepest = (uint64_t)s->depth + 1;
            s->pos++;
            tail(s, 0, s->depth + 1, 1);
            return fail(s, E_DEEP, v->a);
        }
        s->depth++;
        v->type = c == '{' ? V_OBJ : V_ARR;
        r = c == '{' ? parse_object(s, kind == K_SHAPE || kind == K_OFFS ? K_ANY : kind)
                     : parse_array(s, kind);
        if (r) return r;
        s->depth--;
    } else if (c == '"') {
        v->type = V_STR;
        r = scan_string(s, &s->str);
    } else if (c == 'n' && literal(s, "null", 4)) v->type = V_NULL;
    else if (c == 't' && literal(s, "true", 4)) v->type = V_TRUE;
    else if (c == 'f' && literal(s, "false", 5)) v->type = V_FALSE;
    else if ((c == 'N' && literal(s, "NaN", 3)) || (c == 'I' && literal(s, "Infinity", 8)) ||
             (c == '-' && literal(s, "-Infinity", 9)))
        v->type = V_FLOAT;
    else r = scan_number(s, v);
    v->e = at(s);
    return r;
}

/* The pass ------------------------------------------------------------------- */

static PyObject *error(int code, const Buf *name, const Buf *key, uint64_t a1, uint64_t e1,
                       uint64_t a2, uint64_t e2, uint64_t x, uint64_t y) {
    static const Buf none = {(uint8_t *)"", 0, 0};
    if (!name || !name->p) name = &none;
    if (!key || !key->p) key = &none;
    return Py_BuildValue("(iy#y#KKKKKK)", code, (char *)name->p, (Py_ssize_t)name->n,
                         (char *)key->p, (Py_ssize_t)key->n, (unsigned long long)a1,
                         (unsigned long long)e1, (unsigned long long)a2, (unsigned long long)e2,
                         (unsigned long long)x, (unsigned long long)y);
}

static const Table *sorting; /* qsort has no context argument; the GIL is held */
static int by_offsets(const void *x, const void *y) {
    uint32_t i = *(const uint32_t *)x, j = *(const uint32_t *)y;
    const Table *t = sorting;
    if (t->begin[i] != t->begin[j]) return t->begin[i] < t->begin[j] ? -1 : 1;
    if (t->end[i] != t->end[j]) return t->end[i] < t->end[j] ? -1 : 1;
    return i < j ? -1 : i > j; /* stable */
}

static void capsule_free(PyObject *cap) { table_free(PyCapsule_GetPointer(cap, "st_header")); }

/* Sorted by offsets, the tensors must tile [0, data_size). */
static PyObject *coverage(Table *t, int64_t data_size) {
    int in_order = 1;
    for (size_t i = 1; i < t->n && in_order; i++)
        in_order = t->begin[i] >= t->begin[i - 1] && t->end[i] >= t->end[i - 1];
    if (!in_order) {
        if (!(t->order = malloc(t->n * 4))) return PyErr_NoMemory();
        for (size_t i = 0; i < t->n; i++) t->order[i] = (uint32_t)i;
        sorting = t;
        qsort(t->order, t->n, 4, by_offsets);
    }
    uint64_t pos = 0;
    size_t k = 0, n;
    Buf nm = {0};
    for (; k < t->n; k++) {
        size_t i = t->order ? t->order[k] : k;
        if (t->begin[i] != pos) {
            nm.p = (uint8_t *)name_of(t, i, &n), nm.n = n;
            return error(t->begin[i] > pos ? E_HOLE : E_OVERLAP, &nm, 0, 0, 0, 0, 0, t->begin[i], pos);
        }
        pos = t->end[i];
    }
    if (pos <= INT64_MAX && (int64_t)pos == data_size) return NULL;
    if (pos <= INT64_MAX && (int64_t)pos < data_size) return error(E_TRAILING, 0, 0, 0, 0, 0, 0, pos, 0);
    if (t->n) nm.p = (uint8_t *)name_of(t, t->order ? t->order[t->n - 1] : t->n - 1, &n), nm.n = n;
    return error(E_TRUNCATED, &nm, 0, 0, 0, 0, 0, pos, 0);
}

static PyObject *run(P *s, int64_t file_size) {
    Val v = {0};
    int c = peek(s);
    if (c != '{') {
        /* another JSON value (HeaderNotObject), or not even that (HeaderNotBrace);
         * the depth counts only when the text does not open with blanks and '{' */
        skip_ws(s);
        c = peek(s);
        int ok = 0, count = c != '{';
        if (count && c >= 0 && !parse_value(s, K_ANY, &v)) {
            skip_ws(s);
            ok = peek(s) < 0;
        }
        if (!s->utf8 && !s->deep) tail(s, s->in_str, s->depth, count);
        if (s->io) return error(E_IO, 0, 0, 0, 0, 0, 0, at(s), (uint64_t)s->io);
        if (s->utf8) return error(E_UTF8, 0, 0, 0, 0, 0, 0, s->utf8_pos, 0);
        if (s->deep) return error(E_DEEP, 0, 0, 0, 0, 0, 0, s->deep_pos, s->deepest);
        if (ok && v.type != V_HUGE) return error(E_NOT_OBJECT, 0, 0, v.a, v.e, 0, 0, (uint64_t)v.type, 0);
        return error(E_NOT_BRACE, 0, 0, 0, 0, 0, 0, 0, 0);
    }
    if (!parse_value(s, K_TOP, &v)) {
        while ((c = peek(s)) == ' ') s->pos++;
        if (c >= 0) fail(s, E_PADDING, at(s));
    }
    if (PyErr_Occurred()) return NULL;
    if (s->err && !s->utf8 && !s->deep) tail(s, s->in_str, s->depth, 1);
    if (s->io) return error(E_IO, 0, 0, 0, 0, 0, 0, at(s), (uint64_t)s->io);
    if (s->utf8) return error(E_UTF8, 0, 0, 0, 0, 0, 0, s->utf8_pos, 0);
    if (s->deep) return error(E_DEEP, 0, 0, 0, 0, 0, 0, s->deep_pos, s->deepest);
    if (s->err) return error(s->err, 0, 0, 0, 0, 0, 0, s->err_pos, 0);
    if (s->rule)
        return error(s->rule, &s->rname, &s->rkey, s->ra1, s->re1, s->ra2, s->re2, (uint64_t)s->rx, 0);
    Table *t = s->t;
    PyObject *bad = coverage(t, file_size - 8 - (int64_t)s->total);
    if (bad || PyErr_Occurred()) return bad;
    PyObject *cap = PyCapsule_New(t, "st_header", capsule_free);
    if (!cap) return NULL;
    s->t = NULL;
    return Py_BuildValue("(NOn)", cap, s->meta ? s->meta : Py_None, (Py_ssize_t)t->n);
}

/* Python API ----------------------------------------------------------------- */

static PyObject *py_parse(PyObject *self, PyObject *args) {
    PyObject *src, *r;
    int fd, max_digits;
    unsigned long long n;
    long long file_size;
    Py_buffer view = {0};
    (void)self;
    Py_ssize_t window;
    if (!PyArg_ParseTuple(args, "OiKLin", &src, &fd, &n, &file_size, &max_digits, &window)) return NULL;
    if (n > 200000000ull) return PyErr_Format(PyExc_ValueError, "header size %llu", n);
    P s;
    memset(&s, 0, sizeof s);
    s.fd = src == Py_None ? fd : -1;
    s.total = n;
    s.max_digits = max_digits;
    s.window = window > 16 ? (size_t)window : 16;
    if (src != Py_None) {
        if (PyObject_GetBuffer(src, &view, PyBUF_SIMPLE)) return NULL;
        s.p = view.buf;
        s.len = (size_t)view.len < n ? (size_t)view.len : (size_t)n;
        s.total = s.len;
    }
    if (!(s.t = calloc(1, sizeof(Table))) || put(&s.t->names, "", 0) ||
        grow((void **)&s.t->names.p, &s.t->names.cap, 64, 1)) {
        r = PyErr_NoMemory();
    } else {
        s.t->sorted = 1;
        r = s.total ? run(&s, file_size) : error(E_NOT_BRACE, 0, 0, 0, 0, 0, 0, 0, 0);
    }
    if (src != Py_None) PyBuffer_Release(&view);
    table_free(s.t);
    free(s.win), free(s.str.p), free(s.key.p), free(s.name.p), free(s.mkey.p), free(s.fkey.p);
    free(s.rname.p), free(s.rkey.p);
    Py_XDECREF(s.meta);
    return r;
}

static Table *table(PyObject *cap) { return PyCapsule_GetPointer(cap, "st_header"); }

static PyObject *decode(const uint8_t *p, size_t n) {
    return PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)n, "surrogatepass");
}

static PyObject *py_find(PyObject *self, PyObject *args) {
    PyObject *cap;
    const char *name;
    Py_ssize_t n;
    (void)self;
    if (!PyArg_ParseTuple(args, "Oy#", &cap, &name, &n)) return NULL;
    Table *t = table(cap);
    return t ? PyLong_FromSsize_t(find(t, (const uint8_t *)name, (size_t)n)) : NULL;
}

static PyObject *shape_tuple(const Table *t, size_t i, uint64_t *count) {
    size_t a = t->dims_off[i], e = t->dims_off[i + 1];
    PyObject *shape = PyTuple_New((Py_ssize_t)(e - a));
    *count = 1;
    for (size_t k = a; shape && k < e; k++) {
        PyObject *d = PyLong_FromUnsignedLongLong(t->dims[k]);
        if (!d) { Py_CLEAR(shape); break; }
        PyTuple_SET_ITEM(shape, (Py_ssize_t)(k - a), d);
        *count *= t->dims[k]; /* < 2**64: the rules checked it */
    }
    return shape;
}

/* info(table, i) -> (dtype index, shape, begin, end, element count) */
static PyObject *py_info(PyObject *self, PyObject *args) {
    PyObject *cap;
    Py_ssize_t i;
    uint64_t count;
    (void)self;
    if (!PyArg_ParseTuple(args, "On", &cap, &i)) return NULL;
    Table *t = table(cap);
    if (!t) return NULL;
    if (i < 0 || (size_t)i >= t->n) return PyErr_Format(PyExc_IndexError, "tensor %zd", i);
    PyObject *shape = shape_tuple(t, (size_t)i, &count);
    if (!shape) return NULL;
    return Py_BuildValue("(iNKKK)", t->dtype[i], shape, (unsigned long long)t->begin[i],
                         (unsigned long long)t->end[i], (unsigned long long)count);
}

/* names(table) -> every name, in JSON order */
static PyObject *py_names(PyObject *self, PyObject *cap) {
    (void)self;
    Table *t = table(cap);
    PyObject *out = t ? PyList_New((Py_ssize_t)t->n) : NULL;
    size_t n;
    for (size_t i = 0; out && i < t->n; i++) {
        const uint8_t *p = name_of(t, i, &n);
        PyObject *s = decode(p, n);
        if (!s) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, (Py_ssize_t)i, s);
    }
    return out;
}

/* plan(table, code names) -> names, codes, shape texts ("2,3"), begins, ends, in data order */
static PyObject *py_plan(PyObject *self, PyObject *args) {
    PyObject *cap, *names;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO!", &cap, &PyTuple_Type, &names)) return NULL;
    Table *t = table(cap);
    if (!t) return NULL;
    PyObject *out[5] = {0};
    Buf text = {0};
    size_t n;
    for (int k = 0; k < 5; k++)
        if (!(out[k] = PyList_New((Py_ssize_t)t->n))) goto fail;
    for (size_t k = 0; k < t->n; k++) {
        size_t i = t->order ? t->order[k] : k;
        const uint8_t *p = name_of(t, i, &n);
        PyObject *code = t->dtype[i] < PyTuple_GET_SIZE(names) ? PyTuple_GET_ITEM(names, t->dtype[i]) : Py_None;
        text.n = 0;
        for (size_t d = t->dims_off[i]; d < t->dims_off[i + 1]; d++) {
            char num[24];
            int len = snprintf(num, sizeof num, d > t->dims_off[i] ? ",%llu" : "%llu",
                               (unsigned long long)t->dims[d]);
            if (put(&text, num, (size_t)len)) goto fail;
        }
        PyObject *items[5] = {decode(p, n), Py_NewRef(code),
                              PyUnicode_FromStringAndSize((char *)text.p, (Py_ssize_t)text.n),
                              PyLong_FromUnsignedLongLong(t->begin[i]),
                              PyLong_FromUnsignedLongLong(t->end[i])};
        for (int j = 0; j < 5; j++) PyList_SET_ITEM(out[j], (Py_ssize_t)k, items[j]);
        for (int j = 0; j < 5; j++)
            if (!items[j]) goto fail;
    }
    free(text.p);
    return Py_BuildValue("(NNNNN)", out[0], out[1], out[2], out[3], out[4]);
fail:
    free(text.p);
    for (int k = 0; k < 5; k++) Py_XDECREF(out[k]);
    return NULL;
}

/* configure(codes: tuple[bytes], bits: tuple[int], seed: int) */
static PyObject *py_configure(PyObject *self, PyObject *args) {
    PyObject *names, *bits;
    unsigned long long sd;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!K", &PyTuple_Type, &names, &PyTuple_Type, &bits, &sd)) return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(names);
    if (k > MAX_CODES || PyTuple_GET_SIZE(bits) != k) return PyErr_Format(PyExc_ValueError, "codes");
    for (Py_ssize_t i = 0; i < k; i++) {
        char *p;
        Py_ssize_t n;
        if (PyBytes_AsStringAndSize(PyTuple_GET_ITEM(names, i), &p, &n)) return NULL;
        if (n > 15) return PyErr_Format(PyExc_ValueError, "code too long");
        memcpy(codes[i], p, (size_t)n);
        code_len[i] = (size_t)n;
        code_bits[i] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(bits, i));
        if (PyErr_Occurred()) return NULL;
    }
    n_codes = (int)k;
    seed = sd;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"parse", py_parse, METH_VARARGS, "parse(buffer | None, fd, n, file_size, max_digits, window)"},
    {"find", py_find, METH_VARARGS, "find(table, name) -> index or -1"},
    {"info", py_info, METH_VARARGS, "info(table, i) -> (dtype, shape, begin, end, count)"},
    {"names", py_names, METH_O, "names(table) -> names in JSON order"},
    {"plan", py_plan, METH_VARARGS, "plan(table, codes) -> names, codes, shapes, begins, ends"},
    {"configure", py_configure, METH_VARARGS, "configure(codes, bits, seed)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "st_header", NULL, -1, methods};

PyMODINIT_FUNC PyInit_st_header(void) {
    for (int c = 0x20; c < 0x80; c++) PLAIN[c] = c != '"' && c != '\\';
    return PyModule_Create(&module);
}
