"""The operators, pure Python over the State protocol (:mod:`operators.state`); they
import ``core`` and ``plans`` only, never an execution engine."""
