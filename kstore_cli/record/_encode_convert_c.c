/*
 * convert-format's fused paths of the _encode_c extension (declared in _encode_c.h, registered by
 * _encode_c.c): v2_frames, the v2 batches around encoded bodies, and legacy_to_v2, legacy entries
 * into one group's v2 records in one call. Same contract as _encode_c.c: exactly the Python twin's
 * results and errors (kstore_cli/record/_encode_py.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_wire.h" /* CRC-32C of the frames, CRC-32 of the legacy wrappers */
#include "_encode_c.h"

/* ------------------------------------------------------------------ v2_frames */

/* Holds every body's buffer (*held of them, also on failure) and sums the batches' sizes into *total;
 * 0, or -1 with an error set. */
static int hold_bodies(PyObject *bseq, Py_ssize_t n, Py_buffer *views, Py_ssize_t *held, Py_ssize_t *total) {
    for (; *held < n; (*held)++) {
        Py_buffer *v = &views[*held];
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(bseq, *held), v, PyBUF_SIMPLE) < 0) return -1;
        if (v->len > MAX_INT32 - 49 || *total > PY_SSIZE_T_MAX - 61 - v->len) {
            PyBuffer_Release(v);
            PyErr_SetString(PyExc_OverflowError, "batch larger than 2 GiB");
            return -1;
        }
        *total += 61 + v->len;
    }
    return 0;
}

/* One v2 batch at p: the header from its tuple, then the body, then the CRC; 0, or -1 with an error set. */
static int write_frame(uint8_t *p, PyObject *header, const Py_buffer *body) {
    long long base_offset, base_ts, max_ts, pid;
    int delta, attributes, epoch, pepoch, seq, count;
    if (!PyArg_ParseTuple(header, "LiiLLiLiii;a v2 header is (base_offset, "
                          "last_offset_delta, attributes, base_timestamp, max_timestamp, partition_leader_epoch, "
                          "producer_id, producer_epoch, base_sequence, count)", &base_offset, &delta, &attributes,
                          &base_ts, &max_ts, &epoch, &pid, &pepoch, &seq, &count))
        return -1;
    if (attributes < -32768 || attributes > 32767 || pepoch < -32768 || pepoch > 32767) {
        PyErr_SetString(PyExc_OverflowError, "attributes and producer epoch are int16");
        return -1;
    }
    Py_ssize_t len = body->len;
    put_be64(p, (uint64_t)base_offset);
    put_be32(p + V2_LENGTH_OFFSET, (uint32_t)(V2_HEADER_SIZE - LOG_OVERHEAD + len));
    put_be32(p + V2_PARTITION_LEADER_EPOCH_OFFSET, (uint32_t)epoch);
    p[MAGIC_OFFSET] = 2;
    put_be16(p + V2_ATTRIBUTES_OFFSET, (uint16_t)attributes);
    put_be32(p + V2_LAST_OFFSET_DELTA_OFFSET, (uint32_t)delta);
    put_be64(p + V2_BASE_TIMESTAMP_OFFSET, (uint64_t)base_ts);
    put_be64(p + V2_MAX_TIMESTAMP_OFFSET, (uint64_t)max_ts);
    put_be64(p + V2_PRODUCER_ID_OFFSET, (uint64_t)pid);
    put_be16(p + V2_PRODUCER_EPOCH_OFFSET, (uint16_t)pepoch);
    put_be32(p + V2_BASE_SEQUENCE_OFFSET, (uint32_t)seq);
    put_be32(p + V2_RECORDS_COUNT_OFFSET, (uint32_t)count);
    if (len) memcpy(p + V2_HEADER_SIZE, body->buf, (size_t)len);
    put_be32(p + V2_CRC_POS, crc32c(p + V2_CRC_START, (size_t)(V2_HEADER_SIZE - V2_CRC_START + len)));
    return 0;
}

/* v2_frames(bodies, headers); see _encode_py.v2_frames. */
PyObject *kstore_py_v2_frames(PyObject *self, PyObject *args) {
    PyObject *bodies, *headers;
    if (!PyArg_ParseTuple(args, "OO", &bodies, &headers)) return NULL;
    PyObject *bseq = PySequence_Fast(bodies, "bodies must be a sequence");
    if (!bseq) return NULL;
    PyObject *hseq = PySequence_Fast(headers, "headers must be a sequence");
    if (!hseq) { Py_DECREF(bseq); return NULL; }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(bseq);
    PyObject *result = NULL;
    Py_buffer *views = NULL;
    Py_ssize_t held = 0, total = 0;
    if (PySequence_Fast_GET_SIZE(hseq) != n) {
        PyErr_SetString(PyExc_ValueError, "a header per body");
        goto done;
    }
    views = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Py_buffer));
    if (!views) { PyErr_NoMemory(); goto done; }
    if (hold_bodies(bseq, n, views, &held, &total) < 0) goto done;
    result = PyBytes_FromStringAndSize(NULL, total);
    if (!result) goto done;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (write_frame(p, PySequence_Fast_GET_ITEM(hseq, i), &views[i]) < 0) {
            Py_CLEAR(result);
            goto done;
        }
        p += V2_HEADER_SIZE + views[i].len;
    }
done:
    for (Py_ssize_t i = 0; i < held; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    Py_DECREF(bseq);
    Py_DECREF(hseq);
    return result;
}

/* ------------------------------------------------------------------ legacy_to_v2 (convert-format's fast path) */

static PyObject *zlib_decompressobj; /* zlib.decompressobj: gzip goes through the codec library */
static PyObject *str_decompress, *str_eof, *str_unused_data;

#define RUN_STOP 0
#define RUN_FULL 1
#define RUN_KEY 2

/* A wrapper taken: its table and what the group needs to know of it. */
typedef struct {
    PyObject *table;
    Py_ssize_t size;
    int64_t offset;
    int codec, ts_type, has_lat;
    int64_t lat;
} Wrapper;

/* Clears an Exception raised on data (the regular path raises it again where it belongs); anything
 * else (a BaseException such as KeyboardInterrupt) stays: -1. */
static int refuse(void) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyErr_Clear();
    return 0;
}

/* One gzip member inflated to at most max_inflate bytes, nothing after it: a new reference, NULL with
 * no error when that is not the case, NULL with an error for a BaseException. */
static PyObject *inflate_gzip(const uint8_t *p, int64_t len, int64_t max_inflate) {
    PyObject *view = PyMemoryView_FromMemory((char *)p, (Py_ssize_t)len, PyBUF_READ);
    if (!view) return NULL;
    PyObject *d = PyObject_CallFunction(zlib_decompressobj, "i", 16 + 15);
    PyObject *data = NULL, *eof = NULL, *unused = NULL;
    if (!d) goto done;
    PyObject *room = PyLong_FromLongLong(max_inflate + 1);
    if (!room) goto done;
    data = PyObject_CallMethodObjArgs(d, str_decompress, view, room, NULL);
    Py_DECREF(room);
    if (!data) goto done;
    eof = PyObject_GetAttr(d, str_eof);
    unused = eof ? PyObject_GetAttr(d, str_unused_data) : NULL;
    if (!unused) { Py_CLEAR(data); goto done; }
    if (eof != Py_True || !PyBytes_Check(unused) || PyBytes_GET_SIZE(unused) != 0 || !PyBytes_Check(data) ||
        PyBytes_GET_SIZE(data) > max_inflate)
        Py_CLEAR(data);
done:
    Py_XDECREF(unused);
    Py_XDECREF(eof);
    Py_XDECREF(d);
    Py_DECREF(view);
    if (!data && PyErr_Occurred() && refuse() == 0) return NULL;
    return data;
}

/* The wrapper at pos taken as _encode_py._take_wrapper takes it: 1 taken (w filled), 0 not, -1 error. */
static int take_wrapper(PyObject *src, const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, int64_t max_inflate,
                        Wrapper *w) {
    if (end - pos < HEADER_SIZE_UP_TO_MAGIC) return 0;
    int32_t size = s32(be32(b + pos + SIZE_OFFSET));
    if (size < RECORD_OVERHEAD_V0 || (int64_t)size > (int64_t)(end - pos) - LOG_OVERHEAD || b[pos + MAGIC_OFFSET] > 1) return 0;
    Py_ssize_t total = LOG_OVERHEAD + (Py_ssize_t)size;
    if (crc32_ieee(b + pos + LEGACY_MAGIC_OFFSET, (size_t)(total - LEGACY_MAGIC_OFFSET)) != be32(b + pos + LEGACY_CRC_OFFSET)) return 0;
    int64_t f[9];
    int r = kstore_legacy_entry(b, pos, pos + total, f);
    if (r < 0) return refuse();
    if (r == 0) return 0;
    if (f[0] < 0) return 0; /* an offset Kafka rejects: the regular path refuses it */
    int magic = (int)f[2], attributes = (int)f[3];
    w->size = total;
    w->offset = f[0];
    w->has_lat = magic > 0 && (attributes & 0x08);
    w->lat = w->has_lat ? f[4] : 0;
    w->ts_type = w->has_lat ? 1 : 0;
    int codec = w->codec = attributes & 0x07;
    if (codec == 0) {
        Out cols[3] = {{0}};
        int64_t sp[4] = {f[5], f[6], f[7], f[8]};
        if (put_q(&cols[0], f[0]) < 0 || put_q(&cols[1], f[4]) < 0 || kstore_out_reserve(&cols[2], 32) < 0) {
            for (int i = 0; i < 3; i++) PyMem_Free(cols[i].buf);
            return -1;
        }
        memcpy(cols[2].buf, sp, 32);
        cols[2].len = 32;
        w->table = kstore_table_tuple(1, src, cols, 3);
        return w->table ? 1 : -1;
    }
    if (codec != 1 || f[8] < 0) return 0; /* gzip only */
    PyObject *data = inflate_gzip(b + f[7], f[8], max_inflate);
    if (!data) return PyErr_Occurred() ? -1 : 0;
    w->table = kstore_legacy_table_of(data, magic, f[0], w->has_lat, w->lat);
    Py_DECREF(data);
    if (!w->table) return refuse();
    return 1;
}

/* v, or None when not `has`: a new reference. */
static PyObject *long_or_none(int has, int64_t v) {
    if (has) return PyLong_FromLongLong(v);
    Py_INCREF(Py_None);
    return Py_None;
}

/* The group being filled: (codec, timestamp_type, log_append_time or None, base_offset, base_timestamp,
 * size) once active. */
typedef struct {
    int active, codec, ts_type, has_lat;
    long long lat, base, base_ts, size;
} Group;

/* What a call took and added: legacy_to_v2's counts. */
typedef struct {
    long long wrappers, taken_bytes, records, added, last_wrapper, max_ts, last;
} Progress;

/* g from the group argument (None: not active); 0, or -1 with an error set. */
static int parse_group(PyObject *group, Group *g) {
    g->active = group != Py_None;
    if (!g->active) return 0;
    PyObject *lat_obj;
    if (!PyArg_ParseTuple(group, "iiOLLL", &g->codec, &g->ts_type, &lat_obj, &g->base, &g->base_ts, &g->size))
        return -1;
    g->has_lat = lat_obj != Py_None;
    if (g->has_lat && (g->lat = PyLong_AsLongLong(lat_obj)) == -1 && PyErr_Occurred()) return -1;
    return 0;
}

/* The carry (table, start, codec, timestamp_type, log_append_time or None) as the current wrapper, its
 * table a new reference on success; 0, or -1 with an error set (nothing referenced). */
static int parse_carry(PyObject *carry, Wrapper *cur, Py_ssize_t *start) {
    if (carry == Py_None) return 0;
    PyObject *lat_obj;
    if (!PyArg_ParseTuple(carry, "OniiO", &cur->table, start, &cur->codec, &cur->ts_type, &lat_obj)) return -1;
    cur->has_lat = lat_obj != Py_None;
    if (cur->has_lat && (cur->lat = PyLong_AsLongLong(lat_obj)) == -1 && PyErr_Occurred()) return -1;
    Py_INCREF(cur->table);
    return 0;
}

/* The wrapper at *pos into cur when it joins the group: 1 taken (*pos and the counts advanced), 0 not
 * (*reason RUN_KEY when it was refused for its timestamp type, log append time or codec), -1 error. */
static int next_wrapper(PyObject *src, const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, int64_t max_inflate,
                        const Group *g, int by_codec, Wrapper *cur, Progress *pr, int *reason) {
    int r = take_wrapper(src, b, *pos, end, max_inflate, cur);
    if (r <= 0) return r;
    if (g->active && (cur->ts_type != g->ts_type || cur->has_lat != g->has_lat || (cur->has_lat && cur->lat != g->lat) ||
                      (by_codec && cur->codec != g->codec))) {
        Py_CLEAR(cur->table);
        *reason = RUN_KEY;
        return 0;
    }
    *pos += cur->size;
    pr->wrappers++;
    pr->taken_bytes += cur->size;
    pr->last_wrapper = cur->offset;
    pr->records += PyLong_AsSsize_t(PyTuple_GET_ITEM(cur->table, 0));
    return 1;
}

/* The records of cur's table from *start that fit, written as v2 records of the group (started here
 * when not active): 1 all of them, 0 the group is full (*start: the first left), -1 error. */
static int add_records(PyObject *out, const Wrapper *cur, Py_ssize_t *start, int64_t limit, int64_t fresh_size,
                       Group *g, Progress *pr) {
    Table t;
    if (kstore_table_open(cur->table, &t) < 0) return -1;
    Py_ssize_t first = *start;
    if (first < 0 || first >= t.n) {
        kstore_table_release(&t);
        PyErr_SetString(PyExc_ValueError, "carry start out of the table");
        return -1;
    }
    int fresh = !g->active;
    if (fresh) {
        *g = (Group){1, cur->codec, cur->ts_type, cur->has_lat, cur->lat, ld64(t.offsets + 8 * first),
                     ld64(t.timestamps + 8 * first), fresh_size};
    }
    int64_t sz = g->size, m = 0;
    Py_ssize_t stop = kstore_fit_records(&t, first, 2, &sz, limit, g->base, fresh);
    if (stop < 0 || (stop > first && kstore_write_v2(out, &t, first, stop, g->base, g->base_ts, &m) < 0)) {
        kstore_table_release(&t);
        return -1;
    }
    g->size = sz;
    if (stop > first) {
        pr->max_ts = pr->added ? (m > pr->max_ts ? m : pr->max_ts) : m;
        pr->added += stop - first;
        pr->last = ld64(t.offsets + 8 * (stop - 1));
    }
    Py_ssize_t n = t.n;
    kstore_table_release(&t);
    if (stop < n) {
        *start = stop;
        return 0;
    }
    return 1;
}

/* legacy_to_v2's result tuple (see _encode_py.legacy_to_v2); NULL with an error set. */
static PyObject *run_result(int reason, Py_ssize_t pos, const Progress *pr, const Group *g, const Wrapper *cur,
                            Py_ssize_t start) {
    PyObject *result = NULL;
    /* "N": each long_or_none reference goes to its tuple (or is dropped when building fails). */
    PyObject *group_out = g->active ? Py_BuildValue("iiNLLL", g->codec, g->ts_type, long_or_none(g->has_lat, g->lat),
                                                    g->base, g->base_ts, g->size)
                                    : long_or_none(0, 0);
    PyObject *carry_out = reason == RUN_FULL ? Py_BuildValue("OniiN", cur->table, start, cur->codec, cur->ts_type,
                                                             long_or_none(cur->has_lat, cur->lat))
                                             : long_or_none(0, 0);
    if (group_out && carry_out)
        result = Py_BuildValue("inLLLNOLNNO", reason, pos, pr->wrappers, pr->taken_bytes, pr->records,
                               long_or_none(pr->wrappers > 0, pr->last_wrapper), group_out, pr->added,
                               long_or_none(pr->added > 0, pr->max_ts), long_or_none(pr->added > 0, pr->last),
                               carry_out);
    Py_XDECREF(group_out);
    Py_XDECREF(carry_out);
    return result;
}

/* legacy_to_v2(buf, pos, end, max_inflate, out, group, limit, fresh_size, carry, by_codec); see
 * _encode_py.legacy_to_v2. */
PyObject *kstore_py_legacy_to_v2(PyObject *self, PyObject *args) {
    PyObject *src, *out, *group, *carry;
    Py_ssize_t pos, end;
    long long max_inflate, limit, fresh_size;
    int by_codec;
    if (!PyArg_ParseTuple(args, "OnnLO!OLLOp", &src, &pos, &end, &max_inflate, &PyByteArray_Type, &out, &group, &limit,
                          &fresh_size, &carry, &by_codec))
        return NULL;
    if (carry != Py_None && group != Py_None) {
        PyErr_SetString(PyExc_ValueError, "a carry starts a new group");
        return NULL;
    }
    Group g = {0};
    Wrapper cur = {0};
    Py_ssize_t start = 0;
    if (parse_group(group, &g) < 0 || parse_carry(carry, &cur, &start) < 0) return NULL;
    Py_buffer sv;
    if (PyObject_GetBuffer(src, &sv, PyBUF_SIMPLE) < 0) { Py_XDECREF(cur.table); return NULL; }
    if (end > sv.len) end = sv.len;
    if (pos < 0) pos = end;
    Progress pr = {0};
    int reason = RUN_STOP;
    PyObject *result = NULL;
    for (;;) {
        if (!cur.table) {
            int r = next_wrapper(src, sv.buf, &pos, end, max_inflate, &g, by_codec, &cur, &pr, &reason);
            if (r < 0) goto fail;
            if (r == 0) break;
            start = 0;
        }
        int r = add_records(out, &cur, &start, limit, fresh_size, &g, &pr);
        if (r < 0) goto fail;
        if (r == 0) {
            reason = RUN_FULL;
            break;
        }
        Py_CLEAR(cur.table);
    }
    result = run_result(reason, pos, &pr, &g, &cur, start);
fail:
    Py_XDECREF(cur.table);
    PyBuffer_Release(&sv);
    return result;
}

int kstore_encode_convert_init(void) {
    PyObject *zlib = PyImport_ImportModule("zlib");
    if (!zlib) return -1;
    zlib_decompressobj = PyObject_GetAttrString(zlib, "decompressobj");
    Py_DECREF(zlib);
    if (!zlib_decompressobj) return -1;
    str_decompress = PyUnicode_InternFromString("decompress");
    str_eof = PyUnicode_InternFromString("eof");
    str_unused_data = PyUnicode_InternFromString("unused_data");
    if (!str_decompress || !str_eof || !str_unused_data) return -1;
    kstore_crc_init(); /* this file's copy of the tables (_wire.h is included, not linked) */
    return 0;
}
