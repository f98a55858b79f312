"""Sorts, top-k and extremes against eager PyTorch, bit for bit, where
their order is PyTorch's: NaN above every number (last in an ascending
sort, first in a descending one and in a largest top-k, the max and the
min of anything holding it, at its first index), ties by position (a
stable sort, the first occurrence of a max or min), booleans False
before True. Unsharded, and with the rows split over 2 thread ranks.

Where values tie, eager's CPU top-k orders them as its partial sort
leaves them, not by position: there only the values and that each index
points at its value are checked (docs/Importer.md, "Sorts and top-k")."""

import pytest
import torch

import shardx
from shardx import Mesh, Shard as S
from shardx_dev.testing.steps import same_bits

NAN = float("nan")
X = torch.tensor([[NAN, 1.0, NAN, 3.0, -2.0, 0.5],
                  [1.0, NAN, 2.0, -0.0, 0.0, 7.0],
                  [2.5, -1.0, 4.0, 0.25, 3.0, -3.0],
                  [NAN, NAN, NAN, NAN, NAN, NAN]])
TIED = torch.tensor([[2.0, 2.0, 1.0, 0.0, 1.0, 2.0],
                     [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                     [5.0, -1.0, 5.0, 5.0, -1.0, 3.0],
                     [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]])
BOOL = torch.tensor([[False, True, False, True, True, False],
                     [True, True, False, False, True, False],
                     [False, False, False, False, False, False],
                     [True, False, True, True, False, True]])

EXACT = {
    "sort": lambda x: tuple(torch.sort(x, -1)),
    "sort_descending": lambda x: tuple(torch.sort(x, -1, descending=True)),
    "sort_stable": lambda x: tuple(torch.sort(x, stable=True, dim=-1)),
    "argsort": lambda x: (torch.argsort(x, -1),),
    "max_dim": lambda x: tuple(torch.max(x, -1)),
    "min_dim": lambda x: tuple(torch.min(x, 1, keepdim=True)),
    "max_dim0": lambda x: tuple(torch.max(x, 0)),
    "argmax": lambda x: (torch.argmax(x, -1),),
    "argmin_keepdim": lambda x: (torch.argmin(x, 1, keepdim=True),),
    "argmax_dim0": lambda x: (torch.argmax(x, 0),),
    "argmax_flat": lambda x: (torch.argmax(x),),
    "argmin_flat": lambda x: (torch.argmin(x),),
    # Along the first dim (moved last and back; refused before 2026-11-29)
    # and of a 0-d tensor.
    "sort_dim0": lambda x: tuple(torch.sort(x, 0)),
    "sort_dim0_descending_stable": lambda x: tuple(torch.sort(x, dim=0, descending=True,
                                                              stable=True)),
    "argsort_dim0": lambda x: (torch.argsort(x, 0),),
    "sort_0d": lambda x: tuple(torch.sort(x[1, 2])),
}


def _compiled(fn, x, split):
    if not split:
        return [t.to_torch() for t in shardx.compile(fn, None)(x)]
    mesh = Mesh((2,), ("dp",))
    return [t.to_torch() for t in shardx.compile(fn, mesh, [[S(0)]])(x)]


# Those along the rows, also run with the rows split (the others reduce
# over them).
ALONG_ROWS = sorted(set(EXACT) - {"max_dim0", "argmax_dim0", "argmax_flat", "argmin_flat"})
RUNS = [(n, False) for n in sorted(EXACT)] + [(n, True) for n in ALONG_ROWS]


@pytest.mark.parametrize("name,split", RUNS,
                         ids=[f"{n}-{'rows_dp2' if s else 'whole'}" for n, s in RUNS])
@pytest.mark.parametrize("data", ["nan", "tied", "bool"])
def test_matches_eager_bit_for_bit(name, data, split):
    x = {"nan": X, "tied": TIED, "bool": BOOL}[data]
    fn = EXACT[name]
    try:
        want = fn(x)
    except NotImplementedError:  # argmax/argmin of booleans: eager refuses
        with pytest.raises(Exception, match="does not support bool"):
            _compiled(fn, x, split)
        return
    got = _compiled(fn, x, split)
    for w, g in zip(want, got):
        assert same_bits(w, g), f"{name} of {data}: eager {w.tolist()}, shardx {g.tolist()}"


TOPK = {
    "topk2": lambda x: tuple(torch.topk(x, 2, -1)),
    "topk3_smallest": lambda x: tuple(torch.topk(x, 3, -1, largest=False)),
    "topk_all": lambda x: tuple(torch.topk(x, 6, -1)),
    "topk2_dim0": lambda x: tuple(torch.topk(x, 2, 0)),
}


@pytest.mark.parametrize("name", sorted(TOPK))
def test_topk_matches_eager_without_ties(name):
    """Rows of distinct values (NaNs first where largest, last where
    smallest): values and indices bit for bit."""
    x = torch.tensor([[NAN, 1.0, -4.0, 3.0, -2.0, 0.5],
                      [1.0, 6.0, 2.0, -0.5, 0.25, 7.0],
                      [2.5, -1.0, 4.0, NAN, 3.0, -3.0]])
    fn = TOPK[name]
    if name.endswith("dim0"):
        x = x.t().contiguous()  # distinct along the columns too
    want, got = fn(x), _compiled(fn, x, False)
    for w, g in zip(want, got):
        assert same_bits(w, g), f"{name}: eager {w.tolist()}, shardx {g.tolist()}"


@pytest.mark.parametrize("name", sorted(TOPK))
def test_topk_with_ties_picks_the_same_values(name):
    """Tied values: the same values as eager's, in order, and each index
    points at its value (which of the tied positions eager returns is its
    partial sort's)."""
    fn = TOPK[name]
    (wv, _), (gv, gi) = fn(TIED), _compiled(fn, TIED, False)
    assert same_bits(wv, gv), f"{name}: eager {wv.tolist()}, shardx {gv.tolist()}"
    dim = 0 if name.endswith("dim0") else -1
    assert same_bits(TIED.gather(dim, gi), gv)
    lines = gi.t().tolist() if dim == 0 else gi.tolist()
    assert all(len(set(line)) == len(line) for line in lines), gi.tolist()


def test_median_matches_eager():
    """torch.median along a dim (values, indices, keepdim) and of all
    elements, with its gradient: the lower median; a NaN along the dim is
    the median, at the first NaN's index; split along and across the dim.
    (No ties: eager's quickselect names one of several equal positions.)"""
    from shardx import Mesh, Shard
    nan = float("nan")
    torch.manual_seed(0)
    x = torch.randn(5, 7)
    x[1, 3], x[2, 0], x[2, 5] = nan, nan, nan
    w = torch.randn(5)

    def f(x):
        x = x.detach().requires_grad_(True)
        v, i = torch.median(x, 1)
        v0, i0 = torch.median(x, 0, keepdim=True)
        m = torch.median(x[3:])
        loss = (v.nan_to_num() * w).sum() + v0.nan_to_num().sum() + m
        return v.detach(), i, v0.detach(), i0, m.detach(), torch.autograd.grad(loss, x)[0]
    want = f(x)
    for compiled in (shardx.compile(f, None), shardx.compile(f, Mesh((2,), ("dp",)), [[Shard(0)]]),
                     shardx.compile(f, Mesh((2,), ("dp",)), [[Shard(1)]])):
        for got, w_ in zip(compiled(x), want):
            got = got.to_torch()
            assert torch.equal(got.isnan(), w_.isnan()) and torch.equal(got.nan_to_num(), w_.nan_to_num())
