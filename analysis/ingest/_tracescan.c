/*
 * _tracescan: Chrome trace-format events (Kineto, torch_npu trace_view.json) straight into columns.
 *
 * Why native: a Python reader of these files spends its time creating a Python object for every event
 * and every field (msgspec's typed decode is already the fastest way to do that) and then walking those
 * objects again to build columns. This scanner walks the JSON bytes once and appends each stored field
 * of each complete ("X") or instant ("i") event to a growable C array; strings are interned in a hash
 * table, so a name or a call stack becomes a Python str once per distinct text, not once per event.
 *
 * It is deliberately narrow. It reads the elements of the `traceEvents` array (the caller finds the
 * array and reads the keys around it) and never composes an error message: anything it does not fully
 * understand is handed back to the caller, which owns the reference (msgspec) path:
 *   - MALFORMED: the bytes are not valid JSON (or not an array of objects) at `pos`; the caller decodes
 *     with msgspec, which reports the error exactly as it always has;
 *   - ODD: one event to decode on the reference path, alone: a kept event with a stored field of a type
 *     the typed decode would treat differently (a string `ts` in a Kineto trace, a float correlation id,
 *     a null name, an object where a scalar is read...), or, with `other_odd`, any event whose phase is
 *     not kept (trace_view.json's metadata and counters); coercion stays in one place;
 *   - NEED_MORE: the buffer ends inside an element; the caller appends the next block and calls again.
 *
 * Scanner(specs, *, phases="Xi", other_odd=False, decimal=False). `specs` lists the argument keys read,
 * each (key, kind, null allowed, default[, top]): `top` keys are read at the event's top level (a flow's
 * "id"), the others inside its "args". Kinds: INT (int64), STR (string id), INTSTR (int64, or a string
 * id when the value is a string), DIMS / TYPES (Kineto's shape / dtype text made from the raw list),
 * GRID (the product of a three-int list), SCALAR (int64, string id or float64, by the value's JSON
 * type), RAW (the value's JSON text, interned). `decimal` is trace_view.json's mode: ts / dur become exact
 * integer ns (below), an absent pid / tid is 0, a null one is ODD, and "args" that is not an object
 * means no arguments.
 *
 * Columns (one row per kept event, in file order), returned by `take()` as bytearrays (writable numpy
 * views) with the strings interned since the previous `take()` and the number of elements scanned:
 *   ph (uint8), cat / name (int32 string ids, -1 absent), pid / tid (int64 or NONE, plus int32 string
 *   id or -1 when the value is a string), ts / dur (float64 µs, NaN when absent or null; in decimal mode
 *   int64 ns), ts / dur kind (uint8 T_OK, T_NULL, T_TEXT, T_NUMBER) and string id (int32: the text the
 *   reader's own parser reads when the kind is T_TEXT / T_NUMBER), then per spec its int64, string-id
 *   and float64 columns, in that order, as its kind has them.
 * Number parsing: integers exactly to int64 (larger: ODD where an int is stored); floats by Clinger's
 * exact fast path (<= 15 significant digits, |exp10| <= 22: one correctly rounded multiply or divide),
 * else by CPython's correctly rounded PyOS_string_to_double: the same double msgspec gives. Decimal
 * mode: "-?digits[.d{0,3}]" text (a string or a number) is exact ns; a number `dur` is llrint(d * 1000),
 * half to even like Python's round(); other text is handed over as text.
 *
 * Beside the event scanner, for the other files of an Ascend export (same primitives, same rule: hand
 * back what is not plainly understood):
 *   - Scanner.forest(buf, start, final): a JSON document (communication*.json) read block by block, as
 *     tables of its values, one row per value with its parent, depth, key, kind, number and exact
 *     decimal (`comm_scan.py` reads them);
 *   - numerals(cells, kind): a CSV text column's int / exact-ns / float cells (kernel_details.csv);
 *   - text_kinds(seq): whether a column holds only str (and None), the check every text column gets
 *     before it is inserted.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define NONE_I64 (-(INT64_C(1) << 62)) /* the reader's "absent" sentinel in int64 columns */

enum { ST_NEED_MORE = 0, ST_DONE = 1, ST_ODD = 2, ST_MALFORMED = 3 };
enum { K_INT = 0, K_STR = 1, K_INTSTR = 2, K_DIMS = 3, K_TYPES = 4, K_GRID = 5, K_SCALAR = 6, K_RAW = 7 };
/* how a ts / dur value was read in decimal mode (the *_KIND columns) */
enum { T_OK = 0, T_NULL = 1, T_TEXT = 2, T_NUMBER = 3 };
enum { J_OK = 0, J_MORE = 1, J_BAD = 2, J_END = 3 /* container_open / _next: it is closed */ };
enum { S_FIRST = 0, S_SEP = 1, S_ELEM = 2 };

#define MAX_ARGS 48
#define MAX_DEPTH 512

typedef struct {
    char *data;
    size_t item, cap; /* item size, capacity in items */
} Col;

typedef struct {
    char key[64];
    Py_ssize_t klen;
    int kind;
    int nullable;
    int64_t dflt;
    int top;    /* a top-level key of the event (else a key of its args) */
    int ci, cs, cf; /* index of its int64 / string-id / float64 column, -1 if none */
} ArgSpec;

typedef struct {
    uint64_t hash;
    size_t off, len; /* into the arena */
    int32_t id;
} Slot;

typedef struct {
    PyObject_HEAD
    /* columns */
    Col *cols;
    int ncols;
    size_t nrows, rowcap;
    /* argument specs */
    ArgSpec args[MAX_ARGS];
    int nargs;
    /* interning */
    Slot *slots;
    size_t nslots, nused;
    char *arena;
    size_t arena_len, arena_cap;
    PyObject *strs; /* list of str, index = id */
    Py_ssize_t reported;
    /* scratch for unescaped strings and transformed raw values */
    char *sbuf, *tbuf;
    size_t scap, tcap;
    int state;
    int final;
    /* mode */
    char phases[16];   /* the "ph" values kept as rows */
    int other_odd;     /* events of other phases are handed back (ODD) instead of skipped */
    int decimal;       /* ts / dur as exact ns from decimal text (trace_view.json), pid / tid default 0 */
    Py_ssize_t counted; /* elements scanned (not handed back) since the last take() */
    /* forest(): the objects open at depths 0-2 between calls, each with a serial number and, per level,
     * the serial of the object that last had each string as a key (repeated keys) */
    int f_phase;        /* 0 before the document, 1 inside it, 2 after it */
    int f_lvl;          /* objects open */
    int f_state[3];     /* F_FIRST (after '{'), F_SEP (after a member), F_MEMBER (after ',') */
    int32_t f_key[3];
    uint32_t f_serial[3], f_serials;
    uint32_t *f_stamp[3];
    size_t f_nstamp[3];
    int f_dup;
} Scanner;

#define F_LEVELS 3
enum { F_FIRST = 0, F_SEP = 1, F_MEMBER = 2 };

/* fixed columns */
enum { C_PH, C_CAT, C_NAME, C_PID_I, C_PID_S, C_TID_I, C_TID_S, C_TS, C_DUR, C_TS_KIND, C_TS_SID, C_DUR_KIND,
       C_DUR_SID, C_FIXED };

/* ---------------------------------------------------------------------------------------------- */
/* growable buffers                                                                                */

static int grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap : 256;
    while (n < need) n *= 2;
    char *p = PyMem_Realloc(*buf, n);
    if (!p) { PyErr_NoMemory(); return -1; }
    *buf = p;
    *cap = n;
    return 0;
}

static int reserve_row(Scanner *s) {
    if (s->nrows < s->rowcap) return 0;
    size_t n = s->rowcap ? s->rowcap * 2 : 4096;
    for (int c = 0; c < s->ncols; c++) {
        char *p = PyMem_Realloc(s->cols[c].data, n * s->cols[c].item);
        if (!p) { PyErr_NoMemory(); return -1; }
        s->cols[c].data = p;
        s->cols[c].cap = n;
    }
    s->rowcap = n;
    return 0;
}

#define COL_I64(s, c) (((int64_t *)(s)->cols[c].data)[(s)->nrows])
#define COL_I32(s, c) (((int32_t *)(s)->cols[c].data)[(s)->nrows])
#define COL_F64(s, c) (((double *)(s)->cols[c].data)[(s)->nrows])
#define COL_U8(s, c) (((uint8_t *)(s)->cols[c].data)[(s)->nrows])
#define COL_ANY64(s, c, v) memcpy((s)->cols[c].data + (s)->nrows * 8, &(v), 8)

/* ---------------------------------------------------------------------------------------------- */
/* interning                                                                                       */

static uint64_t hash_bytes(const char *p, size_t n) {
    /* FNV-1a over 8-byte words, then a final mix: fast on long call stacks, good enough spread */
    uint64_t h = 1469598103934665603ULL ^ (n * 0x9E3779B97F4A7C15ULL);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 1099511628211ULL;
        h ^= h >> 29;
    }
    uint64_t w = 0;
    memcpy(&w, p + i, n - i);
    h = (h ^ w) * 1099511628211ULL;
    h ^= h >> 32;
    h *= 0xD6E8FEB86659FD93ULL;
    h ^= h >> 32;
    return h;
}

static int rehash(Scanner *s) {
    size_t n = s->nslots ? s->nslots * 2 : 1024;
    Slot *t = PyMem_Calloc(n, sizeof(Slot));
    if (!t) { PyErr_NoMemory(); return -1; }
    for (size_t i = 0; i < n; i++) t[i].id = -1;
    for (size_t i = 0; i < s->nslots; i++) {
        if (s->slots[i].id < 0) continue;
        size_t j = s->slots[i].hash & (n - 1);
        while (t[j].id >= 0) j = (j + 1) & (n - 1);
        t[j] = s->slots[i];
    }
    PyMem_Free(s->slots);
    s->slots = t;
    s->nslots = n;
    return 0;
}

/* id of the text p[0:n]; -2 when it is not valid UTF-8 (the event becomes ODD); -3 on memory error */
static int32_t intern(Scanner *s, const char *p, size_t n) {
    if ((s->nused + 1) * 2 > s->nslots && rehash(s) < 0) return -3;
    uint64_t h = hash_bytes(p, n);
    size_t j = h & (s->nslots - 1);
    while (s->slots[j].id >= 0) {
        Slot *e = &s->slots[j];
        if (e->hash == h && e->len == n && memcmp(s->arena + e->off, p, n) == 0) return e->id;
        j = (j + 1) & (s->nslots - 1);
    }
    PyObject *str = PyUnicode_DecodeUTF8(p, (Py_ssize_t)n, "strict");
    if (!str) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { PyErr_Clear(); return -2; }
        return -3;
    }
    if (PyList_Append(s->strs, str) < 0) { Py_DECREF(str); return -3; }
    Py_DECREF(str);
    if (grow(&s->arena, &s->arena_cap, s->arena_len + n + 1) < 0) return -3;
    memcpy(s->arena + s->arena_len, p, n);
    Slot *e = &s->slots[j];
    e->hash = h;
    e->off = s->arena_len;
    e->len = n;
    e->id = (int32_t)(PyList_GET_SIZE(s->strs) - 1);
    s->arena_len += n;
    s->nused++;
    return e->id;
}

/* ---------------------------------------------------------------------------------------------- */
/* JSON primitives. Each takes the cursor by pointer and returns J_OK, J_MORE (the buffer ends  */
/* inside the value) or J_BAD (not JSON).                                                          */

typedef struct {
    const char *p, *end;
} Cur;

static inline void ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* A string at c->p (which is '"'). On J_OK *out / *n give its decoded bytes: a pointer into the input
 * when it has no escapes, else into s->sbuf. *surrogate is set when an escape encodes a UTF-16
 * surrogate (left to the reference path). When `want` is 0 the string is only validated and skipped. */
static int string(Scanner *s, Cur *c, const char **out, size_t *n, int want, int *surrogate) {
    const char *p = c->p + 1, *start = p;
    for (;;) {
        /* fast run to the next quote, backslash or control character */
        while (p < c->end && *p != '"' && *p != '\\' && (unsigned char)*p >= 0x20) p++;
        if (p >= c->end) return J_MORE;
        if (*p == '"') {
            if (want) { *out = start; *n = (size_t)(p - start); }
            c->p = p + 1;
            return J_OK;
        }
        if (*p != '\\') return J_BAD; /* raw control character */
        break;
    }
    /* has escapes: decode into sbuf */
    size_t len = 0;
    p = start;
    while (1) {
        if (p >= c->end) return J_MORE;
        unsigned char ch = (unsigned char)*p;
        if (ch == '"') break;
        if (ch < 0x20) return J_BAD;
        if (want && grow(&s->sbuf, &s->scap, len + 8) < 0) return -1;
        if (ch != '\\') {
            if (want) s->sbuf[len++] = (char)ch;
            p++;
            continue;
        }
        if (p + 1 >= c->end) return J_MORE;
        char e = p[1];
        p += 2;
        char lit = 0;
        switch (e) {
        case '"': lit = '"'; break;
        case '\\': lit = '\\'; break;
        case '/': lit = '/'; break;
        case 'b': lit = '\b'; break;
        case 'f': lit = '\f'; break;
        case 'n': lit = '\n'; break;
        case 'r': lit = '\r'; break;
        case 't': lit = '\t'; break;
        case 'u': {
            if (p + 4 > c->end) return J_MORE;
            int v = 0;
            for (int k = 0; k < 4; k++) {
                int h = hexval(p[k]);
                if (h < 0) return J_BAD;
                v = v * 16 + h;
            }
            p += 4;
            if (v >= 0xD800 && v <= 0xDFFF) {
                *surrogate = 1; /* pairs and lone halves: the reference decoder decides */
                v = '?';
            }
            if (want) {
                if (v < 0x80) s->sbuf[len++] = (char)v;
                else if (v < 0x800) {
                    s->sbuf[len++] = (char)(0xC0 | (v >> 6));
                    s->sbuf[len++] = (char)(0x80 | (v & 0x3F));
                } else {
                    s->sbuf[len++] = (char)(0xE0 | (v >> 12));
                    s->sbuf[len++] = (char)(0x80 | ((v >> 6) & 0x3F));
                    s->sbuf[len++] = (char)(0x80 | (v & 0x3F));
                }
            }
            continue;
        }
        default: return J_BAD;
        }
        if (want) s->sbuf[len++] = lit;
    }
    if (want) { *out = s->sbuf; *n = len; }
    c->p = p + 1;
    return J_OK;
}

typedef struct {
    int is_int;   /* no fraction, no exponent */
    int big;      /* an integer beyond int64 */
    int64_t i;
    double d;
    int exact;    /* the value is exactly m * 10^e (no exponent, at most 19 significant digits, m in int64) */
    int64_t m;
    int e;
} Num;

static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                               1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static int number(Scanner *s, Cur *c, Num *out) {
    const char *p = c->p, *begin = p;
    int neg = 0;
    if (*p == '-') { neg = 1; p++; }
    if (p >= c->end) return J_MORE;
    uint64_t mant = 0;
    int digits = 0, dropped = 0, exp10 = 0, overflow = 0;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < c->end && *p >= '0' && *p <= '9') {
            if (digits < 19) { mant = mant * 10 + (uint64_t)(*p - '0'); digits++; }
            else { dropped++; overflow = 1; }
            p++;
        }
    } else {
        return J_BAD;
    }
    exp10 = dropped;
    int is_int = 1;
    if (p < c->end && *p == '.') {
        is_int = 0;
        p++;
        const char *f = p;
        while (p < c->end && *p >= '0' && *p <= '9') {
            if (digits < 19 && !(mant == 0 && *p == '0' && digits == 0)) {
                mant = mant * 10 + (uint64_t)(*p - '0');
                digits++;
                exp10--;
            } else if (mant == 0 && digits == 0) {
                exp10--; /* leading zeros of 0.000123 */
            } else {
                overflow = 1;
            }
            p++;
        }
        if (p == f) return p >= c->end ? J_MORE : J_BAD;
    }
    if (p < c->end && (*p == 'e' || *p == 'E')) {
        is_int = 0;
        p++;
        if (p < c->end && (*p == '+' || *p == '-')) p++;
        const char *f = p;
        while (p < c->end && *p >= '0' && *p <= '9') p++;
        if (p == f) return p >= c->end ? J_MORE : J_BAD;
        overflow = 1; /* rare in traces: leave exponents to the exact slow path */
    }
    if (p >= c->end && !s->final) return J_MORE; /* more digits may follow in the next block */
    out->exact = !overflow && mant <= (uint64_t)INT64_MAX;
    out->m = out->exact ? (neg ? -(int64_t)mant : (int64_t)mant) : 0;
    out->e = exp10;
    out->is_int = is_int;
    out->big = 0;
    if (is_int) {
        if (overflow || mant > (uint64_t)INT64_MAX + (uint64_t)neg) {
            out->big = 1;
            out->i = 0;
        } else {
            out->i = neg ? (int64_t)(0 - mant) : (int64_t)mant;
        }
    }
    if (!overflow && mant <= (UINT64_C(1) << 53) && exp10 >= -22 && exp10 <= 22) {
        double d = (double)mant;
        d = exp10 < 0 ? d / POW10[-exp10] : d * POW10[exp10];
        out->d = neg ? -d : d;
    } else {
        char tmp[512];
        size_t n = (size_t)(p - begin);
        if (n >= sizeof tmp) {
            out->d = NAN; /* a 500-digit number: not a timestamp; let the reference path judge */
            out->big = 1;
        } else {
            memcpy(tmp, begin, n);
            tmp[n] = 0;
            out->d = PyOS_string_to_double(tmp, NULL, NULL);
            if (out->d == -1.0 && PyErr_Occurred()) return -1;
        }
    }
    c->p = p;
    return J_OK;
}

static int literal(Cur *c, const char *lit, size_t n) {
    size_t have = (size_t)(c->end - c->p);
    if (have < n) return memcmp(c->p, lit, have) == 0 ? J_MORE : J_BAD;
    if (memcmp(c->p, lit, n) != 0) return J_BAD;
    c->p += n;
    return J_OK;
}

/* At an object's '{' or an array's '[' (`close`: its '}' or ']'): steps in; J_END when it is empty. */
static int container_open(Cur *c, char close) {
    c->p++;
    ws(c);
    if (c->p >= c->end) return J_MORE;
    if (*c->p == close) {
        c->p++;
        return J_END;
    }
    return J_OK;
}

/* The next member of an object: its key (decoded when `want`: a pointer into the input, or into sbuf when
 * it has escapes, so it is used before the next string is read) and the cursor at its value. `surrogate`
 * (may be NULL) is set when the key has a surrogate escape (see `string`). */
static int member_key(Scanner *s, Cur *c, const char **k, size_t *kn, int want, int *surrogate) {
    ws(c);
    if (c->p >= c->end) return J_MORE;
    if (*c->p != '"') return J_BAD;
    int sur = 0;
    int r = string(s, c, k, kn, want, &sur);
    if (surrogate) *surrogate = sur;
    if (r != J_OK) return r;
    ws(c);
    if (c->p >= c->end) return J_MORE;
    if (*c->p != ':') return J_BAD;
    c->p++;
    ws(c);
    return c->p >= c->end ? J_MORE : J_OK;
}

/* After a member's value or an element: J_OK when another follows (its ',' consumed), J_END at `close`. */
static int container_next(Cur *c, char close) {
    ws(c);
    if (c->p >= c->end) return J_MORE;
    if (*c->p == ',') {
        c->p++;
        return J_OK;
    }
    if (*c->p == close) {
        c->p++;
        return J_END;
    }
    return J_BAD;
}

/* skip any value, validating it */
static int skip(Scanner *s, Cur *c, int depth) {
    if (depth > MAX_DEPTH) return J_BAD;
    ws(c);
    if (c->p >= c->end) return J_MORE;
    int r, sur = 0;
    switch (*c->p) {
    case '"': return string(s, c, NULL, NULL, 0, &sur);
    case 't': return literal(c, "true", 4);
    case 'f': return literal(c, "false", 5);
    case 'n': return literal(c, "null", 4);
    case '{': {
        if ((r = container_open(c, '}')) != J_OK) return r == J_END ? J_OK : r;
        for (;;) {
            if ((r = member_key(s, c, NULL, NULL, 0, NULL)) != J_OK) return r;
            if ((r = skip(s, c, depth + 1)) != J_OK) return r;
            if ((r = container_next(c, '}')) != J_OK) return r == J_END ? J_OK : r;
        }
    }
    case '[': {
        if ((r = container_open(c, ']')) != J_OK) return r == J_END ? J_OK : r;
        for (;;) {
            if ((r = skip(s, c, depth + 1)) != J_OK) return r;
            if ((r = container_next(c, ']')) != J_OK) return r == J_END ? J_OK : r;
        }
    }
    default: {
        if (*c->p == '-' || (*c->p >= '0' && *c->p <= '9')) {
            Num n;
            return number(s, c, &n);
        }
        return J_BAD;
    }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* raw-value transforms (the reader's shape / dtype texts)                                          */

/* Input Dims JSON -> "4096,1000;1000,4000": spaces dropped, "],[" -> ";", brackets dropped */
static size_t dims_text(const char *v, size_t n, char *out) {
    size_t k = 0;
    /* first drop spaces (Python: .replace(b" ", b"")), then one left-to-right pass */
    char *tmp = out + n; /* the caller gives 2n bytes */
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (v[i] != ' ') tmp[m++] = v[i];
    for (size_t i = 0; i < m;) {
        if (i + 3 <= m && tmp[i] == ']' && tmp[i + 1] == ',' && tmp[i + 2] == '[') {
            out[k++] = ';';
            i += 3;
        } else if (tmp[i] == '[' || tmp[i] == ']') {
            i++;
        } else {
            out[k++] = tmp[i++];
        }
    }
    return k;
}

/* Input type JSON -> "float;Scalar": '", "' -> ';' then '","' -> ';', then '[', ']', '"' dropped */
static size_t types_text(const char *v, size_t n, char *out) {
    char *a = out + n; /* the caller gives 2n bytes */
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        if (i + 4 <= n && v[i] == '"' && v[i + 1] == ',' && v[i + 2] == ' ' && v[i + 3] == '"') {
            a[m++] = ';';
            i += 4;
        } else {
            a[m++] = v[i++];
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < m;) {
        if (i + 3 <= m && a[i] == '"' && a[i + 1] == ',' && a[i + 2] == '"') {
            out[k++] = ';';
            i += 3;
        } else if (a[i] == '[' || a[i] == ']' || a[i] == '"') {
            i++;
        } else {
            out[k++] = a[i++];
        }
    }
    return k;
}

/* ---------------------------------------------------------------------------------------------- */
/* one event                                                                                       */

typedef struct {
    int ph_ok;
    char ph;
    int odd;
    int32_t cat, name;
    int64_t pid_i, tid_i;
    int32_t pid_s, tid_s;
    double ts, dur;
    int64_t ts_ns, dur_ns; /* decimal mode */
    uint8_t ts_kind, dur_kind;
    int32_t ts_sid, dur_sid;
    int64_t ai[MAX_ARGS];
    int32_t as[MAX_ARGS];
    double af[MAX_ARGS];
} Ev;

#define CHECK(x)                 \
    do {                         \
        int _r = (x);            \
        if (_r != J_OK) return _r; \
    } while (0)

/* a string value to intern, else null (-> -1) when allowed, else ODD */
static int str_value(Scanner *s, Cur *c, Ev *ev, int32_t *dst, int nullable) {
    const char *sp;
    size_t sn;
    int sur = 0;
    if (*c->p == '"') {
        CHECK(string(s, c, &sp, &sn, 1, &sur));
        if (sur) { ev->odd = 1; return J_OK; }
        int32_t id = intern(s, sp, sn);
        if (id == -3) return -1;
        if (id == -2) { ev->odd = 1; return J_OK; }
        *dst = id;
        return J_OK;
    }
    if (*c->p == 'n' && nullable) {
        CHECK(literal(c, "null", 4));
        *dst = -1;
        return J_OK;
    }
    ev->odd = 1;
    return skip(s, c, 1);
}

/* an int (or, for INTSTR, a string); null -> NONE when allowed */
static int int_value(Scanner *s, Cur *c, Ev *ev, int64_t *dst, int32_t *sdst, int nullable) {
    char ch = *c->p;
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        Num n;
        CHECK(number(s, c, &n));
        if (!n.is_int || n.big) ev->odd = 1;
        else *dst = n.i;
        return J_OK;
    }
    if (ch == '"' && sdst) {
        *dst = NONE_I64;
        return str_value(s, c, ev, sdst, 0);
    }
    if (ch == 'n' && nullable) {
        CHECK(literal(c, "null", 4));
        *dst = NONE_I64;
        return J_OK;
    }
    ev->odd = 1;
    return skip(s, c, 1);
}

/* A value reader's last case: `null` (*is_null set), else a type the reader does not take: the event
 * becomes ODD and the value is skipped. */
static int null_or_odd(Scanner *s, Cur *c, Ev *ev, int *is_null) {
    *is_null = *c->p == 'n';
    if (*is_null) return literal(c, "null", 4);
    ev->odd = 1;
    return skip(s, c, 1);
}

static int float_value(Scanner *s, Cur *c, Ev *ev, double *dst) {
    char ch = *c->p;
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        Num n;
        CHECK(number(s, c, &n));
        if (n.big && !n.is_int) ev->odd = 1;
        *dst = n.d;
        return J_OK;
    }
    int is_null;
    CHECK(null_or_odd(s, c, ev, &is_null));
    if (is_null) *dst = NAN;
    return J_OK;
}

/* grid: a list of three ints -> their product; another list of ints, a string or null -> NONE */
static int grid_value(Scanner *s, Cur *c, Ev *ev, int64_t *dst) {
    if (*c->p != '[') {
        if (*c->p == '"' || *c->p == 'n') {
            *dst = NONE_I64;
            return skip(s, c, 1);
        }
        ev->odd = 1;
        return skip(s, c, 1);
    }
    c->p++;
    int64_t prod = 1;
    int count = 0, over = 0;
    ws(c);
    if (c->p >= c->end) return J_MORE;
    if (*c->p == ']') {
        c->p++;
    } else {
        for (;;) {
            ws(c);
            if (c->p >= c->end) return J_MORE;
            char ch = *c->p;
            if (ch == '-' || (ch >= '0' && ch <= '9')) {
                Num n;
                CHECK(number(s, c, &n));
                if (!n.is_int || n.big) ev->odd = 1;
                else if (__builtin_mul_overflow(prod, n.i, &prod)) over = 1;
            } else {
                ev->odd = 1;
                CHECK(skip(s, c, 2));
            }
            count++;
            ws(c);
            if (c->p >= c->end) return J_MORE;
            if (*c->p == ',') { c->p++; continue; }
            if (*c->p == ']') { c->p++; break; }
            return J_BAD;
        }
    }
    *dst = (count == 3 && !over) ? prod : NONE_I64;
    return J_OK;
}

static int raw_value(Scanner *s, Cur *c, Ev *ev, int32_t *dst, int kind) {
    const char *v = c->p;
    CHECK(skip(s, c, 1));
    if (*v != '[') return J_OK; /* not a list (a string, null...): absent, as the loose decode has it */
    for (const char *q = v; q < c->p; q++) {
        if (*q == '\n' || *q == '\r' || *q == '\t' || *q == '\\') {
            ev->odd = 1; /* pretty-printed or escaped: the reference path re-encodes it compactly */
            return J_OK;
        }
    }
    size_t n = (size_t)(c->p - v);
    if (grow(&s->tbuf, &s->tcap, 2 * n + 1) < 0) return -1;
    size_t k = kind == K_DIMS ? dims_text(v, n, s->tbuf) : types_text(v, n, s->tbuf);
    int32_t id = intern(s, s->tbuf, k);
    if (id == -3) return -1;
    if (id == -2) { ev->odd = 1; return J_OK; }
    *dst = id;
    return J_OK;
}

/* Canonical decimal µs text, -?digits[.d{0,3}], -> exact ns. 0 on success; 1 for any other text (the
 * reader's own parser decides: spaces, '+', exponents, more decimals, overflow). */
static int decimal_ns(const char *p, size_t n, int64_t *out) {
    size_t i = 0;
    int neg = 0;
    if (i < n && p[i] == '-') { neg = 1; i++; }
    int64_t whole = 0;
    size_t d0 = i;
    while (i < n && p[i] >= '0' && p[i] <= '9') {
        if (__builtin_mul_overflow(whole, 10, &whole) || __builtin_add_overflow(whole, p[i] - '0', &whole)) return 1;
        i++;
    }
    if (i == d0) return 1;
    int64_t frac = 0;
    if (i < n && p[i] == '.') {
        i++;
        int k = 0;
        while (i < n && p[i] >= '0' && p[i] <= '9') {
            if (++k > 3) return 1;
            frac = frac * 10 + (p[i] - '0');
            i++;
        }
        if (k == 0) return 1;
        for (; k < 3; k++) frac *= 10;
    }
    if (i != n) return 1;
    int64_t ns;
    if (__builtin_mul_overflow(whole, 1000, &ns) || __builtin_add_overflow(ns, frac, &ns)) return 1;
    *out = neg ? -ns : ns;
    return 0;
}

/* decimal mode: ts (any JSON value; strings and numbers read exactly) or dur (number: the float's
 * round(d * 1000), half to even, as Python rounds it; string: exact). Text the canonical form does not
 * cover is interned for the reader's own parser (T_TEXT / T_NUMBER). */
static int time_value(Scanner *s, Cur *c, Ev *ev, int is_dur) {
    int64_t *ns = is_dur ? &ev->dur_ns : &ev->ts_ns;
    uint8_t *kind = is_dur ? &ev->dur_kind : &ev->ts_kind;
    int32_t *sid = is_dur ? &ev->dur_sid : &ev->ts_sid;
    char ch = *c->p;
    if (ch == '"') {
        const char *sp;
        size_t sn;
        int sur = 0;
        CHECK(string(s, c, &sp, &sn, 1, &sur));
        if (sur) { ev->odd = 1; return J_OK; }
        if (decimal_ns(sp, sn, ns) == 0) { *kind = T_OK; return J_OK; }
        int32_t id = intern(s, sp, sn);
        if (id == -3) return -1;
        if (id == -2) { ev->odd = 1; return J_OK; }
        *kind = T_TEXT;
        *sid = id;
        return J_OK;
    }
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        const char *v = c->p;
        Num n;
        CHECK(number(s, c, &n));
        size_t len = (size_t)(c->p - v);
        if (is_dur) {
            double p = n.d * 1000.0;
            if (!n.big && isfinite(p) && fabs(p) < 9.2e18) {
                *ns = (int64_t)llrint(p);
                *kind = T_OK;
                return J_OK;
            }
        } else if (decimal_ns(v, len, ns) == 0) {
            *kind = T_OK;
            return J_OK;
        }
        int32_t id = intern(s, v, len);
        if (id < 0) return id == -3 ? -1 : J_OK;
        *kind = T_NUMBER;
        *sid = id;
        return J_OK;
    }
    int is_null;
    CHECK(null_or_odd(s, c, ev, &is_null));
    if (is_null) *kind = T_NULL;
    return J_OK;
}

/* any scalar: an int (int64), a float (float64) or a string (interned); null -> nothing; else ODD */
static int scalar_value(Scanner *s, Cur *c, Ev *ev, int a) {
    char ch = *c->p;
    if (ch == '-' || (ch >= '0' && ch <= '9')) {
        Num n;
        CHECK(number(s, c, &n));
        if (n.big) ev->odd = 1;
        else if (n.is_int) ev->ai[a] = n.i;
        else ev->af[a] = n.d;
        return J_OK;
    }
    if (ch == '"') return str_value(s, c, ev, &ev->as[a], 0);
    if (ch == 'n') return literal(c, "null", 4);
    ev->odd = 1;
    return skip(s, c, 1);
}

/* any value, as its JSON text */
static int rawtext_value(Scanner *s, Cur *c, Ev *ev, int32_t *dst) {
    const char *v = c->p;
    CHECK(skip(s, c, 1));
    int32_t id = intern(s, v, (size_t)(c->p - v));
    if (id == -3) return -1;
    if (id == -2) { ev->odd = 1; return J_OK; }
    *dst = id;
    return J_OK;
}

/* the value of argument spec `a` */
static int spec_value(Scanner *s, Cur *c, Ev *ev, int which) {
    ArgSpec *a = &s->args[which];
    switch (a->kind) {
    case K_INT: return int_value(s, c, ev, &ev->ai[which], NULL, a->nullable);
    case K_INTSTR:
        ev->as[which] = -1;
        return int_value(s, c, ev, &ev->ai[which], &ev->as[which], 1);
    case K_STR: return str_value(s, c, ev, &ev->as[which], a->nullable);
    case K_GRID: return grid_value(s, c, ev, &ev->ai[which]);
    case K_SCALAR:
        ev->ai[which] = NONE_I64;
        ev->af[which] = NAN;
        ev->as[which] = -1;
        return scalar_value(s, c, ev, which);
    case K_RAW: return rawtext_value(s, c, ev, &ev->as[which]);
    default: return raw_value(s, c, ev, &ev->as[which], a->kind);
    }
}

static int args_object(Scanner *s, Cur *c, Ev *ev) {
    if (*c->p != '{') {
        /* Kineto's typed decode rejects it; trace_view.json's readers take it as no arguments */
        if (!s->decimal) ev->odd = 1;
        return skip(s, c, 1);
    }
    int r = container_open(c, '}');
    if (r != J_OK) return r == J_END ? J_OK : r;
    for (;;) {
        const char *k;
        size_t kn;
        CHECK(member_key(s, c, &k, &kn, 1, NULL));
        int which = -1;
        for (int a = 0; a < s->nargs; a++) {
            if (!s->args[a].top && (size_t)s->args[a].klen == kn && memcmp(s->args[a].key, k, kn) == 0) {
                which = a;
                break;
            }
        }
        if (which < 0) {
            CHECK(skip(s, c, 2));
        } else {
            CHECK(spec_value(s, c, ev, which));
        }
        if ((r = container_next(c, '}')) != J_OK) return r == J_END ? J_OK : r;
    }
}

static int key_is(const char *k, size_t n, const char *lit) {
    return strlen(lit) == n && memcmp(k, lit, n) == 0;
}

static int event(Scanner *s, Cur *c, Ev *ev) {
    ev->ph_ok = 0;
    ev->odd = 0;
    ev->cat = -1;
    ev->name = -1;
    ev->pid_i = ev->tid_i = s->decimal ? 0 : NONE_I64; /* trace_view.json's decode: an absent pid is 0 */
    ev->pid_s = ev->tid_s = -1;
    ev->ts = ev->dur = NAN;
    ev->ts_ns = ev->dur_ns = 0;
    ev->ts_kind = ev->dur_kind = T_NULL;
    ev->ts_sid = ev->dur_sid = -1;
    for (int a = 0; a < s->nargs; a++) {
        ev->ai[a] = s->args[a].dflt;
        ev->as[a] = -1;
        ev->af[a] = NAN;
    }
    int r = container_open(c, '}');
    if (r != J_OK) return r == J_END ? J_OK : r;
    for (;;) {
        const char *k;
        size_t kn;
        int sur = 0;
        CHECK(member_key(s, c, &k, &kn, 1, NULL));
        /* the key may live in sbuf: classify it before the value overwrites sbuf */
        int field = -1;
        switch (kn) {
        case 2:
            if (key_is(k, kn, "ph")) field = 0;
            else if (key_is(k, kn, "ts")) field = 5;
            break;
        case 3:
            if (key_is(k, kn, "cat")) field = 1;
            else if (key_is(k, kn, "pid")) field = 3;
            else if (key_is(k, kn, "tid")) field = 4;
            else if (key_is(k, kn, "dur")) field = 6;
            break;
        case 4:
            if (key_is(k, kn, "name")) field = 2;
            else if (key_is(k, kn, "args")) field = 7;
            break;
        }
        if (field < 0) {
            for (int a = 0; a < s->nargs; a++) {
                if (s->args[a].top && (size_t)s->args[a].klen == kn && memcmp(s->args[a].key, k, kn) == 0) {
                    field = 100 + a;
                    break;
                }
            }
        }
        switch (field) {
        case 0:
            if (*c->p == '"') {
                const char *v;
                size_t vn;
                CHECK(string(s, c, &v, &vn, 1, &sur));
                ev->ph_ok = vn == 1;
                ev->ph = vn == 1 ? v[0] : 0;
            } else {
                ev->ph_ok = 0;
                CHECK(skip(s, c, 1));
            }
            break;
        case 1: CHECK(str_value(s, c, ev, &ev->cat, 1)); break;
        case 2: CHECK(str_value(s, c, ev, &ev->name, 0)); break;
        case 3:
            ev->pid_s = -1;
            CHECK(int_value(s, c, ev, &ev->pid_i, &ev->pid_s, !s->decimal));
            break;
        case 4:
            ev->tid_s = -1;
            CHECK(int_value(s, c, ev, &ev->tid_i, &ev->tid_s, !s->decimal));
            break;
        case 5:
            if (s->decimal) CHECK(time_value(s, c, ev, 0));
            else CHECK(float_value(s, c, ev, &ev->ts));
            break;
        case 6:
            if (s->decimal) CHECK(time_value(s, c, ev, 1));
            else CHECK(float_value(s, c, ev, &ev->dur));
            break;
        case 7: CHECK(args_object(s, c, ev)); break;
        default:
            if (field >= 100) CHECK(spec_value(s, c, ev, field - 100));
            else CHECK(skip(s, c, 1));
            break;
        }
        if ((r = container_next(c, '}')) != J_OK) return r == J_END ? J_OK : r;
    }
}

static int emit(Scanner *s, Ev *ev) {
    if (reserve_row(s) < 0) return -1;
    COL_U8(s, C_PH) = (uint8_t)ev->ph;
    COL_I32(s, C_CAT) = ev->cat;
    COL_I32(s, C_NAME) = ev->name;
    COL_I64(s, C_PID_I) = ev->pid_i;
    COL_I32(s, C_PID_S) = ev->pid_s;
    COL_I64(s, C_TID_I) = ev->tid_i;
    COL_I32(s, C_TID_S) = ev->tid_s;
    if (s->decimal) {
        COL_ANY64(s, C_TS, ev->ts_ns);
        COL_ANY64(s, C_DUR, ev->dur_ns);
    } else {
        COL_F64(s, C_TS) = ev->ts;
        COL_F64(s, C_DUR) = ev->dur;
    }
    COL_U8(s, C_TS_KIND) = ev->ts_kind;
    COL_I32(s, C_TS_SID) = ev->ts_sid;
    COL_U8(s, C_DUR_KIND) = ev->dur_kind;
    COL_I32(s, C_DUR_SID) = ev->dur_sid;
    for (int a = 0; a < s->nargs; a++) {
        if (s->args[a].ci >= 0) COL_I64(s, s->args[a].ci) = ev->ai[a];
        if (s->args[a].cs >= 0) COL_I32(s, s->args[a].cs) = ev->as[a];
        if (s->args[a].cf >= 0) COL_F64(s, s->args[a].cf) = ev->af[a];
    }
    s->nrows++;
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* forest(): a JSON document as tables of its values                                             */

/* A value's kind in the tree; BIG: an integer beyond int64 or a number too long to read here */
enum { V_NULL = 0, V_FALSE, V_TRUE, V_INT, V_BIG, V_FLOAT, V_STR, V_OBJ, V_ARR };
/* tree columns: parent row (int32, -1 for the root), depth (uint16), key (int32: a member's string id,
 * an element's -1 - index), kind (uint8), number (float64), decimal (int64 m and int16 e: the number is
 * exactly m * 10^e; an INT's value with e = 0, a FLOAT written without an exponent with at most 19
 * significant digits; else e = EXP_NONE), string id (int32, STR), the number's text as offset (int64)
 * and length (int32) into the document */
enum { T_PARENT, T_DEPTH, T_KEY, T_KIND, T_NUM, T_INT, T_EXP, T_SID, T_OFF, T_LEN, T_NCOLS };
static const size_t TREE_ITEMS[T_NCOLS] = {4, 2, 4, 1, 8, 8, 2, 4, 8, 4};
#define EXP_NONE INT16_MIN

typedef struct {
    Scanner *s;
    const char *base;
    PyObject *arr[T_NCOLS]; /* the columns, bytearrays written in place (no copy when returned) */
    char *col[T_NCOLS];     /* their buffers */
    size_t n, cap;
    int32_t *stamp;    /* per string id: the object row where it was last seen as a key (duplicates) */
    size_t nstamp;
    uint8_t *open;     /* per row: an object being read (an ancestor of the current value) */
    int dup;           /* an object may repeat a key */
} Tree;

#define TV(t, c, T) (((T *)(t)->col[c])[row])

static int tree_resize(Tree *t, size_t n) {
    for (int c = 0; c < T_NCOLS; c++) {
        if (!t->arr[c] && !(t->arr[c] = PyByteArray_FromStringAndSize(NULL, 0))) return -1;
        if (PyByteArray_Resize(t->arr[c], (Py_ssize_t)(n * TREE_ITEMS[c])) < 0) return -1;
        t->col[c] = PyByteArray_AS_STRING(t->arr[c]);
    }
    return 0;
}

static int tree_reserve(Tree *t) {
    if (t->n < t->cap) return 0;
    size_t n = t->cap ? t->cap * 2 : 16384;
    if (tree_resize(t, n) < 0) return -1;
    uint8_t *o = PyMem_Realloc(t->open, n);
    if (!o) { PyErr_NoMemory(); return -1; }
    t->open = o;
    t->cap = n;
    return 0;
}

/* Key `kid` of object row `obj`. Exact when no duplicate is flagged: a repeat within the object finds its
 * own stamp; a stamp overwritten by an object still open (an ancestor, which may repeat it later) flags a
 * possible duplicate, so a repeat is never missed. */
static int tree_key_seen(Tree *t, int32_t kid, int32_t obj) {
    if ((size_t)kid >= t->nstamp) {
        size_t n = t->nstamp ? t->nstamp : 1024;
        while (n <= (size_t)kid) n *= 2;
        int32_t *p = PyMem_Realloc(t->stamp, n * sizeof(int32_t));
        if (!p) { PyErr_NoMemory(); return -1; }
        for (size_t i = t->nstamp; i < n; i++) p[i] = -1;
        t->stamp = p;
        t->nstamp = n;
    }
    int32_t prev = t->stamp[kid];
    if (prev == obj || (prev >= 0 && t->open[prev])) t->dup = 1;
    t->stamp[kid] = obj;
    return 0;
}

/* A new row of `t` at the cursor: a value of `parent` under `key`, at `depth` (its kind set by the caller) */
static int tree_row(Tree *t, int32_t parent, int32_t key, int depth, Py_ssize_t off, size_t *out) {
    if (tree_reserve(t) < 0) return -1;
    size_t row = t->n++;
    TV(t, T_PARENT, int32_t) = parent;
    TV(t, T_DEPTH, uint16_t) = (uint16_t)depth;
    TV(t, T_KEY, int32_t) = key;
    TV(t, T_KIND, uint8_t) = V_OBJ;
    TV(t, T_NUM, double) = 0.0;
    TV(t, T_INT, int64_t) = 0;
    TV(t, T_EXP, int16_t) = EXP_NONE;
    TV(t, T_SID, int32_t) = -1;
    TV(t, T_OFF, int64_t) = off;
    TV(t, T_LEN, int32_t) = 0;
    t->open[row] = 0;
    *out = row;
    return 0;
}

/* J_OK, J_MORE (the input ends inside the value), J_BAD (not JSON), J_ODD (a string the reference path
 * decodes: a surrogate escape, not UTF-8), -1 (error set) */
#define J_ODD 4
static int tree_value(Tree *t, Cur *c, int32_t parent, int32_t key, int depth) {
    if (depth > MAX_DEPTH || depth > 65535) return J_BAD;
    ws(c);
    if (c->p >= c->end) return J_MORE;
    size_t row;
    if (tree_row(t, parent, key, depth, c->p - t->base, &row) < 0) return -1;
    int r;
    uint8_t kind;
    switch (*c->p) {
    case '"': {
        const char *v;
        size_t n;
        int sur = 0;
        if ((r = string(t->s, c, &v, &n, 1, &sur)) != J_OK) return r;
        if (sur) return J_ODD;
        int32_t id = intern(t->s, v, n);
        if (id == -2) return J_ODD;
        if (id < 0) return -1;
        TV(t, T_SID, int32_t) = id;
        kind = V_STR;
        break;
    }
    case 't': kind = V_TRUE; if ((r = literal(c, "true", 4)) != J_OK) return r; break;
    case 'f': kind = V_FALSE; if ((r = literal(c, "false", 5)) != J_OK) return r; break;
    case 'n': kind = V_NULL; if ((r = literal(c, "null", 4)) != J_OK) return r; break;
    case '{': {
        if ((r = container_open(c, '}')) == J_END) return J_OK;
        if (r != J_OK) return r;
        t->open[row] = 1;
        for (;;) {
            const char *k;
            size_t kn;
            int sur = 0;
            if ((r = member_key(t->s, c, &k, &kn, 1, &sur)) != J_OK) return r;
            if (sur) return J_ODD;
            int32_t kid = intern(t->s, k, kn);
            if (kid == -2) return J_ODD;
            if (kid < 0 || tree_key_seen(t, kid, (int32_t)row) < 0) return -1;
            if ((r = tree_value(t, c, (int32_t)row, kid, depth + 1)) != J_OK) return r;
            if ((r = container_next(c, '}')) == J_END) break;
            if (r != J_OK) return r;
        }
        t->open[row] = 0;
        return J_OK;
    }
    case '[': {
        TV(t, T_KIND, uint8_t) = V_ARR;
        if ((r = container_open(c, ']')) != J_OK) return r == J_END ? J_OK : r;
        for (int32_t i = 0;; i++) {
            if (i == INT32_MAX) return J_BAD;
            if ((r = tree_value(t, c, (int32_t)row, -1 - i, depth + 1)) != J_OK) return r;
            if ((r = container_next(c, ']')) != J_OK) return r == J_END ? J_OK : r;
        }
    }
    default: {
        if (!(*c->p == '-' || (*c->p >= '0' && *c->p <= '9'))) return J_BAD;
        const char *begin = c->p;
        Num num;
        if ((r = number(t->s, c, &num)) != J_OK) return r;
        kind = num.big ? V_BIG : num.is_int ? V_INT : V_FLOAT;
        TV(t, T_NUM, double) = num.d;
        if (num.is_int && !num.big) {
            TV(t, T_INT, int64_t) = num.i;
            TV(t, T_EXP, int16_t) = 0;
        } else if (num.exact && num.e > -30000) {
            TV(t, T_INT, int64_t) = num.m;
            TV(t, T_EXP, int16_t) = (int16_t)num.e;
        }
        if (c->p - begin > INT32_MAX) return J_BAD;
        TV(t, T_LEN, int32_t) = (int32_t)(c->p - begin);
        break;
    }
    }
    TV(t, T_KIND, uint8_t) = kind;
    return J_OK;
}

/* A key of the object open at forest level `lvl`: flags a repeat within that object (exact: one object
 * is open per level, each with its own serial number) */
static int forest_key(Scanner *s, int lvl, int32_t kid) {
    if ((size_t)kid >= s->f_nstamp[lvl]) {
        size_t n = s->f_nstamp[lvl] ? s->f_nstamp[lvl] : 1024;
        while (n <= (size_t)kid) n *= 2;
        uint32_t *p = PyMem_Realloc(s->f_stamp[lvl], n * sizeof(uint32_t));
        if (!p) { PyErr_NoMemory(); return -1; }
        memset(p + s->f_nstamp[lvl], 0, (n - s->f_nstamp[lvl]) * sizeof(uint32_t));
        s->f_stamp[lvl] = p;
        s->f_nstamp[lvl] = n;
    }
    if (s->f_stamp[lvl][kid] == s->f_serial[lvl]) s->f_dup = 1;
    s->f_stamp[lvl][kid] = s->f_serial[lvl];
    return 0;
}

/* The (buf, start, final) arguments of feed() and forest(): `view` of buf (released on error), `start`
 * within it, `s->final` set. 0, or -1 with an exception set. */
static int block_args(Scanner *s, PyObject *const *argv, Py_ssize_t argc, const char *usage, Py_buffer *view,
                      Py_ssize_t *start) {
    if (argc != 3) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    if (PyObject_GetBuffer(argv[0], view, PyBUF_SIMPLE) < 0) return -1;
    *start = PyLong_AsSsize_t(argv[1]);
    int final = *start == -1 && PyErr_Occurred() ? -1 : PyObject_IsTrue(argv[2]);
    if (final < 0) {
        PyBuffer_Release(view);
        return -1;
    }
    if (*start < 0 || *start > view->len) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "start out of range");
        return -1;
    }
    s->final = final;
    return 0;
}

/* forest(buf, start, final) -> (status, pos, columns, new strings, duplicate keys possible)
 *
 * One JSON document whose top is an object, read block by block: each call reads buf[start:] and returns
 * a tree of what it read (a row per value, parent before children: the columns above), so that no more
 * than a block and its tree are in memory. The objects at depths 0-2 (communication*.json: the document,
 * a step, a kind of op) are read member by member and stay open across calls; every value below them (an
 * op with its contents) is read whole into the tree of the call that completes it. Each tree starts with
 * a row for each object open at depth 0-2 (the previous call's rows for them, again: same keys, no
 * values), so a tree is a document by itself. Offsets are into this call's `buf`.
 *   NEED_MORE: `pos` is where the next call resumes, on `buf[pos:]` followed by the next block (a value cut
 *              by the block's end is read again there)
 *   DONE: the document ended (and `final`: nothing but whitespace follows)
 *   ODD: a string the reference decoder must judge; MALFORMED: not JSON, or the top is not an object
 * The caller decodes with its reference path on ODD and MALFORMED. */
static PyObject *Scanner_forest(Scanner *s, PyObject *const *argv, Py_ssize_t argc) {
    Py_buffer view;
    Py_ssize_t start;
    if (block_args(s, argv, argc, "forest(buf, start, final)", &view, &start) < 0) return NULL;
    int final = s->final;
    Tree t = {0};
    t.s = s;
    t.base = view.buf;
    /* a first guess of the number of values (pretty-printed msprof JSON: ~30 bytes a value), so that the
     * columns are rarely grown */
    t.cap = (size_t)(view.len - start) / 24 + 1024;
    PyObject *result = NULL, *cols = NULL;
    int status = ST_MALFORMED;
    size_t rowof[F_LEVELS];
    t.open = PyMem_Malloc(t.cap);
    if (!t.open) { PyErr_NoMemory(); goto done; }
    if (tree_resize(&t, t.cap) < 0) goto done;
    for (int l = 0; l < s->f_lvl; l++)
        if (tree_row(&t, l ? (int32_t)rowof[l - 1] : -1, s->f_key[l], l, 0, &rowof[l]) < 0) goto done;
    Cur c = {(const char *)view.buf + start, (const char *)view.buf + view.len};
    const char *safe = c.p;  /* where the state of the open objects says the next call resumes */
    size_t safe_n = t.n;
    for (;;) {
        ws(&c);
        if (s->f_phase == 2) {
            if (c.p < c.end) status = ST_MALFORMED;
            else { status = final ? ST_DONE : ST_NEED_MORE; safe = c.p; }
            break;
        }
        if (c.p >= c.end) { status = final ? ST_MALFORMED : ST_NEED_MORE; break; }
        if (s->f_phase == 0) {
            if (*c.p != '{') break;
            c.p++;
            s->f_phase = 1;
            s->f_lvl = 1;
            s->f_state[0] = F_FIRST;
            s->f_key[0] = -1;
            s->f_serial[0] = ++s->f_serials;
            if (tree_row(&t, -1, -1, 0, c.p - 1 - t.base, &rowof[0]) < 0) goto done;
            safe = c.p;
            safe_n = t.n;
            continue;
        }
        int L = s->f_lvl - 1;
        if (s->f_state[L] != F_MEMBER && *c.p == '}') {
            c.p++;
            if (--s->f_lvl == 0) s->f_phase = 2;
            else s->f_state[L - 1] = F_SEP;
            safe = c.p;
            safe_n = t.n;
            continue;
        }
        if (s->f_state[L] == F_SEP) {
            if (*c.p != ',') break;
            c.p++;
            s->f_state[L] = F_MEMBER;
            safe = c.p;
            safe_n = t.n;
            continue;
        }
        /* a member: its key, then an object to open (depths 1-2) or a value read whole */
        const char *k;
        size_t kn;
        int sur = 0, r = member_key(s, &c, &k, &kn, 1, &sur);
        if (r < 0) goto done;
        if (r == J_OK && sur) r = J_ODD;
        int32_t kid = -1;
        if (r == J_OK && (kid = intern(s, k, kn)) < 0) {
            if (kid != -2) goto done;
            r = J_ODD;
        }
        if (r == J_OK && L + 1 < F_LEVELS && *c.p == '{') {
            const char *q = c.p + 1;
            while (q < c.end && (*q == ' ' || *q == '\n' || *q == '\r' || *q == '\t')) q++;
            if (q >= c.end) {
                r = J_MORE;
            } else if (*q != '}') {  /* an object at depth 1-2: opened, its members read one by one */
                if (forest_key(s, L, kid) < 0) goto done;
                size_t row;
                if (tree_row(&t, (int32_t)rowof[L], kid, L + 1, c.p - t.base, &row) < 0) goto done;
                c.p = q;
                rowof[L + 1] = row;
                s->f_lvl++;
                s->f_state[L + 1] = F_FIRST;
                s->f_key[L + 1] = kid;
                s->f_serial[L + 1] = ++s->f_serials;
                s->f_state[L] = F_SEP;
                safe = c.p;
                safe_n = t.n;
                continue;
            }  /* else {}: read whole below, like any other value */
        }
        if (r == J_OK) {
            uint32_t prev = kid < (int32_t)s->f_nstamp[L] ? s->f_stamp[L][kid] : 0;
            int dup = s->f_dup;
            if (forest_key(s, L, kid) < 0) goto done;
            r = tree_value(&t, &c, (int32_t)rowof[L], kid, L + 1);
            if (r < 0) goto done;
            if (r == J_OK) {  /* complete only at its ',' or '}' (a number may go on in the next block) */
                ws(&c);
                if (c.p < c.end && (*c.p == ',' || *c.p == '}')) {
                    s->f_state[L] = F_SEP;
                    safe = c.p;
                    safe_n = t.n;
                    continue;
                }
                r = c.p < c.end ? J_BAD : J_MORE;
            }
            s->f_stamp[L][kid] = prev;  /* undone: the member is read again with the next block */
            s->f_dup = dup;
        }
        status = r == J_ODD ? ST_ODD : r == J_MORE && !final ? ST_NEED_MORE : ST_MALFORMED;
        break;
    }
    t.n = safe_n;  /* a member cut by the block's end is read again by the next call */
    if (tree_resize(&t, status == ST_DONE || status == ST_NEED_MORE ? t.n : 0) < 0) goto done;
    cols = PyTuple_New(T_NCOLS);
    if (!cols) goto done;
    for (int k = 0; k < T_NCOLS; k++) {
        PyTuple_SET_ITEM(cols, k, t.arr[k]);
        t.arr[k] = NULL;
    }
    Py_ssize_t total = PyList_GET_SIZE(s->strs);
    PyObject *fresh = PyList_GetSlice(s->strs, s->reported, total);
    if (!fresh) goto done;
    s->reported = total;
    result = Py_BuildValue("(inNNi)", status, safe - (const char *)view.buf, cols, fresh, s->f_dup || t.dup);
    cols = NULL;
done:
    Py_XDECREF(cols);
    for (int k = 0; k < T_NCOLS; k++) Py_XDECREF(t.arr[k]);
    PyMem_Free(t.stamp);
    PyMem_Free(t.open);
    PyBuffer_Release(&view);
    return result;
}

/* ---------------------------------------------------------------------------------------------- */
/* numerals(): a CSV column's numeral cells                                                         */

enum { N_INT = 0, N_NS = 1, N_FLOAT = 2 };

/* One cell (its text trimmed of " \t\r\n"): 1 NULL ("" or "N/A"), 0 a value in *i / *d, < 0 not a numeral
 * of the kind (-3: error set): INT -?d{1,15}; NS -?d{1,18}(.d{1,3})? as exact integer thousandths within
 * int64; FLOAT -?d{1,15}(.d{1,15})? read by CPython's correctly rounded parser (float()'s result). */
static int numeral(const char *p, Py_ssize_t n, int kind, int64_t *i, double *d) {
    while (n > 0 && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) { p++; n--; }
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\r' || p[n - 1] == '\n')) n--;
    if (n == 0 || (n == 3 && memcmp(p, "N/A", 3) == 0)) return 1;
    const char *q = p, *end = p + n, *f = NULL;
    int neg = 0;
    if (*q == '-') { neg = 1; q++; }
    const char *w = q;
    while (q < end && *q >= '0' && *q <= '9') q++;
    Py_ssize_t whole = q - w, frac = 0;
    if (q < end && *q == '.') {
        f = ++q;
        while (q < end && *q >= '0' && *q <= '9') q++;
        frac = q - f;
        if (frac == 0) return -1;
    }
    if (q != end || whole == 0) return -1;
    if (kind == N_INT) {
        if (f || whole > 15) return -1;
        int64_t v = 0;
        for (const char *c = w; c < w + whole; c++) v = v * 10 + (*c - '0');
        *i = neg ? -v : v;
        return 0;
    }
    if (kind == N_NS) {
        if (whole > 18 || frac > 3) return -1;
        uint64_t v = 0, fr = 0, m;
        for (const char *c = w; c < w + whole; c++) v = v * 10 + (uint64_t)(*c - '0');
        for (Py_ssize_t k = 0; k < 3; k++) fr = fr * 10 + (uint64_t)(k < frac ? f[k] - '0' : 0);
        if (__builtin_mul_overflow(v, (uint64_t)1000, &m) || __builtin_add_overflow(m, fr, &m) ||
            m > (uint64_t)INT64_MAX + (uint64_t)neg)
            return -2; /* beyond int64 */
        *i = neg ? (int64_t)(0 - m) : (int64_t)m;
        return 0;
    }
    if (whole > 15 || frac > 15) return -1;
    char tmp[40];
    memcpy(tmp, p, (size_t)n);
    tmp[n] = 0;
    *d = PyOS_string_to_double(tmp, NULL, NULL);
    if (*d == -1.0 && PyErr_Occurred()) return -3;
    return 0;
}

/* numerals(cells, kind) -> (values, nulls) or None
 *   cells: a list of str / None (a CSV column read as text); kind: N_INT, N_NS or N_FLOAT (`numeral`)
 *   values: bytearray of int64 (INT, NS; 0 for NULL) or float64 (NaN for NULL); nulls: bytearray, 1 = NULL
 *   None when a cell that is not NULL is not a numeral of the kind (the caller's own parser decides). */
static PyObject *numerals(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *cells, *vals = NULL, *nulls = NULL, *result = NULL;
    int kind;
    if (!PyArg_ParseTuple(args, "Oi", &cells, &kind)) return NULL;
    if (kind < N_INT || kind > N_FLOAT) {
        PyErr_SetString(PyExc_ValueError, "bad kind");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(cells, "cells must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    vals = PyByteArray_FromStringAndSize(NULL, n * 8);
    nulls = PyByteArray_FromStringAndSize(NULL, n);
    if (!vals || !nulls) goto done;
    char *vb = PyByteArray_AS_STRING(vals), *nb = PyByteArray_AS_STRING(nulls);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *c = items[k];
        int64_t iv = 0;
        double dv = NAN;
        int r = 1;
        if (c != Py_None) {
            Py_ssize_t len;
            const char *t = PyUnicode_Check(c) ? PyUnicode_AsUTF8AndSize(c, &len) : NULL;
            if (!t) {
                if (PyErr_Occurred()) goto done;
                result = Py_NewRef(Py_None); /* not text */
                goto done;
            }
            r = numeral(t, len, kind, &iv, &dv);
            if (r == -3) goto done;
            if (r < 0) {
                result = Py_NewRef(Py_None);
                goto done;
            }
        }
        nb[k] = (char)(r == 1);
        if (kind == N_FLOAT) memcpy(vb + k * 8, &dv, 8);
        else memcpy(vb + k * 8, &iv, 8);
    }
    result = Py_BuildValue("(OO)", vals, nulls);
done:
    Py_DECREF(seq);
    Py_XDECREF(vals);
    Py_XDECREF(nulls);
    return result;
}

/* ---------------------------------------------------------------------------------------------- */
/* csv(): the columns of a plain CSV file                                                           */

enum { CSV_TEXT = 3, CSV_QTEXT = 4, CSV_RAW = 5, CSV_SKIP = -1 };

/* A cell's text for its kind: TEXT trimmed of " \t\r\n", QTEXT also of '"', "" and "N/A" then NULL (0);
 * RAW as it is, "" NULL. Returns its string id, -1 for NULL, -2 not UTF-8, -3 error. */
static int32_t csv_text(Scanner *s, const char *p, size_t n, int kind) {
    if (kind != CSV_RAW) {
        const char *end = p + n;
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n' || (kind == CSV_QTEXT && *p == '"')))
            p++;
        while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '\n' ||
                           (kind == CSV_QTEXT && end[-1] == '"')))
            end--;
        n = (size_t)(end - p);
        if (n == 3 && memcmp(p, "N/A", 3) == 0) return -1;
    }
    return n == 0 ? -1 : intern(s, p, n);
}

/* csv(data, width, kinds) -> (columns, new strings), or None when the file is not plain
 *
 * The cells of a CSV as `ascend_text._plain_csv` takes them (the dialect on which DuckDB's read_csv and
 * Python's csv module agree): '\n' or '\r\n' line ends (no other '\r'), no empty line, every field either
 * unquoted without a quote character or wholly quoted ('""' inside for a quote, no line break), every
 * line exactly `width` fields; the first line (the header) is skipped. An empty field, quoted or not, is
 * NULL. `kinds`, per column: N_INT / N_NS / N_FLOAT (`numeral`: a (values, nulls) pair of bytearrays like
 * numerals(), or None when a cell is not a numeral of the kind: ask again as RAW), TEXT / QTEXT / RAW (an
 * int32 bytearray of string ids, -1 for NULL; see `csv_text`), SKIP (None). No Python object is made per
 * cell, only one str per distinct text. None also for text that is not UTF-8 or has a NUL. */
static PyObject *Scanner_csv(Scanner *s, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 3) {
        PyErr_SetString(PyExc_TypeError, "csv(data, width, kinds)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(argv[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t width = PyLong_AsSsize_t(argv[1]);
    PyObject *result = NULL, *cols = NULL, *kseq = NULL;
    int *kinds = NULL;
    char **out = NULL, **nul = NULL;
    if (width == -1 && PyErr_Occurred()) goto done;
    kseq = PySequence_Fast(argv[2], "kinds must be a sequence");
    if (!kseq) goto done;
    if (width <= 0 || PySequence_Fast_GET_SIZE(kseq) != width) {
        PyErr_SetString(PyExc_ValueError, "one kind per column");
        goto done;
    }
    kinds = PyMem_Calloc((size_t)width, sizeof(int));
    out = PyMem_Calloc((size_t)width, sizeof(char *));
    nul = PyMem_Calloc((size_t)width, sizeof(char *));
    cols = PyList_New(width);
    if (!kinds || !out || !nul) { PyErr_NoMemory(); goto done; }
    if (!cols) goto done;
    const char *base = view.buf, *end = base + view.len, *p = base;
    if (view.len >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0) p += 3;
    if (memchr(p, 0, (size_t)(end - p))) goto decline;
    /* rows: the line ends after the header (a last line may lack its '\n') */
    Py_ssize_t rows = 0;
    for (const char *q = p; (q = memchr(q, '\n', (size_t)(end - q))) != NULL; q++) rows++;
    if (end > p && end[-1] != '\n') rows++;
    rows = rows > 0 ? rows - 1 : 0;
    for (Py_ssize_t j = 0; j < width; j++) {
        long k = PyLong_AsLong(PySequence_Fast_GET_ITEM(kseq, j));
        if (k == -1 && PyErr_Occurred()) goto done;
        if (k != CSV_SKIP && (k < N_INT || k > CSV_RAW)) {
            PyErr_SetString(PyExc_ValueError, "bad kind");
            goto done;
        }
        kinds[j] = (int)k;
        PyObject *col;
        if (k == CSV_SKIP) {
            col = Py_NewRef(Py_None);
        } else if (k <= N_FLOAT) {
            PyObject *v = PyByteArray_FromStringAndSize(NULL, rows * 8);
            PyObject *m = PyByteArray_FromStringAndSize(NULL, rows);
            col = v && m ? PyTuple_Pack(2, v, m) : NULL;
            if (col) { out[j] = PyByteArray_AS_STRING(v); nul[j] = PyByteArray_AS_STRING(m); }
            Py_XDECREF(v);
            Py_XDECREF(m);
        } else {
            col = PyByteArray_FromStringAndSize(NULL, rows * 4);
            if (col) out[j] = PyByteArray_AS_STRING(col);
        }
        if (!col) goto done;
        PyList_SET_ITEM(cols, j, col);
    }
    Py_ssize_t row = -1;  /* the header is row -1 */
    while (p < end) {
        if (*p == '\n' || (*p == '\r' && p + 1 < end && p[1] == '\n')) goto decline;
        for (Py_ssize_t j = 0;; j++) {
            /* one field at p */
            const char *v = p, *ve;
            size_t vn;
            int escaped = 0;
            if (p < end && *p == '"') {
                v = ++p;
                for (;;) {
                    while (p < end && *p != '"' && *p != '\n' && *p != '\r') p++;
                    if (p >= end || *p != '"') goto decline;
                    if (p + 1 < end && p[1] == '"') { escaped = 1; p += 2; continue; }
                    break;
                }
                ve = p++;
            } else {
                while (p < end && *p != ',' && *p != '\n' && *p != '\r' && *p != '"') p++;
                if (p < end && *p == '"') goto decline;
                ve = p;
            }
            vn = (size_t)(ve - v);
            if (escaped) {  /* '""' -> '"' into sbuf */
                if (grow(&s->sbuf, &s->scap, vn) < 0) goto done;
                size_t o = 0;
                for (const char *c = v; c < ve; c++) {
                    s->sbuf[o++] = *c;
                    if (*c == '"') c++;
                }
                v = s->sbuf;
                vn = o;
            }
            if (j >= width) goto decline;
            if (row >= 0 && kinds[j] != CSV_SKIP) {
                int k = kinds[j];
                if (k <= N_FLOAT) {
                    if (out[j]) {
                        int64_t iv = 0;
                        double dv = NAN;
                        int r = vn ? numeral(v, (Py_ssize_t)vn, k, &iv, &dv) : 1;
                        if (r == -3) goto done;
                        if (r < 0) {
                            out[j] = NULL;  /* not a numeral of the kind: the column is None */
                        } else {
                            nul[j][row] = (char)(r == 1);
                            if (k == N_FLOAT) memcpy(out[j] + row * 8, &dv, 8);
                            else memcpy(out[j] + row * 8, &iv, 8);
                        }
                    }
                } else {
                    int32_t id = csv_text(s, v, vn, k);
                    if (id == -2) goto decline;
                    if (id == -3) goto done;
                    memcpy(out[j] + row * 4, &id, 4);
                }
            }
            /* after the field: ',' (another), or the line's end: '\n', '\r\n' or the end of the file */
            if (p < end && *p == ',') { p++; continue; }
            if (p < end && *p == '\r' && p + 1 < end && p[1] == '\n') p++;
            if (j != width - 1 || (p < end && *p != '\n')) goto decline;
            if (p < end) p++;
            break;
        }
        row++;
    }
    if (row != rows) goto decline;
    for (Py_ssize_t j = 0; j < width; j++)
        if (kinds[j] >= N_INT && kinds[j] <= N_FLOAT && !out[j])
            if (PyList_SetItem(cols, j, Py_NewRef(Py_None)) < 0) goto done;
    Py_ssize_t total = PyList_GET_SIZE(s->strs);
    PyObject *fresh = PyList_GetSlice(s->strs, s->reported, total);
    if (!fresh) goto done;
    s->reported = total;
    result = Py_BuildValue("(ON)", cols, fresh);
    goto done;
decline:  /* not a plain CSV: None, the caller reads it otherwise */
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(cols);
    Py_XDECREF(kseq);
    PyMem_Free(kinds);
    PyMem_Free(out);
    PyMem_Free(nul);
    PyBuffer_Release(&view);
    return result;
}

/* text_kinds(seq) -> 0 every item a str, 1 str and None (at least one None), 2 anything else: the check
 * `RankTables.parts()` makes of every text column, ~15x faster than set(map(type, seq)) in Python */
static PyObject *text_kinds(PyObject *Py_UNUSED(module), PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "a sequence");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    long kinds = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *v = items[k];
        if (v == Py_None) kinds = 1;
        else if (!PyUnicode_CheckExact(v)) { kinds = 2; break; }
    }
    Py_DECREF(seq);
    return PyLong_FromLong(kinds);
}

static PyMethodDef module_methods[] = {
    {"text_kinds", text_kinds, METH_O,
     "text_kinds(seq) -> 0 (all str), 1 (str and None), 2 (anything else)"},
    {"numerals", numerals, METH_VARARGS,
     "numerals(cells, kind) -> (values, nulls) or None: a text column's int / exact-ns / float numerals"},
    {NULL, NULL, 0, NULL},
};

/* ---------------------------------------------------------------------------------------------- */
/* Python type                                                                                     */

static void Scanner_dealloc(Scanner *s) {
    for (int c = 0; c < s->ncols; c++) PyMem_Free(s->cols[c].data);
    PyMem_Free(s->cols);
    PyMem_Free(s->slots);
    PyMem_Free(s->arena);
    PyMem_Free(s->sbuf);
    PyMem_Free(s->tbuf);
    for (int l = 0; l < F_LEVELS; l++) PyMem_Free(s->f_stamp[l]);
    Py_XDECREF(s->strs);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static int Scanner_init(Scanner *s, PyObject *argsobj, PyObject *kw) {
    PyObject *specs;
    const char *phases = "Xi";
    Py_ssize_t nphases = 2;
    int other_odd = 0, decimal = 0;
    static char *kwlist[] = {"specs", "phases", "other_odd", "decimal", NULL};
    if (!PyArg_ParseTupleAndKeywords(argsobj, kw, "O|$s#pp", kwlist, &specs, &phases, &nphases, &other_odd,
                                     &decimal))
        return -1;
    if (nphases >= (Py_ssize_t)sizeof s->phases) {
        PyErr_SetString(PyExc_ValueError, "too many phases");
        return -1;
    }
    memcpy(s->phases, phases, (size_t)nphases);
    s->phases[nphases] = 0;
    s->other_odd = other_odd;
    s->decimal = decimal;
    PyObject *seq = PySequence_Fast(specs, "specs must be a sequence of (key, kind, nullable, default)");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > MAX_ARGS) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "too many argument specs");
        return -1;
    }
    int ncols = C_FIXED;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *key;
        Py_ssize_t klen;
        int kind, nullable, top = 0;
        long long dflt;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "s#ipL|p", &key, &klen, &kind, &nullable, &dflt,
                              &top)) {
            Py_DECREF(seq);
            return -1;
        }
        if (klen >= 64 || kind < K_INT || kind > K_RAW) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "bad argument spec");
            return -1;
        }
        ArgSpec *a = &s->args[i];
        memcpy(a->key, key, (size_t)klen);
        a->klen = klen;
        a->kind = kind;
        a->nullable = nullable;
        a->dflt = dflt;
        a->top = top;
        a->ci = (kind == K_INT || kind == K_INTSTR || kind == K_GRID || kind == K_SCALAR) ? ncols++ : -1;
        a->cs = (kind == K_STR || kind == K_INTSTR || kind == K_DIMS || kind == K_TYPES || kind == K_SCALAR ||
                 kind == K_RAW) ? ncols++ : -1;
        a->cf = kind == K_SCALAR ? ncols++ : -1;
    }
    Py_DECREF(seq);
    s->nargs = (int)n;
    s->ncols = ncols;
    s->cols = PyMem_Calloc((size_t)ncols, sizeof(Col));
    if (!s->cols) { PyErr_NoMemory(); return -1; }
    size_t fixed_items[C_FIXED] = {1, 4, 4, 8, 4, 8, 4, 8, 8, 1, 4, 1, 4};
    for (int c = 0; c < C_FIXED; c++) s->cols[c].item = fixed_items[c];
    for (int a = 0; a < s->nargs; a++) {
        if (s->args[a].ci >= 0) s->cols[s->args[a].ci].item = 8;
        if (s->args[a].cs >= 0) s->cols[s->args[a].cs].item = 4;
        if (s->args[a].cf >= 0) s->cols[s->args[a].cf].item = 8;
    }
    s->strs = PyList_New(0);
    if (!s->strs || rehash(s) < 0) return -1;
    s->state = S_FIRST;
    return 0;
}

/* feed(buf, start, final) -> (status, pos, end)
 *   NEED_MORE: every element before `pos` is consumed; `pos` is where the next call resumes
 *   DONE: the array's ']' ends before `pos`
 *   ODD: the element buf[pos:end] is a complete/instant event to decode on the reference path;
 *        resume at `end`
 *   MALFORMED: not a JSON array of objects at or after `pos` (the reference path reports it) */
static PyObject *Scanner_feed(Scanner *s, PyObject *const *argv, Py_ssize_t argc) {
    Py_buffer view;
    Py_ssize_t start;
    if (block_args(s, argv, argc, "feed(buf, start, final)", &view, &start) < 0) return NULL;
    int final = s->final;
    const char *base = view.buf;
    Cur c = {base + start, base + view.len};
    int status = ST_NEED_MORE;
    Py_ssize_t pos = start, end = start;
    Ev ev;
    for (;;) {
        ws(&c);
        if (c.p >= c.end) {
            status = final ? ST_MALFORMED : ST_NEED_MORE;
            pos = c.p - base;
            break;
        }
        if (s->state == S_SEP) {
            if (*c.p == ',') { c.p++; s->state = S_ELEM; continue; }
            if (*c.p == ']') { c.p++; status = ST_DONE; pos = c.p - base; break; }
            status = ST_MALFORMED;
            pos = c.p - base;
            break;
        }
        if (*c.p == ']' && s->state == S_FIRST) { c.p++; status = ST_DONE; pos = c.p - base; break; }
        if (*c.p != '{') { status = ST_MALFORMED; pos = c.p - base; break; }
        const char *el = c.p;
        int r = event(s, &c, &ev);
        if (r < 0) { PyBuffer_Release(&view); return NULL; }
        if (r == J_MORE) {
            status = final ? ST_MALFORMED : ST_NEED_MORE;
            pos = el - base;
            break;
        }
        if (r == J_BAD) { status = ST_MALFORMED; pos = el - base; break; }
        s->state = S_SEP;
        int keep = ev.ph_ok && ev.ph && strchr(s->phases, ev.ph) != NULL;
        if ((keep && ev.odd) || (!keep && s->other_odd)) {
            status = ST_ODD;
            pos = el - base;
            end = c.p - base;
            break;
        }
        s->counted++;
        if (keep && emit(s, &ev) < 0) { PyBuffer_Release(&view); return NULL; }
    }
    PyBuffer_Release(&view);
    if (status != ST_ODD) end = pos;
    return Py_BuildValue("(inn)", status, pos, end);
}

/* take() -> (columns: tuple of bytearray, new strings: list of str); the rows are then cleared */
static PyObject *Scanner_take(Scanner *s, PyObject *Py_UNUSED(ignored)) {
    PyObject *cols = PyTuple_New(s->ncols);
    if (!cols) return NULL;
    for (int c = 0; c < s->ncols; c++) {
        PyObject *b = PyByteArray_FromStringAndSize(s->cols[c].data ? s->cols[c].data : "",
                                                    (Py_ssize_t)(s->nrows * s->cols[c].item));
        if (!b) { Py_DECREF(cols); return NULL; }
        PyTuple_SET_ITEM(cols, c, b);
    }
    Py_ssize_t total = PyList_GET_SIZE(s->strs);
    PyObject *fresh = PyList_GetSlice(s->strs, s->reported, total);
    if (!fresh) { Py_DECREF(cols); return NULL; }
    s->reported = total;
    s->nrows = 0;
    Py_ssize_t counted = s->counted;
    s->counted = 0;
    return Py_BuildValue("(NNn)", cols, fresh, counted);
}

static PyMethodDef Scanner_methods[] = {
    {"feed", (PyCFunction)(void (*)(void))Scanner_feed, METH_FASTCALL,
     "feed(buf, start, final) -> (status, pos, end): scan array elements from buf[start:]"},
    {"forest", (PyCFunction)(void (*)(void))Scanner_forest, METH_FASTCALL,
     "forest(buf, start, final) -> (status, pos, columns, new strings, duplicate keys possible): a JSON "
     "document block by block, as trees of its values"},
    {"csv", (PyCFunction)(void (*)(void))Scanner_csv, METH_FASTCALL,
     "csv(data, width, kinds) -> (columns, new strings) or None: the columns of a plain CSV"},
    {"take", (PyCFunction)Scanner_take, METH_NOARGS,
     "take() -> (columns, new strings, elements scanned): the rows so far as bytearrays, then cleared"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stepdoctor.analysis.ingest._tracescan.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Columnizes the elements of a Chrome trace-format traceEvents array (see the module source).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "_tracescan",
    "Chrome trace-format events straight into columns (see the source's header comment).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__tracescan(void) {
    if (PyType_Ready(&ScannerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m) return NULL;
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0) {
        Py_DECREF(&ScannerType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "NEED_MORE", ST_NEED_MORE);
    PyModule_AddIntConstant(m, "DONE", ST_DONE);
    PyModule_AddIntConstant(m, "ODD", ST_ODD);
    PyModule_AddIntConstant(m, "MALFORMED", ST_MALFORMED);
    PyModule_AddIntConstant(m, "INT", K_INT);
    PyModule_AddIntConstant(m, "STR", K_STR);
    PyModule_AddIntConstant(m, "INTSTR", K_INTSTR);
    PyModule_AddIntConstant(m, "DIMS", K_DIMS);
    PyModule_AddIntConstant(m, "TYPES", K_TYPES);
    PyModule_AddIntConstant(m, "GRID", K_GRID);
    PyModule_AddIntConstant(m, "SCALAR", K_SCALAR);
    PyModule_AddIntConstant(m, "RAW", K_RAW);
    PyModule_AddIntConstant(m, "T_OK", T_OK);
    PyModule_AddIntConstant(m, "T_NULL", T_NULL);
    PyModule_AddIntConstant(m, "T_TEXT", T_TEXT);
    PyModule_AddIntConstant(m, "T_NUMBER", T_NUMBER);
    PyModule_AddIntConstant(m, "NONE", NONE_I64);
    static const char *VKINDS[] = {"V_NULL", "V_FALSE", "V_TRUE", "V_INT", "V_BIG", "V_FLOAT", "V_STR", "V_OBJ",
                                   "V_ARR"};
    for (int k = 0; k <= V_ARR; k++) PyModule_AddIntConstant(m, VKINDS[k], k);
    PyModule_AddIntConstant(m, "N_INT", N_INT);
    PyModule_AddIntConstant(m, "N_NS", N_NS);
    PyModule_AddIntConstant(m, "N_FLOAT", N_FLOAT);
    PyModule_AddIntConstant(m, "CSV_TEXT", CSV_TEXT);
    PyModule_AddIntConstant(m, "CSV_QTEXT", CSV_QTEXT);
    PyModule_AddIntConstant(m, "CSV_RAW", CSV_RAW);
    PyModule_AddIntConstant(m, "CSV_SKIP", CSV_SKIP);
    return m;
}
