"""Out-of-range indices in compiled programs (docs/Importer.md, "Index
checks"): nothing is read or written outside a tensor, whatever the index
values, and a step with an out-of-range index raises eager's error instead
of returning a number; in range, the results are eager's."""

import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import shardx
from shardx import Mesh, Shard, ShardedTensor
from shardx.sharded_tensor import runtime

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _eager_error(f, *args):
    with pytest.raises(Exception) as info:
        f(*args)
    return info.type, str(info.value).splitlines()[0]


def _emb(w, idx):
    return F.embedding(idx, w).sum(0)


def _gather(x, idx):
    return torch.gather(x, 1, idx) * 2


def _index_select(x, idx):
    return torch.index_select(x, 0, idx) + 1


def _getitem(x, idx):
    return x[idx] + 1


def _index_put(x, idx, v):
    return x.index_put((idx,), v, accumulate=True)


def _scatter_add(x, idx, src):
    return x.scatter_add(1, idx, src)


def _bincount(x):
    return torch.bincount(x, minlength=6)


W = torch.randn(8, 4, dtype=torch.float64)
X2 = torch.randn(4, 5, dtype=torch.float64)

# name: (fn, good args, bad args, eager's exception type, eager's message
# or None where eager's names the value and the compiled one cannot).
CASES = {
    "embedding": (_emb, (W, torch.tensor([1, 7, 0])), (W, torch.tensor([1, 8, 0])),
                  IndexError, "index out of range in self"),
    "embedding_negative": (_emb, (W, torch.tensor([1, 7, 0])), (W, torch.tensor([1, -1, 0])),
                           IndexError, "index out of range in self"),
    "embedding_huge": (_emb, (W, torch.tensor([1, 7, 0])), (W, torch.tensor([1, 10**9, 0])),
                       IndexError, "index out of range in self"),
    "gather": (_gather, (X2, torch.tensor([[0, 4]] * 4)), (X2, torch.tensor([[0, 5]] * 4)),
               RuntimeError, None),
    "index_select": (_index_select, (W, torch.tensor([3, 0])), (W, torch.tensor([3, -1])),
                     IndexError, "index out of range in self"),
    "getitem_negative_wraps": (_getitem, (W, torch.tensor([-1, -8, 2])), (W, torch.tensor([-9, 0])),
                               IndexError, None),
    "index_put": (_index_put, (torch.zeros(8, 4, dtype=torch.float64), torch.tensor([1, -1, 1]),
                               torch.ones(3, 4, dtype=torch.float64)),
                  (torch.zeros(8, 4, dtype=torch.float64), torch.tensor([1, 8, 1]),
                   torch.ones(3, 4, dtype=torch.float64)), IndexError, None),
    "scatter_add": (_scatter_add, (torch.zeros(4, 5, dtype=torch.float64), torch.tensor([[0, 4]] * 4),
                                   torch.ones(4, 2, dtype=torch.float64)),
                    (torch.zeros(4, 5, dtype=torch.float64), torch.tensor([[0, -1]] * 4),
                     torch.ones(4, 2, dtype=torch.float64)), RuntimeError, None),
    "bincount_negative": (_bincount, (torch.tensor([0, 5, 5, 2]),), (torch.tensor([0, -1, 5, 2]),),
                          RuntimeError, "bincount only supports 1-d non-negative integral inputs."),
}


def _check(c, f, good, bad, exc, message):
    torch.testing.assert_close(c(*good).to_torch(), f(*good))
    assert _eager_error(f, *bad)[0] is exc
    with pytest.raises(exc) as info:
        c(*bad)
    if message is not None:
        assert str(info.value) == message
    else:
        assert "out of bounds" in str(info.value)
    # The next good step is right again.
    torch.testing.assert_close(c(*good).to_torch(), f(*good))


@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.parametrize("name", sorted(CASES))
def test_out_of_range_index_raises_eagers_error(name, ranks):
    f, good, bad, exc, message = CASES[name]
    _check(shardx.compile(f, Mesh((ranks,), ("x",))), f, good, bad, exc, message)


def test_bincount_value_past_minlength_raises():
    # Eager returns a longer result, which a compiled program cannot.
    x = torch.tensor([0, 6, 2])
    assert _bincount(x).shape == (7,)
    c = shardx.compile(_bincount, Mesh((2,), ("x",)))
    torch.testing.assert_close(c(torch.tensor([0, 5, 2])).to_torch(), _bincount(torch.tensor([0, 5, 2])))
    with pytest.raises(RuntimeError, match="minlength 6"):
        c(x)


def test_huge_embedding_index_reads_nothing_outside_the_table():
    # Before the indices were made safe, 10**9 read far outside the table
    # (a segmentation fault), and 9 a number.
    c = shardx.compile(_emb, Mesh((1,), ("tp",)))
    for bad in (9, 10**9, -(10**9)):
        with pytest.raises(IndexError, match="index out of range in self"):
            c(W, torch.tensor([1, bad, 3]))


def test_vocab_parallel_embedding():
    # The table split by rows: each rank looks up the rows it holds.
    c = shardx.compile(_emb, Mesh((2,), ("tp",)), in_placements=[[Shard(0)], None])
    _check(c, _emb, (W, torch.tensor([1, 7, 4, 3])), (W, torch.tensor([1, 9, 3, 0])),
           IndexError, "index out of range in self")


def test_data_parallel_indices_fail_on_one_rank():
    # The index split over the ranks: the bad one is on rank 1 only, and
    # every rank raises.
    c = shardx.compile(_emb, Mesh((2,), ("dp",)), in_placements=[None, [Shard(0)]])
    _check(c, _emb, (W, torch.tensor([1, 7, 4, 3])), (W, torch.tensor([1, 7, 4, 8])),
           IndexError, "index out of range in self")


@torch.compiler.nested_compile_region
def _region_lookup(w, idx):
    return F.embedding(idx, w) * 2


def _two_region_calls(w, idx):
    # One region function, called twice: each call has its own check.
    return _region_lookup(w, idx).sum(0) + _region_lookup(w, idx + 1).sum(0)


@pytest.mark.parametrize("ranks", [1, 2])
def test_index_check_inside_a_traced_region(ranks):
    # An indexing op in a nested_compile_region is imported once into a
    # region function (importer/region_import.py); its check count is a
    # result of the function, so each call's check reaches the step's code.
    # Before, the region's lookup read row 0 for a bad index and the step
    # returned a number. Index 7 is bad only in the second call (idx + 1).
    c = shardx.compile(_two_region_calls, Mesh((ranks,), ("dp",)),
                       in_placements=[None, [Shard(0)]] if ranks > 1 else None)
    _check(c, _two_region_calls, (W, torch.tensor([1, 6, 4, 3])), (W, torch.tensor([1, 7, 4, 3])),
           IndexError, "index out of range in self")


def _two_checks(w, idx, x, gidx):
    return F.embedding(idx, w).sum() + torch.gather(x, 1, gidx).sum()


@pytest.mark.parametrize("ranks", [1, 2])
def test_first_failed_check_is_raised(ranks):
    # The step's checks' counts share one vector (one all-reduce where the
    # indices are split); the error is the first failed check's in program
    # order, as eager raises the first.
    c = shardx.compile(_two_checks, Mesh((ranks,), ("dp",)),
                       in_placements=[None, [Shard(0)], None, None] if ranks > 1 else None)
    good = (W, torch.tensor([1, 7]), X2, torch.tensor([[0, 4]] * 4))
    torch.testing.assert_close(c(*good).to_torch(), _two_checks(*good))
    both = (W, torch.tensor([1, 8]), X2, torch.tensor([[0, 5]] * 4))
    second = (W, torch.tensor([1, 7]), X2, torch.tensor([[0, 5]] * 4))
    for bad in (both, second):
        exc = _eager_error(_two_checks, *bad)[0]
        with pytest.raises(exc) as info:
            c(*bad)
        assert ("out of range in self" in str(info.value)) == (bad is both)


def test_split_indices_reduce_their_counts_once(tmp_path, build_dir):
    # Two checks on indices split over dp: their counts are Partial(sum),
    # reduced by one all-reduce of the [2] vector, not one per check.
    from shardx.importer.module import trace
    path = tmp_path / "two.mlir"
    path.write_text(trace(_two_checks, (W, torch.tensor([1, 7]), X2, torch.tensor([[0, 4]] * 4)),
                          Mesh((2,), ("dp",)), [None, [Shard(0)], None, [Shard(0)]], None,
                          index_checks=True))
    r = subprocess.run([f"{build_dir}/bin/shardx-opt", str(path), "--shardx-propagate",
                        "--shardx-insert-reshards", "--shardx-print-plan", "-o", "/dev/null"],
                       capture_output=True, text=True, check=True)
    counts = [line for line in r.stderr.splitlines()
              if "remark: plan [P(sum)]" in line and ("xi64>" in line or "tensor<i64>" in line)]
    assert len(counts) == 1 and "tensor<2xi64>" in counts[0], r.stderr


def test_failed_step_keeps_written_inputs_and_donated_stays_donated():
    def step(x, idx, v):
        x.index_put_((idx,), v, accumulate=True)
        return x.sum()
    x = torch.zeros(8, 4, dtype=torch.float64)
    v = torch.ones(2, 4, dtype=torch.float64)
    c = shardx.compile(step, Mesh((2,), ("x",)))
    c(x, torch.tensor([1, 2]), v)
    before = x.clone()
    with pytest.raises(IndexError):
        c(x, torch.tensor([1, 8]), v)
    # Eager raises before writing: so does the compiled step.
    torch.testing.assert_close(x, before)

    # A donated input's buffers went to the failed step's outputs, which
    # are dropped: it stays donated (a later use raises DonatedError).
    def upd(w, idx):
        return w + F.embedding(idx, w).sum()
    mesh = Mesh((2,), ("x",))
    d = shardx.compile(upd, mesh, in_placements=[[Shard(0)], None], out_placements=[[Shard(0)]], donate=(0,))
    w = ShardedTensor.from_torch(W.clone(), mesh, [Shard(0)])
    with pytest.raises(IndexError):
        d(w, torch.tensor([9]))
    with pytest.raises(shardx.DonatedError):
        w.to_torch()
    w = ShardedTensor.from_torch(W.clone(), mesh, [Shard(0)])
    torch.testing.assert_close(d(w, torch.tensor([7])).to_torch(), upd(W, torch.tensor([7])))


def test_checks_survive_export_and_load(tmp_path):
    c = shardx.compile(_emb, Mesh((2,), ("tp",)), in_placements=[[Shard(0)], None], name="emb")
    good, bad = torch.tensor([1, 7, 4]), torch.tensor([1, 8, 4])
    want = c(W, good).to_torch()
    package = c.export(tmp_path / "emb.shardx")
    h = shardx.load(str(package))
    torch.testing.assert_close(torch.from_numpy(h(W.numpy(), good.numpy()).full()), want)
    with pytest.raises(IndexError, match="index out of range in self"):
        h(W.numpy(), bad.numpy())
    assert h.compiles == 0


def test_exported_artifact_fails_its_index_check(tmp_path, build_dir):
    # The package's artifact run by shardx-exec, as a job from the command
    # line: the program description names the check output and its checks
    # (from the importer's shardx.index_checks result attribute), so an
    # out-of-range index is an error with eager's message, exit 1 and no
    # output written; in range the outputs are the JIT's. Before, it exited
    # 0 and wrote the embedding sum with row 0 read for the bad index.
    c = shardx.compile(_emb, Mesh((2,), ("tp",)), in_placements=[[Shard(0)], None], name="emb")
    good, bad = torch.tensor([1, 7, 4]), torch.tensor([1, 8, 4])
    want = c(W, good).to_torch().numpy()
    package = c.export(tmp_path / "emb.shardx")
    with zipfile.ZipFile(package) as z:
        (member,) = [n for n in z.namelist() if n.startswith("artifacts/")]
        (tmp_path / "emb.so").write_bytes(z.read(member))
    np.save(tmp_path / "w.npy", W.numpy())
    np.save(tmp_path / "good.npy", good.numpy())
    np.save(tmp_path / "bad.npy", bad.numpy())
    out = tmp_path / "out"
    out.mkdir()

    def run(idx):
        return subprocess.run([os.path.join(build_dir, "bin", "shardx-exec"), str(tmp_path / "emb.so"),
                               f"--inputs={tmp_path / 'w.npy'},{tmp_path / idx}", f"--outputs={out}"],
                              capture_output=True, text=True, timeout=120)

    r = run("bad.npy")
    assert r.returncode == 1, r.stdout + r.stderr
    assert ("shardx-exec: error: index check 1 of 1 failed: IndexError: index out of range in self"
            in r.stderr), r.stderr
    assert os.listdir(out) == []
    r = run("good.npy")
    assert r.returncode == 0, r.stdout + r.stderr
    # The step's one output; the check code is not written.
    (result,) = sorted(out.iterdir())
    np.testing.assert_array_equal(np.load(result), want)


def test_artifact_raises_eager_error_and_hides_the_code(tmp_path):
    # A program traced with trace()'s defaults and run as an Artifact from
    # Python: the checks are on by default, the entry's outputs are eager's
    # (the code is left out), and an out-of-range index raises eager's
    # error. Before, trace() left the checks out and the call returned the
    # sum with row 0 read for the bad index.
    from shardx.artifact import Artifact, compile_mlir
    from shardx.importer.module import trace
    good, bad = torch.tensor([1, 7, 4]), torch.tensor([1, 8, 4])
    for mesh, pl in ((None, None), (Mesh((2,), ("tp",)), [[Shard(0)], None])):
        text = trace(_emb, (W, good), mesh, pl)
        assert "shardx.index_checks" in text
        fn = Artifact(compile_mlir(text, str(tmp_path / "emb.so")))["_emb"]
        assert len(fn.outputs) == 1 and fn.index_checks == [
            ("IndexError", "index out of range in self")]
        (out,) = fn(W.numpy(), good.numpy())
        np.testing.assert_allclose(out, _emb(W, good).numpy(), rtol=1e-12)
        exc, message = _eager_error(_emb, W, bad)
        with pytest.raises(exc, match=message):
            fn(W.numpy(), bad.numpy())
    # Without checks, as before: no code, and the bad index reads row 0.
    text = trace(_emb, (W, good), index_checks=False)
    assert "shardx.index_checks" not in text
    fn = Artifact(compile_mlir(text, str(tmp_path / "off.so")))["_emb"]
    assert fn.index_checks == [] and len(fn.outputs) == 1
    (out,) = fn(W.numpy(), bad.numpy())
    np.testing.assert_allclose(out, _emb(W, torch.tensor([1, 0, 4])).numpy(), rtol=1e-12)


_MPI_SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
import torch
import torch.nn.functional as F
import shardx
from shardx import Mesh, Shard

def emb(w, idx):
    return F.embedding(idx, w).sum(0)

mesh = Mesh((2,), ("tp",))
f = shardx.compile(emb, mesh, in_placements=[[Shard(0)], None], backend="mpi")
rank = f._session.process_rank
w = torch.arange(32, dtype=torch.float64).reshape(8, 4)
torch.testing.assert_close(f(w, torch.tensor([1, 7, 4])).to_torch(), emb(w, torch.tensor([1, 7, 4])))
try:
    f(w, torch.tensor([1, 9, 4]))
    print(f"rank {rank}: no error")
except IndexError as e:
    print(f"rank {rank}: IndexError {e}")
torch.testing.assert_close(f(w, torch.tensor([0, 6])).to_torch(), emb(w, torch.tensor([0, 6])))
print(f"rank {rank}: done")
"""


def test_mpi_embedding_out_of_range(tmp_path):
    # Both processes raise (the check's code is replicated), none hangs,
    # and the next step runs.
    mpirun = shutil.which("mpirun")
    if mpirun is None or not runtime().has_mpi:
        pytest.skip("needs OpenMPI and a build with the mpi backend")
    (tmp_path / "script.py").write_text(_MPI_SCRIPT)
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable,
           str(tmp_path / "script.py"), PYTHON_DIR]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in (0, 1):
        assert f"rank {rank}: IndexError index out of range in self" in r.stdout
        assert f"rank {rank}: done" in r.stdout


def test_one_hot_labels_out_of_range_raise_eager_errors():
    """F.one_hot's labels are checked as eager checks them (its traced
    decomposition compared with an arange: a label out of range gave a row
    of zeros); in range, eager's result, with the labels split too."""
    w = torch.randn(6, 5)

    def f(labels, w):
        w = w.detach().requires_grad_(True)
        hot = F.one_hot(labels, 5)
        return hot, torch.autograd.grad((hot.float() * w).sum(), w)[0]
    good = torch.tensor([0, 3, 1, 4, 4, 2])
    for compiled in (shardx.compile(f, None), shardx.compile(f, Mesh((2,), ("dp",)),
                                                             [[Shard(0)], [Shard(0)]])):
        for got, want in zip(compiled(good, w), f(good, w)):
            assert torch.equal(got.to_torch(), want)
        for bad in (torch.tensor([0, 3, 1, 5, 4, 2]), torch.tensor([0, -1, 1, 4, 4, 2])):
            kind, message = _eager_error(f, bad, w)
            with pytest.raises(kind, match=message):
                compiled(bad, w)
