/*
 * What the sources of the _encode_c extension share (_encode_c.c: record tables, fit and the writers;
 * _encode_convert_c.c: convert-format's fused paths). Private to the extension: include it after
 * <Python.h> and "_wire.h". Functions shared between the files carry the kstore_ prefix.
 */
#ifndef KSTORE_ENCODE_C_H
#define KSTORE_ENCODE_C_H

/* Shared between the extension's files only: hidden, so calls inside a file bind (and inline) as for a
 * static function, and nothing is exported beyond the module's PyInit. */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

extern PyObject *kstore_invalid_record_error; /* kstore_cli.errors.InvalidRecordError */

#define MAX_INT32 0x7FFFFFFFLL
#define V2_RECORD_OVERHEAD 21
#define LEGACY_RECORD_OVERHEAD 34
#define V2_HEADER_OVERHEAD 10

/* ------------------------------------------------------------------ Java arithmetic, native columns */

static inline int64_t wrap_add(int64_t a, int64_t b) { return s64((uint64_t)a + (uint64_t)b); }
static inline int64_t wrap_sub(int64_t a, int64_t b) { return s64((uint64_t)a - (uint64_t)b); }
static inline int64_t ld64(const uint8_t *p) { int64_t v; memcpy(&v, p, 8); return v; }

/* ------------------------------------------------------------------ growing output */

typedef struct {
    uint8_t *buf;
    Py_ssize_t len, cap;
} Out;

int kstore_out_reserve(Out *o, Py_ssize_t more);

/* Appends one int64 to o (native byte order). */
static inline int put_q(Out *o, int64_t v) {
    if (o->len + 8 > o->cap && kstore_out_reserve(o, 8) < 0) return -1;
    memcpy(o->buf + o->len, &v, 8);
    o->len += 8;
    return 0;
}

/* ------------------------------------------------------------------ record tables */

/* A record table opened for reading: its columns' buffers held. */
typedef struct {
    Py_ssize_t n, nh;
    Py_buffer views[6]; /* data, offsets, timestamps, spans, header_ends, header_spans */
    int held;
    const uint8_t *data;
    Py_ssize_t data_len;
    const uint8_t *offsets, *timestamps, *spans, *header_ends, *header_spans;
} Table;

int kstore_legacy_entry(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, int64_t *f);
PyObject *kstore_table_tuple(Py_ssize_t n, PyObject *data, Out *cols, int ncols);
PyObject *kstore_legacy_table_of(PyObject *data, int wrapper_magic, int64_t wrapper_offset, int has_lat, int64_t lat);
int kstore_table_open(PyObject *obj, Table *t);
void kstore_table_release(Table *t);
Py_ssize_t kstore_fit_records(const Table *t, Py_ssize_t start, int to_magic, int64_t *size, int64_t limit,
                              int64_t group_base, int take_first);
int kstore_write_v2(PyObject *out, const Table *t, Py_ssize_t start, Py_ssize_t stop, int64_t base_offset,
                    int64_t base_ts, int64_t *max_ts);

/* ------------------------------------------------------------------ _encode_convert_c.c */

PyObject *kstore_py_v2_frames(PyObject *self, PyObject *args);
PyObject *kstore_py_legacy_to_v2(PyObject *self, PyObject *args);
/* Its module state (zlib, interned names) and its copy of _wire.h's CRC tables; -1 with an error set. */
int kstore_encode_convert_init(void);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif /* KSTORE_ENCODE_C_H */
