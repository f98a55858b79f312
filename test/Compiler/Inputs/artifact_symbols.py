"""Fails when a shared object needs a symbol that none of the allowed
libraries defines: libc, libm, libstdc++ (with the unwinder it is built
on), the ShardX runtime (linked into the artifact), BLAS and MPI. A
compiler builtin (`__truncsfbf2`, `__extendhfsf2`, ...) is what this
catches: libgcc or compiler-rt may lack it on the machine that loads the
artifact (GCC 12's libgcc has no bf16 conversions).

    python artifact_symbols.py ARTIFACT.so [ARTIFACT.so ...]

Prints "ok: N undefined symbols, all from allowed libraries" per file.
"""

import re
import subprocess
import sys

ALLOWED = ("ld-linux", "libc.so", "libm.so", "libstdc++.so", "libopenblas", "libblas.so",
           "libcblas.so", "libmpi", "libdl.so", "libpthread.so")
# The C++ unwinder interface that libstdc++'s exception support stands on
# (libgcc_s); nothing else of libgcc_s is allowed.
UNWINDER = re.compile(r"^_Unwind_")


def dynamic_symbols(path, defined):
    flag = "--defined-only" if defined else "--undefined-only"
    out = subprocess.run(["nm", "-D", flag, path], check=True, capture_output=True,
                         text=True).stdout
    symbols = {}
    for line in out.splitlines():
        parts = line.split()
        if not parts:
            continue
        kind, name = parts[-2], parts[-1]
        symbols[name.split("@")[0]] = kind
    return symbols


def libraries(path):
    """The shared libraries `path` loads (ldd), by resolved path."""
    out = subprocess.run(["ldd", path], check=True, capture_output=True, text=True).stdout
    libs = []
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (\S+)", line)
        if m and m.group(2).startswith("/"):
            libs.append((m.group(1), m.group(2)))
        elif re.match(r"\s*/\S*ld-linux", line):  # the dynamic loader (libc's)
            loader = line.split()[0]
            libs.append(("ld-linux", loader))
    return libs


def check(path):
    allowed = set()
    for name, resolved in libraries(path):
        if name.startswith(ALLOWED):
            allowed |= set(dynamic_symbols(resolved, True))
    bad = []
    undefined = dynamic_symbols(path, False)
    for sym, kind in sorted(undefined.items()):
        if kind in ("w", "v"):  # weak: resolved if present, never required
            continue
        if sym in allowed or UNWINDER.match(sym):
            continue
        bad.append(sym)
    if bad:
        print(f"error: {path} needs symbols no allowed library defines "
              f"(compiler builtins?): {' '.join(bad)}")
        return False
    print(f"ok: {len(undefined)} undefined symbols, all from allowed libraries")
    return True


if __name__ == "__main__":
    ok = all([check(p) for p in sys.argv[1:]])
    sys.exit(0 if ok and len(sys.argv) > 1 else 1)
