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
#include "_decode_c.h"

#include <stdlib.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

PyObject *kstore_InvalidRecordError;
PyObject *kstore_EmptyTuple;
static PyObject *Underflow; /* kstore_cli.record._decode_common._Underflow */

/* ------------------------------------------------------------------ buffers and CRCs */

int kstore_get_view(PyObject *obj, Py_buffer *view, Py_ssize_t pos, Py_ssize_t end) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return -1;
    if (pos < 0 || end < 0 || end > view->len) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "pos %zd / end %zd outside the buffer of %zd bytes", pos, end, view->len);
        return -1;
    }
    return 0;
}

/* This file's CRC tables are the ones kstore_crc_init fills (see _decode_c.h). */
uint32_t kstore_crc32c(const uint8_t *p, size_t n) { return crc32c(p, n); }

uint32_t kstore_crc32_ieee(const uint8_t *p, size_t n) { return crc32_ieee(p, n); }

/* ------------------------------------------------------------------ varints (ByteUtils) */

int kstore_varint_too_long(uint32_t bits) {
    char msg[160];
    snprintf(msg, sizeof msg, "Varint is too long, the most significant bit in the 5th byte is set, converted value: %x",
             (unsigned)bits);
    PyErr_SetString(kstore_InvalidRecordError, msg);
    return RD_ERROR;
}

int kstore_varlong_too_long(uint64_t bits) {
    char msg[160];
    snprintf(msg, sizeof msg, "Varlong is too long, most significant bit in the 10th byte is set, converted value: %llx",
             (unsigned long long)bits);
    PyErr_SetString(kstore_InvalidRecordError, msg);
    return RD_ERROR;
}

static PyObject *py_read_varint(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos, end;
    Py_buffer v;
    int32_t value;
    if (!PyArg_ParseTuple(args, "Onn", &obj, &pos, &end)) return NULL;
    if (kstore_get_view(obj, &v, pos, end) < 0) return NULL;
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
    if (kstore_get_view(obj, &v, pos, end) < 0) return NULL;
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

/* ------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"read_varint", py_read_varint, METH_VARARGS, "A zigzag varint (at most 5 bytes) at pos: (value, next position)."},
    {"read_varlong", py_read_varlong, METH_VARARGS, "A zigzag varlong (at most 10 bytes) at pos: (value, next position)."},
    {"size_of_varint", py_size_of_varint, METH_O, "Bytes needed for value as a zigzag varint."},
    {"decode_v2_records", kstore_py_decode_v2_records, METH_VARARGS,
     "Decode exactly `count` records from buf[pos:end]; leftover bytes are an error, as in Kafka."},
    {"decode_legacy_message", kstore_py_decode_legacy_message, METH_VARARGS,
     "The legacy entry at pos, or None when it does not fit before end (a truncated tail)."},
    {"build_legacy_records", kstore_py_build_legacy_records, METH_VARARGS,
     "The inner messages of a decompressed legacy wrapper as records; see _decode_py.build_legacy_records."},
    {"register_classes", kstore_py_register_classes, METH_VARARGS,
     "register_classes(Record, Header): the classes RecordBase.__init__ builds headers with."},
    {"build_v2_records", kstore_py_build_v2_records, METH_VARARGS,
     "decode_v2_records, then one record_cls (batch.Record) per record; see _decode_py.build_v2_records."},
    {"decode_v2_columns", kstore_py_decode_v2_columns, METH_VARARGS,
     "A batch's records as Arrow-ready column pieces; see _decode_py.decode_v2_columns."},
    {"decode_v2_run", kstore_py_decode_v2_run, METH_VARARGS,
     "A run of plain v2 batches decoded straight into columns; see _decode_py.decode_v2_run."},
    {"pack_validity", kstore_py_pack_validity, METH_O, "Bytes of 0/1 per row as an Arrow validity bitmap: (bitmap, nulls)."},
    {"crc32c", py_crc32c, METH_O, "CRC-32C (Castagnoli), as java.util.zip.CRC32C computes it."},
    {"v2_batch_iter", (PyCFunction)(void (*)(void))kstore_py_v2_batch_iter, METH_FASTCALL,
     "iter(RecordBatch) of a plain uncompressed batch (records built as iterated), or None."},
    {"v2_batch_records", (PyCFunction)(void (*)(void))kstore_py_v2_batch_records, METH_FASTCALL,
     "RecordBatch.records() of a plain uncompressed batch, or None; see _decode_py.v2_batch_records."},
    {"frame_batches", kstore_py_frame_batches, METH_VARARGS,
     "scan_batches with batch_cls instances instead of heads: (batches, stop, status); see _decode_py.frame_batches."},
    {"scan_batches", kstore_py_scan_batches, METH_VARARGS,
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
    kstore_InvalidRecordError = PyObject_GetAttrString(errors, "InvalidRecordError");
    Py_DECREF(errors);
    if (!kstore_InvalidRecordError) return NULL;
    PyObject *common = PyImport_ImportModule("kstore_cli.record._decode_common");
    if (!common) return NULL;
    Underflow = PyObject_GetAttrString(common, "_Underflow");
    Py_DECREF(common);
    if (!Underflow) return NULL;
    kstore_crc_init();
    kstore_EmptyTuple = PyTuple_New(0);
    if (!kstore_EmptyTuple || PyType_Ready(&kstore_RecordBaseType) < 0 || PyType_Ready(&kstore_RecordIterType) < 0 ||
        PyType_Ready(&kstore_HeaderBaseType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    if (PyModule_AddStringConstant(m, "CRC32C_IMPL", crc_hw ? "sse4.2" : "table") < 0) return NULL;
    if (PyModule_AddIntConstant(m, "MALLOC_TUNED", tune_malloc()) < 0) return NULL;
    Py_INCREF(&kstore_RecordBaseType);
    if (PyModule_AddObject(m, "RecordBase", (PyObject *)&kstore_RecordBaseType) < 0) return NULL;
    Py_INCREF(&kstore_HeaderBaseType);
    if (PyModule_AddObject(m, "HeaderBase", (PyObject *)&kstore_HeaderBaseType) < 0) return NULL;
    return m;
}
