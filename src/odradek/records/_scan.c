/*
 * Record walk for produce validation, without building a Python object per record.
 *
 * Why native: Kafka's LogValidator parses every record of every produced batch
 * (DefaultRecord.readFrom); doing that in CPython costs about a microsecond a record,
 * which would halve odradek's produce rate at 100-byte records. This walks the
 * records of one (decompressed) RecordBatch v2 payload and checks what readFrom and
 * the batch iterator check, plus odradek's rule that offset deltas run 0..n-1:
 *
 *     length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
 *     keyLen varint, key | valueLen varint, value | headerCount varint
 *     [headerKeyLen varint, key | headerValueLen varint, value] ...
 *
 * It returns error codes, never messages: records/scan.py formats the messages and
 * holds the pure-Python twin of this loop, which the tests compare against this one.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Error codes shared with records/scan.py (keep in sync). */
enum {
    SCAN_OK = 0,
    SCAN_TRUNCATED = 1,        /* a varint runs past the payload or its record */
    SCAN_VARINT_TOO_LONG = 2,  /* varint > 5 bytes, varlong > 10 bytes */
    SCAN_BAD_LENGTH = 3,       /* record length negative or past the payload */
    SCAN_SIZE_MISMATCH = 4,    /* fields do not add up to the record length */
    SCAN_OFFSET_DELTA = 5,     /* offset delta is not the record's index */
    SCAN_BAD_KEY_LENGTH = 6,   /* key length < -1 */
    SCAN_BAD_VALUE_LENGTH = 7, /* value length < -1 */
    SCAN_BAD_HEADER_COUNT = 8, /* header count < 0 or more than the bytes left */
    SCAN_BAD_HEADER_KEY = 9,   /* header key length < 0 */
    SCAN_BAD_HEADER_VALUE = 10,/* header value length < -1 */
    SCAN_TRAILING = 11,        /* bytes left after the declared record count */
};

/* Zigzag varint of at most `max_bytes` bytes; returns 0 or an error code. */
static inline int read_varint(const uint8_t *p, Py_ssize_t end, Py_ssize_t *pos,
                              int max_bytes, int64_t *out)
{
    uint64_t raw = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (*pos >= end)
            return SCAN_TRUNCATED;
        uint8_t b = p[(*pos)++];
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            if (max_bytes == 5)  /* int32 varint: Java keeps the low 32 bits */
                raw &= 0xFFFFFFFFu;
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return SCAN_OK;
        }
        shift += 7;
    }
    return SCAN_VARINT_TOO_LONG;
}

/* scan(payload, count) -> (code, index, min_ts_delta, max_ts_delta, null_keys)
 * On success code is 0 and index is count; on failure index is the failing record. */
static PyObject *scan(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long count;
    if (!PyArg_ParseTuple(args, "y*L", &view, &count))
        return NULL;
    const uint8_t *p = (const uint8_t *)view.buf;
    Py_ssize_t n = view.len, pos = 0;
    int64_t min_ts = INT64_MAX, max_ts = INT64_MIN;
    long long null_keys = 0, i = 0;
    int code = SCAN_OK;

    Py_BEGIN_ALLOW_THREADS
    for (i = 0; i < count; i++) {
        int64_t length, ts, off, klen, vlen, hcount, hk, hv;
        if ((code = read_varint(p, n, &pos, 5, &length)))
            break;
        if (length < 0 || length > n - pos) {
            code = SCAN_BAD_LENGTH;
            break;
        }
        Py_ssize_t end = pos + (Py_ssize_t)length;
        if (pos >= end) { code = SCAN_SIZE_MISMATCH; break; }
        pos++; /* attributes: unused by every Kafka version so far */
        if ((code = read_varint(p, end, &pos, 10, &ts)))
            break;
        if ((code = read_varint(p, end, &pos, 5, &off)))
            break;
        if (off != i) { code = SCAN_OFFSET_DELTA; break; }
        if ((code = read_varint(p, end, &pos, 5, &klen)))
            break;
        if (klen < -1) { code = SCAN_BAD_KEY_LENGTH; break; }
        if (klen == -1)
            null_keys++;
        else if (klen > end - pos) { code = SCAN_SIZE_MISMATCH; break; }
        else
            pos += (Py_ssize_t)klen;
        if ((code = read_varint(p, end, &pos, 5, &vlen)))
            break;
        if (vlen < -1) { code = SCAN_BAD_VALUE_LENGTH; break; }
        if (vlen > end - pos) { code = SCAN_SIZE_MISMATCH; break; }
        if (vlen > 0)
            pos += (Py_ssize_t)vlen;
        if ((code = read_varint(p, end, &pos, 5, &hcount)))
            break;
        if (hcount < 0 || hcount > end - pos) { code = SCAN_BAD_HEADER_COUNT; break; }
        for (int64_t h = 0; h < hcount && code == SCAN_OK; h++) {
            if ((code = read_varint(p, end, &pos, 5, &hk)))
                break;
            if (hk < 0) { code = SCAN_BAD_HEADER_KEY; break; }
            if (hk > end - pos) { code = SCAN_SIZE_MISMATCH; break; }
            pos += (Py_ssize_t)hk;
            if ((code = read_varint(p, end, &pos, 5, &hv)))
                break;
            if (hv < -1) { code = SCAN_BAD_HEADER_VALUE; break; }
            if (hv > end - pos) { code = SCAN_SIZE_MISMATCH; break; }
            if (hv > 0)
                pos += (Py_ssize_t)hv;
        }
        if (code)
            break;
        if (pos != end) { code = SCAN_SIZE_MISMATCH; break; }
        if (ts < min_ts) min_ts = ts;
        if (ts > max_ts) max_ts = ts;
    }
    if (code == SCAN_OK && pos != n)
        code = SCAN_TRAILING;
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&view);
    if (code == SCAN_OK && count == 0) {
        min_ts = 0;
        max_ts = 0;
    }
    return Py_BuildValue("iLLLL", code, i, (long long)min_ts, (long long)max_ts, null_keys);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(payload, count) -> (code, index, min_ts_delta, max_ts_delta, null_keys)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "Native record walk for produce validation.", -1, methods,
};

PyMODINIT_FUNC PyInit__scan(void)
{
    return PyModule_Create(&module);
}
