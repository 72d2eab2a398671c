# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The update file's common lines parsed in C (``connectors.files``, docs/architecture.md
"Reading update files").

A line ``+,relation,v1,...,vn`` or ``-,...`` (one copy, no quotes, the relation's name
as declared) or ``*`` becomes the very record the Python parser makes of it: the same
:class:`Update` or :class:`EpochEnd`, the same value types (int, Decimal at the column's
scale, datetime.date, str), the same ``source``. Every other line, and every field the
C code is not sure of (a space, an exponent, a DECIMAL written at another scale, a date
written another way, a value out of range), is left to the Python parser: ``record``
returns ``None`` for the line, or a field goes through the column's Python parser.
So errors are always the Python parser's, word for word.

Values of DECIMAL, DATE and TEXT columns are handed out shared as
``core.schema.shared_parser`` does (one object per distinct text among a column's first
``cap`` values, dropped for columns whose values mostly differ).
"""

from cpython.datetime cimport import_datetime, date_new
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.string cimport memchr

import_datetime()


cdef extern from "Python.h":
    Py_ssize_t PyUnicode_GET_LENGTH(object)
    int PyUnicode_KIND(object)
    void* PyUnicode_DATA(object)
    object PyUnicode_Substring(object, Py_ssize_t, Py_ssize_t)
    object PyUnicode_FromFormat(const char*, ...)
    int PyObject_GenericSetAttr(object, object, object) except -1
    enum:
        PyUnicode_1BYTE_KIND


cdef enum:
    K_INT = 0
    K_DECIMAL = 1
    K_DATE = 2
    K_TEXT = 3
    K_OTHER = 4

# (a value of up to 18 digits fits a long long with room)
cdef int MAX_INT_DIGITS = 18


cdef inline bint digit(unsigned char c):
    return 48 <= c <= 57


cdef class _Column:
    cdef int kind
    cdef long long lo, hi
    cdef int int_digits, scale
    cdef object parse, decimal
    cdef dict shared
    cdef Py_ssize_t hits, cap
    cdef bint sharing

    def __init__(self, int kind, long long lo, long long hi, int int_digits, int scale,
                 parse, decimal, Py_ssize_t cap):
        self.kind = kind
        self.lo = lo
        self.hi = hi
        self.int_digits = int_digits
        self.scale = scale
        self.parse = parse
        self.decimal = decimal
        self.shared = {}
        self.hits = 0
        self.cap = cap
        self.sharing = kind in (K_DECIMAL, K_DATE, K_TEXT)

    cdef bint decimal_form(self, const unsigned char* s, Py_ssize_t n):
        """Whether the field is in the C path's DECIMAL form: digits at the column's
        scale exactly (else the Python parser rounds), within its precision (else it
        says out of range), and 18 significant digits at most (the decimal context's
        28 bound the Python parser meets stays far away)."""
        cdef Py_ssize_t i, digits, frac, lead, sign
        sign = 1 if s[0] == 45 else 0  # '-'
        i = sign
        while i < n and digit(s[i]):
            i += 1
        digits = i - sign
        lead = sign
        while lead < i and s[lead] == 48:  # (leading zeros: not significant)
            lead += 1
        frac = -1
        if i < n and s[i] == 46:  # '.'
            i += 1
            frac = i
            while i < n and digit(s[i]):
                i += 1
            frac = i - frac
        return not (i != n or digits == 0
                    or (frac != self.scale if self.scale > 0 else frac != -1)
                    or (sign + digits - lead) > self.int_digits
                    or (sign + digits - lead) + self.scale > MAX_INT_DIGITS)

    cdef object made(self, object text, const unsigned char* s):
        """The value of a field already checked to be in the C path's form."""
        if self.kind == K_DECIMAL:
            return self.decimal(text)
        if self.kind == K_DATE:
            return date_new((s[0] - 48) * 1000 + (s[1] - 48) * 100 + (s[2] - 48) * 10
                            + (s[3] - 48), (s[5] - 48) * 10 + (s[6] - 48),
                            (s[8] - 48) * 10 + (s[9] - 48))
        return text

    cdef object shared_value(self, object text, const unsigned char* s):
        """``made``, handed out shared as ``core.schema.shared_parser`` does."""
        cdef object got
        if not self.sharing:
            return self.made(text, s)
        got = self.shared.get(text)
        if got is not None:
            self.hits += 1
            return got
        got = self.made(text, s)
        if len(self.shared) < self.cap:
            self.shared[text] = got
        elif self.hits < len(self.shared):
            # (full, and hit less often than it has values: unique-ish values)
            self.sharing = False
            self.shared.clear()
        return got

    cdef object value(self, object line, const unsigned char* s, Py_ssize_t n,
                      Py_ssize_t start):
        """The field ``s[:n]`` (at ``start`` in ``line``): read here when it is in the
        C path's form, else by the column's Python parser, which raises where the
        Python parser does (the caller then leaves the line to it)."""
        cdef long long v
        if n == 0:
            return None
        if self.kind == K_INT:
            if int_form(s, n, &v) and self.lo <= v <= self.hi:
                return v
        elif (self.kind == K_TEXT
              or (self.kind == K_DECIMAL and self.decimal_form(s, n))
              or (self.kind == K_DATE and date_form(s, n))):
            return self.shared_value(PyUnicode_Substring(line, start, start + n), s)
        return self.parse(PyUnicode_Substring(line, start, start + n))


cdef bint int_form(const unsigned char* s, Py_ssize_t n, long long* out):
    """Whether the field is an optional '-' and 1 to 18 digits; its value in ``out``."""
    cdef Py_ssize_t i = 1 if s[0] == 45 else 0  # '-'
    cdef long long v = 0
    if n - i < 1 or n - i > MAX_INT_DIGITS:
        return False
    while i < n:
        if not digit(s[i]):
            return False
        v = v * 10 + (s[i] - 48)
        i += 1
    out[0] = -v if s[0] == 45 else v
    return True


cdef bint date_form(const unsigned char* s, Py_ssize_t n):
    """Whether the field is ``YYYY-MM-DD`` with a year past 0 (the Python parser reads
    other forms, and refuses year 0 as out of range)."""
    return (n == 10 and s[4] == 45 and s[7] == 45
            and digit(s[0]) and digit(s[1]) and digit(s[2]) and digit(s[3])
            and digit(s[5]) and digit(s[6]) and digit(s[8]) and digit(s[9])
            and not (s[0] == 48 and s[1] == 48 and s[2] == 48 and s[3] == 48))


cdef class _Relation:
    cdef object name
    cdef list columns
    cdef Py_ssize_t arity

    def __init__(self, name, list columns):
        self.name = name
        self.columns = columns
        self.arity = len(columns)


cdef class LineParser:
    """``record(line, source_name, lineno)``: the record of a common line, or ``None``
    for the Python parser to read it (see the module's docstring)."""

    cdef dict relations
    cdef object update_type, epoch_type, new
    cdef object op_insert, op_delete, one
    cdef object a_op, a_relation, a_row, a_mult, a_source

    def __init__(self, dict relations, update_type, epoch_type):
        self.relations = {name: _Relation(name, [_Column(*c) for c in cols])
                          for name, cols in relations.items()}
        self.update_type = update_type
        self.epoch_type = epoch_type
        self.new = object.__new__
        self.op_insert = "+"
        self.op_delete = "-"
        self.one = 1
        self.a_op = "op"
        self.a_relation = "relation"
        self.a_row = "row"
        self.a_mult = "mult"
        self.a_source = "source"

    def record(self, object line, object source_name, Py_ssize_t lineno):
        cdef Py_ssize_t n, pos, end, i, arity, start, width
        cdef const unsigned char* s
        cdef const unsigned char* hit
        cdef _Relation rel
        cdef _Column col
        cdef tuple row
        cdef object value, update
        if (type(line) is not str or type(source_name) is not str
                or PyUnicode_KIND(line) != PyUnicode_1BYTE_KIND):
            return None
        n = PyUnicode_GET_LENGTH(line)
        s = <const unsigned char*>PyUnicode_DATA(line)
        while n > 0 and (s[n - 1] == 10 or s[n - 1] == 13):
            n -= 1
        if n == 0:
            return None
        if n == 1 and s[0] == 42:  # '*'
            return self.epoch_type(PyUnicode_FromFormat("%U:%zd", <void*>source_name,
                                                        lineno))
        if n < 3 or (s[0] != 43 and s[0] != 45) or s[1] != 44:
            return None
        hit = <const unsigned char*>memchr(s + 2, 44, n - 2)
        if hit == NULL:
            return None
        end = hit - s
        value = self.relations.get(PyUnicode_Substring(line, 2, end))
        if value is None:
            return None
        rel = <_Relation>value
        arity = rel.arity
        row = PyTuple_New(arity)
        pos = end + 1
        for i in range(arity):
            if pos > n:
                return None  # (fewer fields than the relation's columns)
            if pos < n and s[pos] == 34:
                # A quoted field ("a, b"): the text between the quotes when that holds
                # no quote; a quote doubled or written "" is the csv module's to read.
                hit = <const unsigned char*>memchr(s + pos + 1, 34, n - pos - 1)
                if hit == NULL or hit == s + pos + 1:
                    return None
                end = hit - s + 1
                if end < n and s[end] != 44:
                    return None
                start = pos + 1
                width = end - 1 - start
            else:
                hit = <const unsigned char*>memchr(s + pos, 44, n - pos)
                end = n if hit == NULL else hit - s
                if memchr(s + pos, 34, end - pos) != NULL:
                    return None
                start = pos
                width = end - pos
            if (end == n) != (i == arity - 1):
                return None  # (more or fewer fields than the relation's columns)
            col = <_Column>rel.columns[i]
            try:
                value = col.value(line, s + start, width, start)
            except Exception:
                return None  # (the Python parser says what is wrong, and where)
            Py_INCREF(value)
            PyTuple_SET_ITEM(row, i, value)
            pos = end + 1
        update = self.new(self.update_type)
        PyObject_GenericSetAttr(update, self.a_op,
                                self.op_insert if s[0] == 43 else self.op_delete)
        PyObject_GenericSetAttr(update, self.a_relation, rel.name)
        PyObject_GenericSetAttr(update, self.a_row, row)
        PyObject_GenericSetAttr(update, self.a_mult, self.one)
        PyObject_GenericSetAttr(update, self.a_source,
                                PyUnicode_FromFormat("%U:%zd", <void*>source_name, lineno))
        return update

