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
    for (; held < n; held++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(bseq, held), &views[held], PyBUF_SIMPLE) < 0) goto done;
        if (views[held].len > MAX_INT32 - 49 || total > PY_SSIZE_T_MAX - 61 - views[held].len) {
            PyBuffer_Release(&views[held]);
            PyErr_SetString(PyExc_OverflowError, "batch larger than 2 GiB");
            goto done;
        }
        total += 61 + views[held].len;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (!result) goto done;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < n; i++) {
        long long base_offset, base_ts, max_ts, pid;
        int delta, attributes, epoch, pepoch, seq, count;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(hseq, i), "LiiLLiLiii;a v2 header is (base_offset, "
                              "last_offset_delta, attributes, base_timestamp, max_timestamp, partition_leader_epoch, "
                              "producer_id, producer_epoch, base_sequence, count)", &base_offset, &delta, &attributes,
                              &base_ts, &max_ts, &epoch, &pid, &pepoch, &seq, &count)) {
            Py_CLEAR(result);
            goto done;
        }
        if (attributes < -32768 || attributes > 32767 || pepoch < -32768 || pepoch > 32767) {
            PyErr_SetString(PyExc_OverflowError, "attributes and producer epoch are int16");
            Py_CLEAR(result);
            goto done;
        }
        Py_ssize_t len = views[i].len;
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
        if (len) memcpy(p + V2_HEADER_SIZE, views[i].buf, (size_t)len);
        put_be32(p + V2_CRC_POS, crc32c(p + V2_CRC_START, (size_t)(V2_HEADER_SIZE - V2_CRC_START + len)));
        p += V2_HEADER_SIZE + len;
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
    /* the group: (codec, timestamp_type, log_append_time or None, base_offset, base_timestamp, size) */
    int active = group != Py_None, g_codec = 0, g_ts_type = 0, g_has_lat = 0;
    long long g_lat = 0, g_base = 0, g_base_ts = 0, g_size = 0;
    if (active) {
        PyObject *lat_obj;
        if (!PyArg_ParseTuple(group, "iiOLLL", &g_codec, &g_ts_type, &lat_obj, &g_base, &g_base_ts, &g_size))
            return NULL;
        g_has_lat = lat_obj != Py_None;
        if (g_has_lat && (g_lat = PyLong_AsLongLong(lat_obj)) == -1 && PyErr_Occurred()) return NULL;
    }
    Wrapper cur = {0};
    Py_ssize_t start = 0;
    if (carry != Py_None) {
        PyObject *lat_obj;
        if (!PyArg_ParseTuple(carry, "OniiO", &cur.table, &start, &cur.codec, &cur.ts_type, &lat_obj)) return NULL;
        cur.has_lat = lat_obj != Py_None;
        if (cur.has_lat && (cur.lat = PyLong_AsLongLong(lat_obj)) == -1 && PyErr_Occurred()) return NULL;
        Py_INCREF(cur.table);
    }
    Py_buffer sv;
    if (PyObject_GetBuffer(src, &sv, PyBUF_SIMPLE) < 0) { Py_XDECREF(cur.table); return NULL; }
    const uint8_t *b = sv.buf;
    if (end > sv.len) end = sv.len;
    if (pos < 0) pos = end;
    long long wrappers = 0, taken_bytes = 0, records = 0, added = 0, last_wrapper = 0, max_ts = 0, last = 0;
    int reason = RUN_STOP;
    PyObject *result = NULL;
    for (;;) {
        if (!cur.table) {
            int r = take_wrapper(src, b, pos, end, max_inflate, &cur);
            if (r < 0) goto fail;
            if (r == 0) break;
            if (active && (cur.ts_type != g_ts_type || cur.has_lat != g_has_lat || (cur.has_lat && cur.lat != g_lat) ||
                           (by_codec && cur.codec != g_codec))) {
                Py_CLEAR(cur.table);
                reason = RUN_KEY;
                break;
            }
            pos += cur.size;
            wrappers++;
            taken_bytes += cur.size;
            last_wrapper = cur.offset;
            start = 0;
            records += PyLong_AsSsize_t(PyTuple_GET_ITEM(cur.table, 0));
        }
        Table t;
        if (kstore_table_open(cur.table, &t) < 0) goto fail;
        if (start < 0 || start >= t.n) {
            kstore_table_release(&t);
            PyErr_SetString(PyExc_ValueError, "carry start out of the table");
            goto fail;
        }
        int fresh = !active;
        if (fresh) {
            active = 1;
            g_codec = cur.codec;
            g_ts_type = cur.ts_type;
            g_has_lat = cur.has_lat;
            g_lat = cur.lat;
            g_base = ld64(t.offsets + 8 * start);
            g_base_ts = ld64(t.timestamps + 8 * start);
            g_size = fresh_size;
        }
        int64_t sz = g_size, m = 0;
        Py_ssize_t stop = kstore_fit_records(&t, start, 2, &sz, limit, g_base, fresh);
        if (stop < 0 || (stop > start && kstore_write_v2(out, &t, start, stop, g_base, g_base_ts, &m) < 0)) {
            kstore_table_release(&t);
            goto fail;
        }
        g_size = sz;
        if (stop > start) {
            max_ts = added ? (m > max_ts ? m : max_ts) : m;
            added += stop - start;
            last = ld64(t.offsets + 8 * (stop - 1));
        }
        Py_ssize_t n = t.n;
        kstore_table_release(&t);
        if (stop < n) {
            start = stop;
            reason = RUN_FULL;
            break;
        }
        Py_CLEAR(cur.table);
    }
    /* "N": each long_or_none reference goes to its tuple (or is dropped when building fails). */
    PyObject *group_out = active ? Py_BuildValue("iiNLLL", g_codec, g_ts_type, long_or_none(g_has_lat, g_lat), g_base,
                                                 g_base_ts, g_size)
                                 : long_or_none(0, 0);
    PyObject *carry_out = reason == RUN_FULL ? Py_BuildValue("OniiN", cur.table, start, cur.codec, cur.ts_type,
                                                             long_or_none(cur.has_lat, cur.lat))
                                             : long_or_none(0, 0);
    if (group_out && carry_out)
        result = Py_BuildValue("inLLLNOLNNO", reason, pos, wrappers, taken_bytes, records,
                               long_or_none(wrappers > 0, last_wrapper), group_out, added,
                               long_or_none(added > 0, max_ts), long_or_none(added > 0, last), carry_out);
    Py_XDECREF(group_out);
    Py_XDECREF(carry_out);
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
