# Writes PTX, the PTX of NVCC_PTX with its ISA version set to 8.0. PTX 8.0
# is what the cuda target's kernels use (nvvm-attach-target +ptx80): drivers
# from CUDA 12.0 on load it, while nvcc 13 writes 9.0, which needs a CUDA 13
# driver; ptxas (the build's and the tests') checks that the kernels need
# nothing newer.
file(READ ${NVCC_PTX} text)
string(REGEX REPLACE "\n\\.version [0-9]+\\.[0-9]+\n" "\n.version 8.0\n"
  text "${text}")
file(WRITE ${PTX} "${text}")
