"""The per-call cost of an index check in shardx.compile (docs/Importer.md,
"Index checks"): a compiled embedding lookup called with its check (the C++
plan called from ``_call_guarded``, then this process's copy of the check's
code read) against the same entry's C++ plan alone (the code returned,
unchecked), interleaved in one run, the minimum of 10 rounds of 500 calls.

    PYTHONPATH=python SHARDX_BUILD=build python bench/index_check_bench.py
"""
import time

import torch
import torch.nn.functional as F

import shardx


def f(w, idx):
    return F.embedding(idx, w).sum(0)


def main():
    w = torch.randn(64, 16)
    idx = torch.randint(0, 64, (32,))
    for ranks in (1, 2):
        c = shardx.compile(f, shardx.Mesh((ranks,), ("x",)))
        c(w, idx)
        exe = list(c._executables.values())[0]

        def bench(checked, n=500):
            if checked:
                c._plan, c._checked = None, exe
            else:
                c._plan, c._checked = exe.plan, None
            t = time.perf_counter()
            for _ in range(n):
                c(w, idx)
            return (time.perf_counter() - t) / n * 1e6
        a, b = [], []
        for _ in range(10):
            a.append(bench(True))
            b.append(bench(False))
        print(f"threads, {ranks} rank(s): with the check {min(a):.1f} us/call, "
              f"the C++ plan alone {min(b):.1f} us/call ({min(a) / min(b):.2f}x)")


if __name__ == "__main__":
    main()
