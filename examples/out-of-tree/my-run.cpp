//===- my-run.cpp - Runs a ShardX artifact on threads ---------------------===//
//
// Loads an artifact of shardx-compile, scatters its inputs by the layouts
// the artifact describes, runs its first entry point on one thread per rank
// of its mesh, gathers the result and compares it with the unsharded
// product of the inputs: mlp.mlir computes (x * w1) * w2. Needs no MLIR or
// LLVM: only ShardX::ShardXExec.
//
//===----------------------------------------------------------------------===//

#include "shardx/Exec/Session.h"

#include <cmath>
#include <cstdio>
#include <cstring>

using namespace shardx::exec;

namespace {
/// A global f32 tensor of `shape` with entry i = (i % 7 - 3) / 4.
HostTensor makeInput(const std::vector<int64_t> &shape) {
  HostTensor t;
  t.shape = shape;
  t.dtype = shardx::rt::DType::F32;
  t.data.resize(t.numElements() * sizeof(float));
  float *p = reinterpret_cast<float *>(t.data.data());
  for (int64_t i = 0; i < t.numElements(); ++i)
    p[i] = static_cast<float>(i % 7 - 3) / 4.0f;
  return t;
}

/// c = a * b for row-major a (m x k) and b (k x n).
std::vector<double> matmul(const std::vector<double> &a,
                           const std::vector<double> &b, int64_t m,
                           int64_t k, int64_t n) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t l = 0; l < k; ++l)
      for (int64_t j = 0; j < n; ++j)
        c[i * n + j] += a[i * k + l] * b[l * n + j];
  return c;
}

std::vector<double> values(const HostTensor &t) {
  const float *p = reinterpret_cast<const float *>(t.data.data());
  return std::vector<double>(p, p + t.numElements());
}
} // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s model.so\n", argv[0]);
    return 2;
  }
  std::string error;
  std::unique_ptr<Artifact> artifact = Artifact::load(argv[1], error);
  if (!artifact) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  const EntryPoint &entry = artifact->getEntryPoints().front();
  if (entry.inputs.size() != 3 || entry.outputs.size() != 1) {
    std::fprintf(stderr, "expected @%s(x, w1, w2) -> y\n", entry.name.c_str());
    return 1;
  }
  // One thread per rank of the artifact's mesh.
  Session session(artifact->getMeshShape());
  std::vector<HostTensor> globals;
  std::vector<ShardSet> inputs;
  for (const TensorSpec &spec : entry.inputs) {
    globals.push_back(makeInput(spec.globalShape));
    inputs.push_back(session.scatter(globals.back(), spec.layout));
  }
  std::vector<const ShardSet *> inputPtrs;
  for (const ShardSet &s : inputs)
    inputPtrs.push_back(&s);
  std::vector<ShardSet> outputs;
  if (shardx::rt::Status s = session.run(*artifact, entry, inputPtrs, outputs);
      !s) {
    std::fprintf(stderr, "run failed: %s\n", s.message().c_str());
    return 1;
  }
  HostTensor y;
  if (shardx::rt::Status s = session.gather(outputs[0], y); !s) {
    std::fprintf(stderr, "gather failed: %s\n", s.message().c_str());
    return 1;
  }

  // The unsharded reference, in double.
  int64_t m = globals[0].shape[0], k = globals[0].shape[1],
          h = globals[1].shape[1], n = globals[2].shape[1];
  std::vector<double> ref =
      matmul(matmul(values(globals[0]), values(globals[1]), m, k, h),
             values(globals[2]), m, h, n);
  std::vector<double> got = values(y);
  if (got.size() != ref.size()) {
    std::printf("MISMATCH: %zu values, expected %zu\n", got.size(),
                ref.size());
    return 1;
  }
  // A NaN anywhere is a mismatch: no comparison with it is true.
  double maxErr = 0;
  bool nan = false;
  for (size_t i = 0; i < ref.size(); ++i) {
    double err =
        std::fabs(got[i] - ref[i]) / std::max(1.0, std::fabs(ref[i]));
    nan |= !(err == err);
    maxErr = std::max(maxErr, err);
  }
  std::printf("@%s on %lld ranks: y %lldx%lld, max rel error %.2e against "
              "the unsharded product\n",
              entry.name.c_str(), static_cast<long long>(session.getSize()),
              static_cast<long long>(y.shape[0]),
              static_cast<long long>(y.shape[1]), maxErr);
  if (nan || !(maxErr <= 1e-5)) {
    std::printf("MISMATCH\n");
    return 1;
  }
  std::printf("MATCH\n");
  return 0;
}
