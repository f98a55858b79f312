//===- HostStaging.cpp - Host buffers to a device communicator ------------===//
//
// Part of ShardX.
//
// stageHostBuffers: a communicator that takes host buffers and runs another
// communicator's collectives (cuda-local) on device copies of them. The
// conformance suite runs cuda-local through it, and CUDA artifacts run the
// reshard steps they stage through host memory (the uneven all-to-all and
// the exchange) through it. Copies are synchronous on the calling thread's
// stream; a stream-ordered communicator (nccl) is ordered after that stream
// before each collective and makes it wait for the collective, and its
// `finish` then reports a collective that failed.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Cuda.h"
#include "shardx/Runtime/CudaLocal.h"

#include <algorithm>
#include <map>
#include <memory>

namespace shardx::rt {
namespace {

/// A copy of a host buffer on the device (copied back with `back`).
class DeviceCopy {
public:
  DeviceCopy(const void *host, size_t bytes) : bytes(bytes) {
    device =
        shardx_rt_cuda_alloc(static_cast<int64_t>(std::max<size_t>(bytes, 1)));
    if (host && bytes)
      shardx_rt_cuda_copy(device, host, static_cast<int64_t>(bytes));
  }
  ~DeviceCopy() { shardx_rt_cuda_free(device); }
  void back(void *host) const {
    if (bytes)
      shardx_rt_cuda_copy(host, device, static_cast<int64_t>(bytes));
  }
  void *get() const { return device; }

private:
  void *device;
  size_t bytes;
};

/// Host buffers, staged through device buffers to a communicator on device
/// buffers (an in-place call stays in place on the device).
class HostStaging : public Communicator {
public:
  explicit HostStaging(Communicator &inner)
      : Communicator(inner.getMeshShape(), inner.getRank()), inner(inner) {}

  const char *getBackendName() const override { return inner.getBackendName(); }
  /// Host buffers, whatever `inner` takes.
  MemorySpace getMemorySpace() const override { return MemorySpace::Host; }
  void abort(const std::string &cause) override { inner.abort(cause); }

  Status allGather(const void *send, void *recv,
                   const std::vector<size_t> &counts, DType type,
                   const std::vector<int64_t> &axes) override {
    if (Status s = checkAxes(axes, "all_gather"); !s)
      return s;
    size_t es = dtypeSize(type), me = getGroupIndex(axes);
    DeviceCopy in(send, me < counts.size() ? counts[me] * es : 0);
    DeviceCopy out(nullptr, total(counts) * es);
    orderInner();
    Status s = inner.allGather(in.get(), out.get(), counts, type, axes);
    out.back(recv);
    return finished(s);
  }

  Status reduceScatter(const void *send, void *recv,
                       const std::vector<size_t> &counts, DType type,
                       ReduceOp op, const std::vector<int64_t> &axes) override {
    if (Status s = checkAxes(axes, "reduce_scatter"); !s)
      return s;
    size_t es = dtypeSize(type), me = getGroupIndex(axes);
    DeviceCopy in(send, total(counts) * es);
    DeviceCopy out(nullptr, me < counts.size() ? counts[me] * es : 0);
    orderInner();
    Status s = inner.reduceScatter(in.get(), out.get(), counts, type, op, axes);
    out.back(recv);
    return finished(s);
  }

  Status allReduce(const void *send, void *recv, size_t count, DType type,
                   ReduceOp op, const std::vector<int64_t> &axes) override {
    size_t bytes = count * dtypeSize(type);
    DeviceCopy in(send, bytes);
    if (send == recv) {
      orderInner();
      Status s = inner.allReduce(in.get(), in.get(), count, type, op, axes);
      in.back(recv);
      return finished(s);
    }
    DeviceCopy out(nullptr, bytes);
    orderInner();
    Status s = inner.allReduce(in.get(), out.get(), count, type, op, axes);
    out.back(recv);
    return finished(s);
  }

  /// Stages in, starts the inner all_reduce on the device copies and keeps
  /// them until `wait`, which copies the result back.
  Status allReduceStart(const void *send, void *recv, size_t count,
                        DType type, ReduceOp op,
                        const std::vector<int64_t> &axes,
                        int64_t &request) override {
    size_t bytes = count * dtypeSize(type);
    Started st;
    st.recv = recv;
    st.in = std::make_unique<DeviceCopy>(send, bytes);
    if (send != recv)
      st.out = std::make_unique<DeviceCopy>(nullptr, bytes);
    void *to = st.out ? st.out->get() : st.in->get();
    orderInner();
    if (Status s = inner.allReduceStart(st.in->get(), to, count, type, op,
                                        axes, st.request);
        !s)
      return s;
    request = nextRequest++;
    started[request] = std::move(st);
    return Status::ok();
  }

  Status wait(int64_t request) override {
    auto it = started.find(request);
    // Not one of this adaptor's: the default start's request (-1, the
    // collective already done: all_gather and reduce_scatter starts run
    // staged and synchronous here), else an unknown request's error.
    if (it == started.end())
      return Communicator::wait(request);
    Started st = std::move(it->second);
    started.erase(it);
    orderInner();
    Status s = inner.wait(st.request);
    (st.out ? st.out : st.in)->back(st.recv);
    return finished(s);
  }

  Status allToAll(const void *send, const std::vector<size_t> &sendCounts,
                  void *recv, const std::vector<size_t> &recvCounts, DType type,
                  const std::vector<int64_t> &axes) override {
    size_t es = dtypeSize(type);
    DeviceCopy in(send, total(sendCounts) * es);
    DeviceCopy out(nullptr, total(recvCounts) * es);
    orderInner();
    Status s =
        inner.allToAll(in.get(), sendCounts, out.get(), recvCounts, type, axes);
    out.back(recv);
    return finished(s);
  }

  Status permute(const void *send, void *recv, size_t count, DType type,
                 const std::vector<std::pair<int64_t, int64_t>> &pairs,
                 const std::vector<int64_t> &axes) override {
    size_t bytes = count * dtypeSize(type);
    DeviceCopy in(send, bytes), out(nullptr, bytes);
    orderInner();
    Status s = inner.permute(in.get(), out.get(), count, type, pairs, axes);
    out.back(recv);
    return finished(s);
  }

  Status broadcast(void *buffer, size_t count, DType type, int64_t root,
                   const std::vector<int64_t> &axes) override {
    DeviceCopy data(buffer, count * dtypeSize(type));
    orderInner();
    Status s = inner.broadcast(data.get(), count, type, root, axes);
    data.back(buffer);
    return finished(s);
  }

  Status barrier(const std::vector<int64_t> &axes) override {
    return inner.barrier(axes);
  }

  bool orderAfterStream(void *stream) override {
    return inner.orderAfterStream(stream);
  }
  Status finish() override { return inner.finish(); }

private:
  /// Queues the inner collectives after this thread's copies and makes the
  /// copies back wait for them: a stream-ordered communicator (nccl) runs
  /// on the stream it was last given, which a CUDA artifact of its own
  /// runtime copy sets to its stream (the Python binding gathers results
  /// through this adaptor between runs).
  void orderInner() { inner.orderAfterStream(shardx_rt_cuda_stream()); }

  /// `s`, or, on a stream-ordered communicator, the error of a collective
  /// that failed after it was queued (the copy back waited for it).
  Status finished(Status s) { return s ? inner.finish() : s; }

  static size_t total(const std::vector<size_t> &counts) {
    size_t n = 0;
    for (size_t c : counts)
      n += c;
    return n;
  }

  /// A started all_reduce: the inner request, the device copies, and
  /// where its result goes.
  struct Started {
    int64_t request = -1;
    void *recv = nullptr;
    std::unique_ptr<DeviceCopy> in, out;
  };

  Communicator &inner;
  std::map<int64_t, Started> started;
  int64_t nextRequest = 0;
};

} // namespace

std::unique_ptr<Communicator> stageHostBuffers(Communicator &inner) {
  return std::make_unique<HostStaging>(inner);
}

} // namespace shardx::rt
