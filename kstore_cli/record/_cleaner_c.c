/*
 * The native twin of kstore_cli/record/_cleaner_py.py: the cleaner's per-record work without a
 * Python object per record (pick through kstore_cli/record/record_filter.py).
 *
 *   OffsetMap       Kafka's SkimpyOffsetMap: MD5(key) -> offset, 24-byte slots (16-byte hash,
 *                   big-endian int64 offset), linear probing as SkimpyOffsetMap.positionOf, the
 *                   table grown the way kstore_cli/record/offset_map.py grows it (its docstring).
 *   frame_end       how far a chunk of the I/O buffer holds complete entries (FileLogInputStream).
 *   map_batches     Cleaner.buildOffsetMapForSegment over a run of plain data batches.
 *   filter_batches  MemoryRecords.filterTo with the cleaner's RecordFilter over a run of plain data
 *                   batches: records retained, whole batches copied, or rebuilt (offset deltas,
 *                   delete horizon, CRC-32C) as MemoryRecords.buildRetainedRecordsInto.
 *
 * The run functions take only what needs no Python state: a magic v2 batch that is not a control
 * or transactional batch, whose records decode cleanly and whose offsets/timestamps fit int64.
 * Anything else (and any batch whose last offset is in `specials`) stops the run at that batch:
 * the caller's per-batch Python path (kstore_cli/cleaner/cleaner.py, the reference) takes it,
 * raising Kafka's errors where there are any. A batch's records are all decoded before anything
 * is done with them, so a stopped batch has had no effect.
 *
 * Compression stays in the codec libraries: `decompress(codec, payload)` and `compress(codec,
 * data)` are Python callables, called once per compressed batch.
 *
 * MD5 and the OffsetMap type are in _cleaner_map_c.c, the per-record map work in _cleaner_c.h.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include "_wire.h"
#include "_cleaner_c.h"


/* Run statuses (the twin's RUN_* constants). */
#define RUN_DONE 0         /* every entry up to stop was taken */
#define RUN_PYTHON 1       /* the entry at the returned position is for the per-batch Python path */
#define RUN_MAP_FULL 2     /* map_batches: the map is full; the offset that did not fit is in the state */
#define RUN_OUTPUT_FULL 3  /* filter_batches: the output outgrew the capacity (KAFKA-5316) */

/* map_batches' state slots (int64). */
enum { M_MESSAGES_READ, M_LAST_OFFSET, M_STOP_OFFSET, M_SLOTS };
/* filter_batches' state slots (int64): the chunk's FilterResult, then CleanerStats deltas. */
enum {
    F_HAS_FIRST, F_FIRST_OFFSET, F_MAX_OFFSET, F_MAX_TIMESTAMP, F_OFFSET_OF_MAX_TIMESTAMP, F_BYTES_READ,
    F_LAST_OFFSET, F_MESSAGES_READ, F_INVALID_MESSAGES, F_TOMBSTONES_REMOVED, F_BATCHES_READ,
    F_BATCHES_WRITTEN, F_BATCHES_REBUILT, F_MESSAGES_WRITTEN, F_MARKERS_REMOVED, F_SLOTS
};

/* The varint readers' failures (underflow, too long) are all "not plain" here: the run stops there and
 * the Python path raises Kafka's error. */

/* CRC-32C of the two pieces a rebuilt batch is written from (header tail, records). */
static uint32_t crc32c2(const uint8_t *a, size_t na, const uint8_t *b, size_t nb) {
    return crc32c_update(crc32c_update(0xFFFFFFFFu, a, na), b, nb) ^ 0xFFFFFFFFu;
}

/* ------------------------------------------------------------------ decoding a batch's records */

typedef struct {
    int64_t offset, timestamp;
    Py_ssize_t key_pos, value_pos, headers_pos, end; /* headers_pos: the header count varint */
    int32_t key_len, value_len;                   /* -1: null */
    int keep;
} rec_t;

typedef struct {
    int64_t base_offset, base_ts, max_ts, producer_id, last_offset;
    int32_t length, leader_epoch, last_offset_delta, base_sequence, count;
    int16_t producer_epoch;
    uint16_t attributes;
    int magic;
} head_t;

/* What a run needs across batches: the views, the record scratch, the state slots, the codecs. */
typedef struct {
    OffsetMapObject *map;
    const uint8_t *b;
    int64_t *state;
    rec_t *recs;
    Py_ssize_t nrecs, caprecs;
    uint8_t *body; /* a rebuilt batch's records */
    Py_ssize_t body_len, body_cap;
    PyObject *decompress, *compress, *data; /* data: the decompressed records of the current batch */
    /* CleanedTransactionMetadata's view (transaction_view()), or NULL: transactional batches go to Python.
     * committed: set of producer ids; aborted: dict keyed by producer id (ongoing aborted transactions);
     * next_abort: the first offset of the next aborted transaction not yet ongoing. */
    PyObject *committed, *aborted;
    int64_t next_abort;
    /* filter_batches: producers whose last entry is a marker (isBatchLastRecordOfProducer keeps their
     * markers' place): their control batches go to Python. NULL in map runs. */
    PyObject *marker_last;
    /* map runs: a batch whose CRC-32C fails is left to Python (which refuses it: ensureValid) */
    int check_crc;
} run_t;

static void read_head(const uint8_t *p, head_t *h) {
    h->base_offset = s64(be64(p));
    h->length = s32(be32(p + V2_LENGTH_OFFSET));
    h->leader_epoch = s32(be32(p + V2_PARTITION_LEADER_EPOCH_OFFSET));
    h->magic = s8(p[MAGIC_OFFSET]);
    h->attributes = be16(p + V2_ATTRIBUTES_OFFSET);
    h->last_offset_delta = s32(be32(p + V2_LAST_OFFSET_DELTA_OFFSET));
    h->base_ts = s64(be64(p + V2_BASE_TIMESTAMP_OFFSET));
    h->max_ts = s64(be64(p + V2_MAX_TIMESTAMP_OFFSET));
    h->producer_id = s64(be64(p + V2_PRODUCER_ID_OFFSET));
    h->producer_epoch = s16(be16(p + V2_PRODUCER_EPOCH_OFFSET));
    h->base_sequence = s32(be32(p + V2_BASE_SEQUENCE_OFFSET));
    h->count = s32(be32(p + V2_RECORDS_COUNT_OFFSET));
}

static int recs_reserve(run_t *r, Py_ssize_t n) {
    if (r->caprecs >= n) return 0;
    rec_t *p = PyMem_Realloc(r->recs, (size_t)n * sizeof(rec_t));
    if (!p) { PyErr_NoMemory(); return -1; }
    r->recs = p;
    r->caprecs = n;
    return 0;
}

/* The header section of a record from its count varint: -1 when malformed (parse_v2's checks). */
static int skip_headers(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end) {
    int32_t count, kl, vl;
    Py_ssize_t p = *pos;
    if (rd_varint(b, &p, end, &count) < 0 || count < 0 || (Py_ssize_t)count > end - p) return -1;
    for (int32_t h = 0; h < count; h++) {
        if (rd_varint(b, &p, end, &kl) < 0 || kl < 0) return -1;
        p += kl;
        if (rd_varint(b, &p, end, &vl) < 0) return -1;
        if (vl >= 0) p += vl;
        if (p > end) return -1;
    }
    *pos = p;
    return 0;
}

/*
 * DefaultRecord.readFrom for `count` records in b[pos:end], exactly the checks of parse_v2 in
 * _decode_c.c, with offsets and timestamps as DefaultRecordBatch gives them. 1 when the batch is
 * not for this path (malformed, or a value outside int64), 0 when decoded, -1 on a Python error.
 */
static int decode_records(run_t *r, const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, const head_t *h) {
    Py_ssize_t want = h->count < (end - pos) / 7 + 1 ? h->count : (end - pos) / 7 + 1;
    if (recs_reserve(r, want < 1 ? 1 : want) < 0) return -1;
    r->nrecs = 0;
    int log_append = h->attributes & 0x08;
    for (int32_t i = 0; i < h->count; i++) {
        int32_t length, offset_delta;
        int64_t ts_delta;
        Py_ssize_t body = pos;
        if (pos >= end || rd_varint(b, &body, end, &length) < 0) return 1;
        Py_ssize_t record_end = body + (Py_ssize_t)length;
        if (length < 0 || record_end > end) return 1;
        Py_ssize_t p = body + 1;
        if (r->nrecs == r->caprecs && recs_reserve(r, r->caprecs * 2) < 0) return -1;
        rec_t *rec = &r->recs[r->nrecs];
        if (rd_varlong(b, &p, end, &ts_delta) < 0 || rd_varint(b, &p, end, &offset_delta) < 0) return 1;
        if (rd_varint(b, &p, end, &rec->key_len) < 0) return 1;
        rec->key_pos = p;
        if (rec->key_len < 0) rec->key_len = -1; else p += rec->key_len;
        if (rd_varint(b, &p, end, &rec->value_len) < 0) return 1;
        rec->value_pos = p;
        if (rec->value_len < 0) rec->value_len = -1; else p += rec->value_len;
        rec->headers_pos = p;
        if (skip_headers(b, &p, end) < 0 || p != record_end) return 1;
        if (__builtin_add_overflow(h->base_offset, (int64_t)offset_delta, &rec->offset)) return 1;
        if (log_append) rec->timestamp = h->max_ts;
        else if (__builtin_add_overflow(h->base_ts, ts_delta, &rec->timestamp)) return 1;
        rec->keep = 0;
        rec->end = record_end;
        r->nrecs++;
        pos = record_end;
    }
    return pos == end ? 0 : 1;
}

/*
 * CleanedTransactionMetadata.onBatchRead for a transactional data batch, when the run may decide it: no
 * aborted transaction starts at or below its last offset (consumeAbortedTxnsUpTo would move one on) and
 * its producer has no ongoing aborted one. Then the batch is a committed transaction's: its producer joins
 * the committed set and its records are filtered as any data batch's. 0 taken, 1 for Python, -1 error.
 */
static int committed_txn_batch(run_t *r, const head_t *h) {
    if (r->committed == NULL || h->last_offset >= r->next_abort) return 1;
    PyObject *pid = PyLong_FromLongLong(h->producer_id);
    if (pid == NULL) return -1;
    int rc = PyDict_Contains(r->aborted, pid);
    if (rc == 0) rc = PySet_Add(r->committed, pid) < 0 ? -1 : 0;
    Py_DECREF(pid);
    return rc;
}

/*
 * CleanedTransactionMetadata.onControlBatchRead for a taken control batch, when the run may decide it: one
 * record whose key is a COMMIT (version 0, type 1) with a value, no aborted transaction reaching it, its
 * producer's last entry not a marker (filter runs). 0 with *in_committed (whether the producer is in the
 * committed set: then the marker stays; see leave_committed), 1 for Python, -1 on error. Changes nothing.
 */
static int commit_marker(run_t *r, const head_t *h, const uint8_t *data, int *in_committed) {
    if (h->last_offset >= r->next_abort || r->nrecs != 1 || r->recs[0].key_len != 4 || r->recs[0].value_len < 0)
        return 1;
    const uint8_t *k = data + r->recs[0].key_pos;
    if (k[0] != 0 || k[1] != 0 || k[2] != 0 || k[3] != 1) return 1;
    PyObject *pid = PyLong_FromLongLong(h->producer_id);
    if (pid == NULL) return -1;
    int rc = r->marker_last != NULL ? PySet_Contains(r->marker_last, pid) : 0;
    if (rc == 0) {
        rc = PySet_Contains(r->committed, pid);
        if (rc >= 0) { *in_committed = rc; rc = 0; }
    }
    Py_DECREF(pid);
    return rc;
}

/* The COMMIT marker's transaction ends: its producer leaves the committed set (once nothing can fail). */
static int leave_committed(run_t *r, const head_t *h) {
    PyObject *pid = PyLong_FromLongLong(h->producer_id);
    if (pid == NULL) return -1;
    int rc = PySet_Discard(r->committed, pid);
    Py_DECREF(pid);
    return rc < 0 ? -1 : 0;
}

/*
 * The batch at b[pos:] when a run may take it: 0 with *h filled and the records decoded (from
 * r->b or, compressed, from r->data), 1 when it is for the per-batch Python path, -1 on error.
 */
static int take_batch(run_t *r, Py_ssize_t pos, Py_ssize_t stop, head_t *h, const uint8_t **data) {
    const uint8_t *p = r->b + pos;
    int rc;
    Py_CLEAR(r->data);
    if (stop - pos < V2_HEADER_SIZE) return 1;
    read_head(p, h);
    Py_ssize_t size = LOG_OVERHEAD + (Py_ssize_t)h->length;
    if (h->length < RECORD_OVERHEAD_V0 || size > stop - pos || size < V2_HEADER_SIZE || h->magic != 2) return 1;
    if (r->check_crc && crc32c(p + V2_CRC_START, (size_t)(size - V2_CRC_START)) != be32(p + V2_CRC_POS)) return 1;
    /* codec ids 5-7 and empty batches: Python; control batches too, without the transaction view */
    if (((h->attributes & 0x20) && r->committed == NULL) || (h->attributes & 0x07) > 4 || h->count <= 0) return 1;
    if (__builtin_add_overflow(h->base_offset, (int64_t)h->last_offset_delta, &h->last_offset)) return 1;
    /* offsets Kafka rejects (Batch.offsets_problem): Python, which refuses them */
    if (h->base_offset < 0 || h->last_offset_delta < 0) return 1;
    if ((h->attributes & 0x30) == 0x10 && (rc = committed_txn_batch(r, h)) != 0) return rc;
    const uint8_t *recs = p;
    Py_ssize_t start = V2_HEADER_SIZE, end = size;
    if (h->attributes & 0x07) {
        PyObject *payload = PyMemoryView_FromMemory((char *)p + V2_HEADER_SIZE, size - V2_HEADER_SIZE, PyBUF_READ);
        if (!payload) return -1;
        r->data = PyObject_CallFunction(r->decompress, "iO", h->attributes & 0x07, payload);
        Py_DECREF(payload);
        if (!r->data) return -1;
        if (r->data == Py_None || !PyBytes_Check(r->data)) { Py_CLEAR(r->data); return 1; }
        recs = (const uint8_t *)PyBytes_AS_STRING(r->data);
        start = 0;
        end = PyBytes_GET_SIZE(r->data);
    }
    *data = recs;
    return decode_records(r, recs, start, end, h);
}

/* How far b[pos:end] holds complete entries, as FileLogInputStream frames them: (stop, position
 * of an entry whose size field is below 14, else -1). */
static PyObject *py_frame_end(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos, end, bad = -1;
    Py_buffer v;
    if (!PyArg_ParseTuple(args, "Onn", &obj, &pos, &end)) return NULL;
    if (PyObject_GetBuffer(obj, &v, PyBUF_SIMPLE) < 0) return NULL;
    if (pos < 0 || end > v.len || end < 0) {
        PyBuffer_Release(&v);
        PyErr_SetString(PyExc_ValueError, "pos / end outside the buffer");
        return NULL;
    }
    const uint8_t *b = v.buf;
    while (end - pos >= 18) {
        int32_t size = s32(be32(b + pos + SIZE_OFFSET));
        if (size < RECORD_OVERHEAD_V0) { bad = pos; break; }
        if ((Py_ssize_t)size + LOG_OVERHEAD > end - pos) break;
        pos += LOG_OVERHEAD + size;
    }
    PyBuffer_Release(&v);
    return Py_BuildValue("nn", pos, bad);
}

/* ------------------------------------------------------------------ runs */

static void run_free(run_t *r) {
    PyMem_Free(r->recs);
    PyMem_Free(r->body);
    Py_CLEAR(r->data);
}

/* A writable int64 state buffer of at least n slots. */
static int get_state(PyObject *obj, Py_buffer *v, Py_ssize_t n) {
    if (PyObject_GetBuffer(obj, v, PyBUF_WRITABLE | PyBUF_FORMAT) < 0) return -1;
    if (v->itemsize != 8 || v->len < n * 8 || !v->format || strcmp(v->format, "q") != 0) {
        PyBuffer_Release(v);
        PyErr_SetString(PyExc_ValueError, "state must be an array('q') of the run's slots");
        return -1;
    }
    return 0;
}

static int get_span(PyObject *obj, Py_buffer *v, Py_ssize_t pos, Py_ssize_t stop) {
    if (PyObject_GetBuffer(obj, v, PyBUF_SIMPLE) < 0) return -1;
    if (pos < 0 || stop < pos || stop > v->len) {
        PyBuffer_Release(v);
        PyErr_SetString(PyExc_ValueError, "pos / stop outside the buffer");
        return -1;
    }
    return 0;
}

/* Cleaner.buildOffsetMapForSegment for one taken batch: RUN_DONE, or RUN_MAP_FULL. */
static int map_batch(run_t *r, const head_t *h, const uint8_t *data, int64_t start, int64_t limit) {
    OffsetMapObject *m = r->map;
    uint8_t d[HASH_SIZE];
    if (h->attributes & 0x20) { /* a COMMIT marker: no key enters the map */
        int in_committed, rc = commit_marker(r, h, data, &in_committed);
        if (rc != 0) return rc > 0 ? RUN_PYTHON : -1;
        if (in_committed && leave_committed(r, h) < 0) return -1;
        r->state[M_MESSAGES_READ]++;
        if (h->last_offset >= start) m->latest_offset = h->last_offset;
        return RUN_DONE;
    }
    for (Py_ssize_t i = 0; i < r->nrecs; i++) {
        rec_t *rec = &r->recs[i];
        if (rec->key_len >= 0 && start <= rec->offset && rec->offset < limit) {
            if (m->entries >= m->max_entries) {
                r->state[M_STOP_OFFSET] = rec->offset;
                return RUN_MAP_FULL;
            }
            key_digest(m, data + rec->key_pos, (size_t)rec->key_len, d);
            if (map_put_digest(m, d, rec->offset) < 0) return -1;
            m->latest_offset = rec->offset;
        }
        r->state[M_MESSAGES_READ]++;
    }
    if (h->last_offset >= start) m->latest_offset = h->last_offset;
    return RUN_DONE;
}

/* The optional last argument of a run: None, or CleanedTransactionMetadata.transaction_view()'s
 * (committed set, aborted dict, next aborted first offset). */
static int get_txn_view(run_t *r, PyObject *view, PyObject *marker_last) {
    long long next;
    if (view == NULL || view == Py_None) return 0;
    if (!PyArg_ParseTuple(view, "O!O!L", &PySet_Type, &r->committed, &PyDict_Type, &r->aborted, &next)) return -1;
    r->next_abort = next;
    if (marker_last != NULL && !PyAnySet_Check(marker_last)) {
        PyErr_SetString(PyExc_TypeError, "marker_last must be a set or frozenset of producer ids");
        return -1;
    }
    r->marker_last = marker_last;
    return 0;
}

/* map_batches(offset_map, buf, pos, stop, start, limit, state, decompress[, txn_view]) -> (pos, status) */
static PyObject *py_map_batches(PyObject *self, PyObject *args) {
    run_t r;
    memset(&r, 0, sizeof r);
    PyObject *buf, *state;
    Py_ssize_t pos, stop;
    long long start, limit;
    Py_buffer v, sv;
    PyObject *view = NULL;
    if (!PyArg_ParseTuple(args, "O!OnnLLOO|O", &kstore_offset_map_type, &r.map, &buf, &pos, &stop, &start, &limit, &state,
                          &r.decompress, &view) || get_txn_view(&r, view, NULL) < 0)
        return NULL;
    r.check_crc = 1;
    if (get_span(buf, &v, pos, stop) < 0) return NULL;
    if (get_state(state, &sv, M_SLOTS) < 0) { PyBuffer_Release(&v); return NULL; }
    r.b = v.buf;
    r.state = sv.buf;
    int status = RUN_DONE;
    while (pos < stop) {
        head_t h;
        const uint8_t *data;
        int rc = take_batch(&r, pos, stop, &h, &data);
        if (rc != 0) { status = rc > 0 ? RUN_PYTHON : -1; break; }
        if ((status = map_batch(&r, &h, data, start, limit)) != RUN_DONE) break;
        if (h.last_offset > r.state[M_LAST_OFFSET]) r.state[M_LAST_OFFSET] = h.last_offset;
        pos += LOG_OVERHEAD + (Py_ssize_t)h.length;
    }
    run_free(&r);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&v);
    if (status < 0) return NULL;
    return Py_BuildValue("ni", pos, status);
}

/* What filter_batches takes besides the run: the cleaner's fixed inputs. */
typedef struct {
    int64_t now, new_horizon;
    int has_new_horizon;
    const void *specials; /* native int64s, sorted */
    Py_ssize_t nspecials;
    Py_ssize_t capacity;
    PyObject *out; /* bytearray */
} filter_args;

static inline int64_t special_at(const filter_args *a, Py_ssize_t i) {
    int64_t v;
    memcpy(&v, (const uint8_t *)a->specials + 8 * i, 8); /* any buffer: no alignment assumed */
    return v;
}

static int is_special(const filter_args *a, int64_t offset) {
    Py_ssize_t lo = 0, hi = a->nspecials;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (special_at(a, mid) < offset) lo = mid + 1;
        else hi = mid;
    }
    return lo < a->nspecials && special_at(a, lo) == offset;
}

/* Kafka's retain decision per record (RecordFilter + Cleaner.shouldRetainRecord) for a data batch
 * that is not discarded; counts into c[] (F_* slots), marks rec->keep. Returns how many are kept. */
static Py_ssize_t decide(run_t *r, const head_t *h, const uint8_t *data, const filter_args *a, int64_t *c,
                         int *write_original, int *tombstones, int64_t *max_offset) {
    OffsetMapObject *m = r->map;
    int has_horizon = h->attributes & 0x40;
    Py_ssize_t kept = 0;
    uint8_t d[HASH_SIZE];
    for (Py_ssize_t i = 0; i < r->nrecs; i++) {
        rec_t *rec = &r->recs[i];
        int keep;
        c[F_MESSAGES_READ]++;
        if (rec->offset > m->latest_offset) keep = 1;
        else if (rec->key_len < 0) { c[F_INVALID_MESSAGES]++; keep = 0; }
        else {
            key_digest(m, data + rec->key_pos, (size_t)rec->key_len, d);
            if (rec->offset < map_get_digest(m, d)) keep = 0;
            else if (rec->value_len >= 0) keep = 1;
            else keep = !has_horizon || a->now < h->base_ts; /* the delete horizon (KIP-534) */
        }
        rec->keep = keep;
        if (keep) {
            kept++;
            if (rec->offset > *max_offset) *max_offset = rec->offset;
            if (rec->value_len < 0) *tombstones = 1;
        } else {
            *write_original = 0;
            if (rec->value_len < 0) c[F_TOMBSTONES_REMOVED]++;
        }
    }
    return kept;
}

static uint8_t *out_extend(PyObject *out, Py_ssize_t n) {
    Py_ssize_t len = PyByteArray_GET_SIZE(out);
    if (PyByteArray_Resize(out, len + n) < 0) return NULL;
    return (uint8_t *)PyByteArray_AS_STRING(out) + len;
}

static int body_reserve(run_t *r, Py_ssize_t more) {
    if (r->body_cap - r->body_len >= more) return 0;
    Py_ssize_t cap = r->body_cap * 2 > r->body_len + more ? r->body_cap * 2 : r->body_len + more + 4096;
    uint8_t *p = PyMem_Realloc(r->body, (size_t)cap);
    if (!p) { PyErr_NoMemory(); return -1; }
    r->body = p;
    r->body_cap = cap;
    return 0;
}

/* One retained record re-encoded as builder.encode_v2_record writes it (attributes 0, minimal
 * varints, headers copied): 0, 1 when a delta leaves int64 (Python's path decides), -1 on error. */
static int encode_record(run_t *r, const rec_t *rec, const uint8_t *data, int64_t base_ts, int64_t base_offset) {
    int64_t ts_delta;
    if (__builtin_sub_overflow(rec->timestamp, base_ts, &ts_delta)) return 1;
    Py_ssize_t hsec = rec->end - rec->headers_pos;
    Py_ssize_t bound = 5 + 1 + 10 + 5 + 10 + (rec->key_len > 0 ? rec->key_len : 0) +
                       (rec->value_len > 0 ? rec->value_len : 0) + 5 + 5 * hsec;
    if (body_reserve(r, bound) < 0) return -1;
    uint8_t *start = r->body + r->body_len, *p = start + 5;
    *p++ = 0; /* attributes */
    p = put_varlong(p, ts_delta);
    p = put_varint(p, (int32_t)(rec->offset - base_offset));
    p = put_varint(p, rec->key_len);
    if (rec->key_len > 0) { memcpy(p, data + rec->key_pos, (size_t)rec->key_len); p += rec->key_len; }
    p = put_varint(p, rec->value_len);
    if (rec->value_len > 0) { memcpy(p, data + rec->value_pos, (size_t)rec->value_len); p += rec->value_len; }
    Py_ssize_t q = rec->headers_pos;
    int32_t count = 0, kl = 0, vl = 0;
    rd_varint(data, &q, rec->end, &count); /* validated by decode_records */
    p = put_varint(p, count);
    for (int32_t i = 0; i < count; i++) {
        rd_varint(data, &q, rec->end, &kl);
        p = put_varint(p, kl);
        memcpy(p, data + q, (size_t)kl);
        p += kl;
        q += kl;
        rd_varint(data, &q, rec->end, &vl);
        p = put_varint(p, vl < 0 ? -1 : vl);
        if (vl > 0) { memcpy(p, data + q, (size_t)vl); p += vl; q += vl; }
    }
    Py_ssize_t blen = p - (start + 5);
    uint8_t prefix[5];
    Py_ssize_t n = put_varint(prefix, (int32_t)blen) - prefix;
    memmove(start + n, start + 5, (size_t)blen);
    memcpy(start, prefix, (size_t)n);
    r->body_len += n + blen;
    return 0;
}

/* The 61-byte header of a rebuilt batch (builder.build_v2_batch's layout), CRC-32C set. */
static void write_header(uint8_t *o, const head_t *h, Py_ssize_t body_len, const uint8_t *body, uint16_t attributes,
                         int64_t base_ts, int64_t max_ts, int32_t count) {
    put_be64(o, (uint64_t)h->base_offset);
    put_be32(o + V2_LENGTH_OFFSET, (uint32_t)(V2_HEADER_SIZE - LOG_OVERHEAD + body_len));
    put_be32(o + V2_PARTITION_LEADER_EPOCH_OFFSET, (uint32_t)h->leader_epoch);
    o[MAGIC_OFFSET] = 2;
    put_be16(o + V2_ATTRIBUTES_OFFSET, attributes);
    put_be32(o + V2_LAST_OFFSET_DELTA_OFFSET, (uint32_t)h->last_offset_delta);
    put_be64(o + V2_BASE_TIMESTAMP_OFFSET, (uint64_t)base_ts);
    put_be64(o + V2_MAX_TIMESTAMP_OFFSET, (uint64_t)max_ts);
    put_be64(o + V2_PRODUCER_ID_OFFSET, (uint64_t)h->producer_id);
    put_be16(o + V2_PRODUCER_EPOCH_OFFSET, (uint16_t)h->producer_epoch);
    put_be32(o + V2_BASE_SEQUENCE_OFFSET, (uint32_t)h->base_sequence);
    put_be32(o + V2_RECORDS_COUNT_OFFSET, (uint32_t)count);
    put_be32(o + V2_CRC_POS, crc32c2(o + V2_CRC_START, V2_HEADER_SIZE - V2_CRC_START, body, (size_t)body_len));
}

/*
 * MemoryRecords.buildRetainedRecordsInto (cleaner._rebuild): the kept records in a new batch with
 * the same range, codec and producer fields, the delete horizon as its base timestamp when it has
 * one. Returns 0 (appended; *max_ts set), 1 (for Python's path: nothing written), -1 on error.
 */
static int write_rebuilt(run_t *r, const head_t *h, const uint8_t *data, const filter_args *a, int need_horizon,
                         Py_ssize_t kept, int64_t *max_ts) {
    int has_horizon = need_horizon || (h->attributes & 0x40);
    int64_t base_ts = need_horizon ? a->new_horizon : h->base_ts;
    int first = 1;
    *max_ts = INT64_MIN;
    r->body_len = 0;
    for (Py_ssize_t i = 0; i < r->nrecs; i++) {
        rec_t *rec = &r->recs[i];
        if (!rec->keep) continue;
        if (first && !has_horizon) base_ts = rec->timestamp;
        first = 0;
        if (rec->timestamp > *max_ts) *max_ts = rec->timestamp;
        int rc = encode_record(r, rec, data, base_ts, h->base_offset);
        if (rc) return rc;
    }
    if (h->attributes & 0x08) *max_ts = h->max_ts; /* LogAppendTime */
    int codec = h->attributes & 0x07;
    PyObject *packed = NULL;
    const uint8_t *body = r->body;
    Py_ssize_t body_len = r->body_len;
    if (codec) {
        packed = PyObject_CallFunction(r->compress, "iy#", codec, (const char *)r->body, r->body_len);
        if (!packed) return -1;
        if (!PyBytes_Check(packed)) {
            Py_DECREF(packed);
            PyErr_SetString(PyExc_TypeError, "compress must return bytes");
            return -1;
        }
        body = (const uint8_t *)PyBytes_AS_STRING(packed);
        body_len = PyBytes_GET_SIZE(packed);
    }
    uint8_t *o = body_len <= INT32_MAX - V2_HEADER_SIZE ? out_extend(a->out, V2_HEADER_SIZE + body_len) : NULL;
    if (o) {
        memcpy(o + V2_HEADER_SIZE, body, (size_t)body_len);
        uint16_t attributes = (uint16_t)(codec | (h->attributes & 0x38) | (has_horizon ? 0x40 : 0));
        write_header(o, h, body_len, o + V2_HEADER_SIZE, attributes, base_ts, *max_ts, (int32_t)kept);
    }
    Py_XDECREF(packed);
    if (!o && body_len > INT32_MAX - V2_HEADER_SIZE) return 1;
    return o ? 0 : -1;
}

/* _ChunkResult.retained (updateRetainedBatchMetadata). */
static void retained(int64_t *s, int64_t first_offset, int64_t max_ts, int64_t shallow, int64_t max_offset) {
    if (!s[F_HAS_FIRST]) {
        s[F_HAS_FIRST] = 1;
        s[F_FIRST_OFFSET] = first_offset;
    }
    if (max_ts > s[F_MAX_TIMESTAMP]) {
        s[F_MAX_TIMESTAMP] = max_ts;
        s[F_OFFSET_OF_MAX_TIMESTAMP] = shallow;
    }
    if (max_offset > s[F_MAX_OFFSET]) s[F_MAX_OFFSET] = max_offset;
}

static void add_counts(run_t *r, const head_t *h, const int64_t *c) {
    for (int i = F_BYTES_READ; i < F_SLOTS; i++)
        if (i != F_LAST_OFFSET) r->state[i] += c[i];
    if (h->last_offset > r->state[F_LAST_OFFSET]) r->state[F_LAST_OFFSET] = h->last_offset;
}

/* SegmentCleaner._filter_batch for a taken COMMIT marker (not its producer's last entry, not the round's last
 * batch): removed once its delete horizon has passed when no batch of its transaction was met (the
 * producer was not in the committed set), else kept, given a delete horizon when it may go later. */
static int filter_marker(run_t *r, Py_ssize_t pos, const head_t *h, const uint8_t *data, const filter_args *a) {
    int64_t c[F_SLOTS] = {0};
    if (r->marker_last == NULL) return RUN_PYTHON;
    int in_committed, rc = commit_marker(r, h, data, &in_committed);
    if (rc != 0) return rc > 0 ? RUN_PYTHON : -1;
    int has_horizon = h->attributes & 0x40;
    Py_ssize_t size = LOG_OVERHEAD + (Py_ssize_t)h->length;
    if (!in_committed && has_horizon && h->base_ts <= a->now) {
        c[F_MARKERS_REMOVED] = 1;
    } else {
        int need_horizon = !in_committed && !has_horizon;
        if (need_horizon && !a->has_new_horizon) return RUN_PYTHON;
        if (!need_horizon) {
            uint8_t *o = out_extend(a->out, size);
            if (!o) return -1;
            memcpy(o, r->b + pos, (size_t)size);
            retained(r->state, h->base_offset, h->max_ts, h->last_offset, h->last_offset);
        } else {
            int64_t max_ts;
            r->recs[0].keep = 1;
            if ((rc = write_rebuilt(r, h, data, a, 1, 1, &max_ts)) != 0) return rc > 0 ? RUN_PYTHON : -1;
            retained(r->state, h->base_offset, max_ts, h->last_offset, r->recs[0].offset);
            c[F_BATCHES_REBUILT] = 1;
        }
        c[F_MESSAGES_READ] = c[F_MESSAGES_WRITTEN] = c[F_BATCHES_WRITTEN] = 1;
    }
    if (in_committed && leave_committed(r, h) < 0) return -1;
    c[F_BYTES_READ] = size;
    c[F_BATCHES_READ] = 1;
    add_counts(r, h, c);
    return RUN_DONE;
}

/* SegmentCleaner._filter_batch for a taken batch (a data batch, not discarded, DELETE_EMPTY). */
static int filter_batch(run_t *r, Py_ssize_t pos, const head_t *h, const uint8_t *data, const filter_args *a) {
    int64_t c[F_SLOTS] = {0}, max_offset = -1, max_ts;
    int write_original = 1, tombstones = 0;
    Py_ssize_t kept = decide(r, h, data, a, c, &write_original, &tombstones, &max_offset);
    int need_horizon = tombstones && !(h->attributes & 0x40);
    Py_ssize_t size = LOG_OVERHEAD + (Py_ssize_t)h->length;
    if (kept && need_horizon && !a->has_new_horizon) return RUN_PYTHON;
    if (kept && write_original && !need_horizon) {
        uint8_t *o = out_extend(a->out, size);
        if (!o) return -1;
        memcpy(o, r->b + pos, (size_t)size);
        retained(r->state, h->base_offset, h->max_ts, h->last_offset, h->last_offset);
    } else if (kept) {
        int rc = write_rebuilt(r, h, data, a, need_horizon, kept, &max_ts);
        if (rc) return rc > 0 ? RUN_PYTHON : -1;
        retained(r->state, h->base_offset, max_ts, h->last_offset, max_offset);
        c[F_BATCHES_REBUILT]++;
    }
    if (kept) {
        c[F_MESSAGES_WRITTEN] += kept;
        c[F_BATCHES_WRITTEN]++;
    }
    c[F_BYTES_READ] = size;
    c[F_BATCHES_READ] = 1;
    add_counts(r, h, c);
    return RUN_DONE;
}

static int filter_run(run_t *r, Py_ssize_t *pos, Py_ssize_t stop, const filter_args *a) {
    while (*pos < stop) {
        if (stop - *pos >= V2_HEADER_SIZE) {
            /* the active producers' last batches and the round's last batch keep their place: Python */
            int64_t last;
            const uint8_t *p = r->b + *pos;
            if (!__builtin_add_overflow(s64(be64(p)), (int64_t)s32(be32(p + V2_LAST_OFFSET_DELTA_OFFSET)), &last) && is_special(a, last))
                return RUN_PYTHON;
        }
        head_t h;
        const uint8_t *data;
        int rc = take_batch(r, *pos, stop, &h, &data);
        if (rc != 0) return rc > 0 ? RUN_PYTHON : -1;
        rc = (h.attributes & 0x20) ? filter_marker(r, *pos, &h, data, a) : filter_batch(r, *pos, &h, data, a);
        if (rc != RUN_DONE) return rc;
        *pos += LOG_OVERHEAD + (Py_ssize_t)h.length;
        if (PyByteArray_GET_SIZE(a->out) > a->capacity) return RUN_OUTPUT_FULL;
    }
    return RUN_DONE;
}

/* filter_batches(offset_map, buf, pos, stop, capacity, out, state, now, new_horizon, specials,
 *                decompress, compress[, txn_view, marker_last]) -> (pos, status); without marker_last
 *                (a set of producer ids) no control batch is taken */
static PyObject *py_filter_batches(PyObject *self, PyObject *args) {
    run_t r;
    filter_args a;
    memset(&r, 0, sizeof r);
    memset(&a, 0, sizeof a);
    PyObject *buf, *state, *horizon, *specials;
    Py_ssize_t pos, stop;
    long long now;
    Py_buffer v, sv, spv;
    PyObject *view = NULL, *marker_last = NULL;
    if (!PyArg_ParseTuple(args, "O!OnnnO!OLOOOO|OO", &kstore_offset_map_type, &r.map, &buf, &pos, &stop, &a.capacity,
                          &PyByteArray_Type, &a.out, &state, &now, &horizon, &specials, &r.decompress, &r.compress,
                          &view, &marker_last) || get_txn_view(&r, view, marker_last) < 0)
        return NULL;
    a.now = now;
    if (horizon != Py_None) {
        int overflow;
        a.new_horizon = PyLong_AsLongLongAndOverflow(horizon, &overflow);
        if (a.new_horizon == -1 && PyErr_Occurred()) return NULL;
        a.has_new_horizon = !overflow; /* beyond int64: batches that need it go to Python */
    }
    if (get_span(buf, &v, pos, stop) < 0) return NULL;
    if (get_state(state, &sv, F_SLOTS) < 0) { PyBuffer_Release(&v); return NULL; }
    if (PyObject_GetBuffer(specials, &spv, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&sv);
        PyBuffer_Release(&v);
        return NULL;
    }
    r.b = v.buf;
    r.state = sv.buf;
    a.specials = spv.buf;
    a.nspecials = spv.len / 8;
    int status = filter_run(&r, &pos, stop, &a);
    run_free(&r);
    PyBuffer_Release(&spv);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&v);
    if (status < 0) return NULL;
    return Py_BuildValue("ni", pos, status);
}

/* skip_anonymous(buf, pos, end) -> pos past the run of v2 batches (at least 61 bytes, complete)
 * without a producer id from pos: what ProducerStateManager's replay has nothing to learn from. */
static PyObject *py_skip_anonymous(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos, end;
    Py_buffer v;
    if (!PyArg_ParseTuple(args, "Onn", &obj, &pos, &end)) return NULL;
    if (get_span(obj, &v, pos, end) < 0) return NULL;
    const uint8_t *b = v.buf;
    while (end - pos >= 18) {
        int32_t size = s32(be32(b + pos + SIZE_OFFSET));
        if (size < RECORD_OVERHEAD_V0 || (Py_ssize_t)size + LOG_OVERHEAD > end - pos) break;
        if (size + LOG_OVERHEAD < V2_HEADER_SIZE || s8(b[pos + MAGIC_OFFSET]) < 2 || s64(be64(b + pos + V2_PRODUCER_ID_OFFSET)) >= 0) break;
        pos += LOG_OVERHEAD + size;
    }
    PyBuffer_Release(&v);
    return PyLong_FromSsize_t(pos);
}

static PyObject *py_md5(PyObject *self, PyObject *obj) {
    Py_buffer v;
    uint8_t d[HASH_SIZE];
    if (PyObject_GetBuffer(obj, &v, PyBUF_SIMPLE) < 0) return NULL;
    kstore_md5(v.buf, (size_t)v.len, d);
    PyBuffer_Release(&v);
    return PyBytes_FromStringAndSize((const char *)d, HASH_SIZE);
}

static PyMethodDef methods[] = {
    {"md5", py_md5, METH_O, "MD5 digest of a buffer (the offset map's hash)."},
    {"frame_end", py_frame_end, METH_VARARGS, "frame_end(buf, pos, end) -> (stop, bad position or -1)."},
    {"skip_anonymous", py_skip_anonymous, METH_VARARGS,
     "skip_anonymous(buf, pos, end) -> pos past the v2 batches without a producer id."},
    {"map_batches", py_map_batches, METH_VARARGS,
     "map_batches(offset_map, buf, pos, stop, start, limit, state, decompress) -> (pos, status)."},
    {"filter_batches", py_filter_batches, METH_VARARGS,
     "filter_batches(offset_map, buf, pos, stop, capacity, out, state, now, new_horizon, specials, decompress, "
     "compress) -> (pos, status)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_cleaner_c", "The native twin of kstore_cli.record._cleaner_py.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cleaner_c(void) {
    kstore_crc_init();
    if (kstore_cleaner_map_init() < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    static const struct { const char *name; int value; } constants[] = {
        {"RUN_DONE", RUN_DONE}, {"RUN_PYTHON", RUN_PYTHON}, {"RUN_MAP_FULL", RUN_MAP_FULL},
        {"RUN_OUTPUT_FULL", RUN_OUTPUT_FULL}, {"MAP_SLOTS", M_SLOTS}, {"FILTER_SLOTS", F_SLOTS},
    };
    for (size_t i = 0; i < sizeof constants / sizeof constants[0]; i++)
        if (PyModule_AddIntConstant(m, constants[i].name, constants[i].value) < 0) return NULL;
    Py_INCREF(&kstore_offset_map_type);
    if (PyModule_AddObject(m, "OffsetMap", (PyObject *)&kstore_offset_map_type) < 0) return NULL;
    return m;
}
