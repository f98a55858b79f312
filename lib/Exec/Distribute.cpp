//===- Distribute.cpp - Global tensors to shards and back -----------------===//
//
// Part of ShardX.
//
// scatter() and assemble(): the executor's host-side meaning of a layout
// (what each rank holds, and how pending Partials reduce).
//
//===----------------------------------------------------------------------===//

#include "Elements.h"
#include "shardx/Exec/Executor.h"

#include <cstring>
#include <map>

using namespace shardx;
using namespace shardx::exec;
using namespace shardx::exec::detail;

int64_t HostTensor::numElements() const {
  int64_t n = 1;
  for (int64_t s : shape)
    n *= s;
  return n;
}


namespace {

/// Per dim, the global indices a shard holds, in local order.
std::vector<std::vector<int64_t>> globalIndices(const LocalShard &shard) {
  std::vector<std::vector<int64_t>> idx(shard.runs.size());
  for (size_t d = 0; d < shard.runs.size(); ++d)
    for (const Interval &r : shard.runs[d])
      for (int64_t i = 0; i < r.size; ++i)
        idx[d].push_back(r.offset + i);
  return idx;
}

/// Calls fn(localLinear, globalLinear) for every element of a shard.
template <typename Fn>
void forEachElement(const std::vector<std::vector<int64_t>> &idx,
                    const std::vector<int64_t> &globalShape, Fn fn) {
  size_t rank = globalShape.size();
  std::vector<int64_t> strides(rank, 1);
  for (int64_t d = static_cast<int64_t>(rank) - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * globalShape[d + 1];
  for (const auto &v : idx)
    if (v.empty())
      return;
  std::vector<size_t> i(rank, 0);
  int64_t local = 0;
  while (true) {
    int64_t g = 0;
    for (size_t d = 0; d < rank; ++d)
      g += idx[d][i[d]] * strides[d];
    fn(local++, g);
    int64_t d = static_cast<int64_t>(rank) - 1;
    for (; d >= 0; --d) {
      if (++i[d] < idx[d].size())
        break;
      i[d] = 0;
    }
    if (d < 0)
      return;
  }
}

} // namespace

HostTensor shardx::exec::scatter(const HostTensor &global,
                                 const TensorSpec &spec,
                                 const std::vector<int64_t> &meshShape,
                                 const std::vector<int64_t> &coords) {
  if (!spec.layout)
    return global;
  LocalShard shard =
      spec.layout->getLocalShard(meshShape, global.shape, coords);
  HostTensor local;
  local.shape = shard.shape;
  local.dtype = global.dtype;
  size_t es = global.elementSize();
  local.data.resize(local.numElements() * es);
  forEachElement(globalIndices(shard), global.shape, [&](int64_t l, int64_t g) {
    std::memcpy(local.data.data() + l * es, global.data.data() + g * es, es);
  });
  // Partial inputs: one term holds the value, the others the identity.
  for (size_t a = 0; a < spec.layout->getPartials().size(); ++a) {
    const auto &p = spec.layout->getPartials()[a];
    if (!p || coords[a] == 0)
      continue;
    if (*p == ReduceOp::Sum || *p == ReduceOp::Prod)
      for (int64_t n = 0; n < local.numElements(); ++n)
        storeFromDouble(local.data.data() + n * es, reduceIdentity<double>(*p),
                        local.dtype);
  }
  return local;
}

/// Whether assemble() reads rank `coords`'s shard: coordinate 0 on the
/// replicated axes (the others hold copies).
static bool readsRank(const Layout &layout, const std::vector<int64_t> &coords) {
  for (size_t a = 0; a < coords.size(); ++a)
    if (!layout.getPartials()[a] && layout.getShardedDim(a) < 0 &&
        coords[a] != 0)
      return false;
  return true;
}

/// assemble() of a layout that is Partial with different ops on several
/// axes: the terms nest in mesh order (axis 0 outermost), so the axes are
/// reduced innermost first, each over the ranks that differ only in its
/// coordinate (which hold the same shard).
static HostTensor
assembleNestedPartials(const std::vector<HostTensor> &locals,
                       const TensorSpec &spec,
                       const std::vector<int64_t> &meshShape) {
  const Layout &layout = *spec.layout;
  HostTensor global;
  global.shape = spec.globalShape;
  global.dtype = spec.dtype;
  size_t es = global.elementSize();
  global.data.resize(global.numElements() * es);
  // Per kept rank (coordinate 0 on replicated axes): its values, in the
  // order of its shard's global indices.
  std::map<std::vector<int64_t>, std::vector<double>> terms;
  std::map<std::vector<int64_t>, std::vector<int64_t>> indices;
  std::vector<std::vector<int64_t>> coords = allMeshCoords(meshShape);
  for (size_t r = 0; r < coords.size(); ++r) {
    if (!readsRank(layout, coords[r]))
      continue;
    LocalShard shard = layout.getLocalShard(meshShape, global.shape, coords[r]);
    std::vector<double> &values = terms[coords[r]];
    std::vector<int64_t> &where = indices[coords[r]];
    const HostTensor &local = locals.at(r);
    forEachElement(globalIndices(shard), global.shape,
                   [&](int64_t l, int64_t g) {
                     values.push_back(
                         loadAsDouble(local.data.data() + l * es, local.dtype));
                     where.push_back(g);
                   });
  }
  for (int64_t a = static_cast<int64_t>(meshShape.size()) - 1; a >= 0; --a) {
    const std::optional<ReduceOp> &op = layout.getPartials()[a];
    if (!op)
      continue;
    std::map<std::vector<int64_t>, std::vector<double>> reduced;
    for (auto &[key, values] : terms) {
      std::vector<int64_t> outer = key;
      outer[a] = 0;
      auto [it, fresh] = reduced.try_emplace(outer, values);
      if (!fresh)
        for (size_t i = 0; i < values.size(); ++i)
          reduceInto(it->second[i], values[i], *op);
    }
    if (*op == ReduceOp::Avg)
      for (auto &[key, values] : reduced)
        for (double &v : values)
          v /= static_cast<double>(meshShape[a]);
    terms = std::move(reduced);
  }
  for (const auto &[key, values] : terms) {
    const std::vector<int64_t> &where = indices.at(key);
    for (size_t i = 0; i < values.size(); ++i)
      storeFromDouble(global.data.data() + where[i] * es, values[i],
                      global.dtype);
  }
  return global;
}

HostTensor shardx::exec::assemble(const std::vector<HostTensor> &locals,
                                  const TensorSpec &spec,
                                  const std::vector<int64_t> &meshShape,
                                  std::string &error) {
  if (!spec.layout)
    return locals.at(0);
  HostTensor global;
  global.shape = spec.globalShape;
  global.dtype = spec.dtype;
  size_t es = global.elementSize();
  global.data.resize(global.numElements() * es);
  const Layout &layout = *spec.layout;
  std::optional<ReduceOp> op;
  for (const auto &p : layout.getPartials()) {
    if (!p)
      continue;
    if (op && *op != *p)
      return assembleNestedPartials(locals, spec, meshShape);
    op = p;
  }
  std::vector<double> acc;
  if (op)
    acc.assign(global.numElements(), reduceIdentity<double>(*op));
  std::vector<std::vector<int64_t>> coords = allMeshCoords(meshShape);
  int64_t partialCount = 1;
  for (size_t a = 0; a < meshShape.size(); ++a)
    if (layout.getPartials()[a])
      partialCount *= meshShape[a];
  for (size_t r = 0; r < coords.size(); ++r) {
    if (!readsRank(layout, coords[r]))
      continue;
    LocalShard shard = layout.getLocalShard(meshShape, global.shape, coords[r]);
    const HostTensor &local = locals.at(r);
    forEachElement(globalIndices(shard), global.shape,
                   [&](int64_t l, int64_t g) {
                     if (!op) {
                       std::memcpy(global.data.data() + g * es,
                                   local.data.data() + l * es, es);
                       return;
                     }
                     double v = loadAsDouble(local.data.data() + l * es,
                                             local.dtype);
                     reduceInto(acc[g], v, *op);
                   });
  }
  if (op)
    for (int64_t g = 0; g < global.numElements(); ++g)
      storeFromDouble(global.data.data() + g * es,
                      *op == ReduceOp::Avg ? acc[g] / partialCount : acc[g],
                      global.dtype);
  return global;
}
