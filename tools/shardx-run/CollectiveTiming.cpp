//===- CollectiveTiming.cpp - Measured collectives for the report ---------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "CollectiveTiming.h"

#include <chrono>
#include <map>
#include <numeric>
#include <tuple>

using namespace shardx;
using namespace shardx::rt;

namespace {

struct Key {
  std::string kind;
  std::vector<int64_t> axes;
  bool operator<(const Key &o) const {
    return std::tie(kind, axes) < std::tie(o.kind, o.axes);
  }
};
struct Totals {
  int64_t calls = 0;
  double bytes = 0, seconds = 0;
};

/// A communicator that forwards every call to `inner` and times it.
class TimingCommunicator : public Communicator {
public:
  TimingCommunicator(Communicator &inner, std::map<Key, Totals> &totals)
      : Communicator(inner.getMeshShape(), inner.getRank()), inner(inner),
        totals(totals) {}

  const char *getBackendName() const override { return inner.getBackendName(); }
  MemorySpace getMemorySpace() const override {
    return inner.getMemorySpace();
  }
  Status allGather(const void *send, void *recv,
                   const std::vector<size_t> &counts, DType type,
                   const std::vector<int64_t> &axes) override {
    size_t all = std::accumulate(counts.begin(), counts.end(), size_t(0));
    size_t own = counts.empty() ? 0 : counts[getGroupIndex(axes)];
    return timed("all_gather", axes, (all - own) * dtypeSize(type), [&] {
      return inner.allGather(send, recv, counts, type, axes);
    });
  }
  Status reduceScatter(const void *send, void *recv,
                       const std::vector<size_t> &counts, DType type,
                       ReduceOp op, const std::vector<int64_t> &axes) override {
    size_t all = std::accumulate(counts.begin(), counts.end(), size_t(0));
    size_t own = counts.empty() ? 0 : counts[getGroupIndex(axes)];
    return timed("reduce_scatter", axes, (all - own) * dtypeSize(type), [&] {
      return inner.reduceScatter(send, recv, counts, type, op, axes);
    });
  }
  Status allReduce(const void *send, void *recv, size_t count, DType type,
                   ReduceOp op, const std::vector<int64_t> &axes) override {
    double n = static_cast<double>(getGroup(axes).size());
    return timed(
        "all_reduce", axes,
        2 * (n - 1) / n * static_cast<double>(count * dtypeSize(type)),
        [&] { return inner.allReduce(send, recv, count, type, op, axes); });
  }
  Status allToAll(const void *send, const std::vector<size_t> &sendCounts,
                  void *recv, const std::vector<size_t> &recvCounts, DType type,
                  const std::vector<int64_t> &axes) override {
    size_t all =
        std::accumulate(recvCounts.begin(), recvCounts.end(), size_t(0));
    size_t own = recvCounts.empty() ? 0 : recvCounts[getGroupIndex(axes)];
    return timed("all_to_all", axes, (all - own) * dtypeSize(type), [&] {
      return inner.allToAll(send, sendCounts, recv, recvCounts, type, axes);
    });
  }
  Status permute(const void *send, void *recv, size_t count, DType type,
                 const std::vector<std::pair<int64_t, int64_t>> &pairs,
                 const std::vector<int64_t> &axes) override {
    return timed("permute", axes, count * dtypeSize(type), [&] {
      return inner.permute(send, recv, count, type, pairs, axes);
    });
  }
  Status broadcast(void *buffer, size_t count, DType type, int64_t root,
                   const std::vector<int64_t> &axes) override {
    return timed("broadcast", axes, count * dtypeSize(type), [&] {
      return inner.broadcast(buffer, count, type, root, axes);
    });
  }
  Status barrier(const std::vector<int64_t> &axes) override {
    return inner.barrier(axes);
  }
  void abort(const std::string &cause) override { inner.abort(cause); }

private:
  template <typename Call>
  Status timed(const char *kind, const std::vector<int64_t> &axes, double bytes,
               Call call) {
    auto start = std::chrono::steady_clock::now();
    Status s = call();
    Totals &t = totals[Key{kind, axes}];
    ++t.calls;
    t.bytes += bytes;
    t.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    return s;
  }

  Communicator &inner;
  std::map<Key, Totals> &totals;
};

} // namespace

Status shardx::tools::measureCollectives(
    const exec::Artifact &artifact, const exec::EntryPoint &entry,
    const std::vector<exec::HostTensor> &globalInputs,
    const std::vector<std::string> &axisNames, double timeout,
    std::vector<mlir::shardx::MeasuredCollective> &measured) {
  const std::vector<int64_t> &mesh = artifact.getMeshShape();
  int64_t size = 1;
  for (int64_t m : mesh)
    size *= m;
  std::vector<std::map<Key, Totals>> totals(size);
  artifact.setComputeThreads(exec::computeThreadsPerRank(size));
  std::vector<Status> statuses = runThreads(
      mesh,
      [&](Communicator &comm) -> Status {
        std::vector<exec::HostTensor> local, outputs;
        for (size_t i = 0; i < entry.inputs.size(); ++i)
          local.push_back(exec::scatter(globalInputs[i], entry.inputs[i], mesh,
                                        comm.getCoords()));
        TimingCommunicator timed(comm, totals[comm.getRank()]);
        return artifact.run(entry, timed, local, outputs);
      },
      timeout);
  for (const Status &s : statuses)
    if (!s)
      return s;
  for (int64_t rank = 0; rank < size; ++rank) {
    for (const auto &[key, t] : totals[rank]) {
      mlir::shardx::MeasuredCollective m;
      m.kind = key.kind;
      for (int64_t a : key.axes)
        m.axes +=
            (m.axes.empty() ? "" : ",") +
            (a < static_cast<int64_t>(axisNames.size()) ? axisNames[a]
                                                        : std::to_string(a));
      m.rank = rank;
      m.calls = t.calls;
      m.bytes = t.bytes;
      m.seconds = t.seconds;
      measured.push_back(m);
    }
  }
  return Status::ok();
}
