/*
 * The _decode_c extension's columnar mode (see _decode_c.c): records decoded straight into Arrow-ready
 * column buffers, one batch (decode_v2_columns) or a run of plain batches (decode_v2_run) at a time.
 */
#include "_decode_c.h"

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

/* decode_v2_columns' pieces after the row count, in order. */
enum { OFFS, TS, KENDS, KDATA, KVALID, VENDS, VDATA, VVALID, NCOLS };

/* Every column's size up front: growing the value buffer by doubling copied ~1 KiB values twice. */
static int columns_reserve(obuf *c, const parse_out *o) {
    Py_ssize_t n = o->nrecs, key_bytes = 0, value_bytes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (o->recs[i].key_len > 0) key_bytes += o->recs[i].key_len;
        if (o->recs[i].value_len > 0) value_bytes += o->recs[i].value_len;
    }
    if (obuf_reserve(&c[OFFS], n * 8) < 0 || obuf_reserve(&c[TS], n * 8) < 0 || obuf_reserve(&c[KENDS], n * 4) < 0 ||
        obuf_reserve(&c[VENDS], n * 4) < 0 || obuf_reserve(&c[KVALID], n) < 0 || obuf_reserve(&c[VVALID], n) < 0 ||
        obuf_reserve(&c[KDATA], key_bytes) < 0 || obuf_reserve(&c[VDATA], value_bytes) < 0)
        return -1;
    return 0;
}

/* The parsed records appended to the columns (log_append: every timestamp is log_append_ts); 0, or -1. */
static int columns_fill(obuf *c, const uint8_t *b, const parse_out *o, int64_t base_offset, int64_t base_ts,
                        int log_append, int64_t log_append_ts, Py_ssize_t kpos, Py_ssize_t vpos) {
    for (Py_ssize_t i = 0; i < o->nrecs; i++) {
        const rec_t *r = &o->recs[i];
        int64_t off, ts;
        if (__builtin_add_overflow(base_offset, (int64_t)r->offset_delta, &off) ||
            (!log_append && __builtin_add_overflow(base_ts, r->timestamp_delta, &ts))) {
            PyErr_SetString(PyExc_OverflowError, "offset or timestamp beyond int64");
            return -1;
        }
        if (log_append) ts = log_append_ts;
        uint8_t kv = r->key_len >= 0, vv = r->value_len >= 0;
        if (kv) kpos += r->key_len;
        if (vv) vpos += r->value_len;
        if (kpos > INT32_MAX || vpos > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of keys or values in one Arrow array");
            return -1;
        }
        int32_t ke = (int32_t)kpos, ve = (int32_t)vpos;
        if (gput(&c[OFFS], &off, 8) < 0 || gput(&c[TS], &ts, 8) < 0 ||
            gput(&c[KDATA], b + r->key_pos, kv ? r->key_len : 0) < 0 || gput(&c[KENDS], &ke, 4) < 0 ||
            gput(&c[KVALID], &kv, 1) < 0 ||
            gput(&c[VDATA], b + r->value_pos, vv ? r->value_len : 0) < 0 || gput(&c[VENDS], &ve, 4) < 0 ||
            gput(&c[VVALID], &vv, 1) < 0)
            return -1;
    }
    return 0;
}

/*
 * decode_v2_columns: decode a batch's records (same checks and errors as decode_v2_records) into
 * Arrow-ready pieces: offsets and timestamps as native int64, key/value offsets as native int32
 * ends (the running data offset after each row, starting from key_base/value_base), the key/value
 * bytes concatenated, and one validity byte (0 null, 1 set) per row.
 */
PyObject *kstore_py_decode_v2_columns(PyObject *self, PyObject *args) {
    PyObject *obj, *log_append_obj;
    Py_ssize_t pos, end, count, key_base, value_base;
    long long base_offset, base_ts;
    Py_buffer v;
    parse_out o;
    memset(&o, 0, sizeof o);
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
    if (kstore_get_view(obj, &v, pos, end) < 0) return NULL;
    const uint8_t *b = (const uint8_t *)v.buf;
    if (kstore_parse_v2(b, pos, end, count, &o) >= 0 && columns_reserve(c, &o) >= 0 &&
        columns_fill(c, b, &o, base_offset, base_ts, log_append, log_append_ts, key_base, value_base) >= 0) {
        PyObject *count_obj = PyLong_FromSsize_t(o.nrecs);
        if (count_obj) out = obufs_tuple(count_obj, c, NCOLS);
    }
    PyBuffer_Release(&v);
    kstore_parse_out_free(&o);
    for (int i = 0; i < NCOLS; i++) Py_XDECREF(c[i].obj);
    return out;
}

/* pack_validity(bytes of 0/1 per row) -> (Arrow validity bitmap, null count) */
PyObject *kstore_py_pack_validity(PyObject *self, PyObject *obj) {
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

/* What decode_v2_run's caller asks for: the run's limits and the filters of its batches. */
typedef struct {
    Py_ssize_t max_rows, max_bytes;
    int check_crc, stop_txn, with_headers, has_min, has_end;
    int64_t min_off, end_off;
} run_opts;

/*
 * The end of the batch at pos when it may join a run holding n rows in `used` bytes so far, else -1 with
 * *status set: SCAN_MORE when the run is full, SCAN_OTHER for a batch the general path decodes.
 */
static inline Py_ssize_t run_batch_end(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, const run_opts *ro,
                                       Py_ssize_t n, Py_ssize_t used, int *status) {
    int32_t size = s32(be32(b + pos + SIZE_OFFSET));
    int magic = s8(b[pos + MAGIC_OFFSET]);
    if (size < RECORD_OVERHEAD_V0 || (Py_ssize_t)size + LOG_OVERHEAD > end - pos || magic != 2 ||
        (Py_ssize_t)size + LOG_OVERHEAD < V2_HEADER_SIZE) {
        *status = SCAN_OTHER;
        return -1;
    }
    Py_ssize_t entry_end = pos + LOG_OVERHEAD + size;
    const uint8_t *h = b + pos;
    int attributes = s16(be16(h + V2_ATTRIBUTES_OFFSET));
    int32_t count = s32(be32(h + V2_RECORDS_COUNT_OFFSET));
    if (n && ((Py_ssize_t)count > ro->max_rows - n || entry_end - pos > ro->max_bytes - used)) {
        *status = SCAN_MORE;
        return -1;
    }
    if ((ro->check_crc &&
         be32(h + V2_CRC_POS) != kstore_crc32c(h + V2_CRC_START, (size_t)(entry_end - pos - V2_CRC_START))) ||
        (attributes & 0x27) || (ro->stop_txn && (attributes & 0x10)) || count <= 0) {
        *status = SCAN_OTHER;
        return -1;
    }
    return entry_end;
}

/* One row's offset, timestamp, key and value appended; e[0] and e[1] are the key and value data ends. */
static inline int append_row(obuf *c, int64_t *e, const uint8_t *b, const rec_t *r, int64_t off, int64_t ts,
                             int32_t ts_type) {
    uint8_t kv = r->key_len >= 0, vv = r->value_len >= 0;
    if (kv) e[0] += r->key_len;
    if (vv) e[1] += r->value_len;
    int32_t ke = (int32_t)e[0], ve = (int32_t)e[1];
    if (gput(&c[C_OFFS], &off, 8) < 0 || gput(&c[C_TS], &ts, 8) < 0 || gput(&c[C_TSTYPE], &ts_type, 4) < 0 ||
        gput(&c[C_KDATA], b + r->key_pos, kv ? r->key_len : 0) < 0 || gput(&c[C_KENDS], &ke, 4) < 0 ||
        gput(&c[C_KVALID], &kv, 1) < 0 ||
        gput(&c[C_VDATA], b + r->value_pos, vv ? r->value_len : 0) < 0 || gput(&c[C_VENDS], &ve, 4) < 0 ||
        gput(&c[C_VVALID], &vv, 1) < 0)
        return -1;
    return 0;
}

/* One row's headers appended (e[2..4]: the header list, key data and value data ends); a STAGE_ value. */
static inline int append_row_headers(obuf *c, int64_t *e, const uint8_t *b, const parse_out *o, const rec_t *r) {
    for (int32_t k = 0; k < r->header_count; k++) {
        const hdr_t *hd = &o->hdrs[r->header_start + k];
        if (!strict_utf8(b + hd->key_pos, hd->key_len)) return STAGE_OTHER;
        uint8_t hv = hd->value_len >= 0;
        e[3] += hd->key_len;
        if (hv) e[4] += hd->value_len;
        int32_t hke = (int32_t)e[3], hve = (int32_t)e[4];
        if (gput(&c[C_HKDATA], b + hd->key_pos, hd->key_len) < 0 || gput(&c[C_HKENDS], &hke, 4) < 0 ||
            gput(&c[C_HVDATA], b + hd->value_pos, hv ? hd->value_len : 0) < 0 ||
            gput(&c[C_HVENDS], &hve, 4) < 0 || gput(&c[C_HVALID], &hv, 1) < 0)
            return STAGE_ERROR;
    }
    e[2] += r->header_count;
    int32_t he = (int32_t)e[2];
    return gput(&c[C_HENDS], &he, 4) < 0 ? STAGE_ERROR : STAGE_OK;
}

/*
 * The parsed batch whose header is h appended to the columns (ends: the running data ends); a STAGE_ value.
 * Rows of a batch that turns out not to belong to the run are cut off again.
 */
static int append_batch(const uint8_t *b, const uint8_t *h, const parse_out *o, obuf *c, int64_t *ends,
                        const run_opts *ro) {
    int attributes = s16(be16(h + V2_ATTRIBUTES_OFFSET));
    int64_t base_offset = s64(be64(h)), base_ts = s64(be64(h + V2_BASE_TIMESTAMP_OFFSET));
    int64_t max_ts = s64(be64(h + V2_MAX_TIMESTAMP_OFFSET));
    int log_append = (attributes & 0x08) != 0;
    int32_t ts_type = log_append;
    Py_ssize_t mark[C_N];
    for (int i = 0; i < C_N; i++) mark[i] = c[i].n;
    int64_t e[5];
    memcpy(e, ends, sizeof e);
    int stage = STAGE_OK;
    for (Py_ssize_t i = 0; i < o->nrecs && stage == STAGE_OK; i++) {
        const rec_t *r = &o->recs[i];
        int64_t off, ts = max_ts;
        if (__builtin_add_overflow(base_offset, (int64_t)r->offset_delta, &off) ||
            (!log_append && __builtin_add_overflow(base_ts, r->timestamp_delta, &ts)) ||
            (ro->has_min == 1 && off < ro->min_off) || ro->has_min == 2 || (ro->has_end == 1 && off >= ro->end_off) ||
            ro->has_end == 3) {
            stage = STAGE_OTHER;
            break;
        }
        if (append_row(c, e, b, r, off, ts, ts_type) < 0) return STAGE_ERROR;
        if (ro->with_headers && (stage = append_row_headers(c, e, b, o, r)) != STAGE_OK) break;
        for (int k = 0; k < 5; k++)
            if (e[k] > INT32_MAX) stage = STAGE_OVERFLOW;
    }
    if (stage == STAGE_OK) memcpy(ends, e, sizeof e);
    else if (stage != STAGE_ERROR)
        for (int i = 0; i < C_N; i++) c[i].n = mark[i];
    return stage;
}

/* The run's batches from *pos (moved past them) appended to the columns: a SCAN_ status, or -1 on an error. */
static int append_run(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, const run_opts *ro, parse_out *o, obuf *c,
                      int64_t *ends, Py_ssize_t *n, Py_ssize_t *batches) {
    Py_ssize_t p = *pos, used = 0, limit = end - HEADER_SIZE_UP_TO_MAGIC;
    int status = SCAN_END;
    /* Values take most of a run's bytes: room for them up front spares the buffer's regrowth. */
    if (p < limit && obuf_reserve(&c[C_VDATA], end - p < ro->max_bytes ? end - p : ro->max_bytes) < 0) return -1;
    while (p < limit) {
        Py_ssize_t entry_end = run_batch_end(b, p, end, ro, *n, used, &status);
        if (entry_end < 0) break;
        int32_t count = s32(be32(b + p + V2_RECORDS_COUNT_OFFSET));
        if (kstore_parse_v2(b, p + V2_HEADER_SIZE, entry_end, count, o) < 0) {
            if (!PyErr_ExceptionMatches(kstore_InvalidRecordError)) return -1;
            PyErr_Clear();
            status = SCAN_OTHER;
            break;
        }
        int stage = append_batch(b, b + p, o, c, ends, ro);
        if (stage == STAGE_ERROR) return -1;
        if (stage != STAGE_OK) {
            status = stage == STAGE_OVERFLOW && *n ? SCAN_MORE : SCAN_OTHER;
            break;
        }
        *n += o->nrecs;
        (*batches)++;
        used += entry_end - p;
        p = entry_end;
    }
    *pos = p;
    return status;
}

/* decode_v2_run: see _decode_py.decode_v2_run (the reference). */
PyObject *kstore_py_decode_v2_run(PyObject *self, PyObject *args) {
    PyObject *obj, *min_obj, *end_obj;
    Py_ssize_t pos, end;
    run_opts ro = {0};
    long long bases[5];
    if (!PyArg_ParseTuple(args, "OnnnnpOOpp(LLLLL)", &obj, &pos, &end, &ro.max_rows, &ro.max_bytes, &ro.check_crc,
                          &min_obj, &end_obj, &ro.stop_txn, &ro.with_headers, &bases[0], &bases[1], &bases[2],
                          &bases[3], &bases[4]))
        return NULL;
    if (opt_bound(min_obj, &ro.has_min, &ro.min_off) < 0 || opt_bound(end_obj, &ro.has_end, &ro.end_off) < 0)
        return NULL;
    Py_buffer v;
    if (kstore_get_view(obj, &v, pos, end) < 0) return NULL;
    parse_out o;
    memset(&o, 0, sizeof o);
    obuf c[C_N];
    memset(c, 0, sizeof c);
    PyObject *out = NULL;
    int64_t ends[5];
    for (int i = 0; i < 5; i++) ends[i] = bases[i];
    Py_ssize_t n = 0, batches = 0;
    int status = append_run((const uint8_t *)v.buf, &pos, end, &ro, &o, c, ends, &n, &batches);
    if (status >= 0) {
        PyObject *cols = obufs_tuple(NULL, c, C_N);
        if (cols) out = Py_BuildValue("(nninN)", n, pos, status, batches, cols);
    }
    PyBuffer_Release(&v);
    kstore_parse_out_free(&o);
    for (int i = 0; i < C_N; i++) Py_XDECREF(c[i].obj);
    return out;
}
