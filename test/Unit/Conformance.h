//===- Conformance.h - Collective checks every backend must pass -*- C++ -*-//
//
// Part of ShardX.
//
// Each check runs on every rank of a world and returns an error when this
// rank's result differs from what the collective must produce. A backend's
// test binary runs all checks on several meshes (threads: in-process; mpi:
// under mpirun), each with its own list of skips and reasons.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_TEST_UNIT_CONFORMANCE_H
#define SHARDX_TEST_UNIT_CONFORMANCE_H

#include "shardx/Runtime/Communicator.h"
#include "shardx/Runtime/Exchange.h"
#include "shardx/Runtime/HalfFloat.h"

#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

namespace shardx::rt::conformance {

/// The axis groups every check runs over: each single axis, all axes, and
/// all axes in reverse order.
inline std::vector<std::vector<int64_t>> axisGroups(const Communicator &c) {
  int64_t rank = static_cast<int64_t>(c.getMeshShape().size());
  std::vector<std::vector<int64_t>> groups;
  for (int64_t a = 0; a < rank; ++a)
    groups.push_back({a});
  std::vector<int64_t> all(rank);
  std::iota(all.begin(), all.end(), 0);
  if (rank > 1) {
    groups.push_back(all);
    groups.push_back(std::vector<int64_t>(all.rbegin(), all.rend()));
  }
  return groups;
}

template <typename T> DType dtypeOf();
template <> inline DType dtypeOf<float>() { return DType::F32; }
template <> inline DType dtypeOf<double>() { return DType::F64; }
template <> inline DType dtypeOf<int32_t>() { return DType::I32; }
template <> inline DType dtypeOf<int64_t>() { return DType::I64; }

/// The value rank `r` contributes at element `k` (small, so sums and
/// products are exact).
template <typename T> T value(int64_t r, size_t k, ReduceOp op) {
  if (op == ReduceOp::Prod)
    return static_cast<T>(1 + (r + static_cast<int64_t>(k)) % 3);
  return static_cast<T>(r * 10 + static_cast<int64_t>(k % 7) - 20);
}

template <typename T>
T reduceValues(const std::vector<int64_t> &members, size_t k, ReduceOp op) {
  T acc = value<T>(members[0], k, op);
  for (size_t i = 1; i < members.size(); ++i) {
    T v = value<T>(members[i], k, op);
    switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      acc += v;
      break;
    case ReduceOp::Max:
      acc = std::max(acc, v);
      break;
    case ReduceOp::Min:
      acc = std::min(acc, v);
      break;
    case ReduceOp::Prod:
      acc *= v;
      break;
    }
  }
  if (op == ReduceOp::Avg)
    acc /= static_cast<T>(members.size());
  return acc;
}

inline Status fail(const Communicator &c, const std::string &what) {
  return Status::error("rank " + std::to_string(c.getRank()) + ": " + what);
}

template <typename T>
Status expectEqual(const Communicator &c, const std::string &what,
                   const std::vector<T> &got, const std::vector<T> &want) {
  if (got.size() != want.size())
    return fail(c, what + ": wrong size");
  for (size_t i = 0; i < got.size(); ++i) {
    double a = static_cast<double>(got[i]), b = static_cast<double>(want[i]);
    if (std::abs(a - b) > 1e-6 * std::max(1.0, std::abs(b)))
      return fail(c, what + ": element " + std::to_string(i) + " is " +
                         std::to_string(a) + ", expected " + std::to_string(b));
  }
  return Status::ok();
}

/// all_gather with even and uneven pieces (member i sends i + 1 elements).
template <typename T> Status checkAllGather(Communicator &c) {
  for (const auto &axes : axisGroups(c)) {
    std::vector<int64_t> members = c.getGroup(axes);
    for (bool uneven : {false, true}) {
      std::vector<size_t> counts;
      for (size_t i = 0; i < members.size(); ++i)
        counts.push_back(uneven ? i + 1 : 3);
      size_t me = static_cast<size_t>(c.getGroupIndex(axes));
      std::vector<T> send(counts[me]);
      for (size_t k = 0; k < send.size(); ++k)
        send[k] = value<T>(c.getRank(), k, ReduceOp::Sum);
      std::vector<T> recv(std::accumulate(counts.begin(), counts.end(),
                                          static_cast<size_t>(0)));
      if (Status s =
              c.allGather(send.data(), recv.data(), counts, dtypeOf<T>(), axes);
          !s)
        return s;
      std::vector<T> want;
      for (size_t i = 0; i < members.size(); ++i)
        for (size_t k = 0; k < counts[i]; ++k)
          want.push_back(value<T>(members[i], k, ReduceOp::Sum));
      if (Status s = expectEqual(c, "all_gather", recv, want); !s)
        return s;
    }
  }
  return Status::ok();
}

/// all_reduce and reduce_scatter (even and uneven) with every reduction.
template <typename T> Status checkReductions(Communicator &c) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max,
                      ReduceOp::Min, ReduceOp::Prod}) {
    // Integer averages truncate, so avg is checked on floats only.
    for (const auto &axes : axisGroups(c)) {
      std::vector<int64_t> members = c.getGroup(axes);
      size_t n = members.size();
      size_t total = 2 * n + 1;
      std::vector<T> send(total);
      for (size_t k = 0; k < total; ++k)
        send[k] = value<T>(c.getRank(), k, op);
      std::vector<T> want(total);
      for (size_t k = 0; k < total; ++k)
        want[k] = reduceValues<T>(members, k, op);
      bool exact = op != ReduceOp::Avg || std::is_floating_point<T>::value;
      std::vector<T> recv(total);
      if (Status s = c.allReduce(send.data(), recv.data(), total, dtypeOf<T>(),
                                 op, axes);
          !s)
        return s;
      if (exact)
        if (Status s = expectEqual(c, "all_reduce", recv, want); !s)
          return s;
      // Uneven pieces: member i keeps 2 elements, the last member 3.
      std::vector<size_t> counts(n, 2);
      counts.back() += 1;
      size_t me = static_cast<size_t>(c.getGroupIndex(axes));
      size_t offset = 2 * me;
      std::vector<T> piece(counts[me]);
      if (Status s = c.reduceScatter(send.data(), piece.data(), counts,
                                     dtypeOf<T>(), op, axes);
          !s)
        return s;
      if (exact)
        if (Status s =
                expectEqual(c, "reduce_scatter", piece,
                            std::vector<T>(want.begin() + offset,
                                           want.begin() + offset + counts[me]));
            !s)
          return s;
    }
  }
  return Status::ok();
}

/// Max and min propagate a NaN from any member, whatever its position in
/// the group (small and large messages, all_reduce and reduce_scatter).
template <typename T> Status checkNanMaxMin(Communicator &c) {
  for (size_t count : {size_t(5), size_t(200003)}) {
    for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
      for (const auto &axes : axisGroups(c)) {
        std::vector<int64_t> members = c.getGroup(axes);
        size_t n = members.size(), me = c.getGroupIndex(axes);
        // Element k is NaN on member k % n only.
        std::vector<T> send(count, T(me));
        for (size_t k = me; k < count; k += n)
          send[k] = std::numeric_limits<T>::quiet_NaN();
        std::vector<T> recv(count);
        if (Status s = c.allReduce(send.data(), recv.data(), count,
                                   dtypeOf<T>(), op, axes);
            !s)
          return s;
        for (size_t k = 0; k < count; ++k)
          if (recv[k] == recv[k])
            return fail(c, std::string("all_reduce ") + stringifyReduceOp(op) +
                               " dropped the NaN of element " +
                               std::to_string(k));
        std::vector<size_t> counts(n, count / n);
        counts.back() += count % n;
        std::vector<T> piece(counts[me]);
        if (Status s = c.reduceScatter(send.data(), piece.data(), counts,
                                       dtypeOf<T>(), op, axes);
            !s)
          return s;
        for (size_t k = 0; k < piece.size(); ++k)
          if (piece[k] == piece[k])
            return fail(c, std::string("reduce_scatter ") +
                               stringifyReduceOp(op) + " dropped a NaN");
      }
    }
  }
  return Status::ok();
}

/// bf16 and f16 sums and averages accumulate in f32 and round once: member
/// 0 gives 1 and every other member half a unit in the last place of 1 (a
/// tie), so summing in the 16-bit type pairwise would stay at 1 while the
/// f32 sum of 3 or more members rounds up (small and large messages,
/// all_reduce and reduce_scatter). all_gather keeps every bit.
inline Status checkHalfFloatSums(Communicator &c) {
  for (DType type : {DType::BF16, DType::F16}) {
    auto toBits = [&](float f) {
      return type == DType::BF16 ? floatToBf16(f) : floatToF16(f);
    };
    float halfUlp = type == DType::BF16 ? 0x1p-8f : 0x1p-11f;
    for (size_t count : {size_t(5), size_t(200003)}) {
      for (const auto &axes : axisGroups(c)) {
        size_t n = c.getGroup(axes).size(), me = c.getGroupIndex(axes);
        std::vector<uint16_t> send(count, toBits(me == 0 ? 1.0f : halfUlp));
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
          float sum = 1.0f + float(n - 1) * halfUlp;
          uint16_t want = toBits(op == ReduceOp::Avg ? sum / float(n) : sum);
          std::vector<uint16_t> recv(count);
          if (Status s =
                  c.allReduce(send.data(), recv.data(), count, type, op, axes);
              !s)
            return s;
          for (size_t k = 0; k < count; ++k)
            if (recv[k] != want)
              return fail(c, std::string("all_reduce ") +
                                 stringifyReduceOp(op) + " on " +
                                 stringifyDType(type) + ": element " +
                                 std::to_string(k) + " has bits " +
                                 std::to_string(recv[k]) + ", want " +
                                 std::to_string(want));
          std::vector<size_t> counts(n, count / n);
          counts.back() += count % n;
          std::vector<uint16_t> piece(counts[me] + 1);
          if (Status s = c.reduceScatter(send.data(), piece.data(), counts,
                                         type, op, axes);
              !s)
            return s;
          for (size_t k = 0; k < counts[me]; ++k)
            if (piece[k] != want)
              return fail(c, std::string("reduce_scatter ") +
                                 stringifyReduceOp(op) + " on " +
                                 stringifyDType(type) + " is off");
        }
        std::vector<uint16_t> mine(count, uint16_t(0x3c00 + me)),
            all(count * n + 1);
        if (Status s = c.allGather(mine.data(), all.data(),
                                   std::vector<size_t>(n, count), type, axes);
            !s)
          return s;
        for (size_t k = 0; k < count * n; ++k)
          if (all[k] != uint16_t(0x3c00 + k / count))
            return fail(c, std::string("all_gather on ") +
                               stringifyDType(type) + " changed bits");
      }
    }
  }
  return Status::ok();
}

/// all_reduce of a large odd-sized message (backends may switch algorithms
/// with the size) with every reduction.
template <typename T> Status checkLargeAllReduce(Communicator &c) {
  const size_t count = 200003;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max,
                      ReduceOp::Min, ReduceOp::Prod}) {
    for (const auto &axes : axisGroups(c)) {
      std::vector<int64_t> members = c.getGroup(axes);
      std::vector<T> data(count);
      for (size_t k = 0; k < count; ++k)
        data[k] = value<T>(c.getRank(), k, op);
      std::vector<T> want(count);
      for (size_t k = 0; k < count; ++k)
        want[k] = reduceValues<T>(members, k, op);
      // In place, as compiled code does.
      if (Status s = c.allReduce(data.data(), data.data(), count, dtypeOf<T>(),
                                 op, axes);
          !s)
        return s;
      if (Status s = expectEqual(c, "large all_reduce", data, want); !s)
        return s;
    }
  }
  return Status::ok();
}

/// Started all_reduces (a small one per reduction, a large one, one in
/// place) with a synchronous all_gather issued between the starts and the
/// waits, waited for in reverse order: each result is the synchronous one.
/// A request waited for twice, or never given, is an error.
template <typename T> Status checkAsyncAllReduce(Communicator &c) {
  const std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Max,
                                     ReduceOp::Min, ReduceOp::Prod};
  for (const auto &axes : axisGroups(c)) {
    std::vector<int64_t> members = c.getGroup(axes);
    std::vector<size_t> sizes = {5, 5, 5, 5, 100003, 9};
    std::vector<std::vector<T>> send(sizes.size()), recv(sizes.size());
    std::vector<int64_t> requests(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      ReduceOp op = ops[i % ops.size()];
      send[i].resize(sizes[i]);
      for (size_t k = 0; k < sizes[i]; ++k)
        send[i][k] = value<T>(c.getRank(), k, op);
      bool inPlace = i + 1 == sizes.size();
      recv[i].assign(sizes[i], T(-1));
      if (inPlace)
        recv[i] = send[i];
      if (Status s = c.allReduceStart(inPlace ? recv[i].data() : send[i].data(),
                                      recv[i].data(), sizes[i], dtypeOf<T>(),
                                      op, axes, requests[i]);
          !s)
        return s;
    }
    std::vector<T> mine(2, value<T>(c.getRank(), 0, ReduceOp::Sum));
    std::vector<T> gathered(2 * members.size());
    if (Status s = c.allGather(mine.data(), gathered.data(),
                               std::vector<size_t>(members.size(), 2),
                               dtypeOf<T>(), axes);
        !s)
      return s;
    for (size_t i = sizes.size(); i-- > 0;) {
      if (Status s = c.wait(requests[i]); !s)
        return s;
      ReduceOp op = ops[i % ops.size()];
      std::vector<T> want(sizes[i]);
      for (size_t k = 0; k < sizes[i]; ++k)
        want[k] = reduceValues<T>(members, k, op);
      if (Status s = expectEqual(c, "all_reduce_start #" + std::to_string(i),
                                 recv[i], want);
          !s)
        return s;
    }
    std::vector<T> wantGathered;
    for (int64_t m : members)
      for (int k = 0; k < 2; ++k)
        wantGathered.push_back(value<T>(m, 0, ReduceOp::Sum));
    if (Status s = expectEqual(c, "all_gather between starts and waits",
                               gathered, wantGathered);
        !s)
      return s;
    if (requests[0] != -1 && c.wait(requests[0]))
      return fail(c, "a second wait for one request succeeded");
  }
  if (c.wait(123456))
    return fail(c, "a wait for an unknown request succeeded");
  return Status::ok();
}

/// all_gather_start and reduce_scatter_start (even and uneven counts, one
/// member with none, every reduction), all started before a synchronous
/// all_reduce and waited for after it in reverse order: each result is the
/// synchronous collective's.
template <typename T> Status checkAsyncGatherScatter(Communicator &c) {
  const std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Avg,
                                     ReduceOp::Max, ReduceOp::Min};
  for (const auto &axes : axisGroups(c)) {
    std::vector<int64_t> members = c.getGroup(axes);
    size_t n = members.size();
    size_t me = static_cast<size_t>(c.getGroupIndex(axes));
    std::vector<std::vector<size_t>> countSets = {
        std::vector<size_t>(n, 3), std::vector<size_t>(n, 40001)};
    std::vector<size_t> uneven;
    for (size_t i = 0; i < n; ++i)
      uneven.push_back(i + 1 == n && n > 1 ? 0 : i + 2);
    countSets.push_back(uneven);
    struct Started {
      bool gather;
      ReduceOp op;
      std::vector<size_t> counts;
      std::vector<T> send, recv;
      int64_t request = -1;
    };
    std::vector<Started> started;
    for (const std::vector<size_t> &counts : countSets) {
      size_t total =
          std::accumulate(counts.begin(), counts.end(), static_cast<size_t>(0));
      Started g{true, ReduceOp::Sum, counts, {}, {}};
      g.send.resize(counts[me]);
      for (size_t k = 0; k < counts[me]; ++k)
        g.send[k] = value<T>(c.getRank(), k, ReduceOp::Sum);
      g.recv.assign(total, T(-1));
      started.push_back(std::move(g));
      for (ReduceOp op : ops) {
        if (op == ReduceOp::Avg && !std::is_floating_point<T>::value)
          continue; // integer averages truncate
        Started r{false, op, counts, {}, {}};
        r.send.resize(total);
        for (size_t k = 0; k < total; ++k)
          r.send[k] = value<T>(c.getRank(), k, op);
        r.recv.assign(counts[me], T(-1));
        started.push_back(std::move(r));
      }
    }
    for (Started &st : started) {
      Status s =
          st.gather
              ? c.allGatherStart(st.send.data(), st.recv.data(), st.counts,
                                 dtypeOf<T>(), axes, st.request)
              : c.reduceScatterStart(st.send.data(), st.recv.data(), st.counts,
                                     dtypeOf<T>(), st.op, axes, st.request);
      if (!s)
        return s;
    }
    std::vector<T> mine(3, value<T>(c.getRank(), 0, ReduceOp::Sum));
    std::vector<T> reduced(3);
    if (Status s = c.allReduce(mine.data(), reduced.data(), 3, dtypeOf<T>(),
                               ReduceOp::Sum, axes);
        !s)
      return s;
    if (Status s = expectEqual(
            c, "all_reduce between starts and waits", reduced,
            std::vector<T>(3, reduceValues<T>(members, 0, ReduceOp::Sum)));
        !s)
      return s;
    for (size_t i = started.size(); i-- > 0;) {
      Started &st = started[i];
      if (Status s = c.wait(st.request); !s)
        return s;
      std::vector<T> want;
      if (st.gather) {
        for (size_t m = 0; m < n; ++m)
          for (size_t k = 0; k < st.counts[m]; ++k)
            want.push_back(value<T>(members[m], k, ReduceOp::Sum));
      } else {
        size_t offset = std::accumulate(
            st.counts.begin(), st.counts.begin() + me, static_cast<size_t>(0));
        for (size_t k = 0; k < st.counts[me]; ++k)
          want.push_back(reduceValues<T>(members, offset + k, st.op));
      }
      std::string what =
          std::string(st.gather ? "all_gather_start" : "reduce_scatter_start") +
          " #" + std::to_string(i);
      if (Status s = expectEqual(c, what, st.recv, want); !s)
        return s;
    }
  }
  return Status::ok();
}

/// all_to_all with variable counts: member i sends i + j + 1 elements to j.
template <typename T> Status checkAllToAll(Communicator &c) {
  for (const auto &axes : axisGroups(c)) {
    std::vector<int64_t> members = c.getGroup(axes);
    size_t n = members.size();
    size_t me = static_cast<size_t>(c.getGroupIndex(axes));
    std::vector<size_t> sendCounts(n), recvCounts(n);
    std::vector<T> send;
    for (size_t j = 0; j < n; ++j) {
      sendCounts[j] = me + j + 1;
      recvCounts[j] = j + me + 1;
      for (size_t k = 0; k < sendCounts[j]; ++k)
        send.push_back(static_cast<T>(c.getRank() * 1000 + j * 10 + k));
    }
    std::vector<T> recv(std::accumulate(recvCounts.begin(), recvCounts.end(),
                                        static_cast<size_t>(0)));
    if (Status s = c.allToAll(send.data(), sendCounts, recv.data(), recvCounts,
                              dtypeOf<T>(), axes);
        !s)
      return s;
    std::vector<T> want;
    for (size_t j = 0; j < n; ++j)
      for (size_t k = 0; k < recvCounts[j]; ++k)
        want.push_back(static_cast<T>(members[j] * 1000 + me * 10 + k));
    if (Status s = expectEqual(c, "all_to_all", recv, want); !s)
      return s;
  }
  return Status::ok();
}

/// permute (a ring shift that leaves member 0 without a source) and
/// broadcast from the last member; then a barrier.
template <typename T> Status checkPermuteBroadcast(Communicator &c) {
  for (const auto &axes : axisGroups(c)) {
    std::vector<int64_t> members = c.getGroup(axes);
    int64_t n = static_cast<int64_t>(members.size());
    int64_t me = c.getGroupIndex(axes);
    std::vector<std::pair<int64_t, int64_t>> pairs;
    for (int64_t i = 0; i + 1 < n; ++i)
      pairs.push_back({i, i + 1});
    std::vector<T> send(4), recv(4);
    for (size_t k = 0; k < 4; ++k)
      send[k] = value<T>(c.getRank(), k, ReduceOp::Sum);
    if (Status s =
            c.permute(send.data(), recv.data(), 4, dtypeOf<T>(), pairs, axes);
        !s)
      return s;
    std::vector<T> want(4, T(0));
    if (me > 0)
      for (size_t k = 0; k < 4; ++k)
        want[k] = value<T>(members[me - 1], k, ReduceOp::Sum);
    if (Status s = expectEqual(c, "permute", recv, want); !s)
      return s;
    std::vector<T> buffer = send;
    if (Status s = c.broadcast(buffer.data(), 4, dtypeOf<T>(), n - 1, axes); !s)
      return s;
    for (size_t k = 0; k < 4; ++k)
      want[k] = value<T>(members[n - 1], k, ReduceOp::Sum);
    if (Status s = expectEqual(c, "broadcast", buffer, want); !s)
      return s;
    if (Status s = c.barrier(axes); !s)
      return s;
  }
  return Status::ok();
}

/// The layouts the exchange check pairs up on `meshShape` for a tensor of
/// `rank` dims: per mesh axis R, S(d) for each dim, P(sum) and P(max), and
/// the nested order of two axes on one dim.
inline std::vector<Layout> exchangeLayouts(const std::vector<int64_t> &mesh,
                                           int64_t rank) {
  std::vector<Placement> choices = {Placement::replicate(),
                                    Placement::partial(ReduceOp::Sum),
                                    Placement::partial(ReduceOp::Max)};
  for (int64_t d = 0; d < rank; ++d)
    choices.push_back(Placement::shard(d));
  std::vector<Layout> out;
  std::vector<size_t> pick(mesh.size(), 0);
  while (true) {
    std::vector<Placement> ps;
    for (size_t a = 0; a < mesh.size(); ++a)
      ps.push_back(choices[pick[a]]);
    std::string error;
    // Mixed Partial ops on one layout are not reachable in one step.
    bool sum = false, max = false;
    for (const Placement &p : ps) {
      sum |= p.kind == Placement::Kind::Partial && p.reduce == ReduceOp::Sum;
      max |= p.kind == Placement::Kind::Partial && p.reduce == ReduceOp::Max;
    }
    if (!(sum && max))
      if (auto l = Layout::fromPlacements(ps, mesh, error))
        out.push_back(*l);
    size_t a = 0;
    while (a < mesh.size() && ++pick[a] == choices.size())
      pick[a++] = 0;
    if (a == mesh.size())
      break;
  }
  return out;
}

/// shardx::rt::exchange over the whole mesh between every pair of
/// exchangeLayouts (the target creates no Partial) on uneven shapes: each
/// rank's result equals its target shard of the global tensor.
template <typename T> Status checkExchange(Communicator &c) {
  const std::vector<int64_t> &mesh = c.getMeshShape();
  std::vector<int64_t> all(mesh.size());
  std::iota(all.begin(), all.end(), 0);
  for (const std::vector<int64_t> &shape :
       {std::vector<int64_t>{7}, std::vector<int64_t>{5, 3}}) {
    std::vector<Layout> layouts = exchangeLayouts(mesh, shape.size());
    // The global tensor: element k is k - 20.
    auto element = [&](const std::vector<int64_t> &index) {
      int64_t k = 0;
      for (size_t d = 0; d < shape.size(); ++d)
        k = k * shape[d] + index[d];
      return static_cast<T>(k - 20);
    };
    // This rank's shard of `l`, with Partial terms: P(sum) puts the value
    // on coordinate 0 of its axis (zeros elsewhere), P(max) everywhere.
    auto shard = [&](const Layout &l) {
      LocalShard s = l.getLocalShard(mesh, shape, c.getCoords());
      bool zero = false;
      for (size_t a = 0; a < mesh.size(); ++a)
        if (l.getPartials()[a] == ReduceOp::Sum && c.getCoords()[a] != 0)
          zero = true;
      std::vector<std::vector<int64_t>> idx;
      for (const auto &runs : s.runs) {
        idx.emplace_back();
        for (const Interval &r : runs)
          for (int64_t i = 0; i < r.size; ++i)
            idx.back().push_back(r.offset + i);
      }
      std::vector<T> out;
      std::vector<int64_t> index(shape.size());
      std::function<void(size_t)> walk = [&](size_t d) {
        if (d == shape.size()) {
          out.push_back(zero ? T(0) : element(index));
          return;
        }
        for (int64_t i : idx[d]) {
          index[d] = i;
          walk(d + 1);
        }
      };
      walk(0);
      return out;
    };
    for (const Layout &src : layouts) {
      std::vector<T> in = shard(src);
      for (const Layout &dst : layouts) {
        if (dst.hasPartial() && dst.getPartials() != src.getPartials())
          continue;
        std::vector<T> want = shard(dst);
        std::vector<T> got(want.size() + 1, T(-999));
        if (Status s = exchange(c, in.data(), got.data(), dtypeOf<T>(), shape,
                                src, dst, all);
            !s)
          return s;
        got.pop_back();
        if (Status s = expectEqual(c,
                                   "exchange " + src.str() + " -> " +
                                       dst.str(),
                                   got, want);
            !s)
          return s;
      }
    }
  }
  return Status::ok();
}

} // namespace shardx::rt::conformance

#endif // SHARDX_TEST_UNIT_CONFORMANCE_H
