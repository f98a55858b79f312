"""Runs `shardx-compile PROGRAM -o FIFO` with a reader on the FIFO and checks
that the FIFO is still a FIFO afterwards and received the artifact's bytes
(those of `-o FILE`). Writing the artifact by a rename over its path
replaced a special file (as root, `-o /dev/null` replaced the device)."""

import os
import stat
import subprocess
import sys
import threading

tool, program, workdir = sys.argv[1:4]
regular = os.path.join(workdir, "artifact.so")
fifo = os.path.join(workdir, "fifo")
os.mkfifo(fifo)
got = []
reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
reader.start()
rc = subprocess.run([tool, program, "-o", fifo]).returncode
reader.join(timeout=120)
assert rc == 0, rc
assert stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO was replaced"
assert not os.path.exists(fifo + ".partial"), "the partial artifact was left"
subprocess.run([tool, program, "-o", regular], check=True)
want = open(regular, "rb").read()
assert got and len(got[0]) == len(want), (len(got[0]) if got else None, len(want))
print("special output ok")
