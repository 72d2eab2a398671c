"""Benchmarks: workloads, baselines (SCP, DuckDB recomputation), runner and plots."""
