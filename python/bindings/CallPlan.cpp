//===- CallPlan.cpp - A compiled entry point's call from Python -----------===//
//
// Part of ShardX.
//
// What `shardx.compile`'s calls run: the guards and the call of one entry
// point in C++ (CallPlan), and the base class of compiled functions that
// goes to it without running Python code (CompiledCall).
//
//===----------------------------------------------------------------------===//

#include "Binding.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>

using namespace shardx;
using namespace shardx::binding;
using namespace shardx::exec;

/// The Python exception a use of a donated tensor raises (shardx sets it to
/// `shardx.DonatedError`; RuntimeError until then).
/// (A strong reference, never released: the module lives as long as the
/// interpreter.)
static PyObject *donatedErrorType = nullptr;
/// The exception a failed run raises in a compiled call (shardx sets it to
/// `shardx.RankError`; RunError until then). Never released either.
static PyObject *rankErrorType = nullptr;
/// `numpy.ndarray` and `torch.Tensor`, found at the first array argument that
/// is not the other (torch is imported by then where the argument is its
/// tensor); never released either.
static PyObject *numpyType = nullptr, *torchType = nullptr;

void binding::raiseDonated(const std::string &message) {
  PyErr_SetString(donatedErrorType ? donatedErrorType : PyExc_RuntimeError,
                  message.c_str());
  throw nb::python_error();
}

/// `s`, unless it was donated to a run (its buffers are the run's output).
const ShardSet &binding::live(const ShardSet &s) {
  if (s.donated)
    raiseDonated("this ShardedTensor was donated to a call: its buffers now "
                 "hold the call's output; use that output instead");
  return s;
}


namespace {

/// A spec of `shardx.pytree` (the one pytree; its module docstring is the
/// format), parsed once: None for a leaf, (tuple|list, children), (dict,
/// keys, children) or (None, value, tag) for a Python constant (None, bool,
/// int, float, str). `flatten` checks a call's arguments against it and
/// collects their leaves, as `pytree.flatten` would, without running Python
/// code; `build` is `pytree.unflatten`.
struct TreeSpec {
  enum class Kind : uint8_t { Leaf, Tuple, List, Dict, Const, Named };
  Kind kind = Kind::Leaf;
  /// A constant's value: keys[0]; a named tuple's class and what makes
  /// one from a tuple of its fields (`_make`, or the struct sequence's
  /// class): keys[0], keys[1].
  std::vector<nb::object> keys;
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
    } else if (PyType_Check(type.ptr()) &&
               PyType_IsSubtype(reinterpret_cast<PyTypeObject *>(type.ptr()),
                                &PyTuple_Type)) {
      // A named tuple (shardx.pytree.is_named_tuple).
      spec.kind = Kind::Named;
      spec.keys.push_back(nb::borrow(type));
      spec.keys.push_back(nb::hasattr(type, "_make") ? type.attr("_make")
                                                     : nb::borrow(type));
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
    case Kind::Named:
    case Kind::Tuple:
      // A named tuple: exactly its class (a tuple subclass).
      if ((kind == Kind::Named
               ? reinterpret_cast<PyObject *>(Py_TYPE(o)) != keys[0].ptr()
               : !PyTuple_CheckExact(o)) ||
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
    case Kind::Tuple:
    case Kind::Named: {
      nb::object t = nb::steal(PyTuple_New(n));
      for (size_t i = 0; i < n; ++i)
        PyTuple_SET_ITEM(t.ptr(), i,
                         children[i].build(leaves, at).release().ptr());
      if (kind == Kind::Named)
        return keys[1](t);
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
  /// The slots of `tensorType` (shardx.ShardedTensor) that the runtime
  /// reads and writes: its ShardSet, mesh and guard key (documented there
  /// and in docs/Importer.md).
  nb::object shardsName = nb::str("shards"), meshName = nb::str("mesh"),
             keyName = nb::str("guard_key");
  /// What `isPlain` reads of a torch tensor.
  nb::object storageOffsetName = nb::str("storage_offset"),
             gradName = nb::str("grad"),
             requiresGradName = nb::str("requires_grad"),
             isLeafName = nb::str("is_leaf"),
             isInferenceName = nb::str("is_inference");
  /// The traits the entry was traced with where an input is not plain but
  /// the plan still takes it (`shardx.jit._plan_traits`): its exact type
  /// (`torch.Tensor` or `nn.Parameter`), requires_grad and whether `.grad`
  /// is set; a leaf, contiguous, offset 0, not an inference tensor. A null
  /// type: plain.
  struct LeafTraits {
    nb::object type;
    bool requiresGrad = false, hasGrad = false;
  };
  std::vector<LeafTraits> leafTraits;
  /// Whether array argument `i` has the traits its entry was traced with
  /// (`shardx.jit._traits`): exactly the contiguous strides of its shape,
  /// size-1 dimensions included (DLPack's contiguity ignores them), and for
  /// a torch tensor exactly `torch.Tensor` (no subclass), storage offset 0,
  /// not requiring grad, no `.grad`, not an inference tensor, or where
  /// `leafTraits[i]` says so, its type (`nn.Parameter`), requires_grad (a
  /// leaf) and `.grad` set (other devices never get here: not CPU arrays).
  /// Anything else returns NotImplemented, so that `_call_guarded` finds
  /// the entry traced with those traits.
  bool isPlain(PyObject *leaf, const AnyArray &array, size_t i) {
    int64_t expect = 1;
    for (size_t d = array.ndim(); d-- > 0;) {
      if (array.stride(d) != expect)
        return false;
      expect *= std::max<int64_t>(static_cast<int64_t>(array.shape(d)), 1);
    }
    PyObject *type = reinterpret_cast<PyObject *>(Py_TYPE(leaf));
    const LeafTraits *want =
        i < leafTraits.size() && leafTraits[i].type.is_valid() ? &leafTraits[i]
                                                               : nullptr;
    if (want) {
      if (type != want->type.ptr())
        return false;
    } else if (type != torchType) {
      if (type == numpyType)
        return true;
      if (!numpyType)
        numpyType = typeIn("numpy", "ndarray");
      if (!torchType)
        torchType = typeIn("torch", "Tensor");
      if (type == numpyType)
        return true;
      if (type != torchType)
        return false;
    }
    bool wantGrad = want && want->requiresGrad;
    nb::object requiresGrad =
        nb::steal(PyObject_GetAttr(leaf, requiresGradName.ptr()));
    if (!requiresGrad.is_valid()) {
      PyErr_Clear();
      return false;
    }
    if (requiresGrad.ptr() != (wantGrad ? Py_True : Py_False))
      return false;
    if (wantGrad) {
      nb::object isLeaf = nb::steal(PyObject_GetAttr(leaf, isLeafName.ptr()));
      if (!isLeaf.is_valid()) {
        PyErr_Clear();
        return false;
      }
      if (isLeaf.ptr() != Py_True)
        return false;
    }
    nb::object offset =
        nb::steal(PyObject_CallMethodNoArgs(leaf, storageOffsetName.ptr()));
    nb::object grad = nb::steal(PyObject_GetAttr(leaf, gradName.ptr()));
    nb::object inference =
        nb::steal(PyObject_CallMethodNoArgs(leaf, isInferenceName.ptr()));
    if (!offset.is_valid() || !grad.is_valid() || !inference.is_valid()) {
      PyErr_Clear();
      return false;
    }
    long off = PyLong_AsLong(offset.ptr());
    if (off == -1 && PyErr_Occurred())
      PyErr_Clear();
    return off == 0 && grad.is_none() == !(want && want->hasGrad) &&
           inference.ptr() == Py_False;
  }

  /// `module.name` where the module is imported already (a strong
  /// reference, never released), else null.
  static PyObject *typeIn(const char *module, const char *name) {
    nb::object m = nb::steal(PyImport_GetModule(nb::str(module).ptr()));
    if (!m.is_valid()) {
      PyErr_Clear();
      return nullptr;
    }
    nb::object t = nb::steal(PyObject_GetAttrString(m.ptr(), name));
    if (!t.is_valid()) {
      PyErr_Clear();
      return nullptr;
    }
    return t.release().ptr();
  }

  nb::object call(nb::handle args) {
    nb::object notImplemented = nb::borrow(Py_NotImplemented);
    std::vector<PyObject *> leaves;
    leaves.reserve(16);
    if (!in.flatten(args.ptr(), leaves) ||
        leaves.size() != entry->inputs.size())
      return notImplemented;
    auto *type = reinterpret_cast<PyTypeObject *>(tensorType.ptr());
    // An array passed twice is traced as one tensor (`same_as` of
    // `shardx.jit._key_traits`): never this plan's, whose entry has none.
    std::vector<PyObject *> arrays;
    arrays.reserve(leaves.size());
    for (PyObject *leaf : leaves)
      if (Py_TYPE(leaf) != type && !PyObject_TypeCheck(leaf, type))
        arrays.push_back(leaf);
    std::sort(arrays.begin(), arrays.end());
    if (std::adjacent_find(arrays.begin(), arrays.end()) != arrays.end())
      return notImplemented;
    std::vector<ShardSet *> inputs(leaves.size());
    std::vector<nb::object> keep;
    keep.reserve(16);
    std::vector<std::unique_ptr<ShardSet>> scattered;
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
      if (!isPlain(leaf, array, i))
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
  /// A callable returning the caller's torch modes (grad mode, autocast)
  /// and the value it returned when the plan's entry was traced: a call
  /// under other modes goes to `_call_guarded` (None: not checked).
  nb::object modeFn = nb::none();
  nb::object planMode = nb::none();
  /// The tensors the plan takes after the arguments, as `(args, extra)`
  /// (the parameters and buffers `shardx.compile` lifted to inputs); None:
  /// the plan takes `args` alone.
  nb::object planExtra = nb::none();
};


} // namespace

void binding::bindCalls(nb::module_ &m) {
  nb::class_<CallPlan>(m, "CallPlan")
      .def(
          "__init__",
          [](CallPlan *self, nb::object session, const PyArtifact &a,
             const std::string &entry, nb::handle inSpec, nb::handle outSpec,
             std::vector<nb::object> outKeys,
             std::vector<int64_t> donatedInputOf, nb::object tensorType,
             nb::object mesh, const std::string &name,
             std::vector<nb::object> leafTraits) {
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
            for (nb::handle t : leafTraits) {
              self->leafTraits.emplace_back();
              if (t.is_none())
                continue;
              nb::tuple tt = nb::cast<nb::tuple>(t);
              if (tt.size() != 3 || !PyType_Check(tt[0].ptr()))
                throw std::invalid_argument(
                    "leaf_traits: (type, requires_grad, has_grad) or None");
              self->leafTraits.back() = {nb::borrow(tt[0]),
                                         nb::cast<bool>(tt[1]),
                                         nb::cast<bool>(tt[2])};
            }
          },
          nb::arg("session"), nb::arg("artifact"), nb::arg("entry"),
          nb::arg("in_spec").none(), nb::arg("out_spec").none(),
          nb::arg("out_keys"), nb::arg("donated_input_of"),
          nb::arg("tensor_type"), nb::arg("mesh"), nb::arg("name"),
          nb::arg("leaf_traits") = std::vector<nb::object>())
      .def("__call__", &CallPlan::call, nb::arg("args"),
           "Runs the entry point on `args` (a tuple) when they pass the "
           "guards, else returns NotImplemented.");

  nb::class_<CompiledCall>(m, "CompiledCall")
      .def(nb::init<>())
      .def_prop_rw(
          "_plan", [](const CompiledCall &c) { return c.planObject; },
          [](CompiledCall &c, nb::object plan) {
            c.plan = plan.is_none() ? nullptr : nb::cast<CallPlan *>(plan);
            c.planObject = std::move(plan);
          },
          nb::arg("plan").none())
      .def_prop_rw(
          "_mode_fn", [](const CompiledCall &c) { return c.modeFn; },
          [](CompiledCall &c, nb::object fn) { c.modeFn = std::move(fn); },
          nb::arg("fn").none())
      .def_prop_rw(
          "_plan_mode", [](const CompiledCall &c) { return c.planMode; },
          [](CompiledCall &c, nb::object mode) {
            c.planMode = std::move(mode);
          },
          nb::arg("mode").none())
      .def_prop_rw(
          "_plan_extra", [](const CompiledCall &c) { return c.planExtra; },
          [](CompiledCall &c, nb::object extra) {
            c.planExtra = std::move(extra);
          },
          nb::arg("extra").none())
      .def("__call__", [](nb::handle self, nb::args args) -> nb::object {
        CompiledCall &c = nb::cast<CompiledCall &>(self);
        if (c.plan && !c.modeFn.is_none() && !c.planMode.is_none() &&
            !c.modeFn().equal(c.planMode))
          return self.attr("_call_guarded")(args);
        if (c.plan) {
          // Kept alive through the call (a recompile may replace it).
          nb::object keep = c.planObject;
          nb::object out =
              c.planExtra.is_none()
                  ? c.plan->call(args)
                  : c.plan->call(nb::make_tuple(args, c.planExtra));
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
