/*
 * The offset map of the _cleaner_c extension (declared in _cleaner_c.h): MD5 (RFC 1321) and the
 * OffsetMap type, Kafka's SkimpyOffsetMap (see _cleaner_c.c's opening comment).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <sys/mman.h>
#include "_wire.h"
#include "_cleaner_c.h"

/* ------------------------------------------------------------------ MD5 (RFC 1321) */

#define MD5_F(x, y, z) ((z) ^ ((x) & ((y) ^ (z))))
#define MD5_G(x, y, z) ((y) ^ ((z) & ((x) ^ (y))))
#define MD5_H(x, y, z) ((x) ^ (y) ^ (z))
#define MD5_I(x, y, z) ((y) ^ ((x) | ~(z)))
#define STEP(f, a, b, c, d, x, t, s) \
    (a) += MD5_##f((b), (c), (d)) + (x) + (t); \
    (a) = ((a) << (s)) | ((a) >> (32 - (s))); \
    (a) += (b)

static inline void md5_round1(uint32_t v[4], const uint32_t x[16]) {
    uint32_t a = v[0], b = v[1], c = v[2], d = v[3];
    STEP(F, a, b, c, d, x[0], 0xd76aa478u, 7);
    STEP(F, d, a, b, c, x[1], 0xe8c7b756u, 12);
    STEP(F, c, d, a, b, x[2], 0x242070dbu, 17);
    STEP(F, b, c, d, a, x[3], 0xc1bdceeeu, 22);
    STEP(F, a, b, c, d, x[4], 0xf57c0fafu, 7);
    STEP(F, d, a, b, c, x[5], 0x4787c62au, 12);
    STEP(F, c, d, a, b, x[6], 0xa8304613u, 17);
    STEP(F, b, c, d, a, x[7], 0xfd469501u, 22);
    STEP(F, a, b, c, d, x[8], 0x698098d8u, 7);
    STEP(F, d, a, b, c, x[9], 0x8b44f7afu, 12);
    STEP(F, c, d, a, b, x[10], 0xffff5bb1u, 17);
    STEP(F, b, c, d, a, x[11], 0x895cd7beu, 22);
    STEP(F, a, b, c, d, x[12], 0x6b901122u, 7);
    STEP(F, d, a, b, c, x[13], 0xfd987193u, 12);
    STEP(F, c, d, a, b, x[14], 0xa679438eu, 17);
    STEP(F, b, c, d, a, x[15], 0x49b40821u, 22);
    v[0] = a;
    v[1] = b;
    v[2] = c;
    v[3] = d;
}

static inline void md5_round2(uint32_t v[4], const uint32_t x[16]) {
    uint32_t a = v[0], b = v[1], c = v[2], d = v[3];
    STEP(G, a, b, c, d, x[1], 0xf61e2562u, 5);
    STEP(G, d, a, b, c, x[6], 0xc040b340u, 9);
    STEP(G, c, d, a, b, x[11], 0x265e5a51u, 14);
    STEP(G, b, c, d, a, x[0], 0xe9b6c7aau, 20);
    STEP(G, a, b, c, d, x[5], 0xd62f105du, 5);
    STEP(G, d, a, b, c, x[10], 0x02441453u, 9);
    STEP(G, c, d, a, b, x[15], 0xd8a1e681u, 14);
    STEP(G, b, c, d, a, x[4], 0xe7d3fbc8u, 20);
    STEP(G, a, b, c, d, x[9], 0x21e1cde6u, 5);
    STEP(G, d, a, b, c, x[14], 0xc33707d6u, 9);
    STEP(G, c, d, a, b, x[3], 0xf4d50d87u, 14);
    STEP(G, b, c, d, a, x[8], 0x455a14edu, 20);
    STEP(G, a, b, c, d, x[13], 0xa9e3e905u, 5);
    STEP(G, d, a, b, c, x[2], 0xfcefa3f8u, 9);
    STEP(G, c, d, a, b, x[7], 0x676f02d9u, 14);
    STEP(G, b, c, d, a, x[12], 0x8d2a4c8au, 20);
    v[0] = a;
    v[1] = b;
    v[2] = c;
    v[3] = d;
}

static inline void md5_round3(uint32_t v[4], const uint32_t x[16]) {
    uint32_t a = v[0], b = v[1], c = v[2], d = v[3];
    STEP(H, a, b, c, d, x[5], 0xfffa3942u, 4);
    STEP(H, d, a, b, c, x[8], 0x8771f681u, 11);
    STEP(H, c, d, a, b, x[11], 0x6d9d6122u, 16);
    STEP(H, b, c, d, a, x[14], 0xfde5380cu, 23);
    STEP(H, a, b, c, d, x[1], 0xa4beea44u, 4);
    STEP(H, d, a, b, c, x[4], 0x4bdecfa9u, 11);
    STEP(H, c, d, a, b, x[7], 0xf6bb4b60u, 16);
    STEP(H, b, c, d, a, x[10], 0xbebfbc70u, 23);
    STEP(H, a, b, c, d, x[13], 0x289b7ec6u, 4);
    STEP(H, d, a, b, c, x[0], 0xeaa127fau, 11);
    STEP(H, c, d, a, b, x[3], 0xd4ef3085u, 16);
    STEP(H, b, c, d, a, x[6], 0x04881d05u, 23);
    STEP(H, a, b, c, d, x[9], 0xd9d4d039u, 4);
    STEP(H, d, a, b, c, x[12], 0xe6db99e5u, 11);
    STEP(H, c, d, a, b, x[15], 0x1fa27cf8u, 16);
    STEP(H, b, c, d, a, x[2], 0xc4ac5665u, 23);
    v[0] = a;
    v[1] = b;
    v[2] = c;
    v[3] = d;
}

static inline void md5_round4(uint32_t v[4], const uint32_t x[16]) {
    uint32_t a = v[0], b = v[1], c = v[2], d = v[3];
    STEP(I, a, b, c, d, x[0], 0xf4292244u, 6);
    STEP(I, d, a, b, c, x[7], 0x432aff97u, 10);
    STEP(I, c, d, a, b, x[14], 0xab9423a7u, 15);
    STEP(I, b, c, d, a, x[5], 0xfc93a039u, 21);
    STEP(I, a, b, c, d, x[12], 0x655b59c3u, 6);
    STEP(I, d, a, b, c, x[3], 0x8f0ccc92u, 10);
    STEP(I, c, d, a, b, x[10], 0xffeff47du, 15);
    STEP(I, b, c, d, a, x[1], 0x85845dd1u, 21);
    STEP(I, a, b, c, d, x[8], 0x6fa87e4fu, 6);
    STEP(I, d, a, b, c, x[15], 0xfe2ce6e0u, 10);
    STEP(I, c, d, a, b, x[6], 0xa3014314u, 15);
    STEP(I, b, c, d, a, x[13], 0x4e0811a1u, 21);
    STEP(I, a, b, c, d, x[4], 0xf7537e82u, 6);
    STEP(I, d, a, b, c, x[11], 0xbd3af235u, 10);
    STEP(I, c, d, a, b, x[2], 0x2ad7d2bbu, 15);
    STEP(I, b, c, d, a, x[9], 0xeb86d391u, 21);
    v[0] = a;
    v[1] = b;
    v[2] = c;
    v[3] = d;
}

static void md5_block(uint32_t st[4], const uint8_t *p) {
    uint32_t x[16];
    for (int i = 0; i < 16; i++)
        x[i] = (uint32_t)p[4 * i] | ((uint32_t)p[4 * i + 1] << 8) | ((uint32_t)p[4 * i + 2] << 16) |
               ((uint32_t)p[4 * i + 3] << 24);
    uint32_t v[4] = {st[0], st[1], st[2], st[3]};
    md5_round1(v, x);
    md5_round2(v, x);
    md5_round3(v, x);
    md5_round4(v, x);
    st[0] += v[0];
    st[1] += v[1];
    st[2] += v[2];
    st[3] += v[3];
}

void kstore_md5(const uint8_t *p, size_t n, uint8_t out[HASH_SIZE]) {
    uint32_t st[4] = {0x67452301u, 0xefcdab89u, 0x98badcfeu, 0x10325476u};
    uint64_t bits = (uint64_t)n * 8;
    while (n >= 64) {
        md5_block(st, p);
        p += 64;
        n -= 64;
    }
    uint8_t tail[128];
    memcpy(tail, p, n);
    tail[n] = 0x80;
    size_t total = n + 9 <= 64 ? 64 : 128;
    memset(tail + n + 1, 0, total - n - 1);
    for (int i = 0; i < 8; i++) tail[total - 8 + i] = (uint8_t)(bits >> (8 * i));
    md5_block(st, tail);
    if (total == 128) md5_block(st, tail + 64);
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++) out[4 * i + k] = (uint8_t)(st[i] >> (8 * k));
}

/* ------------------------------------------------------------------ OffsetMap */

static int table_alloc(OffsetMapObject *m, long long slots) {
    size_t bytes = (size_t)slots * BYTES_PER_ENTRY;
    int full = slots == m->max_slots && slots > INITIAL_SLOTS;
    uint8_t *t;
    if (full) {
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        t = p == MAP_FAILED ? NULL : p;
    } else {
        t = PyMem_Calloc(bytes, 1);
    }
    if (!t) { PyErr_NoMemory(); return -1; }
    m->table = t;
    m->table_bytes = bytes;
    m->mapped = full;
    m->slots = slots;
    return 0;
}

static void table_free(uint8_t *t, size_t bytes, int mapped) {
    if (!t) return;
    if (mapped) munmap(t, bytes);
    else PyMem_Free(t);
}

/* Double the small table, or move to Kafka's full table; re-insert every entry in table order. */
int kstore_map_grow(OffsetMapObject *m) {
    uint8_t *old = m->table;
    size_t old_bytes = m->table_bytes;
    int old_mapped = m->mapped;
    long long doubled = m->slots * 2;
    long long slots = (doubled > m->memory / (BYTES_PER_ENTRY * SMALL_FRACTION) || doubled >= m->max_slots)
                          ? m->max_slots : doubled;
    if (table_alloc(m, slots) < 0) {
        m->table = old;
        return -1;
    }
    m->entries = 0;
    int rc = 0;
    for (size_t pos = 0; pos < old_bytes && rc == 0; pos += BYTES_PER_ENTRY)
        if (!slot_empty(old + pos))
            rc = map_put_digest(m, old + pos, s64(be64(old + pos + HASH_SIZE)));
    table_free(old, old_bytes, old_mapped);
    return rc;
}

static int map_clear(OffsetMapObject *m) {
    table_free(m->table, m->table_bytes, m->mapped);
    m->table = NULL;
    long long slots = (long long)INITIAL_SLOTS * BYTES_PER_ENTRY * SMALL_FRACTION >= m->memory ? m->max_slots
                                                                                               : INITIAL_SLOTS;
    if (table_alloc(m, slots) < 0) return -1;
    m->entries = 0;
    m->latest_offset = -1;
    return 0;
}

static int om_init(OffsetMapObject *m, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"memory", "load_factor", NULL};
    long long memory = 128LL * 1024 * 1024;
    PyObject *load_factor = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|LO", kwlist, &memory, &load_factor)) return -1;
    m->memory = memory;
    m->max_slots = memory >= 0 ? memory / BYTES_PER_ENTRY : -((-memory + BYTES_PER_ENTRY - 1) / BYTES_PER_ENTRY);
    /* int(max_slots * load_factor), with Python's own arithmetic */
    PyObject *slots = PyLong_FromLongLong(m->max_slots), *lf = load_factor ? load_factor : PyFloat_FromDouble(0.9);
    PyObject *product = slots && lf ? PyNumber_Multiply(slots, lf) : NULL;
    PyObject *as_int = product ? PyNumber_Long(product) : NULL;
    Py_XDECREF(slots);
    if (!load_factor) Py_XDECREF(lf);
    Py_XDECREF(product);
    if (!as_int) return -1;
    m->max_entries = PyLong_AsLongLong(as_int);
    Py_DECREF(as_int);
    if (m->max_entries == -1 && PyErr_Occurred()) return -1;
    if (m->max_entries < 1) {
        PyErr_SetString(PyExc_ValueError, "offset map is too small to fit in even a single message, so log cleaning "
                                          "will never make progress; increase the dedupe buffer");
        return -1;
    }
    return map_clear(m);
}

static void om_dealloc(OffsetMapObject *m) {
    table_free(m->table, m->table_bytes, m->mapped);
    PyMem_Free(m->memo);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

/* A key's digest through the memo, from any buffer. */
static int arg_digest(OffsetMapObject *m, PyObject *key, uint8_t d[HASH_SIZE]) {
    Py_buffer v;
    if (PyObject_GetBuffer(key, &v, PyBUF_SIMPLE) < 0) return -1;
    key_digest(m, v.buf, (size_t)v.len, d);
    PyBuffer_Release(&v);
    return 0;
}

static PyObject *om_put(OffsetMapObject *m, PyObject *args) {
    PyObject *key;
    long long offset;
    uint8_t d[HASH_SIZE];
    if (!PyArg_ParseTuple(args, "OL", &key, &offset) || arg_digest(m, key, d) < 0) return NULL;
    if (map_put_digest(m, d, offset) < 0) return NULL;
    m->latest_offset = offset;
    Py_RETURN_NONE;
}

static PyObject *om_get(OffsetMapObject *m, PyObject *key) {
    uint8_t d[HASH_SIZE];
    if (arg_digest(m, key, d) < 0) return NULL;
    return PyLong_FromLongLong(map_get_digest(m, d));
}

static PyObject *om_update_latest_offset(OffsetMapObject *m, PyObject *arg) {
    long long offset = PyLong_AsLongLong(arg);
    if (offset == -1 && PyErr_Occurred()) return NULL;
    m->latest_offset = offset;
    Py_RETURN_NONE;
}

static PyObject *om_clear(OffsetMapObject *m, PyObject *unused) {
    if (map_clear(m) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *om_size(OffsetMapObject *m, void *c) { return PyLong_FromLongLong(m->entries); }
static PyObject *om_slots(OffsetMapObject *m, void *c) { return PyLong_FromLongLong(m->max_slots); }
static PyObject *om_allocated(OffsetMapObject *m, void *c) { return PyLong_FromSize_t(m->table_bytes); }
static PyObject *om_full(OffsetMapObject *m, void *c) { return PyBool_FromLong(m->entries >= m->max_entries); }
static PyObject *om_utilization(OffsetMapObject *m, void *c) {
    return PyFloat_FromDouble(m->max_slots ? (double)m->entries / (double)m->max_slots : 0.0);
}

static PyMethodDef om_methods[] = {
    {"put", (PyCFunction)om_put, METH_VARARGS, "Associate offset with the key's MD5 (overwriting); the latest offset."},
    {"get", (PyCFunction)om_get, METH_O, "The offset stored for the key's MD5, or -1."},
    {"update_latest_offset", (PyCFunction)om_update_latest_offset, METH_O, "Set the latest offset."},
    {"clear", (PyCFunction)om_clear, METH_NOARGS, "An empty map (SkimpyOffsetMap.clear)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef om_getset[] = {
    {"size", (getter)om_size, NULL, "Entries put (distinct MD5s).", NULL},
    {"slots", (getter)om_slots, NULL, "Kafka's slot count.", NULL},
    {"allocated_bytes", (getter)om_allocated, NULL, "Bytes the table holds now.", NULL},
    {"full", (getter)om_full, NULL, "map.size >= maxDesiredMapSize.", NULL},
    {"utilization", (getter)om_utilization, NULL, "size / slots.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef om_members[] = {
    {"memory", T_LONGLONG, offsetof(OffsetMapObject, memory), READONLY, "The dedupe buffer (bytes)."},
    {"max_slots", T_LONGLONG, offsetof(OffsetMapObject, max_slots), READONLY, "memory // 24."},
    {"max_entries", T_LONGLONG, offsetof(OffsetMapObject, max_entries), READONLY, "int(max_slots * load_factor)."},
    {"latest_offset", T_LONGLONG, offsetof(OffsetMapObject, latest_offset), 0, "The latest offset put, or -1."},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject kstore_offset_map_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kstore_cli.record._cleaner_c.OffsetMap",
    .tp_basicsize = sizeof(OffsetMapObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "MD5(key) -> offset, latest put wins; Kafka's SkimpyOffsetMap (see offset_map.py).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)om_init,
    .tp_dealloc = (destructor)om_dealloc,
    .tp_methods = om_methods,
    .tp_getset = om_getset,
    .tp_members = om_members,
};


int kstore_cleaner_map_init(void) {
    return PyType_Ready(&kstore_offset_map_type);
}
