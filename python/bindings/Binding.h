//===- Binding.h - Shared parts of the _shardx_rt module --------*- C++ -*-===//
//
// Part of ShardX.
//
// Private to python/bindings: the module's exceptions, arrays as host
// tensors (DLPack types from the one DType table), loaded artifacts, and the
// registration of the compiled-call classes (CallPlan.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_PYTHON_BINDINGS_BINDING_H
#define SHARDX_PYTHON_BINDINGS_BINDING_H

#include "shardx/Exec/Session.h"
#include "shardx/Runtime/Bootstrap.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

namespace shardx::binding {

namespace nb = nanobind;
using exec::Artifact;
using exec::EntryPoint;
using exec::HostTensor;
using exec::ShardSet;

/// A failed run (the message names the failing rank and its cause).
struct RunError : std::runtime_error {
  using std::runtime_error::runtime_error;
};


/// An artifact that cannot be loaded.
struct LoadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using AnyArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
using NumpyArray = nb::ndarray<nb::numpy, nb::ro>;

/// The DLPack type of `type`'s arrays (the DType table's sizes and kinds).
nb::dlpack::dtype dlpackType(rt::DType type);
/// The element type of an array of DLPack type `t`, if ShardX has it.
std::optional<rt::DType> dtypeOf(nb::dlpack::dtype t);
/// dtypeOf's name, or "unsupported".
std::string dtypeName(nb::dlpack::dtype t);
/// A dtype argument from Python (an MLIR name such as "bf16").
rt::DType parseDTypeArg(const std::string &name);

/// A read-only numpy array over `t`'s data that keeps `t` alive. numpy has
/// no bfloat16: a bf16 tensor's array holds its bits as uint16
/// (ShardedTensor.to_torch views them as torch.bfloat16).
template <typename Array = NumpyArray>
Array viewOf(std::shared_ptr<const HostTensor> t) {
  auto *keep = new std::shared_ptr<const HostTensor>(std::move(t));
  nb::capsule owner(keep, [](void *p) noexcept {
    delete static_cast<std::shared_ptr<const HostTensor> *>(p);
  });
  const HostTensor &h = **keep;
  std::vector<size_t> shape(h.shape.begin(), h.shape.end());
  static const char empty = 0;
  const void *data = h.data.empty() ? &empty : h.data.data();
  return Array(const_cast<void *>(data), shape.size(), shape.data(), owner,
               nullptr,
               h.dtype == rt::DType::BF16 ? nb::dtype<uint16_t>()
                                          : dlpackType(h.dtype));
}


/// A copy of array `a`, which must hold `dtype` elements.
HostTensor hostTensorOf(const AnyArray &a, rt::DType dtype);
/// The same with the dtype named (empty: the array's).
HostTensor hostTensorOf(const AnyArray &a, const std::string &dtype);

/// The Python exception a use of a donated tensor raises (shardx sets it to
/// `shardx.DonatedError`; RuntimeError until then).
[[noreturn]] void raiseDonated(const std::string &message);
/// `s`, unless it was donated to a run (its buffers are the run's output).
const ShardSet &live(const ShardSet &s);

/// A loaded artifact; the entry points are looked up by name.
struct PyArtifact {
  std::shared_ptr<Artifact> artifact;
  const EntryPoint &entry(const std::string &name) const {
    const EntryPoint *e = artifact->lookup(name);
    if (!e)
      throw std::invalid_argument("artifact " + artifact->getPath() +
                                  " has no entry point " + name);
    return *e;
  }
};


/// Registers CallPlan, CompiledCall and set_error_types (CallPlan.cpp).
void bindCalls(nb::module_ &m);

/// MPI, where the build has it (Processes.cpp, the binding's one file that
/// depends on the build's MPI). Whether it has.
bool hasMpi();
/// This process's rank of `meshShape` over MPI_COMM_WORLD (MPI initialized
/// on first use); RunError where it cannot be made, ValueError in a build
/// without MPI.
std::unique_ptr<rt::Communicator>
connectMpi(const std::vector<int64_t> &meshShape, double timeout);
/// The MPI bootstrap where MPI runs this process (initialized), else null.
std::unique_ptr<rt::Bootstrap> mpiBootstrapIfRunning();
/// MPI_Finalize (nothing without MPI).
void finalizeMpi();

} // namespace shardx::binding

#endif // SHARDX_PYTHON_BINDINGS_BINDING_H
