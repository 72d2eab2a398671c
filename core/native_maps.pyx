# Hand-written Cython of ivmflow's native build (core/native.py, native_maps()): maps
# whose entries live in native memory, not as Python objects. Built alone, once per
# Python and Cython version, and cached like the generated modules.
#
# DigestCounts: 64-bit row digest -> positive count, the delete check's multiset
# (operators/deletecheck.py). A Python dict of the same keeps a 36-byte int object per
# key plus about 40 bytes of table per entry; here an entry is the digest alone, 8
# bytes of one array (open addressing, linear probing, backward-shift deletion: no
# tombstones, so a table that shrinks and grows again stays compact), at a load of
# 8/15 to 4/5 (grown by half; a key's home slot by multiply-shift over any size). A
# count is 1 unless a dict of the few digests with more says otherwise: a table's rows
# are mostly distinct (every row of TPC-H's), and a stored count doubled the slot.
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.stdint cimport uint64_t
from posix.mman cimport mmap, munmap, PROT_READ, PROT_WRITE, MAP_PRIVATE, MAP_ANONYMOUS, MAP_FAILED

cdef enum:
    _MAPPED = 1 << 20  # bytes from which a table is its own mapping


cdef uint64_t *_table(Py_ssize_t n) except NULL:
    # (n zeroed slots. A big table is mapped apart, so that freeing it when the table
    # grows gives its pages back: from the heap glibc may keep them resident.)
    cdef void *p
    if n * 8 >= _MAPPED:
        p = mmap(NULL, n * 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if p == MAP_FAILED:
            raise MemoryError()
        return <uint64_t *>p
    p = PyMem_Calloc(n, 8)
    if p == NULL:
        raise MemoryError()
    return <uint64_t *>p


cdef void _table_free(uint64_t *p, Py_ssize_t n) noexcept:
    if n * 8 >= _MAPPED:
        munmap(p, n * 8)
    else:
        PyMem_Free(p)


cdef inline Py_ssize_t _home(uint64_t key, Py_ssize_t cap) noexcept nogil:
    # (digests are hashes already, but a test may force tiny ones: Fibonacci mixing
    # spreads any key over the table, whose top 32 bits scaled to [0, cap): cap < 2**32)
    return <Py_ssize_t>((((key * 11400714819323198485ULL) >> 32) * <uint64_t>cap) >> 32)


cdef class DigestCounts:
    """A mapping of unsigned 64-bit ints (row digests) to positive ints (copies), in
    8 bytes per entry of count 1: ``get``, ``[k]``, ``[k] = n`` (``n`` at least 1),
    ``del``, ``in``, ``len``, iteration over keys, ``items()``, and ``nbytes``.

    >>> m = DigestCounts()
    >>> m[2**64 - 1] = 3; m[7] = 1; m[7] = 2; m[0] = 1
    >>> m.get(7, 0), m.get(8, 0), len(m), 2**64 - 1 in m, m[0]
    (2, 0, 3, True, 1)
    >>> del m[7]; del m[0]; sorted(m.items())
    [(18446744073709551615, 3)]
    """

    cdef uint64_t *keys  # 0: an empty slot (the digest 0 is kept apart: zero)
    cdef Py_ssize_t cap
    cdef Py_ssize_t used  # keys in the table (the digest 0 not counted)
    cdef Py_ssize_t zero  # copies of the digest 0
    cdef dict many  # digest -> count, for the digests with more than one copy

    def __cinit__(self):
        self.cap = 8
        self.keys = _table(self.cap)
        self.used = 0
        self.zero = 0
        self.many = {}

    def __dealloc__(self):
        if self.keys != NULL:
            _table_free(self.keys, self.cap)

    cdef Py_ssize_t _find(self, uint64_t key) noexcept:
        """The slot holding ``key`` (not 0), or the empty slot where it would go."""
        cdef Py_ssize_t i = _home(key, self.cap)
        while self.keys[i] != 0 and self.keys[i] != key:
            i += 1
            if i == self.cap:
                i = 0
        return i

    cdef int _grow(self) except -1:
        cdef Py_ssize_t old_cap = self.cap
        cdef Py_ssize_t cap = old_cap + old_cap // 2
        cdef uint64_t *old = self.keys
        cdef uint64_t *new
        cdef Py_ssize_t i, j
        if cap >= 2**32:
            raise MemoryError("a DigestCounts holds fewer than 2**32 slots")
        new = _table(cap)
        for i in range(old_cap):
            if old[i] != 0:
                j = _home(old[i], cap)
                while new[j] != 0:
                    j += 1
                    if j == cap:
                        j = 0
                new[j] = old[i]
        self.keys = new
        self.cap = cap
        _table_free(old, old_cap)
        return 0

    def get(self, key, default=None):
        cdef uint64_t k
        cdef Py_ssize_t i
        if type(key) is not int or key < 0 or key >= 2**64:
            return default
        k = key
        if k == 0:
            return self.zero if self.zero else default
        i = self._find(k)
        if self.keys[i] == 0:
            return default
        return self.many.get(key, 1) if self.many else 1

    def __getitem__(self, key):
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key):
        return self.get(key) is not None

    def __setitem__(self, key, count):
        cdef uint64_t k = key
        cdef Py_ssize_t n = count
        cdef Py_ssize_t i
        if n < 1:
            raise ValueError(f"a count is at least 1, not {n} (del removes a key)")
        if k == 0:
            self.zero = n
            return
        i = self._find(k)
        if self.keys[i] == 0:
            if (self.used + 1) * 5 > self.cap * 4:
                self._grow()
                i = self._find(k)
            self.keys[i] = k
            self.used += 1
        if n > 1:
            self.many[key] = n
        elif self.many:
            self.many.pop(key, None)

    def __delitem__(self, key):
        cdef uint64_t k
        cdef Py_ssize_t i, j, home
        if type(key) is not int or key < 0 or key >= 2**64:
            raise KeyError(key)
        k = key
        if k == 0:
            if not self.zero:
                raise KeyError(key)
            self.zero = 0
            return
        i = self._find(k)
        if self.keys[i] == 0:
            raise KeyError(key)
        if self.many:
            self.many.pop(key, None)
        # Backward shift: move each later entry of the run into the hole when its home
        # is not cyclically in (hole, entry], so every key stays reachable from its
        # home without a tombstone.
        j = i
        while True:
            j += 1
            if j == self.cap:
                j = 0
            if self.keys[j] == 0:
                break
            home = _home(self.keys[j], self.cap)
            if (j > i and (home <= i or home > j)) or (j < i and home <= i and home > j):
                self.keys[i] = self.keys[j]
                i = j
        self.keys[i] = 0
        self.used -= 1

    def __len__(self):
        return self.used + (1 if self.zero else 0)

    def __iter__(self):
        return iter([k for k, _n in self.items()])

    def items(self):
        cdef Py_ssize_t i
        many = self.many
        out = [(0, self.zero)] if self.zero else []
        out += [(self.keys[i], many.get(self.keys[i], 1))
                for i in range(self.cap) if self.keys[i] != 0]
        return out

    @property
    def nbytes(self):
        """Bytes of the table (its entries and empty slots; the few counts above 1
        in a dict not counted)."""
        return self.cap * 8
