#!/usr/bin/env python3
"""Differential execution of the compiled back end (docs/Testing.md).

Every reshard pair of the sweep -- layouts of 1-D and 2-D tensors of odd
sizes on the meshes (4), (2,2), (2,3), (3,2), (2,2,2) and (5) -- and random
programs, compiled and run sharded against unsharded with shardx-run --check.

  python3 scripts/backend_sweep.py                       # every pair, threads
  python3 scripts/backend_sweep.py --sample 2000 --seed 1 --out report.json
  python3 scripts/backend_sweep.py --sample 150 --backend mpi
  python3 scripts/backend_sweep.py --sample 0 --programs 20

Prints per mesh the pairs generated, executed, matched, mismatched,
rejected with a diagnostic, failed to compile, failed to run, crashed; the
failure classes with the smallest reproducer each; exits 1 on any failure.
Standard library only.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from shardx_dev.testing.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
