/*
 * The native twin of kstore_cli/record/_decode_py.py: Kafka's v2 record parsing, legacy message
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
 * A v2 batch header: see kstore_cli/record/batch.py (61 bytes, CRC-32C over [21, end)).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdlib.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "_wire.h"

/* Objects shared with the Python twin (imported at module init). */
static PyObject *InvalidRecordError; /* kstore_cli.errors.InvalidRecordError */
static PyObject *Underflow;          /* kstore_cli.record._decode_common._Underflow */
static PyObject *JavaUtf8;           /* kstore_cli.record.text.java_utf8, imported on first need */

#define SCAN_END 0
#define SCAN_MORE 1
#define SCAN_OTHER 2

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

/* _wire.h's readers with this decoder's errors: a too-long varint is Kafka's InvalidRecordError (RD_ERROR,
 * the error set); an underflow stays RD_UNDERFLOW, for the caller's message of the spot. */
enum { RD_OK = VARINT_OK, RD_UNDERFLOW = VARINT_UNDERFLOW, RD_ERROR = VARINT_TOO_LONG };

static int varint_too_long(uint32_t bits) {
    char msg[160];
    snprintf(msg, sizeof msg, "Varint is too long, the most significant bit in the 5th byte is set, converted value: %x",
             (unsigned)bits);
    PyErr_SetString(InvalidRecordError, msg);
    return RD_ERROR;
}

static int varlong_too_long(uint64_t bits) {
    char msg[160];
    snprintf(msg, sizeof msg, "Varlong is too long, most significant bit in the 10th byte is set, converted value: %llx",
             (unsigned long long)bits);
    PyErr_SetString(InvalidRecordError, msg);
    return RD_ERROR;
}

static inline int dec_varint(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, int32_t *out) {
    int rc = rd_varint(b, pos, end, out);
    return rc == VARINT_TOO_LONG ? varint_too_long((uint32_t)*out) : rc;
}

static inline int dec_varlong(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, int64_t *out) {
    int rc = rd_varlong(b, pos, end, out);
    return rc == VARINT_TOO_LONG ? varlong_too_long((uint64_t)*out) : rc;
}

static PyObject *py_read_varint(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos, end;
    Py_buffer v;
    int32_t value;
    if (!PyArg_ParseTuple(args, "Onn", &obj, &pos, &end)) return NULL;
    if (get_view(obj, &v, pos, end) < 0) return NULL;
    int rc = dec_varint((const uint8_t *)v.buf, &pos, end, &value);
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
    int rc = dec_varlong((const uint8_t *)v.buf, &pos, end, &value);
    PyBuffer_Release(&v);
    if (rc == RD_UNDERFLOW) { PyErr_SetNone(Underflow); return NULL; }
    if (rc == RD_ERROR) return NULL;
    return Py_BuildValue("(Ln)", (long long)value, pos);
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
        return PyLong_FromSsize_t(uvarint_size((uint32_t)((u << 1) ^ shifted)));
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
    return PyLong_FromSsize_t(uvarint_size((uint32_t)v));
}

/* ------------------------------------------------------------------ v2 records */

/* One parsed record; spans are positions into the buffer. */
typedef struct {
    int32_t offset_delta;
    int64_t timestamp_delta;
    Py_ssize_t size, key_pos, key_len, value_pos, value_len;
    Py_ssize_t header_start; /* index into the header span array */
    Py_ssize_t header_pos;   /* where the first header starts in the buffer */
    int32_t header_count;
} rec_t;

typedef struct {
    Py_ssize_t key_pos, key_len, value_pos, value_len;
} hdr_t;

#define INLINE_RECS 8
typedef struct {
    rec_t *recs;
    Py_ssize_t nrecs, caprecs;
    hdr_t *hdrs;
    Py_ssize_t nhdrs, caphdrs;
    rec_t inline_recs[INLINE_RECS]; /* small batches need no allocation */
} parse_out;

/* Grow o->recs to hold cap records (inline storage first, then the heap). */
static int recs_reserve(parse_out *o, Py_ssize_t cap) {
    if (o->caprecs >= cap) return 0;
    if (!o->recs && cap <= INLINE_RECS) {
        o->recs = o->inline_recs;
        o->caprecs = INLINE_RECS;
        return 0;
    }
    rec_t *r;
    if (o->recs == o->inline_recs) {
        r = PyMem_Malloc((size_t)cap * sizeof(rec_t));
        if (r) memcpy(r, o->inline_recs, (size_t)o->nrecs * sizeof(rec_t));
    } else {
        r = PyMem_Realloc(o->recs, (size_t)cap * sizeof(rec_t));
    }
    if (!r) { PyErr_NoMemory(); return -1; }
    o->recs = r;
    o->caprecs = cap;
    return 0;
}

static void parse_out_free(parse_out *o) {
    if (o->recs != o->inline_recs) PyMem_Free(o->recs);
    PyMem_Free(o->hdrs);
    o->recs = NULL;
    o->hdrs = NULL;
}

static int set_invalid(const char *msg) {
    PyErr_SetString(InvalidRecordError, msg);
    return -1;
}

/* parse_v2 prefetches the batch this far ahead of the record it parses. A record's fields sit on both
 * ends of its value (lengths before it, header count after it), so with ~1 KiB values every record
 * waited for memory twice; the window made decoding them 2.5x faster (bench decode:v2-none-1K-x100). */
#define PREFETCH_AHEAD 2048
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
    if (recs_reserve(o, want) < 0) return -1;
    Py_ssize_t fetched = pos;
    for (Py_ssize_t i = 0; i < count; i++) {
        int32_t length;
        if (pos >= end) return set_invalid(PREMATURE_EOF);
        for (Py_ssize_t ahead = pos + PREFETCH_AHEAD < end ? pos + PREFETCH_AHEAD : end; fetched < ahead; fetched += 64)
            __builtin_prefetch(b + fetched);
        Py_ssize_t body = pos;
        int rc = dec_varint(b, &body, end, &length);
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
        if ((rc = dec_varlong(b, &p, end, &ts_delta)) != RD_OK) goto fail;
        if ((rc = dec_varint(b, &p, end, &offset_delta)) != RD_OK) goto fail;
        if ((rc = dec_varint(b, &p, end, &key_len)) != RD_OK) goto fail;
        Py_ssize_t key_pos = p;
        if (key_len < 0) key_len = -1; else p += key_len;
        if ((rc = dec_varint(b, &p, end, &value_len)) != RD_OK) goto fail;
        Py_ssize_t value_pos = p;
        if (value_len < 0) value_len = -1; else p += value_len;
        if ((rc = dec_varint(b, &p, end, &header_count)) != RD_OK) goto fail;
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
        Py_ssize_t header_start = o->nhdrs, header_pos = p;
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
                if ((rc = dec_varint(b, &p, end, &hk_len)) != RD_OK) goto fail;
                if (hk_len < 0) {
                    snprintf(msg, sizeof msg, "Invalid negative header key size %d", (int)hk_len);
                    return set_invalid(msg);
                }
                Py_ssize_t hk_pos = p;
                p += hk_len;
                if ((rc = dec_varint(b, &p, end, &hv_len)) != RD_OK) goto fail;
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
        if (o->nrecs == o->caprecs && recs_reserve(o, o->caprecs * 2) < 0) return -1;
        rec_t *r = &o->recs[o->nrecs++];
        r->offset_delta = offset_delta;
        r->timestamp_delta = ts_delta;
        r->size = record_end - pos;
        r->key_pos = key_pos;
        r->key_len = key_len;
        r->value_pos = value_pos;
        r->value_len = value_len;
        r->header_start = header_start;
        r->header_pos = header_pos;
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
    parse_out o;
    memset(&o, 0, sizeof o);
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
 * RecordBase: the fields of batch.Record as a C type (batch.Record subclasses it with
 * __slots__ = () and adds the Python-level properties). The attribute names, and what the
 * constructor stores in them, are those of the pure-Python Record (batch._PyRecord): records built
 * here by build_v2_records / build_legacy_records hold exactly what Record.__init__ would store.
 * Offsets and timestamps stay Python ints (they can pass int64 with damaged bases); positions,
 * lengths, sequence, magic and attributes are C integers, made Python ints only when read.
 * A small freelist keeps the allocator out of the record loop.
 */
typedef struct {
    PyObject_HEAD
    PyObject *batch, *buf, *key, *value, *headers, *offset, *timestamp, *hspans, *crc, *legacy_valid;
    long long sequence, magic, attributes;
    Py_ssize_t size, key_pos, key_len, value_pos, value_len;
    /* Records built here leave hspans NULL: Record._headers is made from the buffer when read (most
     * callers never read it, and a tuple of 4-tuples per header record cost a sixth of the build). */
    Py_ssize_t hdr_pos;
    int32_t hdr_count;
} RecordObject;

static PyTypeObject RecordBaseType;
static PyObject *EmptyTuple;

#define REC_FREELIST_MAX 1024
static RecordObject *rec_freelist[REC_FREELIST_MAX];
static int rec_free_n = 0;

static int rec_traverse(RecordObject *r, visitproc visit, void *arg) {
    Py_VISIT(r->batch); Py_VISIT(r->buf); Py_VISIT(r->key); Py_VISIT(r->value); Py_VISIT(r->headers);
    Py_VISIT(r->offset); Py_VISIT(r->timestamp); Py_VISIT(r->hspans); Py_VISIT(r->crc); Py_VISIT(r->legacy_valid);
    return 0;
}

static int rec_clear(RecordObject *r) {
    Py_CLEAR(r->batch); Py_CLEAR(r->buf); Py_CLEAR(r->key); Py_CLEAR(r->value); Py_CLEAR(r->headers);
    Py_CLEAR(r->offset); Py_CLEAR(r->timestamp); Py_CLEAR(r->hspans); Py_CLEAR(r->crc); Py_CLEAR(r->legacy_valid);
    return 0;
}

static void rec_dealloc(RecordObject *r) {
    PyObject_GC_UnTrack(r);
    rec_clear(r);
    if (rec_free_n < REC_FREELIST_MAX && Py_TYPE(r)->tp_basicsize == (Py_ssize_t)sizeof(RecordObject) &&
        Py_TYPE(r)->tp_itemsize == 0)
        rec_freelist[rec_free_n++] = r;
    else
        Py_TYPE(r)->tp_free((PyObject *)r);
}

/* A fresh, untracked record of type tp (a subtype of RecordBase with no added fields), its fields
 * uninitialised: the caller sets every one (build_v2_record), or calls rec_alloc. */
static inline RecordObject *rec_alloc_raw(PyTypeObject *tp) {
    if (rec_free_n) {
        RecordObject *r = rec_freelist[--rec_free_n];
        (void)PyObject_Init((PyObject *)r, tp);
        return r;
    }
    return PyObject_GC_New(RecordObject, tp);
}

/* A fresh, untracked record of type tp: every field NULL/0. */
static RecordObject *rec_alloc(PyTypeObject *tp) {
    RecordObject *r = rec_alloc_raw(tp);
    if (r) memset((char *)r + sizeof(PyObject), 0, sizeof(RecordObject) - sizeof(PyObject));
    return r;
}

/* tp_dealloc of the registered Record class (a heap subclass adding nothing: no fields, __dict__,
 * __weakref__ or finalizer, as record_class and register_classes check). */
static void rec_dealloc_heap(RecordObject *r) {
    PyTypeObject *tp = Py_TYPE(r);
    rec_dealloc(r);
    Py_DECREF(tp); /* the reference PyObject_Init / PyType_GenericAlloc took on the heap type */
}

#define OBJ_MEMBER(name, field) {name, T_OBJECT_EX, offsetof(RecordObject, field), 0, NULL}
static PyMemberDef rec_members[] = {
    OBJ_MEMBER("batch", batch),
    OBJ_MEMBER("key", key),
    OBJ_MEMBER("value", value),
    OBJ_MEMBER("headers", headers),
    OBJ_MEMBER("offset", offset),
    OBJ_MEMBER("timestamp", timestamp),
    {"sequence", T_LONGLONG, offsetof(RecordObject, sequence), 0, NULL},
    {"size_in_bytes", T_PYSSIZET, offsetof(RecordObject, size), 0, NULL},
    OBJ_MEMBER("_buf", buf),
    {"_key_pos", T_PYSSIZET, offsetof(RecordObject, key_pos), 0, NULL},
    {"_key_len", T_PYSSIZET, offsetof(RecordObject, key_len), 0, NULL},
    {"_value_pos", T_PYSSIZET, offsetof(RecordObject, value_pos), 0, NULL},
    {"_value_len", T_PYSSIZET, offsetof(RecordObject, value_len), 0, NULL},
    OBJ_MEMBER("crc", crc),
    {"magic", T_LONGLONG, offsetof(RecordObject, magic), 0, NULL},
    {"attributes", T_LONGLONG, offsetof(RecordObject, attributes), 0, NULL},
    OBJ_MEMBER("_legacy_valid", legacy_valid),
    {NULL, 0, 0, 0, NULL},
};

/* HeaderBase: batch.Header's fields (key, value) natively; Header adds its methods in Python. */
typedef struct {
    PyObject_HEAD
    PyObject *key, *value;
} HeaderObject;

static PyTypeObject HeaderBaseType;

#define HDR_FREELIST_MAX 256
static HeaderObject *hdr_freelist[HDR_FREELIST_MAX];
static int hdr_free_n = 0;

static int hdr_traverse(HeaderObject *h, visitproc visit, void *arg) {
    Py_VISIT(h->key); Py_VISIT(h->value);
    return 0;
}

static int hdr_clear(HeaderObject *h) {
    Py_CLEAR(h->key); Py_CLEAR(h->value);
    return 0;
}

static void hdr_dealloc(HeaderObject *h) {
    PyObject_GC_UnTrack(h);
    hdr_clear(h);
    if (hdr_free_n < HDR_FREELIST_MAX && Py_TYPE(h)->tp_basicsize == (Py_ssize_t)sizeof(HeaderObject) &&
        Py_TYPE(h)->tp_itemsize == 0)
        hdr_freelist[hdr_free_n++] = h;
    else
        Py_TYPE(h)->tp_free((PyObject *)h);
}

/* tp_dealloc of the registered Header class: as rec_dealloc_heap, for the same reasons. */
static void hdr_dealloc_heap(HeaderObject *h) {
    PyTypeObject *tp = Py_TYPE(h);
    hdr_dealloc(h);
    Py_DECREF(tp);
}

static PyMemberDef hdr_members[] = {
    {"key", T_OBJECT_EX, offsetof(HeaderObject, key), 0, NULL},
    {"value", T_OBJECT_EX, offsetof(HeaderObject, value), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject HeaderBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kstore_cli.record._decode_c.HeaderBase",
    .tp_basicsize = sizeof(HeaderObject),
    .tp_dealloc = (destructor)hdr_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The fields of batch.Header (key, value), filled natively.",
    .tp_traverse = (traverseproc)hdr_traverse,
    .tp_clear = (inquiry)hdr_clear,
    .tp_members = hdr_members,
    .tp_new = PyType_GenericNew,
};

/* batch.Header: two __slots__ members, key and value, filled directly. */
static PyTypeObject *header_type = NULL;
static Py_ssize_t header_key_offset, header_value_offset;
static int header_fast; /* header_type is HeaderBase or a subclass adding no fields: hdr_freelist serves it */

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
    PyTypeObject *tp = (PyTypeObject *)cls;
    header_fast = PyType_IsSubtype(tp, &HeaderBaseType) && tp->tp_basicsize == (Py_ssize_t)sizeof(HeaderObject) &&
                  tp->tp_itemsize == 0 && tp->tp_dictoffset == 0 && k == offsetof(HeaderObject, key) &&
                  v == offsetof(HeaderObject, value);
    Py_INCREF(cls);
    Py_XSETREF(header_type, tp);
    return 0;
}

/* A fresh header_type instance, its key and value set (the references are taken), GC-tracked. */
static PyObject *header_new(PyObject *key, PyObject *value) {
    PyObject *obj;
    if (header_fast && hdr_free_n) {
        obj = (PyObject *)hdr_freelist[--hdr_free_n];
        (void)PyObject_Init(obj, header_type);
    } else if (header_fast) {
        obj = (PyObject *)PyObject_GC_New(HeaderObject, header_type);
    } else {
        obj = header_type->tp_alloc(header_type, 0); /* zeroed and tracked */
        if (!obj) return NULL;
        *(PyObject **)((char *)obj + header_key_offset) = key;
        *(PyObject **)((char *)obj + header_value_offset) = value;
        return obj;
    }
    if (!obj) return NULL;
    ((HeaderObject *)obj)->key = key;
    ((HeaderObject *)obj)->value = value;
    PyObject_GC_Track(obj);
    return obj;
}

/* record_cls must be RecordBase or a subclass adding no fields (batch.Record: __slots__ = ()). */
static PyTypeObject *record_class(PyObject *cls) {
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &RecordBaseType) ||
        ((PyTypeObject *)cls)->tp_basicsize != (Py_ssize_t)sizeof(RecordObject) ||
        ((PyTypeObject *)cls)->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "record_cls must be RecordBase or a subclass with __slots__ = ()");
        return NULL;
    }
    return (PyTypeObject *)cls;
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

/* Java's new String(bytes, UTF_8): strict UTF-8 when it decodes, else text.java_utf8's rules. */
static PyObject *java_utf8(const uint8_t *p, Py_ssize_t n) {
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, NULL);
    if (s || !PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return s;
    PyErr_Clear();
    if (!JavaUtf8) {
        PyObject *text = PyImport_ImportModule("kstore_cli.record.text");
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

/* The last header key decoded in a batch and its text: a topic's headers carry a few keys over and over,
 * so equal key bytes share one (immutable) str instead of decoding it again. */
typedef struct { const uint8_t *p; Py_ssize_t n; PyObject *text; } key_cache;

static PyObject *header_key(const uint8_t *p, Py_ssize_t n, key_cache *kc) {
    if (!kc) return java_utf8(p, n);
    if (kc->text && kc->n == n && memcmp(kc->p, p, (size_t)n) == 0) {
        Py_INCREF(kc->text);
        return kc->text;
    }
    PyObject *k = java_utf8(p, n);
    if (k) {
        Py_INCREF(k);
        Py_XSETREF(kc->text, k);
        kc->p = p;
        kc->n = n;
    }
    return k;
}

/* One header_cls(key text, value bytes | None), its slots filled as Header.__init__ would. */
static PyObject *make_header(const uint8_t *b, Py_ssize_t kp, Py_ssize_t kl, Py_ssize_t vp, Py_ssize_t vl,
                             key_cache *kc) {
    PyObject *k = header_key(b + kp, kl, kc);
    PyObject *v = k ? span_bytes(b, vp, vl) : NULL;
    PyObject *obj = v ? header_new(k, v) : NULL;
    if (!obj) {
        Py_XDECREF(k);
        Py_XDECREF(v);
    }
    return obj;
}

/* Record.headers: (header_cls(key text, value bytes | None), ...), the shared empty tuple for none (a
 * tuple: a record is read-only, and no headers then costs no object per record). */
static PyObject *header_tuple(const uint8_t *b, parse_out *o, rec_t *r, key_cache *kc) {
    if (!r->header_count) {
        Py_INCREF(EmptyTuple);
        return EmptyTuple;
    }
    PyObject *tuple = PyTuple_New(r->header_count);
    if (!tuple) return NULL;
    for (int32_t h = 0; h < r->header_count; h++) {
        hdr_t *hd = &o->hdrs[r->header_start + h];
        PyObject *obj = make_header(b, hd->key_pos, hd->key_len, hd->value_pos, hd->value_len, kc);
        if (!obj) { Py_DECREF(tuple); return NULL; }
        PyTuple_SET_ITEM(tuple, h, obj);
    }
    return tuple;
}

/* Python's buf[pos : pos + len] bounds on a buffer of n bytes (slice clamping, negative starts included). */
static void slice_bounds(Py_ssize_t n, Py_ssize_t pos, Py_ssize_t len, Py_ssize_t *start, Py_ssize_t *stop) {
    Py_ssize_t a = pos, z;
    if (__builtin_add_overflow(pos, len, &z)) z = PY_SSIZE_T_MAX;
    PySlice_AdjustIndices(n, &a, &z, 1);
    if (z < a) z = a;
    *start = a;
    *stop = z;
}

/* RecordBase.__init__: Record.__init__ of the pure-Python twin (batch._PyRecord), field for field. */
static int rec_init(RecordObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"batch", "buf", "offset", "timestamp", "sequence", "size_in_bytes", "key_pos", "key_len",
                             "value_pos", "value_len", "headers", "crc", "magic", "attributes", "legacy_valid", NULL};
    PyObject *batch, *buf, *offset, *timestamp, *hspans, *crc = Py_None, *legacy_valid = Py_None;
    long long sequence, magic = 2, attributes = 0;
    Py_ssize_t size, kp, kl, vp, vl;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOLnnnnnO|OLLO", kwlist, &batch, &buf, &offset, &timestamp,
                                     &sequence, &size, &kp, &kl, &vp, &vl, &hspans, &crc, &magic, &attributes,
                                     &legacy_valid))
        return -1;
    if (!header_type) {
        PyErr_SetString(PyExc_RuntimeError, "RecordBase: register_classes(Record, Header) was not called");
        return -1;
    }
    Py_buffer v;
    if (PyObject_GetBuffer(buf, &v, PyBUF_SIMPLE) < 0) return -1;
    const uint8_t *b = (const uint8_t *)v.buf;
    PyObject *key = NULL, *value = NULL, *headers = NULL;
    Py_ssize_t a, z;
    if (kl < 0) { key = Py_None; Py_INCREF(key); }
    else { slice_bounds(v.len, kp, kl, &a, &z); key = PyBytes_FromStringAndSize((const char *)b + a, z - a); }
    if (vl < 0) { value = Py_None; Py_INCREF(value); }
    else { slice_bounds(v.len, vp, vl, &a, &z); value = PyBytes_FromStringAndSize((const char *)b + a, z - a); }
    int truth = key && value ? PyObject_IsTrue(hspans) : -1;
    if (truth == 0) { headers = EmptyTuple; Py_INCREF(headers); }
    else if (truth > 0) {
        PyObject *seq = PySequence_Fast(hspans, "headers must be a sequence of (key_pos, key_len, value_pos, value_len)");
        if (seq) {
            Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
            headers = PyTuple_New(n);
            for (Py_ssize_t i = 0; headers && i < n; i++) {
                Py_ssize_t hkp, hkl, hvp, hvl, ka, kz, va = 0, vz = 0;
                PyObject *item = PySequence_Fast_GET_ITEM(seq, i), *h = NULL;
                if (PyArg_ParseTuple(item, "nnnn", &hkp, &hkl, &hvp, &hvl)) {
                    slice_bounds(v.len, hkp, hkl, &ka, &kz);
                    if (hvl >= 0) slice_bounds(v.len, hvp, hvl, &va, &vz);
                    h = make_header(b, ka, kz - ka, va, hvl < 0 ? -1 : vz - va, NULL);
                }
                if (!h) Py_CLEAR(headers);
                else PyTuple_SET_ITEM(headers, i, h);
            }
            Py_DECREF(seq);
        }
    }
    PyBuffer_Release(&v);
    if (!headers) {
        Py_XDECREF(key);
        Py_XDECREF(value);
        return -1;
    }
    Py_INCREF(batch); Py_INCREF(buf); Py_INCREF(offset); Py_INCREF(timestamp); Py_INCREF(hspans);
    Py_INCREF(crc); Py_INCREF(legacy_valid);
    Py_XSETREF(self->batch, batch);
    Py_XSETREF(self->buf, buf);
    Py_XSETREF(self->offset, offset);
    Py_XSETREF(self->timestamp, timestamp);
    Py_XSETREF(self->hspans, hspans);
    Py_XSETREF(self->crc, crc);
    Py_XSETREF(self->legacy_valid, legacy_valid);
    Py_XSETREF(self->key, key);
    Py_XSETREF(self->value, value);
    Py_XSETREF(self->headers, headers);
    self->sequence = sequence;
    self->size = size;
    self->key_pos = kp;
    self->key_len = kl;
    self->value_pos = vp;
    self->value_len = vl;
    self->magic = magic;
    self->attributes = attributes;
    return 0;
}

/* Record._headers: ((key_pos, key_len, value_pos, value_len), ...), as the pure twin stores them. A record
 * built here reads its header spans again from the buffer, once (parse_v2 checked them; should the buffer
 * have changed since, they are checked again: InvalidRecordError). */
static PyObject *rec_get_hspans(RecordObject *r, void *closure) {
    if (!r->hspans) {
        if (r->hdr_count <= 0 || !r->buf) {
            Py_INCREF(EmptyTuple);
            return EmptyTuple;
        }
        Py_buffer v;
        if (PyObject_GetBuffer(r->buf, &v, PyBUF_SIMPLE) < 0) return NULL;
        const uint8_t *b = (const uint8_t *)v.buf;
        Py_ssize_t p = r->hdr_pos, end = v.len;
        PyObject *spans = PyTuple_New(r->hdr_count);
        int32_t h = 0;
        int rc = RD_OK;
        for (; spans && p >= 0 && h < r->hdr_count; h++) {
            int32_t kl, vl;
            if ((rc = dec_varint(b, &p, end, &kl)) != RD_OK || kl < 0 || kl > end - p) break;
            Py_ssize_t kp = p;
            p += kl;
            if ((rc = dec_varint(b, &p, end, &vl)) != RD_OK || (vl >= 0 && vl > end - p)) break;
            Py_ssize_t vp = p;
            if (vl < 0) vl = -1; else p += vl;
            PyObject *t = Py_BuildValue("(nnnn)", kp, (Py_ssize_t)kl, vp, (Py_ssize_t)vl);
            if (!t) { rc = RD_ERROR; break; }
            PyTuple_SET_ITEM(spans, h, t);
        }
        PyBuffer_Release(&v);
        if (!spans) return NULL;
        if (h < r->hdr_count) { /* the buffer no longer holds what parse_v2 read */
            Py_DECREF(spans);
            if (rc != RD_ERROR) PyErr_SetString(InvalidRecordError, INVALID_STRUCTURE);
            return NULL;
        }
        r->hspans = spans;
    }
    Py_INCREF(r->hspans);
    return r->hspans;
}

static PyGetSetDef rec_getset[] = {
    {"_headers", (getter)rec_get_hspans, NULL, "the header spans (key_pos, key_len, value_pos, value_len)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RecordBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kstore_cli.record._decode_c.RecordBase",
    .tp_basicsize = sizeof(RecordObject),
    .tp_dealloc = (destructor)rec_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The fields of batch.Record (offset, timestamp, key, value, headers, ...), filled natively.",
    .tp_traverse = (traverseproc)rec_traverse,
    .tp_clear = (inquiry)rec_clear,
    .tp_members = rec_members,
    .tp_getset = rec_getset,
    .tp_init = (initproc)rec_init,
    .tp_new = PyType_GenericNew,
};

/* A heap subclass of base adding nothing that the native dealloc would have to undo (record_class and
 * learn_header_type check the size and __dict__). */
static int plain_subclass(PyTypeObject *tp, PyTypeObject *base) {
    return (tp->tp_flags & Py_TPFLAGS_HEAPTYPE) && tp->tp_base == base && !tp->tp_weaklistoffset && !tp->tp_finalize &&
           !tp->tp_del;
}

/* register_classes(Record, Header): the classes RecordBase.__init__ builds headers with. */
static PyObject *py_register_classes(PyObject *self, PyObject *args) {
    PyObject *rcls, *hcls;
    if (!PyArg_ParseTuple(args, "OO", &rcls, &hcls)) return NULL;
    PyTypeObject *tp = record_class(rcls), *ht = (PyTypeObject *)hcls;
    if (!tp) return NULL;
    if (tp != &RecordBaseType && !plain_subclass(tp, &RecordBaseType)) {
        PyErr_SetString(PyExc_TypeError, "Record must subclass RecordBase directly, with __slots__ = () and no __del__");
        return NULL;
    }
    if (PyType_Check(hcls) && PyType_IsSubtype(ht, &HeaderBaseType) && ht != &HeaderBaseType &&
        !plain_subclass(ht, &HeaderBaseType)) {
        PyErr_SetString(PyExc_TypeError, "Header must subclass HeaderBase directly, with __slots__ = () and no __del__");
        return NULL;
    }
    if (learn_header_type(hcls) < 0) return NULL;
    /* Their instances are freed by the native dealloc: Python's generic subtype_dealloc would take the same
     * steps, through more checks and a trashcan (a record's references are not deep): about 8% of iterating
     * a batch's records. */
    if (tp != &RecordBaseType) tp->tp_dealloc = (destructor)rec_dealloc_heap;
    if (header_fast && ht != &HeaderBaseType) ht->tp_dealloc = (destructor)hdr_dealloc_heap;
    Py_RETURN_NONE;
}

/* Record i of a parsed batch (b is its buffer), as build_v2_records makes it; a new reference, or NULL. */
static PyObject *build_v2_record(PyTypeObject *tp, PyObject *batch, PyObject *data, const uint8_t *b, parse_out *o,
                                 Py_ssize_t i, long long base_offset, long long base_ts, PyObject *log_append_obj,
                                 int base_seq, key_cache *kc) {
    rec_t *r = &o->recs[i];
    RecordObject *rec = rec_alloc_raw(tp); /* every field is set below: no memset (a tenth of the build) */
    if (!rec) return NULL;
    rec->hspans = NULL;
    Py_INCREF(batch);
    rec->batch = batch;
    Py_INCREF(data);
    rec->buf = data;
    rec->offset = add_exact(base_offset, r->offset_delta);
    if (log_append_obj != Py_None) { Py_INCREF(log_append_obj); rec->timestamp = log_append_obj; }
    else rec->timestamp = add_exact(base_ts, r->timestamp_delta);
    rec->sequence = base_seq >= 0 ? increment_sequence(base_seq, r->offset_delta) : -1;
    rec->size = r->size;
    rec->key_pos = r->key_pos;
    rec->key_len = r->key_len;
    rec->value_pos = r->value_pos;
    rec->value_len = r->value_len;
    rec->hdr_pos = r->header_pos;
    rec->hdr_count = r->header_count;
    rec->key = span_bytes(b, r->key_pos, r->key_len);
    rec->value = span_bytes(b, r->value_pos, r->value_len);
    rec->headers = header_tuple(b, o, r, kc);
    rec->magic = 2;
    rec->attributes = 0;
    Py_INCREF(Py_None);
    rec->crc = Py_None;
    Py_INCREF(Py_None);
    rec->legacy_valid = Py_None;
    PyObject_GC_Track(rec);
    if (!rec->offset || !rec->timestamp || !rec->key || !rec->value || !rec->headers) {
        Py_DECREF(rec);
        return NULL;
    }
    return (PyObject *)rec;
}

/* build_v2_records' work once its arguments are known; a new reference to the list, or NULL. */
static PyObject *build_v2(PyTypeObject *tp, PyObject *batch, PyObject *data, Py_ssize_t pos, Py_ssize_t end,
                          Py_ssize_t count, long long base_offset, long long base_ts, PyObject *log_append_obj,
                          int base_seq) {
    Py_buffer v;
    parse_out o;
    memset(&o, 0, sizeof o);
    key_cache kc = {NULL, 0, NULL};
    PyObject *list = NULL;
    if (get_view(data, &v, pos, end) < 0) return NULL;
    const uint8_t *b = (const uint8_t *)v.buf;
    if (parse_v2(b, pos, end, count, &o) < 0) goto error;
    list = PyList_New(o.nrecs);
    if (!list) goto error;
    for (Py_ssize_t i = 0; i < o.nrecs; i++) {
        PyObject *rec = build_v2_record(tp, batch, data, b, &o, i, base_offset, base_ts, log_append_obj, base_seq, &kc);
        if (!rec) goto error;
        PyList_SET_ITEM(list, i, rec);
    }
    Py_XDECREF(kc.text);
    PyBuffer_Release(&v);
    parse_out_free(&o);
    return list;
error:
    Py_XDECREF(kc.text);
    Py_XDECREF(list);
    PyBuffer_Release(&v);
    parse_out_free(&o);
    return NULL;
}

/*
 * The records of a parsed batch, built one at a time as they are iterated (iter(batch)): the batch was
 * parsed whole first, so a damaged batch fails before its first record, as records() does. The
 * iterator holds the batch buffer's export until it is exhausted or dropped.
 */
typedef struct {
    PyObject_HEAD
    PyTypeObject *tp;
    PyObject *batch, *data, *log_append;
    Py_buffer view;
    int has_view;
    parse_out o;
    Py_ssize_t next;
    long long base_offset, base_ts;
    int base_seq;
    key_cache kc;
} RecordIterObject;

static void recit_release(RecordIterObject *it) {
    if (it->has_view) {
        it->has_view = 0;
        PyBuffer_Release(&it->view);
    }
    parse_out_free(&it->o);
    it->o.nrecs = 0;
    Py_CLEAR(it->kc.text);
}

static int recit_traverse(RecordIterObject *it, visitproc visit, void *arg) {
    Py_VISIT(it->tp); Py_VISIT(it->batch); Py_VISIT(it->data); Py_VISIT(it->log_append); Py_VISIT(it->kc.text);
    return 0;
}

static int recit_clear(RecordIterObject *it) {
    recit_release(it);
    Py_CLEAR(it->tp); Py_CLEAR(it->batch); Py_CLEAR(it->data); Py_CLEAR(it->log_append);
    return 0;
}

/* Iterators are made once per batch and are larger than pymalloc serves (parse_out's inline records):
 * a few are kept for reuse, as small batches make and drop one per record. */
#define RECIT_FREELIST_MAX 4
static RecordIterObject *recit_freelist[RECIT_FREELIST_MAX];
static int recit_free_n = 0;

static void recit_dealloc(RecordIterObject *it) {
    PyObject_GC_UnTrack(it);
    recit_clear(it);
    if (recit_free_n < RECIT_FREELIST_MAX)
        recit_freelist[recit_free_n++] = it;
    else
        PyObject_GC_Del(it);
}

static PyObject *recit_next(RecordIterObject *it) {
    if (it->next >= it->o.nrecs) {
        recit_release(it);
        return NULL;
    }
    Py_ssize_t i = it->next++;
    PyObject *rec = build_v2_record(it->tp, it->batch, it->data, (const uint8_t *)it->view.buf, &it->o, i,
                                    it->base_offset, it->base_ts, it->log_append, it->base_seq, &it->kc);
    if (!rec) recit_release(it);
    return rec;
}

static PyObject *recit_length_hint(RecordIterObject *it, PyObject *unused) {
    return PyLong_FromSsize_t(it->o.nrecs - it->next > 0 ? it->o.nrecs - it->next : 0);
}

static PyMethodDef recit_methods[] = {
    {"__length_hint__", (PyCFunction)recit_length_hint, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RecordIterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kstore_cli.record._decode_c.RecordIterator",
    .tp_basicsize = sizeof(RecordIterObject),
    .tp_dealloc = (destructor)recit_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A plain v2 batch's records, built as they are iterated.",
    .tp_traverse = (traverseproc)recit_traverse,
    .tp_clear = (inquiry)recit_clear,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)recit_next,
    .tp_methods = recit_methods,
};

static PyObject *py_build_v2_records(PyObject *self, PyObject *args) {
    PyObject *cls, *header_cls, *batch, *data, *log_append_obj;
    Py_ssize_t pos, end, count;
    long long base_offset, base_ts;
    int base_seq;
    if (!PyArg_ParseTuple(args, "OOOOnnnLLOi", &cls, &header_cls, &batch, &data, &pos, &end, &count, &base_offset, &base_ts,
                          &log_append_obj, &base_seq))
        return NULL;
    PyTypeObject *tp = record_class(cls);
    if (!tp || learn_header_type(header_cls) < 0) return NULL;
    return build_v2(tp, batch, data, pos, end, count, base_offset, base_ts, log_append_obj, base_seq);
}

/* ------------------------------------------------------------------ columnar mode (Arrow) */

/* A growable buffer that is a bytes object from the start: handing it out needs no copy. */
typedef struct { PyObject *obj; Py_ssize_t n, cap; } obuf;

static int obuf_reserve(obuf *g, Py_ssize_t more) {
    if (g->cap - g->n >= more) return 0;
    Py_ssize_t cap = g->cap * 2 + more + 256;
    if (!g->obj) {
        g->obj = PyBytes_FromStringAndSize(NULL, cap);
        if (!g->obj) return -1;
    } else if (_PyBytes_Resize(&g->obj, cap) < 0) {
        return -1;
    }
    g->cap = cap;
    return 0;
}

static inline int gput(obuf *g, const void *p, Py_ssize_t n) {
    if (g->cap - g->n < n && obuf_reserve(g, n) < 0) return -1;
    if (n) memcpy(PyBytes_AS_STRING(g->obj) + g->n, p, (size_t)n);
    g->n += n;
    return 0;
}

/* The buffer as a bytes object of its length (a new reference; the buffer is emptied). */
static PyObject *obuf_finish(obuf *g) {
    PyObject *out = g->obj;
    g->obj = NULL;
    if (!out) return PyBytes_FromStringAndSize("", 0);
    if (g->n != g->cap && _PyBytes_Resize(&out, g->n) < 0) return NULL;
    return out;
}

/* (first, c[0], ..., c[n-1]) as a tuple of first (stolen; NULL: left out) and bytes objects; the buffers
 * are emptied. A new reference, or NULL. */
static PyObject *obufs_tuple(PyObject *first, obuf *c, int n) {
    int lead = first != NULL;
    PyObject *t = PyTuple_New(n + lead);
    if (!t) { Py_XDECREF(first); return NULL; }
    if (lead) PyTuple_SET_ITEM(t, 0, first);
    for (int i = 0; i < n; i++) {
        PyObject *piece = obuf_finish(&c[i]);
        if (!piece) { Py_DECREF(t); return NULL; }
        PyTuple_SET_ITEM(t, i + lead, piece);
    }
    return t;
}

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
    parse_out o;
    memset(&o, 0, sizeof o);
    enum { OFFS, TS, KENDS, KDATA, KVALID, VENDS, VDATA, VVALID, NCOLS };
    obuf c[NCOLS];
    memset(c, 0, sizeof c);
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
    Py_ssize_t n = o.nrecs, key_bytes = 0, value_bytes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (o.recs[i].key_len > 0) key_bytes += o.recs[i].key_len;
        if (o.recs[i].value_len > 0) value_bytes += o.recs[i].value_len;
    }
    /* Every column's size up front: growing the value buffer by doubling copied ~1 KiB values twice. */
    if (obuf_reserve(&c[OFFS], n * 8) < 0 || obuf_reserve(&c[TS], n * 8) < 0 || obuf_reserve(&c[KENDS], n * 4) < 0 ||
        obuf_reserve(&c[VENDS], n * 4) < 0 || obuf_reserve(&c[KVALID], n) < 0 || obuf_reserve(&c[VVALID], n) < 0 ||
        obuf_reserve(&c[KDATA], key_bytes) < 0 || obuf_reserve(&c[VDATA], value_bytes) < 0)
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
        uint8_t kv = r->key_len >= 0, vv = r->value_len >= 0;
        if (kv) kpos += r->key_len;
        if (vv) vpos += r->value_len;
        if (kpos > INT32_MAX || vpos > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of keys or values in one Arrow array");
            goto done;
        }
        int32_t ke = (int32_t)kpos, ve = (int32_t)vpos;
        if (gput(&c[OFFS], &off, 8) < 0 || gput(&c[TS], &ts, 8) < 0 ||
            gput(&c[KDATA], b + r->key_pos, kv ? r->key_len : 0) < 0 || gput(&c[KENDS], &ke, 4) < 0 ||
            gput(&c[KVALID], &kv, 1) < 0 ||
            gput(&c[VDATA], b + r->value_pos, vv ? r->value_len : 0) < 0 || gput(&c[VENDS], &ve, 4) < 0 ||
            gput(&c[VVALID], &vv, 1) < 0)
            goto done;
    }
    PyObject *count_obj = PyLong_FromSsize_t(n);
    if (count_obj) out = obufs_tuple(count_obj, c, NCOLS);
done:
    PyBuffer_Release(&v);
    parse_out_free(&o);
    for (int i = 0; i < NCOLS; i++) Py_XDECREF(c[i].obj);
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

/* One legacy entry (see _decode_py.decode_legacy_message). */
typedef struct {
    int64_t offset, timestamp;
    Py_ssize_t size, key_pos, key_len, value_pos, value_len, msg;
    uint32_t crc;
    int magic, attributes;
} leg_t;

/* The legacy entry at pos: 1 when parsed, 0 when it does not fit before end, -1 with InvalidRecordError set. */
static int parse_legacy(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, leg_t *e) {
    char msg[160];
    if (end - pos < LOG_OVERHEAD) return 0;
    e->offset = s64(be64(b + pos));
    int32_t size = s32(be32(b + pos + SIZE_OFFSET));
    if (size < RECORD_OVERHEAD_V0) {
        snprintf(msg, sizeof msg, "Record size %d is less than the minimum record overhead (%d)", (int)size,
                 RECORD_OVERHEAD_V0);
        PyErr_SetString(InvalidRecordError, msg);
        return -1;
    }
    Py_ssize_t m = pos + LOG_OVERHEAD;
    Py_ssize_t msg_end = m + size;
    if (msg_end > end) return 0;
    /* size >= 14, so crc, magic and attributes lie inside the message. */
    e->crc = be32(b + m);
    e->magic = s8(b[m + 4]);
    e->attributes = s8(b[m + 5]);
    Py_ssize_t p = m + 6;
    int32_t key_len, value_len;
    e->timestamp = -1;
    if (e->magic > 0) {
        if (p + 8 > msg_end) goto invalid;
        e->timestamp = s64(be64(b + p));
        p += 8;
    }
    if (p + 4 > msg_end) goto invalid;
    key_len = s32(be32(b + p));
    p += 4;
    e->key_pos = p;
    if (key_len < 0) key_len = -1; else p += key_len;
    if (p + 4 > msg_end) goto invalid;
    value_len = s32(be32(b + p));
    p += 4;
    e->value_pos = p;
    if (value_len < 0) value_len = -1; else p += value_len;
    if (p > msg_end) goto invalid;
    e->key_len = key_len;
    e->value_len = value_len;
    e->size = LOG_OVERHEAD + (Py_ssize_t)size;
    e->msg = m;
    return 1;
invalid:
    PyErr_SetString(InvalidRecordError, INVALID_STRUCTURE);
    return -1;
}

static PyObject *py_decode_legacy_message(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos, end;
    Py_buffer v;
    leg_t e;
    if (!PyArg_ParseTuple(args, "Onn", &obj, &pos, &end)) return NULL;
    if (get_view(obj, &v, pos, end) < 0) return NULL;
    int rc = parse_legacy((const uint8_t *)v.buf, pos, end, &e);
    PyBuffer_Release(&v);
    if (rc < 0) return NULL;
    if (rc == 0) Py_RETURN_NONE;
    return Py_BuildValue("(LnkiiLninin)", (long long)e.offset, e.size, (unsigned long)e.crc, e.magic, e.attributes,
                         (long long)e.timestamp, e.key_pos, (int)e.key_len, e.value_pos, (int)e.value_len, e.msg);
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

/*
 * The end of the v2 batch at pos (pos + 17 < end: offset, size, epoch and magic are inside), or -1
 * when the entry there is for the generic framing: a size below 14 or past `end`, magic below 2, a
 * batch shorter than its header, or (with check_crc) a CRC that does not match.
 */
static inline Py_ssize_t framed_v2_end(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, int check_crc) {
    int32_t size = s32(be32(b + pos + SIZE_OFFSET));
    int magic = s8(b[pos + MAGIC_OFFSET]);
    if (size < RECORD_OVERHEAD_V0 || (Py_ssize_t)size + LOG_OVERHEAD > end - pos || magic < 2 ||
        (Py_ssize_t)size + LOG_OVERHEAD < V2_HEADER_SIZE)
        return -1;
    Py_ssize_t entry_end = pos + LOG_OVERHEAD + size;
    const uint8_t *h = b + pos;
    if (check_crc && be32(h + V2_CRC_POS) != crc32c(h + V2_CRC_START, (size_t)(entry_end - pos - V2_CRC_START)))
        return -1;
    return entry_end;
}

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
        Py_ssize_t entry_end = framed_v2_end(b, pos, end, check_crc);
        if (entry_end < 0) { status = SCAN_OTHER; break; }
        const uint8_t *h = b + pos;
        uint32_t stored = be32(h + V2_CRC_POS);
        int32_t size = (int32_t)(entry_end - pos - LOG_OVERHEAD);
        int magic = s8(h[MAGIC_OFFSET]);
        PyObject *t = PyTuple_New(14);
        if (!t) goto error;
        PyObject *f[14] = {
            PyLong_FromSsize_t(pos),
            PyLong_FromLongLong(s64(be64(h))),           /* baseOffset */
            PyLong_FromLong(size),                       /* batchLength */
            PyLong_FromLong(s32(be32(h + V2_PARTITION_LEADER_EPOCH_OFFSET))),          /* partitionLeaderEpoch */
            PyLong_FromLong(magic),                      /* magic */
            PyLong_FromUnsignedLong(stored),             /* crc */
            PyLong_FromLong(s16(be16(h + V2_ATTRIBUTES_OFFSET))), /* attributes */
            PyLong_FromLong(s32(be32(h + V2_LAST_OFFSET_DELTA_OFFSET))),          /* lastOffsetDelta */
            PyLong_FromLongLong(s64(be64(h + V2_BASE_TIMESTAMP_OFFSET))),      /* baseTimestamp */
            PyLong_FromLongLong(s64(be64(h + V2_MAX_TIMESTAMP_OFFSET))),      /* maxTimestamp */
            PyLong_FromLongLong(s64(be64(h + V2_PRODUCER_ID_OFFSET))),      /* producerId */
            PyLong_FromLong(s16(be16(h + V2_PRODUCER_EPOCH_OFFSET))), /* producerEpoch */
            PyLong_FromLong(s32(be32(h + V2_BASE_SEQUENCE_OFFSET))),          /* baseSequence */
            PyLong_FromLong(s32(be32(h + V2_RECORDS_COUNT_OFFSET))),          /* recordsCount */
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

/* ------------------------------------------------------------------ legacy message sets */

/* A signed 128-bit value as a Python int. */
static PyObject *long_from_i128(__int128 v) {
    if (v >= INT64_MIN && v <= INT64_MAX) return PyLong_FromLongLong((long long)v);
    unsigned char bytes[16];
    unsigned __int128 u = (unsigned __int128)v;
    for (int i = 0; i < 16; i++) { bytes[i] = (unsigned char)(u & 0xFF); u >>= 8; }
    return _PyLong_FromByteArray(bytes, 16, 1, 1);
}

/*
 * build_legacy_records(record_cls, batch, data, wrapper_magic, wrapper_offset, log_append_time):
 * the inner messages of a decompressed legacy wrapper as records; see _decode_py.build_legacy_records.
 */
static PyObject *py_build_legacy_records(PyObject *self, PyObject *args) {
    PyObject *cls, *batch, *data, *log_append_obj;
    int wrapper_magic;
    long long wrapper_offset;
    Py_buffer v;
    char msg[320];
    if (!PyArg_ParseTuple(args, "OOOiLO", &cls, &batch, &data, &wrapper_magic, &wrapper_offset, &log_append_obj))
        return NULL;
    PyTypeObject *tp = record_class(cls);
    if (!tp) return NULL;
    if (PyObject_GetBuffer(data, &v, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *b = (const uint8_t *)v.buf;
    Py_ssize_t end = v.len, pos = 0, n = 0, cap = 0;
    leg_t *es = NULL;
    PyObject *list = NULL;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            leg_t *ne = PyMem_Realloc(es, (size_t)cap * sizeof(leg_t));
            if (!ne) { PyErr_NoMemory(); goto done; }
            es = ne;
        }
        int rc = parse_legacy(b, pos, end, &es[n]);
        if (rc < 0) goto done;
        if (rc == 0) break; /* a truncated trailing inner entry ends the iteration silently */
        if (es[n].attributes & 0x07) {
            PyErr_SetString(InvalidRecordError, "Inner messages must not be compressed");
            goto done;
        }
        pos += es[n].size;
        n++;
    }
    if (!n) {
        PyErr_SetString(InvalidRecordError, "Found invalid compressed record set with no inner records");
        goto done;
    }
    __int128 absolute_base = 0;
    if (wrapper_magic > 0) {
        int64_t last_inner = es[n - 1].offset;
        if (wrapper_offset == 0) absolute_base = 0; /* some librdkafka versions send wrapper offset 0 */
        else if (wrapper_offset < last_inner) {
            snprintf(msg, sizeof msg,
                     "Found invalid wrapper offset in compressed v1 message set, wrapper offset '%lld' is less than "
                     "the last inner message offset '%lld' and it is not zero.",
                     (long long)wrapper_offset, (long long)last_inner);
            PyErr_SetString(InvalidRecordError, msg);
            goto done;
        } else absolute_base = (__int128)wrapper_offset - last_inner;
    }
    int log_append = log_append_obj != Py_None;
    list = PyList_New(n);
    if (!list) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        leg_t *e = &es[i];
        RecordObject *rec = rec_alloc(tp);
        if (!rec) { Py_CLEAR(list); goto done; }
        PyList_SET_ITEM(list, i, (PyObject *)rec);
        Py_INCREF(batch);
        rec->batch = batch;
        Py_INCREF(data);
        rec->buf = data;
        rec->offset = wrapper_magic > 0 ? long_from_i128(absolute_base + e->offset) : PyLong_FromLongLong(e->offset);
        if (e->magic == 0) rec->timestamp = PyLong_FromLong(-1);
        else if (log_append) { Py_INCREF(log_append_obj); rec->timestamp = log_append_obj; }
        else rec->timestamp = PyLong_FromLongLong(e->timestamp);
        rec->sequence = -1;
        rec->size = e->size;
        rec->key_pos = e->key_pos;
        rec->key_len = e->key_len;
        rec->value_pos = e->value_pos;
        rec->value_len = e->value_len;
        Py_INCREF(EmptyTuple);
        rec->hspans = EmptyTuple;
        rec->key = span_bytes(b, e->key_pos, e->key_len);
        rec->value = span_bytes(b, e->value_pos, e->value_len);
        Py_INCREF(EmptyTuple);
        rec->headers = EmptyTuple;
        rec->crc = PyLong_FromUnsignedLong(e->crc);
        rec->magic = e->magic;
        rec->attributes = e->attributes;
        /* the message's own CRC-32, from its magic byte to its end */
        int valid = e->crc == crc32_ieee(b + e->msg + 4, (size_t)(e->size - LOG_OVERHEAD - 4));
        rec->legacy_valid = PyBool_FromLong(valid);
        PyObject_GC_Track(rec);
        if (!rec->offset || !rec->timestamp || !rec->key || !rec->value || !rec->headers || !rec->crc) {
            Py_CLEAR(list);
            goto done;
        }
    }
done:
    PyMem_Free(es);
    PyBuffer_Release(&v);
    return list;
}

/* ------------------------------------------------------------------ batch objects */

/*
 * frame_batches: scan_batches, but each plain v2 batch comes back as a batch_cls instance
 * (batch.RecordBatch) whose __slots__ are filled here from the head fields:
 * no head tuple, no Python call per batch.
 */
enum {
    B_PATH, B_POSITION, B_SIZE, B_MAGIC, B_BUF, B_VALID, B_BASE_OFFSET, B_EPOCH, B_CRC, B_ATTRIBUTES, B_LAST_DELTA,
    B_BASE_TS, B_MAX_TS, B_PID, B_PEPOCH, B_BASE_SEQ, B_COUNT, B_NFIELDS
};
static const char *batch_slot_names[B_NFIELDS] = {
    "path", "position", "size", "magic", "_buf", "_valid", "base_offset", "partition_leader_epoch", "crc",
    "attributes", "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
    "base_sequence", "count",
};
static PyTypeObject *batch_type = NULL;
static Py_ssize_t batch_slot[B_NFIELDS];

static int learn_batch_type(PyObject *cls) {
    if ((PyObject *)batch_type == cls) return 0;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "batch_cls must be a class");
        return -1;
    }
    Py_ssize_t offs[B_NFIELDS];
    for (int i = 0; i < B_NFIELDS; i++)
        if ((offs[i] = member_offset(cls, batch_slot_names[i])) < 0) return -1;
    memcpy(batch_slot, offs, sizeof offs);
    Py_INCREF(cls);
    Py_XSETREF(batch_type, (PyTypeObject *)cls);
    return 0;
}

#define BSLOT(obj, i) (*(PyObject **)((char *)(obj) + batch_slot[i]))

static PyObject *py_frame_batches(PyObject *self, PyObject *args) {
    PyObject *cls, *obj, *path;
    Py_ssize_t pos, end, max_batches;
    int check_crc;
    Py_buffer v;
    if (!PyArg_ParseTuple(args, "OOnnnpO", &cls, &obj, &pos, &end, &max_batches, &check_crc, &path)) return NULL;
    if (learn_batch_type(cls) < 0) return NULL;
    if (get_view(obj, &v, pos, end) < 0) return NULL;
    const uint8_t *b = (const uint8_t *)v.buf;
    PyObject *out = PyList_New(0);
    if (!out) { PyBuffer_Release(&v); return NULL; }
    Py_ssize_t limit = end - HEADER_SIZE_UP_TO_MAGIC;
    int status = SCAN_END;
    PyObject *valid = check_crc ? Py_True : Py_None;
    while (pos < limit) {
        if (PyList_GET_SIZE(out) >= max_batches) { status = SCAN_MORE; break; }
        Py_ssize_t entry_end = framed_v2_end(b, pos, end, check_crc);
        if (entry_end < 0) { status = SCAN_OTHER; break; }
        const uint8_t *h = b + pos;
        uint32_t stored = be32(h + V2_CRC_POS);
        PyObject *batch = batch_type->tp_alloc(batch_type, 0);
        if (!batch) goto error;
        if (PyList_Append(out, batch) < 0) { Py_DECREF(batch); goto error; }
        Py_DECREF(batch); /* the list holds it */
        PyObject *f[B_NFIELDS];
        f[B_PATH] = path; Py_INCREF(path);
        f[B_POSITION] = PyLong_FromSsize_t(pos);
        f[B_SIZE] = PyLong_FromSsize_t(entry_end - pos);
        f[B_MAGIC] = PyLong_FromLong(s8(h[MAGIC_OFFSET]));
        f[B_BUF] = PySequence_GetSlice(obj, pos, entry_end);
        f[B_VALID] = valid; Py_INCREF(valid);
        f[B_BASE_OFFSET] = PyLong_FromLongLong(s64(be64(h)));
        f[B_EPOCH] = PyLong_FromLong(s32(be32(h + V2_PARTITION_LEADER_EPOCH_OFFSET)));
        f[B_CRC] = PyLong_FromUnsignedLong(stored);
        f[B_ATTRIBUTES] = PyLong_FromLong(s16(be16(h + V2_ATTRIBUTES_OFFSET)));
        f[B_LAST_DELTA] = PyLong_FromLong(s32(be32(h + V2_LAST_OFFSET_DELTA_OFFSET)));
        f[B_BASE_TS] = PyLong_FromLongLong(s64(be64(h + V2_BASE_TIMESTAMP_OFFSET)));
        f[B_MAX_TS] = PyLong_FromLongLong(s64(be64(h + V2_MAX_TIMESTAMP_OFFSET)));
        f[B_PID] = PyLong_FromLongLong(s64(be64(h + V2_PRODUCER_ID_OFFSET)));
        f[B_PEPOCH] = PyLong_FromLong(s16(be16(h + V2_PRODUCER_EPOCH_OFFSET)));
        f[B_BASE_SEQ] = PyLong_FromLong(s32(be32(h + V2_BASE_SEQUENCE_OFFSET)));
        f[B_COUNT] = PyLong_FromLong(s32(be32(h + V2_RECORDS_COUNT_OFFSET)));
        int bad = 0;
        for (int k = 0; k < B_NFIELDS; k++) {
            if (!f[k]) bad = 1;
            Py_XSETREF(BSLOT(batch, k), f[k]);
        }
        if (bad) goto error;
        pos = entry_end;
    }
    PyBuffer_Release(&v);
    return Py_BuildValue("(Nni)", out, pos, status);
error:
    PyBuffer_Release(&v);
    Py_DECREF(out);
    return NULL;
}

/* A batch slot as a C long long; 0 with *ok cleared when it is not an int that fits. */
static long long slot_ll(PyObject *batch, int i, int *ok) {
    PyObject *o = BSLOT(batch, i);
    if (!o || !PyLong_Check(o)) { *ok = 0; return 0; }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) { PyErr_Clear(); *ok = 0; return 0; }
    return v;
}

/* What v2_batch_records / v2_batch_iter need of a batch: 1 with *pb filled, 0 for a batch they leave to
 * Python, -1 with an exception set. */
typedef struct {
    PyTypeObject *tp;
    PyObject *batch, *data, *log_append;
    Py_ssize_t len, count;
    long long base_offset, base_ts;
    int base_seq;
} plain_batch;

static int plain_v2_batch(PyObject *const *args, Py_ssize_t nargs, const char *name, plain_batch *pb) {
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s(record_cls, header_cls, batch)", name);
        return -1;
    }
    PyObject *batch = args[2];
    PyTypeObject *tp = record_class(args[0]);
    if (!tp || learn_header_type(args[1]) < 0 || learn_batch_type((PyObject *)Py_TYPE(batch)) < 0) return -1;
    int ok = 1;
    long long count = slot_ll(batch, B_COUNT, &ok), attributes = slot_ll(batch, B_ATTRIBUTES, &ok);
    long long size = slot_ll(batch, B_SIZE, &ok), base_offset = slot_ll(batch, B_BASE_OFFSET, &ok);
    long long base_ts = slot_ll(batch, B_BASE_TS, &ok), base_seq = slot_ll(batch, B_BASE_SEQ, &ok);
    PyObject *data = BSLOT(batch, B_BUF), *max_ts = BSLOT(batch, B_MAX_TS);
    if (!ok || !data || !max_ts || count <= 0 || (attributes & 0x07) || size < V2_HEADER_SIZE ||
        base_seq < INT32_MIN || base_seq > INT32_MAX || count > PY_SSIZE_T_MAX)
        return 0;
    Py_ssize_t len = PyObject_Length(data);
    if (len < 0) return -1;
    pb->tp = tp;
    pb->batch = batch;
    pb->data = data;
    pb->log_append = (attributes & 0x08) ? max_ts : Py_None;
    pb->len = len;
    pb->count = (Py_ssize_t)count;
    pb->base_offset = base_offset;
    pb->base_ts = base_ts;
    pb->base_seq = (int)base_seq;
    return 1;
}

/*
 * v2_batch_records(record_cls, header_cls, batch): RecordBatch.records() of a plain batch (count > 0,
 * no codec, size >= 61) straight from the batch's slots; None for any other batch (the caller's
 * general path). See _decode_py.v2_batch_records.
 */
static PyObject *py_v2_batch_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    plain_batch pb;
    int plain = plain_v2_batch(args, nargs, "v2_batch_records", &pb);
    if (plain < 0) return NULL;
    if (!plain) Py_RETURN_NONE;
    return build_v2(pb.tp, pb.batch, pb.data, V2_HEADER_SIZE, pb.len, pb.count, pb.base_offset, pb.base_ts,
                    pb.log_append, pb.base_seq);
}

/* v2_batch_iter(record_cls, header_cls, batch): iter(RecordBatch) of a plain batch, or None; the batch is
 * parsed (and so checked) whole here, its records are built as they are iterated. */
static PyObject *py_v2_batch_iter(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    plain_batch pb;
    int plain = plain_v2_batch(args, nargs, "v2_batch_iter", &pb);
    if (plain < 0) return NULL;
    if (!plain) Py_RETURN_NONE;
    RecordIterObject *it;
    if (recit_free_n) {
        it = recit_freelist[--recit_free_n];
        (void)PyObject_Init((PyObject *)it, &RecordIterType);
    } else if (!(it = PyObject_GC_New(RecordIterObject, &RecordIterType))) {
        return NULL;
    }
    /* every field but parse_out's inline record storage (filled before it is read): no 700-byte memset */
    it->has_view = 0;
    it->o.recs = NULL;
    it->o.hdrs = NULL;
    it->o.nrecs = it->o.caprecs = it->o.nhdrs = it->o.caphdrs = 0;
    it->next = 0;
    it->kc.p = NULL;
    it->kc.n = 0;
    it->kc.text = NULL;
    Py_INCREF(pb.tp); it->tp = pb.tp;
    Py_INCREF(pb.batch); it->batch = pb.batch;
    Py_INCREF(pb.data); it->data = pb.data;
    Py_INCREF(pb.log_append); it->log_append = pb.log_append;
    it->base_offset = pb.base_offset;
    it->base_ts = pb.base_ts;
    it->base_seq = pb.base_seq;
    PyObject_GC_Track(it);
    if (get_view(pb.data, &it->view, V2_HEADER_SIZE, pb.len) < 0) {
        Py_DECREF(it);
        return NULL;
    }
    it->has_view = 1;
    if (parse_v2((const uint8_t *)it->view.buf, V2_HEADER_SIZE, pb.len, pb.count, &it->o) < 0) {
        Py_DECREF(it);
        return NULL;
    }
    return (PyObject *)it;
}

/* ------------------------------------------------------------------ runs of plain batches, as columns */

/* Python's strict UTF-8 (Unicode Table 3-7): what bytes.decode("utf-8") accepts. */
static int strict_utf8(const uint8_t *p, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        if (c < 0x80) { i++; continue; }
        int need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c == 0xE0) { need = 2; lo = 0xA0; }
        else if (c >= 0xE1 && c <= 0xEC) need = 2;
        else if (c == 0xED) { need = 2; hi = 0x9F; }
        else if (c >= 0xEE && c <= 0xEF) need = 2;
        else if (c == 0xF0) { need = 3; lo = 0x90; }
        else if (c >= 0xF1 && c <= 0xF3) need = 3;
        else if (c == 0xF4) { need = 3; hi = 0x8F; }
        else return 0;
        if (n - i - 1 < need) return 0;
        if (p[i + 1] < lo || p[i + 1] > hi) return 0;
        for (int k = 2; k <= need; k++)
            if (p[i + k] < 0x80 || p[i + k] > 0xBF) return 0;
        i += need + 1;
    }
    return 1;
}

enum { C_OFFS, C_TS, C_TSTYPE, C_KENDS, C_KDATA, C_KVALID, C_VENDS, C_VDATA, C_VVALID, C_HENDS, C_HKENDS, C_HKDATA,
       C_HVENDS, C_HVDATA, C_HVALID, C_N };

/* An optional int64 bound: None, or an int (beyond int64 clamps: no offset reaches it). */
static int opt_bound(PyObject *o, int *has, int64_t *v) {
    *has = o != Py_None;
    if (!*has) return 0;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (x == -1 && PyErr_Occurred()) return -1;
    *v = overflow > 0 ? INT64_MAX : overflow < 0 ? INT64_MIN : x;
    if (overflow > 0) *has = 2; /* above every offset */
    if (overflow < 0) *has = 3; /* below every offset */
    return 0;
}

#define STAGE_OK 0
#define STAGE_OTHER 1
#define STAGE_OVERFLOW 2
#define STAGE_ERROR (-1)

/*
 * decode_v2_run: see _decode_py.decode_v2_run (the reference). A batch's rows are appended to the
 * columns directly; when the batch turns out not to belong to the run its rows are cut off again.
 */
static PyObject *py_decode_v2_run(PyObject *self, PyObject *args) {
    PyObject *obj, *min_obj, *end_obj;
    Py_ssize_t pos, end, max_rows, max_bytes;
    int check_crc, stop_txn, with_headers;
    long long bases[5];
    if (!PyArg_ParseTuple(args, "OnnnnpOOpp(LLLLL)", &obj, &pos, &end, &max_rows, &max_bytes, &check_crc, &min_obj,
                          &end_obj, &stop_txn, &with_headers, &bases[0], &bases[1], &bases[2], &bases[3], &bases[4]))
        return NULL;
    int has_min, has_end;
    int64_t min_off = 0, end_off = 0;
    if (opt_bound(min_obj, &has_min, &min_off) < 0 || opt_bound(end_obj, &has_end, &end_off) < 0) return NULL;
    Py_buffer v;
    if (get_view(obj, &v, pos, end) < 0) return NULL;
    const uint8_t *b = (const uint8_t *)v.buf;
    parse_out o;
    memset(&o, 0, sizeof o);
    obuf c[C_N];
    memset(c, 0, sizeof c);
    PyObject *out = NULL;
    int64_t ends[5];
    for (int i = 0; i < 5; i++) ends[i] = bases[i];
    Py_ssize_t n = 0, batches = 0, used = 0, limit = end - HEADER_SIZE_UP_TO_MAGIC;
    int status = SCAN_END;
    /* Values take most of a run's bytes: room for them up front spares the buffer's regrowth. */
    if (pos < limit && obuf_reserve(&c[C_VDATA], end - pos < max_bytes ? end - pos : max_bytes) < 0) goto done;
    while (pos < limit) {
        int32_t size = s32(be32(b + pos + SIZE_OFFSET));
        int magic = s8(b[pos + MAGIC_OFFSET]);
        if (size < RECORD_OVERHEAD_V0 || (Py_ssize_t)size + LOG_OVERHEAD > end - pos || magic != 2 ||
            (Py_ssize_t)size + LOG_OVERHEAD < V2_HEADER_SIZE) {
            status = SCAN_OTHER;
            break;
        }
        Py_ssize_t entry_end = pos + LOG_OVERHEAD + size;
        const uint8_t *h = b + pos;
        int attributes = s16(be16(h + V2_ATTRIBUTES_OFFSET));
        int32_t count = s32(be32(h + V2_RECORDS_COUNT_OFFSET));
        if (n && ((Py_ssize_t)count > max_rows - n || entry_end - pos > max_bytes - used)) {
            status = SCAN_MORE;
            break;
        }
        if ((check_crc && be32(h + V2_CRC_POS) != crc32c(h + V2_CRC_START, (size_t)(entry_end - pos - V2_CRC_START))) ||
            (attributes & 0x27) || (stop_txn && (attributes & 0x10)) || count <= 0) {
            status = SCAN_OTHER;
            break;
        }
        if (parse_v2(b, pos + V2_HEADER_SIZE, entry_end, count, &o) < 0) {
            if (!PyErr_ExceptionMatches(InvalidRecordError)) goto done;
            PyErr_Clear();
            status = SCAN_OTHER;
            break;
        }
        int64_t base_offset = s64(be64(h)), base_ts = s64(be64(h + V2_BASE_TIMESTAMP_OFFSET)), max_ts = s64(be64(h + V2_MAX_TIMESTAMP_OFFSET));
        int log_append = (attributes & 0x08) != 0;
        int32_t ts_type = log_append;
        Py_ssize_t mark[C_N];
        for (int i = 0; i < C_N; i++) mark[i] = c[i].n;
        int64_t e[5];
        memcpy(e, ends, sizeof e);
        int stage = STAGE_OK;
        for (Py_ssize_t i = 0; i < o.nrecs && stage == STAGE_OK; i++) {
            rec_t *r = &o.recs[i];
            int64_t off, ts = max_ts;
            if (__builtin_add_overflow(base_offset, (int64_t)r->offset_delta, &off) ||
                (!log_append && __builtin_add_overflow(base_ts, r->timestamp_delta, &ts)) ||
                (has_min == 1 && off < min_off) || has_min == 2 || (has_end == 1 && off >= end_off) || has_end == 3) {
                stage = STAGE_OTHER;
                break;
            }
            uint8_t kv = r->key_len >= 0, vv = r->value_len >= 0;
            if (kv) e[0] += r->key_len;
            if (vv) e[1] += r->value_len;
            int32_t ke = (int32_t)e[0], ve = (int32_t)e[1];
            if (gput(&c[C_OFFS], &off, 8) < 0 || gput(&c[C_TS], &ts, 8) < 0 || gput(&c[C_TSTYPE], &ts_type, 4) < 0 ||
                gput(&c[C_KDATA], b + r->key_pos, kv ? r->key_len : 0) < 0 || gput(&c[C_KENDS], &ke, 4) < 0 ||
                gput(&c[C_KVALID], &kv, 1) < 0 ||
                gput(&c[C_VDATA], b + r->value_pos, vv ? r->value_len : 0) < 0 || gput(&c[C_VENDS], &ve, 4) < 0 ||
                gput(&c[C_VVALID], &vv, 1) < 0) {
                stage = STAGE_ERROR;
                break;
            }
            if (with_headers) {
                for (int32_t k = 0; k < r->header_count; k++) {
                    hdr_t *hd = &o.hdrs[r->header_start + k];
                    if (!strict_utf8(b + hd->key_pos, hd->key_len)) { stage = STAGE_OTHER; break; }
                    uint8_t hv = hd->value_len >= 0;
                    e[3] += hd->key_len;
                    if (hv) e[4] += hd->value_len;
                    int32_t hke = (int32_t)e[3], hve = (int32_t)e[4];
                    if (gput(&c[C_HKDATA], b + hd->key_pos, hd->key_len) < 0 || gput(&c[C_HKENDS], &hke, 4) < 0 ||
                        gput(&c[C_HVDATA], b + hd->value_pos, hv ? hd->value_len : 0) < 0 ||
                        gput(&c[C_HVENDS], &hve, 4) < 0 || gput(&c[C_HVALID], &hv, 1) < 0) {
                        stage = STAGE_ERROR;
                        break;
                    }
                }
                if (stage != STAGE_OK) break;
                e[2] += r->header_count;
                int32_t he = (int32_t)e[2];
                if (gput(&c[C_HENDS], &he, 4) < 0) { stage = STAGE_ERROR; break; }
            }
            for (int k = 0; k < 5; k++)
                if (e[k] > INT32_MAX) stage = STAGE_OVERFLOW;
        }
        if (stage == STAGE_ERROR) goto done;
        if (stage != STAGE_OK) {
            for (int i = 0; i < C_N; i++) c[i].n = mark[i];
            status = stage == STAGE_OVERFLOW && n ? SCAN_MORE : SCAN_OTHER;
            break;
        }
        memcpy(ends, e, sizeof e);
        n += o.nrecs;
        batches++;
        used += entry_end - pos;
        pos = entry_end;
    }
    {
        PyObject *cols = obufs_tuple(NULL, c, C_N);
        if (cols) out = Py_BuildValue("(nninN)", n, pos, status, batches, cols);
    }
done:
    PyBuffer_Release(&v);
    parse_out_free(&o);
    for (int i = 0; i < C_N; i++) Py_XDECREF(c[i].obj);
    return out;
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
    {"build_legacy_records", py_build_legacy_records, METH_VARARGS,
     "The inner messages of a decompressed legacy wrapper as records; see _decode_py.build_legacy_records."},
    {"register_classes", py_register_classes, METH_VARARGS,
     "register_classes(Record, Header): the classes RecordBase.__init__ builds headers with."},
    {"build_v2_records", py_build_v2_records, METH_VARARGS,
     "decode_v2_records, then one record_cls (batch.Record) per record; see _decode_py.build_v2_records."},
    {"decode_v2_columns", py_decode_v2_columns, METH_VARARGS,
     "A batch's records as Arrow-ready column pieces; see _decode_py.decode_v2_columns."},
    {"decode_v2_run", py_decode_v2_run, METH_VARARGS,
     "A run of plain v2 batches decoded straight into columns; see _decode_py.decode_v2_run."},
    {"pack_validity", py_pack_validity, METH_O, "Bytes of 0/1 per row as an Arrow validity bitmap: (bitmap, nulls)."},
    {"crc32c", py_crc32c, METH_O, "CRC-32C (Castagnoli), as java.util.zip.CRC32C computes it."},
    {"v2_batch_iter", (PyCFunction)(void (*)(void))py_v2_batch_iter, METH_FASTCALL,
     "iter(RecordBatch) of a plain uncompressed batch (records built as iterated), or None."},
    {"v2_batch_records", (PyCFunction)(void (*)(void))py_v2_batch_records, METH_FASTCALL,
     "RecordBatch.records() of a plain uncompressed batch, or None; see _decode_py.v2_batch_records."},
    {"frame_batches", py_frame_batches, METH_VARARGS,
     "scan_batches with batch_cls instances instead of heads: (batches, stop, status); see _decode_py.frame_batches."},
    {"scan_batches", py_scan_batches, METH_VARARGS,
     "Frame plain v2 batches from pos: (heads, stop, status); see _decode_py.scan_batches."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_decode_c", "The native twin of kstore_cli.record._decode_py.", -1, methods,
    NULL, NULL, NULL, NULL,
};

/*
 * glibc's malloc returns the top of its heap to the kernel as soon as 128 KiB of it are free, until a
 * freed mmap chunk raises its thresholds. Decoding allocates and frees a few 100 KiB-1 MiB buffers per
 * batch (decompressed records, column buffers), so depending on what ran before, every batch's buffers
 * were fresh pages from the kernel: lz4 batches of 100 x 1 KiB decoded 2x slower (0.24 s vs 0.115 s
 * for 200k records; a quarter of the time in page faults). Set up front the values glibc's dynamic
 * thresholds end at (mmap 32 MiB, trim twice that); freed memory stays for reuse, peak RSS is unchanged.
 * Left alone when the user tunes malloc through the environment. Returns whether it was set.
 */
static int tune_malloc(void) {
#if defined(__GLIBC__) && defined(M_TRIM_THRESHOLD) && defined(M_MMAP_THRESHOLD)
    static const char *const users[] = {"MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_",
                                        "MALLOC_MMAP_MAX_", "GLIBC_TUNABLES", NULL};
    for (int i = 0; users[i]; i++)
        if (getenv(users[i])) return 0;
    return mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && mallopt(M_TRIM_THRESHOLD, 64 << 20) == 1;
#else
    return 0;
#endif
}

PyMODINIT_FUNC PyInit__decode_c(void) {
    PyObject *errors = PyImport_ImportModule("kstore_cli.errors");
    if (!errors) return NULL;
    InvalidRecordError = PyObject_GetAttrString(errors, "InvalidRecordError");
    Py_DECREF(errors);
    if (!InvalidRecordError) return NULL;
    PyObject *common = PyImport_ImportModule("kstore_cli.record._decode_common");
    if (!common) return NULL;
    Underflow = PyObject_GetAttrString(common, "_Underflow");
    Py_DECREF(common);
    if (!Underflow) return NULL;
    kstore_crc_init();
    EmptyTuple = PyTuple_New(0);
    if (!EmptyTuple || PyType_Ready(&RecordBaseType) < 0 || PyType_Ready(&RecordIterType) < 0 ||
        PyType_Ready(&HeaderBaseType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    if (PyModule_AddStringConstant(m, "CRC32C_IMPL", crc_hw ? "sse4.2" : "table") < 0) return NULL;
    if (PyModule_AddIntConstant(m, "MALLOC_TUNED", tune_malloc()) < 0) return NULL;
    Py_INCREF(&RecordBaseType);
    if (PyModule_AddObject(m, "RecordBase", (PyObject *)&RecordBaseType) < 0) return NULL;
    Py_INCREF(&HeaderBaseType);
    if (PyModule_AddObject(m, "HeaderBase", (PyObject *)&HeaderBaseType) < 0) return NULL;
    return m;
}
