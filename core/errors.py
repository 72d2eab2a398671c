"""The error types users see. Each message says where, what was expected, what was
found, and what to do.

Example:
    >>> e = InputError("u.csv:3", "+,G,1", "2 values for G(src, dst)", "1 value", "fix it")
    >>> print(e)
    u.csv:3: bad update record '+,G,1': expected 2 values for G(src, dst), found 1 value; fix it
"""

from __future__ import annotations


class IvmflowError(Exception):
    """Base class of every error ivmflow raises on purpose."""


class QueryError(IvmflowError):
    """The SQL file is not in the supported language (raised before any input is read)."""


class UnsupportedQueryError(QueryError):
    """The query is valid SQL but its class is not supported (yet)."""


class InputError(IvmflowError):
    """A bad update record: malformed, unknown relation, wrong arity or type, or an
    invalid delete. Carries the pieces so sinks can write dead-letter rows."""

    def __init__(
        self, source: str, record: str, expected: str, found: str, hint: str = ""
    ) -> None:
        self.source = source
        self.record = record
        self.expected = expected
        self.found = found
        self.hint = hint
        text = f"{source}: bad update record {record!r}: expected {expected}, found {found}"
        if hint:
            text += f"; {hint}"
        super().__init__(text)

    @property
    def reason(self) -> str:
        return f"expected {self.expected}, found {self.found}"


class UsageError(IvmflowError):
    """Bad use of the command line or of run options, found after parsing (exit code
    2): options that contradict each other, a URL that names no topic, ..."""


class UnavailableError(UsageError):
    """A runner or connector that this installation does not have (exit code 2); the
    message says which extra to install."""
