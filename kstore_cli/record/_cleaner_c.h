/*
 * What the sources of the _cleaner_c extension share (_cleaner_c.c: the runs over batches;
 * _cleaner_map_c.c: MD5 and the OffsetMap type). Private to the extension: include it after <Python.h>
 * and "_wire.h". The per-record map work (digest memo, probing) stays static inline here; functions
 * shared between the files carry the kstore_ prefix.
 */
#ifndef KSTORE_CLEANER_C_H
#define KSTORE_CLEANER_C_H

/* Shared between the extension's files only: hidden, so calls inside a file bind (and inline) as for a
 * static function, and nothing is exported beyond the module's PyInit. */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

#define HASH_SIZE 16
#define BYTES_PER_ENTRY 24
#define INITIAL_SLOTS 4096
#define GROW_AT 0.7
#define SMALL_FRACTION 64

/* MD5 (RFC 1321) of n bytes at p. */
void kstore_md5(const uint8_t *p, size_t n, uint8_t out[HASH_SIZE]);

/* ------------------------------------------------------------------ digest memo */

/*
 * MD5 of a key is most of the cleaner's work (twice per record: building the map, then looking
 * each record up). Compacted topics repeat a bounded set of keys, so digests are remembered in a
 * 4-way set-associative memo keyed by the key's bytes (compared in full: a hit is the MD5 of
 * exactly those bytes). 8192 sets of 4 entries of 128 bytes (4 MiB), allocated on first use;
 * longer keys are always hashed.
 */
#define MEMO_SETS 8192
#define MEMO_WAYS 4
#define MEMO_KEY_MAX 110
typedef struct {
    uint16_t len; /* key length + 1; 0 = empty */
    uint8_t key[MEMO_KEY_MAX];
    uint8_t digest[HASH_SIZE];
} memo_t;

static inline uint64_t memo_hash(const uint8_t *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 29);
}

/* ------------------------------------------------------------------ OffsetMap */

typedef struct {
    PyObject_HEAD
    long long memory;       /* the dedupe buffer this map stands for */
    long long max_slots;    /* Kafka's slot count: memory / 24 */
    long long max_entries;  /* int(max_slots * load_factor) */
    long long slots;        /* slots of the table in use */
    long long entries;
    long long latest_offset;
    uint8_t *table;
    size_t table_bytes;
    int mapped;             /* the full table is an anonymous mapping (zero pages cost nothing) */
    memo_t *memo;
} OffsetMapObject;

extern PyTypeObject kstore_offset_map_type; /* OffsetMap */
/* Doubles the small table, or moves to Kafka's full table; 0, or -1 with an error set. */
int kstore_map_grow(OffsetMapObject *m);
/* Readies the OffsetMap type (and _cleaner_map_c.c's copy of _wire.h's tables); -1 with an error set. */
int kstore_cleaner_map_init(void);

static inline void key_digest(OffsetMapObject *m, const uint8_t *key, size_t n, uint8_t out[HASH_SIZE]) {
    if (n > MEMO_KEY_MAX) { kstore_md5(key, n, out); return; }
    if (!m->memo) {
        m->memo = PyMem_Calloc((size_t)MEMO_SETS * MEMO_WAYS, sizeof(memo_t));
        if (!m->memo) { kstore_md5(key, n, out); return; }
    }
    memo_t *set = &m->memo[(memo_hash(key, n) & (MEMO_SETS - 1)) * MEMO_WAYS];
    for (int w = 0; w < MEMO_WAYS; w++) {
        if (set[w].len == n + 1 && memcmp(set[w].key, key, n) == 0) {
            memcpy(out, set[w].digest, HASH_SIZE);
            return;
        }
    }
    kstore_md5(key, n, out);
    memmove(set + 1, set, (MEMO_WAYS - 1) * sizeof(memo_t)); /* the newest first, the oldest out */
    set->len = (uint16_t)(n + 1);
    memcpy(set->key, key, n);
    memcpy(set->digest, out, HASH_SIZE);
}

/* SkimpyOffsetMap.positionOf, as a slot number. */
static inline long long slot_of(const uint8_t *d, long long attempt, long long slots) {
    uint32_t probe = be32(d + (attempt < HASH_SIZE - 4 ? attempt : HASH_SIZE - 4));
    if (attempt > HASH_SIZE - 4) probe += (uint32_t)(uint64_t)(attempt - (HASH_SIZE - 4)); /* Java int wraps */
    int32_t p = s32(probe);
    uint32_t a = p == INT32_MIN ? 0 : (uint32_t)(p < 0 ? -p : p); /* Utils.abs */
    return (long long)(a % (uint64_t)slots);
}

static inline int slot_empty(const uint8_t *slot) {
    uint64_t a, b, c;
    memcpy(&a, slot, 8);
    memcpy(&b, slot + 8, 8);
    memcpy(&c, slot + 16, 8);
    return (a | b | c) == 0;
}

static inline int slot_holds(const uint8_t *slot, const uint8_t *d) {
    uint64_t a, b, x, y;
    memcpy(&a, slot, 8);
    memcpy(&b, slot + 8, 8);
    memcpy(&x, d, 8);
    memcpy(&y, d + 8, 8);
    return ((a ^ x) | (b ^ y)) == 0;
}

/* Associate offset with the digest (overwriting); may grow the table. */
static inline int map_put_digest(OffsetMapObject *m, const uint8_t *d, int64_t offset) {
    uint8_t *t = m->table;
    long long attempt = 0, limit = m->slots + HASH_SIZE - 4;
    uint8_t *slot;
    for (;; attempt++) {
        if (attempt >= limit) {
            PyErr_SetString(PyExc_RuntimeError, "Attempt to add a new entry to a full offset map.");
            return -1;
        }
        slot = t + slot_of(d, attempt, m->slots) * BYTES_PER_ENTRY;
        if (slot_empty(slot)) break;
        if (slot_holds(slot, d)) {
            put_be64(slot + HASH_SIZE, (uint64_t)offset);
            return 0;
        }
    }
    memcpy(slot, d, HASH_SIZE);
    put_be64(slot + HASH_SIZE, (uint64_t)offset);
    m->entries++;
    if (m->slots < m->max_slots && (double)m->entries > (double)m->slots * GROW_AT) return kstore_map_grow(m);
    return 0;
}

/* The offset stored for the digest, or -1 (SkimpyOffsetMap.get). */
static inline int64_t map_get_digest(OffsetMapObject *m, const uint8_t *d) {
    long long limit = m->slots + HASH_SIZE - 4;
    for (long long attempt = 0; attempt < limit; attempt++) {
        const uint8_t *slot = m->table + slot_of(d, attempt, m->slots) * BYTES_PER_ENTRY;
        if (slot_empty(slot)) return -1;
        if (slot_holds(slot, d)) return s64(be64(slot + HASH_SIZE));
    }
    return -1;
}


#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif /* KSTORE_CLEANER_C_H */
