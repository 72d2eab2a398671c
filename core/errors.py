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


class EvaluationError(InputError):
    """A row expression failed on a value, where DuckDB fails too: an overflow (DuckDB's
    Out of Range Error: an integer or DECIMAL result outside its type, a CAST to a
    narrower type) or a string that does not convert (its Conversion Error). Raised
    while an update is applied, the run names that update's record (``source`` and
    ``record`` are filled in by the driver) and ``--on-error skip`` skips it; met at an
    epoch's end (an expression after the aggregate), it stops the run naming the
    expression.

    >>> print(EvaluationError("`a + 1` within INTEGER", "2147483647 + 1 (overflow)"))
    cannot evaluate: expected `a + 1` within INTEGER, found 2147483647 + 1 (overflow)
    """

    def __init__(self, expected: str, found: str, hint: str = "") -> None:
        self.source = ""
        self.record = ""
        self.expected = expected
        self.found = found
        self.hint = hint
        IvmflowError.__init__(self, f"cannot evaluate: expected {expected}, found {found}")


class UsageError(IvmflowError):
    """Bad use of the command line or of run options, found after parsing (exit code
    2): options that contradict each other, a URL that names no topic, ..."""


class UnavailableError(UsageError):
    """A runner or connector that this installation does not have (exit code 2); the
    message says which extra to install."""


class JobError(IvmflowError):
    """A runner's job (Spark, Flink) failed or could not start (exit code 1). The
    message is one line naming the cause (the worker's Python error, or what Java was
    found and what is needed); ``trace`` holds the full text (JVM stack, worker
    traceback) and ``log`` the file that holds it, when one was written (the CLI prints
    the path, or the trace itself with ``--verbose``)."""

    def __init__(self, message: str, trace: str = "", log: str | None = None) -> None:
        super().__init__(message)
        self.trace = trace
        self.log = log


class JobStartError(JobError):
    """The job could not start: no Java, a Java version the runner does not support, or
    a JVM that died while starting."""


class SparkJobError(JobError):
    """The Spark job failed; the message carries the worker's Python error taken out of
    Spark's JVM trace (``the spark job failed: ImportError: ...``)."""


class FlinkJobError(JobError):
    """The Flink job failed (after its bounded restarts); the message carries the
    worker's error (``the flink job failed: ...``)."""
