//===- Exchange.cpp - One reshard step driven by its layouts --------------===//
//
// Part of ShardX.
//
// Who sends what: the group's axes fall into three sets. `split` axes shard
// some dim under the source (members that differ there hold disjoint
// pieces), `reduced` axes are Partial under the source and not under the
// target (members that differ there hold terms to combine), and the `rest`
// (replicated under the source, or Partial in both) must match: member j
// sends to member i exactly when they agree on the rest, the elements of
// j's source shard that lie in i's target shard. Each dim's shards are
// sorted runs of global indices, so the elements two shards share are the
// product, over dims, of the indices the two have in common.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Exchange.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

namespace shardx::rt {

namespace {

/// The global indices of one dim that a shard holds, in local order.
std::vector<int64_t> indices(const std::vector<Interval> &runs) {
  std::vector<int64_t> out;
  for (const Interval &r : runs)
    for (int64_t i = 0; i < r.size; ++i)
      out.push_back(r.offset + i);
  return out;
}

/// The positions, in `a` and in `b`, of the indices the two share.
void intersect(const std::vector<int64_t> &a, const std::vector<int64_t> &b,
               std::vector<int64_t> &posA, std::vector<int64_t> &posB) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] < b[j]) {
      ++i;
    } else if (b[j] < a[i]) {
      ++j;
    } else {
      posA.push_back(static_cast<int64_t>(i++));
      posB.push_back(static_cast<int64_t>(j++));
    }
  }
}

/// Calls `fn(offset)` for the row-major offsets, in a tensor of `shape`, of
/// the product of the per-dim position lists `pos`, in row-major order.
template <typename Fn>
void forEachOffset(const std::vector<int64_t> &shape,
                   const std::vector<std::vector<int64_t>> &pos, Fn fn) {
  size_t rank = shape.size();
  for (const auto &p : pos)
    if (p.empty())
      return;
  std::vector<int64_t> strides(rank, 1);
  for (size_t d = rank; d-- > 1;)
    strides[d - 1] = strides[d] * shape[d];
  std::vector<size_t> it(rank, 0);
  while (true) {
    int64_t offset = 0;
    for (size_t d = 0; d < rank; ++d)
      offset += pos[d][it[d]] * strides[d];
    fn(offset);
    size_t d = rank;
    while (d > 0) {
      --d;
      if (++it[d] < pos[d].size())
        break;
      it[d] = 0;
      if (d == 0)
        return;
    }
    if (rank == 0)
      return;
  }
}

int64_t product(const std::vector<int64_t> &v) {
  int64_t p = 1;
  for (int64_t x : v)
    p *= x;
  return p;
}


struct Member {
  int64_t index;               // in the group
  std::vector<int64_t> coords; // on the mesh
};

/// The roles of the mesh axes in one exchange step: `rest` are the group's
/// axes that split nothing in the source and reduce nothing (the members
/// along them hold the same data), `reduced` the group's Partial axes the
/// target drops, all with `reduceOp`.
struct AxisRoles {
  std::vector<int64_t> rest, reduced;
  std::optional<ReduceOp> reduceOp;
};

/// Classifies the mesh axes; "" or why the step is not one exchange.
std::string classifyAxes(const Layout &source, const Layout &target,
                         const std::vector<int64_t> &axes, size_t meshRank,
                         AxisRoles &roles) {
  std::vector<bool> inGroup(meshRank, false);
  for (int64_t a : axes)
    inGroup[a] = true;
  for (size_t a = 0; a < meshRank; ++a) {
    const auto &ps = source.getPartials()[a], &pt = target.getPartials()[a];
    if (!inGroup[a]) {
      if (ps != pt)
        return "the Partial of mesh axis " + std::to_string(a) +
               " outside the group changes";
      continue;
    }
    if (pt && ps != pt)
      return "a step cannot create the Partial of mesh axis " +
             std::to_string(a);
    if (ps && !pt) {
      if (roles.reduceOp && *roles.reduceOp != *ps)
        return "the reduced axes have different Partial ops";
      roles.reduceOp = *ps;
      roles.reduced.push_back(static_cast<int64_t>(a));
    } else if (source.getShardedDim(static_cast<int64_t>(a)) < 0) {
      roles.rest.push_back(static_cast<int64_t>(a));
    }
  }
  return "";
}

/// The members of this rank's group over `axes`, in group order.
std::vector<Member> groupMembers(Communicator &comm,
                                 const std::vector<int64_t> &axes) {
  const std::vector<int64_t> &mesh = comm.getMeshShape();
  std::vector<Member> members;
  for (int64_t rank : comm.getGroup(axes)) {
    Member m{static_cast<int64_t>(members.size()), {}};
    int64_t r = rank;
    m.coords.assign(mesh.size(), 0);
    for (size_t d = mesh.size(); d-- > 0;) {
      m.coords[d] = r % mesh[d];
      r /= mesh[d];
    }
    members.push_back(std::move(m));
  }
  return members;
}

template <typename T>
Status exchangeTyped(Communicator &comm, const T *in, T *out, DType type,
                     const std::vector<int64_t> &shape, const Layout &source,
                     const Layout &target, const std::vector<int64_t> &axes) {
  const std::vector<int64_t> &mesh = comm.getMeshShape();
  const std::vector<int64_t> &me = comm.getCoords();
  auto fail = [&](const std::string &why) {
    return Status::error("exchange " + source.str() + " -> " + target.str() +
                         " on rank " + std::to_string(comm.getRank()) + ": " +
                         why);
  };
  if (source.getMeshRank() != static_cast<int64_t>(mesh.size()) ||
      target.getMeshRank() != static_cast<int64_t>(mesh.size()))
    return fail("the layouts are for another mesh rank");
  std::string bad = source.verifyForShape(mesh, shape);
  if (bad.empty())
    bad = target.verifyForShape(mesh, shape);
  if (!bad.empty())
    return fail(bad);

  AxisRoles roles;
  if (std::string why = classifyAxes(source, target, axes, mesh.size(), roles);
      !why.empty())
    return fail(why);
  const std::vector<int64_t> &rest = roles.rest, &reduced = roles.reduced;
  const std::optional<ReduceOp> &reduceOp = roles.reduceOp;

  std::vector<Member> members = groupMembers(comm, axes);
  auto agreeOnRest = [&](const std::vector<int64_t> &a,
                         const std::vector<int64_t> &b) {
    return std::all_of(rest.begin(), rest.end(),
                       [&](int64_t x) { return a[x] == b[x]; });
  };
  auto perDim = [&](const LocalShard &s) {
    std::vector<std::vector<int64_t>> out;
    for (const auto &runs : s.runs)
      out.push_back(indices(runs));
    return out;
  };
  size_t rank = shape.size();
  LocalShard mySource = source.getLocalShard(mesh, shape, me);
  LocalShard myTarget = target.getLocalShard(mesh, shape, me);
  auto mySourceIdx = perDim(mySource), myTargetIdx = perDim(myTarget);

  // Pack what each member needs from this rank; note what it sends here.
  std::vector<T> send;
  std::vector<size_t> sendCounts(members.size(), 0),
      recvCounts(members.size(), 0);
  std::vector<std::vector<std::vector<int64_t>>> recvPos(members.size());
  for (const Member &m : members) {
    if (!agreeOnRest(m.coords, me))
      continue;
    // To m: my source shard within m's target shard.
    auto theirTarget = perDim(target.getLocalShard(mesh, shape, m.coords));
    std::vector<std::vector<int64_t>> mine(rank), unused(rank);
    for (size_t d = 0; d < rank; ++d)
      intersect(mySourceIdx[d], theirTarget[d], mine[d], unused[d]);
    size_t before = send.size();
    forEachOffset(mySource.shape, mine,
                  [&](int64_t off) { send.push_back(in[off]); });
    sendCounts[m.index] = send.size() - before;
    // From m: its source shard within my target shard.
    auto theirSource = perDim(source.getLocalShard(mesh, shape, m.coords));
    std::vector<std::vector<int64_t>> theirs(rank), here(rank);
    for (size_t d = 0; d < rank; ++d)
      intersect(theirSource[d], myTargetIdx[d], theirs[d], here[d]);
    size_t count = 1;
    for (const auto &p : here)
      count *= p.size();
    recvCounts[m.index] = count;
    recvPos[m.index] = std::move(here);
  }
  size_t totalRecv = 0;
  for (size_t c : recvCounts)
    totalRecv += c;
  std::vector<T> recv(totalRecv);
  // Every member of the group computes the same classification, so they
  // agree on whether any data moves between two members.
  bool moves = rest.size() < axes.size();
  if (moves) {
    if (Status s = comm.allToAll(send.data(), sendCounts, recv.data(),
                                 recvCounts, type, axes);
        !s)
      return s;
  } else {
    recv = send; // Only this rank's own elements: a local step.
  }

  // Unpack (or reduce) into the target shard.
  int64_t terms = 1;
  for (int64_t a : reduced)
    terms *= mesh[a];
  int64_t outCount = product(myTarget.shape);
  if (reduceOp)
    std::fill(out, out + outCount, reduceIdentity<T>(*reduceOp));
  size_t pos = 0;
  int64_t written = 0;
  for (const Member &m : members) {
    if (!agreeOnRest(m.coords, me))
      continue;
    forEachOffset(myTarget.shape, recvPos[m.index], [&](int64_t off) {
      if (reduceOp)
        reduceInto(out[off], recv[pos], *reduceOp);
      else
        out[off] = recv[pos];
      ++pos;
      ++written;
    });
  }
  if (written != outCount * terms)
    return fail("the group holds " + std::to_string(written) + " of the " +
                std::to_string(outCount * terms) +
                " elements this rank needs (the step needs ranks outside "
                "its group)");
  if (reduceOp == ReduceOp::Avg)
    divideBy(out, static_cast<size_t>(outCount), type, terms);
  return Status::ok();
}

} // namespace

namespace {
/// exchange on bf16/f16: in f32 (a reduction of pieces accumulates in f32),
/// rounded once.
Status exchangeHalf(Communicator &comm, const void *in, void *out, DType type,
                    const std::vector<int64_t> &globalShape,
                    const Layout &source, const Layout &target,
                    const std::vector<int64_t> &axes) {
  auto elements = [&](const Layout &l) {
    size_t n = 1;
    for (int64_t d :
         l.getLocalShard(comm.getMeshShape(), globalShape, comm.getCoords())
             .shape)
      n *= static_cast<size_t>(d);
    return n;
  };
  std::vector<float> wideIn(elements(source) + 1),
      wideOut(elements(target) + 1);
  widenToF32(wideIn.data(), in, wideIn.size() - 1, type);
  if (Status s = exchangeTyped(comm, wideIn.data(), wideOut.data(), DType::F32,
                               globalShape, source, target, axes);
      !s)
    return s;
  narrowFromF32(out, wideOut.data(), wideOut.size() - 1, type);
  return Status::ok();
}
} // namespace

Status exchange(Communicator &comm, const void *in, void *out, DType type,
                const std::vector<int64_t> &globalShape, const Layout &source,
                const Layout &target, const std::vector<int64_t> &axes) {
  if (Status s = comm.checkAxes(axes, "exchange"); !s)
    return s;
  switch (type) {
  case DType::F32:
    return exchangeTyped(comm, static_cast<const float *>(in),
                         static_cast<float *>(out), type, globalShape, source,
                         target, axes);
  case DType::F64:
    return exchangeTyped(comm, static_cast<const double *>(in),
                         static_cast<double *>(out), type, globalShape, source,
                         target, axes);
  case DType::I32:
    return exchangeTyped(comm, static_cast<const int32_t *>(in),
                         static_cast<int32_t *>(out), type, globalShape,
                         source, target, axes);
  case DType::I64:
    return exchangeTyped(comm, static_cast<const int64_t *>(in),
                         static_cast<int64_t *>(out), type, globalShape,
                         source, target, axes);
  case DType::BF16:
  case DType::F16:
    return exchangeHalf(comm, in, out, type, globalShape, source, target, axes);
  case DType::I16:
  case DType::I8:
  case DType::I1:
  case DType::Index:
    break;
  }
  return Status::error(std::string("exchange: ") + stringifyDType(type) +
                       " is not a collective type");
}

bool decodeExchange(const int64_t *data, size_t size,
                    std::vector<int64_t> &globalShape, Layout &source,
                    Layout &target, std::string &error) {
  if (size == 0 || data[0] < 0 || static_cast<size_t>(data[0]) + 1 > size) {
    error = "malformed exchange descriptor";
    return false;
  }
  globalShape.assign(data + 1, data + 1 + data[0]);
  size_t pos = 1 + static_cast<size_t>(data[0]);
  std::optional<Layout> s = Layout::decode(data, size, pos, error);
  if (!s)
    return false;
  std::optional<Layout> t = Layout::decode(data, size, pos, error);
  if (!t)
    return false;
  source = std::move(*s);
  target = std::move(*t);
  return true;
}

} // namespace shardx::rt
