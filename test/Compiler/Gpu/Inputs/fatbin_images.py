"""Prints the fat binaries embedded in a file (a CUDA artifact, a library):
`fat binary`, then a line per image, `<elf|ptx> sm_<arch> <first bytes>`,
where the ELF's first bytes show it is one and the PTX's say whether it is
compressed; `no fat binary` when there is none. The layout read here is
what the CUDA toolkit's fatbinary writes: a 16-byte header (magic
0xba55ed50, version, header size, size of the images), then per image a
header (kind 1 PTX or 2 ELF, header size, payload size, the arch at 0x1c)
and its payload."""
import struct
import sys

data = open(sys.argv[1], "rb").read()
magic = struct.pack("<I", 0xBA55ED50)
start = data.find(magic)
if start < 0:
    print("no fat binary")
while start >= 0:
    _, _, header, size = struct.unpack_from("<IHHQ", data, start)
    print("fat binary")
    offset, end = start + header, start + header + size
    while offset < end:
        kind, _, image_header, payload = struct.unpack_from("<HHIQ", data, offset)
        (arch,) = struct.unpack_from("<I", data, offset + 0x1C)
        body = data[offset + image_header:offset + image_header + payload]
        name = {1: "ptx", 2: "elf"}.get(kind, f"kind{kind}")
        first = "ELF" if body.startswith(b"\x7fELF") else (
            "zstd" if body.startswith(b"\x28\xb5\x2f\xfd") else body[:8].hex())
        print(f"{name} sm_{arch} {first}")
        offset += image_header + payload
    start = data.find(magic, end)
