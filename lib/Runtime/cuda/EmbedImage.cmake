# Writes OUT, a C++ fragment defining the byte array NAME: the bytes of
# IMAGE (a fat binary, or PTX) and a NUL, which cuModuleLoadData needs after
# PTX; only the NUL when IMAGE is not given (no nvcc). Aligned as nvcc aligns
# its fat binaries (the driver reads their 8-byte header fields in place).
set(bytes "")
if(IMAGE)
  file(READ ${IMAGE} hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
endif()
file(WRITE ${OUT} "alignas(16) static const unsigned char ${NAME}[] = {${bytes}0};\n")
