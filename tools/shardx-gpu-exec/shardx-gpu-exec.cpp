//===- shardx-gpu-exec.cpp - Run a ShardX artifact on one GPU -------------===//
//
// Part of ShardX.
//
// shardx-gpu-exec model.so [--entry F] [--backend cuda-local|nccl|threads]
//                 [--ranks N] [--inputs a.npy,b.npy | --seed S]
//                 [--int-range N] [--outputs DIR] [--timeout S]
//                 [--expect r0.npy,r1.npy [--rtol X] [--atol Y]]
//                 [--repeat N] [--resident]
//
// --resident (CUDA artifacts, one rank): the inputs go to the device once,
// the program runs there N times after a warm-up (each run timed between
// stream synchronizations; the median is reported) and the last run's
// outputs come back once, which is what a training loop with its
// parameters on the GPU sees. Without it every run is a whole call of the
// artifact, host copies included.
//
// shardx-exec's inputs, outputs and checks (tools/shardx-exec/ExecCommon),
// with the cuda-local backend (every rank a thread on CUDA device 0; the
// default) or nccl (one process per rank and GPU, started by a launcher
// that sets SHARDX_RANK, SHARDX_WORLD_SIZE and SHARDX_STORE_DIR for the
// file-store bootstrap) instead of mpi, in a binary that links no LLVM,
// MLIR, OpenBLAS, MPI, CUDA or NCCL library (the CUDA runtime opens the
// driver and NCCL at run time), so that it can be carried to a GPU machine
// with nothing but a driver.
//
//===----------------------------------------------------------------------===//

#include "ExecCommon.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace shardx;

namespace {

const char *const kUsage =
    "usage: shardx-gpu-exec model.so [--entry F] [--backend "
    "cuda-local|nccl|threads]\n"
    "         [--ranks N] [--inputs a.npy,b.npy | --seed S] [--int-range N]\n"
    "         [--outputs DIR] [--timeout SECONDS] [--repeat N] [--resident]\n"
    "         [--expect r0.npy,r1.npy [--rtol X] [--atol Y]]\n";

int usageError(const std::string &message) {
  std::fprintf(stderr, "shardx-gpu-exec: error: %s\n%s", message.c_str(),
               kUsage);
  return 1;
}

bool parseInt(const std::string &text, int64_t &value) {
  char *end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end || errno)
    return false;
  value = v;
  return true;
}

} // namespace

int main(int argc, char **argv) {
  tools::ExecArgs args;
  args.options.backend = "cuda-local";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
    if (arg == "--resident") {
      args.resident = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      if (!args.artifactPath.empty())
        return usageError("more than one artifact given");
      args.artifactPath = arg;
      continue;
    }
    // --name=value or --name value.
    std::string name = arg.substr(2), value;
    size_t eq = name.find('=');
    static const char *const kOptions[] = {
        "entry", "backend",   "inputs", "expect",  "outputs", "ranks",
        "seed",  "int-range", "repeat", "timeout", "rtol",    "atol"};
    if (std::find(std::begin(kOptions), std::end(kOptions),
                  name.substr(0, eq)) == std::end(kOptions))
      return usageError("unknown option --" + name.substr(0, eq));
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return usageError("--" + name + " needs a value");
    }
    int64_t number = 0;
    if (name == "entry") {
      args.options.entry = value;
    } else if (name == "backend") {
      args.options.backend = value;
    } else if (name == "inputs" || name == "expect") {
      std::vector<std::string> &files =
          name == "inputs" ? args.options.inputs : args.expected;
      for (size_t pos = 0; pos <= value.size();) {
        size_t comma = std::min(value.find(',', pos), value.size());
        if (comma > pos)
          files.push_back(value.substr(pos, comma - pos));
        pos = comma + 1;
      }
    } else if (name == "outputs") {
      args.outDir = value;
    } else if (name == "ranks" || name == "seed" || name == "int-range" ||
               name == "repeat") {
      if (!parseInt(value, number) || number < 0 ||
          (name == "repeat" && number == 0))
        return usageError("--" + name + " takes a whole number, not '" + value +
                          "'");
      if (name == "repeat")
        args.repeat = number;
      else if (name == "ranks")
        args.options.ranks = number;
      else if (name == "seed")
        args.options.seed = static_cast<uint64_t>(number);
      else
        args.options.intRange = number;
    } else if (name == "timeout" || name == "rtol" || name == "atol") {
      char *end = nullptr;
      double x = std::strtod(value.c_str(), &end);
      if (value.empty() || *end || x < 0 || (name == "timeout" && x == 0))
        return usageError("--" + name + " takes a positive number, not '" +
                          value + "'");
      (name == "timeout" ? args.options.timeout
       : name == "rtol"  ? args.rtol
                         : args.atol) = x;
    } else {
      return usageError("unknown option --" + name);
    }
  }
  if (args.artifactPath.empty())
    return usageError("no artifact given");
  return tools::runExecutor(args, "shardx-gpu-exec", /*finalizeMpi=*/false);
}
