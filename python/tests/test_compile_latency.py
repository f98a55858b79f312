"""The first call's time, reported (issue 35): ``shardx.compile`` records
and logs where it went (trace, import, dead code, SPMD pipeline, code
generation, load), and code generation goes through the kernel cache beside
the JIT's artifacts, so a program that shares kernels with a compiled one
compiles only what is new."""

import logging
import os

import torch

import shardx
from shardx import Mesh, Replicate, Shard


def mlp(w1, w2, x):
    return (torch.relu(x @ w1) @ w2).sum()


def mlp_args(hidden):
    torch.manual_seed(0)
    return torch.randn(16, hidden), torch.randn(hidden, 16), torch.randn(8, 16)


def test_first_call_timing_is_reported(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("SHARDX_CACHE_DIR", str(tmp_path))
    mesh = Mesh((2,), ("dp",))
    pl = [[Replicate()], [Replicate()], [Shard(0)]]
    f = shardx.compile(mlp, mesh, pl)
    with caplog.at_level(logging.INFO, logger="shardx.jit"):
        out = f(*mlp_args(32))
    assert torch.allclose(out.to_torch(), mlp(*mlp_args(32)), rtol=1e-5, atol=1e-5)
    t = f.first_call_timing
    for step in ("trace", "import", "dead code", "spmd", "codegen", "load", "total"):
        assert step in t and t[step] >= 0, (step, t)
    parts = sum(v for k, v in t.items() if k != "total")
    assert parts <= t["total"] * 1.05 + 0.05, t
    assert any("ready in" in r.getMessage() and "codegen" in r.getMessage()
               for r in caplog.records)
    # The kernels went into the kernel cache beside the artifacts.
    kernels = tmp_path / "kernels"
    assert any(p.suffix == ".o" for p in kernels.iterdir())

    # Another hidden width: a new artifact whose new kernels are compiled,
    # the rest (the loss, the scatter of the input) found in the cache.
    before = {p.name for p in kernels.iterdir()}
    g = shardx.compile(mlp, mesh, pl)
    out = g(*mlp_args(48))
    assert torch.allclose(out.to_torch(), mlp(*mlp_args(48)), rtol=1e-5, atol=1e-5)
    after = {p.name for p in kernels.iterdir()}
    assert after - before, "the new widths compiled nothing new"
    assert g.first_call_timing["codegen"] > 0


def test_a_cache_hit_reports_no_codegen(tmp_path, monkeypatch):
    monkeypatch.setenv("SHARDX_CACHE_DIR", str(tmp_path))
    mesh = Mesh((2,), ("dp",))
    pl = [[Replicate()], [Replicate()], [Shard(0)]]
    shardx.compile(mlp, mesh, pl)(*mlp_args(32))
    g = shardx.compile(mlp, mesh, pl)
    g(*mlp_args(32))
    t = g.first_call_timing
    assert "codegen" not in t and "spmd" not in t and "load" in t, t
