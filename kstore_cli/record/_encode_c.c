/*
 * The native twin of kstore_cli/record/_encode_py.py: record tables (columns over a decoded buffer)
 * and the writing of v2 records and legacy entries from them, without a Python object per record.
 *
 * Contract: every function returns exactly what its Python twin returns (bytes equal) and raises the
 * same class with the same message (Kafka's wording) on the data it decodes. A table handed in is
 * checked before any byte is read through it (lengths of its columns, every span inside the data),
 * so a table that did not come from legacy_table / v2_table is a ValueError, never a stray read.
 * Offsets and timestamps are Java longs: sums and differences wrap (unsigned arithmetic, no UB).
 *
 * convert-format's fused paths (v2_frames, legacy_to_v2) are in _encode_convert_c.c; what both files
 * share is in _encode_c.h.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_wire.h" /* encode_legacy's CRC-32 */
#include "_encode_c.h"

PyObject *kstore_invalid_record_error;

/* ------------------------------------------------------------------ growing output */

int kstore_out_reserve(Out *o, Py_ssize_t more) {
    if (more > PY_SSIZE_T_MAX - o->len) { PyErr_NoMemory(); return -1; }
    Py_ssize_t need = o->len + more;
    if (need <= o->cap) return 0;
    Py_ssize_t cap = o->cap ? o->cap : 4096;
    while (cap < need) cap = cap > PY_SSIZE_T_MAX / 2 ? need : cap * 2;
    uint8_t *b = PyMem_Realloc(o->buf, (size_t)cap);
    if (!b) { PyErr_NoMemory(); return -1; }
    o->buf = b;
    o->cap = cap;
    return 0;
}

static PyObject *out_bytes(Out *o) {
    PyObject *r = PyBytes_FromStringAndSize((const char *)(o->buf ? o->buf : (uint8_t *)""), o->len);
    PyMem_Free(o->buf);
    o->buf = NULL;
    return r;
}

/* ------------------------------------------------------------------ legacy_table */

static PyObject *invalid(const char *msg) {
    PyErr_SetString(kstore_invalid_record_error, msg);
    return NULL;
}

/* One legacy entry at pos as decode_legacy_message reads it: 1 parsed, 0 does not fit, -1 error. */
int kstore_legacy_entry(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, int64_t *f) {
    if (end - pos < LOG_OVERHEAD) return 0;
    int64_t offset = s64(be64(b + pos));
    int32_t size = s32(be32(b + pos + SIZE_OFFSET));
    if (size < RECORD_OVERHEAD_V0) {
        PyErr_Format(kstore_invalid_record_error, "Record size %d is less than the minimum record overhead (%d)", size,
                     RECORD_OVERHEAD_V0);
        return -1;
    }
    Py_ssize_t msg = pos + LOG_OVERHEAD;
    if ((Py_ssize_t)size > end - msg) return 0;
    Py_ssize_t msg_end = msg + size, p = msg + 6;
    int magic = s8(b[msg + 4]), attributes = s8(b[msg + 5]);
    int64_t timestamp = -1;
    if (magic > 0) {
        if (msg_end - p < 8) goto structure;
        timestamp = s64(be64(b + p));
        p += 8;
    }
    if (msg_end - p < 4) goto structure;
    int64_t kl = s32(be32(b + p));
    p += 4;
    int64_t kp = p;
    if (kl < 0) kl = -1; else p += kl;
    if (p > msg_end - 4) goto structure;
    int64_t vl = s32(be32(b + p));
    p += 4;
    int64_t vp = p;
    if (vl < 0) vl = -1; else p += vl;
    if (p > msg_end) goto structure;
    f[0] = offset; f[1] = LOG_OVERHEAD + (int64_t)size; f[2] = magic; f[3] = attributes; f[4] = timestamp;
    f[5] = kp; f[6] = kl; f[7] = vp; f[8] = vl;
    return 1;
structure:
    PyErr_SetString(kstore_invalid_record_error, "Found invalid record structure");
    return -1;
}

PyObject *kstore_table_tuple(Py_ssize_t n, PyObject *data, Out *cols, int ncols) {
    PyObject *t = PyTuple_New(7);
    if (!t) goto fail;
    PyTuple_SET_ITEM(t, 0, PyLong_FromSsize_t(n));
    Py_INCREF(data);
    PyTuple_SET_ITEM(t, 1, data);
    for (int i = 0; i < 5; i++) {
        PyObject *c = i < ncols ? out_bytes(&cols[i]) : PyBytes_FromStringAndSize("", 0);
        PyTuple_SET_ITEM(t, 2 + i, c);
    }
    for (int i = 0; i < 7; i++)
        if (!PyTuple_GET_ITEM(t, i)) { Py_DECREF(t); return NULL; }
    return t;
fail:
    for (int i = 0; i < ncols; i++) PyMem_Free(cols[i].buf);
    return NULL;
}

/* The record table of a decompressed wrapper's inner messages (see _encode_py.legacy_table). */
PyObject *kstore_legacy_table_of(PyObject *data, int wrapper_magic, int64_t wrapper_offset, int has_lat, int64_t lat) {
    Py_buffer v;
    if (PyObject_GetBuffer(data, &v, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *b = v.buf;
    Out cols[3] = {{0}};
    Py_ssize_t pos = 0, n = 0;
    int64_t f[9];
    for (;;) {
        int r = kstore_legacy_entry(b, pos, v.len, f);
        if (r < 0) goto fail;
        if (r == 0) break; /* a truncated trailing inner entry ends the iteration silently */
        if (f[3] & 0x07) { invalid("Inner messages must not be compressed"); goto fail; }
        int64_t ts = f[2] == 0 ? -1 : (has_lat ? lat : f[4]);
        if (put_q(&cols[0], f[0]) < 0 || put_q(&cols[1], ts) < 0 || kstore_out_reserve(&cols[2], 32) < 0) goto fail;
        int64_t sp[4] = {f[5], f[6], f[7], f[8]};
        memcpy(cols[2].buf + cols[2].len, sp, 32);
        cols[2].len += 32;
        pos += (Py_ssize_t)f[1];
        n++;
    }
    if (!n) { invalid("Found invalid compressed record set with no inner records"); goto fail; }
    if (wrapper_magic > 0 && wrapper_offset != 0) { /* wrapper offset 0 (some librdkafka): kept */
        int64_t last_inner = ld64(cols[0].buf + (n - 1) * 8);
        if (wrapper_offset < last_inner) {
            PyErr_Format(kstore_invalid_record_error,
                         "Found invalid wrapper offset in compressed v1 message set, wrapper offset '%lld' is less "
                         "than the last inner message offset '%lld' and it is not zero.",
                         (long long)wrapper_offset, (long long)last_inner);
            goto fail;
        }
        int64_t base = wrap_sub(wrapper_offset, last_inner);
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t o = wrap_add(base, ld64(cols[0].buf + i * 8));
            memcpy(cols[0].buf + i * 8, &o, 8);
        }
    }
    PyBuffer_Release(&v);
    return kstore_table_tuple(n, data, cols, 3);
fail:
    PyBuffer_Release(&v);
    for (int i = 0; i < 3; i++) PyMem_Free(cols[i].buf);
    return NULL;
}

/* legacy_table(data, wrapper_magic, wrapper_offset, log_append_time); see _encode_py.legacy_table. */
static PyObject *py_legacy_table(PyObject *self, PyObject *args) {
    PyObject *data, *lat_obj;
    int wrapper_magic;
    long long wrapper_offset;
    if (!PyArg_ParseTuple(args, "OiLO", &data, &wrapper_magic, &wrapper_offset, &lat_obj)) return NULL;
    int has_lat = lat_obj != Py_None;
    int64_t lat = 0;
    if (has_lat) {
        lat = PyLong_AsLongLong(lat_obj);
        if (lat == -1 && PyErr_Occurred()) return NULL;
    }
    return kstore_legacy_table_of(data, wrapper_magic, wrapper_offset, has_lat, lat);
}

/* ------------------------------------------------------------------ v2_table */

static int as_i64(PyObject *o, int64_t *out) {
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

/* 1 when data[p:p+n] is strict UTF-8 (Python's "strict" decoder), 0 when not, -1 on error. */
static int strict_utf8(const uint8_t *p, Py_ssize_t n) {
    PyObject *s = PyUnicode_DecodeUTF8((const char *)p, n, "strict");
    if (s) { Py_DECREF(s); return 1; }
    if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { PyErr_Clear(); return 0; }
    return -1;
}

/* One record's headers (4-tuples of spans) appended to the header spans column: 1, 0 when a key is not
 * strict UTF-8 (Kafka re-encodes such a key: the caller takes the record path), -1 with an error set. */
static int table_headers(Out *spans, PyObject *hs, const Py_buffer *v) {
    for (Py_ssize_t h = 0; h < PyTuple_GET_SIZE(hs); h++) {
        PyObject *ht = PyTuple_GET_ITEM(hs, h);
        if (!PyTuple_Check(ht) || PyTuple_GET_SIZE(ht) != 4) {
            PyErr_SetString(PyExc_TypeError, "headers must be 4-tuples");
            return -1;
        }
        int64_t hsp[4];
        for (int k = 0; k < 4; k++)
            if (as_i64(PyTuple_GET_ITEM(ht, k), &hsp[k]) < 0) return -1;
        if (hsp[0] < 0 || hsp[1] < 0 || hsp[1] > v->len || hsp[0] > v->len - hsp[1]) {
            PyErr_SetString(PyExc_ValueError, "header key span outside the data");
            return -1;
        }
        int ok = strict_utf8((const uint8_t *)v->buf + hsp[0], (Py_ssize_t)hsp[1]);
        if (ok <= 0) return ok;
        if (kstore_out_reserve(spans, 32) < 0) return -1;
        memcpy(spans->buf + spans->len, hsp, 32);
        spans->len += 32;
    }
    return 1;
}

/* One decode_v2_records tuple appended to the columns: 1, 0 (a key that is not strict UTF-8), -1 error. */
static int table_record(Out *cols, PyObject *r, const Py_buffer *v, int64_t base_offset, int64_t base_ts,
                        int has_lat, int64_t lat, int64_t *headers_seen) {
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 8 || !PyTuple_Check(PyTuple_GET_ITEM(r, 7))) {
        PyErr_SetString(PyExc_TypeError, "records must be decode_v2_records tuples");
        return -1;
    }
    int64_t f[7];
    for (int k = 0; k < 7; k++)
        if (as_i64(PyTuple_GET_ITEM(r, k), &f[k]) < 0) return -1;
    int64_t sp[4] = {f[3], f[4], f[5], f[6]};
    if (put_q(&cols[0], wrap_add(base_offset, f[0])) < 0 ||
        put_q(&cols[1], has_lat ? lat : wrap_add(base_ts, f[1])) < 0 || kstore_out_reserve(&cols[2], 32) < 0)
        return -1;
    memcpy(cols[2].buf + cols[2].len, sp, 32);
    cols[2].len += 32;
    PyObject *hs = PyTuple_GET_ITEM(r, 7);
    int ok = table_headers(&cols[4], hs, v);
    if (ok <= 0) return ok;
    *headers_seen += PyTuple_GET_SIZE(hs);
    return put_q(&cols[3], *headers_seen) < 0 ? -1 : 1;
}

/* v2_table(data, records, base_offset, base_timestamp, log_append_time); see _encode_py.v2_table. */
static PyObject *py_v2_table(PyObject *self, PyObject *args) {
    PyObject *data, *records, *lat_obj;
    long long base_offset, base_ts;
    if (!PyArg_ParseTuple(args, "OO!LLO", &data, &PyList_Type, &records, &base_offset, &base_ts, &lat_obj))
        return NULL;
    int has_lat = lat_obj != Py_None;
    int64_t lat = 0;
    if (has_lat && as_i64(lat_obj, &lat) < 0) return NULL;
    Py_buffer v;
    if (PyObject_GetBuffer(data, &v, PyBUF_SIMPLE) < 0) return NULL;
    Out cols[5] = {{0}};
    Py_ssize_t n = PyList_GET_SIZE(records);
    int64_t headers_seen = 0;
    int ok = 1;
    for (Py_ssize_t i = 0; i < n && ok > 0; i++)
        ok = table_record(cols, PyList_GET_ITEM(records, i), &v, base_offset, base_ts, has_lat, lat, &headers_seen);
    PyBuffer_Release(&v);
    if (ok <= 0) {
        for (int k = 0; k < 5; k++) PyMem_Free(cols[k].buf);
        if (ok < 0) return NULL;
        Py_RETURN_NONE;
    }
    if (!headers_seen) cols[3].len = 0;
    return kstore_table_tuple(n, data, cols, 5);
}

/* ------------------------------------------------------------------ reading a table */

void kstore_table_release(Table *t) {
    for (int i = 0; i < t->held; i++) PyBuffer_Release(&t->views[i]);
    t->held = 0;
}

int kstore_table_open(PyObject *obj, Table *t) {
    t->held = 0;
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 7) {
        PyErr_SetString(PyExc_TypeError, "a record table is a 7-tuple");
        return -1;
    }
    t->n = PyLong_AsSsize_t(PyTuple_GET_ITEM(obj, 0));
    if (t->n == -1 && PyErr_Occurred()) return -1;
    for (int i = 0; i < 6; i++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(obj, 1 + i), &t->views[i], PyBUF_SIMPLE) < 0) {
            kstore_table_release(t);
            return -1;
        }
        t->held++;
    }
    Py_ssize_t n = t->n;
    Py_ssize_t he = t->views[4].len, hs = t->views[5].len;
    if (n < 0 || n > PY_SSIZE_T_MAX / 32 || t->views[1].len != 8 * n || t->views[2].len != 8 * n ||
        t->views[3].len != 32 * n || (he != 0 && he != 8 * n) || hs % 32) {
        PyErr_SetString(PyExc_ValueError, "inconsistent record table");
        kstore_table_release(t);
        return -1;
    }
    t->nh = hs / 32;
    t->data = t->views[0].buf;
    t->data_len = t->views[0].len;
    t->offsets = t->views[1].buf;
    t->timestamps = t->views[2].buf;
    t->spans = t->views[3].buf;
    t->header_ends = he ? t->views[4].buf : NULL;
    t->header_spans = t->views[5].buf;
    return 0;
}

/* Span (pos, len) at p checked inside the data; len < 0 is null (-1). 0 ok, -1 ValueError set. */
static inline int span_at(const Table *t, const uint8_t *p, int64_t *pos, int64_t *len) {
    *pos = ld64(p);
    *len = ld64(p + 8);
    if (*len < 0) { *len = -1; return 0; }
    if (*len > MAX_INT32 || *pos < 0 || *pos > t->data_len - *len) {
        PyErr_SetString(PyExc_ValueError, "record table span outside the data");
        return -1;
    }
    return 0;
}

/* Record i's headers [first, last) checked against the header spans. */
static inline int header_range(const Table *t, Py_ssize_t i, int64_t *first, int64_t *last) {
    if (!t->header_ends) { *first = *last = 0; return 0; }
    *first = i ? ld64(t->header_ends + 8 * (i - 1)) : 0;
    *last = ld64(t->header_ends + 8 * i);
    if (*first < 0 || *last < *first || *last > t->nh) {
        PyErr_SetString(PyExc_ValueError, "record table header ends out of order");
        return -1;
    }
    return 0;
}

/* convert's size estimate of record i; -1 with an error set. */
static int64_t record_size(const Table *t, Py_ssize_t i, int to_magic) {
    int64_t kp, kl, vp, vl;
    if (span_at(t, t->spans + 32 * i, &kp, &kl) < 0 || span_at(t, t->spans + 32 * i + 16, &vp, &vl) < 0) return -1;
    int64_t size = (kl > 0 ? kl : 0) + (vl > 0 ? vl : 0);
    if (to_magic < 2) return size + LEGACY_RECORD_OVERHEAD;
    int64_t first, last;
    if (header_range(t, i, &first, &last) < 0) return -1;
    for (int64_t h = first; h < last; h++) {
        int64_t hkp, hkl, hvp, hvl;
        const uint8_t *hp = t->header_spans + 32 * h;
        if (span_at(t, hp, &hkp, &hkl) < 0 || span_at(t, hp + 16, &hvp, &hvl) < 0) return -1;
        int64_t chars = 0; /* characters of strict UTF-8: bytes that are not continuation bytes */
        for (int64_t k = 0; k < (hkl > 0 ? hkl : 0); k++) chars += (t->data[hkp + k] & 0xC0) != 0x80;
        size += chars + (hvl > 0 ? hvl : 0) + V2_HEADER_OVERHEAD;
    }
    return size + V2_RECORD_OVERHEAD;
}

/* How many records from start join a group: the stop index, *size advanced; -1 with an error set. */
Py_ssize_t kstore_fit_records(const Table *t, Py_ssize_t start, int to_magic, int64_t *size, int64_t limit,
                              int64_t group_base, int take_first) {
    if (start < 0 || start > t->n) {
        PyErr_Format(PyExc_ValueError, "start %zd out of the table", start);
        return -1;
    }
    Py_ssize_t i = start;
    for (; i < t->n; i++) {
        int64_t s = record_size(t, i, to_magic);
        if (s < 0) return -1;
        int64_t offset = ld64(t->offsets + 8 * i), delta = wrap_sub(offset, group_base);
        /* Python compares exact integers: a difference past int64 is above 2^31 - 1 when positive. */
        int over = offset >= group_base && (delta < 0 || delta > MAX_INT32);
        if (!(take_first && i == start) && (*size > limit - s || over)) break;
        *size += s;
    }
    return i;
}

/* fit(table, start, to_magic, size, limit, group_base, take_first); see _encode_py.fit. */
static PyObject *py_fit(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t start;
    int to_magic, take_first;
    long long size, limit, group_base;
    if (!PyArg_ParseTuple(args, "OniLLLp", &obj, &start, &to_magic, &size, &limit, &group_base, &take_first))
        return NULL;
    Table t;
    if (kstore_table_open(obj, &t) < 0) return NULL;
    int64_t sz = size;
    Py_ssize_t stop = kstore_fit_records(&t, start, to_magic, &sz, limit, group_base, take_first);
    kstore_table_release(&t);
    if (stop < 0) return NULL;
    return Py_BuildValue("nL", stop, (long long)sz);
}

/* table_size(table, to_magic); see _encode_py.table_size. */
static PyObject *py_table_size(PyObject *self, PyObject *args) {
    PyObject *obj;
    int to_magic;
    if (!PyArg_ParseTuple(args, "Oi", &obj, &to_magic)) return NULL;
    Table t;
    if (kstore_table_open(obj, &t) < 0) return NULL;
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < t.n; i++) {
        int64_t s = record_size(&t, i, to_magic);
        if (s < 0) { kstore_table_release(&t); return NULL; }
        total += s;
    }
    kstore_table_release(&t);
    return PyLong_FromLongLong(total);
}

/* Appends len bytes to a bytearray, returning where they go (NULL with an error set). */
static uint8_t *bytearray_grow(PyObject *out, Py_ssize_t len) {
    Py_ssize_t old = PyByteArray_GET_SIZE(out);
    if (len > PY_SSIZE_T_MAX - old) { PyErr_NoMemory(); return NULL; }
    if (PyByteArray_Resize(out, old + len) < 0) return NULL;
    return (uint8_t *)PyByteArray_AS_STRING(out) + old;
}

static int range_ok(const Table *t, Py_ssize_t start, Py_ssize_t stop) {
    if (start < 0 || start >= stop || stop > t->n) {
        PyErr_SetString(PyExc_ValueError, "record range out of the table");
        return 0;
    }
    return 1;
}

/* One record's body size (after its length varint); -1 with an error set. */
static int64_t v2_body_size(const Table *t, Py_ssize_t i, int64_t base_offset, int64_t base_ts) {
    int64_t kp, kl, vp, vl, first, last;
    if (span_at(t, t->spans + 32 * i, &kp, &kl) < 0 || span_at(t, t->spans + 32 * i + 16, &vp, &vl) < 0 ||
        header_range(t, i, &first, &last) < 0)
        return -1;
    int64_t s = 1 + uvarint_size(zigzag64(wrap_sub(ld64(t->timestamps + 8 * i), base_ts))) +
                uvarint_size(zigzag32(wrap_sub(ld64(t->offsets + 8 * i), base_offset)));
    s += uvarint_size(zigzag32(kl)) + (kl > 0 ? kl : 0) + uvarint_size(zigzag32(vl)) + (vl > 0 ? vl : 0);
    s += uvarint_size(zigzag32(last - first));
    for (int64_t h = first; h < last; h++) {
        int64_t hkp, hkl, hvp, hvl;
        const uint8_t *hp = t->header_spans + 32 * h;
        if (span_at(t, hp, &hkp, &hkl) < 0 || span_at(t, hp + 16, &hvp, &hvl) < 0) return -1;
        s += uvarint_size(zigzag32(hkl)) + (hkl > 0 ? hkl : 0) + uvarint_size(zigzag32(hvl)) + (hvl > 0 ? hvl : 0);
    }
    if (s > MAX_INT32) {
        PyErr_SetString(PyExc_OverflowError, "record larger than 2 GiB");
        return -1;
    }
    return s;
}

static inline uint8_t *put_bytes(uint8_t *p, const uint8_t *data, int64_t pos, int64_t len) {
    if (len > 0) { memcpy(p, data + pos, (size_t)len); p += len; }
    return p;
}

/* Records [start, stop) as DefaultRecords appended to out; 0 with *max_ts set, -1 with an error set. */
int kstore_write_v2(PyObject *out, const Table *t, Py_ssize_t start, Py_ssize_t stop, int64_t base_offset,
                    int64_t base_ts, int64_t *max_ts) {
    if (!range_ok(t, start, stop)) return -1;
    int64_t total = 0;
    for (Py_ssize_t i = start; i < stop; i++) { /* sizes first: one resize, every span checked */
        int64_t s = v2_body_size(t, i, base_offset, base_ts);
        if (s < 0) return -1;
        total += uvarint_size(zigzag32(s)) + s;
    }
    uint8_t *p = bytearray_grow(out, (Py_ssize_t)total);
    if (!p) return -1;
    *max_ts = ld64(t->timestamps + 8 * start);
    for (Py_ssize_t i = start; i < stop; i++) {
        int64_t ts = ld64(t->timestamps + 8 * i), kp, kl, vp, vl, first, last;
        if (ts > *max_ts) *max_ts = ts;
        span_at(t, t->spans + 32 * i, &kp, &kl); /* checked above */
        span_at(t, t->spans + 32 * i + 16, &vp, &vl);
        header_range(t, i, &first, &last);
        p = put_uvarint(p, zigzag32(v2_body_size(t, i, base_offset, base_ts)));
        *p++ = 0; /* attributes */
        p = put_uvarint(p, zigzag64(wrap_sub(ts, base_ts)));
        p = put_uvarint(p, zigzag32(wrap_sub(ld64(t->offsets + 8 * i), base_offset)));
        p = put_uvarint(p, zigzag32(kl));
        p = put_bytes(p, t->data, kp, kl);
        p = put_uvarint(p, zigzag32(vl));
        p = put_bytes(p, t->data, vp, vl);
        p = put_uvarint(p, zigzag32(last - first));
        for (int64_t h = first; h < last; h++) {
            int64_t hkp, hkl, hvp, hvl;
            const uint8_t *hp = t->header_spans + 32 * h;
            span_at(t, hp, &hkp, &hkl);
            span_at(t, hp + 16, &hvp, &hvl);
            p = put_uvarint(p, zigzag32(hkl));
            p = put_bytes(p, t->data, hkp, hkl);
            p = put_uvarint(p, zigzag32(hvl));
            p = put_bytes(p, t->data, hvp, hvl);
        }
    }
    return 0;
}

/* Records [start, stop) as legacy entries appended to out; 0 with *max_ts set, -1 with an error set. */
static int write_legacy(PyObject *out, const Table *t, Py_ssize_t start, Py_ssize_t stop, int magic, int attributes,
                        int64_t offset_base, int has_ts, int64_t fixed_ts, int64_t *max_ts) {
    if (magic != 0 && magic != 1) {
        PyErr_Format(PyExc_ValueError, "legacy messages are magic 0 or 1, not %d", magic);
        return -1;
    }
    if (attributes < -128 || attributes > 127) {
        PyErr_Format(PyExc_ValueError, "attributes %d", attributes);
        return -1;
    }
    if (!range_ok(t, start, stop)) return -1;
    int64_t total = 0, head = LOG_OVERHEAD + 4 + 2 + (magic ? 8 : 0) + 8;
    for (Py_ssize_t i = start; i < stop; i++) {
        int64_t kp, kl, vp, vl;
        if (span_at(t, t->spans + 32 * i, &kp, &kl) < 0 || span_at(t, t->spans + 32 * i + 16, &vp, &vl) < 0)
            return -1;
        int64_t s = head + (kl > 0 ? kl : 0) + (vl > 0 ? vl : 0);
        if (s - LOG_OVERHEAD > MAX_INT32) {
            PyErr_SetString(PyExc_OverflowError, "message larger than 2 GiB");
            return -1;
        }
        total += s;
    }
    uint8_t *p = bytearray_grow(out, (Py_ssize_t)total);
    if (!p) return -1;
    *max_ts = ld64(t->timestamps + 8 * start);
    for (Py_ssize_t i = start; i < stop; i++) {
        int64_t ts = ld64(t->timestamps + 8 * i), kp, kl, vp, vl;
        if (ts > *max_ts) *max_ts = ts;
        span_at(t, t->spans + 32 * i, &kp, &kl);
        span_at(t, t->spans + 32 * i + 16, &vp, &vl);
        uint8_t *entry = p;
        put_be64(p, (uint64_t)wrap_sub(ld64(t->offsets + 8 * i), offset_base));
        p += 12; /* size set below */
        uint8_t *msg = p;
        p += 4; /* CRC set below */
        *p++ = (uint8_t)magic;
        *p++ = (uint8_t)(attributes & 0xFF);
        if (magic) { put_be64(p, (uint64_t)(has_ts ? fixed_ts : ts)); p += 8; }
        put_be32(p, (uint32_t)(kl < 0 ? -1 : kl)); p += 4;
        p = put_bytes(p, t->data, kp, kl);
        put_be32(p, (uint32_t)(vl < 0 ? -1 : vl)); p += 4;
        p = put_bytes(p, t->data, vp, vl);
        put_be32(entry + SIZE_OFFSET, (uint32_t)(p - msg));
        put_be32(msg, crc32_ieee(msg + 4, (size_t)(p - msg - 4)));
    }
    return 0;
}

static int optional_i64(PyObject *obj, int *has, int64_t *value) {
    *has = obj != Py_None;
    *value = 0;
    return *has ? as_i64(obj, value) : 0;
}

/* encode_v2(out, table, start, stop, base_offset, base_timestamp); see _encode_py.encode_v2. */
static PyObject *py_encode_v2(PyObject *self, PyObject *args) {
    PyObject *out, *obj;
    Py_ssize_t start, stop;
    long long base_offset, base_ts;
    if (!PyArg_ParseTuple(args, "O!OnnLL", &PyByteArray_Type, &out, &obj, &start, &stop, &base_offset, &base_ts))
        return NULL;
    Table t;
    if (kstore_table_open(obj, &t) < 0) return NULL;
    int64_t max_ts;
    int r = kstore_write_v2(out, &t, start, stop, base_offset, base_ts, &max_ts);
    kstore_table_release(&t);
    return r < 0 ? NULL : PyLong_FromLongLong(max_ts);
}

/* encode_legacy(out, table, start, stop, magic, attributes, offset_base, timestamp); see the twin. */
static PyObject *py_encode_legacy(PyObject *self, PyObject *args) {
    PyObject *out, *obj, *ts_obj;
    Py_ssize_t start, stop;
    int magic, attributes, has_ts;
    long long offset_base;
    int64_t fixed_ts, max_ts;
    if (!PyArg_ParseTuple(args, "O!OnniiLO", &PyByteArray_Type, &out, &obj, &start, &stop, &magic, &attributes,
                          &offset_base, &ts_obj))
        return NULL;
    if (optional_i64(ts_obj, &has_ts, &fixed_ts) < 0) return NULL;
    Table t;
    if (kstore_table_open(obj, &t) < 0) return NULL;
    int r = write_legacy(out, &t, start, stop, magic, attributes, offset_base, has_ts, fixed_ts, &max_ts);
    kstore_table_release(&t);
    return r < 0 ? NULL : PyLong_FromLongLong(max_ts);
}

/* The fused calls' result: (stop, size, max timestamp or None, last offset or None). */
static PyObject *fit_result(const Table *t, Py_ssize_t start, Py_ssize_t stop, int64_t size, int64_t max_ts) {
    if (stop == start) return Py_BuildValue("nLOO", stop, (long long)size, Py_None, Py_None);
    return Py_BuildValue("nLLL", stop, (long long)size, (long long)max_ts, (long long)ld64(t->offsets + 8 * (stop - 1)));
}

/* add_v2(out, table, start, base_offset, base_timestamp, size, limit, take_first); see _encode_py.add_v2. */
static PyObject *py_add_v2(PyObject *self, PyObject *args) {
    PyObject *out, *obj;
    Py_ssize_t start;
    long long base_offset, base_ts, size, limit;
    int take_first;
    if (!PyArg_ParseTuple(args, "O!OnLLLLp", &PyByteArray_Type, &out, &obj, &start, &base_offset, &base_ts, &size,
                          &limit, &take_first))
        return NULL;
    Table t;
    if (kstore_table_open(obj, &t) < 0) return NULL;
    int64_t sz = size, max_ts = 0;
    Py_ssize_t stop = kstore_fit_records(&t, start, 2, &sz, limit, base_offset, take_first);
    PyObject *r = NULL;
    if (stop >= 0 && (stop == start || kstore_write_v2(out, &t, start, stop, base_offset, base_ts, &max_ts) == 0))
        r = fit_result(&t, start, stop, sz, max_ts);
    kstore_table_release(&t);
    return r;
}

/* add_legacy(out, table, start, magic, attributes, offset_base, timestamp, group_base, size, limit,
 * take_first); see _encode_py.add_legacy. */
static PyObject *py_add_legacy(PyObject *self, PyObject *args) {
    PyObject *out, *obj, *ts_obj;
    Py_ssize_t start;
    int magic, attributes, take_first, has_ts;
    long long offset_base, group_base, size, limit;
    int64_t fixed_ts, max_ts = 0;
    if (!PyArg_ParseTuple(args, "O!OniiLOLLLp", &PyByteArray_Type, &out, &obj, &start, &magic, &attributes,
                          &offset_base, &ts_obj, &group_base, &size, &limit, &take_first))
        return NULL;
    if (optional_i64(ts_obj, &has_ts, &fixed_ts) < 0) return NULL;
    Table t;
    if (kstore_table_open(obj, &t) < 0) return NULL;
    int64_t sz = size;
    Py_ssize_t stop = kstore_fit_records(&t, start, magic, &sz, limit, group_base, take_first);
    PyObject *r = NULL;
    if (stop >= 0 && (stop == start || write_legacy(out, &t, start, stop, magic, attributes, offset_base, has_ts,
                                                    fixed_ts, &max_ts) == 0))
        r = fit_result(&t, start, stop, sz, max_ts);
    kstore_table_release(&t);
    return r;
}



static PyMethodDef methods[] = {
    {"legacy_table", py_legacy_table, METH_VARARGS,
     "The inner messages of a decompressed legacy wrapper as a record table; see _encode_py.legacy_table."},
    {"v2_table", py_v2_table, METH_VARARGS,
     "A record table from decode_v2_records' output, or None; see _encode_py.v2_table."},
    {"fit", py_fit, METH_VARARGS, "How many records join a group: (stop, size); see _encode_py.fit."},
    {"table_size", py_table_size, METH_VARARGS, "The size estimate of a table's records; see _encode_py.table_size."},
    {"encode_v2", py_encode_v2, METH_VARARGS, "Append records as DefaultRecords; see _encode_py.encode_v2."},
    {"encode_legacy", py_encode_legacy, METH_VARARGS, "Append records as legacy entries; see _encode_py.encode_legacy."},
    {"add_v2", py_add_v2, METH_VARARGS, "fit, then encode_v2 of the records that fit; see _encode_py.add_v2."},
    {"v2_frames", kstore_py_v2_frames, METH_VARARGS,
     "v2 batches around bodies, one after the other; see _encode_py.v2_frames."},
    {"legacy_to_v2", kstore_py_legacy_to_v2, METH_VARARGS,
     "Legacy entries into one group's v2 records, in one call; see _encode_py.legacy_to_v2."},
    {"add_legacy", py_add_legacy, METH_VARARGS, "fit, then encode_legacy of the records that fit; see _encode_py.add_legacy."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_encode_c", "The native twin of kstore_cli.record._encode_py.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__encode_c(void) {
    PyObject *errors = PyImport_ImportModule("kstore_cli.errors");
    if (!errors) return NULL;
    kstore_invalid_record_error = PyObject_GetAttrString(errors, "InvalidRecordError");
    Py_DECREF(errors);
    if (!kstore_invalid_record_error) return NULL;
    if (kstore_encode_convert_init() < 0) return NULL;
    kstore_crc_init();
    return PyModule_Create(&moduledef);
}
