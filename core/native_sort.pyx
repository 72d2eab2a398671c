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
