"""The persistent region cache (python/shardx/importer/region_cache.py): a
region traced once is loaded from disk by a later trace, which gives the
same program text as a trace without the cache; a change of the layer's
width, of the activation function it calls or of a constant it reads is a
miss, and the program compiled after it matches eager."""

import os
import sys
import textwrap
import types

import pytest
import torch

import shardx
from shardx import Mesh, Replicate, Shard
from shardx.importer import region_cache, trace

SOURCE = """
import torch
import torch.nn.functional as F

SCALE = {scale}


def act(h):
    return {act}


def block(x, w1, b1, w2):
    h = act(x @ w1.t() + b1)
    return x + {const} * SCALE * (h @ w2.t())
"""


def load_block(tmp_path, name, scale="1.0", act="F.gelu(h)", const="0.5"):
    """The module of SOURCE, written to a file (its lines are the ops'
    locations) and imported under ``name``."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(SOURCE.format(scale=scale, act=act, const=const)))
    mod = types.ModuleType(name)
    mod.__file__ = str(path)
    exec(compile(path.read_text(), str(path), "exec"), mod.__dict__)
    sys.modules[name] = mod
    return mod


def make_step(mod):
    block = torch.compiler.nested_compile_region(mod.block)

    def step(x, w1a, b1a, w2a, w1b, b1b, w2b):
        ws = [w.detach().requires_grad_(True) for w in (w1a, b1a, w2a, w1b, b1b, w2b)]
        y = block(block(x, *ws[:3]), *ws[3:])
        loss = (y * y).mean()
        return (loss.detach(), *torch.autograd.grad(loss, ws))
    return step


def example(width, seed=0):
    g = torch.Generator().manual_seed(seed)
    d = 8
    x = torch.randn(4, d, generator=g)
    layer = [torch.randn(width, d, generator=g) * 0.3, torch.randn(width, generator=g) * 0.1,
             torch.randn(d, width, generator=g) * 0.3]
    return [x] + layer + [t.clone() for t in layer]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SHARDX_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SHARDX_REGION_CACHE", raising=False)
    region_cache._MEMORY.clear()
    region_cache.stats.reset()
    yield tmp_path
    region_cache._MEMORY.clear()


def traced(step, args, use_cache=True, new_process=True):
    """The program text; ``new_process`` drops the in-memory cache first,
    as a new process starts without it (the disk entries stay)."""
    if new_process:
        region_cache._MEMORY.clear()
    old = os.environ.get("SHARDX_REGION_CACHE")
    os.environ["SHARDX_REGION_CACHE"] = "1" if use_cache else "0"
    try:
        return trace(step, args, name="step")
    finally:
        if old is None:
            del os.environ["SHARDX_REGION_CACHE"]
        else:
            os.environ["SHARDX_REGION_CACHE"] = old


def stats():
    s = region_cache.stats
    return dict(memory=s.memory, disk=s.disk, misses=s.misses, uncacheable=s.uncacheable,
                stored=s.stored, traced=s.traced)


def check_against_eager(step, args):
    mesh = Mesh((2,), ("dp",))
    rep = [Replicate()]
    fn = shardx.compile(step, mesh, [[Shard(0)]] + [rep] * 6, [rep] * 7)
    out = [t.to_torch() for t in fn(*args)]
    ref = step(*args)
    for i, (a, b) in enumerate(zip(out, ref)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=f"output {i}")


def test_unchanged_layer_is_loaded_from_disk_and_gives_the_same_program(cache):
    mod = load_block(cache, "tc_block_same")
    step, args = make_step(mod), example(16)
    first = traced(step, args)
    # Two regions: the first call's input needs no gradient, the second's does.
    assert stats()["misses"] == 2 and stats()["stored"] == 2, stats()
    assert len(os.listdir(region_cache.folder())) == 2
    again = traced(step, args)
    assert stats()["disk"] == 2 and stats()["misses"] == 2, stats()
    assert again == first and stats()["traced"] == 2
    # The same trace in this process: from memory.
    traced(step, args, new_process=False)
    assert stats()["memory"] == 2, stats()
    assert traced(step, args, use_cache=False) == first


@pytest.mark.parametrize("change", ["width", "activation", "constant", "global"])
def test_a_changed_layer_misses_and_matches_eager(cache, change):
    mod = load_block(cache, f"tc_block_{change}")
    traced(make_step(mod), example(16))
    assert stats()["stored"] == 2
    width = 16
    if change == "width":
        width = 12
    elif change == "activation":
        # Only the helper the block calls changes: the block's own code does not.
        mod = load_block(cache, f"tc_block_{change}", act="F.silu(h)")
    elif change == "constant":
        mod = load_block(cache, f"tc_block_{change}", const="0.25")
    else:
        mod.SCALE = 3.0  # a global the block reads, changed at run time
    step, args = make_step(mod), example(width, seed=1)
    text = traced(step, args)
    assert stats()["misses"] == 4 and stats()["disk"] == 0 and stats()["traced"] == 4, stats()
    assert text == traced(step, args, use_cache=False)
    check_against_eager(step, args)


def test_a_region_reading_a_tensor_is_not_cached(cache):
    bias = torch.full((8,), 0.25)

    def shifted(x, w):
        return torch.tanh(x @ w.t()) + bias

    block = torch.compiler.nested_compile_region(shifted)

    def step(x, w):
        w = w.detach().requires_grad_(True)
        loss = block(block(x, w), w).sum()
        return loss.detach(), torch.autograd.grad(loss, [w])[0]
    args = [torch.randn(4, 8), torch.randn(8, 8) * 0.3]
    text = traced(step, args)
    assert stats()["uncacheable"] == 2 and stats()["stored"] == 0, stats()
    assert not os.path.exists(region_cache.folder()) or not os.listdir(region_cache.folder())
    assert text == traced(step, args, use_cache=False)


def test_a_damaged_entry_is_traced_again(cache):
    mod = load_block(cache, "tc_block_damaged")
    step, args = make_step(mod), example(16)
    first = traced(step, args)
    for entry in os.listdir(region_cache.folder()):
        with open(os.path.join(region_cache.folder(), entry), "wb") as f:
            f.write(b"not a region")
    assert traced(step, args) == first
    assert stats()["misses"] == 4 and stats()["disk"] == 0, stats()


def test_key_covers_code_globals_and_closures():
    def make(c):
        def f(x):
            return x * c
        return f
    k = region_cache.code_digest
    assert k(make(2.0)) == k(make(2.0))
    assert k(make(2.0)) != k(make(3.0))
    with pytest.raises(region_cache.Uncacheable):
        k(make(object()))
