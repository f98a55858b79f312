"""Checks a kernel cache's tally (.size, ObjectCache.cpp) against its
entries (the bytes of every <key>.o and <key>.sum), or with --bound B says
whether the entries fit B bytes (the tally not read)."""

import argparse
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("folder")
parser.add_argument("--bound", type=int)
args = parser.parse_args()
sums = [n for n in os.listdir(args.folder) if n.endswith(".sum")]
total = sum(os.path.getsize(os.path.join(args.folder, n)) +
            os.path.getsize(os.path.join(args.folder, n[:-4] + ".o")) for n in sums)
if args.bound is not None:
    print(f"{len(sums)} entries {'within' if total <= args.bound else 'over'} the bound")
    sys.exit(0)
bytes_, scanned = open(os.path.join(args.folder, ".size")).read().split()
if int(bytes_) != total:
    sys.exit(f"tally {bytes_} bytes, entries {total} bytes")
print(f"tally matches {total} bytes in {len(sums)} entries")
