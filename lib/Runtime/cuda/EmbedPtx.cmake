# Writes OUT, a C++ fragment defining kCollectiveKernelsPtx: the text of the
# file PTX, or "" when PTX is not given (no nvcc).
set(text "")
if(PTX)
  file(READ ${PTX} text)
endif()
file(WRITE ${OUT} "static const char kCollectiveKernelsPtx[] = R\"shardxptx(${text})shardxptx\";\n")
