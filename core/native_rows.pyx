# Hand-written Cython of ivmflow's native build (core/native.py, native_rows()): a join
# node's tuples packed into fixed-width native fields. Built alone, once per Python and
# Cython version, and cached like the generated modules.
#
# A row of n values (1 to 8) is one object of the smallest class that holds n:
# PackedRow1 (32 bytes), PackedRow3 (48), PackedRow5 (64), PackedRow7 (80), PackedRow8
# (96): each the most values an allocator size class holds (a class's object is 16
# bytes of header, 9 bytes a value and one for the count, rounded up to 16). As Python
# objects a tuple of n is 40 + 8n bytes and each of its values apart: an int above 256
# is 28 bytes, a DECIMAL 104 (a 5-column lineitem tuple of Q9 with its values: about
# 270 bytes; here 64). A 64-bit int and a DECIMAL whose coefficient has at most 18
# digits are stored in the row (8 bytes and a tag: the DECIMAL's exponent); anything
# else (a text, a date, None, a bigger number) as a reference to the value, which the
# parser shares between rows. Reading a field makes the Python value again (an int; a
# Decimal with the same coefficient and exponent: equal, and printed the same). A row
# hashes as the tuple of its values does and equals that tuple, so a plain tuple finds
# a packed row in a dict and the other way round. The hash is not stored (it was 8
# bytes a row, 80 -> 64 for Q9's lineitem): a dict or set keeps its keys' hashes, so a
# row is hashed only when it is the probe, from its fields in C (_fields_hash).
#
# The classes differ only in their number of fields: the text between each pair of
# "per size" markers below is written once per size by core/native.py (native_rows),
# smallest first, with ROW_CLASS and ROW_FIELDS replaced; ROW_CLASSES is the list of
# the classes and ROW_MAX the largest size.
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_DECREF
from libc.stdint cimport int64_t, intptr_t, uint32_t

from decimal import Decimal

cdef enum:
    T_INT = 255  # a field's tag: an int; T_OBJ a reference; 0-127 a DECIMAL's -exponent
    T_OBJ = 254

_Decimal = Decimal
# 10**-k for every tag k: a DECIMAL field reads back as its coefficient times this, the
# same value and exponent as scaleb(-k) (exact: the coefficient has at most 18 digits),
# a third faster (a DECIMAL payload is read on every change of its sum)
cdef tuple _SCALE = tuple([Decimal(1).scaleb(-k) for k in range(128)])


cdef bint _decimal_fields(str text, int64_t *coef_out, unsigned char *tag_out):
    """A DECIMAL's coefficient and tag from its text, when it reads
    ``[-]digits[.digits]`` with at most 18 significant digits and 127 after the point
    and is not a negative zero; False (nothing written) otherwise: an exponent form,
    NaN, Infinity stay objects."""
    cdef Py_ssize_t k, n = len(text), start = 0, frac = -1
    cdef int64_t coef = 0
    cdef int digits = 0
    cdef Py_UCS4 c
    cdef bint negative = False
    if n and text[0] == "-":
        negative = True
        start = 1
    if start >= n:
        return False
    for k in range(start, n):
        c = text[k]
        if c == ".":
            if frac >= 0:
                return False
            frac = 0
        elif "0" <= c <= "9":
            if digits == 18:
                return False
            if coef or c != "0":
                digits += 1
            coef = coef * 10 + (<int64_t>c - 48)
            if frac >= 0:
                frac += 1
        else:
            return False
    if (negative and coef == 0) or frac > 127:
        return False
    coef_out[0] = -coef if negative else coef
    tag_out[0] = <unsigned char>(frac if frac > 0 else 0)
    return True


cdef inline object _value(int64_t val, unsigned char tag):
    if tag == T_INT:
        return val
    if tag == T_OBJ:
        return <object><PyObject *><intptr_t>val
    return _Decimal(val) * <object>_SCALE[tag]


cdef inline int64_t _store(object v, bint decimals, unsigned char *tag) except? -1:
    cdef int64_t coef
    if type(v) is int and -9223372036854775807 <= v <= 9223372036854775807:
        tag[0] = T_INT
        return v
    if decimals and type(v) is _Decimal and _decimal_fields(str(v), &coef, tag):
        return coef
    tag[0] = T_OBJ
    Py_INCREF(v)
    return <int64_t><intptr_t><PyObject *>v


cdef bint _HASHES_AGREE = False  # (set when the module has loaded: _hashes_agree)


# --- per size ---
cdef class ROW_CLASS


cdef tuple _values_ROW_CLASS(ROW_CLASS r):
    # (a function, not a cdef method: a method would add a table pointer to every row)
    cdef int i
    return tuple([_value(r.vals[i], r.tags[i]) for i in range(r.n)])


cdef class ROW_CLASS:
    """A row of 1 to ROW_FIELDS values packed in native fields (see the module comment)."""

    cdef int64_t vals[ROW_FIELDS]
    cdef unsigned char tags[ROW_FIELDS]
    cdef unsigned char n

    def __cinit__(self, tuple t, bint decimals):
        cdef Py_ssize_t i, n = len(t)
        if n < 1 or n > ROW_FIELDS:
            raise ValueError(f"a ROW_CLASS holds 1 to ROW_FIELDS values, not {n}")
        for i in range(n):
            self.vals[i] = _store(t[i], decimals, &self.tags[i])
            self.n = <unsigned char>(i + 1)  # (what __dealloc__ releases, if this fails)

    def __dealloc__(self):
        cdef int i
        for i in range(self.n):
            if self.tags[i] == T_OBJ:
                Py_DECREF(<object><PyObject *><intptr_t>self.vals[i])

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        cdef Py_ssize_t i
        if type(index) is int:
            i = index
            if i < 0:
                i += self.n
            if i < 0 or i >= self.n:
                raise IndexError("packed row index out of range")
            return _value(self.vals[i], self.tags[i])
        return _values_ROW_CLASS(self)[index]

    def __iter__(self):
        return iter(_values_ROW_CLASS(self))

    def __hash__(self):
        if _HASHES_AGREE:
            return _fields_hash(self.vals, self.tags, self.n)
        return hash(_values_ROW_CLASS(self))

    def __richcmp__(self, other, int op):
        cdef ROW_CLASS o
        cdef int i
        if op == 2 or op == 3:  # == / !=
            if type(other) is ROW_CLASS:
                o = <ROW_CLASS>other
                if o.n != self.n:
                    return op == 3
                for i in range(self.n):
                    if self.tags[i] == o.tags[i] and self.tags[i] != T_OBJ:
                        if self.vals[i] != o.vals[i]:
                            return op == 3
                    elif not (_value(self.vals[i], self.tags[i])
                              == _value(o.vals[i], o.tags[i])):
                        return op == 3
                return op == 2
            if isinstance(other, tuple):
                return (_values_ROW_CLASS(self) == other) if op == 2 else (_values_ROW_CLASS(self) != other)
            if type(other) in PACKED_TYPES:
                return op == 3  # (another class: another number of values)
            return NotImplemented
        mine = _values_ROW_CLASS(self)
        theirs = tuple(other) if type(other) in PACKED_TYPES else other
        if not isinstance(theirs, tuple):
            return NotImplemented
        if op == 0:
            return mine < theirs
        if op == 1:
            return mine <= theirs
        if op == 4:
            return mine > theirs
        return mine >= theirs

    def __add__(self, other):
        return _values_ROW_CLASS(self) + (tuple(other) if type(other) in PACKED_TYPES else other)

    def __radd__(self, other):
        return other + _values_ROW_CLASS(self)

    def __repr__(self):
        return repr(_values_ROW_CLASS(self))

    def __reduce__(self):
        cdef int i
        cdef bint decimals = False
        for i in range(self.n):
            if self.tags[i] < T_OBJ:
                decimals = True
        return (_unpickle, (_values_ROW_CLASS(self), decimals))
# --- end per size ---


PACKED_TYPES = (ROW_CLASSES,)


def _unpickle(tuple t, bint decimals):
    return pack_row(t, decimals)


cpdef object pack_row(object t, bint decimals):
    """``t`` as a packed row of the smallest class that holds it, when it is a tuple of
    1 to ROW_MAX values (its DECIMALs in native fields when ``decimals``); else ``t``."""
    cdef Py_ssize_t n
    if type(t) is not tuple:
        return t
    n = len(<tuple>t)
    if n == 0 or n > ROW_MAX:
        return t
    # --- per size ---
    if n <= ROW_FIELDS:
        return ROW_CLASS(t, decimals)
    # --- end per size ---
    return t  # (not reached: the last size is the largest)


def packer(bint decimals):
    """``pack(t)``: :func:`pack_row` with ``decimals`` bound.

    >>> pack = packer(False)
    >>> type(pack((1, 2, 3))).__name__, pack(None), pack(tuple(range(9)))[8]
    ('PackedRow3', None, 8)
    """
    def pack(t):
        return pack_row(t, decimals)
    return pack


# --- field maps ------------------------------------------------------------------------
# FieldMap: a join node's map whose keys are a fixed number of values and whose values
# are, mostly, tuples of a fixed number of values, with its entries in one native array,
# not as Python objects: a sum leaf's projection (operators/joinnode.py, JoinNode.sum_leaf:
# key -> ring payload sum, TPC-H Q5's (nation, order) -> (count, count, revenue)) and a
# top leaf's groups (key -> its one tuple, bare: TPC-H Q21's per-(supplier, order)
# counts read from their view). As a dict of packed keys and packed values an entry
# costs about 150 bytes (a 48-byte key, a 64-byte value, a dict slot); here one slot
# holds every field of key and value, 8 bytes and a tag each as in a packed row, and a
# flag byte (48 bytes for 2 key and 3 value fields), at a load of 8/15 to 4/5 (open
# addressing, linear probing, backward-shift deletion: no tombstones; the table grows
# by half, a key's home slot by multiply-shift over any size). No full hash is stored
# (it was 8 bytes a slot, a sixth of Q5's (nation, order) sums and a fifth of Q21's
# count groups): six bits of it in the flag byte pass over most other keys while
# probing; the 32 bits a home slot is made of are kept where the slot's padding has
# room (1 to 3 fields, and 8), and elsewhere, where a home slot is needed again
# (growing, shifting back after a delete), the key is made from its fields and
# hashed, equal values hashing equal. Fields that are not 64-bit ints or short DECIMALs are references, as in a
# packed row: any key or value works, at a Python object's cost. A value that is not a
# tuple (or packed row) of that many values (a bucket of several tuples: a dict, a set)
# is kept as a reference, read back as the same object. Keys compare as Python values
# do (an int field inline against an int, anything else by ==), so the map finds what a
# dict of the same keys would.
from libc.string cimport memcpy, memset
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from posix.mman cimport mmap, munmap, PROT_READ, PROT_WRITE, MAP_PRIVATE, MAP_ANONYMOUS, MAP_FAILED

cdef enum:
    _MAPPED = 1 << 20  # bytes from which a slot array is its own mapping


cdef char *_slots_alloc(Py_ssize_t n) except NULL:
    # (A big array is mapped apart, so that freeing it when the table grows gives its
    # pages back: from the heap, glibc keeps them, and the tables a map outgrew stayed
    # resident, half again the live one's bytes.) Zeroed either way.
    cdef void *p
    if n >= _MAPPED:
        p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if p == MAP_FAILED:
            raise MemoryError()
        return <char *>p
    p = PyMem_Calloc(n, 1)
    if p == NULL:
        raise MemoryError()
    return <char *>p


cdef void _slots_free(char *p, Py_ssize_t n) noexcept:
    if n >= _MAPPED:
        munmap(p, n)
    else:
        PyMem_Free(p)


cdef int _store_all(tuple t, int n, int64_t *vals, unsigned char *tags) except -1:
    """The first ``n`` values of ``t`` into ``vals`` and ``tags`` as a packed row's
    fields; on a failure, the references taken so far released, nothing kept."""
    cdef int f, done = 0
    try:
        for f in range(n):
            vals[f] = _store(t[f], True, &tags[f])
            done = f + 1
    except BaseException:
        _release_all(vals, tags, done)
        raise
    return 0


cdef void _release_all(int64_t *vals, unsigned char *tags, int n) noexcept:
    cdef int f
    for f in range(n):
        if tags[f] == T_OBJ:
            Py_DECREF(<object><PyObject *><intptr_t>vals[f])


cdef bint _copy_packed(object row, int n, int64_t *vals, unsigned char *tags):
    """A packed row of ``n`` values: its fields into ``vals`` and ``tags`` (references
    taken), True; anything else: False, nothing written."""
    # (the first class that matches returns: no type test after it, as an elif chain)
    # --- per size ---
    if type(row) is ROW_CLASS:
        return (<ROW_CLASS>row).n == n and _copy_fields(
            (<ROW_CLASS>row).vals, (<ROW_CLASS>row).tags, n, vals, tags)
    # --- end per size ---
    return False


cdef inline bint _copy_fields(int64_t *src, unsigned char *src_tags, int n,
                              int64_t *vals, unsigned char *tags):
    """``n`` stored fields copied (references taken); True."""
    cdef int f
    for f in range(n):
        vals[f] = src[f]
        tags[f] = src_tags[f]
        if tags[f] == T_OBJ:
            Py_INCREF(<object><PyObject *><intptr_t>vals[f])
    return True


cdef inline bint _field_is(int64_t val, unsigned char tag, object v) except -1:
    """Whether a stored field equals ``v`` as Python values compare (a dict's test:
    the same object, or ==)."""
    cdef int overflow = 0
    cdef long long x
    if tag == T_INT and type(v) is int:
        x = PyLong_AsLongLongAndOverflow(v, &overflow)
        return overflow == 0 and x == val
    if tag == T_OBJ and <PyObject *><intptr_t>val == <PyObject *>v:
        return True
    return _value(val, tag) == v


cdef tuple _fields_tuple(int64_t *vals, unsigned char *tags, int n):
    cdef tuple t = PyTuple_New(n)
    cdef int f
    cdef object v
    for f in range(n):
        v = _value(vals[f], tags[f])
        Py_INCREF(v)
        PyTuple_SET_ITEM(t, f, v)
    return t


# A stored key's hash, from its fields without making its values again (a DECIMAL made
# and hashed took a microsecond, 3x a field map's whole insert): Python's numeric hash
# (the language's: modulo 2**61 - 1, a DECIMAL c * 10**-k as c times the inverse of
# 10**k) for an inline int or DECIMAL, the object's own hash for a reference, combined
# as CPython's tuple hash combines its items' (xxHash's rounds). The tuple hash is
# CPython's, not the language's: checked against hash() on sample keys when the module
# loads, and where it differs (another CPython) the values are made and hashed.
cdef extern from *:
    """
    static inline unsigned long long ivm_mulmod61(unsigned long long a, unsigned long long b) {
        const unsigned long long P = (1ULL << 61) - 1;
        unsigned __int128 p = (unsigned __int128)a * b;
        unsigned long long r = (unsigned long long)(p & P) + (unsigned long long)(p >> 61);
        r = (r & P) + (r >> 61);
        return r >= P ? r - P : r;
    }
    """
    unsigned long long ivm_mulmod61(unsigned long long a, unsigned long long b) nogil

cdef unsigned long long _MODULUS = (1ULL << 61) - 1
cdef unsigned long long _INV10[128]  # (10**-k modulo 2**61 - 1, for a DECIMAL's tag k)
for _k in range(128):
    _INV10[_k] = pow(pow(10, (1 << 61) - 3, (1 << 61) - 1), _k, (1 << 61) - 1)


cdef inline Py_hash_t _signed_hash(unsigned long long r, bint negative) noexcept:
    cdef Py_hash_t h = -<Py_hash_t>r if negative else <Py_hash_t>r
    return -2 if h == -1 else h


cdef Py_hash_t _field_hash(int64_t val, unsigned char tag) except -1:
    """hash() of a stored field's value, without making it."""
    cdef unsigned long long a
    if tag == T_OBJ:
        return hash(<object><PyObject *><intptr_t>val)
    a = <unsigned long long>val if val >= 0 else (<unsigned long long>0 - <unsigned long long>val)
    a = (a & _MODULUS) + (a >> 61)
    if a >= _MODULUS:
        a -= _MODULUS
    if tag != T_INT:
        a = ivm_mulmod61(a, _INV10[tag])
    return _signed_hash(a, val < 0)


cdef Py_hash_t _fields_hash(int64_t *vals, unsigned char *tags, int n) except -1:
    """hash() of the tuple of ``n`` stored fields (CPython's tuple hash)."""
    cdef unsigned long long acc = 2870177450012600261ULL, lane
    cdef int f
    for f in range(n):
        lane = <unsigned long long>_field_hash(vals[f], tags[f])
        acc += lane * 14029467366897019727ULL
        acc = (acc << 31) | (acc >> 33)
        acc *= 11400714785074694791ULL
    acc += <unsigned long long>n ^ (2870177450012600261ULL ^ 3527539ULL)
    if acc == <unsigned long long>-1:
        return 1546275796
    return <Py_hash_t>acc


cdef bint _hashes_agree():
    """Whether :func:`_fields_hash` is this CPython's hash() on sample keys."""
    cdef int64_t vals[4]
    cdef unsigned char tags[4]
    samples = [(0, -1), (-2, 2**61 - 1), (2**61, -(2**61) - 5), (2**63 - 1, -(2**63)),
               (Decimal("-0.50"), Decimal("123456789012.3456")), (Decimal("1.0"), 1),
               ("x", None, 1.5, Decimal("-7"))]
    for t in samples:
        _store_all(t, len(t), vals, tags)
        try:
            ok = (_fields_hash(vals, tags, len(t)) == hash(t)
                  and all(_field_hash(vals[f], tags[f]) == hash(t[f]) for f in range(len(t))))
        finally:
            _release_all(vals, tags, len(t))
        if not ok:
            return False
    return True


cdef inline uint32_t _mixed(Py_hash_t h) noexcept:
    # (Fibonacci mixing: the top 32 bits, all a home slot is made of)
    return <uint32_t>((<unsigned long long>h * 11400714819323198485ULL) >> 32)


cdef inline Py_ssize_t _mixed_home(uint32_t m, Py_ssize_t cap) noexcept:
    # (the mixed hash scaled to [0, cap): cap < 2**32)
    return <Py_ssize_t>((<unsigned long long>m * <unsigned long long>cap) >> 32)


cdef inline Py_ssize_t _slot_home(Py_hash_t h, Py_ssize_t cap) noexcept:
    return _mixed_home(_mixed(h), cap)


cdef inline unsigned char _fingerprint(Py_hash_t h) noexcept:
    # (six bits of the mixed hash that _slot_home does not read first: keys sharing a
    # home slot's neighbourhood mostly differ here)
    return <unsigned char>(((<unsigned long long>h * 11400714819323198485ULL) >> 26) & 63)


cdef class FieldMap:
    """A mapping of keys of ``nkey`` values (a bare value when ``nkey`` is 1, else a
    tuple) to tuples of ``nval`` values, its entries in native memory (see the module
    comment): ``get``, ``[k]``, ``[k] = v``, ``del``, ``pop``, ``in``, ``len``,
    iteration over keys, ``keys()``, ``values()``, ``items()``, ``clear()`` and
    ``nbytes``. Those values read back as tuples; any other value is kept as it is.
    With ``key_at`` (the value's positions of the key's ``nkey`` values: a top leaf's
    group, its key a part of its one tuple), a value holding the key's values there,
    the same values, keeps only its other fields: the key is not stored twice.

    >>> from decimal import Decimal
    >>> m = FieldMap(2, 3)
    >>> m[(24, 600000)] = (1, 1, Decimal("901.00")); m[(3, 7)] = (2, 2, Decimal("-0.5"))
    >>> m.get((24, 600000)), m[(3, 7)], (3, 7) in m, (7, 3) in m, len(m)
    ((1, 1, Decimal('901.00')), (2, 2, Decimal('-0.5')), True, False, 2)
    >>> del m[(3, 7)]; sorted(m.items()), m.pop((1, 1), None)
    ([((24, 600000), (1, 1, Decimal('901.00')))], None)
    >>> bucket = {(5, 6, 7): 2}; m[(5, 6)] = bucket; m[(5, 6)] is bucket
    True
    >>> g = FieldMap(2, 3, key_at=(2, 0)); g[(7, 5)] = (5, "x", 7); g[(1, 2)] = (9, 9, 9)
    >>> g[(7, 5)], g[(1, 2)], g.nbytes < m.nbytes
    ((5, 'x', 7), (9, 9, 9), True)
    """

    cdef char *slots
    cdef Py_ssize_t cap
    cdef Py_ssize_t used
    cdef readonly int nkey
    cdef readonly int nval
    cdef int nf  # nkey + the value fields a slot stores
    cdef readonly tuple key_at  # (None: the value's fields all stored)
    # src[p]: the slot's field that holds the value's field p (a key field, with key_at)
    cdef int src[32]
    cdef Py_ssize_t size  # bytes a slot: nf values, nf tags, [the mixed hash,] a flag
    cdef bint keeps_mixed  # whether a slot's padding holds its key's mixed hash
    cdef unsigned long long version  # (changes while iterating are an error, as in a dict)

    def __cinit__(self, int nkey, int nval, key_at=None):
        cdef int p, f
        if nkey < 1 or nval < 1 or nkey + nval > 32:
            raise ValueError(f"a FieldMap holds 1 to 32 fields, not {nkey} + {nval}")
        self.nkey = nkey
        self.nval = nval
        if key_at is None:
            self.nf = nkey + nval
            for p in range(nval):
                self.src[p] = nkey + p
        else:
            key_at = tuple(key_at)
            if (len(key_at) != nkey or len(set(key_at)) != nkey
                    or not all(type(p) is int and 0 <= p < nval for p in key_at)):
                raise ValueError(f"key_at: {nkey} distinct positions of a value of "
                                 f"{nval}, not {key_at!r}")
            # (at least one value field: a value kept by reference is held there)
            self.nf = nkey + max(1, nval - nkey)
            f = nkey
            for p in range(nval):
                if p in key_at:
                    self.src[p] = key_at.index(p)
                else:
                    self.src[p] = f
                    f += 1
        self.key_at = key_at
        self.size = (8 * self.nf + self.nf + 1 + 7) // 8 * 8
        # (where the padding has room, 1 to 3 fields and 8, it keeps the 32 bits a
        # home slot is made of: no key is hashed again to grow or to delete)
        self.keeps_mixed = self.size - (9 * self.nf + 1) >= 4
        self.cap = 8
        self.used = 0
        self.slots = _slots_alloc(self.cap * self.size)

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self.slots != NULL:
            for i in range(self.cap):
                if self._used(i):
                    self._release(i)
            _slots_free(self.slots, self.cap * self.size)

    # -- slot layout ---------------------------------------------------------------
    cdef inline char *_at(self, Py_ssize_t i) noexcept:
        return self.slots + i * self.size

    cdef inline bint _used(self, Py_ssize_t i) noexcept:
        return self._at(i)[self.size - 1] != 0

    cdef inline int64_t *_vals(self, Py_ssize_t i) noexcept:
        return <int64_t *>self._at(i)

    cdef inline unsigned char *_tags(self, Py_ssize_t i) noexcept:
        return <unsigned char *>(self._at(i) + 8 * self.nf)

    cdef inline unsigned char _flag(self, Py_ssize_t i) noexcept:
        # (the flag: its low two bits 0 a free slot, 1 the value's fields inline, 2 the
        # value a reference in the first value field; its high six the key's
        # fingerprint, _fingerprint)
        return <unsigned char>self._at(i)[self.size - 1]

    cdef inline bint _by_ref(self, Py_ssize_t i) noexcept:
        return (self._flag(i) & 3) == 2

    cdef inline uint32_t *_mixed_at(self, char *slot) noexcept:
        return <uint32_t *>(slot + 9 * self.nf)

    cdef uint32_t _slot_mixed(self, char *slot) except? 0:
        """The mixed hash of a used slot's key: kept in the slot, or made again."""
        cdef uint32_t m
        if self.keeps_mixed:
            memcpy(&m, self._mixed_at(slot), 4)  # (not 4-aligned where 9 * nf is odd)
            return m
        return _mixed(self._slot_hash(slot))

    cdef Py_hash_t _slot_hash(self, char *slot) except? -1:
        """The hash of the key a used slot (of this map's layout, at ``slot``) holds:
        made from its fields, the hash of a value equal to the key it was stored under."""
        cdef int64_t *vals = <int64_t *>slot
        cdef unsigned char *tags = <unsigned char *>(slot + 8 * self.nf)
        if _HASHES_AGREE:
            if self.nkey == 1:
                return _field_hash(vals[0], tags[0])
            return _fields_hash(vals, tags, self.nkey)
        if self.nkey == 1:
            return hash(_value(vals[0], tags[0]))
        return hash(_fields_tuple(vals, tags, self.nkey))

    cdef void _release(self, Py_ssize_t i) noexcept:
        cdef int64_t *vals = self._vals(i)
        cdef unsigned char *tags = self._tags(i)
        _release_all(vals, tags, self.nkey + 1 if self._by_ref(i) else self.nf)

    cdef inline int _stored_fields(self) noexcept:
        """The value fields a slot holds inline."""
        return self.nf - self.nkey

    # -- keys ------------------------------------------------------------------------
    cdef inline tuple _key_tuple(self, object key):
        """A key of several values as a tuple of ``nkey`` (KeyError for another
        length); None for a key of one value (the key itself is compared)."""
        if self.nkey == 1:
            return None
        if type(key) is tuple:
            if len(<tuple>key) != self.nkey:
                raise KeyError(key)
            return <tuple>key
        t = tuple(key)
        if len(t) != self.nkey:
            raise KeyError(key)
        return t

    cdef bint _matches(self, Py_ssize_t i, object key, tuple kt) except -1:
        cdef int f
        cdef int64_t *vals = self._vals(i)
        cdef unsigned char *tags = self._tags(i)
        if kt is None:
            return _field_is(vals[0], tags[0], key)
        for f in range(self.nkey):
            if not _field_is(vals[f], tags[f], kt[f]):
                return False
        return True

    cdef Py_ssize_t _find(self, object key, Py_hash_t h, tuple kt) except -2:
        """The slot holding ``key`` (``kt``: :meth:`_key_tuple`), or -1."""
        cdef uint32_t m = _mixed(h)
        cdef Py_ssize_t i = _mixed_home(m, self.cap)
        cdef unsigned char fp = _fingerprint(h)
        cdef uint32_t there = m
        while self._used(i):
            if (self._flag(i) >> 2) == fp:
                if self.keeps_mixed:
                    memcpy(&there, self._mixed_at(self._at(i)), 4)
                if there == m and self._matches(i, key, kt):
                    return i
            i += 1
            if i == self.cap:
                i = 0
        return -1

    cdef object _key_at(self, Py_ssize_t i):
        cdef int64_t *vals = self._vals(i)
        cdef unsigned char *tags = self._tags(i)
        if self.nkey == 1:
            return _value(vals[0], tags[0])
        return _fields_tuple(vals, tags, self.nkey)

    cdef object _value_at(self, Py_ssize_t i):
        cdef int64_t *vals = self._vals(i)
        cdef unsigned char *tags = self._tags(i)
        cdef tuple t
        cdef int p
        cdef object v
        if self._by_ref(i):
            return <object><PyObject *><intptr_t>vals[self.nkey]
        if self.key_at is None:
            return _fields_tuple(vals + self.nkey, tags + self.nkey, self.nval)
        t = PyTuple_New(self.nval)
        for p in range(self.nval):
            v = _value(vals[self.src[p]], tags[self.src[p]])
            Py_INCREF(v)
            PyTuple_SET_ITEM(t, p, v)
        return t

    cdef inline tuple _inline_value(self, object value):
        """``value`` when it is a tuple kept inline, else None (a packed row: see
        :meth:`_put_value`; anything else a reference)."""
        if type(value) is tuple and len(<tuple>value) == self.nval:
            return <tuple>value
        return None

    # -- writes ----------------------------------------------------------------------
    cdef int _store_fields(self, Py_ssize_t i, object key, tuple kt, object value) except -1:
        """Key and value into free slot ``i``, and its flag (a failure leaves the slot
        free, the references taken so far released)."""
        cdef int64_t vals[32]
        cdef unsigned char tags[32]
        _store_all((key,) if kt is None else kt, self.nkey, vals, tags)
        memcpy(self._vals(i), vals, 8 * self.nkey)
        memcpy(self._tags(i), tags, self.nkey)
        try:
            self._put_value(i, value)
        except BaseException:
            _release_all(vals, tags, self.nkey)
            memset(self._at(i), 0, self.size)
            raise
        return 0

    cdef int _put_value(self, Py_ssize_t i, object value) except -1:
        """The value of slot ``i`` (whose key is written) replaced by ``value``, the old
        one's references released; the flag set. A failure changes nothing."""
        cdef int64_t vals[32]
        cdef unsigned char tags[32]
        cdef int n = 1
        cdef int64_t *old = self._vals(i)
        cdef unsigned char *old_tags = self._tags(i)
        cdef unsigned char old_flag = self._flag(i) & 3
        cdef unsigned char flag = 2
        cdef tuple vt = self._inline_value(value)
        if vt is None and _copy_packed(value, self.nval, vals, tags):
            flag = 1  # (a packed row's fields as they are: a payload rpack made)
            n = self.nval
        elif vt is not None:
            flag = 1
            n = self.nval
            _store_all(vt, n, vals, tags)
        if flag == 1 and self.key_at is not None:
            n = self._without_key(old, old_tags, vals, tags)
            if n < 0:  # (the value does not hold the key there: kept by reference)
                flag = 2
        if flag == 2:
            Py_INCREF(value)
            vals[0] = <int64_t><intptr_t><PyObject *>value
            tags[0] = T_OBJ
            n = 1
        if old_flag:
            _release_all(old + self.nkey, old_tags + self.nkey,
                         1 if old_flag == 2 else self._stored_fields())
        memcpy(old + self.nkey, vals, 8 * n)
        memcpy(old_tags + self.nkey, tags, n)
        self._at(i)[self.size - 1] = (self._flag(i) & 0xFC) | flag
        return 0

    cdef int _without_key(self, int64_t *key, unsigned char *key_tags, int64_t *vals,
                          unsigned char *tags) noexcept:
        """The ``nval`` fields of a value in ``vals`` (references taken) compacted to
        those that are not the key's, when the key's fields at ``key_at`` are
        the slot's key fields as stored (the same int or DECIMAL, or the same object:
        they read back the same): the count kept, the key's duplicates released. -1
        otherwise, every reference released."""
        cdef int p, f = 0, k
        for p in range(self.nval):
            k = self.src[p]
            if k < self.nkey and (vals[p] != key[k] or tags[p] != key_tags[k]):
                _release_all(vals, tags, self.nval)
                return -1
        for p in range(self.nval):
            if self.src[p] < self.nkey:
                _release_all(vals + p, tags + p, 1)
            else:
                vals[f] = vals[p]
                tags[f] = tags[p]
                f += 1
        return f

    cdef int _grow(self) except -1:
        cdef Py_ssize_t old_cap = self.cap, i, j
        cdef Py_ssize_t cap = old_cap + old_cap // 2
        cdef char *old = self.slots
        cdef char *new
        if cap >= 2**32:
            raise MemoryError("a FieldMap holds fewer than 2**32 slots")
        new = _slots_alloc(cap * self.size)
        self.slots = new
        self.cap = cap
        try:
            for i in range(old_cap):
                if (old + i * self.size)[self.size - 1] != 0:
                    j = _mixed_home(self._slot_mixed(old + i * self.size), cap)
                    while self._used(j):
                        j += 1
                        if j == cap:
                            j = 0
                    memcpy(self._at(j), old + i * self.size, self.size)
        except BaseException:
            # (a key's hash failed, or an interrupt: the old table as it was)
            self.slots = old
            self.cap = old_cap
            _slots_free(new, cap * self.size)
            raise
        _slots_free(old, old_cap * self.size)
        return 0

    cdef int _remove(self, Py_ssize_t i) except -1:
        """Backward-shift deletion of slot ``i`` (its references already released)."""
        cdef Py_ssize_t j = i, home
        while True:
            j += 1
            if j == self.cap:
                j = 0
            if not self._used(j):
                break
            home = _mixed_home(self._slot_mixed(self._at(j)), self.cap)
            # slot j may move to i when its home is not cyclically in (i, j]
            if (i <= j and (home <= i or home > j)) or (i > j and (home <= i and home > j)):
                memcpy(self._at(i), self._at(j), self.size)
                i = j
        memset(self._at(i), 0, self.size)
        self.used -= 1
        self.version += 1
        return 0

    # -- the mapping -----------------------------------------------------------------
    def get(self, key, default=None):
        cdef tuple kt = self._key_tuple(key)
        cdef Py_ssize_t i = self._find(key, hash(key), kt)
        return default if i < 0 else self._value_at(i)

    def __getitem__(self, key):
        cdef tuple kt = self._key_tuple(key)
        cdef Py_ssize_t i = self._find(key, hash(key), kt)
        if i < 0:
            raise KeyError(key)
        return self._value_at(i)

    def __contains__(self, key):
        try:
            kt = self._key_tuple(key)
        except KeyError:
            return False
        return self._find(key, hash(key), kt) >= 0

    def __setitem__(self, key, value):
        cdef tuple kt = self._key_tuple(key)
        cdef Py_hash_t h = hash(key)
        cdef Py_ssize_t i = self._find(key, h, kt)
        cdef uint32_t m
        if i >= 0:
            self._put_value(i, value)
            return
        if (self.used + 1) * 5 > self.cap * 4:
            self._grow()
        i = _slot_home(h, self.cap)
        while self._used(i):
            i += 1
            if i == self.cap:
                i = 0
        self._store_fields(i, key, kt, value)
        self._at(i)[self.size - 1] = (self._flag(i) & 3) | (_fingerprint(h) << 2)
        if self.keeps_mixed:
            m = _mixed(h)
            memcpy(self._mixed_at(self._at(i)), &m, 4)
        self.used += 1
        self.version += 1

    def __delitem__(self, key):
        cdef tuple kt = self._key_tuple(key)
        cdef Py_ssize_t i = self._find(key, hash(key), kt)
        if i < 0:
            raise KeyError(key)
        self._release(i)
        self._remove(i)

    def pop(self, key, *default):
        cdef tuple kt
        cdef Py_ssize_t i
        try:
            kt = self._key_tuple(key)
            i = self._find(key, hash(key), kt)
        except KeyError:
            i = -1
        if i < 0:
            if default:
                return default[0]
            raise KeyError(key)
        value = self._value_at(i)
        self._release(i)
        self._remove(i)
        return value

    def __len__(self):
        return self.used

    def _slots_in_use(self):
        cdef Py_ssize_t i
        cdef unsigned long long version = self.version
        for i in range(self.cap):
            if self.version != version:
                raise RuntimeError("FieldMap changed size during iteration")
            if self._used(i):
                yield i

    def __iter__(self):
        for i in self._slots_in_use():
            yield self._key_at(i)

    def keys(self):
        return iter(self)

    def values(self):
        for i in self._slots_in_use():
            yield self._value_at(i)

    def items(self):
        for i in self._slots_in_use():
            yield self._key_at(i), self._value_at(i)

    def clear(self):
        cdef Py_ssize_t i
        for i in range(self.cap):
            if self._used(i):
                self._release(i)
        memset(self.slots, 0, self.cap * self.size)
        self.used = 0
        self.version += 1

    @property
    def nbytes(self):
        """Bytes of the slot array (references' objects not counted)."""
        return self.cap * self.size

    def __sizeof__(self):
        return object.__sizeof__(self) + self.cap * self.size

    def __repr__(self):
        return "FieldMap({" + ", ".join(f"{k!r}: {v!r}" for k, v in self.items()) + "})"

    def __reduce__(self):
        return (_field_map, (self.nkey, self.nval, list(self.items()), self.key_at))


def _field_map(int nkey, int nval, list items, key_at=None):
    m = FieldMap(nkey, nval, key_at)
    for k, v in items:
        m[k] = v
    return m


_HASHES_AGREE = _hashes_agree()


def stored_key_hash(tuple t):
    """hash() of ``t`` (1 to 8 values) as a field map makes it from the stored fields
    (a test's view of :func:`_fields_hash`).

    >>> from decimal import Decimal
    >>> t = (7, Decimal("-0.25"), "x")
    >>> stored_key_hash(t) == hash(t) or not stored_hashes_agree()
    True
    """
    cdef int64_t vals[8]
    cdef unsigned char tags[8]
    cdef int n = len(t)
    if not 1 <= n <= 8:
        raise ValueError(f"1 to 8 values, not {n}")
    _store_all(t, n, vals, tags)
    try:
        return _fields_hash(vals, tags, n)
    finally:
        _release_all(vals, tags, n)


def stored_hashes_agree():
    """Whether a field map hashes a stored key from its fields (this CPython's tuple hash
    is the one replicated; else it makes the key's values and hashes them).

    >>> stored_hashes_agree() in (True, False)
    True
    """
    return _HASHES_AGREE
