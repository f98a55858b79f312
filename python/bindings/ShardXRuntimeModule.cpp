//===- ShardXRuntimeModule.cpp - Python binding of the executor -----------===//
//
// Part of ShardX.
//
// The `_shardx_rt` extension module that `shardx.compile` runs on: loads
// artifacts, keeps tensors as resident per-rank shards (`ShardSet`) and runs
// entry points on a `Session` of persistent rank threads. Arrays cross the
// boundary through DLPack / the buffer protocol (numpy arrays, torch CPU
// tensors); `ShardSet.local(rank)` is a read-only view of the rank's buffer,
// no copy.
//
//===----------------------------------------------------------------------===//

#include "Binding.h"
#include "shardx/Layout/LayoutJson.h"
#include "shardx/Runtime/Bootstrap.h"
#include "shardx/Runtime/Cuda.h"
#include "shardx/Runtime/CudaLocal.h"
#include "shardx/Runtime/Nccl.h"

#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace nb = nanobind;
using namespace shardx;
using namespace shardx::binding;
using namespace shardx::exec;

namespace {

/// The ranks of a process world find each other through a Python callable
/// `exchange(key, data)`: rank 0 passes its bytes and the callable publishes
/// them; every other rank passes None and gets rank 0's bytes back (the
/// nccl backend hands it PyTorch's TCPStore, which torchrun's environment
/// names). Called on the thread that holds the GIL.
class CallbackBootstrap : public rt::Bootstrap {
public:
  CallbackBootstrap(int64_t rank, int64_t worldSize, nb::callable exchange)
      : rank(rank), worldSize(worldSize), exchange(std::move(exchange)) {}
  const char *getName() const override { return "store"; }
  int64_t getRank() const override { return rank; }
  int64_t getWorldSize() const override { return worldSize; }
  rt::Status broadcast(const std::string &key, void *data,
                       size_t bytes) override {
    try {
      nb::object mine = rank == 0
                            ? nb::object(nb::bytes(data, bytes))
                            : nb::object(nb::none());
      nb::object got = exchange(key, mine);
      if (rank == 0)
        return rt::Status::ok();
      if (!nb::isinstance<nb::bytes>(got))
        return rt::Status::error("the bootstrap's exchange returned no "
                                 "bytes for key '" + key + "'");
      nb::bytes b = nb::borrow<nb::bytes>(got);
      if (b.size() != bytes)
        return rt::Status::error(
            "the bootstrap's exchange returned " + std::to_string(b.size()) +
            " bytes for key '" + key + "', expected " + std::to_string(bytes));
      std::memcpy(data, b.c_str(), bytes);
      return rt::Status::ok();
    } catch (nb::python_error &e) {
      return rt::Status::error("the bootstrap's exchange failed for key '" +
                               key + "': " + e.what());
    }
  }

private:
  int64_t rank, worldSize;
  nb::callable exchange;
};

std::vector<Placement> placementsOf(
    const std::vector<std::tuple<std::string, int64_t, int64_t, std::string>>
        &list) {
  std::vector<Placement> out;
  for (const auto &[kind, dim, sf, op] : list) {
    if (kind == "R")
      out.push_back(Placement::replicate());
    else if (kind == "S")
      out.push_back(Placement::shard(dim));
    else if (kind == "SS")
      out.push_back(Placement::stridedShard(dim, sf));
    else if (kind == "P") {
      std::optional<ReduceOp> r = parseReduceOp(op);
      if (!r)
        throw std::invalid_argument("unknown reduction " + op);
      out.push_back(Placement::partial(*r));
    } else {
      throw std::invalid_argument("unknown placement kind " + kind);
    }
  }
  return out;
}

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d)
    s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

nb::dict specDict(const TensorSpec &s) {
  nb::dict d;
  d["shape"] = s.shape;
  d["global_shape"] = s.globalShape;
  d["dtype"] = rt::stringifyDType(s.dtype);
  d["layout"] = s.layout;
  return d;
}

/// The artifact's own copy of runtime C function `name` (CApi.h: each
/// artifact links its runtime, whose buffer cache counts what its program
/// allocates); ValueError where it has none.
template <typename Fn>
Fn artifactFunction(const PyArtifact &a, const char *name) {
  auto *fn = reinterpret_cast<Fn>(a.artifact->lookupSymbol(name));
  if (!fn)
    throw std::invalid_argument("artifact " + a.artifact->getPath() +
                                " has no " + name);
  return fn;
}

/// Each thread's high-water mark (`live` false) or its bytes allocated less
/// bytes freed (`live` true) of the artifact's memory meter, in the order
/// the threads first allocated (shardx_rt_host_mem_peaks gives both).
std::vector<int64_t> hostMemCounts(const PyArtifact &a, bool live) {
  auto read = artifactFunction<int64_t (*)(int64_t *, int64_t *, int64_t)>(
      a, "shardx_rt_host_mem_peaks");
  std::vector<int64_t> counts(read(nullptr, nullptr, 0));
  int64_t n =
      read(live ? nullptr : counts.data(), live ? counts.data() : nullptr,
           static_cast<int64_t>(counts.size()));
  counts.resize(std::min<size_t>(counts.size(), n));
  return counts;
}

/// Rank `rank`'s buffer of `s`, which this process must hold.
const HostTensor &localOf(const ShardSet &s, int64_t rank) {
  if (rank < 0 || rank >= static_cast<int64_t>(live(s).locals.size()))
    throw nb::index_error("rank out of range");
  if (!s.locals[rank])
    throw std::invalid_argument("rank " + std::to_string(rank) +
                                "'s shard lives in another process");
  return *s.locals[rank];
}

/// An empty ShardSet of `session`'s mesh for `entries` per-rank arrays
/// (`what` names the caller in errors): the layout must fit the global
/// shape and there must be one entry per rank.
ShardSet emptyShardSet(const char *what, const Session &session, size_t entries,
                       const std::string &dtype,
                       const std::optional<Layout> &layout,
                       const std::vector<int64_t> &globalShape) {
  const std::vector<int64_t> &mesh = session.getMeshShape();
  if (layout) {
    std::string error = layout->verifyForShape(mesh, globalShape);
    if (!error.empty())
      throw std::invalid_argument(error);
  }
  int64_t size = session.getSize();
  if (static_cast<int64_t>(entries) != size)
    throw std::invalid_argument(
        std::string(what) + ": " + std::to_string(entries) +
        " entries for a mesh of " + std::to_string(size) + " ranks");
  ShardSet set;
  set.meshShape = mesh;
  set.globalShape = globalShape;
  set.dtype = parseDTypeArg(dtype);
  set.layout = layout;
  set.locals.assign(size, nullptr);
  return set;
}

/// The local shape rank `rank` of `set` must have.
std::vector<int64_t> localShapeOf(const ShardSet &set, int64_t rank) {
  if (!set.layout || set.layout->isReplicated())
    return set.globalShape;
  return set.layout
      ->getLocalShard(set.meshShape, set.globalShape,
                      allMeshCoords(set.meshShape)[rank])
      .shape;
}

} // namespace

NB_MODULE(_shardx_rt, m) {
  m.doc() = "ShardX runtime: artifacts, resident shards, rank sessions";
  // Sessions and call plans held by module globals (shardx's per-mesh
  // sessions, compiled functions) are alive at interpreter exit by design.
  nb::set_leak_warnings(false);
  nb::exception<RunError>(m, "RunError", PyExc_RuntimeError);
  nb::exception<LoadError>(m, "LoadError", PyExc_RuntimeError);

  nb::class_<Layout>(m, "Layout")
      .def_static(
          "from_placements",
          [](const std::vector<
                 std::tuple<std::string, int64_t, int64_t, std::string>> &p,
             const std::vector<int64_t> &meshShape,
             const std::vector<int64_t> &globalShape) {
            std::string error;
            std::optional<Layout> l =
                Layout::fromPlacements(placementsOf(p), meshShape, error);
            if (!l)
              throw std::invalid_argument(error);
            error = l->verifyForShape(meshShape, globalShape);
            if (!error.empty())
              throw std::invalid_argument(error);
            return *l;
          },
          nb::arg("placements"), nb::arg("mesh_shape"), nb::arg("global_shape"),
          "The canonical layout of DTensor placements, given as (kind, dim, "
          "split_factor, op) tuples with kind R, S, SS or P.")
      .def_static(
          "from_json",
          [](const std::string &text) {
            std::string error;
            std::optional<Layout> l = layoutFromJsonText(text, error);
            if (!l)
              throw std::invalid_argument("bad layout JSON: " + error);
            return *l;
          },
          nb::arg("text"),
          "The layout of its JSON text (shardx/Layout/LayoutJson.h: the form "
          "program descriptions use).")
      .def("to_json", &layoutToJsonText,
           "The layout's JSON text (the form program descriptions use).")
      .def("__str__", &Layout::str)
      .def("__repr__",
           [](const Layout &l) { return "Layout([" + l.str() + "])"; })
      .def("__eq__", [](const Layout &a, const Layout &b) { return a == b; })
      .def("__hash__",
           [](const Layout &l) { return nb::hash(nb::str(l.str().c_str())); })
      .def_prop_ro("is_replicated", &Layout::isReplicated)
      .def(
          "placements",
          [](const Layout &l, const std::vector<int64_t> &meshShape)
              -> std::optional<std::vector<
                  std::tuple<std::string, int64_t, int64_t, std::string>>> {
            std::string error;
            auto p = l.toPlacements(meshShape, error);
            if (!p)
              return std::nullopt;
            std::vector<std::tuple<std::string, int64_t, int64_t, std::string>>
                out;
            for (const Placement &x : *p) {
              switch (x.kind) {
              case Placement::Kind::Replicate:
                out.emplace_back("R", -1, 1, "");
                break;
              case Placement::Kind::Shard:
                out.emplace_back("S", x.dim, 1, "");
                break;
              case Placement::Kind::StridedShard:
                out.emplace_back("SS", x.dim, x.splitFactor, "");
                break;
              case Placement::Kind::Partial:
                out.emplace_back("P", -1, 1, stringifyReduceOp(x.reduce));
                break;
              }
            }
            return out;
          },
          nb::arg("mesh_shape"),
          "(kind, dim, split_factor, op) per mesh axis, or None when DTensor "
          "placements cannot express the layout.")
      .def(
          "local_shape",
          [](const Layout &l, const std::vector<int64_t> &meshShape,
             const std::vector<int64_t> &globalShape,
             const std::vector<int64_t> &coords) {
            return l.getLocalShard(meshShape, globalShape, coords).shape;
          },
          nb::arg("mesh_shape"), nb::arg("global_shape"), nb::arg("coords"))
      .def(
          "local_runs",
          [](const Layout &l, const std::vector<int64_t> &meshShape,
             const std::vector<int64_t> &globalShape,
             const std::vector<int64_t> &coords) {
            std::string error = l.verifyForShape(meshShape, globalShape);
            if (!error.empty())
              throw std::invalid_argument(error);
            if (coords.size() != meshShape.size())
              throw std::invalid_argument("coords do not fit the mesh");
            for (size_t a = 0; a < coords.size(); ++a)
              if (coords[a] < 0 || coords[a] >= meshShape[a])
                throw std::invalid_argument("coords do not fit the mesh");
            std::vector<std::vector<std::tuple<int64_t, int64_t>>> out;
            for (const std::vector<Interval> &runs :
                 l.getLocalShard(meshShape, globalShape, coords).runs) {
              out.emplace_back();
              for (const Interval &r : runs)
                out.back().emplace_back(r.offset, r.size);
            }
            return out;
          },
          nb::arg("mesh_shape"), nb::arg("global_shape"), nb::arg("coords"),
          "Per tensor dim, the (offset, size) runs of global indices rank "
          "`coords` holds, in local order (Layout::getLocalShard): its shard "
          "is their product.");

  nb::class_<PyArtifact>(m, "Artifact")
      .def(
          "__init__",
          [](PyArtifact *self, const std::string &path) {
            std::string error;
            std::unique_ptr<Artifact> a = Artifact::load(path, error);
            if (!a)
              throw LoadError(error);
            new (self) PyArtifact{std::shared_ptr<Artifact>(std::move(a))};
          },
          nb::arg("path"))
      .def_prop_ro("path",
                   [](const PyArtifact &a) { return a.artifact->getPath(); })
      .def_prop_ro(
          "mesh_shape",
          [](const PyArtifact &a) { return a.artifact->getMeshShape(); })
      .def_prop_ro("entry_points",
                   [](const PyArtifact &a) {
                     std::vector<std::string> names;
                     for (const EntryPoint &e : a.artifact->getEntryPoints())
                       names.push_back(e.name);
                     return names;
                   })
      .def(
          "inputs",
          [](const PyArtifact &a, const std::string &name) {
            nb::list l;
            for (const TensorSpec &s : a.entry(name).inputs)
              l.append(specDict(s));
            return l;
          },
          nb::arg("entry"))
      .def(
          "outputs",
          [](const PyArtifact &a, const std::string &name) {
            nb::list l;
            for (const TensorSpec &s : a.entry(name).outputs)
              l.append(specDict(s));
            return l;
          },
          nb::arg("entry"))
      .def(
          "index_checks",
          [](const PyArtifact &a, const std::string &name) -> nb::object {
            const EntryPoint &e = a.entry(name);
            if (e.checkOutput < 0)
              return nb::none();
            nb::list checks;
            for (const IndexCheck &c : e.checks)
              checks.append(nb::make_tuple(c.exception, c.message));
            return nb::make_tuple(e.checkOutput, checks);
          },
          nb::arg("entry"),
          "The entry's index checks (docs/Importer.md, \"Index checks\"): "
          "None, or (the output that holds their code, [(exception, "
          "message), ...] in code order).")
      .def(
          "host_mem_reset",
          [](const PyArtifact &a) {
            artifactFunction<void (*)()>(a, "shardx_rt_host_mem_reset")();
          },
          "Starts the artifact's memory meter again (docs/Memory.md, "
          "shardx_rt_host_mem_reset).")
      .def(
          "host_mem_peaks",
          [](const PyArtifact &a) { return hostMemCounts(a, false); },
          "Each thread's high-water mark of the bytes the artifact's "
          "program allocated since the last host_mem_reset, in the order "
          "the threads first allocated (docs/Memory.md, "
          "shardx_rt_host_mem_peaks).")
      .def(
          "host_mem_live",
          [](const PyArtifact &a) { return hostMemCounts(a, true); },
          "Each thread's bytes allocated less bytes freed since the last "
          "host_mem_reset, in the order the threads first allocated or "
          "freed (a buffer freed on another thread than its own counts "
          "on both: the sum is what is still allocated).")
      .def_prop_ro(
          "program_info",
          [](const PyArtifact &a) { return a.artifact->getProgramInfoText(); },
          "The program description the artifact embeds (JSON text, "
          "shardx/Exec/ProgramInfo.h).")
      .def(
          "run",
          [](const PyArtifact &a, const std::string &name, nb::list arrays,
             double timeout) {
            const EntryPoint &e = a.entry(name);
            if (arrays.size() != e.inputs.size())
              throw std::invalid_argument(
                  name + " takes " + std::to_string(e.inputs.size()) +
                  " inputs, got " + std::to_string(arrays.size()));
            std::vector<HostTensor> inputs;
            for (size_t i = 0; i < e.inputs.size(); ++i) {
              const TensorSpec &spec = e.inputs[i];
              inputs.push_back(
                  hostTensorOf(nb::cast<AnyArray>(arrays[i]), spec.dtype));
              const std::vector<int64_t> &shape = inputs.back().shape;
              bool fits = shape.size() == spec.globalShape.size();
              for (size_t d = 0; fits && d < shape.size(); ++d)
                fits = spec.globalShape[d] < 0 || spec.globalShape[d] == shape[d];
              if (!fits)
                throw std::invalid_argument(
                    "input " + std::to_string(i) + " has shape " +
                    shapeText(shape) + ", expected " +
                    shapeText(spec.globalShape));
            }
            std::vector<HostTensor> outputs;
            rt::Status status;
            {
              nb::gil_scoped_release release;
              status = runThreaded(*a.artifact, e, inputs, outputs, timeout);
            }
            if (!status)
              throw RunError(status.message());
            nb::list out;
            for (HostTensor &t : outputs)
              out.append(viewOf(
                  std::make_shared<const HostTensor>(std::move(t))));
            return out;
          },
          nb::arg("entry"), nb::arg("arrays"), nb::arg("timeout") = 60.0,
          "Runs `entry` on global numpy arrays (scattered by its input "
          "layouts over the artifact's mesh, one thread per rank) and "
          "returns its global outputs as read-only numpy arrays.");

  nb::class_<ShardSet>(m, "ShardSet")
      .def_static(
          "scatter",
          [](const AnyArray &array, const std::string &dtype,
             const std::optional<Layout> &layout,
             const std::vector<int64_t> &meshShape) {
            HostTensor global = hostTensorOf(array, dtype);
            if (layout) {
              std::string error =
                  layout->verifyForShape(meshShape, global.shape);
              if (!error.empty())
                throw std::invalid_argument(error);
            }
            nb::gil_scoped_release release;
            return scatterShards(global, layout, meshShape);
          },
          nb::arg("array"), nb::arg("dtype"), nb::arg("layout").none(),
          nb::arg("mesh_shape"),
          "Scatters a C-contiguous CPU array (numpy, torch, any DLPack "
          "producer) over the mesh; a replicated tensor is one buffer all "
          "ranks share.")
      .def_prop_ro("mesh_shape", [](const ShardSet &s) { return s.meshShape; })
      .def_prop_ro("global_shape",
                   [](const ShardSet &s) { return s.globalShape; })
      .def_prop_ro(
          "dtype",
          [](const ShardSet &s) { return rt::stringifyDType(s.dtype); })
      .def_prop_ro("layout", [](const ShardSet &s) { return s.layout; })
      .def_prop_ro("ranks", [](const ShardSet &s) { return s.locals.size(); })
      .def_prop_ro("donated", [](const ShardSet &s) { return s.donated; })
      .def_prop_ro(
          "distributed",
          [](const ShardSet &s) {
            for (const auto &l : s.locals)
              if (!l)
                return true;
            return false;
          },
          "Whether some ranks' shards live in other processes.")
      .def(
          "local",
          [](const ShardSet &s, int64_t rank) {
            localOf(s, rank);
            std::shared_ptr<const HostTensor> host;
            {
              nb::gil_scoped_release release;
              host = onHost(s.locals[rank]);
            }
            return viewOf(std::move(host));
          },
          nb::arg("rank"),
          "A read-only numpy view of the shard rank `rank` holds (no copy; "
          "a copy of a shard in device memory).")
      .def_prop_ro(
          "on_device",
          [](const ShardSet &s) {
            for (const auto &l : s.locals)
              if (l)
                return l->onDevice();
            return false;
          },
          "Whether the shards live in GPU memory (a GPU session's results).")
      .def(
          "device_local",
          [](const ShardSet &s, int64_t rank, int32_t deviceId) {
            const HostTensor &t = localOf(s, rank);
            if (!t.onDevice())
              throw std::invalid_argument("rank " + std::to_string(rank) +
                                          "'s shard is in host memory");
            auto *keep = new std::shared_ptr<const HostTensor>(s.locals[rank]);
            nb::capsule owner(keep, [](void *p) noexcept {
              delete static_cast<std::shared_ptr<const HostTensor> *>(p);
            });
            std::vector<size_t> shape(t.shape.begin(), t.shape.end());
            return nb::ndarray<nb::pytorch>(
                t.device->address, shape.size(), shape.data(), owner, nullptr,
                dlpackType(t.dtype), nb::device::cuda::value, deviceId);
          },
          nb::arg("rank"), nb::arg("device_id"),
          "A torch CUDA tensor over rank `rank`'s device buffer (DLPack, no "
          "copy), which must not be written: the shard is shared.")
      .def(
          "shares_buffer",
          [](const ShardSet &s, int64_t a, int64_t b) {
            return &localOf(s, a) == &localOf(s, b);
          },
          nb::arg("a"), nb::arg("b"))
      .def(
          "buffer_address",
          [](const ShardSet &s, int64_t rank) {
            const HostTensor &t = localOf(s, rank);
            return t.onDevice() ? reinterpret_cast<uintptr_t>(t.device->address)
                                : reinterpret_cast<uintptr_t>(t.data.data());
          },
          nb::arg("rank"))
      .def(
          "full",
          [](const ShardSet &s) {
            live(s);
            for (const auto &l : s.locals)
              if (!l)
                throw std::invalid_argument(
                    "the tensor's shards live in several processes: gather "
                    "it through its session (ShardedTensor.full())");
            std::string error;
            std::shared_ptr<const HostTensor> t;
            {
              nb::gil_scoped_release release;
              t = std::make_shared<const HostTensor>(gatherShards(s, error));
            }
            if (!error.empty())
              throw RunError(error);
            return viewOf<nb::ndarray<nb::numpy>>(std::move(t));
          },
          "The global tensor, assembled on demand (pending Partials "
          "reduced) into a new array.");

  nb::class_<Session>(m, "Session")
      .def(nb::init<std::vector<int64_t>, double>(), nb::arg("mesh_shape"),
           nb::arg("timeout") = 60.0)
      .def_prop_ro("mesh_shape", &Session::getMeshShape)
      .def_prop_ro("size", &Session::getSize)
      .def_prop_ro("worlds_started", &Session::getWorldsStarted)
      .def_prop_ro("device_resident", &Session::isDeviceResident,
                   "Whether results of CUDA artifacts stay in GPU memory.")
      .def_prop_ro("process_rank", &Session::getProcessRank,
                   "The rank this process runs (-1: every rank, as threads).")
      .def_static(
          "mpi",
          [](const std::vector<int64_t> &meshShape, double timeout) {
            return new Session(connectMpi(meshShape, timeout));
          },
          nb::arg("mesh_shape"), nb::arg("timeout") = 60.0,
          nb::rv_policy::take_ownership,
          "This process's rank of a mesh spread over MPI_COMM_WORLD (run "
          "under mpirun with one process per rank).")
      .def_static(
          "cuda_local",
          [](const std::vector<int64_t> &meshShape, double timeout) {
            auto *session = new Session(meshShape, timeout, rt::runCudaLocal);
            session->setDeviceResident(true);
            return session;
          },
          nb::arg("mesh_shape"), nb::arg("timeout") = 60.0,
          nb::rv_policy::take_ownership,
          "Every rank of the mesh a thread of this process on CUDA device 0 "
          "(the cuda-local communicator). Where no GPU can be used, a run "
          "fails with the driver's reason ('no CUDA driver: ...').")
      .def_static(
          "nccl",
          [](const std::vector<int64_t> &meshShape, int64_t rank,
             int64_t worldSize, nb::object exchange, double timeout) {
            // The id through `exchange`, else MPI where it runs this
            // process, else the file store (connectNccl opens NCCL and the
            // GPU first: their absence is the error to report).
            std::unique_ptr<rt::Bootstrap> bootstrap =
                exchange.is_none()
                    ? mpiBootstrapIfRunning()
                    : std::make_unique<CallbackBootstrap>(
                          rank, worldSize, nb::borrow<nb::callable>(exchange));
            std::string error;
            std::unique_ptr<rt::Communicator> comm =
                rt::connectNccl(meshShape, std::move(bootstrap), timeout, error);
            if (!comm)
              throw RunError(error);
            std::unique_ptr<rt::Communicator> host =
                rt::stageHostBuffers(*comm);
            auto *session = new Session(std::move(comm), std::move(host));
            session->setDeviceResident(true);
            return session;
          },
          nb::arg("mesh_shape"), nb::arg("rank"), nb::arg("world_size"),
          nb::arg("exchange").none(), nb::arg("timeout") = 60.0,
          nb::rv_policy::take_ownership,
          "This process's rank of a mesh of one process per GPU (NCCL). "
          "`exchange(key, data)` publishes rank 0's bytes (data) or returns "
          "them (data None); None: MPI when initialized, else the file store "
          "of SHARDX_RANK / SHARDX_WORLD_SIZE / SHARDX_STORE_DIR.")
      .def("close", &Session::close,
           "Ends the session's communicator (before finalize_mpi).")
      .def(
          "scatter",
          [](const Session &session, const AnyArray &array,
             const std::string &dtype, const std::optional<Layout> &layout) {
            HostTensor global = hostTensorOf(array, dtype);
            if (layout) {
              std::string error =
                  layout->verifyForShape(session.getMeshShape(), global.shape);
              if (!error.empty())
                throw std::invalid_argument(error);
            }
            nb::gil_scoped_release release;
            return session.scatter(global, layout);
          },
          nb::arg("array"), nb::arg("dtype"), nb::arg("layout").none(),
          "Scatters an array to the ranks this process holds.")
      .def(
          "shards_of",
          [](const Session &session, nb::list locals, const std::string &dtype,
             const std::optional<Layout> &layout,
             const std::vector<int64_t> &globalShape) {
            ShardSet set = emptyShardSet("shards_of", session, locals.size(),
                                         dtype, layout, globalShape);
            int64_t size = session.getSize();
            bool replicated = !layout || layout->isReplicated();
            std::shared_ptr<const HostTensor> shared;
            for (int64_t r = 0; r < size; ++r) {
              if (!session.holds(r))
                continue;
              if (replicated && shared) {
                set.locals[r] = shared;
                continue;
              }
              nb::handle h = locals[r];
              if (h.is_none())
                throw std::invalid_argument("shards_of: rank " +
                                            std::to_string(r) +
                                            "'s shard is missing");
              HostTensor t = hostTensorOf(nb::cast<AnyArray>(h), set.dtype);
              std::vector<int64_t> want = localShapeOf(set, r);
              if (t.shape != want)
                throw std::invalid_argument(
                    "shards_of: rank " + std::to_string(r) +
                    "'s shard has shape " + shapeText(t.shape) +
                    ", its layout gives " + shapeText(want));
              auto p = std::make_shared<const HostTensor>(std::move(t));
              if (replicated)
                shared = p;
              set.locals[r] = std::move(p);
            }
            return set;
          },
          nb::arg("locals"), nb::arg("dtype"), nb::arg("layout").none(),
          nb::arg("global_shape"),
          "The ShardSet of per-rank arrays (one entry per rank, None for "
          "ranks this process does not hold; a replicated layout keeps the "
          "first held rank's array as the one buffer all ranks share). Each "
          "array must have its rank's local shape; it is copied.")
      .def(
          "device_shards",
          [](const Session &session, nb::list locals, const std::string &dtype,
             const std::optional<Layout> &layout,
             const std::vector<int64_t> &globalShape) {
            using CudaArray =
                nb::ndarray<nb::ro, nb::c_contig, nb::device::cuda>;
            if (!session.isDeviceResident())
              throw std::invalid_argument(
                  "device_shards: the session does not run on a GPU");
            ShardSet set =
                emptyShardSet("device_shards", session, locals.size(), dtype,
                              layout, globalShape);
            for (int64_t r = 0, size = session.getSize(); r < size; ++r) {
              if (!session.holds(r))
                continue;
              nb::handle h = locals[r];
              CudaArray a;
              if (h.is_none() || !nb::try_cast(h, a, false))
                throw std::invalid_argument(
                    "device_shards: rank " + std::to_string(r) +
                    "'s shard is not a C-contiguous CUDA array");
              if (dtypeOf(a.dtype()) != set.dtype)
                throw std::invalid_argument(
                    "device_shards: rank " + std::to_string(r) +
                    "'s shard is " + dtypeName(a.dtype()) + ", not " + dtype);
              auto t = std::make_shared<HostTensor>();
              t->dtype = set.dtype;
              for (size_t d = 0; d < a.ndim(); ++d)
                t->shape.push_back(static_cast<int64_t>(a.shape(d)));
              std::vector<int64_t> want = localShapeOf(set, r);
              if (t->shape != want)
                throw std::invalid_argument(
                    "device_shards: rank " + std::to_string(r) +
                    "'s shard has shape " + shapeText(t->shape) +
                    ", its layout gives " + shapeText(want));
              // The array (a torch tensor's memory) stays alive while any
              // shard refers to it; it is released under the GIL.
              auto *keep = new nb::object(nb::borrow(h));
              auto data = std::make_shared<DeviceData>();
              data->address = const_cast<void *>(a.data());
              data->owner = std::shared_ptr<void>(keep, [](void *p) {
                nb::gil_scoped_acquire gil;
                delete static_cast<nb::object *>(p);
              });
              data->copy = shardx_rt_cuda_copy;
              t->device = std::move(data);
              set.locals[r] = std::move(t);
            }
            return set;
          },
          nb::arg("locals"), nb::arg("dtype"), nb::arg("layout").none(),
          nb::arg("global_shape"),
          "The ShardSet over per-rank CUDA arrays (torch CUDA tensors, any "
          "DLPack producer; one entry per rank, None for ranks this process "
          "does not hold), without copies: the arrays are kept alive and "
          "must not change while a run reads them.")
      .def(
          "gather",
          [](Session &session, const ShardSet &shards) {
            live(shards);
            auto t = std::make_shared<HostTensor>();
            rt::Status s;
            {
              nb::gil_scoped_release release;
              s = session.gather(shards, *t);
            }
            if (!s)
              throw RunError(s.message());
            return viewOf<nb::ndarray<nb::numpy>>(
                std::shared_ptr<const HostTensor>(std::move(t)));
          },
          nb::arg("shards"),
          "The global tensor (a collective when the ranks are processes).");

  m.def(
      "dtypes",
      [] {
        std::vector<std::tuple<std::string, int64_t, bool>> out;
        for (const rt::DTypeInfo &info : rt::kDTypes)
          if (info.type != rt::DType::Index)
            out.emplace_back(info.name, info.bytes, info.isFloat);
        return out;
      },
      "The element types arrays and shards hold, as (name, bytes, is_float) "
      "in DType order: the runtime's table (shardx/Runtime/DType.h), which "
      "shardx.dtypes mirrors.");
  m.def("finalize_mpi", [] { finalizeMpi(); });
  m.def(
      "cuda_device_ordinal",
      [] {
        const char *env = std::getenv("SHARDX_CUDA_DEVICE");
        return env ? std::atoi(env) : 0;
      },
      "The CUDA device this process's GPU sessions use ($SHARDX_CUDA_DEVICE "
      "as the runtime set it, default 0).");
  m.attr("has_mpi") = hasMpi();


  bindCalls(m);
}
