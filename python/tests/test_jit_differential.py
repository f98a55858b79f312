"""A differential harness for shardx.compile: property-based tests
(hypothesis) of small generated programs against eager PyTorch.

A program is drawn from a grammar (``Program``): 1-3 tensor inputs of one
shape and dtype (f32 or f64), maybe a Python scalar argument, elementwise
aten ops (exact IEEE ones and transcendental ones), in-place updates of
inputs (directly and through views) and of intermediates, terminal
shape-changing ops (transpose, slices, reshape, reductions) and an output
structure (a bare tensor, tuples, lists, dicts with None and Python
values); a quarter of the programs also return the gradient of their
outputs' sum with respect to their inputs, taken inside the function.
Each program is compiled once for a mesh (1-D or 2-D) and input
placements (sharded, uneven, replicated) and called several times with
argument patterns: fresh tensors, one tensor passed twice, views
(transposed, sliced, partly overlapping), ShardedTensors, numpy arrays, special values
(NaN, inf, -0.0), another scalar value and another shape. Every call is
checked against eager on copies of the same arguments: the result pytree,
the dtype and values of each tensor, and the caller's tensors afterwards.

Numbers: f64 programs made only of operations that eager computes exactly
as the compiled code does (+, -, *, /, comparisons, min/max, abs, neg,
floor/ceil/round, remainder, slices, amax) must match eager bit for bit;
f64 programs with sqrt (eager's is not correctly rounded on CPU),
transcendental ops, matmuls or reductions (whose summation order differs)
within rtol = atol = 1e-12; f32 programs within rtol 1e-5, atol 1e-6, their
gradients within atol 1e-5 (``GRAD_ATOL_F32``). NaN must sit exactly where
eager has NaN (``equal_nan``).

Budget (docs/Testing.md): two runs, a fixed seed and one derived from the
date (``SHARDX_JIT_FUZZ_SEED`` overrides it), ``SHARDX_JIT_FUZZ_EXAMPLES``
programs each (default 150, 2-4 calls per program: about 400 calls and
100 compiles per run, 30-45 s on 2 cores). Every failure it
finds becomes a test in test_jit_semantics.py.
"""

import datetime
import os
from dataclasses import dataclass
from typing import Tuple

import pytest
import torch
import torch.utils._pytree as pytree
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import shardx
from shardx import Mesh, Replicate, Shard, ShardedTensor

EXAMPLES = int(os.environ.get("SHARDX_JIT_FUZZ_EXAMPLES", "150"))
FIXED_SEED = 29
ROTATING_SEED = int(os.environ.get("SHARDX_JIT_FUZZ_SEED")
                    or datetime.date.today().strftime("%Y%m%d"))

# -- the grammar ------------------------------------------------------------

#: Elementwise ops on tensors of the program's shape: name -> (arity,
#: correctly rounded in IEEE arithmetic, eager function; ``s`` is the
#: program's Python scalar).
ELEMENTWISE = {
    "add": (2, True, lambda x, y, s: x + y),
    "sub": (2, True, lambda x, y, s: x - y),
    "mul": (2, True, lambda x, y, s: x * y),
    "div": (2, True, lambda x, y, s: x / y),
    "maximum": (2, True, lambda x, y, s: torch.maximum(x, y)),
    "minimum": (2, True, lambda x, y, s: torch.minimum(x, y)),
    "where": (3, True, lambda x, y, z, s: torch.where(x > 0, y, z)),
    "neg": (1, True, lambda x, s: -x),
    "abs": (1, True, lambda x, s: x.abs()),
    "relu": (1, True, lambda x, s: torch.relu(x)),
    # Eager f64 sqrt is not correctly rounded on CPU (0.22937128697459663:
    # torch 0.4789272251340454, math.sqrt and the compiled code
    # 0.47892722513404545), so sqrt is compared at 1e-12.
    "sqrt_abs": (1, False, lambda x, s: x.abs().sqrt()),
    "scale": (1, True, lambda x, s: x * s),
    "shift": (1, True, lambda x, s: x + s),
    "rsub_scalar": (1, True, lambda x, s: s - x),
    "square": (1, True, lambda x, s: x * x),
    "clamp": (1, True, lambda x, s: x.clamp(-0.5, 0.5)),
    "floor": (1, True, lambda x, s: torch.floor(x)),
    "ceil": (1, True, lambda x, s: torch.ceil(x)),
    "round": (1, True, lambda x, s: torch.round(x * 4)),
    "sign": (1, True, lambda x, s: torch.sign(x)),
    "remainder": (2, True, lambda x, y, s: torch.remainder(x, y)),
    "floordiv": (2, True, lambda x, y, s: torch.div(x, y, rounding_mode="floor")),
    "pow_scalar": (1, False, lambda x, s: x.abs() ** s),
    "exp": (1, False, lambda x, s: torch.exp(x)),
    "tanh": (1, False, lambda x, s: torch.tanh(x)),
    "sigmoid": (1, False, lambda x, s: torch.sigmoid(x)),
}

#: Terminal ops (their result is only an output): name -> (exact, fn).
TERMINAL = {
    "id": (True, lambda x: x),
    "t": (True, lambda x: x.t()),
    "rows": (True, lambda x: x[1:]),
    "col": (True, lambda x: x[:, 0]),
    "flat": (True, lambda x: x.reshape(-1)),
    "sum0": (False, lambda x: x.sum(0)),
    "sum1": (False, lambda x: x.sum(1, keepdim=True)),
    "amax": (True, lambda x: x.amax(0)),
    "mean": (False, lambda x: x.mean()),
    "gram": (False, lambda x: x @ x.t()),
    "softmax": (False, lambda x: torch.softmax(x, 1)),
    "cumsum": (False, lambda x: x.cumsum(0)),
    "to_f64": (True, lambda x: x.to(torch.float64)),
}

#: In-place updates of an input: name -> fn(target, other, s).
INPLACE = {
    "add_": lambda t, o, s: t.add_(o),
    "mul_scalar_": lambda t, o, s: t.mul_(s),
    "copy_": lambda t, o, s: t.copy_(o),
    "row0_add_": lambda t, o, s: t[0].add_(1.0),  # through a view
    "clamp_min_": lambda t, o, s: t.clamp_min_(0.0),
}

OUT_KINDS = ("bare", "tuple", "dict", "nested")


@dataclass(frozen=True)
class Program:
    dtype: str
    n_inputs: int
    scalar: bool  # a Python scalar argument after the tensors
    args_kind: str  # "positional" or "dict" (one dict argument)
    pre: Tuple[Tuple[str, int, int], ...]  # in-place updates before the ops
    ops: Tuple[Tuple, ...]  # (name, operand values...)
    post: Tuple[Tuple[str, int, int], ...]  # in-place updates after the ops
    temp_inplace: bool  # the last op's value is scaled in place
    outputs: Tuple[Tuple[str, int], ...]  # (terminal, value)
    out_kind: str
    # The gradient of the outputs' sum with respect to the inputs that
    # require grad, taken inside the function (no in-place updates then:
    # eager refuses them on such leaves); the call makes its torch tensors
    # require grad.
    grad: bool = False

    @property
    def writes(self):
        return sorted({t for _, t, _ in self.pre + self.post})

    @property
    def exact(self):
        return (all(ELEMENTWISE[o[0]][1] for o in self.ops)
                and all(TERMINAL[t][0] for t, _ in self.outputs))

    def fn(self):
        """The program as a Python function (what eager and shardx.compile
        both run)."""
        prog = self

        def program(*args):
            if prog.args_kind == "dict":
                d = args[0]
                tensors = [d[f"t{i}"] for i in range(prog.n_inputs)]
                s = d.get("s", 2.0)
            else:
                tensors = list(args[:prog.n_inputs])
                s = args[prog.n_inputs] if prog.scalar else 2.0
            for name, t, o in prog.pre:
                INPLACE[name](tensors[t], tensors[o], s)
            env = list(tensors)
            for name, *operands in prog.ops:
                env.append(ELEMENTWISE[name][2](*[env[i] for i in operands], s))
            if prog.temp_inplace and len(env) > prog.n_inputs:
                env[-1].mul_(3.0)
            for name, t, o in prog.post:
                INPLACE[name](tensors[t], env[o] if o < len(env) else tensors[0], s)
            outs = [TERMINAL[name][1](env[v]) for name, v in prog.outputs]
            if prog.grad:
                terms = [o.sum() for o in outs if o.requires_grad]
                wrt = [t for t in tensors if isinstance(t, torch.Tensor) and t.requires_grad]
                if terms and wrt:
                    outs += [g if g is not None else torch.zeros(())
                             for g in torch.autograd.grad(sum(terms), wrt, allow_unused=True)]
            if prog.out_kind == "bare":
                return outs[0]
            if prog.out_kind == "tuple":
                return tuple(outs)
            if prog.out_kind == "dict":
                return {"out": outs, "none": None, "n": 3, "s": s}
            return [outs[0], (None, {"rest": tuple(outs[1:]), "flag": True})]

        program.__name__ = "program"
        return program


@st.composite
def programs(draw):
    n = draw(st.integers(1, 3))
    n_values = n
    ops = []
    for _ in range(draw(st.integers(0, 4))):
        name = draw(st.sampled_from(sorted(ELEMENTWISE)))
        arity = ELEMENTWISE[name][0]
        ops.append((name, *[draw(st.integers(0, n_values - 1)) for _ in range(arity)]))
        n_values += 1
    inplace = st.tuples(st.sampled_from(sorted(INPLACE)), st.integers(0, n - 1),
                        st.integers(0, n - 1))
    pre = tuple(draw(st.lists(inplace, max_size=1))) if draw(st.integers(0, 3)) == 0 else ()
    post = ()
    if draw(st.integers(0, 4)) == 0:
        name, t, _ = draw(inplace)
        post = ((name, t, draw(st.integers(0, n_values - 1))),)
    outputs = tuple(draw(st.lists(st.tuples(st.sampled_from(sorted(TERMINAL)),
                                            st.integers(0, n_values - 1)),
                                  min_size=1, max_size=3)))
    out_kind = draw(st.sampled_from(OUT_KINDS))
    if out_kind == "bare":
        outputs = outputs[:1]
    grad = draw(st.integers(0, 3)) == 0
    if grad:
        pre = post = ()
    return Program(draw(st.sampled_from(["f64", "f32"])), n, draw(st.booleans()),
                   draw(st.sampled_from(["positional", "positional", "dict"])), pre,
                   tuple(ops), post, draw(st.booleans()) and bool(ops), outputs, out_kind,
                   grad)


MESHES = {"1d": Mesh((2,), ("x",)), "2d": Mesh((2, 2), ("x", "y"))}
PLACEMENTS = [Shard(0), Shard(1), Replicate()]

# -- arguments --------------------------------------------------------------


@dataclass(frozen=True)
class Pattern:
    """How one call's arguments are made: values from ``seed``; ``alias``
    (input i gets input j's tensor), ``view`` (0: contiguous, 1: a
    transposed copy's transpose, 2: a slice of a larger tensor), ``overlap``
    (inputs 0 and 1 are overlapping slices of one tensor), ``sharded``
    (inputs passed as ShardedTensors), ``numpy`` (as numpy arrays that
    share the tensor's memory), ``special`` (NaN, inf, -0.0 in the
    values), the scalar and the shape."""
    seed: int
    alias: Tuple[Tuple[int, int], ...]
    view: int
    overlap: bool
    sharded: Tuple[int, ...]
    numpy: Tuple[int, ...]
    special: bool
    scalar: float
    shape: Tuple[int, int]


def patterns(prog: Program, shape):
    n = prog.n_inputs
    alias = st.just(())
    if n > 1:
        alias = st.lists(st.tuples(st.integers(1, n - 1), st.integers(0, n - 2)),
                         max_size=1).map(lambda l: tuple((i, j) for i, j in l if j < i))
    return st.builds(
        Pattern, st.integers(0, 2**16), alias, st.sampled_from([0, 0, 1, 2]),
        st.just(False) if n < 2 else st.sampled_from([False, False, False, True]),
        st.lists(st.integers(0, n - 1), max_size=n, unique=True).map(tuple),
        st.lists(st.integers(0, n - 1), max_size=1).map(tuple),
        st.sampled_from([False, False, True]),
        st.sampled_from([2.0, 2.0, -1.5, 0.5, 3]),
        st.sampled_from([shape, shape, shape, (shape[0] + 1, shape[1])]))


def make_args(prog: Program, pat: Pattern, dtype):
    """The call's arguments (torch only) and, per input, whether a view
    that overlaps another input partly; built the same each time."""
    g = torch.Generator().manual_seed(pat.seed)
    r, c = pat.shape
    tensors = []
    partial = set()
    if pat.overlap:
        base = torch.randn(r + 1, c, generator=g, dtype=dtype)
        tensors = [base[:r], base[1:r + 1]]
        partial = {0, 1}
    while len(tensors) < prog.n_inputs:
        if pat.view == 1:
            t = torch.randn(c, r, generator=g, dtype=dtype).t()
        elif pat.view == 2:
            t = torch.randn(r + 2, c, generator=g, dtype=dtype)[1:r + 1]
        else:
            t = torch.randn(r, c, generator=g, dtype=dtype)
        tensors.append(t)
    if pat.special:
        flat = tensors[0].view(-1) if tensors[0].is_contiguous() else None
        if flat is not None and flat.numel() >= 3:
            flat[0], flat[1], flat[2] = float("nan"), float("inf"), -0.0
    for i, j in pat.alias:
        if i not in partial and j not in partial:
            tensors[i] = tensors[j]
    return tensors, partial


def args_of(prog: Program, tensors, scalar):
    if prog.args_kind == "dict":
        d = {f"t{i}": t for i, t in enumerate(tensors)}
        if prog.scalar:
            d["s"] = scalar
        return (d,)
    return tuple(tensors) + ((scalar,) if prog.scalar else ())


def clone_keeping_aliases(tensors):
    """Copies for eager: the same tensor twice stays one tensor (one
    object), views of one base stay views of one copy of the base;
    requires_grad as each has it."""
    bases, copies, out = {}, {}, []
    for t in tensors:
        if id(t) not in copies:
            key = t.untyped_storage().data_ptr()
            if key not in bases:
                bases[key] = t.untyped_storage().clone()
            with torch.no_grad():
                c = torch.empty(0, dtype=t.dtype).set_(
                    bases[key], t.storage_offset(), t.shape, t.stride())
            copies[id(t)] = c.requires_grad_(t.requires_grad)
        out.append(copies[id(t)])
    return out


#: The absolute tolerance of an f32 program's gradients (torch.testing's
#: f32 default). A gradient can be a cancellation that the chain rule then
#: multiplies: d/dx sum(softmax(exp(x) ** 2)) is 0 in real arithmetic,
#: y - y * sum(y) times dv/dx = 2v. Eager's f32 row sum of y happened to be
#: 1 and its gradient 0; a softmax sharded on its row sums the row's halves
#: apart (rank-local partial sums, then the all-reduce), its sum of the
#: exponentials was 1 ulp larger, sum(y) 1 - 2 ulp, and the residue times
#: 2v = 10.7 is 1.27e-6 (one ulp at 10.7 is 9.5e-7; seed 20261130).
GRAD_ATOL_F32 = 1e-5


def tolerance(prog: Program, grad=False):
    if prog.dtype == "f32":
        return dict(rtol=1e-5, atol=GRAD_ATOL_F32 if grad else 1e-6)
    return dict(rtol=0, atol=0) if prog.exact else dict(rtol=1e-12, atol=1e-12)


def check_same(got, want, tol, what, grad_tol=None, n_forward=None):
    """``got`` against ``want``; tensor leaves from the ``n_forward``-th on
    (the gradients, which every output kind puts after the forward
    outputs) within ``grad_tol``, the others within ``tol``."""
    g_leaves, g_def = pytree.tree_flatten(got)
    w_leaves, w_def = pytree.tree_flatten(want)
    assert g_def == w_def, f"{what}: structure {g_def} != {w_def}"
    k = 0
    for i, (g, w) in enumerate(zip(g_leaves, w_leaves)):
        if isinstance(w, torch.Tensor):
            g = torch.from_numpy(g.full().copy()) if isinstance(g, ShardedTensor) else g
            assert g.dtype == w.dtype, f"{what}: leaf {i}: dtype {g.dtype} != {w.dtype}"
            t = grad_tol if grad_tol is not None and k >= n_forward else tol
            k += 1
            torch.testing.assert_close(g, w.detach(), equal_nan=True, check_stride=False, **t,
                                       msg=lambda m: f"{what}: leaf {i}: {m}")
        else:
            assert type(g) is type(w) and (g == w or (g != g and w != w)), \
                f"{what}: leaf {i}: {g!r} != {w!r}"


def run_case(data, prog: Program):
    dtype = {"f32": torch.float32, "f64": torch.float64}[prog.dtype]
    mesh = MESHES[data.draw(st.sampled_from(sorted(MESHES)), label="mesh")]
    shape = data.draw(st.tuples(st.integers(2, 5), st.integers(2, 5)), label="shape")
    in_pl = [data.draw(st.tuples(*[st.sampled_from(PLACEMENTS)] * mesh.ndim), label=f"in {i}")
             for i in range(prog.n_inputs)]
    fn = prog.fn()
    compiled = shardx.compile(fn, mesh, [list(p) for p in in_pl])
    calls = data.draw(st.lists(patterns(prog, shape), min_size=2, max_size=4), label="calls")
    for k, pat in enumerate(calls):
        what = f"call {k} ({pat})"
        tensors, partial = make_args(prog, pat, dtype)
        before = [t.clone() for t in tensors]
        passed = list(tensors)
        for i in pat.sharded:
            if i not in partial and not any(i in a for a in pat.alias):
                passed[i] = ShardedTensor.from_torch(tensors[i], mesh, list(in_pl[i]))
        for i in pat.numpy:
            if not isinstance(passed[i], ShardedTensor):
                passed[i] = tensors[i].numpy()  # shares the tensor's memory
        if prog.grad:
            # Torch tensors only (eager's copies are torch tensors, and
            # those of one object one object).
            passed = list(tensors)
            for t in tensors:
                t.requires_grad_()
        eager_tensors = clone_keeping_aliases(tensors)
        written = set(prog.writes)
        if partial & written:
            # A written input that partly overlaps another: refused before
            # anything runs (docs/Importer.md).
            with pytest.raises(ValueError, match="modified in place and shares memory"):
                compiled(*args_of(prog, passed, pat.scalar))
            for t, b in zip(tensors, before):
                torch.testing.assert_close(t, b, rtol=0, atol=0, equal_nan=True)
            continue
        want = fn(*args_of(prog, eager_tensors, pat.scalar))
        got = compiled(*args_of(prog, passed, pat.scalar))
        check_same(got, want, tolerance(prog), what, tolerance(prog, grad=True),
                   len(prog.outputs))
        # The caller's tensors end as eager leaves them.
        for i, (p, e) in enumerate(zip(passed, eager_tensors)):
            value = torch.from_numpy(p.full().copy()) if isinstance(p, ShardedTensor) else tensors[i]
            torch.testing.assert_close(value, e, equal_nan=True, check_stride=False,
                                       **tolerance(prog),
                                       msg=lambda m: f"{what}: input {i} afterwards: {m}")


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory, build_dir):
    return tmp_path_factory.mktemp("jit-fuzz-cache")


@pytest.mark.parametrize("run_seed", [FIXED_SEED, ROTATING_SEED], ids=["fixed", "rotating"])
def test_compiled_programs_match_eager(run_seed, shared_cache, monkeypatch):
    monkeypatch.setenv("SHARDX_CACHE_DIR", str(shared_cache))

    @seed(run_seed)
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), print_blob=True)
    @given(prog=programs(), data=st.data())
    def check(prog, data):
        run_case(data, prog)

    check()
