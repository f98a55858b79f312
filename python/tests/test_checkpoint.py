"""Sharded checkpoints (shardx.save_checkpoint / load_checkpoint,
docs/Checkpoints.md): a compiled training loop saved on a 2x2 mesh resumes
on 2x2, 4x1 and one rank with the uninterrupted run's losses; uneven and
strided shards; DCP reads ShardX checkpoints and ShardX reads DCP's (plain
tensors, DTensors of a gloo world); a writer killed mid-save leaves the
last good checkpoint; damaged files are errors; the mpi backend."""

import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F

import shardx
from shardx import Mesh, Partial, Replicate as R, Shard as S, ShardedTensor, StridedShard
from shardx.checkpoint import CheckpointError
from shardx.sharded_tensor import runtime, session
from shardx.train import TrainStep

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_DIR = os.path.join(ROOT, "python")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch, build_dir):
    monkeypatch.setenv("SHARDX_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _all_leaves(tree):
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _all_leaves(v)]
    if isinstance(tree, (list, tuple)):
        return [x for v in tree for x in _all_leaves(v)]
    return [tree]


# ---------------------------------------------------------------------------
# A compiled training loop saved on 2x2, resumed elsewhere.
# ---------------------------------------------------------------------------

def _train_setup(optimizer):
    torch.manual_seed(0)
    # Hidden width 10: 5 + 5 rows on the tp axis of 2x2, 3 + 3 + 3 + 1 on
    # the dp axis of 4x1 (uneven shards on the way).
    step = TrainStep(nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 8)).double(),
                     F.mse_loss, optimizer, lr=0.05, momentum=0.9, weight_decay=0.01)
    batches = [(torch.randn(4, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64))
               for _ in range(6)]
    params, state, _, _ = step.example_args([batches[0][0]], batches[0][1])
    return step, batches, params, state


def _compiled(step, mesh, params, x, y):
    ins, outs = step.placements(mesh, params, [x], y)
    return shardx.compile(step, mesh, ins, outs, donate=(0, 1)), ins


def _run(f, p, s, batches):
    losses = []
    for x, y in batches:
        loss, p, s = f(p, s, (x,), y)
        losses.append(loss.item())
    return losses, p, s


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_resume_on_other_meshes_matches_uninterrupted_run(tmp_path, optimizer):
    step, batches, params, state = _train_setup(optimizer)
    m22 = Mesh((2, 2), ("dp", "tp"))
    f22, _ = _compiled(step, m22, {"0.weight": [R(), S(0)], "0.bias": [R(), S(0)],
                                   "2.weight": [R(), S(1)]}, [S(0), R()], [S(0), R()])
    # The uninterrupted run, saving after step 3 (a step counter with it).
    root = tmp_path / "run"
    p, s = params, state
    first, p, s = _run(f22, p, s, batches[:3])
    where = shardx.save_checkpoint(root, {"params": p, "state": s, "step": 3}, step=3)
    assert where == str(root / "step-00000003")
    assert shardx.latest_checkpoint(root) == where
    saved = [t.full().copy() for t in _all_leaves((p, s))]
    rest, p, s = _run(f22, p, s, batches[3:])
    losses = first + rest
    # ... which is the eager run (the JIT tests' tolerance).
    ep, es, eager = params, state, []
    for x, y in batches:
        el, ep, es = step.run_eager(ep, es, (x,), y)
        eager.append(el.item())
    np.testing.assert_allclose(losses, eager, rtol=1e-5, atol=1e-6)

    # Resumed on the same mesh and layouts: bit for bit.
    ck = shardx.load_checkpoint(root, m22)
    assert ck["step"] == 3 and set(ck) == {"params", "state", "step"}
    assert [t.layout_text for t in _all_leaves((ck["params"], ck["state"]))] == \
        [t.layout_text for t in _all_leaves((p, s))]
    again, _, _ = _run(f22, ck["params"], ck["state"], batches[3:])
    assert again == losses[3:]

    # On 4x1, FSDP-style (rows over dp, uneven: 3, 3, 3, 1), placements as
    # a flat list (the compiled step's own input placements), and on one
    # rank: the state loads exactly, the losses are the uninterrupted
    # run's up to the reduction order (f64).
    m41 = Mesh((4, 1), ("dp", "tp"))
    f41, ins = _compiled(step, m41, {"0.weight": [S(0), R()], "0.bias": [S(0), R()],
                                     "2.weight": [S(1), R()], "2.bias": [S(0), R()]},
                         [S(0), R()], [S(0), R()])
    m1 = Mesh((1,), ("dp",))
    f1, _ = _compiled(step, m1, {}, [R()], [R()])
    for mesh, f, placements in ((m41, f41, ins[:len(saved)]), (m1, f1, None)):
        ck = shardx.load_checkpoint(root, mesh, placements)
        leaves = _all_leaves((ck["params"], ck["state"]))
        assert all(t.mesh == mesh for t in leaves)
        for t, want in zip(leaves, saved):
            np.testing.assert_array_equal(t.full(), want)
        if mesh is m41:
            assert ck["params"][0].layout_text == "[S(0), R]"
            assert [ck["params"][0].local(r).shape[0] for r in range(4)] == [3, 3, 3, 1]
        resumed, _, _ = _run(f, ck["params"], ck["state"], batches[ck["step"]:])
        np.testing.assert_allclose(resumed, losses[3:], rtol=1e-12, atol=0)


# ---------------------------------------------------------------------------
# Layouts: uneven, nested, strided, explicit sizes, Partial.
# ---------------------------------------------------------------------------

def _scatter(x, mesh, layout):
    """A ShardedTensor of a runtime Layout (explicit sizes have no DTensor
    placements)."""
    a = x.numpy()
    return ShardedTensor(session(mesh).scatter(a, shardx.sharded_tensor.dtype_name(a), layout),
                         mesh)


def test_uneven_and_strided_layouts_round_trip(tmp_path):
    m22 = Mesh((2, 2), ("a", "b"))
    x = torch.randn(5, 6, dtype=torch.float32)
    sizes = runtime().Layout.from_json(
        '{"dims":[{"dim":0,"sizes":[4,1],"splits":[[0,1]]}],"partials":[null,null]}')
    state = {
        "nested": ShardedTensor.from_torch(x, m22, [S(0), S(0)]),       # rows 2, 1, 1, 1
        # Columns 0, 2, 4 / 1, 3, 5 (a stride), rows 3 + 2: three runs a rank.
        "strided": ShardedTensor.from_torch(x, m22, [StridedShard(1, 3), S(0)]),
        "reordered": ShardedTensor.from_torch(x, m22, [StridedShard(1, 2), S(1)]),
        "rows_rep": ShardedTensor.from_torch(x, m22, [S(0), R()]),      # each box on 2 ranks
        "sizes": _scatter(x, m22, sizes),                               # rows 4 + 1
        "partial": ShardedTensor.from_torch(x, m22, [Partial("sum"), S(1)]),
        "ints": ShardedTensor.from_torch(torch.arange(7), m22, [S(0), R()]),
        "half": ShardedTensor.from_torch(x.to(torch.bfloat16), m22, [R(), S(0)]),
    }
    where = shardx.save_checkpoint(tmp_path / "ck", state)
    md = dcp.FileSystemReader(where).read_metadata()
    chunks = {k: v.chunks for k, v in md.state_dict_metadata.items()}
    # One chunk per distinct box: replicated boxes are written once; a
    # strided rank holds three column runs (three chunks); a Partial is
    # saved reduced, sharded as the rest of its layout.
    assert len(chunks["nested"]) == 4 and len(chunks["rows_rep"]) == 2
    assert len(chunks["strided"]) == 4 * 3 and len(chunks["reordered"]) == 4
    assert len(chunks["sizes"]) == 2
    assert sorted(tuple(c.sizes) for c in chunks["sizes"]) == [(1, 6), (4, 6)]
    assert len(chunks["partial"]) == 2
    assert sorted(os.listdir(where)) == [".metadata", "__0_0.distcp", "__1_0.distcp",
                                         "__2_0.distcp", "__3_0.distcp", "shardx.json"]

    # On the same mesh, with no placements: the saved layouts, the same
    # local shards on every rank.
    back = shardx.load_checkpoint(where, m22)
    for k, t in state.items():
        got = back[k]
        want_text = "[R, S(1)]" if k == "partial" else t.layout_text
        assert got.layout_text == want_text, k
        assert got.dtype == t.dtype
        np.testing.assert_array_equal(got.full(), t.full(), err_msg=k)
        if k != "partial":
            for r in range(4):
                np.testing.assert_array_equal(got.local(r), t.local(r), err_msg=f"{k} rank {r}")

    # Onto 3 ranks, rows split 2, 2, 1 (and a callable choosing them).
    m3 = Mesh((3,), ("x",))
    back = shardx.load_checkpoint(where, m3, lambda fqn, shape: [S(0)])
    for k, t in state.items():
        want = torch.chunk(t.to_torch(), 3, 0)
        for r in range(3):
            assert torch.equal(torch.from_numpy(back[k].local(r).copy()).view(t.dtype)
                               if t.dtype == torch.bfloat16 else
                               torch.from_numpy(back[k].local(r).copy()), want[r]), (k, r)


def test_each_target_rank_reads_only_the_chunks_it_overlaps(tmp_path, monkeypatch):
    x = torch.randn(8, 3)
    where = shardx.save_checkpoint(tmp_path / "ck", {"w": ShardedTensor.from_torch(
        x, Mesh((4,), ("x",)), [S(0)])})   # chunks of rows 0-1, 2-3, 4-5, 6-7
    reads = []
    original = dcp.FileSystemReader.read_data

    def recording(self, plan, planner):
        reads.append(sorted(tuple(i.storage_index.offset) for i in plan.items))
        return original(self, plan, planner)
    monkeypatch.setattr(dcp.FileSystemReader, "read_data", recording)
    # Rows 0-4 and 5-7 on two ranks (torch.chunk of 8 rows over 2: 4 + 4);
    # then rows 0-2, 3-5, 6-7 on three.
    back = shardx.load_checkpoint(where, Mesh((2,), ("x",)), [S(0)])
    assert sorted(reads) == [[(0, 0), (2, 0)], [(4, 0), (6, 0)]]
    reads.clear()
    back3 = shardx.load_checkpoint(where, Mesh((3,), ("x",)), [S(0)])
    assert sorted(reads) == [[(0, 0), (2, 0)], [(2, 0), (4, 0)], [(6, 0)]]
    for t in (back["w"], back3["w"]):
        assert torch.equal(t.to_torch(), x)


def test_sharded_tensor_from_locals_and_local_runs():
    m22 = Mesh((2, 2), ("a", "b"))
    x = torch.arange(30.0).reshape(5, 6)
    t = ShardedTensor.from_torch(x, m22, [StridedShard(1, 3), S(0)])
    assert t.local_runs(1) == (((3, 2),), ((0, 1), (2, 1), (4, 1)))
    u = ShardedTensor.from_locals([t.local(r) for r in range(4)], m22,
                                  [StridedShard(1, 3), S(0)], x.shape)
    assert u.layout_text == t.layout_text and torch.equal(u.to_torch(), x)
    with pytest.raises(ValueError, match=r"rank 2's shard has shape \[5, 6\], its layout gives "
                                         r"\[3, 3\]"):
        ShardedTensor.from_locals([t.local(0), t.local(1), x.numpy(), t.local(3)], m22,
                                  [StridedShard(1, 3), S(0)], x.shape)
    with pytest.raises(ValueError, match="rank 1's shard is missing"):
        ShardedTensor.from_locals([t.local(0), None, None, None], m22,
                                  [StridedShard(1, 3), S(0)], x.shape)
    rep = ShardedTensor.from_locals([x, None, None, None], m22, None, x.shape)
    assert rep.shards.shares_buffer(0, 3) and torch.equal(rep.to_torch(), x)


def test_placements_forms_and_errors(tmp_path):
    m22 = Mesh((2, 2), ("a", "b"))
    x = torch.randn(4, 6)
    state = {"params": [ShardedTensor.from_torch(x, m22, [S(0), S(1)]),
                        ShardedTensor.from_torch(x, m22, [R(), S(0)])],
             "opt": {"m": [ShardedTensor.from_torch(x, m22, [S(1), R()])]}, "lr": 0.5,
             "note": ("a", None, -0.0, True), "nested": [[1, (2.5, float("inf"))], "x"]}
    root = tmp_path / "root"
    shardx.save_checkpoint(root, state, step=0)
    m2 = Mesh((2,), ("x",))
    # A pytree of placements: a list applies to its subtree, unnamed
    # entries are replicated, a dict may name an fqn.
    back = shardx.load_checkpoint(root, m2, {"params": [S(1)], "opt.m.0": [S(0)]})
    assert [t.layout_text for t in back["params"]] == ["[S(1)]", "[S(1)]"]
    assert back["opt"]["m"][0].layout_text == "[S(0)]"
    assert back["lr"] == 0.5 and back["note"] == ("a", None, -0.0, True)
    assert back["nested"] == [[1, (2.5, float("inf"))], "x"]
    assert str(back["note"][2]) == "-0.0"
    back = shardx.load_checkpoint(root, m2, {"params": [None, [S(0)]]})
    assert [t.layout_text for t in back["params"]] == ["R", "[S(0)]"]
    assert back["opt"]["m"][0].layout_text == "R"
    for t, want in zip(_all_leaves(back), _all_leaves(state)):
        if isinstance(want, ShardedTensor):
            np.testing.assert_array_equal(t.full(), want.full())

    with pytest.raises(CheckpointError, match=r"saved sharded on a mesh \[2, 2\]; the target mesh "
                                              r"\[2\] needs placements"):
        shardx.load_checkpoint(root, m2)
    with pytest.raises(CheckpointError, match="cannot load into a Partial placement"):
        shardx.load_checkpoint(root, m2, [[Partial("sum")]] * 3)
    with pytest.raises(CheckpointError, match="one placement list .* per tensor"):
        shardx.load_checkpoint(root, m2, [[S(0)]] * 2)
    with pytest.raises(shardx.PlacementError, match="params.0"):
        shardx.load_checkpoint(root, m2, {"params": [S(2)]})
    with pytest.raises(CheckpointError, match="already exists"):
        shardx.save_checkpoint(root, state, step=0)
    with pytest.raises(CheckpointError, match="must be a dict"):
        shardx.save_checkpoint(tmp_path / "x", [x])
    with pytest.raises(CheckpointError, match="keys of the state must be strings"):
        shardx.save_checkpoint(tmp_path / "x", {"a": {1: x}})
    with pytest.raises(CheckpointError, match=r"two entries of the state have the name 'a.b'"):
        shardx.save_checkpoint(tmp_path / "x", {"a.b": x, "a": {"b": x}})
    with pytest.raises(CheckpointError, match="cannot save a object"):
        shardx.save_checkpoint(tmp_path / "x", {"a": object()})
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        shardx.load_checkpoint(tmp_path / "nothing", m2)


def test_keep_prunes_old_steps(tmp_path):
    m2 = Mesh((2,), ("x",))
    (tmp_path / ".tmp-not-ours").mkdir()   # a save clears only its own leftovers
    for i in range(4):
        shardx.save_checkpoint(tmp_path, {"w": ShardedTensor.from_torch(torch.full((3,), float(i)),
                                                                         m2, [S(0)])},
                               step=i, keep=2)
    assert sorted(n for n in os.listdir(tmp_path) if n.startswith("step-")) == \
        ["step-00000002", "step-00000003"]
    assert shardx.load_checkpoint(tmp_path, m2)["w"].full().tolist() == [3.0] * 3
    assert shardx.load_checkpoint(tmp_path, m2, step=2)["w"].full().tolist() == [2.0] * 3
    shardx.save_checkpoint(tmp_path / "lone", {"x": 1})
    assert (tmp_path / ".tmp-not-ours").is_dir()


# ---------------------------------------------------------------------------
# DCP interop.
# ---------------------------------------------------------------------------

def test_dcp_loads_a_shardx_checkpoint_without_a_process_group(tmp_path):
    m22 = Mesh((2, 2), ("a", "b"))
    w, b, m = torch.randn(5, 6), torch.randn(5), torch.randn(6, 5, dtype=torch.float64)
    state = {"params": [ShardedTensor.from_torch(w, m22, [S(0), S(1)]),
                        ShardedTensor.from_torch(b, m22, [R(), S(0)])],
             "state": {"momentum_buffer": [ShardedTensor.from_torch(m, m22, [StridedShard(0, 2), S(0)])],
                       "plain": torch.arange(4)},
             "step": 12, "hp": {"betas": [0.9, 0.999], "eps": (1e-8,)}}
    where = shardx.save_checkpoint(tmp_path / "ck", state)
    sd = {"params": [torch.zeros(5, 6), torch.zeros(5)],
          "state": {"momentum_buffer": [torch.zeros(6, 5, dtype=torch.float64)],
                    "plain": torch.zeros(4, dtype=torch.int64)},
          "step": 0, "hp": {"betas": [0.0, 0.0], "eps": ()}}
    dcp.load(sd, checkpoint_id=where)
    # Lists and tuples of constants are one object each, as DCP saves them.
    assert sd["hp"] == {"betas": [0.9, 0.999], "eps": (1e-8,)}
    assert torch.equal(sd["params"][0], w) and torch.equal(sd["params"][1], b)
    assert torch.equal(sd["state"]["momentum_buffer"][0], m)
    assert torch.equal(sd["state"]["plain"], torch.arange(4)) and sd["step"] == 12
    # DCP's own converter reads it too.
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(where, tmp_path / "whole.pt")
    whole = torch.load(tmp_path / "whole.pt", weights_only=True)
    assert torch.equal(whole["params"][0], w) and whole["step"] == 12


def test_shardx_loads_a_dcp_checkpoint_of_plain_tensors(tmp_path):
    w, b = torch.randn(7, 3), torch.randn(3, dtype=torch.float64)
    sd = {"model": {"w": w, "layers": [b, torch.arange(5)]}, "epoch": 4}
    dcp.save(sd, checkpoint_id=tmp_path / "plain")
    m22 = Mesh((2, 2), ("a", "b"))
    back = shardx.load_checkpoint(tmp_path / "plain", m22,
                                  {"model": {"w": [S(0), S(1)], "layers": [[R(), S(0)]]}})
    assert set(back) == {"model", "epoch"} and back["epoch"] == 4
    assert back["model"]["w"].layout_text == "[S(0), S(1)]"
    assert torch.equal(back["model"]["w"].to_torch(), w)
    assert [r_.shape for r_ in (back["model"]["w"].local(r) for r in range(4))] == \
        [(4, 2), (4, 1), (3, 2), (3, 1)]
    assert torch.equal(back["model"]["layers"][0].to_torch(), b)
    assert torch.equal(back["model"]["layers"][1].to_torch(), torch.arange(5))
    assert back["model"]["layers"][1].layout_text == "R"   # not named: replicated


_GLOO_WORKER = textwrap.dedent("""
    import os, sys
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import torch.multiprocessing as mp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    def main(rank, folder):
        dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank,
                                world_size=2)
        mesh = init_device_mesh("cpu", (2,))
        want = torch.load(f"{folder}/want.pt", weights_only=True)
        # A ShardX checkpoint (saved on 2x2) into DTensors of other layouts.
        sd = {"params": [distribute_tensor(torch.zeros_like(want["w"]), mesh, [Shard(1)]),
                         distribute_tensor(torch.zeros_like(want["b"]), mesh, [Replicate()])],
              "step": 0}
        dcp.load(sd, checkpoint_id=f"{folder}/shardx")
        assert torch.equal(sd["params"][0].full_tensor(), want["w"]), "w"
        assert torch.equal(sd["params"][1].full_tensor(), want["b"]), "b"
        assert sd["step"] == 5
        # DTensors (uneven rows) saved by DCP, for ShardX to load.
        dcp.save({"model": {"w": distribute_tensor(want["a"], mesh, [Shard(0)]),
                            "v": [distribute_tensor(want["c"], mesh, [Shard(1)])]},
                  "b": distribute_tensor(want["b"], mesh, [Replicate()]), "step": 11},
                 checkpoint_id=f"{folder}/dcp")
        with open(f"{folder}/ok{rank}", "w") as f:
            f.write("ok")
        # Both ranks past every collective before either tears gloo down: a
        # rank that left first could abort the other's gloo thread
        # ("terminate called without an active exception").
        dist.barrier()
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(main, args=(sys.argv[1],), nprocs=2)
""")


def test_dtensor_checkpoints_of_a_gloo_world(tmp_path):
    w, b = torch.randn(5, 6), torch.randn(3)
    a, c = torch.randn(5, 4), torch.randn(2, 7, dtype=torch.float64)
    torch.save({"w": w, "b": b, "a": a, "c": c}, tmp_path / "want.pt")
    m22 = Mesh((2, 2), ("a", "b"))
    shardx.save_checkpoint(tmp_path / "shardx", {
        "params": [ShardedTensor.from_torch(w, m22, [S(0), S(0)]),
                   ShardedTensor.from_torch(b, m22, [S(0), R()])], "step": 5})
    (tmp_path / "worker.py").write_text(_GLOO_WORKER)
    r = subprocess.run([sys.executable, str(tmp_path / "worker.py"), str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "ok0").exists() and (tmp_path / "ok1").exists()
    md = dcp.FileSystemReader(tmp_path / "dcp").read_metadata()
    assert sorted(tuple(ch.sizes) for ch in md.state_dict_metadata["model.w"].chunks) == \
        [(2, 4), (3, 4)]   # the DTensors' uneven shards
    back = shardx.load_checkpoint(tmp_path / "dcp", Mesh((2, 2), ("a", "b")),
                                  {"model": {"w": [S(1), S(0)], "v": [[R(), S(1)]]},
                                   "b": [S(0), R()]})
    assert back["step"] == 11
    assert torch.equal(back["model"]["w"].to_torch(), a)
    assert torch.equal(back["model"]["v"][0].to_torch(), c)
    assert torch.equal(back["b"].to_torch(), b)
    assert [back["model"]["w"].local(r).shape for r in range(2)] == [(3, 2), (2, 2)]


# ---------------------------------------------------------------------------
# Interrupted writes.
# ---------------------------------------------------------------------------

_SAVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import torch, shardx
    from shardx import Mesh, Shard, Replicate, ShardedTensor
    mesh = Mesh((2, 2), ("a", "b"))
    root, first, last = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    for i in range(first, last):
        state = {"w": ShardedTensor.from_torch(torch.full((64, 32), float(i)), mesh,
                                               [Shard(0), Shard(1)]),
                 "b": ShardedTensor.from_torch(torch.full((32,), float(i)), mesh,
                                               [Replicate(), Shard(0)]),
                 "step": i}
        shardx.save_checkpoint(root, state, step=i)
        print("saved", i, flush=True)
""")


def _saver(tmp_path, root, first, last, **env):
    script = tmp_path / "saver.py"
    script.write_text(_SAVER)
    return subprocess.Popen([sys.executable, str(script), PYTHON_DIR, str(root), str(first),
                             str(last)], env=dict(os.environ, **env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _check_step(root, mesh, want_step):
    ck = shardx.load_checkpoint(root, mesh, [S(0)])
    assert ck["step"] == want_step
    assert (ck["w"].full() == want_step).all() and (ck["b"].full() == want_step).all()


@pytest.mark.parametrize("stage", ["data", "metadata", "publish", "latest"])
def test_a_writer_killed_mid_save_leaves_the_last_good_checkpoint(tmp_path, stage):
    root = tmp_path / "root"
    marker = tmp_path / "stalled"
    # Step 1 completes; step 2 stalls at `stage` and is killed there.
    p = _saver(tmp_path, root, 1, 3, SHARDX_CHECKPOINT_TEST_STALL=f"{stage}-2:{marker}")
    deadline = time.time() + 120
    try:
        while not marker.exists():
            assert p.poll() is None, p.communicate()
            assert time.time() < deadline, "the saver never reached the stall"
            time.sleep(0.05)
    finally:
        p.send_signal(signal.SIGKILL)   # also when an assertion above fails
        p.wait()
    m = Mesh((2,), ("x",))
    left = sorted(os.listdir(root))
    if stage == "latest":
        # Published but not yet named by `latest`: step 2 is complete, so
        # the root loads it (a resume goes on after it, and saving step 2
        # again is not needed); step 1 still loads by its step.
        assert "step-00000002" in left
        assert (root / "latest").read_text().strip() == "step-00000001"
        assert shardx.latest_checkpoint(root) == str(root / "step-00000002")
        _check_step(root, m, 2)
        _check_step(root / "step-00000001", m, 1)
    else:
        # Only a temporary directory of step 2, which nothing loads.
        assert [n for n in left if n.startswith("step-")] == ["step-00000001"]
        tmp = [n for n in left if n.startswith(".tmp-step-00000002-")]
        assert len(tmp) == 1
        _check_step(root, m, 1)
        with pytest.raises(CheckpointError, match="unfinished"):
            shardx.load_checkpoint(root / tmp[0], m)
        # The next save of step 2 clears it and publishes.
        state = {"w": ShardedTensor.from_torch(torch.full((64, 32), 2.0), m, [S(0)]),
                 "b": ShardedTensor.from_torch(torch.full((32,), 2.0), m, [R()]), "step": 2}
        shardx.save_checkpoint(root, state, step=2)
        assert not [n for n in os.listdir(root) if n.startswith(".tmp-")]
        _check_step(root, m, 2)


def test_a_writer_killed_at_random_points(tmp_path):
    root = tmp_path / "root"
    rng = random.Random(1)
    m = Mesh((3,), ("x",))
    first = 0
    for _ in range(3):
        p = _saver(tmp_path, root, first, first + 1000)
        # At least one save done (a saver that hangs instead is killed after
        # two minutes and fails the test).
        timer = threading.Timer(120, p.kill)
        timer.start()
        try:
            line = p.stdout.readline()
        finally:
            timer.cancel()
        if not line.startswith("saved"):
            p.kill()
            pytest.fail(f"the saver stopped before its first save: {p.communicate()[1]}")
        time.sleep(rng.uniform(0.0, 0.6))
        p.send_signal(signal.SIGKILL)
        p.wait()
        latest = shardx.latest_checkpoint(root)
        step = int(latest.rsplit("-", 1)[1])
        assert step >= first
        _check_step(root, m, step)
        published = [int(n.split("-")[1]) for n in os.listdir(root) if n.startswith("step-")]
        for n in published:   # every published step is whole
            _check_step(root / f"step-{n:08d}", m, n)
        # Killed between the rename and `latest`: latest_checkpoint still
        # finds the newest published step, so a resume goes on after it.
        assert max(published) == step
        first = step + 1


# ---------------------------------------------------------------------------
# Damaged checkpoints.
# ---------------------------------------------------------------------------

def _damaged(tmp_path):
    m22 = Mesh((2, 2), ("a", "b"))
    where = shardx.save_checkpoint(tmp_path / "ck", {
        "w": ShardedTensor.from_torch(torch.randn(8, 6), m22, [S(0), S(1)]), "step": 1})
    return where, m22


def _flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x40]))


def test_damaged_checkpoints_are_errors(tmp_path):
    m2 = Mesh((2,), ("x",))
    cases = {
        "missing data file": (lambda d: os.remove(os.path.join(d, "__2_0.distcp")),
                              r"__2_0.distcp is missing"),
        "truncated data file": (lambda d: os.truncate(os.path.join(d, "__1_0.distcp"), 100),
                                r"__1_0.distcp is truncated or damaged"),
        "flipped data byte": (lambda d: _flip(os.path.join(d, "__3_0.distcp"), 700),
                              "fails its CRC-32 check"),
        "flipped metadata byte": (lambda d: _flip(os.path.join(d, ".metadata"), 200),
                                  r"\.metadata is corrupt"),
        "missing metadata": (lambda d: os.remove(os.path.join(d, ".metadata")),
                             r"has no \.metadata: an unfinished or damaged checkpoint"),
        "garbled shardx.json": (lambda d: open(os.path.join(d, "shardx.json"), "w").write("{"),
                                r"shardx.json is corrupt"),
    }
    for name, (damage, message) in cases.items():
        where, _ = _damaged(tmp_path / name.replace(" ", "_"))
        damage(where)
        with pytest.raises(CheckpointError, match=message):
            shardx.load_checkpoint(where, m2, [S(0)])


def test_damaged_dcp_checkpoints_are_errors(tmp_path):
    # No shardx.json, so no checksums: sizes and chunk coverage are checked.
    w = torch.randn(6, 4)
    dcp.save({"w": w}, checkpoint_id=tmp_path / "a")
    data = [n for n in os.listdir(tmp_path / "a") if n.endswith(".distcp")][0]
    os.truncate(tmp_path / "a" / data, 10)
    m2 = Mesh((2,), ("x",))
    with pytest.raises(CheckpointError, match="truncated or damaged"):
        shardx.load_checkpoint(tmp_path / "a", m2)
    # Metadata that lost a chunk would leave zeros: refused.
    dcp.save({"w": w}, checkpoint_id=tmp_path / "b")
    path = tmp_path / "b" / ".metadata"
    md = pickle.loads(path.read_bytes())
    entry = md.state_dict_metadata["w"]
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata
    entry.chunks = [ChunkStorageMetadata(torch.Size([0, 0]), torch.Size([3, 4]))]
    path.write_bytes(pickle.dumps(md))
    with pytest.raises(CheckpointError, match=r"the saved chunks of w hold 12 elements, its shape "
                                              r"\[6, 4\] has 24"):
        shardx.load_checkpoint(tmp_path / "b", m2)


def test_latest_naming_a_missing_directory_falls_back(tmp_path, caplog):
    m2 = Mesh((2,), ("x",))
    for i in (1, 2):
        shardx.save_checkpoint(tmp_path, {"w": ShardedTensor.from_torch(torch.full((4,), float(i)),
                                                                         m2, [S(0)])}, step=i)
    shutil.rmtree(tmp_path / "step-00000002")
    assert shardx.load_checkpoint(tmp_path, m2)["w"].full().tolist() == [1.0] * 4
    assert "names step-00000002, which is missing" in caplog.text
    (tmp_path / "latest").write_text("../elsewhere\n")
    with pytest.raises(CheckpointError, match="not a step-<n> directory"):
        shardx.load_checkpoint(tmp_path, m2)


# ---------------------------------------------------------------------------
# The mpi backend: each process writes its rank's shards and reads its own.
# ---------------------------------------------------------------------------

_MPI_SCRIPT = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, sys.argv[1])
    import numpy as np, torch, shardx
    from shardx import Mesh, Partial, Replicate, Shard, ShardedTensor
    folder = sys.argv[2]
    mesh = Mesh((2,), ("x",))
    x = torch.arange(35, dtype=torch.float32).reshape(5, 7)
    state = {"w": ShardedTensor.from_torch(x, mesh, [Shard(0)], backend="mpi"),
             "r": ShardedTensor.from_torch(x[0], mesh, [Replicate()], backend="mpi"),
             "p": ShardedTensor.from_torch(x, mesh, [Partial("sum")], backend="mpi"),
             "step": 9}
    rank = shardx.sharded_tensor._process_session(mesh).process_rank
    shardx.save_checkpoint(os.path.join(folder, "root"), state, step=9)
    back = shardx.load_checkpoint(os.path.join(folder, "root"), mesh,
                                  {"w": [Shard(1)], "p": [Shard(0)]}, backend="mpi")
    want = torch.chunk(x, 2, 1)[rank]
    assert np.array_equal(back["w"].local(rank), want.numpy()), back["w"].local(rank)
    assert np.array_equal(back["p"].local(rank), torch.chunk(x, 2, 0)[rank].numpy())
    assert np.array_equal(back["r"].local(rank), x[0].numpy()) and back["step"] == 9
    # A state of constants alone cannot tell a process its rank: refused.
    try:
        shardx.save_checkpoint(os.path.join(folder, "consts"), {"step": 9}, step=1)
        raise SystemExit("a state without ShardedTensors was saved under mpi")
    except shardx.CheckpointError as e:
        assert "at least one ShardedTensor" in str(e), e
    with open(os.path.join(folder, f"rank{rank}"), "w") as f:
        f.write("ok")
""")


def test_mpi_backend_save_and_load(tmp_path):
    mpirun = shutil.which("mpirun")
    if mpirun is None or not runtime().has_mpi:
        pytest.skip("needs OpenMPI and a build with the mpi backend")
    (tmp_path / "script.py").write_text(_MPI_SCRIPT)
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable,
           str(tmp_path / "script.py"), PYTHON_DIR, str(tmp_path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "rank0").exists() and (tmp_path / "rank1").exists()
    where = shardx.latest_checkpoint(tmp_path / "root")
    # Each process wrote its own rank's file (the replicated and reduced
    # tensors once).
    assert sorted(n for n in os.listdir(where) if n.endswith(".distcp")) == \
        ["__0_0.distcp", "__1_0.distcp"]
    x = torch.arange(35, dtype=torch.float32).reshape(5, 7)
    back = shardx.load_checkpoint(where, Mesh((2, 2), ("a", "b")), {"w": [S(0), S(1)]})
    assert torch.equal(back["w"].to_torch(), x) and torch.equal(back["r"].to_torch(), x[0])
    assert torch.equal(back["p"].to_torch(), x) and back["step"] == 9
