"""Checks a kernel cache's tally (.size, ObjectCache.cpp) against its
entries: the bytes of every <key>.o and <key>.sum."""

import os
import sys

folder = sys.argv[1]
bytes_, scanned = open(os.path.join(folder, ".size")).read().split()
sums = [n for n in os.listdir(folder) if n.endswith(".sum")]
total = sum(os.path.getsize(os.path.join(folder, n)) +
            os.path.getsize(os.path.join(folder, n[:-4] + ".o")) for n in sums)
if int(bytes_) != total:
    sys.exit(f"tally {bytes_} bytes, entries {total} bytes")
print(f"tally matches {total} bytes in {len(sums)} entries")
