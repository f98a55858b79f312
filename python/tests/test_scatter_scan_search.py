"""Ops a probe found without a handler, each against eager PyTorch,
unsharded and split over thread ranks: ``scatter_reduce`` (every reduction,
with and without ``self``, and its gradients), ``Tensor.unfold`` and its
backward, ``F.fold`` (``F.unfold``'s backward), ``searchsorted``/``bucketize``, ``cummax``/``cummin``,
``logcumsumexp``, ``hypot`` and ``erfinv``; and ``torch.gather`` from a
table split along the dim it does not gather (the embedding rule took it
for a lookup and planned an index that disagreed with its result). Values
match bit for bit (NaNs where eager has them, zero signs), except where a
docstring says otherwise."""

import pytest
import torch
import torch.nn.functional as F

import shardx
from shardx import Mesh, Replicate as R, Shard as S

NAN, INF = float("nan"), float("inf")


def _same_bits(got, want):
    """Equal values and dtypes, NaN where eager has NaN, the same zero
    signs (a NaN's sign is not compared)."""
    if got.dtype != want.dtype:
        return False
    if not want.is_floating_point():
        return torch.equal(got, want)
    nan = torch.isnan(want)
    return (torch.equal(torch.isnan(got), nan)
            and torch.equal(torch.nan_to_num(got), torch.nan_to_num(want))
            and torch.equal(torch.signbit(got[~nan]), torch.signbit(want[~nan])))


def _outputs(result):
    if isinstance(result, (list, tuple)):
        return list(result)
    return [result]


def _check(fn, args, plans, check=_same_bits):
    want = _outputs(fn(*args))
    for plan in plans:
        compiled = shardx.compile(fn, None) if plan is None else shardx.compile(fn, *plan)
        got = [g.to_torch() for g in _outputs(compiled(*args))]
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            assert check(g, w), (plan, k, g, w)


DP2 = Mesh((2,), ("dp",))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64])
def test_scatter_reduce_matches_eager(dtype):
    """Every reduction, with and without ``self``, in one program: sums and
    products in the index's order from ``self`` or the identity, NaN
    sources winning max and min, -0.0 kept, means by the count (floor
    division for integers), elements no index points at left as they are
    (row 5 of ``x``)."""
    torch.manual_seed(0)
    idx = torch.randint(0, 5, (40, 3))
    x = (torch.randn(6, 3) * 10).to(dtype)
    src = (torch.randn(40, 3) * 10).to(dtype)
    if dtype.is_floating_point:
        src[3, 1], x[4, 2], src[7, 0] = NAN, -0.0, -0.0

    def reduce_all(x, src, idx):
        return [x.scatter_reduce(0, idx, src, red, include_self=inc)
                for red in ("sum", "prod", "mean", "amax", "amin") for inc in (True, False)]
    _check(reduce_all, (x, src, idx), [None, (DP2, [[S(1)], [S(1)], [S(1)]])])


def test_scatter_reduce_gradients_match_eager():
    """The gradients PyTorch's autograd writes for each reduction (through
    ``gather``, ``scatter`` and ``scatter_reduce`` itself), columns split
    over two ranks."""
    torch.manual_seed(1)
    idx = torch.randint(0, 6, (30, 4))
    x, src, weight = torch.randn(6, 4), torch.randn(30, 4), torch.randn(6, 4)

    def grads(x, src):
        out = []
        for red in ("sum", "mean", "amax", "amin", "prod"):
            for inc in (True, False):
                xg, sg = x.detach().requires_grad_(True), src.detach().requires_grad_(True)
                y = xg.scatter_reduce(0, idx, sg, red, include_self=inc)
                out += [y.detach(), *torch.autograd.grad((y * weight).sum(), (xg, sg))]
        return out
    _check(grads, (x, src), [None, (DP2, [[S(1)], [S(1)]])])


def test_gather_from_a_column_split_table_matches_eager():
    torch.manual_seed(2)
    x, idx = torch.randn(6, 4), torch.randint(0, 6, (30, 4))

    def gathers(x, idx):
        return torch.gather(x, 0, idx), (torch.gather(x * 2, 0, idx) > 0).to(torch.float32)
    for placements in ([[S(1)], [S(1)]], [[S(1)], [R()]], [[R()], [S(1)]]):
        _check(gathers, (x, idx), [(DP2, placements)])


@pytest.mark.parametrize("size,step", [(3, 2), (3, 3), (4, 1), (2, 5)])
def test_unfold_and_its_gradient_match_eager(size, step):
    """Windows that overlap (step < size: the gradient sums the windows
    in eager's order), tile, and skip elements; split along the batch and
    along the windowed dim."""
    torch.manual_seed(3)
    x = torch.randn(4, 11, 2)
    weight = torch.randn(4, (11 - size) // step + 1, 2, size)

    def windows(x):
        x = x.detach().requires_grad_(True)
        y = x.unfold(1, size, step)
        loss = (y * weight).sum() + (y * y).sum()
        return y.detach(), torch.autograd.grad(loss, x)[0]
    _check(windows, (x,), [None, (DP2, [[S(0)]]), (DP2, [[S(1)]])])


def test_searchsorted_and_bucketize_match_eager():
    """Eager's binary search, step by step: ties left and right, NaN values
    and boundaries, an unsorted sequence (eager's answer is defined by its
    search), ``sorter``, one sequence per row, integers and ``out_int32``."""
    torch.manual_seed(4)
    bounds = torch.tensor([-1.0, 0.0, 0.0, 0.5, 2.0, NAN])
    unsorted = torch.tensor([3.0, 1.0, 2.0, 0.0, 5.0])
    values = torch.tensor([[-2.0, -1.0, 0.0, 0.25, 0.5, 3.0, NAN, -0.0]] * 4)
    values[:, 3] += torch.randn(4)
    rows = torch.sort(torch.randn(4, 7), dim=1).values

    def search(v, rows):
        return (torch.bucketize(v, bounds), torch.bucketize(v, bounds, right=True, out_int32=True),
                torch.searchsorted(bounds, v), torch.searchsorted(bounds, v, side="right"),
                torch.searchsorted(rows, v), torch.searchsorted(unsorted, v),
                torch.searchsorted(unsorted, v, sorter=torch.argsort(unsorted)),
                torch.searchsorted(bounds.double(), v),
                torch.searchsorted(torch.tensor([1, 3, 3, 7]), (v.nan_to_num() * 4).long()),
                torch.searchsorted(torch.tensor([0.5]), v))
    _check(search, (values, rows), [None, (DP2, [[S(1)], [R()]]), (DP2, [[S(0)], [S(0)]])])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64])
def test_cummax_cummin_logcumsumexp_match_eager(dtype):
    """Running extremes with eager's ties (the latest index) and NaNs (a
    NaN takes over and stays until the next), along either dim, split along
    the scanned dim and across it; logcumsumexp accumulated as eager's (f64
    for f32), infinities of both signs included."""
    torch.manual_seed(5)
    x = (torch.randn(4, 50) * 3).to(dtype)
    if dtype.is_floating_point:
        x[1, 10], x[1, 30], x[2, 5], x[2, 6] = NAN, NAN, INF, -INF
        x[3, :] = -INF
        x[3, 20], x[0, 3], x[0, 4] = 1.0, 0.0, -0.0
    x[0, 7] = x[0, 8]

    def scans(x):
        out = [*torch.cummax(x, 1), *torch.cummin(x, 1), *torch.cummax(x, 0)]
        if x.is_floating_point():
            out += [torch.logcumsumexp(x, 1), torch.logcumsumexp(x, 0)]
        return out
    _check(scans, (x,), [None, (DP2, [[S(1)]]), (DP2, [[S(0)]])])


def test_scan_gradients_match_eager():
    """cummax/cummin's gradient (eager's ``cummaxmin_backward``: a scatter of
    the gradient to the indices) bit for bit; logcumsumexp's (exps and
    logs of the code generation) within rounding."""
    torch.manual_seed(6)
    x = torch.randn(30, 4)

    def exact(x):
        x = x.detach().requires_grad_(True)
        v, _ = torch.cummax(x, 0)
        u, _ = torch.cummin(x, 1)
        return torch.autograd.grad((v * torch.arange(4.0)).sum() + (u ** 2).sum(), x)

    def smooth(x):
        x = x.detach().requires_grad_(True)
        y = torch.logcumsumexp(x, 0)
        return torch.autograd.grad((y * torch.arange(4.0)).sum(), x)
    plans = [None, (DP2, [[S(1)]])]
    _check(exact, (x,), plans)
    _check(smooth, (x,), plans,
           check=lambda g, w: torch.allclose(g, w, rtol=1e-6, atol=1e-6))


def test_hypot_matches_eager():
    """f32 and bf16 bit for bit (computed in f64); f64 within an ulp, across
    the whole exponent range; infinities win over NaN, as C's."""
    torch.manual_seed(7)
    a = torch.randn(4000, dtype=torch.float64) * torch.exp(torch.randn(4000, dtype=torch.float64) * 20)
    b = torch.randn(4000, dtype=torch.float64) * torch.exp(torch.randn(4000, dtype=torch.float64) * 20)
    a[:8] = torch.tensor([0.0, -0.0, INF, -INF, NAN, 1e300, 1e-310, 3.0], dtype=torch.float64)
    b[:8] = torch.tensor([0.0, 0.0, NAN, 2.0, 1.0, 1e300, 1e-310, 4.0], dtype=torch.float64)

    def within_ulp(g, w):
        nan = torch.isnan(w)
        ulps = torch.where(g == w, 0.0, (g - w).abs() / (w.abs() * torch.finfo(w.dtype).eps))
        return torch.equal(torch.isnan(g), nan) and bool((ulps[~nan] <= 1.0).all())
    for dtype, check in ((torch.float32, _same_bits), (torch.bfloat16, _same_bits),
                         (torch.float64, within_ulp)):
        _check(torch.hypot, (a.to(dtype), b.to(dtype)), [None], check)


def test_erfinv_matches_eager_within_its_conditioning():
    """eager's algorithm (a rational first guess, two Newton steps on erf);
    near +-1 the Newton step divides erf's last-bit error by a slope near 0,
    so the bound widens there (docs/Importer.md). +-1, beyond and NaN
    exact."""
    torch.manual_seed(8)
    y = torch.rand(4000, dtype=torch.float64) * 2 - 1
    y[:6] = torch.tensor([1.0, -1.0, 0.0, 1.5, NAN, -0.0])

    def close(g, w):
        mid = y.abs() <= 0.9
        edge = ~mid
        rel = (g.double() - w.double()).abs() / w.double().abs().clamp_min(1e-30)
        eps = torch.finfo(w.dtype).eps
        return (_same_bits(g[:6], w[:6]) and bool((rel[mid] <= 8 * eps).all())
                and bool((rel[edge & ~torch.isinf(w) & ~torch.isnan(w)] <= 1e-4).all()))
    for dtype in (torch.float32, torch.float64):
        _check(torch.erfinv, (y.to(dtype),), [None], close)


@pytest.mark.parametrize("kernel,dilation,padding,stride",
                         [(3, 1, 0, 1), (3, 2, 1, 2), ((2, 3), (1, 2), (1, 0), (2, 1))])
def test_fold_and_unfold_gradients_match_eager(kernel, dilation, padding, stride):
    """``F.unfold`` (im2col), ``F.fold`` (col2im, also ``F.unfold``'s
    backward) and the gradient through both, bit for bit, split along the
    batch and the channels."""
    torch.manual_seed(9)
    x = torch.randn(2, 3, 7, 6)
    weight = torch.randn(F.unfold(x, kernel, dilation, padding, stride).shape)

    def fold(x):
        x = x.detach().requires_grad_(True)
        cols = F.unfold(x, kernel, dilation=dilation, padding=padding, stride=stride)
        back = F.fold(cols * 1.5, (7, 6), kernel, dilation=dilation, padding=padding, stride=stride)
        loss = (cols * weight).sum() + (back ** 2).sum()
        return cols.detach(), back.detach(), torch.autograd.grad(loss, x)[0]
    _check(fold, (x,), [None, (DP2, [[S(0)]]), (DP2, [[S(1)]])])


def test_decompositions_that_write_in_place_match_eager():
    """``binary_cross_entropy_with_logits`` (its decomposition computes
    ``1 - target`` in place) and ``cosine_similarity`` of a tensor the
    function closes over (it clamps that tensor's norm in place, which
    functionalization had left unwrapped: PyTorch's internal assert), with
    their gradients."""
    torch.manual_seed(10)
    x, p, other = torch.randn(4, 6), torch.rand(4, 6), torch.randn(4, 6)
    weight, pos_weight = torch.rand(6), torch.rand(6)

    def losses(x):
        x = x.detach().requires_grad_(True)
        out = (F.binary_cross_entropy_with_logits(x, p),
               F.binary_cross_entropy_with_logits(x, p, weight=weight, pos_weight=pos_weight),
               F.cosine_similarity(x, other).sum())
        return [o.detach() for o in out] + [torch.autograd.grad(sum(out), x)[0]]
    _check(losses, (x,), [None, (DP2, [[S(0)]])],
           check=lambda g, w: torch.allclose(g, w, rtol=1e-6, atol=1e-6))


def test_an_in_place_op_whose_old_value_is_read_later_is_refused():
    """The importer takes an in-place op left in the graph for a new value;
    a graph that reads the overwritten tensor afterwards through its old
    node would get the old values, so it is refused."""
    from shardx.importer.graph import Importer
    from shardx.importer.values import UnsupportedOpError, Value
    aten = torch.ops.aten
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    copy = graph.call_function(aten.clone.default, (x,))
    new = graph.call_function(aten.sub_.Tensor, (copy, x))
    stale = graph.call_function(aten.mul.Tensor, (copy, x))
    graph.output((new, stale))
    value = torch.ones(3)
    for node in (x, copy, new, stale):
        node.meta["val"] = value
    with pytest.raises(UnsupportedOpError, match="reads afterwards"):
        Importer(torch.fx.GraphModule({}, graph)).run([Value("%arg0", (3,), torch.float32)])
    graph.erase_node(graph.output_node())
    graph.erase_node(stale)
    graph.output((new,))
    Importer(torch.fx.GraphModule({}, graph)).run([Value("%arg0", (3,), torch.float32)])


def test_shrinks_addmv_and_negative_padding_match_eager():
    """hardshrink/softshrink (their backward had no handler), addmv (its
    decomposition was not used), a negative padding (a crop, which
    local_response_norm's window sum writes) and local_response_norm."""
    torch.manual_seed(11)
    x = torch.randn(4, 6)
    x[0, 0], x[0, 1] = 0.5, -0.5
    img = torch.randn(2, 5, 4, 4)

    def ops(x):
        x = x.detach().requires_grad_(True)
        out = (F.hardshrink(x), F.softshrink(x, 0.3), torch.addmv(x[:, 0], x, x[0]),
               F.local_response_norm(img * x.sum(), 2), F.pad(x, (-1, 2, 1, -2)))
        return [o.detach() for o in out] + [torch.autograd.grad(sum((o * o).sum() for o in out), x)[0]]
    _check(ops, (x,), [None], check=lambda g, w: torch.allclose(g, w, rtol=1e-6, atol=1e-6))


def test_advanced_indexing_gradients_with_several_or_later_index_tensors():
    """The backward of ``x[arange(B), idx]`` (a sequence classifier's
    pooling), of a list index on dim 1 (with a repeat and a negative
    index), of an index on the last dim, of non-adjacent index tensors and
    of broadcast ones: an accumulating index_put, before refused unless it
    was one tensor into dim 0. Bit for bit, split along dims 0 and 2."""
    torch.manual_seed(12)
    x = torch.randn(4, 5, 6)
    cases = [
        lambda x: x[torch.arange(4), torch.tensor([1, 3, 0, 4])],
        lambda x: x[:, [2, 2, -1]],
        lambda x: x[..., torch.tensor([[0, 5], [5, 1]])],
        lambda x: x[torch.tensor([0, 3, 3]), :, torch.tensor([1, 2, 2])],
        lambda x: x[torch.tensor([[0], [2]]), torch.tensor([1, 4, 1])],
    ]
    weights = [torch.randn(f(x).shape) for f in cases]

    def grads(x):
        x = x.detach().requires_grad_(True)
        ys = [f(x) for f in cases]
        return [y.detach() for y in ys] + [torch.autograd.grad(y, x, w)[0]
                                           for y, w in zip(ys, weights)]
    _check(grads, (x,), [None, (DP2, [[S(0)]]), (DP2, [[S(2)]])])


@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm_train_step_matches_eager(dim):
    """weight_norm (Wav2Vec2's positional convolution, vocoders): its
    backward, _weight_norm_interface_backward, as ATen's kernel computes
    it (it had no handler), per output row, input column or whole."""
    from torch.nn.utils.parametrizations import weight_norm
    torch.manual_seed(13)
    model = torch.nn.Sequential(weight_norm(torch.nn.Conv1d(4, 6, 3, padding=1), dim=dim),
                                torch.nn.ReLU(), torch.nn.Conv1d(6, 2, 1))
    x, y = torch.randn(2, 4, 7), torch.randn(2, 2, 7)
    step = shardx.TrainStep(model, F.mse_loss, "adamw", lr=1e-2)
    args = step.example_args([x], y)
    got = shardx.compile(step, None)(*args)
    want = step.run_eager(*args)
    torch.testing.assert_close(got[0].to_torch(), want[0].detach(), rtol=1e-5, atol=1e-6)
    for g, w in zip(got[1], want[1]):
        torch.testing.assert_close(g.to_torch(), w.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, float("inf")])
@pytest.mark.parametrize("rows", [5, 30])
def test_cdist_and_its_gradient_match_eager(p, rows):
    """torch.cdist (metric learning, clustering losses) as ATen computes
    it: the matmul form for p = 2 past 25 rows, the differences' p-norm
    otherwise; and its gradient for both sides (both had no handler)."""
    torch.manual_seed(14)
    a, b = torch.randn(2, rows, 6), torch.randn(2, 7, 6)
    weight = torch.randn(2, rows, 7)

    def dist(a, b):
        a, b = a.detach().requires_grad_(True), b.detach().requires_grad_(True)
        d = torch.cdist(a, b, p=p)
        return [d.detach()] + list(torch.autograd.grad((d * weight).sum(), (a, b)))
    _check(dist, (a, b), [None, (DP2, [[S(0)], [S(0)]])],
           check=lambda g, w: torch.allclose(g, w, rtol=1e-5, atol=1e-5))
