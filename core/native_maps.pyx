# Hand-written Cython of ivmflow's native build (core/native.py, native_maps()): maps
# whose entries live in native memory, not as Python objects. Built alone, once per
# Python and Cython version, and cached like the generated modules.
#
# DigestCounts: 64-bit row digest -> positive count, the delete check's multiset
# (operators/deletecheck.py). A Python dict of the same keeps a 36-byte int object per
# key plus about 40 bytes of table per entry; here an entry is 16 bytes of one array
# (open addressing, linear probing, backward-shift deletion: no tombstones, so a table
# that shrinks and grows again stays compact), at a load of at most 3/4.
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.stdint cimport int64_t, uint64_t


cdef struct _Slot:
    uint64_t key
    int64_t count  # 0: an empty slot (a present key's count is at least 1)


cdef inline Py_ssize_t _home(uint64_t key, Py_ssize_t mask) noexcept nogil:
    # (digests are hashes already, but a test may force tiny ones: Fibonacci mixing
    # spreads any key over the table's bits)
    return <Py_ssize_t>((key * 11400714819323198485ULL) >> 32) & mask


cdef class DigestCounts:
    """A mapping of unsigned 64-bit ints (row digests) to positive ints (copies), in
    16 bytes per entry: ``get``, ``[k]``, ``[k] = n`` (``n`` at least 1), ``del``,
    ``in``, ``len``, iteration over keys, ``items()``, and ``nbytes``.

    >>> m = DigestCounts()
    >>> m[2**64 - 1] = 3; m[7] = 1; m[7] = 2
    >>> m.get(7, 0), m.get(8, 0), len(m), 2**64 - 1 in m
    (2, 0, 2, True)
    >>> del m[7]; sorted(m.items())
    [(18446744073709551615, 3)]
    """

    cdef _Slot *slots
    cdef Py_ssize_t mask  # capacity - 1 (capacity a power of two)
    cdef Py_ssize_t used

    def __cinit__(self):
        self.slots = <_Slot *>PyMem_Calloc(8, sizeof(_Slot))
        if self.slots == NULL:
            raise MemoryError()
        self.mask = 7
        self.used = 0

    def __dealloc__(self):
        PyMem_Free(self.slots)

    cdef Py_ssize_t _find(self, uint64_t key) noexcept:
        """The slot holding ``key``, or the empty slot where it would go."""
        cdef Py_ssize_t i = _home(key, self.mask)
        while self.slots[i].count != 0 and self.slots[i].key != key:
            i = (i + 1) & self.mask
        return i

    cdef int _grow(self) except -1:
        cdef Py_ssize_t old_cap = self.mask + 1
        cdef Py_ssize_t cap = old_cap * 2
        cdef _Slot *old = self.slots
        cdef _Slot *new = <_Slot *>PyMem_Calloc(cap, sizeof(_Slot))
        cdef Py_ssize_t i, j
        if new == NULL:
            raise MemoryError()
        self.slots = new
        self.mask = cap - 1
        for i in range(old_cap):
            if old[i].count != 0:
                j = _home(old[i].key, self.mask)
                while new[j].count != 0:
                    j = (j + 1) & self.mask
                new[j] = old[i]
        PyMem_Free(old)
        return 0

    def get(self, key, default=None):
        cdef Py_ssize_t i
        if type(key) is not int or key < 0 or key >= 2**64:
            return default
        i = self._find(<uint64_t>key)
        return self.slots[i].count if self.slots[i].count != 0 else default

    def __getitem__(self, key):
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key):
        return self.get(key) is not None

    def __setitem__(self, key, count):
        cdef uint64_t k = key
        cdef int64_t n = count
        cdef Py_ssize_t i
        if n < 1:
            raise ValueError(f"a count is at least 1, not {n} (del removes a key)")
        i = self._find(k)
        if self.slots[i].count == 0:
            if (self.used + 1) * 4 > (self.mask + 1) * 3:
                self._grow()
                i = self._find(k)
            self.slots[i].key = k
            self.used += 1
        self.slots[i].count = n

    def __delitem__(self, key):
        cdef uint64_t k
        cdef Py_ssize_t i, j, home
        if type(key) is not int or key < 0 or key >= 2**64:
            raise KeyError(key)
        k = key
        i = self._find(k)
        if self.slots[i].count == 0:
            raise KeyError(key)
        # Backward shift: move each later entry of the run into the hole when its home
        # is not strictly after the hole (cyclically), so every key stays reachable
        # from its home without a tombstone.
        j = i
        while True:
            j = (j + 1) & self.mask
            if self.slots[j].count == 0:
                break
            home = _home(self.slots[j].key, self.mask)
            if (j > i and (home <= i or home > j)) or (j < i and home <= i and home > j):
                self.slots[i] = self.slots[j]
                i = j
        self.slots[i].count = 0
        self.slots[i].key = 0
        self.used -= 1

    def __len__(self):
        return self.used

    def __iter__(self):
        return iter([k for k, _n in self.items()])

    def items(self):
        cdef Py_ssize_t i
        return [(self.slots[i].key, self.slots[i].count)
                for i in range(self.mask + 1) if self.slots[i].count != 0]

    @property
    def nbytes(self):
        """Bytes of the table (its entries and empty slots)."""
        return (self.mask + 1) * sizeof(_Slot)
