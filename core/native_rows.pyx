# Hand-written Cython of ivmflow's native build (core/native.py, native_rows()): a join
# node's tuples packed into fixed-width native fields. Built alone, once per Python and
# Cython version, and cached like the generated modules.
#
# PackedRow: a tuple of 1 to 8 values in one object of 112 bytes. A 5-column lineitem
# tuple as Python objects is the tuple (80 bytes) and its values: an int above 256 is
# 28 bytes, a DECIMAL 104; together about 270 bytes. Here an int of 64 bits and a
# DECIMAL whose coefficient fits 64 bits are stored in the row itself (8 bytes and an
# exponent); anything else (a text, a date, None, a bigger number) as a reference to
# the value, which the parser shares between rows. Reading a field makes the Python
# value again (an int, or a Decimal with the same coefficient and exponent: equal,
# and printed the same); the row hashes as the tuple of its values does and equals
# that tuple, so a plain tuple finds a packed row in a dict and the other way round.
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_DECREF
from libc.stdint cimport int64_t, intptr_t

from decimal import Decimal

cdef enum:
    MAXF = 8
    K_INT = 0
    K_DEC = 1
    K_OBJ = 2

_Decimal = Decimal


cdef inline object _field(PackedRow r, int i):
    cdef int kind = r.kinds[i]
    if kind == K_INT:
        return r.vals[i]
    if kind == K_DEC:
        return _Decimal(r.vals[i]).scaleb(r.exps[i])
    return <object><PyObject *><intptr_t>r.vals[i]


cdef bint _pack_decimal(PackedRow r, int i, str text):
    """Store a DECIMAL from its text when it reads ``[-]digits[.digits]`` with at most
    18 digits and is not a negative zero; False (nothing stored) otherwise (an exponent
    form, NaN, Infinity: kept as the object)."""
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
    if negative and coef == 0:
        return False
    if frac > 127:
        return False
    r.kinds[i] = K_DEC
    r.exps[i] = <signed char>(-frac if frac > 0 else 0)
    r.vals[i] = -coef if negative else coef
    return True


cdef tuple _values(PackedRow r):
    cdef int i
    return tuple([_field(r, i) for i in range(r.n)])


cdef class PackedRow:
    """A row of 1 to 8 values packed in native fields (see the module comment).

    >>> from decimal import Decimal
    >>> t = (1552, 93, None, Decimal("17.00"), Decimal("23721.9360"), "x")
    >>> r = PackedRow(t, True)
    >>> r == t, t == r, hash(r) == hash(t), r[4], r[-1], len(r), tuple(r) == t
    (True, True, True, Decimal('23721.9360'), 'x', 6, True)
    >>> r == PackedRow((1552, 93, None, Decimal("17.0"), Decimal("23721.936"), "x"), True)
    True
    """

    cdef Py_hash_t h
    cdef int64_t vals[MAXF]
    cdef signed char exps[MAXF]
    cdef unsigned char kinds[MAXF]
    cdef unsigned char n

    def __cinit__(self, tuple t, bint decimals):
        cdef Py_ssize_t i, n = len(t)
        cdef object v
        if n < 1 or n > MAXF:
            raise ValueError(f"a packed row holds 1 to {MAXF} values, not {n}")
        self.h = hash(t)
        self.n = <unsigned char>n
        for i in range(n):
            v = t[i]
            self.exps[i] = 0
            if type(v) is int and -9223372036854775807 <= v <= 9223372036854775807:
                self.kinds[i] = K_INT
                self.vals[i] = v
                continue
            if decimals and type(v) is _Decimal and _pack_decimal(self, i, str(v)):
                continue
            self.kinds[i] = K_OBJ
            Py_INCREF(v)
            self.vals[i] = <int64_t><intptr_t><PyObject *>v

    def __dealloc__(self):
        cdef int i
        for i in range(self.n):
            if self.kinds[i] == K_OBJ:
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
            return _field(self, <int>i)
        return _values(self)[index]

    def __iter__(self):
        return iter(_values(self))

    def values(self):
        """The row as a tuple of Python values."""
        return _values(self)

    def __hash__(self):
        return self.h

    def __richcmp__(self, other, int op):
        cdef PackedRow o
        cdef int i
        if op == 2 or op == 3:  # == / !=
            if type(other) is PackedRow:
                o = <PackedRow>other
                if o.h != self.h or o.n != self.n:
                    return op == 3
                for i in range(self.n):
                    if self.kinds[i] == o.kinds[i] and self.exps[i] == o.exps[i]:
                        if self.kinds[i] != K_OBJ:
                            if self.vals[i] != o.vals[i]:
                                return op == 3
                            continue
                    if not (_field(self, i) == _field(o, i)):
                        return op == 3
                return op == 2
            if isinstance(other, tuple):
                return (_values(self) == other) if op == 2 else (_values(self) != other)
            return NotImplemented
        mine = _values(self)
        theirs = _values(<PackedRow>other) if type(other) is PackedRow else other
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
        return _values(self) + (_values(<PackedRow>other) if type(other) is PackedRow else other)

    def __radd__(self, other):
        return other + _values(self)

    def __repr__(self):
        return repr(_values(self))

    def __reduce__(self):
        return (_unpickle, (_values(self), self.has_decimals()))

    def has_decimals(self):
        cdef int i
        for i in range(self.n):
            if self.kinds[i] == K_DEC:
                return True
        return False


def _unpickle(tuple t, bint decimals):
    return PackedRow(t, decimals)


def packer(bint decimals):
    """``pack(t)``: a tuple of 1 to 8 values as a :class:`PackedRow` (its DECIMALs in
    native fields when ``decimals``); any other value unchanged (None, a longer tuple).

    >>> pack = packer(False)
    >>> type(pack((1, 2))).__name__, pack(None), pack(tuple(range(9)))[8]
    ('PackedRow', None, 8)
    """
    def pack(t):
        if type(t) is tuple and 0 < len(<tuple>t) <= MAXF:
            return PackedRow(t, decimals)
        return t
    return pack
