/*
 * The native text formatter of `kstore dump-segment` (kstore_cli/dump/dumplog.py): the record lines
 * kafka-dump-log.sh prints for one magic v2 batch, all of them in one str.
 *
 *     format_v2_records(data, pos, end, count, base_offset, base_timestamp, log_append_time,
 *                       base_sequence, last, flags) -> None | (text, last, gaps)
 *     format_v2_run(data, pos, end, budget, last, flags) -> (text, stop, last, gaps)
 *
 * format_v2_run prints whole batches, batch line included, from data[pos:] (a segment) while they are
 * plain (magic 2, uncompressed, not control, CRC-32C right, records well formed) and before `end`, up
 * to `budget` bytes of input; `stop` is where it stopped (pos when the first batch is not plain).
 *
 * `data[pos:end]` holds the batch's (decompressed) records; `log_append_time` is the batch's max
 * timestamp under LogAppendTime, else None; `last` the previous record's offset (-1: none yet).
 * flags: FLAG_METADATA prints `| offset: ... headerKeys: [...]`, FLAG_DATA prints `key: ...
 * payload: ...` as Kafka's default StringDecoder does (`new String(bytes, UTF_8)`, with Java's
 * replacement rules for malformed input: kstore_cli/record/text.py). FLAG_BYTES returns the text
 * as UTF-8 bytes instead of a str (what a UTF-8 stdout would get: no str built and encoded again).
 *
 * Returns (text, the last record's offset, [last, offset, ...] for each non-consecutive pair or
 * None), or None whenever the batch is anything but plain and well formed (a record that does
 * not parse within its own length, leftover bytes, `last` beyond int64): the caller then formats
 * the batch in Python, which prints and raises what Kafka does. Offsets and timestamps are Java
 * longs: base + delta wraps, as in DefaultRecord.readFrom.
 * So the parse here only needs to be at least as strict as kstore_cli/record/_decode_py.py.
 *
 * Reads never go past `end`, which is checked to lie inside the buffer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_wire.h"

#define FLAG_METADATA 1
#define FLAG_DATA 2
#define FLAG_BYTES 4

/* ------------------------------------------------------------------ output buffer */

typedef struct {
    char *p;
    size_t len;
    size_t cap;
    unsigned char high; /* OR of every byte written: < 0x80 means ASCII */
} Out;

static int out_reserve(Out *o, size_t need) {
    if (o->cap - o->len >= need) return 0;
    size_t cap = o->cap ? o->cap : 4096;
    while (cap - o->len < need) {
        if (cap > ((size_t)PY_SSIZE_T_MAX) / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *p = PyMem_Realloc(o->p, cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    o->p = p;
    o->cap = cap;
    return 0;
}

/* Callers reserve first. */
static inline void put(Out *o, const char *s, size_t n) {
    memcpy(o->p + o->len, s, n);
    o->len += n;
}
#define PUT_LIT(o, s) put((o), (s), sizeof(s) - 1)

static const char digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* Decimal, two digits per division (a line holds five numbers, timestamps of 13 digits). */
static inline void put_i64(Out *o, int64_t v) {
    char tmp[24];
    int i = 24;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    while (u >= 100) {
        unsigned d = (unsigned)(u % 100);
        u /= 100;
        i -= 2;
        memcpy(tmp + i, digit_pairs + 2 * d, 2);
    }
    if (u >= 10) {
        i -= 2;
        memcpy(tmp + i, digit_pairs + 2 * u, 2);
    } else {
        tmp[--i] = (char)('0' + (int)u);
    }
    if (v < 0) tmp[--i] = '-';
    put(o, tmp + i, (size_t)(24 - i));
}

/* ------------------------------------------------------------------ Java's UTF-8 decoding */

static inline int cont(uint8_t b) { return (b & 0xC0) == 0x80; }

/* How many bytes Java's String decoder replaces with one U+FFFD at d[0] (n bytes remain):
 * text.py's _java_malformed_length, line for line. */
static Py_ssize_t java_malformed_length(const uint8_t *d, Py_ssize_t n) {
    uint8_t b1 = d[0];
    if (b1 >= 0xE0 && b1 <= 0xEF) {
        if (n >= 3) {
            uint8_t b2 = d[1], b3 = d[2];
            int bad2 = (b1 == 0xE0 && (b2 & 0xE0) == 0x80) || !cont(b2);
            if (!bad2 && cont(b3)) return 3; /* a well-formed encoded surrogate: one replacement */
            return bad2 ? 1 : 2;
        }
        if (n == 2) {
            uint8_t b2 = d[1];
            if ((b1 == 0xE0 && (b2 & 0xE0) == 0x80) || !cont(b2)) return 1;
            return 2;
        }
        return 1;
    }
    if (b1 >= 0xF0 && b1 <= 0xF7) {
        if (n >= 4) {
            uint8_t b2 = d[1];
            if (b1 > 0xF4 || (b1 == 0xF0 && !(b2 >= 0x90 && b2 <= 0xBF)) || (b1 == 0xF4 && (b2 & 0xF0) != 0x80) ||
                !cont(b2))
                return 1;
            return !cont(d[2]) ? 2 : 3;
        }
        if (b1 > 0xF4) return 1;
        if (n >= 2) {
            uint8_t b2 = d[1];
            if ((b1 == 0xF0 && !(b2 >= 0x90 && b2 <= 0xBF)) || (b1 == 0xF4 && (b2 & 0xF0) != 0x80) || !cont(b2))
                return 1;
            if (n >= 3 && !cont(d[2])) return 2;
        }
        return n; /* truncated at the end */
    }
    return 1;
}

/* The length of the well-formed UTF-8 sequence at d[0] (n >= 1 bytes remain, d[0] >= 0x80), or 0.
 * Strict UTF-8, as Python's decoder: no overlongs, no surrogates, nothing above U+10FFFF. */
static inline Py_ssize_t utf8_seq(const uint8_t *d, Py_ssize_t n) {
    uint8_t b1 = d[0];
    if (b1 >= 0xC2 && b1 <= 0xDF) return n >= 2 && cont(d[1]) ? 2 : 0;
    if (b1 >= 0xE0 && b1 <= 0xEF) {
        if (n < 3 || !cont(d[2])) return 0;
        uint8_t b2 = d[1];
        if (b1 == 0xE0) return b2 >= 0xA0 && b2 <= 0xBF ? 3 : 0;
        if (b1 == 0xED) return b2 >= 0x80 && b2 <= 0x9F ? 3 : 0;
        return cont(b2) ? 3 : 0;
    }
    if (b1 >= 0xF0 && b1 <= 0xF4) {
        if (n < 4 || !cont(d[2]) || !cont(d[3])) return 0;
        uint8_t b2 = d[1];
        if (b1 == 0xF0) return b2 >= 0x90 && b2 <= 0xBF ? 4 : 0;
        if (b1 == 0xF4) return b2 >= 0x80 && b2 <= 0x8F ? 4 : 0;
        return cont(b2) ? 4 : 0;
    }
    return 0;
}

/* Per byte: what a byte that stands alone prints (itself, or EF BF BD for a byte that can never start
 * a sequence: 80-C1, F5-FF) in the low bytes of a word, and how many bytes that is; 0 for a lead byte
 * (C2-F4), whose sequence is checked. Binary values are mostly such bytes: a table, not branches. */
static uint32_t lone_text[256];
static uint8_t lone_len[256];

static void init_lone_tables(void) {
    for (int c = 0; c < 256; c++) {
        if (c < 0x80) {
            const uint8_t self[4] = {(uint8_t)c, 0, 0, 0};
            memcpy(&lone_text[c], self, 4);
            lone_len[c] = 1;
        } else if (c < 0xC2 || c > 0xF4) {
            const uint8_t rep[4] = {0xEF, 0xBF, 0xBD, 0};
            memcpy(&lone_text[c], rep, 4);
            lone_len[c] = 3;
        } else {
            lone_text[c] = 0;
            lone_len[c] = 0;
        }
    }
}

/* Append `new String(s, UTF_8)` encoded as UTF-8. */
static int put_java_utf8(Out *o, const uint8_t *s, Py_ssize_t n) {
    /* A malformed byte becomes at most 3 bytes (EF BF BD); anything else keeps its length. Each
     * table store writes 4 bytes: 1 more of slack. */
    if (out_reserve(o, (size_t)n * 3 + 1) < 0) return -1;
    char *w = o->p + o->len;
    Py_ssize_t i = 0;
    unsigned char high = 0;
    while (i < n) {
        /* ASCII runs, 8 bytes at a time. */
        while (i + 8 <= n) {
            uint64_t word;
            memcpy(&word, s + i, 8);
            if (word & 0x8080808080808080ull) break;
            memcpy(w, &word, 8);
            w += 8;
            i += 8;
        }
        if (i >= n) break;
        uint8_t c = s[i];
        uint8_t len = lone_len[c];
        high |= c;
        if (len) {
            memcpy(w, &lone_text[c], 4); /* little- or big-endian alike: the table was built by memcpy */
            w += len;
            i++;
            continue;
        }
        Py_ssize_t k = utf8_seq(s + i, n - i);
        if (k) {
            memcpy(w, s + i, (size_t)k);
            w += k;
            i += k;
        } else {
            *w++ = (char)0xEF;
            *w++ = (char)0xBF;
            *w++ = (char)0xBD;
            i += java_malformed_length(s + i, n - i);
        }
    }
    o->len = (size_t)(w - o->p);
    o->high |= high & 0x80;
    return 0;
}

/* _wire.h's varint readers: any failure (underflow, too long) means "not plain" here (Python formats it). */

/* ------------------------------------------------------------------ the formatter */

typedef struct {
    Py_ssize_t kp, kl, vp, vl, hstart;
    int32_t hcount;
} Spans;

/* Parse one record at *pp (strictly within its own length); 0 on success. */
static int parse_record(const uint8_t *b, Py_ssize_t *pp, Py_ssize_t end, int64_t *ts_delta, int32_t *off_delta,
                        Spans *sp) {
    Py_ssize_t pos = *pp;
    int32_t length;
    if (pos >= end) return -1;
    if (rd_varint(b, &pos, end, &length) < 0) return -1;
    if (length < 0 || (Py_ssize_t)length > end - pos) return -1;
    Py_ssize_t rend = pos + length;
    if (length < 1) return -1;
    Py_ssize_t p = pos + 1; /* attributes: unused */
    int32_t kl, vl, hc;
    if (rd_varlong(b, &p, rend, ts_delta) < 0) return -1;
    if (rd_varint(b, &p, rend, off_delta) < 0) return -1;
    if (rd_varint(b, &p, rend, &kl) < 0) return -1;
    sp->kp = p;
    if (kl < 0) {
        sp->kl = -1;
    } else {
        if ((Py_ssize_t)kl > rend - p) return -1;
        sp->kl = kl;
        p += kl;
    }
    if (rd_varint(b, &p, rend, &vl) < 0) return -1;
    sp->vp = p;
    if (vl < 0) {
        sp->vl = -1;
    } else {
        if ((Py_ssize_t)vl > rend - p) return -1;
        sp->vl = vl;
        p += vl;
    }
    if (rd_varint(b, &p, rend, &hc) < 0) return -1;
    if (hc < 0 || (Py_ssize_t)hc > rend - p) return -1;
    sp->hstart = p;
    sp->hcount = hc;
    for (int32_t h = 0; h < hc; h++) {
        int32_t hkl, hvl;
        if (rd_varint(b, &p, rend, &hkl) < 0) return -1;
        if (hkl < 0 || (Py_ssize_t)hkl > rend - p) return -1;
        p += hkl;
        if (rd_varint(b, &p, rend, &hvl) < 0) return -1;
        if (hvl >= 0) {
            if ((Py_ssize_t)hvl > rend - p) return -1;
            p += hvl;
        }
    }
    if (p != rend) return -1;
    *pp = rend;
    return 0;
}

/* Header keys as `[k1,k2]` (the spans were checked by parse_record). */
static int put_header_keys(Out *o, const uint8_t *b, Py_ssize_t p, int32_t hc) {
    if (out_reserve(o, 2) < 0) return -1;
    PUT_LIT(o, "[");
    for (int32_t h = 0; h < hc; h++) {
        int32_t hkl = 0, hvl = -1;
        /* Cannot fail: parse_record read the same varints. */
        if (rd_varint(b, &p, PY_SSIZE_T_MAX, &hkl) < 0 || hkl < 0) return -1;
        if (h) {
            if (out_reserve(o, 1) < 0) return -1;
            PUT_LIT(o, ",");
        }
        if (put_java_utf8(o, b + p, hkl) < 0) return -1;
        p += hkl;
        if (rd_varint(b, &p, PY_SSIZE_T_MAX, &hvl) < 0) return -1;
        if (hvl > 0) p += hvl;
    }
    if (out_reserve(o, 1) < 0) return -1;
    PUT_LIT(o, "]");
    return 0;
}

static int add_gap(PyObject **gaps, int64_t a, int64_t b) {
    if (!*gaps && !(*gaps = PyList_New(0))) return -1;
    PyObject *x = PyLong_FromLongLong(a);
    if (!x) return -1;
    int rc = PyList_Append(*gaps, x);
    Py_DECREF(x);
    if (rc < 0) return -1;
    x = PyLong_FromLongLong(b);
    if (!x) return -1;
    rc = PyList_Append(*gaps, x);
    Py_DECREF(x);
    return rc;
}

/* A record line's metadata: offset, timestamp, sizes, sequence, header keys (o has 200 bytes free). */
static inline int put_record_meta(Out *o, const uint8_t *b, const Spans *sp, int64_t offset, int64_t timestamp,
                                  const char *ts_name, size_t ts_name_len, int32_t seq) {
    PUT_LIT(o, "| offset: ");
    put_i64(o, offset);
    put(o, ts_name, ts_name_len);
    put_i64(o, timestamp);
    PUT_LIT(o, " keySize: ");
    put_i64(o, sp->kl);
    PUT_LIT(o, " valueSize: ");
    put_i64(o, sp->vl);
    PUT_LIT(o, " sequence: ");
    put_i64(o, seq);
    PUT_LIT(o, " headerKeys: ");
    return put_header_keys(o, b, sp->hstart, sp->hcount);
}

/* A record line's key and payload (--print-data-log), each when not null. */
static inline int put_record_data(Out *o, const uint8_t *b, const Spans *sp, int meta) {
    if (sp->kl >= 0) {
        if (out_reserve(o, 8) < 0) return -1;
        if (meta)
            PUT_LIT(o, " key: ");
        else
            PUT_LIT(o, "| key: ");
        if (put_java_utf8(o, b + sp->kp, sp->kl) < 0) return -1;
    }
    if (sp->vl >= 0) {
        if (out_reserve(o, 10) < 0) return -1;
        PUT_LIT(o, " payload: ");
        if (put_java_utf8(o, b + sp->vp, sp->vl) < 0) return -1;
    }
    return 0;
}

/* One batch's record lines into o, from data b[p:end]: 0 done, 1 when the batch is not plain and well formed
 * (the caller falls back to Python; o and the gaps may hold part of it), -1 on a Python error. */
static int format_records(Out *o, const uint8_t *b, Py_ssize_t p, Py_ssize_t end, Py_ssize_t count,
                          int64_t base_offset, int64_t base_timestamp, int log_append, int64_t log_append_time,
                          int32_t base_sequence, int64_t *lastp, PyObject **gaps, int flags) {
    int64_t last = *lastp;
    int meta = flags & FLAG_METADATA, data = flags & FLAG_DATA;
    const char *ts_name = log_append ? " LogAppendTime: " : " CreateTime: ";
    size_t ts_name_len = strlen(ts_name);
    /* Every record takes at least one byte: a larger count cannot be right (Python reports it). */
    if (count < 0 || count > end - p) return 1;
    if (out_reserve(o, (size_t)(end - p) + (size_t)count * 160 + 64) < 0) return -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t ts_delta, offset, timestamp;
        int32_t off_delta;
        Spans sp;
        if (parse_record(b, &p, end, &ts_delta, &off_delta, &sp) < 0) return 1;
        /* Java long arithmetic: both sums wrap. */
        offset = s64((uint64_t)base_offset + (uint64_t)(int64_t)off_delta);
        timestamp = log_append ? log_append_time : s64((uint64_t)base_timestamp + (uint64_t)ts_delta);
        /* Kafka's non-consecutive offsets check (dumplog._TextDumper.dump_records), in longs. */
        if (last == -1)
            last = offset;
        else if (offset != s64((uint64_t)last + 1u)) {
            if (add_gap(gaps, last, offset) < 0) return -1;
        }
        last = offset;
        if (out_reserve(o, 200) < 0) return -1;
        if (meta && put_record_meta(o, b, &sp, offset, timestamp, ts_name, ts_name_len,
                                    base_sequence >= 0 ? increment_sequence(base_sequence, off_delta) : -1) < 0)
            return -1;
        if (data && put_record_data(o, b, &sp, meta) < 0) return -1;
        if (out_reserve(o, 1) < 0) return -1;
        PUT_LIT(o, "\n");
    }
    if (p != end) return 1; /* leftover bytes: Kafka's "records still remaining" */
    *lastp = last;
    return 0;
}

/* The text as bytes (FLAG_BYTES) or str. */
static PyObject *out_text(Out *o, int flags) {
    if (flags & FLAG_BYTES) return PyBytes_FromStringAndSize(o->p ? o->p : "", (Py_ssize_t)o->len);
    if (!o->high) {
        PyObject *text = PyUnicode_New((Py_ssize_t)o->len, 127);
        if (text && o->len) memcpy(PyUnicode_DATA(text), o->p, o->len);
        return text;
    }
    return PyUnicode_DecodeUTF8(o->p ? o->p : "", (Py_ssize_t)o->len, "strict");
}

static PyObject *format_v2_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end, count;
    long long base_offset, base_timestamp;
    PyObject *log_append_obj, *last_obj;
    int base_sequence, flags;
    if (!PyArg_ParseTuple(args, "y*nnnLLOiOi:format_v2_records", &view, &pos, &end, &count, &base_offset,
                          &base_timestamp, &log_append_obj, &base_sequence, &last_obj, &flags))
        return NULL;
    PyObject *result = NULL, *gaps = NULL;
    Out o = {NULL, 0, 0, 0};
    int log_append = log_append_obj != Py_None;
    long long log_append_time = 0, last_ll;
    if (pos < 0 || end > view.len || pos > end) goto fallback;
    if (log_append) {
        log_append_time = PyLong_AsLongLong(log_append_obj);
        if (log_append_time == -1 && PyErr_Occurred()) goto fallback_clear;
    }
    last_ll = PyLong_AsLongLong(last_obj);
    if (last_ll == -1 && PyErr_Occurred()) goto fallback_clear;
    {
        int64_t last = last_ll;
        int rc = format_records(&o, (const uint8_t *)view.buf, pos, end, count, base_offset, base_timestamp,
                                log_append, log_append_time, base_sequence, &last, &gaps, flags);
        if (rc < 0) goto error;
        if (rc > 0) goto fallback;
        PyObject *text = out_text(&o, flags);
        if (!text) goto error;
        result = Py_BuildValue("(NLO)", text, (long long)last, gaps ? gaps : Py_None);
        goto done;
    }

fallback_clear:
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) goto error;
    PyErr_Clear();
fallback:
    result = Py_None;
    Py_INCREF(result);
    goto done;
error:
    result = NULL;
done:
    Py_XDECREF(gaps);
    PyMem_Free(o.p);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------ runs of batches */


/* The batch line of the plain batch h at pos, as dumplog._v2_batch_line writes it. */
static int put_batch_line(Out *o, const uint8_t *h, Py_ssize_t pos, Py_ssize_t size) {
    int16_t attributes = s16(be16(h + V2_ATTRIBUTES_OFFSET));
    int64_t base_offset = s64(be64(h));
    int32_t delta = s32(be32(h + V2_LAST_OFFSET_DELTA_OFFSET)), base_sequence = s32(be32(h + V2_BASE_SEQUENCE_OFFSET));
    if (out_reserve(o, 600) < 0) return -1;
    PUT_LIT(o, "baseOffset: ");
    put_i64(o, base_offset);
    PUT_LIT(o, " lastOffset: ");
    put_i64(o, s64((uint64_t)base_offset + (uint64_t)(int64_t)delta));
    PUT_LIT(o, " count: ");
    put_i64(o, s32(be32(h + V2_RECORDS_COUNT_OFFSET)));
    PUT_LIT(o, " baseSequence: ");
    put_i64(o, base_sequence);
    PUT_LIT(o, " lastSequence: ");
    put_i64(o, base_sequence == -1 ? -1 : increment_sequence(base_sequence, delta));
    PUT_LIT(o, " producerId: ");
    put_i64(o, s64(be64(h + V2_PRODUCER_ID_OFFSET)));
    PUT_LIT(o, " producerEpoch: ");
    put_i64(o, s16(be16(h + V2_PRODUCER_EPOCH_OFFSET)));
    PUT_LIT(o, " partitionLeaderEpoch: ");
    put_i64(o, s32(be32(h + V2_PARTITION_LEADER_EPOCH_OFFSET)));
    if (attributes & 0x10)
        PUT_LIT(o, " isTransactional: true isControl: false deleteHorizonMs: ");
    else
        PUT_LIT(o, " isTransactional: false isControl: false deleteHorizonMs: ");
    if (attributes & 0x40) {
        PUT_LIT(o, "OptionalLong[");
        put_i64(o, s64(be64(h + V2_BASE_TIMESTAMP_OFFSET)));
        PUT_LIT(o, "]");
    } else {
        PUT_LIT(o, "OptionalLong.empty");
    }
    PUT_LIT(o, " position: ");
    put_i64(o, pos);
    if (attributes & 0x08)
        PUT_LIT(o, " LogAppendTime: ");
    else
        PUT_LIT(o, " CreateTime: ");
    put_i64(o, s64(be64(h + V2_MAX_TIMESTAMP_OFFSET)));
    PUT_LIT(o, " size: ");
    put_i64(o, size);
    PUT_LIT(o, " magic: 2 compresscodec: none crc: ");
    put_i64(o, be32(h + V2_CRC_POS));
    PUT_LIT(o, " isvalid: true\n");
    return 0;
}

/* One plain batch at b[pos:] (its line and its records' lines) into o: 0 done, 1 not plain (o, *lastp and
 * the gaps as they were), -1 on a Python error. Plain: magic 2, the whole batch before `end`, its CRC right,
 * uncompressed, not a control batch, at least one record, records that parse exactly. */
static int format_batch(Out *o, const uint8_t *b, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t *sizep,
                        int64_t *lastp, PyObject **gaps, int flags) {
    if (end - pos < V2_HEADER_SIZE) return 1;
    const uint8_t *h = b + pos;
    int32_t length = s32(be32(h + V2_LENGTH_OFFSET));
    if (h[MAGIC_OFFSET] != 2 || length < V2_HEADER_SIZE - LOG_OVERHEAD || (Py_ssize_t)length > end - pos - LOG_OVERHEAD) return 1;
    Py_ssize_t size = LOG_OVERHEAD + (Py_ssize_t)length;
    int16_t attributes = s16(be16(h + V2_ATTRIBUTES_OFFSET));
    int32_t count = s32(be32(h + V2_RECORDS_COUNT_OFFSET));
    if ((attributes & 0x27) != 0 || count <= 0) return 1; /* compressed, unknown codec, or control */
    uint32_t crc = be32(h + V2_CRC_POS);
    if (crc32c(h + V2_CRC_START, (size_t)(size - V2_CRC_START)) != crc) return 1;
    int64_t base_offset = s64(be64(h)), base_timestamp = s64(be64(h + V2_BASE_TIMESTAMP_OFFSET));
    int64_t max_timestamp = s64(be64(h + V2_MAX_TIMESTAMP_OFFSET));
    int32_t base_sequence = s32(be32(h + V2_BASE_SEQUENCE_OFFSET));
    int log_append = (attributes & 0x08) != 0;
    size_t len0 = o->len;
    Py_ssize_t ngaps = *gaps ? PyList_GET_SIZE(*gaps) : 0;
    int64_t last = *lastp;
    if (put_batch_line(o, h, pos, size) < 0) return -1;
    int rc = format_records(o, b, pos + V2_HEADER_SIZE, pos + size, count, base_offset, base_timestamp, log_append,
                            max_timestamp, base_sequence, &last, gaps, flags);
    if (rc > 0) {
        o->len = len0;
        if (*gaps && PyList_SetSlice(*gaps, ngaps, PyList_GET_SIZE(*gaps), NULL) < 0) return -1;
        return 1;
    }
    if (rc == 0) {
        *lastp = last;
        *sizep = size;
    }
    return rc;
}

static PyObject *format_v2_run(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end, budget;
    long long last_ll;
    int flags;
    if (!PyArg_ParseTuple(args, "y*nnnLi:format_v2_run", &view, &pos, &end, &budget, &last_ll, &flags)) return NULL;
    PyObject *result = NULL, *gaps = NULL;
    Out o = {NULL, 0, 0, 0};
    if (pos < 0 || end > view.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "format_v2_run: pos/end outside the buffer");
        goto done;
    }
    {
        const uint8_t *b = (const uint8_t *)view.buf;
        int64_t last = last_ll;
        Py_ssize_t start = pos;
        while (pos - start < budget) {
            Py_ssize_t size = 0;
            int rc = format_batch(&o, b, pos, end, &size, &last, &gaps, flags);
            if (rc < 0) goto done;
            if (rc > 0) break;
            pos += size;
        }
        PyObject *text = out_text(&o, flags);
        if (!text) goto done;
        result = Py_BuildValue("(NnLO)", text, pos, (long long)last, gaps ? gaps : Py_None);
    }
done:
    Py_XDECREF(gaps);
    PyMem_Free(o.p);
    PyBuffer_Release(&view);
    return result;
}

/* java_utf8(data) -> str: `new String(data, UTF_8)`, for the twin tests. */
static PyObject *java_utf8(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Out o = {NULL, 0, 0, 0};
    PyObject *text = NULL;
    if (put_java_utf8(&o, (const uint8_t *)view.buf, view.len) == 0)
        text = PyUnicode_DecodeUTF8(o.p ? o.p : "", (Py_ssize_t)o.len, "strict");
    PyMem_Free(o.p);
    PyBuffer_Release(&view);
    return text;
}

static PyMethodDef methods[] = {
    {"format_v2_records", format_v2_records, METH_VARARGS,
     "format_v2_records(data, pos, end, count, base_offset, base_timestamp, log_append_time, base_sequence, last, "
     "flags) -> None | (text, last, gaps): kafka-dump-log's record lines for one v2 batch (text: str, or UTF-8 "
     "bytes with FLAG_BYTES)."},
    {"format_v2_run", format_v2_run, METH_VARARGS,
     "format_v2_run(data, pos, end, budget, last, flags) -> (text, pos, last, gaps): the batch lines and record "
     "lines of the plain v2 batches from data[pos:], up to `end`, until one is not plain or `budget` bytes are "
     "done; pos: where it stopped."},
    {"java_utf8", java_utf8, METH_O, "java_utf8(data) -> str: new String(data, UTF_8)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_dumptext_c", "The native text formatter of kstore dump-segment.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__dumptext_c(void) {
    init_lone_tables();
    kstore_crc_init();
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    if (PyModule_AddIntConstant(m, "FLAG_METADATA", FLAG_METADATA) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_DATA", FLAG_DATA) < 0 ||
        PyModule_AddIntConstant(m, "FLAG_BYTES", FLAG_BYTES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
