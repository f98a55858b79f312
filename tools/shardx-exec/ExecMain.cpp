//===- ExecMain.cpp - The command line of shardx-exec ---------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "ExecCommon.h"

#include "llvm/Support/CommandLine.h"

using namespace shardx;

namespace {
namespace cl = llvm::cl;
} // namespace

int tools::execMain(int argc, char **argv) {
  cl::OptionCategory toolOptions("shardx-exec options");
  cl::opt<std::string> artifactPath(cl::cat(toolOptions), cl::Positional,
                                    cl::desc("<model.so>"), cl::Required);
  cl::opt<std::string> entryName(cl::cat(toolOptions), "entry",
                                 cl::desc("entry point (default: the first)"));
  cl::opt<std::string> backend(cl::cat(toolOptions), "backend",
                               cl::desc("threads (default) or mpi"),
                               cl::init("threads"));
  cl::opt<int64_t> ranks(cl::cat(toolOptions), "ranks",
                         cl::desc("number of ranks (the mesh size)"),
                         cl::init(0));
  cl::list<std::string> inputFiles(cl::cat(toolOptions), "inputs",
                                   cl::CommaSeparated,
                                   cl::desc("global inputs as .npy files"));
  cl::opt<uint64_t> seed(cl::cat(toolOptions), "seed",
                         cl::desc("seed of random inputs"), cl::init(0));
  cl::opt<int64_t> intRange(cl::cat(toolOptions), "int-range",
                            cl::desc("random integers are in [0, N)"),
                            cl::init(2));
  cl::opt<std::string> outDir(cl::cat(toolOptions), "outputs",
                              cl::desc("directory for the outputs"));
  cl::opt<double> timeout(cl::cat(toolOptions), "timeout",
                          cl::desc("collective timeout (s)"), cl::init(60));
  cl::list<std::string> expected(
      cl::cat(toolOptions), "expect", cl::CommaSeparated,
      cl::desc("reference outputs as .npy files: compare and fail on a "
               "mismatch"));
  cl::opt<double> rtol(cl::cat(toolOptions), "rtol",
                       cl::desc("relative tolerance of --expect on float "
                                "outputs (default: f32 1e-4, f64 1e-10)"),
                       cl::init(-1));
  cl::opt<double> atol(cl::cat(toolOptions), "atol",
                       cl::desc("absolute tolerance of --expect on float "
                                "outputs (default: f32 1e-5, f64 1e-12)"),
                       cl::init(-1));
  bool wantMpi = false;
  if (!initMpiIfRequested(argc, argv, "shardx-exec", wantMpi))
    return 1;
  cl::HideUnrelatedOptions(toolOptions);
  cl::ParseCommandLineOptions(argc, argv, "ShardX executor\n");
  ExecArgs args;
  args.artifactPath = artifactPath;
  args.outDir = outDir;
  args.options.entry = entryName;
  args.options.backend = backend;
  args.options.ranks = ranks;
  args.options.inputs.assign(inputFiles.begin(), inputFiles.end());
  args.options.seed = seed;
  args.options.intRange = intRange;
  args.options.timeout = timeout;
  args.expected.assign(expected.begin(), expected.end());
  args.rtol = rtol;
  args.atol = atol;
  return runExecutor(args, "shardx-exec", wantMpi);
}
