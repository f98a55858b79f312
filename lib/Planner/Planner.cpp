//===- Planner.cpp - Reshard planning as a shortest path ------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Planner/Planner.h"

#include "Search.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <map>
#include <queue>
#include <unordered_map>

namespace shardx {

const char *stringifyStepKind(Step::Kind kind) {
  switch (kind) {
  case Step::Kind::AllGather:
    return "all_gather";
  case Step::Kind::ReduceScatter:
    return "reduce_scatter";
  case Step::Kind::AllReduce:
    return "all_reduce";
  case Step::Kind::AllToAll:
    return "all_to_all";
  case Step::Kind::Chunk:
    return "chunk";
  case Step::Kind::PartitionValue:
    return "partition_value";
  case Step::Kind::Rescale:
    return "rescale";
  case Step::Kind::Permute:
    return "permute";
  }
  return "?";
}

static std::string listStr(const std::vector<int64_t> &v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string Step::str() const {
  std::string s =
      std::string(stringifyStepKind(kind)) + "(axes = " + listStr(axes);
  switch (kind) {
  case Kind::AllGather:
  case Kind::Chunk:
    s += ", dim = " + std::to_string(dim);
    break;
  case Kind::ReduceScatter:
    s += ", dim = " + std::to_string(dim) + ", " + stringifyReduceOp(reduce);
    break;
  case Kind::AllReduce:
  case Kind::PartitionValue:
    s += std::string(", ") + stringifyReduceOp(reduce);
    break;
  case Kind::AllToAll:
    s += ", split_dim = " + std::to_string(splitDim) +
         ", concat_dim = " + std::to_string(dim);
    break;
  case Kind::Rescale:
    s += ", scale = " + std::to_string(scale);
    break;
  case Kind::Permute: {
    s += ", pairs = [";
    for (size_t i = 0; i < pairs.size(); ++i)
      s += (i ? ", " : "") + std::to_string(pairs[i].first) + "->" +
           std::to_string(pairs[i].second);
    s += "]";
    break;
  }
  }
  if (outer != 1)
    s += ", outer = " + std::to_string(outer);
  if (kind == Kind::AllToAll && splitOuter != 1)
    s += ", split_outer = " + std::to_string(splitOuter);
  if (!sizes.empty())
    s += ", sizes = " + listStr(sizes);
  return s + ")";
}

int64_t Plan::numCollectives() const {
  return std::count_if(steps.begin(), steps.end(),
                       [](const Step &s) { return s.isCollective(); });
}

double lowerBoundBytes(Step::Kind kind, int64_t n, double bytes) {
  double f = static_cast<double>(n - 1) / n;
  switch (kind) {
  case Step::Kind::AllGather:
  case Step::Kind::ReduceScatter:
    return f * bytes;
  case Step::Kind::AllReduce:
    return 2 * f * bytes;
  case Step::Kind::AllToAll:
    return f * bytes / n;
  default:
    return 0;
  }
}

using planner::Key;
using planner::appendKey;

//===----------------------------------------------------------------------===//
// Planner: the plan cache and the checks before a search
//===----------------------------------------------------------------------===//

struct Planner::Impl {
  std::unordered_map<Key, Plan, planner::KeyHash> cache;
  /// The error of every failed plan.
  std::unordered_map<Key, std::string, planner::KeyHash> failures;
};

Planner::Planner(MeshSpec mesh) : mesh(std::move(mesh)), impl(new Impl) {}
Planner::~Planner() = default;
Planner::Planner(Planner &&) = default;
Planner &Planner::operator=(Planner &&) = default;

void Planner::clearCache() {
  impl->cache.clear();
  impl->failures.clear();
  cacheHits = cacheMisses = 0;
}

std::string Planner::checkMesh(const MeshSpec &mesh) {
  if (mesh.shape.empty())
    return "the mesh has no axis";
  if (static_cast<int64_t>(mesh.shape.size()) > kMaxPlannerMeshRank)
    return "the mesh has " + std::to_string(mesh.shape.size()) +
           " axes; the planner handles at most " +
           std::to_string(kMaxPlannerMeshRank);
  if (!mesh.costs.empty() && mesh.costs.size() != mesh.shape.size())
    return "the mesh has " + std::to_string(mesh.costs.size()) +
           " axis costs for " + std::to_string(mesh.shape.size()) + " axes";
  int64_t devices = 1;
  for (size_t a = 0; a < mesh.shape.size(); ++a) {
    int64_t n = mesh.shape[a];
    if (n < 1)
      return "mesh axis " + std::to_string(a) + " has size " +
             std::to_string(n);
    if (n > kMaxPlannerDevices / devices)
      return "the mesh has more than " + std::to_string(kMaxPlannerDevices) +
             " devices, the most the planner enumerates";
    devices *= n;
  }
  return "";
}

const Plan *Planner::plan(const Layout &src, const Layout &dst,
                          const std::vector<int64_t> &shape,
                          int64_t elementBytes, std::string &error) {
  Key key;
  key.reserve(64);
  appendKey(key, src);
  appendKey(key, dst);
  key.insert(key.end(), shape.begin(), shape.end());
  key.push_back(elementBytes);
  auto it = impl->cache.find(key);
  if (it != impl->cache.end()) {
    ++cacheHits;
    return &it->second;
  }
  // Failures are cached too: a search that exceeds its limits is the most
  // expensive one, and propagation asks for the same reshards many times.
  auto failed = impl->failures.find(key);
  if (failed != impl->failures.end()) {
    ++cacheHits;
    error = failed->second;
    return nullptr;
  }
  ++cacheMisses;
  auto fail = [&](const std::string &reason) -> const Plan * {
    error = "Cannot reshard: " + src.str() + " -> " + dst.str() + ": " + reason;
    impl->failures.emplace(std::move(key), error);
    return nullptr;
  };
  if (std::string e = checkMesh(mesh); !e.empty())
    return fail(e);
  if (src.getMeshRank() != dst.getMeshRank())
    return fail("the layouts are on meshes of different rank");
  if (static_cast<size_t>(src.getMeshRank()) != mesh.shape.size())
    return fail("the layouts have " + std::to_string(src.getMeshRank()) +
                " placements but the mesh has " +
                std::to_string(mesh.shape.size()) + " axes");
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] < 0)
      return fail("dim " + std::to_string(d) + " of the tensor has no static "
                  "size");
  if (std::string e = src.verifyForShape(mesh.shape, shape); !e.empty())
    return fail("the source layout is invalid: " + e);
  if (std::string e = dst.verifyForShape(mesh.shape, shape); !e.empty())
    return fail("the target layout is invalid: " + e);
  // Every rank's shard of a strided dim is enumerated block by block.
  for (const Layout *l : {&src, &dst})
    for (const DimSharding &ds : l->getDims())
      if (ds.splits.back().stride > kMaxSearchWork)
        return fail("dim " + std::to_string(ds.dim) + " has stride " +
                    std::to_string(ds.splits.back().stride) +
                    "; the planner enumerates at most " +
                    std::to_string(kMaxSearchWork) + " blocks");
  if (elementBytes <= 0)
    return fail("element size must be positive");
  // The search prices bytes as int64 (and sums them over steps): a tensor
  // of 2^63 bytes or more would overflow them and leave it unbounded.
  int64_t bytes = elementBytes;
  for (int64_t size : shape)
    if (__builtin_mul_overflow(bytes, size, &bytes))
      return fail("the tensor has 2^63 bytes or more");
  planner::Search search(mesh, dst, shape, elementBytes);
  std::string reason;
  std::optional<Plan> plan = search.run(src, reason);
  if (!plan)
    return fail(reason);
  return &impl->cache.emplace(std::move(key), std::move(*plan)).first->second;
}

} // namespace shardx