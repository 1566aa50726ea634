/*
 * The private declarations shared by the source files of the _decode_c extension (one module, several
 * translation units): _decode_c.c (module, varints, CRC), _decode_v2.c (v2 record and legacy entry parsing),
 * _decode_records.c (RecordBase / HeaderBase types), _decode_build.c (record objects), _decode_columns.c
 * (Arrow columns) and _decode_frame.c (batch framing). Everything declared here is hidden: the module
 * exports PyInit__decode_c only.
 *
 * _crc.h (through _wire.h) gives each translation unit its own CRC tables, filled by kstore_crc_init, which
 * only _decode_c.c's module init calls: the other files compute CRCs through kstore_crc32c and
 * kstore_crc32_ieee, never through crc32c / crc32_ieee directly.
 */
#ifndef KSTORE_DECODE_C_H
#define KSTORE_DECODE_C_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_wire.h"

#pragma GCC visibility push(hidden)

/* kstore_crc_init is called by _decode_c.c only: this reference keeps the other files free of an
 * "unused function" warning for it. */
static inline void kstore_crc_init_elsewhere(void) { kstore_crc_init(); }

uint32_t kstore_crc32c(const uint8_t *p, size_t n);
uint32_t kstore_crc32_ieee(const uint8_t *p, size_t n);

/* Objects shared with the Python twin (imported at module init). */
extern PyObject *kstore_InvalidRecordError; /* kstore_cli.errors.InvalidRecordError */
extern PyObject *kstore_EmptyTuple;         /* () */

#define SCAN_END 0
#define SCAN_MORE 1
#define SCAN_OTHER 2

#define PREMATURE_EOF "Incorrect declared batch size, premature EOF reached"
#define INVALID_STRUCTURE "Found invalid record structure"

/* A read-only view of buf with `end` checked to lie inside it. */
int kstore_get_view(PyObject *obj, Py_buffer *view, Py_ssize_t pos, Py_ssize_t end);

/* ------------------------------------------------------------------ varints (ByteUtils) */

/* _wire.h's readers with this decoder's errors: a too-long varint is Kafka's InvalidRecordError (RD_ERROR,
 * the error set); an underflow stays RD_UNDERFLOW, for the caller's message of the spot. */
enum { RD_OK = VARINT_OK, RD_UNDERFLOW = VARINT_UNDERFLOW, RD_ERROR = VARINT_TOO_LONG };

int kstore_varint_too_long(uint32_t bits);
int kstore_varlong_too_long(uint64_t bits);

static inline int dec_varint(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, int32_t *out) {
    int rc = rd_varint(b, pos, end, out);
    return rc == VARINT_TOO_LONG ? kstore_varint_too_long((uint32_t)*out) : rc;
}

static inline int dec_varlong(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, int64_t *out) {
    int rc = rd_varlong(b, pos, end, out);
    return rc == VARINT_TOO_LONG ? kstore_varlong_too_long((uint64_t)*out) : rc;
}

/* ------------------------------------------------------------------ v2 records (_decode_v2.c) */

/* One parsed record; spans are positions into the buffer. */
typedef struct {
    int32_t offset_delta;
    int64_t timestamp_delta;
    Py_ssize_t size, key_pos, key_len, value_pos, value_len;
    Py_ssize_t header_start; /* index into the header span array */
    Py_ssize_t header_pos;   /* where the first header starts in the buffer */
    int32_t header_count;
} rec_t;

typedef struct {
    Py_ssize_t key_pos, key_len, value_pos, value_len;
} hdr_t;

#define INLINE_RECS 8
typedef struct {
    rec_t *recs;
    Py_ssize_t nrecs, caprecs;
    hdr_t *hdrs;
    Py_ssize_t nhdrs, caphdrs;
    rec_t inline_recs[INLINE_RECS]; /* small batches need no allocation */
} parse_out;

int kstore_parse_v2(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t count, parse_out *o);
void kstore_parse_out_free(parse_out *o);

/* One legacy entry (see _decode_py.decode_legacy_message). */
typedef struct {
    int64_t offset, timestamp;
    Py_ssize_t size, key_pos, key_len, value_pos, value_len, msg;
    uint32_t crc;
    int magic, attributes;
} leg_t;

int kstore_parse_legacy(const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, leg_t *e);

/* ------------------------------------------------------------------ Record objects (_decode_records.c) */

/* RecordBase's instance layout: see _decode_records.c. */
typedef struct {
    PyObject_HEAD
    PyObject *batch, *buf, *key, *value, *headers, *offset, *timestamp, *hspans, *crc, *legacy_valid;
    long long sequence, magic, attributes;
    Py_ssize_t size, key_pos, key_len, value_pos, value_len;
    /* Records built here leave hspans NULL: Record._headers is made from the buffer when read (most
     * callers never read it, and a tuple of 4-tuples per header record cost a sixth of the build). */
    Py_ssize_t hdr_pos;
    int32_t hdr_count;
} RecordObject;

/* HeaderBase: batch.Header's fields (key, value) natively; Header adds its methods in Python. */
typedef struct {
    PyObject_HEAD
    PyObject *key, *value;
} HeaderObject;

extern PyTypeObject kstore_RecordBaseType, kstore_HeaderBaseType, kstore_RecordIterType;

#define REC_FREELIST_MAX 1024
extern RecordObject *kstore_rec_freelist[REC_FREELIST_MAX];
extern int kstore_rec_free_n;
#define HDR_FREELIST_MAX 256
extern HeaderObject *kstore_hdr_freelist[HDR_FREELIST_MAX];
extern int kstore_hdr_free_n;

/* batch.Header: two __slots__ members, key and value, filled directly. */
extern PyTypeObject *kstore_header_type;
extern Py_ssize_t kstore_header_key_offset, kstore_header_value_offset;
extern int kstore_header_fast; /* header_type is HeaderBase or a subclass adding no fields: hdr_freelist serves it */

Py_ssize_t kstore_member_offset(PyObject *cls, const char *name);
int kstore_learn_header_type(PyObject *cls);
PyTypeObject *kstore_record_class(PyObject *cls);

/* ------------------------------------------------------------------ record building (_decode_build.c) */

/* The last header key decoded in a batch and its text: a topic's headers carry a few keys over and over,
 * so equal key bytes share one (immutable) str instead of decoding it again. */
typedef struct { const uint8_t *p; Py_ssize_t n; PyObject *text; } key_cache;

PyObject *kstore_make_header(const uint8_t *b, Py_ssize_t kp, Py_ssize_t kl, Py_ssize_t vp, Py_ssize_t vl,
                             key_cache *kc);

/* What v2_batch_records / v2_batch_iter need of a batch (_decode_frame.c's kstore_plain_v2_batch fills it). */
typedef struct {
    PyTypeObject *tp;
    PyObject *batch, *data, *log_append;
    Py_ssize_t len, count;
    long long base_offset, base_ts;
    int base_seq;
} plain_batch;

int kstore_plain_v2_batch(PyObject *const *args, Py_ssize_t nargs, const char *name, plain_batch *pb);

/* ------------------------------------------------------------------ the module's functions */

PyObject *kstore_py_decode_v2_records(PyObject *self, PyObject *args);
PyObject *kstore_py_decode_legacy_message(PyObject *self, PyObject *args);
PyObject *kstore_py_register_classes(PyObject *self, PyObject *args);
PyObject *kstore_py_build_v2_records(PyObject *self, PyObject *args);
PyObject *kstore_py_build_legacy_records(PyObject *self, PyObject *args);
PyObject *kstore_py_v2_batch_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *kstore_py_v2_batch_iter(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *kstore_py_decode_v2_columns(PyObject *self, PyObject *args);
PyObject *kstore_py_pack_validity(PyObject *self, PyObject *obj);
PyObject *kstore_py_decode_v2_run(PyObject *self, PyObject *args);
PyObject *kstore_py_scan_batches(PyObject *self, PyObject *args);
PyObject *kstore_py_frame_batches(PyObject *self, PyObject *args);

#pragma GCC visibility pop

#endif
