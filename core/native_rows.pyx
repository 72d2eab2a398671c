# Hand-written Cython of ivmflow's native build (core/native.py, native_rows()): a join
# node's tuples packed into fixed-width native fields. Built alone, once per Python and
# Cython version, and cached like the generated modules.
#
# A row of n values (1 to 8) is one object of the smallest class that holds n:
# PackedRow2 (48 bytes), PackedRow4 (64), PackedRow6 (80), PackedRow8 (112). As Python
# objects a tuple of n is 40 + 8n bytes and each of its values apart: an int above 256
# is 28 bytes, a DECIMAL 104 (a 5-column lineitem tuple of Q9 with its values: about
# 270 bytes; here 80). A 64-bit int and a DECIMAL whose coefficient has at most 18
# digits are stored in the row (8 bytes and a tag: the DECIMAL's exponent); anything
# else (a text, a date, None, a bigger number) as a reference to the value, which the
# parser shares between rows. Reading a field makes the Python value again (an int; a
# Decimal with the same coefficient and exponent: equal, and printed the same). A row
# hashes as the tuple of its values does and equals that tuple, so a plain tuple finds
# a packed row in a dict and the other way round.
#
# The classes differ only in their number of fields: the text between the markers
# below is written once per size by core/native.py (native_rows), with ROW_CLASS and
# ROW_FIELDS replaced.
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF, Py_DECREF
from libc.stdint cimport int64_t, intptr_t

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


# --- row class ---
cdef class ROW_CLASS


cdef tuple _values_ROW_CLASS(ROW_CLASS r):
    # (a function, not a cdef method: a method would add a table pointer to every row)
    cdef int i
    return tuple([_value(r.vals[i], r.tags[i]) for i in range(r.n)])


cdef class ROW_CLASS:
    """A row of 1 to ROW_FIELDS values packed in native fields (see the module comment)."""

    cdef Py_hash_t h
    cdef int64_t vals[ROW_FIELDS]
    cdef unsigned char tags[ROW_FIELDS]
    cdef unsigned char n

    def __cinit__(self, tuple t, bint decimals):
        cdef Py_ssize_t i, n = len(t)
        if n < 1 or n > ROW_FIELDS:
            raise ValueError(f"a ROW_CLASS holds 1 to ROW_FIELDS values, not {n}")
        self.h = hash(t)
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
        return self.h

    def __richcmp__(self, other, int op):
        cdef ROW_CLASS o
        cdef int i
        if op == 2 or op == 3:  # == / !=
            if type(other) is ROW_CLASS:
                o = <ROW_CLASS>other
                if o.h != self.h or o.n != self.n:
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
# --- end row class ---


PACKED_TYPES = (PackedRow2, PackedRow4, PackedRow6, PackedRow8)


def _unpickle(tuple t, bint decimals):
    return pack_row(t, decimals)


cpdef object pack_row(object t, bint decimals):
    """``t`` as a packed row of the smallest class that holds it, when it is a tuple of
    1 to 8 values (its DECIMALs in native fields when ``decimals``); else ``t``."""
    cdef Py_ssize_t n
    if type(t) is not tuple:
        return t
    n = len(<tuple>t)
    if n == 0 or n > 8:
        return t
    if n <= 2:
        return PackedRow2(t, decimals)
    if n <= 4:
        return PackedRow4(t, decimals)
    if n <= 6:
        return PackedRow6(t, decimals)
    return PackedRow8(t, decimals)


def packer(bint decimals):
    """``pack(t)``: :func:`pack_row` with ``decimals`` bound.

    >>> pack = packer(False)
    >>> type(pack((1, 2, 3))).__name__, pack(None), pack(tuple(range(9)))[8]
    ('PackedRow4', None, 8)
    """
    def pack(t):
        return pack_row(t, decimals)
    return pack
