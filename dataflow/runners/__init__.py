"""Distributed runners. Each hosts the same engine and operators; none holds query logic."""
