"""Benchmarks, fuzzing and race campaigns: long runs whose numbers go to docs/benchmarks.md.

A package, run from the repository root: `.venv/bin/python -m bench.<module> ...` (the modules that
use the tests' helpers, `gwtest`, need `PYTHONPATH=tests`, as `bench/run.sh` sets). Tests import
it as `from bench import ...` (pytest's pythonpath holds the root and tests/).
"""
