//===- shardx-exec.cpp - Run a ShardX artifact on N ranks -----------------===//
//
// Part of ShardX.
//
// shardx-exec model.so [--entry F] [--backend threads|mpi] [--ranks N]
//             [--inputs a.npy,b.npy | --seed S] [--outputs DIR]
//
// Inputs are global tensors (.npy, or random from a seed); each rank gets
// its shard by the input layouts; the global outputs (assembled by the
// output layouts) are written as DIR/<entry>.out<i>.npy. Needs no MLIR.
//
//===----------------------------------------------------------------------===//

#include "ExecCommon.h"

int main(int argc, char **argv) {
  return shardx::tools::execMain(argc, argv);
}
