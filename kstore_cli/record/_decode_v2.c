/*
 * The _decode_c extension's parsers (see _decode_c.c): Kafka's v2 records (DefaultRecord.readFrom) into
 * spans of the buffer, and legacy (magic 0/1) entries.
 */
#include "_decode_c.h"

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

void kstore_parse_out_free(parse_out *o) {
    if (o->recs != o->inline_recs) PyMem_Free(o->recs);
    PyMem_Free(o->hdrs);
    o->recs = NULL;
    o->hdrs = NULL;
}

static int set_invalid(const char *msg) {
    PyErr_SetString(kstore_InvalidRecordError, msg);
    return -1;
}

/* parse_v2 prefetches the batch this far ahead of the record it parses. A record's fields sit on both
 * ends of its value (lengths before it, header count after it), so with ~1 KiB values every record
 * waited for memory twice; the window made decoding them 2.5x faster (bench decode:v2-none-1K-x100). */
#define PREFETCH_AHEAD 2048

/* A field read that failed: an underflow is Kafka's "invalid structure", a too-long varint has its error set. */
static inline int field_fail(int rc) {
    return rc == RD_UNDERFLOW ? set_invalid(INVALID_STRUCTURE) : -1;
}

/* Room in o->hdrs for `more` header spans. */
static int hdrs_reserve(parse_out *o, int32_t more) {
    Py_ssize_t cap = o->caphdrs * 2 + more + 8;
    hdr_t *h = PyMem_Realloc(o->hdrs, (size_t)cap * sizeof(hdr_t));
    if (!h) { PyErr_NoMemory(); return -1; }
    o->hdrs = h;
    o->caphdrs = cap;
    return 0;
}

/* A record's `count` headers from *pp (moved past them), their spans appended to o->hdrs. */
static inline int parse_headers(const uint8_t *b, Py_ssize_t *pp, Py_ssize_t end, int32_t count, parse_out *o) {
    char msg[256];
    int rc;
    Py_ssize_t p = *pp;
    if (o->caphdrs - o->nhdrs < count && hdrs_reserve(o, count) < 0) return -1;
    for (int32_t h = 0; h < count; h++) {
        int32_t hk_len, hv_len;
        if ((rc = dec_varint(b, &p, end, &hk_len)) != RD_OK) return field_fail(rc);
        if (hk_len < 0) {
            snprintf(msg, sizeof msg, "Invalid negative header key size %d", (int)hk_len);
            return set_invalid(msg);
        }
        Py_ssize_t hk_pos = p;
        p += hk_len;
        if ((rc = dec_varint(b, &p, end, &hv_len)) != RD_OK) return field_fail(rc);
        Py_ssize_t hv_pos = p;
        if (hv_len < 0) hv_len = -1; else p += hv_len;
        if (p > end) return field_fail(RD_UNDERFLOW);
        hdr_t *hd = &o->hdrs[o->nhdrs++];
        hd->key_pos = hk_pos;
        hd->key_len = hk_len;
        hd->value_pos = hv_pos;
        hd->value_len = hv_len;
    }
    *pp = p;
    return 0;
}

/* The fields of the record at pos (its `length` bytes start at body and end at record_end), appended to o. */
static inline int parse_record(const uint8_t *b, Py_ssize_t pos, Py_ssize_t body, int32_t length, Py_ssize_t end,
                               parse_out *o) {
    char msg[256];
    Py_ssize_t p = body + 1, record_end = body + (Py_ssize_t)length; /* attributes: unused */
    int64_t ts_delta;
    int32_t offset_delta, key_len, value_len, header_count;
    int rc;
    if ((rc = dec_varlong(b, &p, end, &ts_delta)) != RD_OK || (rc = dec_varint(b, &p, end, &offset_delta)) != RD_OK ||
        (rc = dec_varint(b, &p, end, &key_len)) != RD_OK)
        return field_fail(rc);
    Py_ssize_t key_pos = p;
    if (key_len < 0) key_len = -1; else p += key_len;
    if ((rc = dec_varint(b, &p, end, &value_len)) != RD_OK) return field_fail(rc);
    Py_ssize_t value_pos = p;
    if (value_len < 0) value_len = -1; else p += value_len;
    if ((rc = dec_varint(b, &p, end, &header_count)) != RD_OK) return field_fail(rc);
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
    if (header_count && parse_headers(b, &p, end, header_count, o) < 0) return -1;
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
    return 0;
}

/*
 * DefaultRecord.readFrom for `count` records in b[pos:end], then the leftover-bytes check of
 * DefaultRecordBatch's iterator. Returns 0, or -1 with InvalidRecordError set (same messages as
 * the twin, in the same order of checks).
 */
int kstore_parse_v2(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t count, parse_out *o) {
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
        if (length < 0 || body + (Py_ssize_t)length > end) {
            snprintf(msg, sizeof msg,
                     "Invalid record size: expected %d bytes in record payload, but instead the buffer has only %zd remaining bytes.",
                     (int)length, end - body);
            return set_invalid(msg);
        }
        if (parse_record(b, pos, body, length, end, o) < 0) return -1;
        pos = body + (Py_ssize_t)length;
    }
    if (pos != end) return set_invalid("Incorrect declared batch size, records still remaining in file");
    return 0;
}

PyObject *kstore_py_decode_v2_records(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos, end, count;
    Py_buffer v;
    parse_out o;
    memset(&o, 0, sizeof o);
    if (!PyArg_ParseTuple(args, "Onnn", &obj, &pos, &end, &count)) return NULL;
    if (kstore_get_view(obj, &v, pos, end) < 0) return NULL;
    int rc = kstore_parse_v2((const uint8_t *)v.buf, pos, end, count, &o);
    PyBuffer_Release(&v);
    if (rc < 0) { kstore_parse_out_free(&o); return NULL; }
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
    kstore_parse_out_free(&o);
    return list;
error:
    Py_XDECREF(list);
    kstore_parse_out_free(&o);
    return NULL;
}

/* ------------------------------------------------------------------ legacy messages */

/* The legacy entry at pos: 1 when parsed, 0 when it does not fit before end, -1 with InvalidRecordError set. */
int kstore_parse_legacy(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, leg_t *e) {
    char msg[160];
    if (end - pos < LOG_OVERHEAD) return 0;
    e->offset = s64(be64(b + pos));
    int32_t size = s32(be32(b + pos + SIZE_OFFSET));
    if (size < RECORD_OVERHEAD_V0) {
        snprintf(msg, sizeof msg, "Record size %d is less than the minimum record overhead (%d)", (int)size,
                 RECORD_OVERHEAD_V0);
        PyErr_SetString(kstore_InvalidRecordError, msg);
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
    PyErr_SetString(kstore_InvalidRecordError, INVALID_STRUCTURE);
    return -1;
}

PyObject *kstore_py_decode_legacy_message(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos, end;
    Py_buffer v;
    leg_t e;
    if (!PyArg_ParseTuple(args, "Onn", &obj, &pos, &end)) return NULL;
    if (kstore_get_view(obj, &v, pos, end) < 0) return NULL;
    int rc = kstore_parse_legacy((const uint8_t *)v.buf, pos, end, &e);
    PyBuffer_Release(&v);
    if (rc < 0) return NULL;
    if (rc == 0) Py_RETURN_NONE;
    return Py_BuildValue("(LnkiiLninin)", (long long)e.offset, e.size, (unsigned long)e.crc, e.magic, e.attributes,
                         (long long)e.timestamp, e.key_pos, (int)e.key_len, e.value_pos, (int)e.value_len, e.msg);
}

