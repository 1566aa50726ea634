/*
 * The checksums of Kafka's formats, shared by kstore's C extensions: CRC-32C (java.util.zip.CRC32C:
 * v2 batches), with SSE 4.2 chosen at run time, and CRC-32 (java.util.zip.CRC32: legacy messages).
 * Call kstore_crc_init() once, at module init.
 * Included through _wire.h (which brings <stdint.h>, <string.h> and, with KSTORE_HW_CRC, <nmmintrin.h>).
 */
#ifndef KSTORE_CRC_H
#define KSTORE_CRC_H

/* ------------------------------------------------------------------ CRC-32C (java.util.zip.CRC32C) */

static uint32_t crc_table[8][256];

static void crc_init_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++) crc_table[t][n] = (crc_table[t - 1][n] >> 8) ^ crc_table[0][crc_table[t - 1][n] & 0xFF];
}

/* Slice-by-8 table CRC: the portable fallback. `crc` is the running (inverted) register. */
static uint32_t crc32c_sw(uint32_t crc, const uint8_t *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) { crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8); n--; }
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
        uint32_t hi = (uint32_t)p[4] | ((uint32_t)p[5] << 8) | ((uint32_t)p[6] << 16) | ((uint32_t)p[7] << 24);
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
              crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
              crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#ifdef KSTORE_HW_CRC
/*
 * SSE 4.2's crc32 instruction computes exactly CRC-32C; chosen at run time (no -march needed).
 * The instruction has a latency of 3 cycles and a throughput of 1: three independent streams over
 * consecutive blocks keep it busy, and their registers are joined with "append n zero bytes"
 * operators (Mark Adler's crc32c.c), tabulated once for the two block sizes.
 */
#define CRC_LONG 8192
#define CRC_SHORT 256
static uint32_t crc_long_zeros[4][256], crc_short_zeros[4][256];

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1) sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat) {
    for (int n = 0; n < 32; n++) square[n] = gf2_times(mat, mat[n]);
}

/* The operator (32x32 over GF(2)) that appends len zero bytes to a raw CRC-32C register. */
static void crc_zeros_op(uint32_t *even, size_t len) {
    uint32_t odd[32];
    odd[0] = 0x82F63B78u; /* one zero bit */
    uint32_t row = 1;
    for (int n = 1; n < 32; n++) { odd[n] = row; row <<= 1; }
    gf2_square(even, odd); /* two zero bits */
    gf2_square(odd, even); /* four zero bits */
    /* odd now appends one zero byte... after the first square below; the loop squares len's bits */
    do {
        gf2_square(even, odd);
        len >>= 1;
        if (len == 0) return;
        gf2_square(odd, even);
        len >>= 1;
    } while (len);
    memcpy(even, odd, sizeof odd);
}

static void crc_zeros(uint32_t zeros[4][256], size_t len) {
    uint32_t op[32];
    crc_zeros_op(op, len);
    for (uint32_t n = 0; n < 256; n++) {
        zeros[0][n] = gf2_times(op, n);
        zeros[1][n] = gf2_times(op, n << 8);
        zeros[2][n] = gf2_times(op, n << 16);
        zeros[3][n] = gf2_times(op, n << 24);
    }
}

static inline uint32_t crc_shift(uint32_t zeros[4][256], uint32_t crc) {
    return zeros[0][crc & 0xFF] ^ zeros[1][(crc >> 8) & 0xFF] ^ zeros[2][(crc >> 16) & 0xFF] ^ zeros[3][crc >> 24];
}

/* The CRC of 3 * block bytes from p, as three streams of block bytes (the instruction's latency
 * overlapped), combined by shifting the first two over the zeros that follow them. */
__attribute__((target("sse4.2"), always_inline)) static inline uint64_t crc32c_hw3(uint64_t c0, const uint8_t *p,
                                                                                size_t block, uint32_t zeros[4][256]) {
    uint64_t c1 = 0, c2 = 0, w0, w1, w2;
    const uint8_t *end = p + block;
    do {
        memcpy(&w0, p, 8);
        memcpy(&w1, p + block, 8);
        memcpy(&w2, p + 2 * block, 8);
        c0 = _mm_crc32_u64(c0, w0);
        c1 = _mm_crc32_u64(c1, w1);
        c2 = _mm_crc32_u64(c2, w2);
        p += 8;
    } while (p < end);
    c0 = crc_shift(zeros, (uint32_t)c0) ^ (uint32_t)c1;
    return crc_shift(zeros, (uint32_t)c0) ^ (uint32_t)c2;
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c0 = crc;
    while (n && ((uintptr_t)p & 7)) { c0 = _mm_crc32_u8((uint32_t)c0, *p++); n--; }
    while (n >= 3 * CRC_LONG) {
        c0 = crc32c_hw3(c0, p, CRC_LONG, crc_long_zeros);
        p += 3 * CRC_LONG;
        n -= 3 * CRC_LONG;
    }
    while (n >= 3 * CRC_SHORT) {
        c0 = crc32c_hw3(c0, p, CRC_SHORT, crc_short_zeros);
        p += 3 * CRC_SHORT;
        n -= 3 * CRC_SHORT;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c0 = _mm_crc32_u64(c0, w);
        p += 8;
        n -= 8;
    }
    while (n--) c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return (uint32_t)c0;
}
#endif

static int crc_hw __attribute__((unused)) = 0;

static inline uint32_t crc32c(const uint8_t *p, size_t n) {
#ifdef KSTORE_HW_CRC
    if (crc_hw) return crc32c_hw(0xFFFFFFFFu, p, n) ^ 0xFFFFFFFFu;
#endif
    return crc32c_sw(0xFFFFFFFFu, p, n) ^ 0xFFFFFFFFu;
}


/* The running CRC-32C register over more bytes (start from 0xFFFFFFFF, finish with ^ 0xFFFFFFFF). */
static inline uint32_t crc32c_update(uint32_t crc, const uint8_t *p, size_t n) {
#ifdef KSTORE_HW_CRC
    if (crc_hw) return crc32c_hw(crc, p, n);
#endif
    return crc32c_sw(crc, p, n);
}

/* ------------------------------------------------------------------ CRC-32 (zlib's crc32, java.util.zip.CRC32): slice-by-8 tables */
static uint32_t crc32_table[8][256];

static void crc32_init_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        crc32_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            crc32_table[t][n] = (crc32_table[t - 1][n] >> 8) ^ crc32_table[0][crc32_table[t - 1][n] & 0xFF];
}

__attribute__((unused)) static uint32_t crc32_ieee(const uint8_t *p, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24));
        uint32_t hi = (uint32_t)p[4] | ((uint32_t)p[5] << 8) | ((uint32_t)p[6] << 16) | ((uint32_t)p[7] << 24);
        crc = crc32_table[7][lo & 0xFF] ^ crc32_table[6][(lo >> 8) & 0xFF] ^ crc32_table[5][(lo >> 16) & 0xFF] ^
              crc32_table[4][lo >> 24] ^ crc32_table[3][hi & 0xFF] ^ crc32_table[2][(hi >> 8) & 0xFF] ^
              crc32_table[1][(hi >> 16) & 0xFF] ^ crc32_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = crc32_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

/* Both checksums' tables, and the CPU's CRC instruction if it has one. Each translation unit that includes
 * this header has its own tables: one that computes a checksum calls this at module init; one that does not
 * need not (hence `unused`: nothing of the header is then kept or filled). */
__attribute__((unused)) static void kstore_crc_init(void) {
    crc_init_tables();
    crc32_init_tables();
#ifdef KSTORE_HW_CRC
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
    crc_zeros(crc_long_zeros, CRC_LONG);
    crc_zeros(crc_short_zeros, CRC_SHORT);
#endif
}

#endif /* KSTORE_CRC_H */
