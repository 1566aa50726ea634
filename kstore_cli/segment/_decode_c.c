/*
 * The native twin of kstore_cli/segment/_decode_py.py: Kafka's v2 record parsing, legacy message
 * parsing, v2 batch framing with CRC-32C, and a columnar appender for Arrow.
 *
 * Contract: every function returns exactly what its Python twin returns and raises the same
 * class with the same message (Kafka's wording). Reads are bounds-checked against the caller's
 * `end`, which itself must lie inside the buffer (checked once per call). Varints use unsigned
 * arithmetic, as Kafka's ByteUtils does, so no signed overflow can occur.
 *
 * A v2 record (DefaultRecord):
 *     length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
 *     keyLength varint, key, valueLength varint, value, headerCount varint,
 *     headers (keyLength varint, key, valueLength varint, value) * headerCount
 * A legacy entry: offset int64, size int32, crc uint32, magic int8, attributes int8,
 *     [timestamp int64 (magic 1)], keyLength int32, key, valueLength int32, value
 * A v2 batch header: see kstore_cli/segment/batch.py (61 bytes, CRC-32C over [21, end)).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
#define KSTORE_HW_CRC 1
#endif

/* Objects shared with the Python twin (imported at module init). */
static PyObject *InvalidRecordError; /* kstore_cli.errors.InvalidRecordError */
static PyObject *Underflow;          /* kstore_cli.segment._decode_common._Underflow */
static PyObject *JavaUtf8;           /* kstore_cli.segment.text.java_utf8, imported on first need */

#define LOG_OVERHEAD 12
#define RECORD_OVERHEAD_V0 14
#define V2_HEADER_SIZE 61
#define V2_CRC_POS 17
#define V2_CRC_START 21
#define HEADER_SIZE_UP_TO_MAGIC 17
#define SCAN_END 0
#define SCAN_MORE 1
#define SCAN_OTHER 2

/* ------------------------------------------------------------------ big-endian reads */

static inline uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}
static inline uint64_t be64(const uint8_t *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }
/* Two's complement views without implementation-defined casts of out-of-range values. */
static inline int32_t s32(uint32_t v) { return v < 0x80000000u ? (int32_t)v : -(int32_t)(~v) - 1; }
static inline int64_t s64(uint64_t v) {
    return v < 0x8000000000000000ull ? (int64_t)v : -(int64_t)(~v) - 1;
}
static inline int16_t s16(uint32_t v) { v &= 0xFFFF; return v < 0x8000u ? (int16_t)v : (int16_t)((int32_t)v - 0x10000); }
static inline int8_t s8(uint32_t v) { v &= 0xFF; return v < 0x80u ? (int8_t)v : (int8_t)((int32_t)v - 0x100); }

/* ------------------------------------------------------------------ buffers */

/* A read-only view of buf with `end` checked to lie inside it. */
static int get_view(PyObject *obj, Py_buffer *view, Py_ssize_t pos, Py_ssize_t end) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return -1;
    if (pos < 0 || end < 0 || end > view->len) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "pos %zd / end %zd outside the buffer of %zd bytes", pos, end, view->len);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ varints (ByteUtils) */

enum { RD_OK = 0, RD_UNDERFLOW = -1, RD_ERROR = -2 };

/* ByteUtils.readVarint: at most 5 bytes; bits past 31 of the 5th byte are dropped. */
static inline int rd_varint(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, int32_t *out) {
    uint32_t value = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (int i = 0;; i++) {
        if (p >= end) return RD_UNDERFLOW;
        uint32_t c = b[p++];
        if (i == 4) {
            if (c & 0x80) {
                char msg[160];
                snprintf(msg, sizeof msg,
                         "Varint is too long, the most significant bit in the 5th byte is set, converted value: %x",
                         (unsigned)(value | (c << shift)));
                PyErr_SetString(InvalidRecordError, msg);
                return RD_ERROR;
            }
            value |= c << shift; /* uint32: high bits drop, as in Kafka */
            break;
        }
        value |= (c & 0x7F) << shift;
        if (!(c & 0x80)) break;
        shift += 7;
    }
    *out = (int32_t)((int64_t)(value >> 1) ^ -(int64_t)(value & 1));
    *pos = p;
    return RD_OK;
}

/* ByteUtils.readVarlong: at most 10 bytes. */
static inline int rd_varlong(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, int64_t *out) {
    uint64_t value = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= end) return RD_UNDERFLOW;
        uint64_t c = b[p++];
        value |= (c & 0x7F) << shift;
        if (!(c & 0x80)) break;
        shift += 7;
        if (shift > 63) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "Varlong is too long, most significant bit in the 10th byte is set, converted value: %llx",
                     (unsigned long long)value);
            PyErr_SetString(InvalidRecordError, msg);
            return RD_ERROR;
        }
    }
    *out = (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
    *pos = p;
    return RD_OK;
}

static PyObject *py_read_varint(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos, end;
    Py_buffer v;
    int32_t value;
    if (!PyArg_ParseTuple(args, "Onn", &obj, &pos, &end)) return NULL;
    if (get_view(obj, &v, pos, end) < 0) return NULL;
    int rc = rd_varint((const uint8_t *)v.buf, &pos, end, &value);
    PyBuffer_Release(&v);
    if (rc == RD_UNDERFLOW) { PyErr_SetNone(Underflow); return NULL; }
    if (rc == RD_ERROR) return NULL;
    return Py_BuildValue("(in)", (int)value, pos);
}

static PyObject *py_read_varlong(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos, end;
    Py_buffer v;
    int64_t value;
    if (!PyArg_ParseTuple(args, "Onn", &obj, &pos, &end)) return NULL;
    if (get_view(obj, &v, pos, end) < 0) return NULL;
    int rc = rd_varlong((const uint8_t *)v.buf, &pos, end, &value);
    PyBuffer_Release(&v);
    if (rc == RD_UNDERFLOW) { PyErr_SetNone(Underflow); return NULL; }
    if (rc == RD_ERROR) return NULL;
    return Py_BuildValue("(Ln)", (long long)value, pos);
}

static int varint_bytes(uint32_t v) {
    int n = 1;
    while (v >= 0x80) { v >>= 7; n++; }
    return n;
}

/* ByteUtils.sizeOfVarint; like the twin, any Python int: ((value << 1) ^ (value >> 31)) & 0xFFFFFFFF. */
static PyObject *py_size_of_varint(PyObject *self, PyObject *arg) {
    int overflow = 0;
    long long full = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (full == -1 && PyErr_Occurred()) return NULL;
    if (!overflow) {
        uint64_t u = (uint64_t)full;
        /* an arithmetic shift right by 31, done on unsigned values */
        uint64_t shifted = full < 0 ? ~((~u) >> 31) : u >> 31;
        return PyLong_FromLong(varint_bytes((uint32_t)((u << 1) ^ shifted)));
    }
    /* Beyond int64: Python's own arithmetic, for exactness. */
    PyObject *one = PyLong_FromLong(1), *k31 = PyLong_FromLong(31), *mask = PyLong_FromUnsignedLong(0xFFFFFFFFul);
    PyObject *a = NULL, *b = NULL, *x = NULL, *m = NULL;
    if (one && k31 && mask && (a = PyNumber_Lshift(arg, one)) && (b = PyNumber_Rshift(arg, k31)) &&
        (x = PyNumber_Xor(a, b)))
        m = PyNumber_And(x, mask);
    Py_XDECREF(one); Py_XDECREF(k31); Py_XDECREF(mask); Py_XDECREF(a); Py_XDECREF(b); Py_XDECREF(x);
    if (!m) return NULL;
    unsigned long v = PyLong_AsUnsignedLong(m);
    Py_DECREF(m);
    if (v == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    return PyLong_FromLong(varint_bytes((uint32_t)v));
}

/* ------------------------------------------------------------------ v2 records */

/* One parsed record; spans are positions into the buffer. */
typedef struct {
    int32_t offset_delta;
    int64_t timestamp_delta;
    Py_ssize_t size, key_pos, key_len, value_pos, value_len;
    Py_ssize_t header_start; /* index into the header span array */
    int32_t header_count;
} rec_t;

typedef struct {
    Py_ssize_t key_pos, key_len, value_pos, value_len;
} hdr_t;

typedef struct {
    rec_t *recs;
    Py_ssize_t nrecs, caprecs;
    hdr_t *hdrs;
    Py_ssize_t nhdrs, caphdrs;
} parse_out;

static void parse_out_free(parse_out *o) {
    PyMem_Free(o->recs);
    PyMem_Free(o->hdrs);
    o->recs = NULL;
    o->hdrs = NULL;
}

static int set_invalid(const char *msg) {
    PyErr_SetString(InvalidRecordError, msg);
    return -1;
}

#define PREMATURE_EOF "Incorrect declared batch size, premature EOF reached"
#define INVALID_STRUCTURE "Found invalid record structure"

/*
 * DefaultRecord.readFrom for `count` records in b[pos:end], then the leftover-bytes check of
 * DefaultRecordBatch's iterator. Returns 0, or -1 with InvalidRecordError set (same messages as
 * the twin, in the same order of checks).
 */
static int parse_v2(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t count, parse_out *o) {
    char msg[256];
    o->nrecs = o->nhdrs = 0;
    /* At least 7 bytes per record (Kafka's smallest record): do not trust count for the allocation. */
    Py_ssize_t want = count < (end - pos) / 7 + 1 ? count : (end - pos) / 7 + 1;
    if (want < 1) want = 1;
    if (o->caprecs < want) {
        rec_t *r = PyMem_Realloc(o->recs, (size_t)want * sizeof(rec_t));
        if (!r) { PyErr_NoMemory(); return -1; }
        o->recs = r;
        o->caprecs = want;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        int32_t length;
        if (pos >= end) return set_invalid(PREMATURE_EOF);
        Py_ssize_t body = pos;
        int rc = rd_varint(b, &body, end, &length);
        if (rc == RD_UNDERFLOW) return set_invalid(PREMATURE_EOF);
        if (rc == RD_ERROR) return -1;
        Py_ssize_t record_end = body + (Py_ssize_t)length;
        if (length < 0 || record_end > end) {
            snprintf(msg, sizeof msg,
                     "Invalid record size: expected %d bytes in record payload, but instead the buffer has only %zd remaining bytes.",
                     (int)length, end - body);
            return set_invalid(msg);
        }
        Py_ssize_t p = body + 1; /* attributes: unused */
        int64_t ts_delta;
        int32_t offset_delta, key_len, value_len, header_count;
        if ((rc = rd_varlong(b, &p, end, &ts_delta)) != RD_OK) goto fail;
        if ((rc = rd_varint(b, &p, end, &offset_delta)) != RD_OK) goto fail;
        if ((rc = rd_varint(b, &p, end, &key_len)) != RD_OK) goto fail;
        Py_ssize_t key_pos = p;
        if (key_len < 0) key_len = -1; else p += key_len;
        if ((rc = rd_varint(b, &p, end, &value_len)) != RD_OK) goto fail;
        Py_ssize_t value_pos = p;
        if (value_len < 0) value_len = -1; else p += value_len;
        if ((rc = rd_varint(b, &p, end, &header_count)) != RD_OK) goto fail;
        if (header_count < 0) {
            snprintf(msg, sizeof msg, "Found invalid number of record headers %d", (int)header_count);
            return set_invalid(msg);
        }
        if ((Py_ssize_t)header_count > end - p) {
            snprintf(msg, sizeof msg,
                     "Found invalid number of record headers. %d is larger than the remaining size of the buffer",
                     (int)header_count);
            return set_invalid(msg);
        }
        Py_ssize_t header_start = o->nhdrs;
        if (header_count) {
            if (o->caphdrs - o->nhdrs < header_count) {
                Py_ssize_t cap = o->caphdrs * 2 + header_count + 8;
                hdr_t *h = PyMem_Realloc(o->hdrs, (size_t)cap * sizeof(hdr_t));
                if (!h) { PyErr_NoMemory(); return -1; }
                o->hdrs = h;
                o->caphdrs = cap;
            }
            for (int32_t h = 0; h < header_count; h++) {
                int32_t hk_len, hv_len;
                if ((rc = rd_varint(b, &p, end, &hk_len)) != RD_OK) goto fail;
                if (hk_len < 0) {
                    snprintf(msg, sizeof msg, "Invalid negative header key size %d", (int)hk_len);
                    return set_invalid(msg);
                }
                Py_ssize_t hk_pos = p;
                p += hk_len;
                if ((rc = rd_varint(b, &p, end, &hv_len)) != RD_OK) goto fail;
                Py_ssize_t hv_pos = p;
                if (hv_len < 0) hv_len = -1; else p += hv_len;
                if (p > end) { rc = RD_UNDERFLOW; goto fail; }
                hdr_t *hd = &o->hdrs[o->nhdrs++];
                hd->key_pos = hk_pos;
                hd->key_len = hk_len;
                hd->value_pos = hv_pos;
                hd->value_len = hv_len;
            }
        }
        /* Kafka reads the fields from the whole buffer and only then compares sizes. */
        if (p != record_end) {
            snprintf(msg, sizeof msg,
                     "Invalid record size: expected to read %d bytes in record payload, but instead read %zd",
                     (int)length, p - body);
            return set_invalid(msg);
        }
        if (o->nrecs == o->caprecs) {
            Py_ssize_t cap = o->caprecs * 2;
            rec_t *r = PyMem_Realloc(o->recs, (size_t)cap * sizeof(rec_t));
            if (!r) { PyErr_NoMemory(); return -1; }
            o->recs = r;
            o->caprecs = cap;
        }
        rec_t *r = &o->recs[o->nrecs++];
        r->offset_delta = offset_delta;
        r->timestamp_delta = ts_delta;
        r->size = record_end - pos;
        r->key_pos = key_pos;
        r->key_len = key_len;
        r->value_pos = value_pos;
        r->value_len = value_len;
        r->header_start = header_start;
        r->header_count = header_count;
        pos = record_end;
        continue;
    fail:
        if (rc == RD_UNDERFLOW) return set_invalid(INVALID_STRUCTURE);
        return -1;
    }
    if (pos != end) return set_invalid("Incorrect declared batch size, records still remaining in file");
    return 0;
}

static PyObject *py_decode_v2_records(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos, end, count;
    Py_buffer v;
    parse_out o = {0};
    if (!PyArg_ParseTuple(args, "Onnn", &obj, &pos, &end, &count)) return NULL;
    if (get_view(obj, &v, pos, end) < 0) return NULL;
    int rc = parse_v2((const uint8_t *)v.buf, pos, end, count, &o);
    PyBuffer_Release(&v);
    if (rc < 0) { parse_out_free(&o); return NULL; }
    PyObject *list = PyList_New(o.nrecs);
    if (!list) goto error;
    for (Py_ssize_t i = 0; i < o.nrecs; i++) {
        rec_t *r = &o.recs[i];
        PyObject *headers;
        if (r->header_count) {
            headers = PyTuple_New(r->header_count);
            if (!headers) goto error;
            for (int32_t h = 0; h < r->header_count; h++) {
                hdr_t *hd = &o.hdrs[r->header_start + h];
                PyObject *t = Py_BuildValue("(nnnn)", hd->key_pos, hd->key_len, hd->value_pos, hd->value_len);
                if (!t) { Py_DECREF(headers); goto error; }
                PyTuple_SET_ITEM(headers, h, t);
            }
        } else {
            headers = PyTuple_New(0);
            if (!headers) goto error;
        }
        PyObject *t = PyTuple_New(8);
        if (!t) { Py_DECREF(headers); goto error; }
        PyList_SET_ITEM(list, i, t);
        PyObject *f[7] = {
            PyLong_FromLong(r->offset_delta), PyLong_FromLongLong(r->timestamp_delta), PyLong_FromSsize_t(r->size),
            PyLong_FromSsize_t(r->key_pos), PyLong_FromSsize_t(r->key_len), PyLong_FromSsize_t(r->value_pos),
            PyLong_FromSsize_t(r->value_len)};
        int bad = 0;
        for (int k = 0; k < 7; k++) {
            if (!f[k]) bad = 1;
            PyTuple_SET_ITEM(t, k, f[k] ? f[k] : (Py_INCREF(Py_None), Py_None));
        }
        PyTuple_SET_ITEM(t, 7, headers);
        if (bad) goto error;
    }
    parse_out_free(&o);
    return list;
error:
    Py_XDECREF(list);
    parse_out_free(&o);
    return NULL;
}

/* ------------------------------------------------------------------ Record objects */

/*
 * batch.Record is a Python class with __slots__; the slots are member descriptors of type
 * T_OBJECT_EX at fixed offsets. We look the offsets up once per class (checking each is such a
 * descriptor) and fill a fresh instance exactly as Record.__init__ would for a v2 record.
 */
enum {
    S_BATCH, S_KEY, S_VALUE, S_OFFSET, S_TIMESTAMP, S_SEQUENCE, S_SIZE, S_BUF, S_KEY_POS, S_KEY_LEN,
    S_VALUE_POS, S_VALUE_LEN, S_HEADERS, S_CRC, S_MAGIC, S_ATTRIBUTES, S_LEGACY_VALID, S_HEADER_LIST, S_COUNT
};
static const char *slot_names[S_COUNT] = {
    "batch", "key", "value", "offset", "timestamp", "sequence", "size_in_bytes", "_buf", "_key_pos", "_key_len",
    "_value_pos", "_value_len", "_headers", "crc", "magic", "attributes", "_legacy_valid", "headers",
};
static PyTypeObject *record_type = NULL; /* a strong reference */
static Py_ssize_t slot_offset[S_COUNT];

static int learn_record_type(PyObject *cls) {
    if ((PyObject *)record_type == cls) return 0;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "record_cls must be a class");
        return -1;
    }
    PyTypeObject *tp = (PyTypeObject *)cls;
    Py_ssize_t offsets[S_COUNT];
    for (int i = 0; i < S_COUNT; i++) {
        PyObject *d = PyObject_GetAttrString(cls, slot_names[i]);
        if (!d) return -1;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        Py_ssize_t off = ok ? ((PyMemberDescrObject *)d)->d_member->offset : 0;
        Py_DECREF(d);
        if (!ok || off < (Py_ssize_t)sizeof(PyObject) || off + (Py_ssize_t)sizeof(PyObject *) > tp->tp_basicsize) {
            PyErr_Format(PyExc_TypeError, "record_cls.%s is not a __slots__ member", slot_names[i]);
            return -1;
        }
        offsets[i] = off;
    }
    memcpy(slot_offset, offsets, sizeof offsets);
    Py_INCREF(cls);
    Py_XSETREF(record_type, tp);
    return 0;
}

#define SLOT(obj, i) (*(PyObject **)((char *)(obj) + slot_offset[i]))

/* batch.Header: two __slots__ members, key and value, filled the same way. */
static PyTypeObject *header_type = NULL;
static Py_ssize_t header_key_offset, header_value_offset;

static Py_ssize_t member_offset(PyObject *cls, const char *name) {
    PyObject *d = PyObject_GetAttrString(cls, name);
    if (!d) return -1;
    int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
    Py_ssize_t off = ok ? ((PyMemberDescrObject *)d)->d_member->offset : 0;
    Py_DECREF(d);
    if (!ok || off < (Py_ssize_t)sizeof(PyObject) ||
        off + (Py_ssize_t)sizeof(PyObject *) > ((PyTypeObject *)cls)->tp_basicsize) {
        PyErr_Format(PyExc_TypeError, "%s is not a __slots__ member", name);
        return -1;
    }
    return off;
}

static int learn_header_type(PyObject *cls) {
    if ((PyObject *)header_type == cls) return 0;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "header_cls must be a class");
        return -1;
    }
    Py_ssize_t k = member_offset(cls, "key"), v = k < 0 ? -1 : member_offset(cls, "value");
    if (v < 0) return -1;
    header_key_offset = k;
    header_value_offset = v;
    Py_INCREF(cls);
    Py_XSETREF(header_type, (PyTypeObject *)cls);
    return 0;
}

/* Java's int arithmetic (batch.increment_sequence), on unsigned values: no signed overflow. */
static inline int32_t wrap32(int64_t v) { return s32((uint32_t)(uint64_t)v); }
static int32_t increment_sequence(int32_t sequence, int32_t increment) {
    if (sequence > wrap32((int64_t)0x7FFFFFFF - increment))
        return wrap32((int64_t)wrap32((int64_t)increment - wrap32((int64_t)0x7FFFFFFF - sequence)) - 1);
    return wrap32((int64_t)sequence + increment);
}

/* a + b as a Python int (exact, like Python's unbounded ints). */
static PyObject *add_exact(int64_t a, int64_t b) {
    int64_t r;
    if (!__builtin_add_overflow(a, b, &r)) return PyLong_FromLongLong(r);
    PyObject *pa = PyLong_FromLongLong(a), *pb = PyLong_FromLongLong(b), *out = NULL;
    if (pa && pb) out = PyNumber_Add(pa, pb);
    Py_XDECREF(pa);
    Py_XDECREF(pb);
    return out;
}

static PyObject *span_bytes(const uint8_t *b, Py_ssize_t pos, Py_ssize_t len) {
    if (len < 0) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)b + pos, len);
}

static PyObject *headers_tuple(parse_out *o, rec_t *r) {
    PyObject *headers = PyTuple_New(r->header_count);
    if (!headers || !r->header_count) return headers;
    for (int32_t h = 0; h < r->header_count; h++) {
        hdr_t *hd = &o->hdrs[r->header_start + h];
        PyObject *t = Py_BuildValue("(nnnn)", hd->key_pos, hd->key_len, hd->value_pos, hd->value_len);
        if (!t) { Py_DECREF(headers); return NULL; }
        PyTuple_SET_ITEM(headers, h, t);
    }
    return headers;
}

/* Java's new String(bytes, UTF_8): strict UTF-8 when it decodes, else text.java_utf8's rules. */
static PyObject *java_utf8(const uint8_t *p, Py_ssize_t n) {
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, NULL);
    if (s || !PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return s;
    PyErr_Clear();
    if (!JavaUtf8) {
        PyObject *text = PyImport_ImportModule("kstore_cli.segment.text");
        if (!text) return NULL;
        JavaUtf8 = PyObject_GetAttrString(text, "java_utf8");
        Py_DECREF(text);
        if (!JavaUtf8) return NULL;
    }
    PyObject *raw = PyBytes_FromStringAndSize((const char *)p, n);
    if (!raw) return NULL;
    s = PyObject_CallOneArg(JavaUtf8, raw);
    Py_DECREF(raw);
    return s;
}

/* Record.headers: [header_cls(key text, value bytes | None), ...] */
static PyObject *header_list(PyObject *header_cls, const uint8_t *b, parse_out *o, rec_t *r) {
    PyObject *list = PyList_New(r->header_count);
    if (!list) return NULL;
    for (int32_t h = 0; h < r->header_count; h++) {
        hdr_t *hd = &o->hdrs[r->header_start + h];
        PyObject *k = java_utf8(b + hd->key_pos, hd->key_len);
        PyObject *v = k ? span_bytes(b, hd->value_pos, hd->value_len) : NULL;
        PyObject *obj = v ? header_type->tp_alloc(header_type, 0) : NULL;
        if (!obj) {
            Py_XDECREF(k);
            Py_XDECREF(v);
            Py_DECREF(list);
            return NULL;
        }
        /* what Header.__init__ stores (references handed over) */
        *(PyObject **)((char *)obj + header_key_offset) = k;
        *(PyObject **)((char *)obj + header_value_offset) = v;
        PyList_SET_ITEM(list, h, obj);
    }
    return list;
}

static PyObject *py_build_v2_records(PyObject *self, PyObject *args) {
    PyObject *cls, *header_cls, *batch, *data, *log_append_obj;
    Py_ssize_t pos, end, count;
    long long base_offset, base_ts;
    int base_seq;
    Py_buffer v;
    parse_out o = {0};
    PyObject *list = NULL;
    if (!PyArg_ParseTuple(args, "OOOOnnnLLOi", &cls, &header_cls, &batch, &data, &pos, &end, &count, &base_offset, &base_ts,
                          &log_append_obj, &base_seq))
        return NULL;
    if (learn_record_type(cls) < 0 || learn_header_type(header_cls) < 0) return NULL;
    if (get_view(data, &v, pos, end) < 0) return NULL;
    const uint8_t *b = (const uint8_t *)v.buf;
    if (parse_v2(b, pos, end, count, &o) < 0) goto error;
    list = PyList_New(o.nrecs);
    if (!list) goto error;
    for (Py_ssize_t i = 0; i < o.nrecs; i++) {
        rec_t *r = &o.recs[i];
        PyObject *rec = record_type->tp_alloc(record_type, 0);
        if (!rec) goto error;
        PyList_SET_ITEM(list, i, rec);
        Py_INCREF(batch);
        SLOT(rec, S_BATCH) = batch;
        Py_INCREF(data);
        SLOT(rec, S_BUF) = data;
        PyObject *ts = log_append_obj != Py_None ? (Py_INCREF(log_append_obj), log_append_obj)
                                                 : add_exact(base_ts, r->timestamp_delta);
        PyObject *vals[] = {
            add_exact(base_offset, r->offset_delta),
            ts,
            PyLong_FromLong(base_seq >= 0 ? increment_sequence(base_seq, r->offset_delta) : -1),
            PyLong_FromSsize_t(r->size),
            PyLong_FromSsize_t(r->key_pos),
            PyLong_FromSsize_t(r->key_len),
            PyLong_FromSsize_t(r->value_pos),
            PyLong_FromSsize_t(r->value_len),
            headers_tuple(&o, r),
            span_bytes(b, r->key_pos, r->key_len),
            span_bytes(b, r->value_pos, r->value_len),
            PyLong_FromLong(2),
            PyLong_FromLong(0),
            header_list(header_cls, b, &o, r),
        };
        static const int where[] = {S_OFFSET, S_TIMESTAMP, S_SEQUENCE, S_SIZE, S_KEY_POS, S_KEY_LEN, S_VALUE_POS,
                                    S_VALUE_LEN, S_HEADERS, S_KEY, S_VALUE, S_MAGIC, S_ATTRIBUTES, S_HEADER_LIST};
        int bad = 0;
        for (size_t k = 0; k < sizeof where / sizeof where[0]; k++) {
            if (!vals[k]) bad = 1;
            SLOT(rec, where[k]) = vals[k];
        }
        Py_INCREF(Py_None);
        SLOT(rec, S_CRC) = Py_None;
        Py_INCREF(Py_None);
        SLOT(rec, S_LEGACY_VALID) = Py_None;
        if (bad) goto error;
    }
    PyBuffer_Release(&v);
    parse_out_free(&o);
    return list;
error:
    Py_XDECREF(list);
    PyBuffer_Release(&v);
    parse_out_free(&o);
    return NULL;
}

/* ------------------------------------------------------------------ columnar mode (Arrow) */

/* A growable byte buffer that becomes a bytes object. */
typedef struct { char *p; Py_ssize_t n, cap; } gbuf;

static int gbuf_reserve(gbuf *g, Py_ssize_t more) {
    if (g->cap - g->n >= more) return 0;
    Py_ssize_t cap = g->cap * 2 + more + 64;
    char *p = PyMem_Realloc(g->p, (size_t)cap);
    if (!p) { PyErr_NoMemory(); return -1; }
    g->p = p;
    g->cap = cap;
    return 0;
}

static PyObject *gbuf_bytes(gbuf *g) { return PyBytes_FromStringAndSize(g->p ? g->p : "", g->n); }

/*
 * decode_v2_columns: decode a batch's records (same checks and errors as decode_v2_records) into
 * Arrow-ready pieces: offsets and timestamps as native int64, key/value offsets as native int32
 * ends (the running data offset after each row, starting from key_base/value_base), the key/value
 * bytes concatenated, and one validity byte (0 null, 1 set) per row.
 */
static PyObject *py_decode_v2_columns(PyObject *self, PyObject *args) {
    PyObject *obj, *log_append_obj;
    Py_ssize_t pos, end, count, key_base, value_base;
    long long base_offset, base_ts;
    Py_buffer v;
    parse_out o = {0};
    gbuf offs = {0}, tss = {0}, kends = {0}, kdata = {0}, kvalid = {0}, vends = {0}, vdata = {0}, vvalid = {0};
    PyObject *out = NULL;
    if (!PyArg_ParseTuple(args, "OnnnLLOnn", &obj, &pos, &end, &count, &base_offset, &base_ts, &log_append_obj,
                          &key_base, &value_base))
        return NULL;
    int log_append = log_append_obj != Py_None;
    long long log_append_ts = 0;
    if (log_append) {
        log_append_ts = PyLong_AsLongLong(log_append_obj);
        if (log_append_ts == -1 && PyErr_Occurred()) return NULL;
    }
    if (get_view(obj, &v, pos, end) < 0) return NULL;
    const uint8_t *b = (const uint8_t *)v.buf;
    if (parse_v2(b, pos, end, count, &o) < 0) goto done;
    Py_ssize_t n = o.nrecs;
    if (gbuf_reserve(&offs, n * 8) < 0 || gbuf_reserve(&tss, n * 8) < 0 || gbuf_reserve(&kends, n * 4) < 0 ||
        gbuf_reserve(&vends, n * 4) < 0 || gbuf_reserve(&kvalid, n) < 0 || gbuf_reserve(&vvalid, n) < 0)
        goto done;
    Py_ssize_t kpos = key_base, vpos = value_base;
    for (Py_ssize_t i = 0; i < n; i++) {
        rec_t *r = &o.recs[i];
        int64_t off, ts;
        if (__builtin_add_overflow((int64_t)base_offset, (int64_t)r->offset_delta, &off) ||
            (!log_append && __builtin_add_overflow((int64_t)base_ts, r->timestamp_delta, &ts))) {
            PyErr_SetString(PyExc_OverflowError, "offset or timestamp beyond int64");
            goto done;
        }
        if (log_append) ts = log_append_ts;
        memcpy(offs.p + offs.n, &off, 8); offs.n += 8;
        memcpy(tss.p + tss.n, &ts, 8); tss.n += 8;
        if (r->key_len > 0) {
            if (gbuf_reserve(&kdata, r->key_len) < 0) goto done;
            memcpy(kdata.p + kdata.n, b + r->key_pos, (size_t)r->key_len);
            kdata.n += r->key_len;
            kpos += r->key_len;
        }
        if (r->value_len > 0) {
            if (gbuf_reserve(&vdata, r->value_len) < 0) goto done;
            memcpy(vdata.p + vdata.n, b + r->value_pos, (size_t)r->value_len);
            vdata.n += r->value_len;
            vpos += r->value_len;
        }
        if (kpos > INT32_MAX || vpos > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of keys or values in one Arrow array");
            goto done;
        }
        int32_t ke = (int32_t)kpos, ve = (int32_t)vpos;
        memcpy(kends.p + kends.n, &ke, 4); kends.n += 4;
        memcpy(vends.p + vends.n, &ve, 4); vends.n += 4;
        kvalid.p[kvalid.n++] = r->key_len >= 0;
        vvalid.p[vvalid.n++] = r->value_len >= 0;
    }
    out = Py_BuildValue("(nNNNNNNNN)", n, gbuf_bytes(&offs), gbuf_bytes(&tss), gbuf_bytes(&kends), gbuf_bytes(&kdata),
                        gbuf_bytes(&kvalid), gbuf_bytes(&vends), gbuf_bytes(&vdata), gbuf_bytes(&vvalid));
done:
    PyBuffer_Release(&v);
    parse_out_free(&o);
    PyMem_Free(offs.p); PyMem_Free(tss.p); PyMem_Free(kends.p); PyMem_Free(kdata.p); PyMem_Free(kvalid.p);
    PyMem_Free(vends.p); PyMem_Free(vdata.p); PyMem_Free(vvalid.p);
    return out;
}

/* pack_validity(bytes of 0/1 per row) -> (Arrow validity bitmap, null count) */
static PyObject *py_pack_validity(PyObject *self, PyObject *obj) {
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *p = (const uint8_t *)v.buf;
    Py_ssize_t n = v.len, nulls = 0;
    PyObject *bm = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
    if (!bm) { PyBuffer_Release(&v); return NULL; }
    uint8_t *q = (uint8_t *)PyBytes_AS_STRING(bm);
    memset(q, 0, (size_t)((n + 7) / 8));
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i]) q[i >> 3] |= (uint8_t)(1u << (i & 7));
        else nulls++;
    }
    PyBuffer_Release(&v);
    return Py_BuildValue("(Nn)", bm, nulls);
}

/* ------------------------------------------------------------------ legacy messages */

static PyObject *py_decode_legacy_message(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos, end;
    Py_buffer v;
    char msg[160];
    if (!PyArg_ParseTuple(args, "Onn", &obj, &pos, &end)) return NULL;
    if (get_view(obj, &v, pos, end) < 0) return NULL;
    const uint8_t *b = (const uint8_t *)v.buf;
    if (end - pos < LOG_OVERHEAD) { PyBuffer_Release(&v); Py_RETURN_NONE; }
    int64_t offset = s64(be64(b + pos));
    int32_t size = s32(be32(b + pos + 8));
    if (size < RECORD_OVERHEAD_V0) {
        PyBuffer_Release(&v);
        snprintf(msg, sizeof msg, "Record size %d is less than the minimum record overhead (%d)", (int)size,
                 RECORD_OVERHEAD_V0);
        PyErr_SetString(InvalidRecordError, msg);
        return NULL;
    }
    Py_ssize_t m = pos + LOG_OVERHEAD;
    Py_ssize_t msg_end = m + size;
    if (msg_end > end) { PyBuffer_Release(&v); Py_RETURN_NONE; }
    /* size >= 14, so crc, magic and attributes lie inside the message. */
    uint32_t crc = be32(b + m);
    int magic = s8(b[m + 4]);
    int attributes = s8(b[m + 5]);
    Py_ssize_t p = m + 6;
    int64_t timestamp = -1;
    int32_t key_len, value_len;
    Py_ssize_t key_pos, value_pos;
    if (magic > 0) {
        if (p + 8 > msg_end) goto invalid;
        timestamp = s64(be64(b + p));
        p += 8;
    }
    if (p + 4 > msg_end) goto invalid;
    key_len = s32(be32(b + p));
    p += 4;
    key_pos = p;
    if (key_len < 0) key_len = -1; else p += key_len;
    if (p + 4 > msg_end) goto invalid;
    value_len = s32(be32(b + p));
    p += 4;
    value_pos = p;
    if (value_len < 0) value_len = -1; else p += value_len;
    if (p > msg_end) goto invalid;
    PyBuffer_Release(&v);
    return Py_BuildValue("(LnkiiLninin)", (long long)offset, (Py_ssize_t)(LOG_OVERHEAD + (Py_ssize_t)size),
                         (unsigned long)crc, magic, attributes, (long long)timestamp, key_pos, (int)key_len,
                         value_pos, (int)value_len, m);
invalid:
    PyBuffer_Release(&v);
    PyErr_SetString(InvalidRecordError, INVALID_STRUCTURE);
    return NULL;
}

/* ------------------------------------------------------------------ CRC-32C (java.util.zip.CRC32C) */

static uint32_t crc_table[8][256];

static void crc_init_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++) crc_table[t][n] = (crc_table[t - 1][n] >> 8) ^ crc_table[0][crc_table[t - 1][n] & 0xFF];
}

/* Slice-by-8 table CRC: the portable fallback. `crc` is the running (inverted) register. */
static uint32_t crc32c_sw(uint32_t crc, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) { crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8); n--; }
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
        uint32_t hi = (uint32_t)p[4] | ((uint32_t)p[5] << 8) | ((uint32_t)p[6] << 16) | ((uint32_t)p[7] << 24);
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
              crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
              crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#ifdef KSTORE_HW_CRC
/*
 * SSE 4.2's crc32 instruction computes exactly CRC-32C; chosen at run time (no -march needed).
 * The instruction has a latency of 3 cycles and a throughput of 1: three independent streams over
 * consecutive blocks keep it busy, and their registers are joined with "append n zero bytes"
 * operators (Mark Adler's crc32c.c), tabulated once for the two block sizes.
 */
#define CRC_LONG 8192
#define CRC_SHORT 256
static uint32_t crc_long_zeros[4][256], crc_short_zeros[4][256];

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1) sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat) {
    for (int n = 0; n < 32; n++) square[n] = gf2_times(mat, mat[n]);
}

/* The operator (32x32 over GF(2)) that appends len zero bytes to a raw CRC-32C register. */
static void crc_zeros_op(uint32_t *even, size_t len) {
    uint32_t odd[32];
    odd[0] = 0x82F63B78u; /* one zero bit */
    uint32_t row = 1;
    for (int n = 1; n < 32; n++) { odd[n] = row; row <<= 1; }
    gf2_square(even, odd); /* two zero bits */
    gf2_square(odd, even); /* four zero bits */
    /* odd now appends one zero byte... after the first square below; the loop squares len's bits */
    do {
        gf2_square(even, odd);
        len >>= 1;
        if (len == 0) return;
        gf2_square(odd, even);
        len >>= 1;
    } while (len);
    memcpy(even, odd, sizeof odd);
}

static void crc_zeros(uint32_t zeros[4][256], size_t len) {
    uint32_t op[32];
    crc_zeros_op(op, len);
    for (uint32_t n = 0; n < 256; n++) {
        zeros[0][n] = gf2_times(op, n);
        zeros[1][n] = gf2_times(op, n << 8);
        zeros[2][n] = gf2_times(op, n << 16);
        zeros[3][n] = gf2_times(op, n << 24);
    }
}

static inline uint32_t crc_shift(uint32_t zeros[4][256], uint32_t crc) {
    return zeros[0][crc & 0xFF] ^ zeros[1][(crc >> 8) & 0xFF] ^ zeros[2][(crc >> 16) & 0xFF] ^ zeros[3][crc >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c0 = crc;
    while (n && ((uintptr_t)p & 7)) { c0 = _mm_crc32_u8((uint32_t)c0, *p++); n--; }
    while (n >= 3 * CRC_LONG) {
        uint64_t c1 = 0, c2 = 0, w0, w1, w2;
        const uint8_t *end = p + CRC_LONG;
        do {
            memcpy(&w0, p, 8);
            memcpy(&w1, p + CRC_LONG, 8);
            memcpy(&w2, p + 2 * CRC_LONG, 8);
            c0 = _mm_crc32_u64(c0, w0);
            c1 = _mm_crc32_u64(c1, w1);
            c2 = _mm_crc32_u64(c2, w2);
            p += 8;
        } while (p < end);
        c0 = crc_shift(crc_long_zeros, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = crc_shift(crc_long_zeros, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * CRC_LONG;
        n -= 3 * CRC_LONG;
    }
    while (n >= 3 * CRC_SHORT) {
        uint64_t c1 = 0, c2 = 0, w0, w1, w2;
        const uint8_t *end = p + CRC_SHORT;
        do {
            memcpy(&w0, p, 8);
            memcpy(&w1, p + CRC_SHORT, 8);
            memcpy(&w2, p + 2 * CRC_SHORT, 8);
            c0 = _mm_crc32_u64(c0, w0);
            c1 = _mm_crc32_u64(c1, w1);
            c2 = _mm_crc32_u64(c2, w2);
            p += 8;
        } while (p < end);
        c0 = crc_shift(crc_short_zeros, (uint32_t)c0) ^ (uint32_t)c1;
        c0 = crc_shift(crc_short_zeros, (uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * CRC_SHORT;
        n -= 3 * CRC_SHORT;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c0 = _mm_crc32_u64(c0, w);
        p += 8;
        n -= 8;
    }
    while (n--) c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return (uint32_t)c0;
}
#endif

static int crc_hw = 0;

static inline uint32_t crc32c(const uint8_t *p, size_t n) {
#ifdef KSTORE_HW_CRC
    if (crc_hw) return crc32c_hw(0xFFFFFFFFu, p, n) ^ 0xFFFFFFFFu;
#endif
    return crc32c_sw(0xFFFFFFFFu, p, n) ^ 0xFFFFFFFFu;
}

static PyObject *py_crc32c(PyObject *self, PyObject *obj) {
    Py_buffer v;
    if (PyObject_GetBuffer(obj, &v, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t c;
    Py_BEGIN_ALLOW_THREADS /* the buffer is exported (pinned) for the whole call */
    c = crc32c((const uint8_t *)v.buf, (size_t)v.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&v);
    return PyLong_FromUnsignedLong(c);
}

/* ------------------------------------------------------------------ v2 batch framing */

/* The scan of reader.py's FileLogInputStream framing; see _decode_py.scan_batches. */
static PyObject *py_scan_batches(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos, end, max_batches;
    int check_crc;
    Py_buffer v;
    if (!PyArg_ParseTuple(args, "Onnnp", &obj, &pos, &end, &max_batches, &check_crc)) return NULL;
    if (get_view(obj, &v, pos, end) < 0) return NULL;
    const uint8_t *b = (const uint8_t *)v.buf;
    PyObject *heads = PyList_New(0);
    if (!heads) { PyBuffer_Release(&v); return NULL; }
    Py_ssize_t limit = end - HEADER_SIZE_UP_TO_MAGIC;
    int status = SCAN_END;
    while (pos < limit) {
        if (PyList_GET_SIZE(heads) >= max_batches) { status = SCAN_MORE; break; }
        /* pos + 17 < end: offset, size, epoch and magic are inside. */
        int32_t size = s32(be32(b + pos + 8));
        int magic = s8(b[pos + 16]);
        if (size < RECORD_OVERHEAD_V0 || (Py_ssize_t)size + LOG_OVERHEAD > end - pos || magic < 2 ||
            (Py_ssize_t)size + LOG_OVERHEAD < V2_HEADER_SIZE) {
            status = SCAN_OTHER;
            break;
        }
        Py_ssize_t entry_end = pos + LOG_OVERHEAD + size;
        const uint8_t *h = b + pos;
        uint32_t stored = be32(h + V2_CRC_POS);
        if (check_crc && stored != crc32c(h + V2_CRC_START, (size_t)(entry_end - pos - V2_CRC_START))) {
            status = SCAN_OTHER;
            break;
        }
        PyObject *t = PyTuple_New(14);
        if (!t) goto error;
        PyObject *f[14] = {
            PyLong_FromSsize_t(pos),
            PyLong_FromLongLong(s64(be64(h))),           /* baseOffset */
            PyLong_FromLong(size),                       /* batchLength */
            PyLong_FromLong(s32(be32(h + 12))),          /* partitionLeaderEpoch */
            PyLong_FromLong(magic),                      /* magic */
            PyLong_FromUnsignedLong(stored),             /* crc */
            PyLong_FromLong(s16((uint32_t)h[21] << 8 | h[22])), /* attributes */
            PyLong_FromLong(s32(be32(h + 23))),          /* lastOffsetDelta */
            PyLong_FromLongLong(s64(be64(h + 27))),      /* baseTimestamp */
            PyLong_FromLongLong(s64(be64(h + 35))),      /* maxTimestamp */
            PyLong_FromLongLong(s64(be64(h + 43))),      /* producerId */
            PyLong_FromLong(s16((uint32_t)h[51] << 8 | h[52])), /* producerEpoch */
            PyLong_FromLong(s32(be32(h + 53))),          /* baseSequence */
            PyLong_FromLong(s32(be32(h + 57))),          /* recordsCount */
        };
        int bad = 0;
        for (int k = 0; k < 14; k++) {
            if (!f[k]) { bad = 1; Py_INCREF(Py_None); f[k] = Py_None; }
            PyTuple_SET_ITEM(t, k, f[k]);
        }
        if (bad || PyList_Append(heads, t) < 0) { Py_DECREF(t); goto error; }
        Py_DECREF(t);
        pos = entry_end;
    }
    PyBuffer_Release(&v);
    return Py_BuildValue("(Nni)", heads, pos, status);
error:
    PyBuffer_Release(&v);
    Py_DECREF(heads);
    return NULL;
}

/* ------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"read_varint", py_read_varint, METH_VARARGS, "A zigzag varint (at most 5 bytes) at pos: (value, next position)."},
    {"read_varlong", py_read_varlong, METH_VARARGS, "A zigzag varlong (at most 10 bytes) at pos: (value, next position)."},
    {"size_of_varint", py_size_of_varint, METH_O, "Bytes needed for value as a zigzag varint."},
    {"decode_v2_records", py_decode_v2_records, METH_VARARGS,
     "Decode exactly `count` records from buf[pos:end]; leftover bytes are an error, as in Kafka."},
    {"decode_legacy_message", py_decode_legacy_message, METH_VARARGS,
     "The legacy entry at pos, or None when it does not fit before end (a truncated tail)."},
    {"build_v2_records", py_build_v2_records, METH_VARARGS,
     "decode_v2_records, then one record_cls (batch.Record) per record; see _decode_py.build_v2_records."},
    {"decode_v2_columns", py_decode_v2_columns, METH_VARARGS,
     "A batch's records as Arrow-ready column pieces; see _decode_py.decode_v2_columns."},
    {"pack_validity", py_pack_validity, METH_O, "Bytes of 0/1 per row as an Arrow validity bitmap: (bitmap, nulls)."},
    {"crc32c", py_crc32c, METH_O, "CRC-32C (Castagnoli), as java.util.zip.CRC32C computes it."},
    {"scan_batches", py_scan_batches, METH_VARARGS,
     "Frame plain v2 batches from pos: (heads, stop, status); see _decode_py.scan_batches."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_decode_c", "The native twin of kstore_cli.segment._decode_py.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__decode_c(void) {
    PyObject *errors = PyImport_ImportModule("kstore_cli.errors");
    if (!errors) return NULL;
    InvalidRecordError = PyObject_GetAttrString(errors, "InvalidRecordError");
    Py_DECREF(errors);
    if (!InvalidRecordError) return NULL;
    PyObject *common = PyImport_ImportModule("kstore_cli.segment._decode_common");
    if (!common) return NULL;
    Underflow = PyObject_GetAttrString(common, "_Underflow");
    Py_DECREF(common);
    if (!Underflow) return NULL;
    crc_init_tables();
#ifdef KSTORE_HW_CRC
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
    crc_zeros(crc_long_zeros, CRC_LONG);
    crc_zeros(crc_short_zeros, CRC_SHORT);
#endif
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    if (PyModule_AddStringConstant(m, "CRC32C_IMPL", crc_hw ? "sse4.2" : "table") < 0) return NULL;
    (void)JavaUtf8;
    return m;
}
