"""Differential testing of the compiled back end (docs/Testing.md).

``layouts`` enumerates layouts and reshard pairs the way the planner's unit
tests do, ``programs`` writes small random programs, and ``sweep`` compiles
and runs them with ``shardx-run --check`` (sharded against unsharded) and
classifies every outcome. ``scripts/backend_sweep.py`` is the command line.
Standard library only: the lit tests run it with the system Python.
"""
