/*
 * The _decode_c extension's record building (see _decode_c.c): parsed v2 batches and decompressed legacy
 * wrappers made batch.Record / batch.Header objects, as a list or one at a time (iter(batch)).
 */
#include "_decode_c.h"

static PyObject *JavaUtf8; /* kstore_cli.record.text.java_utf8, imported on first need */

/* A fresh, untracked record of type tp (a subtype of RecordBase with no added fields), its fields
 * uninitialised: the caller sets every one (build_v2_record), or calls rec_alloc. */
static inline RecordObject *rec_alloc_raw(PyTypeObject *tp) {
    if (kstore_rec_free_n) {
        RecordObject *r = kstore_rec_freelist[--kstore_rec_free_n];
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

/* A fresh header_type instance, its key and value set (the references are taken), GC-tracked. */
static PyObject *header_new(PyObject *key, PyObject *value) {
    PyObject *obj;
    if (kstore_header_fast && kstore_hdr_free_n) {
        obj = (PyObject *)kstore_hdr_freelist[--kstore_hdr_free_n];
        (void)PyObject_Init(obj, kstore_header_type);
    } else if (kstore_header_fast) {
        obj = (PyObject *)PyObject_GC_New(HeaderObject, kstore_header_type);
    } else {
        obj = kstore_header_type->tp_alloc(kstore_header_type, 0); /* zeroed and tracked */
        if (!obj) return NULL;
        *(PyObject **)((char *)obj + kstore_header_key_offset) = key;
        *(PyObject **)((char *)obj + kstore_header_value_offset) = value;
        return obj;
    }
    if (!obj) return NULL;
    ((HeaderObject *)obj)->key = key;
    ((HeaderObject *)obj)->value = value;
    PyObject_GC_Track(obj);
    return obj;
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
PyObject *kstore_make_header(const uint8_t *b, Py_ssize_t kp, Py_ssize_t kl, Py_ssize_t vp, Py_ssize_t vl,
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
        Py_INCREF(kstore_EmptyTuple);
        return kstore_EmptyTuple;
    }
    PyObject *tuple = PyTuple_New(r->header_count);
    if (!tuple) return NULL;
    for (int32_t h = 0; h < r->header_count; h++) {
        hdr_t *hd = &o->hdrs[r->header_start + h];
        PyObject *obj = kstore_make_header(b, hd->key_pos, hd->key_len, hd->value_pos, hd->value_len, kc);
        if (!obj) { Py_DECREF(tuple); return NULL; }
        PyTuple_SET_ITEM(tuple, h, obj);
    }
    return tuple;
}

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
    if (kstore_get_view(data, &v, pos, end) < 0) return NULL;
    const uint8_t *b = (const uint8_t *)v.buf;
    if (kstore_parse_v2(b, pos, end, count, &o) < 0) goto error;
    list = PyList_New(o.nrecs);
    if (!list) goto error;
    for (Py_ssize_t i = 0; i < o.nrecs; i++) {
        PyObject *rec = build_v2_record(tp, batch, data, b, &o, i, base_offset, base_ts, log_append_obj, base_seq, &kc);
        if (!rec) goto error;
        PyList_SET_ITEM(list, i, rec);
    }
    Py_XDECREF(kc.text);
    PyBuffer_Release(&v);
    kstore_parse_out_free(&o);
    return list;
error:
    Py_XDECREF(kc.text);
    Py_XDECREF(list);
    PyBuffer_Release(&v);
    kstore_parse_out_free(&o);
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
    kstore_parse_out_free(&it->o);
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

PyTypeObject kstore_RecordIterType = {
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

PyObject *kstore_py_build_v2_records(PyObject *self, PyObject *args) {
    PyObject *cls, *header_cls, *batch, *data, *log_append_obj;
    Py_ssize_t pos, end, count;
    long long base_offset, base_ts;
    int base_seq;
    if (!PyArg_ParseTuple(args, "OOOOnnnLLOi", &cls, &header_cls, &batch, &data, &pos, &end, &count, &base_offset, &base_ts,
                          &log_append_obj, &base_seq))
        return NULL;
    PyTypeObject *tp = kstore_record_class(cls);
    if (!tp || kstore_learn_header_type(header_cls) < 0) return NULL;
    return build_v2(tp, batch, data, pos, end, count, base_offset, base_ts, log_append_obj, base_seq);
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

/* The inner entries of a decompressed legacy wrapper (*out: a PyMem array the caller frees): their count, or -1. */
static Py_ssize_t parse_inner_entries(const uint8_t *b, Py_ssize_t end, leg_t **out) {
    Py_ssize_t pos = 0, n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            leg_t *ne = PyMem_Realloc(*out, (size_t)cap * sizeof(leg_t));
            if (!ne) { PyErr_NoMemory(); return -1; }
            *out = ne;
        }
        leg_t *e = &(*out)[n];
        int rc = kstore_parse_legacy(b, pos, end, e);
        if (rc < 0) return -1;
        if (rc == 0) break; /* a truncated trailing inner entry ends the iteration silently */
        if (e->attributes & 0x07) {
            PyErr_SetString(kstore_InvalidRecordError, "Inner messages must not be compressed");
            return -1;
        }
        pos += e->size;
        n++;
    }
    if (!n) {
        PyErr_SetString(kstore_InvalidRecordError, "Found invalid compressed record set with no inner records");
        return -1;
    }
    return n;
}

/* What a v1 wrapper's inner offsets are relative to (v0: nothing, they are absolute); 0, or -1. */
static int absolute_base(int wrapper_magic, long long wrapper_offset, int64_t last_inner, __int128 *base) {
    char msg[320];
    *base = 0;
    if (wrapper_magic <= 0 || wrapper_offset == 0) return 0; /* some librdkafka versions send wrapper offset 0 */
    if (wrapper_offset < last_inner) {
        snprintf(msg, sizeof msg,
                 "Found invalid wrapper offset in compressed v1 message set, wrapper offset '%lld' is less than "
                 "the last inner message offset '%lld' and it is not zero.",
                 (long long)wrapper_offset, (long long)last_inner);
        PyErr_SetString(kstore_InvalidRecordError, msg);
        return -1;
    }
    *base = (__int128)wrapper_offset - last_inner;
    return 0;
}

/* Inner entry e of a legacy wrapper (b: the decompressed data) as a record_cls instance, or NULL. */
static PyObject *legacy_record(PyTypeObject *tp, PyObject *batch, PyObject *data, const uint8_t *b, const leg_t *e,
                               int wrapper_magic, __int128 base, PyObject *log_append_obj) {
    RecordObject *rec = rec_alloc(tp);
    if (!rec) return NULL;
    Py_INCREF(batch);
    rec->batch = batch;
    Py_INCREF(data);
    rec->buf = data;
    rec->offset = wrapper_magic > 0 ? long_from_i128(base + e->offset) : PyLong_FromLongLong(e->offset);
    if (e->magic == 0) rec->timestamp = PyLong_FromLong(-1);
    else if (log_append_obj != Py_None) { Py_INCREF(log_append_obj); rec->timestamp = log_append_obj; }
    else rec->timestamp = PyLong_FromLongLong(e->timestamp);
    rec->sequence = -1;
    rec->size = e->size;
    rec->key_pos = e->key_pos;
    rec->key_len = e->key_len;
    rec->value_pos = e->value_pos;
    rec->value_len = e->value_len;
    Py_INCREF(kstore_EmptyTuple);
    rec->hspans = kstore_EmptyTuple;
    rec->key = span_bytes(b, e->key_pos, e->key_len);
    rec->value = span_bytes(b, e->value_pos, e->value_len);
    Py_INCREF(kstore_EmptyTuple);
    rec->headers = kstore_EmptyTuple;
    rec->crc = PyLong_FromUnsignedLong(e->crc);
    rec->magic = e->magic;
    rec->attributes = e->attributes;
    /* the message's own CRC-32, from its magic byte to its end */
    int valid = e->crc == kstore_crc32_ieee(b + e->msg + 4, (size_t)(e->size - LOG_OVERHEAD - 4));
    rec->legacy_valid = PyBool_FromLong(valid);
    PyObject_GC_Track(rec);
    if (!rec->offset || !rec->timestamp || !rec->key || !rec->value || !rec->headers || !rec->crc) {
        Py_DECREF(rec);
        return NULL;
    }
    return (PyObject *)rec;
}

/*
 * build_legacy_records(record_cls, batch, data, wrapper_magic, wrapper_offset, log_append_time):
 * the inner messages of a decompressed legacy wrapper as records; see _decode_py.build_legacy_records.
 */
PyObject *kstore_py_build_legacy_records(PyObject *self, PyObject *args) {
    PyObject *cls, *batch, *data, *log_append_obj;
    int wrapper_magic;
    long long wrapper_offset;
    Py_buffer v;
    if (!PyArg_ParseTuple(args, "OOOiLO", &cls, &batch, &data, &wrapper_magic, &wrapper_offset, &log_append_obj))
        return NULL;
    PyTypeObject *tp = kstore_record_class(cls);
    if (!tp) return NULL;
    if (PyObject_GetBuffer(data, &v, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *b = (const uint8_t *)v.buf;
    leg_t *es = NULL;
    PyObject *list = NULL;
    __int128 base;
    Py_ssize_t n = parse_inner_entries(b, v.len, &es);
    if (n > 0 && absolute_base(wrapper_magic, wrapper_offset, es[n - 1].offset, &base) == 0 && (list = PyList_New(n))) {
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *rec = legacy_record(tp, batch, data, b, &es[i], wrapper_magic, base, log_append_obj);
            if (!rec) { Py_CLEAR(list); break; }
            PyList_SET_ITEM(list, i, rec);
        }
    }
    PyMem_Free(es);
    PyBuffer_Release(&v);
    return list;
}

/*
 * v2_batch_records(record_cls, header_cls, batch): RecordBatch.records() of a plain batch (count > 0,
 * no codec, size >= 61) straight from the batch's slots; None for any other batch (the caller's
 * general path). See _decode_py.v2_batch_records.
 */
PyObject *kstore_py_v2_batch_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    plain_batch pb;
    int plain = kstore_plain_v2_batch(args, nargs, "v2_batch_records", &pb);
    if (plain < 0) return NULL;
    if (!plain) Py_RETURN_NONE;
    return build_v2(pb.tp, pb.batch, pb.data, V2_HEADER_SIZE, pb.len, pb.count, pb.base_offset, pb.base_ts,
                    pb.log_append, pb.base_seq);
}

/* v2_batch_iter(record_cls, header_cls, batch): iter(RecordBatch) of a plain batch, or None; the batch is
 * parsed (and so checked) whole here, its records are built as they are iterated. */
PyObject *kstore_py_v2_batch_iter(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    plain_batch pb;
    int plain = kstore_plain_v2_batch(args, nargs, "v2_batch_iter", &pb);
    if (plain < 0) return NULL;
    if (!plain) Py_RETURN_NONE;
    RecordIterObject *it;
    if (recit_free_n) {
        it = recit_freelist[--recit_free_n];
        (void)PyObject_Init((PyObject *)it, &kstore_RecordIterType);
    } else if (!(it = PyObject_GC_New(RecordIterObject, &kstore_RecordIterType))) {
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
    if (kstore_get_view(pb.data, &it->view, V2_HEADER_SIZE, pb.len) < 0) {
        Py_DECREF(it);
        return NULL;
    }
    it->has_view = 1;
    if (kstore_parse_v2((const uint8_t *)it->view.buf, V2_HEADER_SIZE, pb.len, pb.count, &it->o) < 0) {
        Py_DECREF(it);
        return NULL;
    }
    return (PyObject *)it;
}

