/*
 * The _decode_c extension's record types (see _decode_c.c): RecordBase and HeaderBase, what the
 * Python classes batch.Record and batch.Header are built on, and register_classes.
 */
#include "_decode_c.h"

/*
 * RecordBase: the fields of batch.Record as a C type (batch.Record subclasses it with
 * __slots__ = () and adds the Python-level properties). The attribute names, and what the
 * constructor stores in them, are those of the pure-Python Record (batch._PyRecord): records built
 * here by build_v2_records / build_legacy_records hold exactly what Record.__init__ would store.
 * Offsets and timestamps stay Python ints (they can pass int64 with damaged bases); positions,
 * lengths, sequence, magic and attributes are C integers, made Python ints only when read.
 * A small freelist keeps the allocator out of the record loop.
 */
RecordObject *kstore_rec_freelist[REC_FREELIST_MAX];
int kstore_rec_free_n = 0;

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
    if (kstore_rec_free_n < REC_FREELIST_MAX && Py_TYPE(r)->tp_basicsize == (Py_ssize_t)sizeof(RecordObject) &&
        Py_TYPE(r)->tp_itemsize == 0)
        kstore_rec_freelist[kstore_rec_free_n++] = r;
    else
        Py_TYPE(r)->tp_free((PyObject *)r);
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
HeaderObject *kstore_hdr_freelist[HDR_FREELIST_MAX];
int kstore_hdr_free_n = 0;

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
    if (kstore_hdr_free_n < HDR_FREELIST_MAX && Py_TYPE(h)->tp_basicsize == (Py_ssize_t)sizeof(HeaderObject) &&
        Py_TYPE(h)->tp_itemsize == 0)
        kstore_hdr_freelist[kstore_hdr_free_n++] = h;
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

PyTypeObject kstore_HeaderBaseType = {
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

PyTypeObject *kstore_header_type = NULL;
Py_ssize_t kstore_header_key_offset, kstore_header_value_offset;
int kstore_header_fast;

Py_ssize_t kstore_member_offset(PyObject *cls, const char *name) {
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

int kstore_learn_header_type(PyObject *cls) {
    if ((PyObject *)kstore_header_type == cls) return 0;
    if (!PyType_Check(cls)) {
        PyErr_SetString(PyExc_TypeError, "header_cls must be a class");
        return -1;
    }
    Py_ssize_t k = kstore_member_offset(cls, "key"), v = k < 0 ? -1 : kstore_member_offset(cls, "value");
    if (v < 0) return -1;
    kstore_header_key_offset = k;
    kstore_header_value_offset = v;
    PyTypeObject *tp = (PyTypeObject *)cls;
    kstore_header_fast = PyType_IsSubtype(tp, &kstore_HeaderBaseType) && tp->tp_basicsize == (Py_ssize_t)sizeof(HeaderObject) &&
                  tp->tp_itemsize == 0 && tp->tp_dictoffset == 0 && k == offsetof(HeaderObject, key) &&
                  v == offsetof(HeaderObject, value);
    Py_INCREF(cls);
    Py_XSETREF(kstore_header_type, tp);
    return 0;
}

/* record_cls must be RecordBase or a subclass adding no fields (batch.Record: __slots__ = ()). */
PyTypeObject *kstore_record_class(PyObject *cls) {
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &kstore_RecordBaseType) ||
        ((PyTypeObject *)cls)->tp_basicsize != (Py_ssize_t)sizeof(RecordObject) ||
        ((PyTypeObject *)cls)->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "record_cls must be RecordBase or a subclass with __slots__ = ()");
        return NULL;
    }
    return (PyTypeObject *)cls;
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

/* buf[pos : pos + len] as bytes (Python's slice clamping), or None for a negative len. */
static PyObject *slice_or_none(const Py_buffer *v, Py_ssize_t pos, Py_ssize_t len) {
    if (len < 0) Py_RETURN_NONE;
    Py_ssize_t a, z;
    slice_bounds(v->len, pos, len, &a, &z);
    return PyBytes_FromStringAndSize((const char *)v->buf + a, z - a);
}

/* Record.headers from Record._headers' spans into v: header_cls instances, the shared empty tuple for none. */
static PyObject *headers_from_spans(const Py_buffer *v, PyObject *hspans) {
    int truth = PyObject_IsTrue(hspans);
    if (truth < 0) return NULL;
    if (!truth) {
        Py_INCREF(kstore_EmptyTuple);
        return kstore_EmptyTuple;
    }
    PyObject *seq = PySequence_Fast(hspans, "headers must be a sequence of (key_pos, key_len, value_pos, value_len)");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *headers = PyTuple_New(n);
    for (Py_ssize_t i = 0; headers && i < n; i++) {
        Py_ssize_t hkp, hkl, hvp, hvl, ka, kz, va = 0, vz = 0;
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i), *h = NULL;
        if (PyArg_ParseTuple(item, "nnnn", &hkp, &hkl, &hvp, &hvl)) {
            slice_bounds(v->len, hkp, hkl, &ka, &kz);
            if (hvl >= 0) slice_bounds(v->len, hvp, hvl, &va, &vz);
            h = kstore_make_header((const uint8_t *)v->buf, ka, kz - ka, va, hvl < 0 ? -1 : vz - va, NULL);
        }
        if (!h) Py_CLEAR(headers);
        else PyTuple_SET_ITEM(headers, i, h);
    }
    Py_DECREF(seq);
    return headers;
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
    if (!kstore_header_type) {
        PyErr_SetString(PyExc_RuntimeError, "RecordBase: register_classes(Record, Header) was not called");
        return -1;
    }
    Py_buffer v;
    if (PyObject_GetBuffer(buf, &v, PyBUF_SIMPLE) < 0) return -1;
    PyObject *key = slice_or_none(&v, kp, kl);
    PyObject *value = key ? slice_or_none(&v, vp, vl) : NULL;
    PyObject *headers = key && value ? headers_from_spans(&v, hspans) : NULL;
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
            Py_INCREF(kstore_EmptyTuple);
            return kstore_EmptyTuple;
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
            if (rc != RD_ERROR) PyErr_SetString(kstore_InvalidRecordError, INVALID_STRUCTURE);
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

PyTypeObject kstore_RecordBaseType = {
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
PyObject *kstore_py_register_classes(PyObject *self, PyObject *args) {
    PyObject *rcls, *hcls;
    if (!PyArg_ParseTuple(args, "OO", &rcls, &hcls)) return NULL;
    PyTypeObject *tp = kstore_record_class(rcls), *ht = (PyTypeObject *)hcls;
    if (!tp) return NULL;
    if (tp != &kstore_RecordBaseType && !plain_subclass(tp, &kstore_RecordBaseType)) {
        PyErr_SetString(PyExc_TypeError, "Record must subclass RecordBase directly, with __slots__ = () and no __del__");
        return NULL;
    }
    if (PyType_Check(hcls) && PyType_IsSubtype(ht, &kstore_HeaderBaseType) && ht != &kstore_HeaderBaseType &&
        !plain_subclass(ht, &kstore_HeaderBaseType)) {
        PyErr_SetString(PyExc_TypeError, "Header must subclass HeaderBase directly, with __slots__ = () and no __del__");
        return NULL;
    }
    if (kstore_learn_header_type(hcls) < 0) return NULL;
    /* Their instances are freed by the native dealloc: Python's generic subtype_dealloc would take the same
     * steps, through more checks and a trashcan (a record's references are not deep): about 8% of iterating
     * a batch's records. */
    if (tp != &kstore_RecordBaseType) tp->tp_dealloc = (destructor)rec_dealloc_heap;
    if (kstore_header_fast && ht != &kstore_HeaderBaseType) ht->tp_dealloc = (destructor)hdr_dealloc_heap;
    Py_RETURN_NONE;
}

/* Record i of a parsed batch (b is its buffer), as build_v2_records makes it; a new reference, or NULL. */
