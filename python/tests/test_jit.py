"""shardx.compile: compiled train steps against eager PyTorch over several
steps with the state kept on the ranks, guards and recompilation, the disk
cache (a second process hits it; a corrupt entry is rebuilt), rank failures
and placement errors."""

import logging
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils._pytree as pytree

import shardx
from shardx import Mesh, PlacementError, Replicate, Shard, ShardedTensor
from shardx_dev import examples
from shardx.train import TrainStep

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch, build_dir):
    monkeypatch.setenv("SHARDX_CACHE_DIR", str(tmp_path / "cache"))
    shardx.cache_stats.reset()
    return tmp_path / "cache"


def assert_close(got, want, what, rtol=RTOL, atol=ATOL):
    got = got.to_torch() if isinstance(got, ShardedTensor) else got
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=rtol, atol=atol,
                               err_msg=what)


# The importer's train steps (examples/ and test/Programs/): SGD with
# momentum, Adam, AdamW (foreach); MLP, transformer block (LayerNorm,
# attention, GELU), embeddings, cross-entropy and NLL; even, uneven and
# strided shards.
STEPS = ["mlp_dp_tp_train.mlir", "transformer_block_tp.mlir", "fsdp_tp_train.mlir",
         "megatron_attention_train.mlir", "vocab_parallel_ce.mlir",
         "vocab_parallel_embedding.mlir", "megatron_uneven.mlir", "unannotated_train.mlir"]


@pytest.mark.parametrize("name", STEPS)
def test_compiled_steps_match_eager(name):
    spec = examples.spec(name)
    step = spec.fn
    assert isinstance(step, TrainStep)
    f = shardx.compile(step, spec.mesh, spec.in_placements, spec.out_placements, donate=(0, 1))
    params, state, inputs, target = spec.example_args
    eager = (params, state)
    sharded = (params, state)
    mesh_size = int(np.prod(spec.mesh.shape)) if spec.mesh else 1
    for i in range(3):
        donated = [t for t in pytree.tree_leaves(sharded) if isinstance(t, ShardedTensor)]
        addresses = [[t.shards.buffer_address(r) for r in range(mesh_size)] for t in donated]
        loss, p, s = f(sharded[0], sharded[1], inputs, target)
        el, ep, es = step.run_eager(eager[0], eager[1], inputs, target)
        # Adam moves a parameter by about lr wherever its gradient is
        # rounding noise: the transformer block's attn.k.bias, whose
        # gradient is ~1e-9 (softmax ignores a shift of all keys,
        # docs/Compiler.md), differs by up to lr; other Adam parameters and
        # state get atol lr / 10 (the loss stays at rtol 1e-5).
        noise = 1.0 if name == "transformer_block_tp.mlir" else 0.1
        tol = dict(atol=noise * step.hp["lr"]) if step.optimizer != "sgd" else {}
        assert_close(loss, el, f"{name} step {i}: loss")
        for j, (a, b) in enumerate(zip(p, ep)):
            assert_close(a, b, f"{name} step {i}: parameter {j}", **tol)
        for key in es:
            for j, (a, b) in enumerate(zip(s[key], es[key])):
                assert_close(a, b, f"{name} step {i}: {key} {j}", **tol)
        # Donated (from step 1 on, the previous step's outputs): the new
        # parameters and state are in the old buffers on every rank, and the
        # old handles are invalidated.
        assert len(donated) == (0 if i == 0 else len(pytree.tree_leaves((p, s))))
        for t, before, after in zip(donated, addresses, pytree.tree_leaves((p, s))):
            assert [after.shards.buffer_address(r) for r in range(mesh_size)] == before
            with pytest.raises(shardx.DonatedError, match="donated to a call"):
                t.full()
        sharded, eager = (p, s), (ep, es)
    assert f.compiles == 1


def _dp_fn():
    def f(w, x):
        return torch.tanh(x @ w).sum(0), w * 0.5
    return f


def test_shape_change_recompiles_and_logs(caplog):
    mesh = Mesh((2,), ("dp",))
    f = shardx.compile(_dp_fn(), mesh, [[Replicate()], [Shard(0)]], name="dp_fn")
    w = torch.randn(16, 8)
    for batch in (8, 4, 8):
        x = torch.randn(batch, 16)
        with caplog.at_level(logging.INFO, logger="shardx.jit"):
            y, w2 = f(w, x)
        want_y, want_w = _dp_fn()(w, x)
        assert_close(y, want_y, f"batch {batch}")
        assert_close(w2, want_w, f"batch {batch}")
    assert f.compiles == 2
    assert f.recompile_reasons == ["input 1: shape [8, 16] -> [4, 16]"]
    assert any("recompiling dp_fn because input 1: shape [8, 16] -> [4, 16]" in r.message
               for r in caplog.records)


def test_placement_change_recompiles():
    mesh = Mesh((2,), ("dp",))
    f = shardx.compile(_dp_fn(), mesh, [[Replicate()], [Shard(0)]], name="dp_fn")
    w, x = torch.randn(16, 8), torch.randn(8, 16)
    f(w, x)
    y, _ = f(ShardedTensor.from_torch(w, mesh, [Shard(1)]), x)
    assert f.compiles == 2
    assert f.recompile_reasons == ["input 0: layout R -> [S(1)]"]
    assert_close(y, _dp_fn()(w, x)[0], "sharded w")


def test_sharded_tensor_shards_and_gathers():
    mesh = Mesh((2, 2), ("dp", "tp"))
    t = torch.arange(30, dtype=torch.float32).reshape(5, 6)
    st = ShardedTensor.from_torch(t, mesh, [Shard(0), Shard(1)])
    for r in range(4):
        i, j = divmod(r, 2)
        want = torch.chunk(torch.chunk(t, 2, 0)[i], 2, 1)[j]
        np.testing.assert_array_equal(st.local(r), want.numpy())
    np.testing.assert_array_equal(st.full(), t.numpy())
    assert st.placements == (Shard(0), Shard(1))
    # Partial: coordinate 0 of the axis holds the value, the others the
    # identity; full() reduces.
    part = ShardedTensor.from_torch(t, mesh, [shardx.Partial("sum"), Shard(0)])
    np.testing.assert_array_equal(part.local(2), np.zeros((3, 6), np.float32))
    np.testing.assert_array_equal(part.full(), t.numpy())
    rep = ShardedTensor.from_torch(t, mesh)
    assert rep.shares_buffer(rep, 0) and rep.shards.shares_buffer(0, 3)
    # local() is a view of the rank's buffer, not a copy.
    assert rep.local(2).ctypes.data == rep.shards.buffer_address(2)


def _mlp_step():
    torch.manual_seed(0)
    mesh = Mesh((2, 2), ("dp", "tp"))
    step = TrainStep(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)), F.mse_loss,
                     "sgd", lr=0.1, momentum=0.9)
    ins, outs = step.placements(mesh, {"0.weight": [Replicate(), Shard(0)],
                                       "0.bias": [Replicate(), Shard(0)],
                                       "2.weight": [Replicate(), Shard(1)]},
                                [[Shard(0), Replicate()]], [Shard(0), Replicate()])
    args = step.example_args([torch.randn(4, 8)], torch.randn(4, 8))
    return step, mesh, ins, outs, args


def test_rank_failure_raises_once_and_keeps_state(monkeypatch):
    step, mesh, ins, outs, (params, state, inputs, target) = _mlp_step()
    f = shardx.compile(step, mesh, ins, outs, donate=(0, 1))
    _, p, s = f(params, state, inputs, target)
    assert f._session.worlds_started == 1
    _, ep, es = step.run_eager(params, state, inputs, target)
    before = [t.full().copy() for t in pytree.tree_leaves((p, s))]
    addresses = [t.shards.buffer_address(1) for t in pytree.tree_leaves((p, s))]
    monkeypatch.setenv("SHARDX_TEST_FAIL_RANK", "1")
    with pytest.raises(shardx.RankError) as err:
        f(p, s, inputs, target)
    assert err.value.rank == 1
    assert "injected failure" in err.value.cause
    assert str(err.value).startswith("rank 1 failed: ")
    # Nothing half-written: the donated handles keep their buffers.
    after = pytree.tree_leaves((p, s))
    assert [t.shards.buffer_address(1) for t in after] == addresses
    for a, b in zip(after, before):
        np.testing.assert_array_equal(a.full(), b)
    # The next call runs on a fresh world and continues the training.
    monkeypatch.delenv("SHARDX_TEST_FAIL_RANK")
    loss, p, s = f(p, s, inputs, target)
    assert f._session.worlds_started == 2
    el, ep, es = step.run_eager(ep, es, inputs, target)
    assert_close(loss, el, "loss after a failed step")
    for a, b in zip(p, ep):
        assert_close(a, b, "parameter after a failed step")


def test_donate_zero_is_argument_zero():
    """``donate=0`` (an int, not a tuple) donates argument 0, as
    ``donate=(0,)`` does: 0 is falsy, and it once donated nothing."""
    step, mesh, ins, outs, (params, state, inputs, target) = _mlp_step()
    f = shardx.compile(step, mesh, ins, outs, donate=0, name="mlp0")
    _, p, s = f(params, state, inputs, target)
    old = pytree.tree_leaves(p)
    f(p, s, inputs, target)
    for t in old:
        with pytest.raises(shardx.DonatedError, match="donated to a call"):
            t.full()


def test_donation_reuses_buffers_and_invalidates_inputs():
    step, mesh, ins, outs, (params, state, inputs, target) = _mlp_step()
    f = shardx.compile(step, mesh, ins, outs, donate=(0, 1), name="mlp")
    _, p, s = f(params, state, inputs, target)
    _, ep, es = step.run_eager(params, state, inputs, target)
    old = pytree.tree_leaves((p, s))
    addresses = [[t.shards.buffer_address(r) for r in range(4)] for t in old]
    # A view the caller holds keeps its buffer: that one output gets a new
    # buffer, the view still shows the old values.
    view = old[0].local(1)
    kept = view.copy()
    loss, p2, s2 = f(p, s, inputs, target)
    el, ep, es = step.run_eager(ep, es, inputs, target)
    assert_close(loss, el, "loss")
    for a, b in zip(pytree.tree_leaves((p2, s2)), pytree.tree_leaves((ep, es))):
        assert_close(a, b, "parameter or state")
    new = pytree.tree_leaves((p2, s2))
    np.testing.assert_array_equal(view, kept)
    assert new[0].shards.buffer_address(1) != addresses[0][1]
    assert [new[0].shards.buffer_address(r) for r in (0, 2, 3)] == [addresses[0][r] for r in (0, 2, 3)]
    for t, before in zip(new[1:], addresses[1:]):
        assert [t.shards.buffer_address(r) for r in range(4)] == before
    # The donated handles are invalidated, with a clear error.
    for t in old:
        with pytest.raises(shardx.DonatedError, match="donated to a call"):
            t.full()
    with pytest.raises(shardx.DonatedError, match="input 0 of mlp was donated to an earlier call"):
        f(p, s, inputs, target)
    # Not donated: the inputs stay valid and the outputs get new buffers.
    g = shardx.compile(step, mesh, ins, outs, name="mlp")
    _, p3, _ = g(p2, s2, inputs, target)
    assert p2[0].full().shape == p3[0].full().shape
    assert p3[0].shards.buffer_address(0) != p2[0].shards.buffer_address(0)


def test_bad_placements_raise_before_tracing():
    mesh = Mesh((2, 2), ("dp", "tp"))
    with pytest.raises(PlacementError, match="expected 2 placements"):
        shardx.compile(_dp_fn(), mesh, [[Shard(0)], None])
    f = shardx.compile(_dp_fn(), mesh, [[Shard(2), Replicate()], None])
    with pytest.raises(PlacementError, match="out of range for a tensor of rank 2"):
        f(torch.randn(16, 8), torch.randn(8, 16))
    assert f.compiles == 0 and shardx.cache_stats.misses == 0
    f = shardx.compile(_dp_fn(), mesh, [None])
    with pytest.raises(PlacementError, match="1 input placements for 2 input tensors"):
        f(torch.randn(16, 8), torch.randn(8, 16))
    assert f.compiles == 0


def test_corrupt_cache_entry_is_rebuilt(cache):
    mesh = Mesh((2,), ("dp",))
    w, x = torch.randn(16, 8), torch.randn(8, 16)
    shardx.compile(_dp_fn(), mesh, [[Replicate()], [Shard(0)]], name="dp_fn")(w, x)
    assert (shardx.cache_stats.misses, shardx.cache_stats.hits) == (1, 0)
    [so] = [p for p in cache.iterdir() if p.suffix == ".so"]
    # A truncated file put in place (never written in place: this process
    # has the old one mapped, as the cache itself only ever renames).
    (cache / "truncated").write_bytes(so.read_bytes()[:1000])
    os.replace(cache / "truncated", so)
    y, _ = shardx.compile(_dp_fn(), mesh, [[Replicate()], [Shard(0)]], name="dp_fn")(w, x)
    assert shardx.cache_stats.rebuilds == 1 and shardx.cache_stats.misses == 2
    assert_close(y, _dp_fn()(w, x)[0], "after the rebuild")
    y, _ = shardx.compile(_dp_fn(), mesh, [[Replicate()], [Shard(0)]], name="dp_fn")(w, x)
    assert shardx.cache_stats.hits == 1
    assert not [p for p in cache.iterdir() if p.name.count(".") > 1]  # no temporaries left


def test_a_rebuilt_runtime_compiles_again(cache, tmp_path, monkeypatch, build_dir):
    # A copy of the runtime archives ($SHARDX_RUNTIME_ARCHIVE): a newer one
    # is a rebuilt runtime, which the JIT's key (shardx-compile
    # --print-build-id) must tell from the one its artifacts linked.
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    for name in ("libShardXRuntime.a", "libShardXRuntimeBlas.a"):
        shutil.copy(os.path.join(build_dir, "lib", "Runtime", name), runtime / name)
    monkeypatch.setenv("SHARDX_RUNTIME_ARCHIVE", str(runtime / "libShardXRuntime.a"))
    mesh = Mesh((2,), ("dp",))
    w, x = torch.randn(16, 8), torch.randn(8, 16)
    shardx.compile(_dp_fn(), mesh, [[Replicate()], [Shard(0)]], name="dp_fn")(w, x)
    shardx.compile(_dp_fn(), mesh, [[Replicate()], [Shard(0)]], name="dp_fn")(w, x)
    assert (shardx.cache_stats.misses, shardx.cache_stats.hits) == (1, 1)
    st = os.stat(runtime / "libShardXRuntime.a")
    os.utime(runtime / "libShardXRuntime.a", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    y, _ = shardx.compile(_dp_fn(), mesh, [[Replicate()], [Shard(0)]], name="dp_fn")(w, x)
    assert (shardx.cache_stats.misses, shardx.cache_stats.hits) == (2, 1)
    assert_close(y, _dp_fn()(w, x)[0], "linked with the rebuilt runtime")


def test_concurrent_compiles_then_a_hit(cache):
    script = textwrap.dedent("""
        import sys, torch
        sys.path.insert(0, sys.argv[1])
        import shardx
        from shardx import Mesh, Replicate, Shard
        def f(w, x):
            return torch.tanh(x @ w).sum(0), w * 0.5
        torch.manual_seed(0)
        w, x = torch.randn(16, 8), torch.randn(8, 16)
        g = shardx.compile(f, Mesh((2,), ("dp",)), [[Replicate()], [Shard(0)]])
        y, _ = g(w, x)
        assert torch.allclose(y.to_torch(), f(w, x)[0], rtol=1e-5, atol=1e-6)
        print(shardx.cache_stats.hits, shardx.cache_stats.misses)
    """)
    env = dict(os.environ, SHARDX_CACHE_DIR=str(cache))
    cmd = [sys.executable, "-c", script, os.path.join(ROOT, "python")]
    # Two processes compile the same program at once: each writes whole
    # files under private names and renames them, so both load a valid
    # artifact.
    first = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    for p in first:
        out, err = p.communicate()
        assert p.returncode == 0, err
        assert out.split() in (["0", "1"], ["1", "0"])
    # A third process finds the entry: the compile is skipped.
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "0"]
    # (Beside the entry: the kernel cache's folder, docs/Compiler.md.)
    assert sorted(p.suffix for p in cache.iterdir() if p.is_file() and p.name != ".lock") == [
        ".json", ".mlir", ".so"]


def test_cache_evicts_least_recently_used(cache, monkeypatch):
    mesh = Mesh((2,), ("dp",))
    w = torch.randn(16, 8)

    def run(batch):
        x = torch.randn(batch, 16)
        y, _ = shardx.compile(_dp_fn(), mesh, [[Replicate()], [Shard(0)]], name="dp_fn")(w, x)
        assert_close(y, _dp_fn()(w, x)[0], f"batch {batch}")

    def entries():
        return {p.stem for p in cache.iterdir() if p.suffix == ".json"}

    run(8)
    [a] = entries()
    size = sum((cache / (a + s)).stat().st_size for s in (".json", ".so", ".mlir"))
    # Room for two entries of this size, not three.
    monkeypatch.setenv("SHARDX_CACHE_MAX_MB", str(2.5 * size / (1 << 20)))
    run(4)
    [b] = entries() - {a}
    run(8)  # a hit: a is now the most recently used
    assert (shardx.cache_stats.hits, shardx.cache_stats.misses) == (1, 2)
    run(2)
    [c] = entries() - {a, b}
    assert entries() == {a, c} and shardx.cache_stats.evictions == 1
    assert not list(cache.glob(b + ".*"))
    # The evicted program compiles again.
    run(4)
    assert shardx.cache_stats.misses == 4 and len(entries()) == 2
    monkeypatch.setenv("SHARDX_CACHE_MAX_MB", "lots")
    with pytest.raises(ValueError, match="SHARDX_CACHE_MAX_MB='lots' is not a number"):
        run(6)


def _module(kind):
    torch.manual_seed(0)
    if kind == "mha":
        from shardx_dev import models
        return models.MHA(8, 2), F.mse_loss, torch.randn(4, 3, 8), torch.randn(4, 3, 8)
    if kind == "encoder":
        layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
        return layer, F.mse_loss, torch.randn(4, 3, 8), torch.randn(4, 3, 8)
    return (nn.Sequential(nn.Linear(8, 16), nn.SiLU(), nn.Linear(16, 8)), F.mse_loss,
            torch.randn(4, 8), torch.randn(4, 8))


# The other modules and optimizer forms the importer covers, data parallel
# over 2 ranks: nn.MultiheadAttention (SGD foreach with momentum),
# nn.TransformerEncoderLayer (AdamW for-loop), SiLU MLP (Adam foreach).
@pytest.mark.parametrize("kind,optimizer,foreach", [
    ("mha", "sgd", True), ("encoder", "adamw", False), ("silu", "adam", True)])
def test_data_parallel_steps_match_eager(kind, optimizer, foreach):
    module, loss_fn, x, y = _module(kind)
    lr = 0.1 if optimizer == "sgd" else 1e-3
    step = TrainStep(module, loss_fn, optimizer, foreach=foreach, lr=lr, momentum=0.9,
                     weight_decay=0.01 if optimizer == "adamw" else 0.0)
    mesh = Mesh((2,), ("dp",))
    ins, outs = step.placements(mesh, {}, [[Shard(0)]], [Shard(0)])
    f = shardx.compile(step, mesh, ins, outs, donate=(0, 1))
    params, state, _, _ = step.example_args([x], y)
    p, s, ep, es = params, state, params, state
    # The encoder's key bias (in_proj_bias[8:16]) has a rounding-noise
    # gradient (softmax ignores a shift of all keys): Adam moves it by up to
    # lr either way. Other Adam parameters: atol lr / 10.
    tol = dict(atol=(1.0 if kind == "encoder" else 0.1) * lr) if optimizer != "sgd" else {}
    for i in range(3):
        loss, p, s = f(p, s, (x,), y)
        el, ep, es = step.run_eager(ep, es, (x,), y)
        assert_close(loss, el, f"{kind} step {i}: loss")
        for j, (a, b) in enumerate(zip(p, ep)):
            assert_close(a, b, f"{kind} step {i}: parameter {j}", **tol)
    assert f.compiles == 1


def test_mpi_backend_train_step(cache):
    # Each process of `mpirun -np 2` is one rank: the compiled step runs on
    # MPI_COMM_WORLD in-process and matches eager in both processes.
    mpirun = shutil.which("mpirun")
    if mpirun is None or not shardx.sharded_tensor.runtime().has_mpi:
        pytest.skip("needs OpenMPI and a build with the mpi backend")
    out = cache.parent / "ranks"
    out.mkdir()
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable,
           os.path.join(ROOT, "python", "tests", "mpi_train_step.py"), os.path.join(ROOT, "python"),
           str(out)]
    env = dict(os.environ, SHARDX_CACHE_DIR=str(cache))
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    lines = sorted((out / f"rank{i}").read_text() for i in range(2) if (out / f"rank{i}").exists())
    assert [line.split(" ok ")[0] for line in lines] == ["rank 0", "rank 1"], r.stdout + r.stderr
    assert lines[0].split(" ok ")[1] == lines[1].split(" ok ")[1]  # the same losses
    # Then a failure on rank 1 ends the job, naming the rank and the cause.
    assert r.returncode != 0 and "survived" not in r.stdout
    assert "rank 1 failed: rank 1: injected failure (SHARDX_TEST_FAIL_RANK)" in r.stderr


def test_backends_without_a_runtime_raise():
    # (The GPU backends without a GPU: test_jit_gpu.py.)
    mesh = Mesh((2,), ("dp",))
    with pytest.raises(ValueError, match="backend 'tpu' is not supported by shardx.compile"):
        shardx.compile(_dp_fn(), mesh, [[Replicate()], [Shard(0)]], backend="tpu")
    if "OMPI_COMM_WORLD_SIZE" not in os.environ and "PMI_SIZE" not in os.environ:
        with pytest.raises(ValueError, match="runs under mpirun with one process per rank"):
            shardx.compile(_dp_fn(), mesh, [[Replicate()], [Shard(0)]], backend="mpi")
