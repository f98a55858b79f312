"""Checks a kernel cache's tally (.size, ObjectCache.cpp) against its
entries (the disk space of every <key>.o and <key>.sum: allocated blocks,
at least the file's size), or with --bound B says whether the entries fit
B bytes (the tally not read)."""

import argparse
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("folder")
parser.add_argument("--bound", type=float)
parser.add_argument("--apparent", action="store_true")
args = parser.parse_args()
sums = [n for n in os.listdir(args.folder) if n.endswith(".sum")]


def disk_bytes(name):
    st = os.stat(os.path.join(args.folder, name))
    return max(st.st_blocks * 512, st.st_size)


total = sum(disk_bytes(n) + disk_bytes(n[:-4] + ".o") for n in sums)
if args.apparent:
    apparent = sum(os.path.getsize(os.path.join(args.folder, n)) +
                   os.path.getsize(os.path.join(args.folder, n[:-4] + ".o")) for n in sums)
    print(f"{apparent / (1 << 20):.12f}")
    sys.exit(0)
if args.bound is not None:
    print(f"{len(sums)} entries {'within' if total <= args.bound else 'over'} the bound")
    sys.exit(0)
bytes_, scanned = open(os.path.join(args.folder, ".size")).read().split()
if int(bytes_) != total:
    sys.exit(f"tally {bytes_} bytes, entries {total} bytes")
print(f"tally matches {total} bytes in {len(sums)} entries")
