"""The whole-step trace's own overheads (issue 35, docs/Importer.md, "The
whole step's trace"): what they change must not change what a step
computes. The detach/alias nodes dropped before pass 2 are only those that
nothing writes; the garbage collector is paused for a trace and restored
after it, an error included; the stack traces FX records still name the
user's lines."""

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
