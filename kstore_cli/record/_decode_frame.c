/*
 * The _decode_c extension's batch framing (see _decode_c.c): plain v2 batches framed from a segment's bytes,
 * as head tuples (scan_batches) or batch.RecordBatch objects (frame_batches).
 */
#include "_decode_c.h"

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
    if (check_crc && be32(h + V2_CRC_POS) != kstore_crc32c(h + V2_CRC_START, (size_t)(entry_end - pos - V2_CRC_START)))
        return -1;
    return entry_end;
}

/* The scan of reader.py's FileLogInputStream framing; see _decode_py.scan_batches. */
PyObject *kstore_py_scan_batches(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos, end, max_batches;
    int check_crc;
    Py_buffer v;
    if (!PyArg_ParseTuple(args, "Onnnp", &obj, &pos, &end, &max_batches, &check_crc)) return NULL;
    if (kstore_get_view(obj, &v, pos, end) < 0) return NULL;
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
        if ((offs[i] = kstore_member_offset(cls, batch_slot_names[i])) < 0) return -1;
    memcpy(batch_slot, offs, sizeof offs);
    Py_INCREF(cls);
    Py_XSETREF(batch_type, (PyTypeObject *)cls);
    return 0;
}

#define BSLOT(obj, i) (*(PyObject **)((char *)(obj) + batch_slot[i]))

PyObject *kstore_py_frame_batches(PyObject *self, PyObject *args) {
    PyObject *cls, *obj, *path;
    Py_ssize_t pos, end, max_batches;
    int check_crc;
    Py_buffer v;
    if (!PyArg_ParseTuple(args, "OOnnnpO", &cls, &obj, &pos, &end, &max_batches, &check_crc, &path)) return NULL;
    if (learn_batch_type(cls) < 0) return NULL;
    if (kstore_get_view(obj, &v, pos, end) < 0) return NULL;
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
int kstore_plain_v2_batch(PyObject *const *args, Py_ssize_t nargs, const char *name, plain_batch *pb) {
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "%s(record_cls, header_cls, batch)", name);
        return -1;
    }
    PyObject *batch = args[2];
    PyTypeObject *tp = kstore_record_class(args[0]);
    if (!tp || kstore_learn_header_type(args[1]) < 0 || learn_batch_type((PyObject *)Py_TYPE(batch)) < 0) return -1;
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
