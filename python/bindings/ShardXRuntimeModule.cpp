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
#include "shardx/Layout/LayoutJson.h"
#include "shardx/Runtime/Bootstrap.h"
#include "shardx/Runtime/CudaLocal.h"
#include "shardx/Runtime/Nccl.h"
#ifdef SHARDX_HAVE_MPI
#include "shardx/Runtime/Mpi.h"
#endif

#include <vector>

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
/// An artifact that cannot be loaded.
struct LoadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using AnyArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
using NumpyArray = nb::ndarray<nb::numpy, nb::ro>;

/// The DLPack type of `type`'s arrays (the DType table's sizes and kinds).
nb::dlpack::dtype dlpackType(rt::DType type) {
  using nb::dlpack::dtype_code;
  dtype_code code = type == rt::DType::I1      ? dtype_code::Bool
                    : type == rt::DType::BF16  ? dtype_code::Bfloat
                    : rt::isFloat(type)        ? dtype_code::Float
                                               : dtype_code::Int;
  return {static_cast<uint8_t>(code),
          static_cast<uint8_t>(8 * rt::dtypeSize(type)), 1};
}

/// The element type of an array of DLPack type `t`, if ShardX has it.
std::optional<rt::DType> dtypeOf(nb::dlpack::dtype t) {
  for (const rt::DTypeInfo &info : rt::kDTypes)
    if (info.type != rt::DType::Index && dlpackType(info.type) == t)
      return info.type;
  return std::nullopt;
}

std::string dtypeName(nb::dlpack::dtype t) {
  std::optional<rt::DType> type = dtypeOf(t);
  return type ? rt::stringifyDType(*type) : "unsupported";
}

/// A dtype argument from Python (an MLIR name such as "bf16").
rt::DType parseDTypeArg(const std::string &name) {
  std::optional<rt::DType> type = rt::parseDType(name);
  if (!type)
    throw std::invalid_argument("unsupported dtype '" + name + "'");
  return *type;
}

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

HostTensor hostTensorOf(const AnyArray &a, rt::DType dtype) {
  HostTensor t;
  t.dtype = dtype;
  if (dtypeOf(a.dtype()) != dtype)
    throw std::invalid_argument("array dtype " + dtypeName(a.dtype()) +
                                " is not " + rt::stringifyDType(dtype));
  for (size_t d = 0; d < a.ndim(); ++d)
    t.shape.push_back(static_cast<int64_t>(a.shape(d)));
  t.data.resize(a.nbytes());
  if (a.nbytes())
    std::memcpy(t.data.data(), a.data(), a.nbytes());
  return t;
}

/// The same with the dtype named (empty: the array's).
HostTensor hostTensorOf(const AnyArray &a, const std::string &dtype) {
  std::optional<rt::DType> type =
      dtype.empty() ? dtypeOf(a.dtype()) : rt::parseDType(dtype);
  if (!type)
    throw std::invalid_argument("unsupported array dtype");
  return hostTensorOf(a, *type);
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
  d["dtype"] = rt::stringifyDType(s.dtype);
  d["layout"] = s.layout;
  return d;
}

/// The Python exception a use of a donated tensor raises (shardx sets it to
/// `shardx.DonatedError`; RuntimeError until then).
/// (A strong reference, never released: the module lives as long as the
/// interpreter.)
PyObject *donatedErrorType = nullptr;
/// The exception a failed run raises in a compiled call (shardx sets it to
/// `shardx.RankError`; RunError until then). Never released either.
PyObject *rankErrorType = nullptr;

[[noreturn]] void raiseDonated(const std::string &message) {
  PyErr_SetString(donatedErrorType ? donatedErrorType : PyExc_RuntimeError,
                  message.c_str());
  throw nb::python_error();
}

/// `s`, unless it was donated to a run (its buffers are the run's output).
const ShardSet &live(const ShardSet &s) {
  if (s.donated)
    raiseDonated("this ShardedTensor was donated to a call: its buffers now "
                 "hold the call's output; use that output instead");
  return s;
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

/// The structure of a pytree of tuples, lists and dicts, as
/// `shardx.jit._flatten` describes it: None for a leaf, (tuple|list,
/// children), (dict, keys, children) or (None, value, tag) for a Python
/// constant (None, bool, int, float, str).
struct TreeSpec {
  enum class Kind : uint8_t { Leaf, Tuple, List, Dict, Const };
  Kind kind = Kind::Leaf;
  std::vector<nb::object> keys; // a constant's value: keys[0]
  std::vector<TreeSpec> children;
  size_t numLeaves = 1;

  static TreeSpec parse(nb::handle h) {
    TreeSpec spec;
    if (h.is_none())
      return spec;
    nb::tuple t = nb::cast<nb::tuple>(h);
    nb::handle type = t[0];
    nb::handle children = t[1];
    if (type.is_none()) {
      spec.kind = Kind::Const;
      spec.keys.push_back(nb::borrow(t[1]));
      spec.numLeaves = 0;
      return spec;
    }
    if (type.ptr() == reinterpret_cast<PyObject *>(&PyTuple_Type)) {
      spec.kind = Kind::Tuple;
    } else if (type.ptr() == reinterpret_cast<PyObject *>(&PyList_Type)) {
      spec.kind = Kind::List;
    } else if (type.ptr() == reinterpret_cast<PyObject *>(&PyDict_Type)) {
      spec.kind = Kind::Dict;
      for (nb::handle k : nb::cast<nb::tuple>(t[1]))
        spec.keys.push_back(nb::borrow(k));
      children = t[2];
    } else {
      throw std::invalid_argument("bad tree spec");
    }
    spec.numLeaves = 0;
    for (nb::handle c : nb::cast<nb::tuple>(children)) {
      spec.children.push_back(parse(c));
      spec.numLeaves += spec.children.back().numLeaves;
    }
    return spec;
  }

  /// Appends the leaves of `o` (borrowed); false when `o` has another
  /// structure.
  bool flatten(PyObject *o, std::vector<PyObject *> &leaves) const {
    size_t n = children.size();
    switch (kind) {
    case Kind::Leaf:
      leaves.push_back(o);
      return true;
    case Kind::Const:
      return sameConstant(o, keys[0].ptr());
    case Kind::Tuple:
      if (!PyTuple_CheckExact(o) ||
          static_cast<size_t>(PyTuple_GET_SIZE(o)) != n)
        return false;
      for (size_t i = 0; i < n; ++i)
        if (!children[i].flatten(PyTuple_GET_ITEM(o, i), leaves))
          return false;
      return true;
    case Kind::List:
      if (!PyList_CheckExact(o) || static_cast<size_t>(PyList_GET_SIZE(o)) != n)
        return false;
      for (size_t i = 0; i < n; ++i)
        if (!children[i].flatten(PyList_GET_ITEM(o, i), leaves))
          return false;
      return true;
    case Kind::Dict: {
      if (!PyDict_CheckExact(o) || static_cast<size_t>(PyDict_GET_SIZE(o)) != n)
        return false;
      Py_ssize_t pos = 0;
      PyObject *key, *value;
      for (size_t i = 0; PyDict_Next(o, &pos, &key, &value); ++i) {
        if (key != keys[i].ptr()) {
          int same = PyObject_RichCompareBool(key, keys[i].ptr(), Py_EQ);
          if (same != 1) {
            PyErr_Clear();
            return false;
          }
        }
        if (!children[i].flatten(value, leaves))
          return false;
      }
      return true;
    }
    }
    return false;
  }

  /// Whether `o` is the constant `c`: the same type and value; floats bit
  /// for bit (-0.0 is not 0.0), every NaN equal to every NaN.
  static bool sameConstant(PyObject *o, PyObject *c) {
    if (o == c)
      return true;
    if (Py_TYPE(o) != Py_TYPE(c))
      return false;
    if (PyFloat_CheckExact(o)) {
      double a = PyFloat_AS_DOUBLE(o), b = PyFloat_AS_DOUBLE(c);
      return (a != a && b != b) || std::memcmp(&a, &b, sizeof a) == 0;
    }
    int same = PyObject_RichCompareBool(o, c, Py_EQ);
    if (same < 0)
      PyErr_Clear();
    return same == 1;
  }

  /// The tree of this structure over `leaves` (from `at` on).
  nb::object build(std::vector<nb::object> &leaves, size_t &at) const {
    size_t n = children.size();
    switch (kind) {
    case Kind::Leaf:
      return std::move(leaves[at++]);
    case Kind::Const:
      return keys[0];
    case Kind::Tuple: {
      nb::object t = nb::steal(PyTuple_New(n));
      for (size_t i = 0; i < n; ++i)
        PyTuple_SET_ITEM(t.ptr(), i,
                         children[i].build(leaves, at).release().ptr());
      return t;
    }
    case Kind::List: {
      nb::object l = nb::steal(PyList_New(n));
      for (size_t i = 0; i < n; ++i)
        PyList_SET_ITEM(l.ptr(), i,
                        children[i].build(leaves, at).release().ptr());
      return l;
    }
    case Kind::Dict: {
      nb::dict d;
      for (size_t i = 0; i < n; ++i)
        d[keys[i]] = children[i].build(leaves, at);
      return std::move(d);
    }
    }
    return nb::none();
  }
};

/// One compiled entry point's call from Python, guards included: the
/// inputs' structure, and per tensor its global shape, dtype, layout and
/// mesh, against what the entry point was compiled for. A call that fails
/// a guard returns NotImplemented (shardx.jit then finds or compiles the
/// right entry and logs why); one that passes runs with the GIL released
/// and returns the outputs as `ShardedTensor`s in the traced structure.
struct CallPlan {
  nb::object sessionObject;
  Session *session;
  std::shared_ptr<Artifact> artifact;
  const EntryPoint *entry;
  std::string name;
  TreeSpec in, out;
  std::vector<nb::object> outKeys;
  std::vector<int64_t> donatedInputOf;
  nb::object tensorType, mesh;
  nb::object shardsName = nb::str("_shards"), meshName = nb::str("mesh"),
             keyName = nb::str("_key");

  nb::object call(nb::handle args) {
    nb::object notImplemented = nb::borrow(Py_NotImplemented);
    std::vector<PyObject *> leaves;
    leaves.reserve(16);
    if (!in.flatten(args.ptr(), leaves) ||
        leaves.size() != entry->inputs.size())
      return notImplemented;
    std::vector<ShardSet *> inputs(leaves.size());
    std::vector<nb::object> keep;
    keep.reserve(16);
    std::vector<std::unique_ptr<ShardSet>> scattered;
    auto *type = reinterpret_cast<PyTypeObject *>(tensorType.ptr());
    for (size_t i = 0; i < leaves.size(); ++i) {
      PyObject *leaf = leaves[i];
      const TensorSpec &spec = entry->inputs[i];
      if (Py_TYPE(leaf) == type || PyObject_TypeCheck(leaf, type)) {
        nb::object shards = nb::steal(PyObject_GetAttr(leaf, shardsName.ptr()));
        if (!shards.is_valid()) {
          PyErr_Clear();
          return notImplemented;
        }
        if (!nb::isinstance<ShardSet>(shards))
          return notImplemented;
        ShardSet *set = nb::inst_ptr<ShardSet>(shards);
        if (set->donated)
          raiseDonated("input " + std::to_string(i) + " of " + name +
                       " was donated to an earlier call: its buffers now "
                       "hold that call's output; pass the output instead");
        std::string why;
        if (set->meshShape != session->getMeshShape() ||
            !set->matches(spec, why))
          return notImplemented;
        inputs[i] = set;
        keep.push_back(std::move(shards));
        continue;
      }
      // A CPU array (numpy, torch): scattered by the entry's layout.
      AnyArray array;
      if (!nb::try_cast(nb::handle(leaf), array, false)) {
        PyErr_Clear();
        return notImplemented;
      }
      if (dtypeOf(array.dtype()) != spec.dtype ||
          array.ndim() != spec.globalShape.size())
        return notImplemented;
      for (size_t d = 0; d < array.ndim(); ++d)
        if (static_cast<int64_t>(array.shape(d)) != spec.globalShape[d])
          return notImplemented;
      HostTensor global = hostTensorOf(array, spec.dtype);
      scattered.push_back(
          std::make_unique<ShardSet>(session->scatter(global, spec.layout)));
      inputs[i] = scattered.back().get();
    }
    std::vector<ShardSet> outputs;
    rt::Status status;
    {
      nb::gil_scoped_release release;
      status = session->run(*artifact, *entry, inputs, outputs, donatedInputOf,
                            /*inputsChecked=*/true);
    }
    if (!status) {
      if (!rankErrorType)
        throw RunError(status.message());
      PyErr_SetString(rankErrorType, status.message().c_str());
      throw nb::python_error();
    }
    std::vector<nb::object> results;
    results.reserve(8);
    for (size_t o = 0; o < outputs.size(); ++o) {
      nb::object tensor = nb::steal(type->tp_alloc(type, 0));
      if (!tensor.is_valid())
        throw nb::python_error();
      nb::object shards = nb::cast(std::move(outputs[o]));
      if (PyObject_SetAttr(tensor.ptr(), shardsName.ptr(), shards.ptr()) ||
          PyObject_SetAttr(tensor.ptr(), meshName.ptr(), mesh.ptr()) ||
          PyObject_SetAttr(tensor.ptr(), keyName.ptr(), outKeys[o].ptr()))
        throw nb::python_error();
      results.push_back(std::move(tensor));
    }
    size_t at = 0;
    return out.build(results, at);
  }
};

/// The base of `shardx.jit.CompiledFunction`: its call goes to the plan of
/// the entry the last call used, and to the Python method `_call_guarded`
/// (guards with reasons, compiles) when there is none or a guard fails, so
/// a call that passes the guards runs no Python code.
struct CompiledCall {
  nb::object planObject = nb::none();
  CallPlan *plan = nullptr;
};

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
      .def_prop_ro("dtype",
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
            return viewOf(s.locals[rank]);
          },
          nb::arg("rank"),
          "A read-only numpy view of the shard rank `rank` holds (no copy).")
      .def(
          "shares_buffer",
          [](const ShardSet &s, int64_t a, int64_t b) {
            return &localOf(s, a) == &localOf(s, b);
          },
          nb::arg("a"), nb::arg("b"))
      .def(
          "buffer_address",
          [](const ShardSet &s, int64_t rank) {
            return reinterpret_cast<uintptr_t>(localOf(s, rank).data.data());
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
      .def_prop_ro("process_rank", &Session::getProcessRank,
                   "The rank this process runs (-1: every rank, as threads).")
      .def_static(
          "mpi",
          [](const std::vector<int64_t> &meshShape, double timeout) {
#ifdef SHARDX_HAVE_MPI
            static bool initialized = false;
            if (!initialized) {
              if (rt::Status s = rt::initMpi(nullptr, nullptr); !s)
                throw RunError(s.message());
              initialized = true;
            }
            std::string error;
            std::unique_ptr<rt::Communicator> comm =
                rt::createMpiCommunicator(meshShape, timeout, error);
            if (!comm)
              throw RunError(error);
            return new Session(std::move(comm));
#else
            (void)meshShape;
            (void)timeout;
            throw std::invalid_argument(
                "this ShardX build has no mpi backend (CMake found no MPI)");
            return static_cast<Session *>(nullptr);
#endif
          },
          nb::arg("mesh_shape"), nb::arg("timeout") = 60.0,
          nb::rv_policy::take_ownership,
          "This process's rank of a mesh spread over MPI_COMM_WORLD (run "
          "under mpirun with one process per rank).")
      .def_static(
          "cuda_local",
          [](const std::vector<int64_t> &meshShape, double timeout) {
            return new Session(meshShape, timeout, rt::runCudaLocal);
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
            // NCCL and the GPU first: their absence is the error to report.
            if (rt::Status s = rt::openNcclDevice(); !s)
              throw RunError(s.message());
            std::string error;
            std::unique_ptr<rt::Bootstrap> bootstrap;
            if (!exchange.is_none()) {
              bootstrap = std::make_unique<CallbackBootstrap>(
                  rank, worldSize, nb::borrow<nb::callable>(exchange));
            } else {
#ifdef SHARDX_HAVE_MPI
              if (rt::isMpiInitialized())
                bootstrap = rt::createMpiBootstrap();
#endif
              if (!bootstrap)
                bootstrap = rt::createFileStoreBootstrapFromEnv(timeout, error);
              if (!bootstrap)
                throw RunError(error);
            }
            std::unique_ptr<rt::Communicator> comm =
                rt::createNcclCommunicator(meshShape, *bootstrap, timeout,
                                           error);
            if (!comm)
              throw RunError(error);
            std::unique_ptr<rt::Communicator> host =
                rt::stageHostBuffers(*comm);
            return new Session(std::move(comm), std::move(host));
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
            const std::vector<int64_t> &mesh = session.getMeshShape();
            if (layout) {
              std::string error = layout->verifyForShape(mesh, globalShape);
              if (!error.empty())
                throw std::invalid_argument(error);
            }
            int64_t size = session.getSize();
            if (static_cast<int64_t>(locals.size()) != size)
              throw std::invalid_argument(
                  "shards_of: " + std::to_string(locals.size()) +
                  " entries for a mesh of " + std::to_string(size) + " ranks");
            ShardSet set;
            set.meshShape = mesh;
            set.globalShape = globalShape;
            set.dtype = parseDTypeArg(dtype);
            set.layout = layout;
            set.locals.assign(size, nullptr);
            bool replicated = !layout || layout->isReplicated();
            std::vector<std::vector<int64_t>> coords = allMeshCoords(mesh);
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
              std::vector<int64_t> want =
                  replicated ? globalShape
                             : layout->getLocalShard(mesh, globalShape,
                                                     coords[r])
                                   .shape;
              if (t.shape != want) {
                auto text = [](const std::vector<int64_t> &v) {
                  std::string s = "[";
                  for (size_t i = 0; i < v.size(); ++i)
                    s += (i ? ", " : "") + std::to_string(v[i]);
                  return s + "]";
                };
                throw std::invalid_argument(
                    "shards_of: rank " + std::to_string(r) + "'s shard has "
                    "shape " + text(t.shape) + ", its layout gives " +
                    text(want));
              }
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

  nb::class_<CallPlan>(m, "CallPlan")
      .def(
          "__init__",
          [](CallPlan *self, nb::object session, const PyArtifact &a,
             const std::string &entry, nb::handle inSpec, nb::handle outSpec,
             std::vector<nb::object> outKeys,
             std::vector<int64_t> donatedInputOf, nb::object tensorType,
             nb::object mesh, const std::string &name) {
            const EntryPoint &e = a.entry(entry);
            TreeSpec in = TreeSpec::parse(inSpec),
                     out = TreeSpec::parse(outSpec);
            if (in.numLeaves != e.inputs.size() ||
                out.numLeaves != e.outputs.size() ||
                outKeys.size() != e.outputs.size())
              throw std::invalid_argument(
                  "the tree specs do not match " + entry + "'s " +
                  std::to_string(e.inputs.size()) + " inputs and " +
                  std::to_string(e.outputs.size()) + " outputs");
            if (!PyType_Check(tensorType.ptr()))
              throw std::invalid_argument("tensor_type must be a type");
            Session *s = nb::cast<Session *>(session);
            new (self) CallPlan{std::move(session),
                                s,
                                a.artifact,
                                &e,
                                name,
                                std::move(in),
                                std::move(out),
                                std::move(outKeys),
                                std::move(donatedInputOf),
                                std::move(tensorType),
                                std::move(mesh)};
          },
          nb::arg("session"), nb::arg("artifact"), nb::arg("entry"),
          nb::arg("in_spec").none(), nb::arg("out_spec").none(),
          nb::arg("out_keys"),
          nb::arg("donated_input_of"), nb::arg("tensor_type"), nb::arg("mesh"),
          nb::arg("name"))
      .def("__call__", &CallPlan::call, nb::arg("args"),
           "Runs the entry point on `args` (a tuple) when they pass the "
           "guards, else returns NotImplemented.");

  m.def("finalize_mpi", [] {
#ifdef SHARDX_HAVE_MPI
    rt::finalizeMpi();
#endif
  });
  m.attr("has_mpi") =
#ifdef SHARDX_HAVE_MPI
      true;
#else
      false;
#endif

  nb::class_<CompiledCall>(m, "CompiledCall")
      .def(nb::init<>())
      .def_prop_rw(
          "_plan", [](const CompiledCall &c) { return c.planObject; },
          [](CompiledCall &c, nb::object plan) {
            c.plan = plan.is_none() ? nullptr : nb::cast<CallPlan *>(plan);
            c.planObject = std::move(plan);
          },
          nb::arg("plan").none())
      .def("__call__", [](nb::handle self, nb::args args) -> nb::object {
        CompiledCall &c = nb::cast<CompiledCall &>(self);
        if (c.plan) {
          // Kept alive through the call (a recompile may replace it).
          nb::object keep = c.planObject;
          nb::object out = c.plan->call(args);
          if (out.ptr() != Py_NotImplemented)
            return out;
        }
        return self.attr("_call_guarded")(args);
      });

  auto exceptionType = [](nb::object type) {
    if (!PyType_Check(type.ptr()) ||
        !PyType_IsSubtype(reinterpret_cast<PyTypeObject *>(type.ptr()),
                          reinterpret_cast<PyTypeObject *>(PyExc_Exception)))
      throw std::invalid_argument("not an exception type");
    return type.release().ptr();
  };
  m.def(
      "set_error_types",
      [exceptionType](nb::object donated, nb::object rank) {
        Py_XDECREF(donatedErrorType);
        donatedErrorType = exceptionType(std::move(donated));
        Py_XDECREF(rankErrorType);
        rankErrorType = exceptionType(std::move(rank));
      },
      nb::arg("donated"), nb::arg("rank"),
      "The exceptions a use of a donated tensor and a failed run in a "
      "compiled call raise (constructed from the message).");
}
