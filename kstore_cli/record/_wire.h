/*
 * Kafka's wire building blocks, once for kstore's C extensions (the Python side is record/wire.py):
 * header offsets, big-endian reads and writes, two's complement views, varints (ByteUtils), and
 * the checksums (_crc.h, included from here). Included, not linked: each extension is its own
 * shared object. Include it after <Python.h> (for Py_ssize_t); it brings <stdint.h>, <string.h>
 * and, on x86-64 with GCC or Clang, SSE 4.2's CRC-32C (chosen at run time by kstore_crc_init()).
 */
#ifndef KSTORE_WIRE_H
#define KSTORE_WIRE_H

#include <stdint.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
#define KSTORE_HW_CRC 1
#endif

/* ------------------------------------------------------------------ every log entry (Records) */

#define LOG_OVERHEAD 12            /* Records.LOG_OVERHEAD: int64 offset, int32 size */
#define SIZE_OFFSET 8              /* Records.SIZE_OFFSET */
#define MAGIC_OFFSET 16            /* Records.MAGIC_OFFSET: int8 magic, in every format */
#define HEADER_SIZE_UP_TO_MAGIC 17 /* Records.HEADER_SIZE_UP_TO_MAGIC */

/* ------------------------------------------------------------------ a magic v2 batch (DefaultRecordBatch) */

#define V2_BASE_OFFSET_OFFSET 0             /* int64 baseOffset */
#define V2_LENGTH_OFFSET 8                  /* int32 batchLength: bytes after this field */
#define V2_PARTITION_LEADER_EPOCH_OFFSET 12 /* int32, not covered by the CRC */
#define V2_CRC_POS 17                       /* CRC_OFFSET: uint32 CRC-32C of [V2_CRC_START, end of batch) */
#define V2_CRC_START 21                     /* ATTRIBUTES_OFFSET: int16 attributes */
#define V2_ATTRIBUTES_OFFSET V2_CRC_START
#define V2_LAST_OFFSET_DELTA_OFFSET 23      /* int32 */
#define V2_BASE_TIMESTAMP_OFFSET 27         /* int64 (the delete horizon when attribute bit 6 is set) */
#define V2_MAX_TIMESTAMP_OFFSET 35          /* int64 */
#define V2_PRODUCER_ID_OFFSET 43            /* int64 */
#define V2_PRODUCER_EPOCH_OFFSET 51         /* int16 */
#define V2_BASE_SEQUENCE_OFFSET 53          /* int32 */
#define V2_RECORDS_COUNT_OFFSET 57          /* int32 */
#define V2_HEADER_SIZE 61                   /* RECORDS_OFFSET, RECORD_BATCH_OVERHEAD */

/* ------------------------------------------------------------------ a legacy entry (LegacyRecord) */

/* Offsets from the start of the entry (log overhead included). */
#define LEGACY_CRC_OFFSET 12        /* LOG_OVERHEAD + CRC_OFFSET: uint32 CRC-32 of [magic, end) */
#define LEGACY_MAGIC_OFFSET 16      /* LOG_OVERHEAD + MAGIC_OFFSET */
#define LEGACY_ATTRIBUTES_OFFSET 17 /* LOG_OVERHEAD + ATTRIBUTES_OFFSET */
#define RECORD_OVERHEAD_V0 14       /* LegacyRecord.RECORD_OVERHEAD_V0: the smallest size field of an entry */

/* ------------------------------------------------------------------ big-endian reads and writes */

static inline uint16_t be16(const uint8_t *p) { return (uint16_t)(((unsigned)p[0] << 8) | p[1]); }
static inline uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}
static inline uint64_t be64(const uint8_t *p) { return ((uint64_t)be32(p) << 32) | be32(p + 4); }
static inline void put_be16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static inline void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}
static inline void put_be64(uint8_t *p, uint64_t v) { put_be32(p, (uint32_t)(v >> 32)); put_be32(p + 4, (uint32_t)v); }

/* Two's complement views without implementation-defined casts of out-of-range values. */
static inline int8_t s8(uint32_t v) { v &= 0xFF; return v < 0x80u ? (int8_t)v : (int8_t)((int32_t)v - 0x100); }
static inline int16_t s16(uint32_t v) { v &= 0xFFFF; return v < 0x8000u ? (int16_t)v : (int16_t)((int32_t)v - 0x10000); }
static inline int32_t s32(uint32_t v) { return v < 0x80000000u ? (int32_t)v : -(int32_t)(~v) - 1; }
static inline int64_t s64(uint64_t v) { return v < 0x8000000000000000ull ? (int64_t)v : -(int64_t)(~v) - 1; }
/* Java int arithmetic: the low 32 bits of v as an int. */
static inline int32_t wrap32(int64_t v) { return s32((uint32_t)(uint64_t)v); }

/* DefaultRecordBatch.incrementSequence (record/_decode_common.increment_sequence): wraps from
 * Integer.MAX_VALUE to 0, every step in Java's int arithmetic (on unsigned values: no signed overflow). */
static inline int32_t increment_sequence(int32_t sequence, int32_t increment) {
    if (sequence > wrap32((int64_t)INT32_MAX - increment))
        return wrap32((int64_t)wrap32((int64_t)increment - wrap32((int64_t)INT32_MAX - sequence)) - 1);
    return wrap32((int64_t)sequence + increment);
}

/* ------------------------------------------------------------------ varints (ByteUtils) */

/* What the readers return; each caller maps a failure to what it raises or does. */
enum { VARINT_OK = 0, VARINT_UNDERFLOW = -1, VARINT_TOO_LONG = -2 };

/* ByteUtils.readVarint at *pos, before end: at most 5 bytes; bits past 31 of the 5th byte are dropped.
 * VARINT_TOO_LONG when the 5th byte's high bit is set: *out then holds the bits read (Kafka's
 * "converted value", as an int). *pos moves only on VARINT_OK. */
static inline int rd_varint(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, int32_t *out) {
    uint32_t value = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    if (p < end && b[p] < 0x80) { /* one byte: most lengths, deltas and counts */
        value = b[p];
        *out = (int32_t)(value >> 1) ^ -(int32_t)(value & 1);
        *pos = p + 1;
        return VARINT_OK;
    }
    for (int i = 0;; i++) {
        if (p >= end) return VARINT_UNDERFLOW;
        uint32_t c = b[p++];
        if (i == 4) {
            if (c & 0x80) {
                *out = s32(value | (c << shift));
                return VARINT_TOO_LONG;
            }
            value |= c << shift; /* uint32: high bits drop, as in Kafka */
            break;
        }
        value |= (c & 0x7F) << shift;
        if (!(c & 0x80)) break;
        shift += 7;
    }
    *out = (int32_t)((int64_t)(value >> 1) ^ -(int64_t)(value & 1));
    *pos = p;
    return VARINT_OK;
}

/* ByteUtils.readVarlong: at most 10 bytes; VARINT_TOO_LONG when the 10th continues (*out: the bits read). */
static inline int rd_varlong(const uint8_t *b, Py_ssize_t *pos, Py_ssize_t end, int64_t *out) {
    uint64_t value = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    if (p < end && b[p] < 0x80) {
        value = b[p];
        *out = (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
        *pos = p + 1;
        return VARINT_OK;
    }
    for (;;) {
        if (p >= end) return VARINT_UNDERFLOW;
        uint64_t c = b[p++];
        value |= (c & 0x7F) << shift;
        if (!(c & 0x80)) break;
        shift += 7;
        if (shift > 63) {
            *out = s64(value);
            return VARINT_TOO_LONG;
        }
    }
    *out = (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
    *pos = p;
    return VARINT_OK;
}

/* The zigzag ByteUtils.writeVarint writes for n: the low 32 bits of (n << 1) ^ (n >> 31), with n's
 * sign extended past 64 bits (as Python's ints: record/_encode_py.py's twin). */
static inline uint32_t zigzag32(int64_t n) {
    uint64_t u = (uint64_t)n;
    uint64_t sign = (n < 0) ? ~0ull : 0ull;
    return (uint32_t)((u << 1) ^ (sign << 33 | (u >> 31)));
}
/* ByteUtils.writeVarlong's zigzag. */
static inline uint64_t zigzag64(int64_t n) {
    uint64_t u = (uint64_t)n;
    return (u << 1) ^ ((n < 0) ? ~0ull : 0ull);
}
/* Bytes of the unsigned varint of u. */
static inline Py_ssize_t uvarint_size(uint64_t u) {
    Py_ssize_t s = 1;
    while (u >= 0x80) { u >>= 7; s++; }
    return s;
}
/* ByteUtils.writeUnsignedVarint of u at p (minimal); returns the end of what it wrote. */
static inline uint8_t *put_uvarint(uint8_t *p, uint64_t u) {
    while (u >= 0x80) { *p++ = (uint8_t)((u & 0x7F) | 0x80); u >>= 7; }
    *p++ = (uint8_t)u;
    return p;
}
static inline uint8_t *put_varint(uint8_t *p, int64_t n) { return put_uvarint(p, zigzag32(n)); }
static inline uint8_t *put_varlong(uint8_t *p, int64_t n) { return put_uvarint(p, zigzag64(n)); }

#include "_crc.h"

#endif /* KSTORE_WIRE_H */
