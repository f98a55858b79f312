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

#include "shardx/Exec/Session.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <stdexcept>

namespace nb = nanobind;
using namespace shardx;
using namespace shardx::exec;

namespace {

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

std::string dtypeName(nb::dlpack::dtype t) {
  using nb::dlpack::dtype_code;
  auto code = static_cast<dtype_code>(t.code);
  if (t.lanes != 1)
    return "";
  if (code == dtype_code::Float && t.bits == 32)
    return "f32";
  if (code == dtype_code::Float && t.bits == 64)
    return "f64";
  if (code == dtype_code::Float && t.bits == 16)
    return "f16";
  if (code == dtype_code::Bfloat && t.bits == 16)
    return "bf16";
  if (code == dtype_code::Int && t.bits == 64)
    return "i64";
  if (code == dtype_code::Int && t.bits == 32)
    return "i32";
  if (code == dtype_code::Int && t.bits == 16)
    return "i16";
  if (code == dtype_code::Int && t.bits == 8)
    return "i8";
  if (code == dtype_code::Bool && t.bits == 8)
    return "i1";
  return "";
}

nb::dlpack::dtype dlpackType(const std::string &name) {
  if (name == "f32")
    return nb::dtype<float>();
  if (name == "f64")
    return nb::dtype<double>();
  if (name == "i64")
    return nb::dtype<int64_t>();
  if (name == "i32")
    return nb::dtype<int32_t>();
  if (name == "i16")
    return nb::dtype<int16_t>();
  if (name == "i8")
    return nb::dtype<int8_t>();
  if (name == "i1")
    return nb::dtype<bool>();
  if (name == "f16")
    return {static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1};
  if (name == "bf16")
    return {static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
  throw std::invalid_argument("no array type for dtype " + name);
}

/// A read-only numpy array over `t`'s data that keeps `t` alive.
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
               nullptr, dlpackType(h.dtype));
}

HostTensor hostTensorOf(const AnyArray &a, const std::string &dtype) {
  HostTensor t;
  t.dtype = dtype.empty() ? dtypeName(a.dtype()) : dtype;
  if (t.dtype.empty() || elementSize(t.dtype) == 0)
    throw std::invalid_argument("unsupported array dtype");
  if (dtypeName(a.dtype()) != t.dtype)
    throw std::invalid_argument("array dtype " + dtypeName(a.dtype()) +
                                " is not " + t.dtype);
  for (size_t d = 0; d < a.ndim(); ++d)
    t.shape.push_back(static_cast<int64_t>(a.shape(d)));
  t.data.resize(a.nbytes());
  if (a.nbytes())
    std::memcpy(t.data.data(), a.data(), a.nbytes());
  return t;
}

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

nb::dict specDict(const TensorSpec &s) {
  nb::dict d;
  d["shape"] = s.shape;
  d["global_shape"] = s.globalShape;
  d["dtype"] = s.dtype;
  d["layout"] = s.layout;
  return d;
}

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

} // namespace

NB_MODULE(_shardx_rt, m) {
  m.doc() = "ShardX runtime: artifacts, resident shards, rank sessions";
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
          nb::arg("mesh_shape"), nb::arg("global_shape"), nb::arg("coords"));

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
          nb::arg("entry"));

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
      .def_prop_ro("dtype", [](const ShardSet &s) { return s.dtype; })
      .def_prop_ro("layout", [](const ShardSet &s) { return s.layout; })
      .def_prop_ro("ranks", [](const ShardSet &s) { return s.locals.size(); })
      .def(
          "local",
          [](const ShardSet &s, int64_t rank) {
            if (rank < 0 || rank >= static_cast<int64_t>(s.locals.size()))
              throw nb::index_error("rank out of range");
            return viewOf(s.locals[rank]);
          },
          nb::arg("rank"),
          "A read-only numpy view of the shard rank `rank` holds (no copy).")
      .def(
          "shares_buffer",
          [](const ShardSet &s, int64_t a, int64_t b) {
            return s.locals.at(a).get() == s.locals.at(b).get();
          },
          nb::arg("a"), nb::arg("b"))
      .def(
          "buffer_address",
          [](const ShardSet &s, int64_t rank) {
            return reinterpret_cast<uintptr_t>(s.locals.at(rank)->data.data());
          },
          nb::arg("rank"))
      .def(
          "full",
          [](const ShardSet &s) {
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
      .def(
          "run",
          [](Session &session, const PyArtifact &a, const std::string &name,
             const std::vector<const ShardSet *> &inputs) {
            const EntryPoint &entry = a.entry(name);
            std::vector<ShardSet> outputs;
            rt::Status s;
            {
              nb::gil_scoped_release release;
              s = session.run(*a.artifact, entry, inputs, outputs);
            }
            if (!s)
              throw RunError(s.message());
            return outputs;
          },
          nb::arg("artifact"), nb::arg("entry"), nb::arg("inputs"),
          "Runs an entry point on resident inputs and returns the outputs as "
          "resident shards; a failure on any rank raises one RunError naming "
          "the rank and the cause, and returns nothing.");
}
