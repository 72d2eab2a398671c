# Hand-written Cython of ivmflow's native build (core/native.py): every generated module
# starts with this text (read by the build, so a change here changes the cache key of
# every module): the C sort of an epoch's changes and the C constructor of its delta.
# It compiles on its own too (cython -3 core/native_sort.pyx).
cdef extern from "Python.h":
    int PyObject_GenericSetDict(object o, object value, void *context) except -1


def new_epoch_delta(cls, epoch, rows, updates, closed_by_marker):
    """``cls(epoch, rows, updates, closed_by_marker)`` for core.records.EpochDelta
    (a frozen dataclass keeping its fields in ``__dict__``): the instance made and its
    dict set in C, no __init__ frame (once per epoch)."""
    record = cls.__new__(cls)
    PyObject_GenericSetDict(record, {"epoch": epoch, "rows": rows, "updates": updates,
                                     "closed_by_marker": closed_by_marker}, NULL)
    return record


from cpython.long cimport PyLong_AsLongLongAndOverflow
from libc.stdlib cimport free, malloc, qsort

cdef Py_ssize_t _width = 0  # (qsort has no context argument; the GIL is held throughout)


cdef int _compare_rows(const void *a, const void *b) noexcept nogil:
    # (a and b point at pointers to records: the sort moves 8 bytes, not a record)
    cdef const long long *x = (<const long long **>a)[0]
    cdef const long long *y = (<const long long **>b)[0]
    cdef Py_ssize_t i
    for i in range(_width):
        if x[i] != y[i]:
            return -1 if x[i] < y[i] else 1
    return 0


ctypedef struct _Keyed:
    unsigned long long key
    long long *record


cdef bint _radix_sorted(long long *keys, long long **order, Py_ssize_t n,
                        Py_ssize_t w) except -1:
    # Where every column's values span few enough bits that a row packs into 64 (the
    # usual result row: ids of a few thousand nodes), pack it, offset per column so
    # unsigned order is the tuples' order, and sort the packed keys by LSD radix, 8
    # bits per pass: O(n) per pass, no comparison calls. False: qsort it.
    cdef Py_ssize_t i, j, stride = w + 1, d, total = 0
    cdef unsigned long long span, packed
    cdef long long lo, hi, v
    cdef int bits[64]
    cdef long long low[64]
    cdef Py_ssize_t count[256]
    cdef Py_ssize_t shift, c, acc
    cdef _Keyed *a
    cdef _Keyed *b
    cdef _Keyed *swap
    if n < 64 or w > 64:
        return False
    for j in range(w):
        lo = hi = keys[j]
        for i in range(1, n):
            v = keys[i * stride + j]
            if v < lo:
                lo = v
            elif v > hi:
                hi = v
        span = <unsigned long long>hi - <unsigned long long>lo
        bits[j] = 0
        while span:
            bits[j] += 1
            span >>= 1
        low[j] = lo
        total += bits[j]
    if total > 64:
        return False
    a = <_Keyed *>malloc(2 * n * sizeof(_Keyed))
    if a == NULL:
        raise MemoryError()
    b = a + n
    try:
        for i in range(n):
            packed = 0
            for j in range(w):
                if bits[j]:
                    packed = (packed << bits[j]) | (<unsigned long long>keys[i * stride + j]
                                                    - <unsigned long long>low[j])
            a[i].key = packed
            a[i].record = keys + i * stride
        shift = 0
        while shift < total:
            for d in range(256):
                count[d] = 0
            for i in range(n):
                count[(a[i].key >> shift) & 255] += 1
            acc = 0
            for d in range(256):
                c = count[d]
                count[d] = acc
                acc += c
            for i in range(n):
                d = (a[i].key >> shift) & 255
                b[count[d]] = a[i]
                count[d] += 1
            swap = a
            a = b
            b = swap
            shift += 8
        for i in range(n):
            order[i] = a[i].record
    finally:
        free(a if a < b else b)
    return True


def sorted_int_changes(dict net):
    """core.consolidate.sorted_changes for rows that are tuples of one length of
    exact ints within 64 bits (the common result row); None for any other row (the
    caller falls back to the general one)."""
    global _width
    cdef list rows = []
    cdef list mults = []
    cdef Py_ssize_t n, w = -1, i, j, k, stride
    cdef int overflow = 0
    cdef long long *keys
    cdef long long **order
    cdef tuple t
    cdef list out
    for row, m in net.items():
        if not m:
            continue
        if type(row) is not tuple or type(m) is not int:
            return None
        if w < 0:
            w = len(<tuple>row)
        elif len(<tuple>row) != w:
            return None
        rows.append(row)
        mults.append(m)
    n = len(rows)
    if n <= 1:
        return [(mults[0], rows[0])] if n else []
    stride = w + 1
    keys = <long long *>malloc(n * stride * sizeof(long long))
    order = <long long **>malloc(n * sizeof(long long *))
    if keys == NULL or order == NULL:
        free(keys)
        free(order)
        raise MemoryError()
    try:
        for i in range(n):
            t = <tuple>rows[i]
            for j in range(w):
                v = t[j]
                if type(v) is not int:
                    return None
                keys[i * stride + j] = PyLong_AsLongLongAndOverflow(v, &overflow)
                if overflow:
                    return None
            keys[i * stride + w] = i
            order[i] = keys + i * stride
        if not _radix_sorted(keys, order, n, w):
            _width = w
            qsort(order, n, sizeof(long long *), _compare_rows)
        out = [None] * n  # (a C loop: a comprehension's index would be a Python int)
        for i in range(n):
            k = <Py_ssize_t>order[i][w]
            out[i] = (mults[k], rows[k])
        return out
    finally:
        free(keys)
        free(order)


# -- the delete check's row digest (operators/deletecheck.py) -----------------------------
# 64-bit words through xxHash64's word step and avalanche: a tag and length per value,
# then its bits (an int's 64 bits, a float's, a str's code units as CPython stores them:
# one canonical form per string), so that different canonical tuples give different
# word sequences. Not keyed, not cryptographic.
from libc.stdint cimport uint64_t
from libc.string cimport memcpy

cdef extern from "Python.h":
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    unsigned int PyUnicode_KIND(object o)
    void *PyUnicode_DATA(object o)
    double PyFloat_AS_DOUBLE(object o)

cdef uint64_t _P1 = 11400714785074694791ULL
cdef uint64_t _P2 = 14029467366897019727ULL
cdef uint64_t _P3 = 1609587929392839161ULL
cdef uint64_t _P4 = 9650029242287828579ULL
cdef uint64_t _P5 = 2870177450012600261ULL


cdef inline uint64_t _word(uint64_t h, uint64_t k) noexcept nogil:
    k *= _P2
    k = (k << 31) | (k >> 33)
    k *= _P1
    h ^= k
    return ((h << 27) | (h >> 37)) * _P1 + _P4


cdef uint64_t _digest_bytes(uint64_t h, const unsigned char *p, Py_ssize_t n) noexcept nogil:
    cdef uint64_t w
    while n >= 8:
        memcpy(&w, p, 8)
        h = _word(h, w)
        p += 8
        n -= 8
    if n:
        w = 0
        memcpy(&w, p, n)
        h = _word(h, w)
    return h


cdef uint64_t _digest_value(uint64_t h, object v) except? 0xffffffffffffffff:
    cdef int overflow = 0
    cdef long long x
    cdef double d
    cdef Py_ssize_t n
    cdef unsigned int kind
    cdef bytes b
    if v is None:
        return _word(h, 1)
    if v is True:
        return _word(h, 2)
    if v is False:
        return _word(h, 3)
    t = type(v)
    if t is int:
        x = PyLong_AsLongLongAndOverflow(v, &overflow)
        if not overflow:
            return _word(_word(h, 4), <uint64_t>x)
        b = v.to_bytes((v.bit_length() + 8) // 8, "little", signed=True)
        n = len(b)
        return _digest_bytes(_word(_word(h, 5), <uint64_t>n), b, n)
    if t is str:
        n = PyUnicode_GET_LENGTH(v)
        kind = PyUnicode_KIND(v)
        h = _word(_word(h, 8 + kind), <uint64_t>n)
        return _digest_bytes(h, <const unsigned char *>PyUnicode_DATA(v), n * kind)
    if t is float:
        d = PyFloat_AS_DOUBLE(v)
        memcpy(&x, &d, 8)
        return _word(_word(h, 6), <uint64_t>x)
    if t is tuple:
        h = _word(_word(h, 7), <uint64_t>len(<tuple>v))
        for e in <tuple>v:
            h = _digest_value(h, e)
        return h
    import marshal  # (a value of no type above: its marshal bytes, rare)
    b = marshal.dumps(v, 2)
    n = len(b)
    return _digest_bytes(_word(_word(h, 13), <uint64_t>n), b, n)


def row_digest64(tuple t):
    """The 64-bit digest of a row's canonical values (operators.deletecheck.RowDigest):
    a tag and the length of every value, then its bits, through xxHash64's word step;
    xxHash64's avalanche at the end."""
    cdef uint64_t h = _P5 + <uint64_t>len(t)
    for v in t:
        h = _digest_value(h, v)
    h ^= h >> 33
    h *= _P2
    h ^= h >> 29
    h *= _P3
    h ^= h >> 32
    return h
