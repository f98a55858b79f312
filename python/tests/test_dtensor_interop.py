"""DTensor interop (shardx.dtensor, docs/DTensor.md):
- round trips DTensor -> ShardedTensor -> DTensor on a real gloo process
  group on CPU (6 processes: 1-D and 2-D meshes, every placement kind, even
  and uneven shards, several dtypes; dtensor_interop_worker.py), and under
  mpirun on the mpi backend (each process maps its own shard);
- the split ShardX reads from DTensor placements against DTensor's own code
  on 1-D to 3-D meshes, explicit sizes included;
- a torchtitan-style Llama plan (parallelize_module's dict, unchanged) gives
  the parameter placements parallelize_module gives, and trains through
  shardx.compile like eager on tp and dp x tp meshes;
- every error path."""

import itertools
import os
import shutil
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import shardx
from shardx import Mesh, Partial, Replicate, Shard, ShardedTensor, StridedShard
from shardx.dtensor import (DTensorInteropError, dtensor_dim_indices, layout_of, placement_from_dtensor,
                            placement_to_dtensor, plan_from_parallel_styles)
from shardx.sharded_tensor import runtime

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORKER = os.path.join(HERE, "dtensor_interop_worker.py")
RTOL, ATOL = 1e-5, 1e-6  # test_jit.py's


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(cmds, env, timeout=240):
    """Runs the worker processes; returns their outputs (all must exit 0)."""
    procs = [subprocess.Popen(c, env={**env, **e}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for c, e in cmds]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-6000:]
    return outs


def test_round_trips_threads_gloo(build_dir):
    """6 gloo processes, each holding a threads session of the whole mesh."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="6",
               PYTHONPATH=os.path.join(ROOT, "python"))
    outs = run_world([([sys.executable, WORKER, "threads"], {"RANK": str(r)}) for r in range(6)], env)
    for r, out in enumerate(outs):
        assert "FAIL" not in out, out
        oks = out.count("[ok] ")
        assert oks == 48, f"rank {r}: {oks} cases passed\n{out[-3000:]}"


def test_round_trips_mpi_gloo(build_dir):
    """mpirun -np 4: each process is one ShardX mpi rank and one gloo rank;
    its DTensor shard maps to its ShardX shard with no communication."""
    mpirun = shutil.which("mpirun")
    if mpirun is None or not runtime().has_mpi:
        pytest.skip("no mpirun or no mpi backend in this build")
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               PYTHONPATH=os.path.join(ROOT, "python"))
    out = run_world([([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "4", sys.executable, WORKER,
                       "mpi"], {})], env)[0]
    assert "FAIL" not in out, out
    # Counted in the whole output: mpirun may glue two ranks' lines together.
    assert out.count("[ok] ") == 8 * 4, out[-3000:]


# ----------------------------------------------------------------------------
# The split ShardX reads from DTensor placements, against DTensor's code
# ----------------------------------------------------------------------------


def test_split_matches_dtensor():
    """For every placement assignment (Shard, _StridedShard, Replicate) on
    1-D to 3-D meshes and even and uneven sizes: dtensor_dim_indices is
    DTensor's _get_shard_size_and_offsets, and where layout_of gives a
    layout (explicit sizes included) every rank holds DTensor's indices;
    where it refuses, no default layout holds them."""
    from dtensor_oracle import dtensor_indices
    counts = {"default": 0, "sizes": 0, "refused": 0}
    for mesh_shape in [(3,), (2, 3), (3, 2), (2, 2, 2)]:
        mesh = Mesh(mesh_shape)
        opts = [Shard(0), Replicate(), StridedShard(0, 2), StridedShard(0, 4)]
        for length in (4, 6, 7, 10, 16):
            shape = (length, 2)
            for pls in itertools.product(opts, repeat=len(mesh_shape)):
                coords = list(itertools.product(*[range(n) for n in mesh_shape]))
                want = {c: dtensor_indices(shape, mesh_shape, c, [placement_to_dtensor(p) for p in pls])
                        for c in coords}
                for c in coords:
                    got = [dtensor_dim_indices(n, d, mesh_shape, c, pls).tolist() for d, n in enumerate(shape)]
                    assert [sorted(g) for g in got] == want[c], (mesh_shape, shape, pls, c)
                try:
                    layout = layout_of(mesh, list(pls), shape)
                except DTensorInteropError:
                    counts["refused"] += 1
                    continue
                counts["sizes" if layout is not None and "sizes" in str(layout) else "default"] += 1
                for c in coords:
                    if layout is None:
                        continue
                    runs = layout.local_runs(list(mesh_shape), list(shape), list(c))
                    held = [sorted(i for o, n in d for i in range(o, o + n)) for d in runs]
                    assert held == want[c], (mesh_shape, shape, pls, c, str(layout))
    assert counts["sizes"] > 0 and counts["refused"] > 0 and counts["default"] > 0, counts


def test_placements_map_both_ways():
    from torch.distributed.tensor import Partial as TP, Replicate as TR, Shard as TS
    from torch.distributed.tensor.placement_types import _StridedShard
    pairs = [(TS(1), Shard(1)), (_StridedShard(0, split_factor=4), StridedShard(0, 4)), (TR(), Replicate())]
    pairs += [(TP(op), Partial(op)) for op in ("sum", "avg", "max", "min")]
    for t, s in pairs:
        assert placement_from_dtensor(t) == s
        assert placement_to_dtensor(s) == t
    assert placement_from_dtensor(TP("product")) == Partial("prod")


# ----------------------------------------------------------------------------
# Parallel styles
# ----------------------------------------------------------------------------


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.q_norm = nn.RMSNorm(dim // heads)
        self.k_norm = nn.RMSNorm(dim // heads)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q_norm(self.wq(x).view(b, s, self.heads, -1))
        k = self.k_norm(self.wk(x).view(b, s, self.heads, -1))
        v = self.wv(x).view(b, s, self.heads, -1)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.attention_norm = nn.RMSNorm(dim)
        self.attention = Attention(dim, heads)
        self.ffn_norm = nn.RMSNorm(dim)
        self.feed_forward = FeedForward(dim, hidden)

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    """torchtitan's Llama 3 module names, tiny."""

    def __init__(self, vocab=32, dim=16, heads=4, hidden=32, layers=1):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleDict({str(i): Block(dim, heads, hidden) for i in range(layers)})
        self.norm = nn.RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h)
        return self.output(self.norm(h))


def torchtitan_plan(loss_parallel=False):
    """torchtitan's apply_tp (llama3/infra/parallelize.py), as the two
    parallelize_module calls it makes: the root plan and the layer plan on
    every ``layers.*``."""
    from torch.distributed.tensor import Replicate as TR, Shard as TS
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)
    root = {
        "tok_embeddings": RowwiseParallel(input_layouts=TR(), output_layouts=TS(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=TS(1), output_layouts=TS(-1) if loss_parallel else TR(),
                                  use_local_output=not loss_parallel),
    }
    layer = {
        "attention_norm": SequenceParallel(),
        "attention": PrepareModuleInput(input_layouts=(TS(1), None, None, None),
                                        desired_input_layouts=(TR(), None, None, None)),
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=TS(1)),
        "attention.q_norm": SequenceParallel(use_local_output=True),
        "attention.k_norm": SequenceParallel(use_local_output=True),
        "ffn_norm": SequenceParallel(),
        "feed_forward": PrepareModuleInput(input_layouts=(TS(1),), desired_input_layouts=(TR(),)),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=TS(1)),
        "feed_forward.w3": ColwiseParallel(),
    }
    return root, layer


def test_torchtitan_plan_gives_parallelize_module_placements(fake_world):
    """The plan's parameter placements are the ones parallelize_module
    gives the same model (a fake process group), on the tp axis of a
    dp x tp mesh (Replicate on dp); the activation constraints are the
    styles' layouts."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module
    torch.manual_seed(0)
    model = Llama(layers=2)
    root, layer = torchtitan_plan()
    dmesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    plan = plan_from_parallel_styles(model, dmesh, [("", root), ("layers.*", layer)])
    assert plan.mesh == Mesh((2, 2), ("dp", "tp")) and plan.tp_axis == 1
    parallelize_module(model, dmesh["tp"], root)
    for block in model.layers.values():
        parallelize_module(block, dmesh["tp"], layer)
    for name, p in model.named_parameters():
        want = [Replicate(), placement_from_dtensor(p.placements[0])]
        assert plan.params.get(name, [Replicate(), Replicate()]) == want, name
    assert plan.params["layers.1.attention.wo.weight"] == [Replicate(), Shard(1)]
    assert plan.params["tok_embeddings.weight"] == [Replicate(), Shard(0)]
    got = {(c.fqn, c.kind, c.index): c.chain for c in plan.constraints}
    assert got[("layers.0.attention", "input", 0)] == (Shard(1), Replicate())
    assert got[("layers.1.feed_forward.w2", "output", 0)] == (Shard(1),)
    assert got[("layers.0.attention.wq", "input", 0)] == (Replicate(),)
    assert got[("layers.0.attention.wo", "input", 0)] == (Shard(-1),)
    assert got[("tok_embeddings", "output", 0)] == (Shard(1),)
    assert got[("output", "input", 0)] == (Shard(1), Replicate())
    assert got[("norm", "input", 0)] == (Shard(1),)
    # The same plan as one dict with wildcards.
    flat = plan_from_parallel_styles(model, Mesh((2, 2), ("dp", "tp")),
                                     {**root, **{f"layers.*.{k}": v for k, v in layer.items()}})
    assert flat.params == plan.params
    assert sorted(map(repr, flat.constraints)) == sorted(map(repr, plan.constraints))


def llama_step():
    torch.manual_seed(0)
    model = Llama()
    step = shardx.TrainStep(model, lambda out, y: F.cross_entropy(out.flatten(0, 1), y.flatten()), "sgd",
                            lr=0.5, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 32, (4, 8), generator=g), torch.randint(0, 32, (4, 8), generator=g))
               for _ in range(3)]
    return model, step, batches


@pytest.mark.parametrize("mesh,batch", [(Mesh((2,), ("tp",)), {}),
                                        (Mesh((2, 2), ("dp", "tp")), {"dp": Shard(0)})],
                         ids=["tp2", "dp2xtp2"])
def test_torchtitan_plan_trains_like_eager(tmp_path, monkeypatch, build_dir, mesh, batch):
    """The torchtitan plan, unchanged, trains the tiny Llama through
    shardx.compile (3 SGD steps, sequence parallel norms, vocab-parallel
    embedding) and matches eager at test_jit's tolerances."""
    monkeypatch.setenv("SHARDX_CACHE_DIR", str(tmp_path / "cache"))
    model, step, batches = llama_step()
    root, layer = torchtitan_plan()
    plan = plan_from_parallel_styles(model, mesh, [("", root), ("layers.*", layer)], batch=batch)
    ins, outs = plan.placements(step, 1)
    assert ins[-1] == ([Shard(0), Replicate()] if batch else [Replicate()])
    hooks = plan.install(model)
    try:
        f = shardx.compile(step, mesh, ins, outs, donate=(0, 1), name="llama_tp")
        params, state = step.example_args(batches[0][:1], batches[0][1])[:2]
        eager = (params, state)
        for x, y in batches:
            loss, params, state = f(params, state, (x,), y)
            want_loss, p2, s2 = step.run_eager(*eager, (x,), y)
            eager = (p2, s2)
            np.testing.assert_allclose(loss.to_torch().numpy(), want_loss.numpy(), rtol=RTOL, atol=ATOL)
            for name, got, want in zip(step.param_names, params, p2):
                np.testing.assert_allclose(got.to_torch().numpy(), want.numpy(), rtol=RTOL, atol=ATOL,
                                           err_msg=name)
        assert f.compiles == 1
        # The plan's layouts are the ones the parameters have.
        wq = step.param_names.index("layers.0.attention.wq.weight")
        assert params[wq].placements == tuple(plan.params["layers.0.attention.wq.weight"])
        program = open(next(p for p in (tmp_path / "cache").iterdir() if p.suffix == ".mlir")).read()
        assert "shardx.annotate" in program
    finally:
        hooks.remove()


# ----------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------


def test_plan_errors(fake_world):
    from torch.distributed.tensor import Partial as TP, Shard as TS
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,
                                                   RowwiseParallel)
    from torch.distributed.tensor.parallel.style import ParallelStyle
    from torch.distributed.tensor.placement_types import _StridedShard
    model = Llama()
    tp = Mesh((2,), ("tp",))

    class MyStyle(ParallelStyle):
        def _apply(self, module, mesh):
            return module

    class MyColwise(ColwiseParallel):
        pass

    cases = [
        ({"norm": ColwiseParallel()}, "norm: ColwiseParallel applies to nn.Linear and nn.Embedding, not RMSNorm"),
        ({"output": MyStyle()}, "output: ShardX does not know the parallel style MyStyle"),
        ({"output": MyColwise()}, "output: ShardX does not know the parallel style MyColwise"),
        ({"output": ColwiseParallel(output_layouts=TP())}, "output: ColwiseParallel(output_layouts=Partial"),
        ({"layers.0": PrepareModuleInput(input_layouts=_StridedShard(0, split_factor=2),
                                          desired_input_layouts=TS(0))},
         "layers.0: PrepareModuleInput(input_layouts[0]=_StridedShard"),
        ({"layers.0": PrepareModuleOutput(output_layouts=TS(1), desired_output_layouts=TP("max"))},
         "layers.0: PrepareModuleOutput(desired_output_layouts[0]=Partial"),
        ({"output": "colwise"}, "plan key 'output': 'colwise' is not a ParallelStyle"),
    ]
    for plan, text in cases:
        with pytest.raises(DTensorInteropError) as e:
            plan_from_parallel_styles(model, tp, plan)
        assert text in str(e.value), (text, str(e.value))
    with pytest.raises(DTensorInteropError, match="name the axis the styles apply on"):
        plan_from_parallel_styles(model, Mesh((2, 2), ("a", "b")), {"output": ColwiseParallel()})
    with pytest.raises(DTensorInteropError, match="tp_axis 'x' is not an axis"):
        plan_from_parallel_styles(model, tp, {}, tp_axis="x")
    with pytest.raises(DTensorInteropError, match="tp_axis 3 is out of range"):
        plan_from_parallel_styles(model, tp, {}, tp_axis=3)
    with pytest.raises(DTensorInteropError, match="batch placement on 'tp': not a data axis"):
        plan_from_parallel_styles(model, tp, {}, batch={"tp": Shard(0)})
    with pytest.raises(TypeError, match="a plan is a ParallelStyle or a dict"):
        plan_from_parallel_styles(model, tp, [("layers.*", 3)])
    # A parameter shared by two modules placed two ways.
    tied = Llama()
    tied.output.weight = tied.tok_embeddings.weight
    with pytest.raises(DTensorInteropError, match="output.weight: ColwiseParallel places it .* but it is the "
                                                  "tensor of tok_embeddings.weight"):
        plan_from_parallel_styles(tied, tp, {"tok_embeddings": ColwiseParallel(), "output": ColwiseParallel()})
    # Placed alike (vocab rows split), it is fine.
    assert plan_from_parallel_styles(tied, tp, {"tok_embeddings": RowwiseParallel(), "output": ColwiseParallel()}
                                     ).params == {"tok_embeddings.weight": [Shard(0)]}
    # A key that matches nothing is skipped with a warning, as parallelize_module does.
    with pytest.warns(UserWarning, match="'decoder' matches no submodule"):
        assert plan_from_parallel_styles(model, tp, {"decoder": ColwiseParallel()}).params == {}


def test_interop_errors_without_a_world():
    from torch.distributed.tensor import Partial as TP
    from torch.distributed.tensor.placement_types import _MaskPartial
    with pytest.raises(TypeError, match="from_dtensor takes a DTensor, got Tensor"):
        ShardedTensor.from_dtensor(torch.zeros(2))
    with pytest.raises(DTensorInteropError, match="has no ShardX counterpart"):
        placement_from_dtensor(_MaskPartial())
    st = ShardedTensor.from_torch(torch.zeros(4, 2), Mesh((2,)), [Shard(0)])
    text = ("needs torch.distributed initialized with 2 processes" if not dist.is_initialized()
            else "pass a device_mesh")
    with pytest.raises(DTensorInteropError, match=text):
        st.to_dtensor()
    assert issubclass(shardx.DTensorInteropError, ValueError)
