"""The whole-step trace's own overheads (issue 35, docs/Importer.md, "The
whole step's trace"): what they change must not change what a step
computes. The detach/alias nodes dropped before pass 2 are only those that
nothing writes; the garbage collector is paused for a trace and restored
after it, an error included; the stack traces FX records still name the
user's lines; the nodes pass 2 records without their dispatch are the ones
the dispatch makes."""

import gc
import inspect
import re

import pytest
import torch

import shardx
from shardx import Mesh, Replicate, ShardedTensor
from shardx.importer import ImportError_, trace


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch, build_dir):
    monkeypatch.setenv("SHARDX_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


MESH = Mesh((2,), ("x",))
R = [[Replicate()]]


def full(t):
    return torch.from_numpy(t.full().copy()) if isinstance(t, ShardedTensor) else t


def written_through_detach(x):
    # `b` shares `a`'s storage but not its view: the add_ must reach `a`
    # and the t_ must not (the detach stays; called on `a` instead, the
    # result would be 3 * a.t()).
    a = x * 2
    b = a.detach()
    b.add_(1)
    b.t_()
    return a + 2 * b


def read_through_detach(x, w):
    # Detaches that only read: dropped before pass 2, the same numbers.
    y = x.detach() @ w.detach().t()
    return y.detach() * 3, x.detach()


@pytest.mark.parametrize("fn,n", [(written_through_detach, 1), (read_through_detach, 2)])
def test_detach_results_match_eager(fn, n):
    args = [torch.randn(4, 4) for _ in range(n)]
    want = fn(*args)
    outs = 1 if isinstance(want, torch.Tensor) else len(want)
    got = shardx.compile(fn, MESH, R * n, R * outs)(*args)
    want = [want] if isinstance(want, torch.Tensor) else list(want)
    got = [got] if not isinstance(got, (list, tuple)) else list(got)
    for g, w in zip(got, want):
        # Elementwise results bit for bit; the matmul's to f32 rounding
        # (its kernel sums in another order than eager's BLAS).
        exact = fn is written_through_detach
        torch.testing.assert_close(full(g), w, rtol=0 if exact else None,
                                   atol=0 if exact else None)


def test_gc_is_paused_during_a_trace_and_restored_after():
    seen = []

    def f(x):
        seen.append(gc.isenabled())
        return x + 1

    assert gc.isenabled()
    trace(f, [torch.randn(3)])
    assert seen and not any(seen)
    assert gc.isenabled()

    def bad(x):
        return x.item()  # refused: a value read into Python
    with pytest.raises(ImportError_):
        trace(bad, [torch.randn(())])
    assert gc.isenabled()
    gc.disable()
    try:
        trace(f, [torch.randn(3)])
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()


def test_locations_name_the_user_lines():
    def f(x):
        y = x.exp()
        return y * 2

    text = trace(f, [torch.randn(3)])
    first = inspect.getsourcelines(f)[1]
    lines = {int(m) for m in re.findall(r'loc\("test_trace_overheads\.py":(\d+):', text)}
    assert {first + 1, first + 2} <= lines, lines


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.fc(x)) + x


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(_Block() for _ in range(3))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def _step(net):
    params = dict(net.named_parameters())

    def step(ps, x):
        loss = torch.func.functional_call(net, ps, (x,)).square().mean()
        grads = torch.autograd.grad(loss, list(ps.values()))
        # Pointwise ops on region outputs (the global norm's kind), a view.
        norm = sum((g * g).sum() for g in grads).sqrt()
        scale = 1.0 / (norm + 1e-6)
        return loss, [p - 0.1 * g * scale for p, g in zip(ps.values(), grads)], x.t() * 2
    return step, [params, torch.randn(4, 8)]


def _graphs(direct: bool):
    """Every make_fx graph of a trace of ``_step`` (nodes, names, arguments,
    users, metadata with each value's shape, strides and dtype) and its
    program text, with pass 2's direct records on or off; and how many
    nodes were recorded directly."""
    from shardx.importer import tracing
    graphs, recorded = [], []
    make_fx, record = tracing.make_fx, tracing._Pass2._record

    def traced(*a, **k):
        f = make_fx(*a, **k)
        return lambda *xs: graphs.append(f(*xs)) or graphs[-1]

    def counted(self, n, target):
        out = record(self, n, target) if direct else None
        recorded.extend([n] if out is not None else [])
        return out
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tracing, "make_fx", traced)
        mp.setattr(tracing._Pass2, "_record", counted)
        mp.setenv("SHARDX_REGION_CACHE", "0")  # each region traced, in both runs
        torch.manual_seed(0)
        step, args = _step(_Net())
        text = trace(step, args)

    def val(v):
        if isinstance(v, torch.Tensor):
            return (type(v).__name__, tuple(v.shape), v.stride(), v.storage_offset(), v.dtype,
                    v.requires_grad)
        return [val(x) for x in v] if isinstance(v, (list, tuple)) else repr(v)
    def meta(n, first):
        # autograd's sequence numbers go on from trace to trace: relative.
        return {k: val(v) if k == "val" else v - first if k == "seq_nr"
                else re.sub(r"graph_id=\d+", "", repr(v)) for k, v in n.meta.items()}
    nodes = []
    for gm in graphs:
        first = min((n.meta["seq_nr"] for n in gm.graph.nodes if "seq_nr" in n.meta), default=0)
        nodes.append([(n.name, n.op, str(n.target), repr(n.args), repr(n.kwargs),
                       [u.name for u in n.users], meta(n, first)) for n in gm.graph.nodes])
    return nodes, text, len(recorded)


def test_pass2_records_nodes_as_their_dispatch_makes_them():
    """Pass 2's region calls and pointwise ops recorded directly
    (``tracing._Pass2``) are the nodes, metadata and values that their
    dispatch through functionalization, make_fx and the fake mode makes."""
    want, want_text, none = _graphs(direct=False)
    got, got_text, recorded = _graphs(direct=True)
    assert none == 0 and recorded >= 6  # 3 forward and 3 backward region calls at least
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g == w
    assert got_text == want_text


def test_pass2_records_nothing_directly_where_the_graph_mutates(monkeypatch):
    from shardx.importer import tracing
    seen = []
    init = tracing._Pass2.__init__

    def spy(self, gm, direct=True):
        init(self, gm, direct)
        seen.append(self._direct)
    monkeypatch.setattr(tracing._Pass2, "__init__", spy)
    trace(written_through_detach, [torch.randn(4, 4)])
    assert seen == [False]
    trace(read_through_detach, [torch.randn(4, 4), torch.randn(4, 4)])
    assert seen == [False, True]


def test_jit_collects_the_trace_garbage_while_compiling(monkeypatch):
    """``shardx.compile``'s first call leaves the trace's garbage (and the
    collector paused) for the time shardx-compile runs; after the call the
    collector is on again, with or without a compile."""
    from shardx import jit
    seen = []
    run = jit.run_compiler

    def spy(src, out, args=(), timing=None, tool=None, meanwhile=None):
        seen.append(gc.isenabled())

        def then():
            meanwhile()
            seen.append(gc.isenabled())
        return run(src, out, args, timing, tool, then)
    monkeypatch.setattr(jit, "run_compiler", spy)

    def f(x):
        return x * 3 + 1

    x = torch.randn(4, 4)
    assert gc.isenabled()
    torch.testing.assert_close(full(shardx.compile(f, MESH, R, R)(x)), f(x))
    assert seen == [False, True] and gc.isenabled()
    # The same program again: from the artifact cache, no compile.
    torch.testing.assert_close(full(shardx.compile(f, MESH, R, R)(x)), f(x))
    assert seen == [False, True] and gc.isenabled()
