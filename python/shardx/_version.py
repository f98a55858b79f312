"""ShardX's version: the one place it is written (pyproject.toml and the
top-level CMakeLists.txt read it)."""

__version__ = "0.1.0"
