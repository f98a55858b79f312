"""shardx.compile and the tensors a function reads besides its arguments
(module parameters and buffers, tensors it closes over), against eager
PyTorch: buffers updated in place (BatchNorm in training mode, a counter
in ``forward``) are written back after each call as torch.compile writes
back its input mutations, on one rank and on two with the batch split;
the trace never writes them itself; tensors whose values reach Python or
a traced region are guarded by value. Every test here failed before the
write-back (refused, or numbers other than eager's)."""

import copy

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.compiler import nested_compile_region

import shardx
from shardx import Mesh, Shard, ShardedTensor

MESH = Mesh((2,), ("x",))
MESHES = pytest.mark.parametrize("mesh", [None, MESH], ids=["1-rank", "2-ranks"])


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch, build_dir):
    monkeypatch.setenv("SHARDX_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def full(t):
    return torch.from_numpy(np.array(t.full())) if isinstance(t, ShardedTensor) else t


def close(got, want, what, rtol=1e-5, atol=1e-6):
    torch.testing.assert_close(full(got).to(want.dtype), want.detach(), rtol=rtol, atol=atol,
                               msg=lambda m: f"{what}: {m}")


class _Cnn(nn.Module):
    """Conv, BatchNorm2d, linear, BatchNorm1d, linear."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn2 = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 6)
        self.bn1 = nn.BatchNorm1d(6)
        self.out = nn.Linear(6, 2)

    def forward(self, x):
        h = F.relu(self.bn2(self.conv(x)))
        return self.out(F.relu(self.bn1(self.fc(h.flatten(1)))))


def _step_of(model):
    params = list(model.parameters())

    def step(x, y):
        loss = F.mse_loss(model(x), y)
        return loss, torch.autograd.grad(loss, params)
    return step


def _check_state(m, e, what):
    for (name, a), (_, b) in zip(list(m.named_parameters()) + list(m.named_buffers()),
                                 list(e.named_parameters()) + list(e.named_buffers())):
        if b.dtype == torch.int64:
            assert torch.equal(a, b), f"{what}: {name} {a} != {b}"
        else:
            close(a, b, f"{what}: {name}")


@MESHES
def test_batchnorm_in_training_mode_follows_eager_step_by_step(mesh):
    """A CNN with BatchNorm2d and BatchNorm1d in training mode, trained with
    SGD (momentum) outside the compiled step: each step's loss and
    gradients, and afterwards the parameters and every buffer (running
    mean, running variance, num_batches_tracked), are eager's; on two ranks
    the batch is split, and the statistics are those of the whole batch
    (the program is the global one). One compile; eval mode afterwards
    gives eager's outputs with the statistics the steps left. Before, the
    call was refused ("updates in place a tensor it does not take as an
    argument")."""
    torch.manual_seed(0)
    m = _Cnn()
    e = copy.deepcopy(m)
    split = [[Shard(0)], [Shard(0)]] if mesh else None
    f = shardx.compile(_step_of(m), mesh, split)
    eager = _step_of(e)
    om = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    oe = torch.optim.SGD(e.parameters(), lr=0.1, momentum=0.9)
    for step in range(3):
        x, y = torch.randn(8, 3, 6, 6), torch.randn(8, 2)
        loss, grads = f(x, y)
        want_loss, want_grads = eager(x, y)
        close(loss, want_loss, f"step {step}: loss")
        for k, (g, w) in enumerate(zip(grads, want_grads)):
            close(g, w, f"step {step}: grad {k}")
        _check_state(m, e, f"step {step}, before the optimizer")
        for p, g in zip(m.parameters(), grads):
            p.grad = full(g)
        for p, g in zip(e.parameters(), want_grads):
            p.grad = g
        om.step()
        oe.step()
        _check_state(m, e, f"step {step}, after the optimizer")
    assert int(m.bn2.num_batches_tracked) == 3
    assert f.compiles == 1, f.recompile_reasons
    m.eval()
    e.eval()
    g = shardx.compile(lambda x: m(x), mesh, [[Shard(0)]] if mesh else None)
    x = torch.randn(8, 3, 6, 6)
    with torch.no_grad():
        close(g(x), e(x), "eval")
    _check_state(m, e, "after eval")


@MESHES
def test_train_and_eval_switch_the_entry(mesh):
    """``model.train()`` / ``model.eval()`` on one compiled function: the
    training flag is a guard (a compile for eval, the train entry reused
    after ``train()`` again); the statistics move in training mode only,
    as eager's. The eval entry is traced again after training steps: its
    trace does not read num_batches_tracked, which is then guarded by its
    version counter (not lifted), and the training steps moved it."""
    torch.manual_seed(1)
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    e = copy.deepcopy(m)
    f = shardx.compile(lambda x: m(x), mesh, [[Shard(0)]] if mesh else None)
    compiles = []
    for k, mode in enumerate(["train", "train", "eval", "eval", "train", "eval"]):
        getattr(m, mode)()
        getattr(e, mode)()
        x = torch.randn(6, 3)
        got = f(x)
        with torch.no_grad():
            close(got, e(x), f"call {k} ({mode})")
        _check_state(m, e, f"call {k} ({mode})")
        compiles.append(f.compiles)
    assert compiles == [1, 1, 2, 2, 2, 3], f.recompile_reasons
    assert int(m[1].num_batches_tracked) == 3


class _Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(4))
        self.register_buffer("count", torch.tensor(0))

    def forward(self, x):
        self.buf.add_(x.sum(0))
        self.count += 1
        return x * self.count + self.buf


_ACC = torch.zeros(4)


def _through_view_and_out(x):
    _ACC[1:].add_(x[0, 1:])  # a view of a closed-over tensor
    torch.mul(_ACC, 2, out=_ACC)  # out=
    return x + _ACC


@MESHES
def test_buffers_written_in_forward_follow_eager(mesh):
    """``self.buf.add_(...)`` and ``self.count += 1`` (a tensor buffer) in
    ``forward``, and a closed-over tensor written through a view and
    through ``out=``: each call's output and the tensors after it are
    eager's (the buffers stay the same tensors), on the first call too, and
    one compile serves every call. Before: refused."""
    torch.manual_seed(2)
    m = _Counter()
    e = copy.deepcopy(m)
    buf, count = m.buf, m.count
    f = shardx.compile(lambda x: m(x), mesh, [[Shard(0)]] if mesh else None)
    g = shardx.compile(_through_view_and_out, mesh, [[Shard(0)]] if mesh else None)
    acc = torch.zeros(4)
    for k in range(3):
        x = torch.randn(2, 4)
        close(f(x), e(x), f"call {k}")
        assert m.buf is buf and m.count is count
        assert torch.equal(m.count, e.count) and torch.equal(m.buf, e.buf), k
        got = g(x)
        acc[1:].add_(x[0, 1:])
        torch.mul(acc, 2, out=acc)
        close(got, x + acc, f"closed-over, call {k}")
        close(_ACC, acc, f"closed-over tensor after call {k}")
    assert f.compiles == 1 and g.compiles == 1
    assert int(m.count) == 3
    _ACC.zero_()


def test_the_trace_never_writes_the_callers_tensors():
    """Tracing writes no tensor the function reads besides its arguments:
    a compile without a run (``precompile``) leaves BatchNorm's
    num_batches_tracked and a counter at 0, and ``shardx.trace`` (no caller
    to write back to) refuses the update and leaves them too. Before, the
    fake-tensor trace ran ``num_batches_tracked.add_(1)`` on the real
    buffer (every operand real: the fake mode computed it)."""
    bn = nn.BatchNorm1d(3)
    c = _Counter()
    with pytest.raises(ValueError, match="updates in place a tensor it does not take"):
        shardx.trace(lambda x: bn(x), [torch.randn(2, 3)])
    assert int(bn.num_batches_tracked) == 0
    shardx.compile(lambda x: (bn(x), c(x[:, :1].expand(2, 4))), None).precompile(
        torch.randn(2, 3))
    assert int(bn.num_batches_tracked) == 0 and int(c.count) == 0
    assert torch.equal(bn.running_mean, torch.zeros(3)) and torch.equal(c.buf, torch.zeros(4))


def test_reading_a_written_buffer_into_python_is_refused():
    """BatchNorm with ``momentum=None`` (a cumulative average) reads
    ``num_batches_tracked`` into Python after counting: the program would
    keep one factor for every call, so it is a clear error naming the
    cause. Before, the trace read the value its own write had left in the
    real buffer (and refused the write)."""
    bn = nn.BatchNorm1d(2, momentum=None)
    with pytest.raises(ValueError, match="reads into Python .* a tensor it updates in place"):
        shardx.compile(lambda x: bn(x), None)(torch.randn(4, 2))
    assert int(bn.num_batches_tracked) == 0


def test_a_closed_over_tensor_read_by_item_is_guarded_by_value():
    """``s.item()`` of a closed-over tensor is a Python number of the trace
    (make_fx reads a real tensor's value): that tensor is not lifted, so a
    change in place compiles again, with eager's numbers. Before, it was
    lifted and guarded by identity and metadata only: the first value ran
    on (8 where eager gives 12)."""
    s = torch.tensor(2.0)

    def fn(x):
        return x * s.item() + s
    f = shardx.compile(fn, None)
    x = torch.ones(2)
    close(f(x), fn(x), "first")
    with torch.no_grad():
        s.mul_(3)
    close(f(x), fn(x), "after s.mul_(3)")
    assert f.compiles == 2 and "was modified in place" in f.recompile_reasons[0]


_W = torch.ones(3)


@nested_compile_region
def _region_scaled(x):
    return x * _W


def _outer(x):
    return _region_scaled(x) + _W


@MESHES
def test_a_tensor_read_inside_and_outside_a_region_is_guarded_by_value(mesh):
    """A tensor read both inside a traced region (a constant of the region's
    graph) and outside: a change in place between calls changes the
    result as in eager (a compile: its guard is on its values, as for a
    tensor read only inside a region). Before, it was lifted outside but
    stayed the region's constant, guarded by metadata only: [3, 3, 3]
    where eager gives [4, 4, 4]."""
    global _W
    f = shardx.compile(_outer, mesh)
    x = torch.ones(3)
    try:
        close(f(x), _outer(x), "first")
        with torch.no_grad():
            _W.mul_(2)
        close(f(x), _outer(x), "after _W.mul_(2)")
        assert f.compiles == 2 and "was modified in place" in f.recompile_reasons[0]
    finally:
        _W = torch.ones(3)


def test_donation_with_buffers_written_back():
    """A donated argument and BatchNorm statistics in one step on two
    ranks: the new weight lives in the donated buffers, the statistics are
    written back, both as eager's."""
    torch.manual_seed(3)
    bn = nn.BatchNorm1d(4)
    e = copy.deepcopy(bn)

    def step(w, x):
        y = bn(x @ w)
        return w * 0.5 + y.mean(0).sum(), y.sum()
    f = shardx.compile(step, MESH, [None, [Shard(0)]], donate=(0,))
    w = ShardedTensor.from_torch(torch.randn(3, 4), MESH, [shardx.Replicate()])
    we = full(w).clone()
    for k in range(2):
        x = torch.randn(6, 3)
        old = w
        w, total = f(w, x)
        we, want_total = _eager_step(e, we, x)
        close(w, we, f"call {k}: w")
        close(total, want_total, f"call {k}: total")
        _check_state(bn, e, f"call {k}")
        with pytest.raises(shardx.DonatedError):
            old.full()
    assert f.compiles == 1


def _eager_step(bn, w, x):
    with torch.no_grad():
        y = bn(x @ w)
        return w * 0.5 + y.mean(0).sum(), y.sum()


def test_export_of_an_entry_writing_buffers_is_refused_and_eval_exports(tmp_path):
    """A package has no module to write statistics back into: exporting
    while the training-mode entry is the function's is a PackageError
    saying what to do; after a call in eval mode the package exports and
    loads, and gives eager's eval outputs with the statistics of export."""
    torch.manual_seed(4)
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    f = shardx.compile(lambda x: m(x), None)
    f(torch.randn(5, 3))
    with pytest.raises(shardx.PackageError, match="eval mode"):
        f.export(tmp_path / "train.shardx")
    m.eval()
    x = torch.randn(5, 3)
    f(x)
    h = shardx.load(f.export(tmp_path / "eval.shardx"))
    with torch.no_grad():
        close(h(x), m(x), "loaded, eval")


def test_an_argument_sharing_memory_with_a_written_buffer_is_refused():
    """An argument that is the buffer the function writes (or a view of it)
    is traced as another tensor: refused before running, with a clear
    error, and the buffer is unchanged."""
    m = _Counter()
    f = shardx.compile(lambda x: m(x), None)
    f(torch.ones(1, 4))
    before = m.buf.clone()
    with pytest.raises(ValueError, match="shares memory with a tensor \\[4\\] f32"):
        f(m.buf.unsqueeze(0))
    assert torch.equal(m.buf, before)


@MESHES
def test_an_optimizer_step_inside_the_function_follows_eager(mesh):
    """The whole step as torch.compile users write it: gradients of the
    module's parameters and an in-place SGD update of them inside the
    compiled function, BatchNorm in training mode: the parameters (which
    keep requires_grad) and buffers are written back, eager's after each
    step, with one compile. Before: refused."""
    torch.manual_seed(5)
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1))
    e = copy.deepcopy(m)

    def step_of(model):
        params = list(model.parameters())

        def step(x):
            loss = model(x).pow(2).mean()
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p.sub_(0.1 * g)
            return loss
        return step
    f = shardx.compile(step_of(m), mesh, [[Shard(0)]] if mesh else None)
    eager = step_of(e)
    for k in range(3):
        x = torch.randn(6, 3)
        close(f(x), eager(x), f"step {k}: loss")
        _check_state(m, e, f"step {k}")
    assert f.compiles == 1 and all(p.requires_grad for p in m.parameters())


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        return torch.relu(self.bn(self.lin(x)))


class _Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([_Block() for _ in range(3)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def test_batchnorm_in_repeated_blocks_compiles_once():
    """Identical ``nn.ModuleList`` children with BatchNorm in training mode
    (traced inline: a region is pure) on two ranks: eager's outputs and
    statistics, and one compile for several calls. The environment is
    snapshot after the whole trace: one taken while the regions' patches
    of the children were on saw an attribute the trace adds and removes,
    and the second call compiled again ("the number of attributes of
    global m.blocks.0 changed")."""
    torch.manual_seed(6)
    m = _Stack()
    e = copy.deepcopy(m)
    f = shardx.compile(lambda x: m(x), MESH, [[Shard(0)]])
    for k in range(3):
        x = torch.randn(6, 4)
        got = f(x)
        with torch.no_grad():
            close(got, e(x), f"call {k}")
        _check_state(m, e, f"call {k}")
    assert f.compiles == 1, f.recompile_reasons
