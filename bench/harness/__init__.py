"""What every bench script shares: the result schema (:mod:`.record`), percentiles and
slopes (:mod:`.stats`), sizes on disk (:mod:`.files`), timing a runner from outside
(:mod:`.timing`), plots (:mod:`.plots`) and the workloads' streams (:mod:`.streams`,
imported by name: it needs networkx and the engine).

Bench scripts run from the repository root as modules: ``python -m bench.NAME``.
"""

from bench.harness.files import dir_bytes
from bench.harness.record import (
    RESULTS,
    ROOT,
    SCHEMA_FIELDS,
    command_line,
    commit_label,
    format_rows,
    git_state,
    machine,
    result_record,
    write_record,
)
from bench.harness.stats import finite_or_none, loglog_slope, percentile

__all__ = ["RESULTS", "ROOT", "SCHEMA_FIELDS", "command_line", "commit_label", "dir_bytes",
           "finite_or_none", "format_rows", "git_state", "loglog_slope", "machine",
           "percentile", "result_record", "write_record"]
