//===- JitCallBench.cpp - Steps of an artifact on resident shards from C++ ===//
//
// Part of ShardX.
//
// The C++ baseline of bench/jit_bench.py: runs an entry point of an artifact
// for N steps on a Session (persistent rank threads) with resident inputs,
// feeding outputs back as inputs, donated (`--feed OUT:IN,...`, what
// shardx.compile's donation does), and prints the time per step. The inputs are
// random
// (--seed) and stay on the ranks; nothing is gathered.
//
// Usage: shardx-jit-call-bench model.so [--steps N] [--warmup N]
//                              [--feed OUT:IN,...] [--seed S]
//
//===----------------------------------------------------------------------===//

#include "shardx/Exec/Session.h"

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

using namespace shardx;
using namespace shardx::exec;

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s model.so [--steps N] [--warmup N] "
                 "[--feed OUT:IN,...] [--seed S]\n",
                 argv[0]);
    return 2;
  }
  std::string path = argv[1];
  int steps = 1000, warmup = 50;
  uint64_t seed = 0;
  std::vector<std::pair<size_t, size_t>> feed;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string opt = argv[i], val = argv[i + 1];
    if (opt == "--steps") {
      steps = std::atoi(val.c_str());
    } else if (opt == "--warmup") {
      warmup = std::atoi(val.c_str());
    } else if (opt == "--seed") {
      seed = std::strtoull(val.c_str(), nullptr, 10);
    } else if (opt == "--feed") {
      size_t pos = 0;
      while (pos < val.size()) {
        size_t comma = val.find(',', pos);
        std::string pair = val.substr(pos, comma - pos);
        size_t colon = pair.find(':');
        feed.emplace_back(std::stoul(pair.substr(0, colon)),
                          std::stoul(pair.substr(colon + 1)));
        pos = comma == std::string::npos ? val.size() : comma + 1;
      }
    } else {
      std::fprintf(stderr, "unknown option %s\n", opt.c_str());
      return 2;
    }
  }
  std::string error;
  std::unique_ptr<Artifact> artifact = Artifact::load(path, error);
  if (!artifact) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  const EntryPoint &entry = artifact->getEntryPoints().front();
  Session session(artifact->getMeshShape());
  std::vector<ShardSet> inputs;
  for (size_t i = 0; i < entry.inputs.size(); ++i) {
    const TensorSpec &spec = entry.inputs[i];
    HostTensor global = randomTensor(spec.globalShape, spec.dtype, seed + i, 4,
                                     InputDomain::NonNegative);
    inputs.push_back(
        scatterShards(global, spec.layout, artifact->getMeshShape()));
  }
  std::vector<ShardSet> outputs;
  // Fed-back outputs are donated: they reuse their inputs' buffers.
  std::vector<int64_t> donatedInputOf(entry.outputs.size(), -1);
  for (auto [out, in] : feed)
    donatedInputOf.at(out) = static_cast<int64_t>(in);
  auto step = [&] {
    std::vector<ShardSet *> ptrs;
    for (ShardSet &s : inputs)
      ptrs.push_back(&s);
    rt::Status s = session.run(*artifact, entry, ptrs, outputs, donatedInputOf);
    if (!s) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      std::exit(1);
    }
    for (auto [out, in] : feed)
      inputs.at(in) = std::move(outputs.at(out));
  };
  for (int i = 0; i < warmup; ++i)
    step();
  auto threadSeconds = [] {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
  };
  double cpuStart = threadSeconds();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i)
    step();
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  // The calling thread's own CPU time (the Python side measures the same).
  double cpu = threadSeconds() - cpuStart;
  std::printf("steps %d\nper_step_us %.3f\ncaller_cpu_us %.3f\n", steps,
              seconds / steps * 1e6, cpu / steps * 1e6);
  return 0;
}
