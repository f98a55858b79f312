"""Spatial (domain) parallelism: a U-Net-like CNN train step (3x3
convolutions, ReLU, pooling and upsampling as reshapes, a skip connection;
forward, backward and an SGD step) with H and W split over a 2x2 mesh, and
one that downsamples with a stride-2 convolution (16x16 with the
upsampling path; uneven 11x11, shards of 6 and 5, without it) and one with
PyTorch's max and average pooling (16x16 and 11x11). The
windowed ops keep their split and exchange halos (shardx.halo) instead of
all-gathering their inputs (docs/Rules.md, "Windowed ops"). Each program is
checked against eager PyTorch on the threads backend (shardx.compile, two
steps) and against its unsharded compile under mpirun on the mpi backend
(shardx-run --check), on an even (16x16, two levels) and an uneven (13x13:
shards of 7 and 6 rows and columns) image. Only the input and target are
laid out: propagation chooses the halos itself (one alpha-beta step per
exchange against all-gathers and replicated compute). 1-d convolutions
keep L split on 2 ranks; 3-d ones (NCDHW, with 3-d max and average
pooling) keep D and H split on a 2x2 mesh."""

import re

import pytest
import torch
import torch.nn.functional as F

import shardx
from shardx import Mesh, Shard as S
from shardx.importer import UnsupportedOpError, trace
from shardx.train import TrainStep
from shardx_dev import models
from shardx_dev.testing.steps import assert_steps_match_eager, check_on_mpi, run_tool

CASES = {
    # name: (image side, model)
    "unet16": (16, lambda: models.HaloUNet(levels=2)),
    "uneven13": (13, lambda: models.HaloUNet(levels=1)),
    # A stride-2 3x3 convolution downsamples (its input gradient is the
    # output gradient inserted at stride 2 and a stride-1 convolution).
    "strided16": (16, lambda: models.StridedUNet(up=True)),
    # 11 rows split 6/5: the stride-2 windows align with the shard edge.
    "strided11": (11, lambda: models.StridedUNet(up=False)),
    # PyTorch's max_pool2d (2x2) and avg_pool2d (3x3, stride 1, padding 1)
    # and their backward ops (importer/ops/pooling.py).
    "pool16": (16, lambda: models.PoolUNet(up=True)),
    # 11 rows split 6/5: 5 pooled rows split 3/2, row 10 read by no window.
    "pool11": (11, lambda: models.PoolUNet(up=False)),
}


def _conv_step(model, shape, mesh, split):
    """An SGD step of ``model`` (built after seeding) on an input of
    ``shape``, the input and the target laid out as ``split``: (step, mesh,
    input placements, output placements, example arguments)."""
    torch.manual_seed(0)
    module = model()
    with torch.no_grad():
        out = module(torch.zeros(*shape)).shape
    step = TrainStep(module, F.mse_loss, "sgd", lr=0.1)
    ins, outs = step.placements(mesh, {}, [split], split)
    return step, mesh, ins, outs, step.example_args([torch.randn(*shape)], torch.randn(*out))


def _step(name):
    side, make = CASES[name]
    return _conv_step(make, (2, 2, side, side), Mesh((2, 2), ("h", "w")), [S(2), S(3)])


@pytest.fixture(scope="module", params=sorted(CASES))
def program(request, tmp_path_factory):
    step, mesh, ins, outs, args = _step(request.param)
    path = tmp_path_factory.mktemp("halo") / f"{request.param}.mlir"
    path.write_text(trace(step, args, mesh, ins, outs, name=request.param))
    return request.param, path


def test_windowed_ops_exchange_halos_not_activations(program, build_dir):
    """The local program exchanges halos for every 3x3 convolution (forward,
    input gradient, weight gradient), and moves no whole activation: no
    all-gather, all-to-all or exchange of a 4-d tensor."""
    name, path = program
    local = run_tool([f"{build_dir}/bin/shardx-opt", path, "--shardx-spmd"])
    halos = re.findall(r"shardx\.halo .* dim = (\d) low = 1 high = 1", local)
    assert halos and set(halos) == {"2", "3"}, local[-3000:]
    if name.startswith("strided"):
        # The stride-2 convolution and its weight gradient read one row
        # before each shard and none after it.
        strided = re.findall(r"shardx\.halo .* dim = (\d) low = 1 high = 0", local)
        assert len(strided) == 4 and set(strided) == {"2", "3"}, strided
    moved = re.findall(r"shardx\.(all_gather|all_to_all|exchange) .*: tensor<\S*x\S*x\S*x\S*>", local)
    assert not moved, moved
    # The weight gradients are summed over the ranks (Partial -> all_reduce).
    assert "shardx.all_reduce" in local


def test_strided_halo_bytes_are_the_lower_bound(build_dir, tmp_path):
    """print-plan's halo bytes for the stride-2 convolution (forward and
    weight gradient) equal what its windows read past a shard: the 16x16
    image padded to 18x18 is split 9/9 each way, and the last rank of both
    axes computes output rows and columns 4..7 from padded rows and columns
    8..16, holding 9..17: it needs row 8 (10 columns, counting the column
    it receives next) and column 8 (its 9 rows), 19 pixels of 2 images x 4
    channels of f32. The exchange sends exactly those: the row first
    (9 pixels), then the column of the widened shard (10)."""
    step, mesh, ins, outs, args = _step("strided16")
    path = tmp_path / "strided16.mlir"
    path.write_text(trace(step, args, mesh, ins, outs, name="strided16"))
    plan = run_tool([f"{build_dir}/bin/shardx-opt", path, "--shardx-propagate",
                     "--shardx-insert-reshards", "--shardx-print-plan", "-o", "/dev/null"])
    strided = [int(b) for b in re.findall(r"\(low 1, high 0\): (\d+) bytes/rank", plan)]
    side, planes, f32 = 9, 2 * 4, 4
    needed = ((side + 1) * (side + 1) - side * side) * planes * f32
    assert len(strided) == 4 and sum(strided) == 2 * needed, (strided, needed)
    # No activation is resharded: the plans are the gradients' all-reduces.
    assert all("[P(sum), P(sum)] -> [R, R]" in line
               for line in plan.splitlines() if "remark: plan" in line), plan


def test_sharded_matches_unsharded_on_mpi(program, build_dir):
    name, path = program
    check_on_mpi(build_dir, path, 4)


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_steps_match_eager(name):
    step, mesh, ins, outs, args = _step(name)
    f = shardx.compile(step, mesh, ins, outs)
    assert_steps_match_eager(f, step, args, name)


def test_pooling_halo_bytes_are_the_lower_bound(build_dir, tmp_path):
    """print-plan for PoolUNet at 16x16 on 2x2: the 2x2 max pooling's
    windows (values and indices) tile the 8x8 shards, a halo of 0 bytes,
    and its input gradient (disjoint windows) moves nothing; every other
    halo is its window's lower bound: a rank holding a padded shard of
    `side` x `side` reads one row of `side` and one column of `side + 1`
    past it (the corner once), `2 side + 1` pixels of each image plane.
    Full resolution (18 padded rows split 9/9): the first convolution
    (2 images x 2 channels; forward and weight gradient) and the last one
    (8 input channels: forward and weight gradient; 2 output channels:
    input gradient); half resolution (10 padded rows, 5/5, 4 channels):
    the middle convolution (forward, input and weight gradients) and the
    3x3 average pooling (forward and input gradient). No activation is
    resharded: the plans are the weight gradients' all-reduces."""
    step, mesh, ins, outs, args = _step("pool16")
    path = tmp_path / "pool16.mlir"
    path.write_text(trace(step, args, mesh, ins, outs, name="pool16"))
    plan = run_tool([f"{build_dir}/bin/shardx-opt", path, "--shardx-propagate",
                     "--shardx-insert-reshards", "--shardx-print-plan", "-o", "/dev/null"])
    halos = re.findall(r"halo of operand \d dim \d over mesh axis \d \(low (\d), high (\d)\): "
                       r"(\d+) bytes/rank", plan)
    untouched = [h for h in halos if h[:2] == ("0", "0")]
    assert len(untouched) == 4 and all(h[2] == "0" for h in untouched), halos

    def bound(side, planes):
        return (2 * side + 1) * planes * 4
    lower = 2 * bound(9, 2 * 2) + 2 * bound(9, 2 * 8) + bound(9, 2 * 2) + 5 * bound(5, 2 * 4)
    assert sum(int(h[2]) for h in halos) == lower == 5104, halos
    assert all("[P(sum), P(sum)] -> [R, R]" in line
               for line in plan.splitlines() if "remark: plan" in line), plan


def _trace_pool(fn, x):
    mesh = Mesh((2,), ("h",))
    return trace(fn, [x], mesh, [[S(2)]], None)


def test_max_pool_indices_outside_backward_are_refused():
    """The importer's max pooling indices are window taps (the same on every
    shard), not PyTorch's flat indices: returning them is refused."""
    def fn(x):
        return F.max_pool2d(x, 2, return_indices=True)
    with pytest.raises(UnsupportedOpError, match="indices used other than by its backward"):
        _trace_pool(fn, torch.randn(1, 2, 8, 8))


def test_avg_pool_partial_window_is_padded():
    """ceil_mode with a partial last window: the input padded past its end
    (a windowed op again) and the divisor clipped as ATen clips it
    (python/tests/test_adaptive_pool.py checks the numbers)."""
    def fn(x):
        return F.avg_pool2d(x, 2, ceil_mode=True)
    text = _trace_pool(fn, torch.randn(1, 2, 9, 9))
    assert "tensor<1x2x5x5xf32>" in text


@pytest.mark.parametrize("pool", [F.max_pool3d])
def test_pool3d_partial_window_is_refused(pool):
    """3-d max pooling has no decomposition to fall back on: ceil_mode with
    a partial last window is a named error (average pooling pads it)."""
    with pytest.raises(UnsupportedOpError, match="ceil_mode"):
        _trace_pool(lambda x: pool(x, 2, ceil_mode=True), torch.randn(1, 2, 9, 9, 9))


def test_max_pool_partial_window_is_decomposed():
    """A max pooling the importer refuses (ceil_mode with a partial last
    window) is decomposed by tracing as before (gathers, replicated)."""
    def fn(x):
        return F.max_pool2d(x, 2, ceil_mode=True)
    text = _trace_pool(fn, torch.randn(1, 2, 9, 9))
    assert "tensor<1x2x5x5xf32>" in text


class _TiedPool(torch.nn.Module):
    """Max pooling of ``x * scale`` with a per-pixel ``scale`` (ones): its
    gradient lands on each window's first maximum, so ties (x in {0, 1})
    check that the sharded window picks the pixel PyTorch picks."""

    def __init__(self, side: int):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(side, side))

    def forward(self, x):
        return F.max_pool2d(x * self.scale, 3, stride=2, padding=1)


def test_max_pool_ties_match_eager():
    torch.manual_seed(0)
    step = TrainStep(_TiedPool(12), F.mse_loss, "sgd", lr=0.1)
    x = torch.randint(0, 2, (2, 3, 12, 12)).float()
    y = torch.randn(2, 3, 6, 6)
    mesh = Mesh((2,), ("h",))
    ins, outs = step.placements(mesh, {}, [[S(2)]], [S(2)])
    args = step.example_args([x], y)
    f = shardx.compile(step, mesh, ins, outs)
    assert_steps_match_eager(f, step, args, "tied")


# 1-d convolutions (as 2-d ones of a unit H): L split over 2 ranks.
CASES_1D = {
    # name: (length, pooling)
    "conv1d32": (32, True),
    # 23 split 12/11: the stride-2 windows align (padded 13/12).
    "conv1d23": (23, False),
}


def _step_1d(name):
    length, pool = CASES_1D[name]
    return _conv_step(lambda: models.HaloNet1d(pool=pool), (2, 2, length), Mesh((2,), ("l",)),
                      [S(2)])


@pytest.mark.parametrize("name", sorted(CASES_1D))
def test_conv1d_exchanges_halos_and_matches(name, build_dir, tmp_path):
    """Every 1-d convolution (forward, input and weight gradients; stride
    2 and dilation 2 included) and the max pooling keep L split: halos on
    the lifted W (dim 3), no activation moved; the sharded step matches
    eager (threads) and, at 32, its unsharded compile (MPI, 2 ranks)."""
    step, mesh, ins, outs, args = _step_1d(name)
    path = tmp_path / f"{name}.mlir"
    path.write_text(trace(step, args, mesh, ins, outs, name=name))
    local = run_tool([f"{build_dir}/bin/shardx-opt", path, "--shardx-spmd"])
    halos = set(re.findall(r"shardx\.halo .* dim = (\d) low = (\d) high = (\d)", local))
    assert {("3", "1", "1"), ("3", "1", "0"), ("3", "2", "2")} <= halos, halos
    moved = re.findall(r"shardx\.(all_gather|all_to_all|exchange) .*: tensor<\S*x\S*x\S*>", local)
    assert not moved, moved
    if name == "conv1d32":  # the mpi backend once (the windows are conv2d's, checked above)
        check_on_mpi(build_dir, path, 2)
    f = shardx.compile(step, mesh, ins, outs)
    assert_steps_match_eager(f, step, args, name)


# 3-d convolutions (NCDHW; linalg.conv_3d_ncdhw_fcdhw): D and H split on a
# 2x2 mesh, W whole.
CASES_3D = {
    # name: (side, pooling)
    "conv3d8": (8, False),
    # 7 split 4/3: the stride-2 windows align (padded 5/4), the dilated
    # convolution's 4 rows split 2/2.
    "conv3d7": (7, False),
    # 2x2x2 max pooling (values and indices; its disjoint backward) before
    # the stride-2 convolution, 3x3x3 average pooling (padding not
    # counted) after it.
    "pool3d16": (16, True),
}


def _step_3d(name):
    side, pool = CASES_3D[name]
    return _conv_step(lambda: models.HaloNet3d(pool=pool), (2, 2, side, side, side),
                      Mesh((2, 2), ("d", "h")), [S(2), S(3)])


@pytest.mark.parametrize("name", sorted(CASES_3D))
def test_conv3d_exchanges_halos_and_matches(name, build_dir, tmp_path):
    """Every 3-d convolution (forward, input and weight gradients; stride 2
    and dilation 2 included) keeps D and H split: halos on dims 2 and 3, no
    5-d activation moved; the sharded step matches eager (threads) and, at
    8, its unsharded compile (MPI, 4 ranks)."""
    step, mesh, ins, outs, args = _step_3d(name)
    path = tmp_path / f"{name}.mlir"
    path.write_text(trace(step, args, mesh, ins, outs, name=name))
    local = run_tool([f"{build_dir}/bin/shardx-opt", path, "--shardx-spmd"])
    halos = set(re.findall(r"shardx\.halo .* dim = (\d) low = (\d) high = (\d)", local))
    want = {(d, lo, hi) for d in "23" for lo, hi in (("1", "1"), ("1", "0"), ("2", "2"))}
    assert want <= halos and all(h[0] in "23" for h in halos), halos
    moved = re.findall(r"shardx\.(all_gather|all_to_all|exchange) .*: tensor<\S*x\S*x\S*x\S*x\S*>",
                       local)
    assert not moved, moved
    assert "shardx.all_reduce" in local
    if name == "conv3d8":
        check_on_mpi(build_dir, path, 4)
    f = shardx.compile(step, mesh, ins, outs)
    assert_steps_match_eager(f, step, args, name)


def test_conv3d_halo_bytes_are_the_lower_bound(build_dir, tmp_path):
    """print-plan for HaloNet3d at 8^3 (2 volumes) with D and H split 2x2:
    each halo is its window's lower bound. A rank holding a padded shard of
    `side` planes x `side` rows x `width` columns reads one plane of
    `side` x `width` past it and then one row of the widened `side + 1`
    planes (the corner once): `(2 side + 1) width` pixels per channel for a
    one-row halo, `(4 side + 4) width` for the dilated one's two rows.
    Shards: the first convolution (2 channels; forward and weight
    gradient) and the stride-2 one (4 channels; forward, weight gradient
    and input gradient, padded 10 split 5/5, W 10) read one row; the
    dilated one (forward and weight gradient of 4 channels, input gradient
    of 2; 4 rows padded to 8, split 4/4, W 8) two. No activation is
    resharded: the plans are the weight gradients' all-reduces."""
    step, mesh, ins, outs, args = _step_3d("conv3d8")
    path = tmp_path / "conv3d8.mlir"
    path.write_text(trace(step, args, mesh, ins, outs, name="conv3d8"))
    plan = run_tool([f"{build_dir}/bin/shardx-opt", path, "--shardx-propagate",
                     "--shardx-insert-reshards", "--shardx-print-plan", "-o", "/dev/null"])
    halos = re.findall(r"halo of operand \d dim (\d) over mesh axis \d \(low (\d), high (\d)\): "
                       r"(\d+) bytes/rank", plan)
    one = lambda side, width, planes: (2 * side + 1) * width * planes * 4
    two = lambda side, width, planes: (4 * side + 4) * width * planes * 4
    n = 2
    lower = (2 * one(5, 10, n * 2) + 3 * one(5, 10, n * 4)
             + 2 * two(4, 8, n * 4) + two(4, 8, n * 2))
    assert sum(int(h[3]) for h in halos) == lower == 26880, halos
    assert all("[P(sum), P(sum)] -> [R, R]" in line
               for line in plan.splitlines() if "remark: plan" in line), plan


class _Unaligned(torch.nn.Module):
    """A 3x3 convolution, then a stride-2 one, of 13 rows on 2 ranks: the
    rows split 7/6 put the shard edge at an odd row (the stride-2 windows
    do not align), so the padded activation is resharded to the window's
    sizes (9/6) and the second shard's windows still read one row of the
    first: a halo on the resharded operand."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(2, 2, 3, padding=1)
        self.b = torch.nn.Conv2d(2, 2, 3, stride=2, padding=1)

    def forward(self, x):
        return self.b(self.a(x))


def test_unaligned_strided_split_reads_its_halo(build_dir, tmp_path):
    """Regression: shardx-localize took a windowed operand's layout from its
    value, and a reshard's result (a cast of the lowered collective)
    records none, so the stride-2 convolution ran on the 9/6 shards with
    no halo (the loss was inf)."""
    torch.manual_seed(0)
    step = TrainStep(_Unaligned(), F.mse_loss, "sgd", lr=0.1)
    mesh = Mesh((2,), ("h",))
    ins, outs = step.placements(mesh, {}, [[S(2)]], [S(2)])
    args = step.example_args([torch.randn(1, 2, 13, 13)], torch.randn(1, 2, 7, 7))
    path = tmp_path / "unaligned.mlir"
    path.write_text(trace(step, args, mesh, ins, outs, name="unaligned"))
    local = run_tool([f"{build_dir}/bin/shardx-opt", path, "--shardx-spmd"])
    assert re.search(r"shardx\.halo .* dim = 2 low = 1 high = 0 sizes = \[9, 6\]", local), local
    f = shardx.compile(step, mesh, ins, outs)
    assert_steps_match_eager(f, step, args, "unaligned")
