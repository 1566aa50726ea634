/*
 * The native twin of the columnar Avro decoder's reading (kstore_cli/spark/avro_columns.py): the rows'
 * payloads of one writer schema, each read field by field from its own start, the values written into
 * per-field column buffers. What the values mean (ranges, enum symbols, UTF-8, decimal sizes, nulls) is
 * decided in Python, the same for both twins; here only the bytes are read.
 *
 *     decode_rows(ops, data, starts, ends, outs, bad) -> None
 *
 * ops: int32 quadruples (op, slot, a, b), the writer schema flattened in field order (a record is its
 * fields' ops); outs[slot] the writable buffer of a field's column, one element per row:
 *   OP_BOOL    uint8:   the byte
 *   OP_LONG    int64:   a zigzag varint (Avro int, long, enum index; the logical types on them)
 *   OP_FLOAT   float32, OP_DOUBLE float64: little-endian, as stored
 *   OP_BYTES   int64 pairs (start, length): a length-prefixed string or bytes, inside the payload
 *   OP_DECIMAL int64 pairs (value, length): a length-prefixed two's-complement big-endian value; a value of
 *              at most 8 bytes sign-extended, else 0 (Python sends the row to the per-record path)
 *   OP_UNION   uint8:   1 where the branch taken is not the null one (a = the null branch's index, b = how
 *              many ops the other branch's type has: skipped where the null branch is taken)
 *   OP_NULL    nothing
 * bad[i] is set to 1 where the payload runs out, a varint is longer than 10 bytes, a length is negative or a
 * union's branch is neither 0 nor 1: the row stops there (what it has written is not read: Python treats
 * the row as bad). Reads never go past a row's end, which is checked to lie inside `data`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { OP_NULL = 0, OP_BOOL = 1, OP_LONG = 2, OP_FLOAT = 3, OP_DOUBLE = 4, OP_BYTES = 5, OP_DECIMAL = 6,
       OP_UNION = 7 };

/* A zigzag varint at *pos (before end): 0 and the value, or -1 (runs out, or longer than 10 bytes). */
static inline int read_long(const uint8_t *data, int64_t *pos, int64_t end, int64_t *out) {
    uint64_t raw = 0;
    int shift = 0;
    int64_t p = *pos;
    for (int k = 0; k < 10; k++) {
        if (p >= end) return -1;
        uint8_t b = data[p++];
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *pos = p;
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
        shift += 7;
    }
    return -1;
}

/* One row from data[pos:end]: 0, or -1 where it is bad. */
static int decode_row(const int32_t *ops, Py_ssize_t nops, const uint8_t *data, int64_t pos, int64_t end,
                      Py_ssize_t row, Py_buffer *outs) {
    for (Py_ssize_t ip = 0; ip < nops; ip++) {
        const int32_t *op = ops + 4 * ip;
        char *out = op[0] == OP_NULL ? NULL : (char *)outs[op[1]].buf;
        int64_t v;
        switch (op[0]) {
        case OP_NULL:
            break;
        case OP_BOOL:
            if (pos >= end) return -1;
            ((uint8_t *)out)[row] = data[pos++];
            break;
        case OP_LONG:
            if (read_long(data, &pos, end, &v) < 0) return -1;
            ((int64_t *)out)[row] = v;
            break;
        case OP_FLOAT:
            if (end - pos < 4) return -1;
            memcpy(out + 4 * row, data + pos, 4);
            pos += 4;
            break;
        case OP_DOUBLE:
            if (end - pos < 8) return -1;
            memcpy(out + 8 * row, data + pos, 8);
            pos += 8;
            break;
        case OP_BYTES:
            if (read_long(data, &pos, end, &v) < 0 || v < 0 || v > end - pos) return -1;
            ((int64_t *)out)[2 * row] = pos;
            ((int64_t *)out)[2 * row + 1] = v;
            pos += v;
            break;
        case OP_DECIMAL: {
            if (read_long(data, &pos, end, &v) < 0 || v < 0 || v > end - pos) return -1;
            int64_t value = 0;
            if (v > 0 && v <= 8) {
                uint64_t raw = 0;
                for (int64_t k = 0; k < v; k++) raw = (raw << 8) | data[pos + k];
                if (v < 8 && (raw >> (8 * v - 1)) & 1) raw |= ~(uint64_t)0 << (8 * v);  /* sign-extend */
                value = (int64_t)raw;
            }
            ((int64_t *)out)[2 * row] = value;
            ((int64_t *)out)[2 * row + 1] = v;
            pos += v;
            break;
        }
        case OP_UNION:
            if (read_long(data, &pos, end, &v) < 0 || (v != 0 && v != 1)) return -1;
            ((uint8_t *)out)[row] = v != op[2];
            if (v == op[2]) ip += op[3];
            break;
        default:
            return -1;
        }
    }
    return 0;
}

static PyObject *decode_rows(PyObject *self, PyObject *args) {
    Py_buffer ops, data, starts, ends, bad;
    PyObject *outs_obj;
    if (!PyArg_ParseTuple(args, "y*y*y*y*Ow*", &ops, &data, &starts, &ends, &outs_obj, &bad)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t nouts = 0, got = 0;
    Py_buffer *outs = NULL;
    Py_ssize_t n = starts.len / 8, nops = ops.len / 16;
    const int32_t *code = (const int32_t *)ops.buf;
    if (!PyTuple_Check(outs_obj)) {
        PyErr_SetString(PyExc_TypeError, "outs must be a tuple of writable buffers");
        goto done;
    }
    nouts = PyTuple_GET_SIZE(outs_obj);
    if (ends.len != starts.len || bad.len < n) {
        PyErr_SetString(PyExc_ValueError, "starts, ends and bad must have one element per row");
        goto done;
    }
    for (Py_ssize_t ip = 0; ip < nops; ip++) {
        int named = code[4 * ip] != OP_NULL;
        if ((named && (code[4 * ip + 1] < 0 || code[4 * ip + 1] >= nouts)) || code[4 * ip + 3] < 0 ||
            code[4 * ip + 3] > nops - ip - 1) {
            PyErr_SetString(PyExc_ValueError, "an op names no output or skips past the end");
            goto done;
        }
    }
    outs = PyMem_Calloc(nouts ? nouts : 1, sizeof(Py_buffer));
    if (!outs) {
        PyErr_NoMemory();
        goto done;
    }
    static const Py_ssize_t width[] = {0, 1, 8, 4, 8, 16, 16, 1};
    for (got = 0; got < nouts; got++) {
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(outs_obj, got), &outs[got], PyBUF_WRITABLE) < 0) goto done;
    }
    for (Py_ssize_t ip = 0; ip < nops; ip++) {
        int32_t op = code[4 * ip];
        if (op < 0 || op > OP_UNION || (op != OP_NULL && outs[code[4 * ip + 1]].len < width[op] * n)) {
            PyErr_SetString(PyExc_ValueError, "an output buffer is too small for its op");
            goto done;
        }
    }
    const int64_t *s = (const int64_t *)starts.buf, *e = (const int64_t *)ends.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < 0 || e[i] < s[i] || e[i] > data.len) {
            PyErr_SetString(PyExc_ValueError, "a row's bounds lie outside the data");
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        if (decode_row(code, nops, (const uint8_t *)data.buf, s[i], e[i], i, outs) < 0) ((uint8_t *)bad.buf)[i] = 1;
    }
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    for (Py_ssize_t k = 0; k < got; k++) PyBuffer_Release(&outs[k]);
    PyMem_Free(outs);
    PyBuffer_Release(&ops);
    PyBuffer_Release(&data);
    PyBuffer_Release(&starts);
    PyBuffer_Release(&ends);
    PyBuffer_Release(&bad);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_rows", decode_rows, METH_VARARGS,
     "decode_rows(ops, data, starts, ends, outs, bad) -> None: the rows' Avro payloads read into the outputs' "
     "column buffers (see the module's source for the ops)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_avro_c", "The native twin of the columnar Avro decoder's reading.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__avro_c(void) { return PyModule_Create(&moduledef); }
