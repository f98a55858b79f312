"""Tracing: ``make_fx`` over the whole train step (forward, backward,
optimizer update) on fake tensors, then functionalization and decomposition
to the aten ops that ``HANDLERS`` covers; each node's source line and
train-step phase, which the emitter turns into locations."""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
import os
import re
import sys
import traceback
import unittest.mock
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch._decomp import core_aten_decompositions, get_decompositions
from torch.fx.experimental.proxy_tensor import make_fx
from . import attention

aten = torch.ops.aten
log = logging.getLogger("shardx.importer")


def decompositions():
    """The decomposition table: PyTorch's core aten set plus the composite ops
    that the importer spells out (GELU, LayerNorm, softmaxes, SiLU and their
    backward ops)."""
    table = dict(core_aten_decompositions())
    table.update(get_decompositions([
        aten.gelu, aten.gelu_backward, aten.native_layer_norm, aten.native_layer_norm_backward,
        aten._log_softmax, aten._softmax, aten._log_softmax_backward_data,
        aten._softmax_backward_data, aten.silu, aten.silu_backward, aten.embedding_dense_backward,
        aten.mse_loss, aten.mse_loss_backward, aten.nll_loss_forward, aten.nll_loss_backward,
        aten.tanh_backward, aten.sigmoid_backward, aten.threshold_backward,
        # The model zoo (shardx_dev/zoo.py): batch norm, unbind; group norm.
        aten.native_batch_norm, aten.native_batch_norm_backward, aten.unbind_copy, aten.unbind,
        aten.native_group_norm, aten.native_group_norm_backward,
    ]))
    # bf16/f16 logit and squared error step by step in the dtype, as
    # eager's kernels compute them (PyTorch's decompositions compute them
    # in f32 and round once: 169 of 512 bf16 logits differed).
    for op in (aten.logit.default, aten.mse_loss.default):
        table[op] = functools.partial(_narrow_by_steps, table[op], op)
    # The optimizers' lerp, addcmul and addcdiv stay whole: the importer
    # writes them as eager's kernels compute them (a fused multiply-add;
    # importer/ops/optimizer.py), where the core decompositions round the
    # product and the sum apart.
    for op in (aten.lerp.Scalar, aten.lerp.Tensor, aten.lerp_.Scalar, aten.lerp_.Tensor,
               aten.addcmul.default, aten.addcmul_.default, aten.addcdiv.default,
               aten.addcdiv_.default):
        table.pop(op, None)
    # unfold's backward stays whole (importer/ops/shape.py: one reduction
    # over the window's positions; the core decomposition writes an
    # index_put over a non-leading dim).
    table.pop(aten.unfold_backward.default, None)
    # F.fold (F.unfold's backward) too: one reduction over the kernel's
    # taps (shape.py), where the core decomposition writes an index_put
    # of several index tensors.
    table.pop(aten.col2im.default, None)
    # bucketize is eager's binary search, as searchsorted (indexing.py).
    table.pop(aten.bucketize.Tensor, None)
    # Reflection padding's gradient in ATen's order (ops/upsample.py),
    # not the core decomposition's.
    for op in (aten.reflection_pad1d_backward, aten.reflection_pad2d_backward,
               aten.reflection_pad3d_backward):
        table.pop(op.default, None)
    table[aten._weight_norm_interface_backward.default] = _weight_norm_backward
    table[aten._cdist_forward.default] = _cdist_forward
    table[aten._cdist_backward.default] = _cdist_backward
    # Ops that have a decomposition but reached the importer whole.
    table.update(get_decompositions([aten.addmv, aten.hardshrink, aten.softshrink, aten.repeat]))
    # Random ops from ShardX's counter-based generator (rng.py).
    from . import rng
    table.update(rng.decompositions())
    # Max pooling stays whole (importer/ops/pooling.py: a windowed op that
    # keeps an H/W split) except where the importer refuses it: a partial
    # last window (ceil_mode) or an input that is not NCHW.
    pool = get_decompositions([aten.max_pool2d_with_indices, aten.max_pool2d_with_indices_backward])
    table[aten.max_pool2d_with_indices.default] = functools.partial(
        _pool_unless_whole, pool[aten.max_pool2d_with_indices.default], 0, 1, 5)
    table[aten.max_pool2d_with_indices_backward.default] = functools.partial(
        _pool_unless_whole, pool[aten.max_pool2d_with_indices_backward.default], 1, 2, 6)
    return table


def _weight_norm_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    """``_weight_norm_interface_backward`` (weight_norm's gradient) as
    ATen's kernel computes it, per slice of ``dim`` (-1: the whole
    tensor): ``s = sum(grad_w * v)``, ``grad_g = s / norm``, ``grad_v =
    (g / norm) * (grad_w - v * (s / (norm * norm)))``."""
    dims = [d for d in range(saved_v.dim()) if d != dim % saved_v.dim()] if dim != -1 \
        else list(range(saved_v.dim()))
    s = (grad_w * saved_v).sum(dims, keepdim=True)
    grad_g = s / saved_norms
    grad_v = (saved_g / saved_norms) * (grad_w - saved_v * (s / (saved_norms * saved_norms)))
    return grad_v, grad_g.reshape(saved_g.shape)


def _cdist_forward(x1, x2, p: float, compute_mode=None):
    """``torch.cdist`` as ATen computes it: for p = 2 with more than 25
    rows on either side (or ``compute_mode`` 1), ``_euclidean_dist``: one
    matmul of ``[-2 x1, |x1|^2, 1]`` by ``[x2, 1, |x2|^2]``, clamped at 0,
    square-rooted; otherwise the p-norm of each pair's difference (p = 0:
    the nonzero count; inf: the largest)."""
    rows1, rows2 = x1.shape[-2], x2.shape[-2]
    if p == 2 and (compute_mode == 1 or (compute_mode in (None, 0) and (rows1 > 25 or rows2 > 25))):
        n1 = x1.pow(2).sum(-1, keepdim=True)
        n2 = x2.pow(2).sum(-1, keepdim=True)
        a = torch.cat([x1.mul(-2), n1, torch.ones_like(n1)], -1)
        b = torch.cat([x2, torch.ones_like(n2), n2], -1)
        return a.matmul(b.transpose(-2, -1)).clamp_min(0).sqrt()
    diff = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).abs()
    if p == 0:
        return (diff != 0).to(x1.dtype).sum(-1)
    if p == 1:
        return diff.sum(-1)
    if p == 2:
        return diff.pow(2).sum(-1).sqrt()
    if p == float("inf"):
        return diff.amax(-1)
    return diff.pow(p).sum(-1).pow(1.0 / p)


def _cdist_backward(grad, x1, x2, p: float, dist):
    """The gradient of ``cdist`` for ``x1`` (ATen's ``_cdist_backward``):
    over the other side's rows, ``grad * sign(d) |d|^(p-1) / dist^(p-1)``
    (p = 2: ``grad * d / dist``; 1: ``grad * sign(d)``; inf: where ``|d|``
    is the distance), 0 where the distance is 0."""
    d = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    g = grad.unsqueeze(-1)
    dist_ = dist.unsqueeze(-1)
    zero = torch.zeros((), dtype=x1.dtype)
    if p == 0:
        return torch.zeros_like(x1)
    if p == 1:
        term = g * torch.sign(d)
    elif p == 2:
        term = torch.where(dist_ == 0, zero, g * d / dist_)
    elif p == float("inf"):
        term = torch.where(d.abs() == dist_, g * torch.sign(d), zero)
    else:
        term = torch.where(dist_ == 0, zero,
                           g * torch.sign(d) * d.abs().pow(p - 1) / dist_.pow(p - 1))
    return term.sum(-2)


def _narrow_by_steps(decomp: Callable, op, x, *args, **kwargs):
    """``op`` on a bf16/f16 ``x`` as eager's CPU kernel computes it, each
    step rounded to the dtype: ``logit`` clamps to ``[eps, 1 - eps]``
    (both in the dtype: 1 - 1e-3 is 1 in bf16), then ``log(x / (1 - x))``;
    ``mse_loss`` squares the rounded difference, then reduces the loss.
    Other dtypes: ``decomp``."""
    if x.dtype not in (torch.bfloat16, torch.float16):
        return decomp(x, *args, **kwargs)
    if op == aten.mse_loss.default:
        target = args[0]
        reduction = args[1] if len(args) > 1 else kwargs.get("reduction", 1)
        d = x - target
        loss = d * d
        return loss.mean() if reduction == 1 else loss.sum() if reduction == 2 else loss
    eps = args[0] if args else kwargs.get("eps")
    if eps is not None:
        lo = round_to(eps, x.dtype)
        x = x.clamp(lo, round_to(1.0 - lo, x.dtype))
    return torch.log(x / (1 - x))


def round_to(value: float, dtype: torch.dtype) -> float:
    """``value`` as a ``dtype`` Scalar holds it (PyTorch's conversion, on a
    real tensor made outside any tracing mode, so it works inside a
    decomposition too)."""
    with _below_the_modes():
        return float(torch.tensor(value, dtype=dtype))


def _pool_unless_whole(decomp: Callable, x: int, kernel: int, ceil: int, *args, **kwargs):
    """``decomp(*args, **kwargs)`` where the importer cannot import the
    pooling op whole (``args[x]`` not 4-d, or ceil_mode with a partial last
    window); otherwise NotImplemented, which keeps the op in make_fx's graph."""
    from .ops.pooling import whole_pool
    a = list(args) + [None] * 8
    opt = lambda i, name, default: kwargs.get(name, default if a[i] is None else a[i])
    if whole_pool(tuple(args[x].shape), args[kernel], opt(kernel + 1, "stride", None),
                  opt(kernel + 2, "padding", 0), opt(kernel + 3, "dilation", 1),
                  opt(ceil, "ceil_mode", False)):
        return NotImplemented
    return decomp(*args, **kwargs)


_TABLE: Optional[Dict[Any, Callable]] = None


def _decomposition_table() -> Dict[Any, Callable]:
    """``decompositions()``, made once per process (each trace's second
    pass and each region's use it; making it takes 0.1-0.2 s)."""
    global _TABLE
    if _TABLE is None:
        _TABLE = decompositions()
    return _TABLE


def _trace_graph(fn: Callable, flat_args: List[Any], treedef,
                 regions: Optional[bool] = None,
                 lift: Optional[Callable[[], Any]] = None) -> torch.fx.GraphModule:
    """Traces ``fn`` to a functional aten graph over the flattened inputs, on
    fake tensors (shapes, dtypes and strides only: no kernel runs, so the
    time does not depend on the tensors' sizes). A function that fake tensors
    cannot run (one whose shapes depend on tensor values: ``nonzero``,
    boolean masks; or that reads memory: ``.numpy()``) is traced again on
    the real tensors, as before, with the reason logged (WARNING,
    ``shardx.importer``); where that fails too, its error is raised. One
    that reads a value into Python (``.item()``, ``bool(t)``) is a
    ``TraceError`` at once: make_fx refuses that on real tensors too.

    ``regions`` (default: ``regions.default_enabled()``) traces repeated
    blocks once (``regions``); the real-tensor fallback traces inline.

    ``lift`` (the trace on fake tensors only): called once pass 1 has
    traced, returns the ids of the tensors that may be inputs of the
    program (``module.trace``); ``last_lift_ids`` keeps them less the
    constants of the region graphs (``regions.constant_ids``) and the
    tensors whose values pass 1 read into Python (``_python_reads``), and the
    ones pass 1 writes in place become inputs at once
    (``last_written_lifted``, ``_lift_written``)."""
    global last_mode
    from torch._subclasses.fake_tensor import DataDependentOutputException
    from ..placements import PlacementError
    from .values import ImportError_, UnsupportedOpError
    name = getattr(fn, "__name__", "the function")
    from . import regions as _regions
    on = _regions.default_enabled() if regions is None else regions
    _regions.REGIONS.clear()
    last_lift_ids.clear()
    last_written_lifted.clear()
    last_python_reads.clear()
    try:
        with _regions.tracing_regions(fn, on):
            gm = _trace_passes(fn, flat_args, treedef, fake=True, lift=lift)
        if _regions.REGIONS:
            log.info("shardx.trace: %s: %d region graphs traced once (%.2f s), called %d times",
                     name, len(_regions.REGIONS),
                     sum(r.seconds for r in _regions.REGIONS.values()),
                     _regions._state().calls)
        last_mode = "fake"
        return gm
    except (ImportError_, PlacementError, UnsupportedOpError):
        raise  # ShardX's own errors: real tensors would raise them too
    except DataDependentOutputException as e:
        raise ImportError_(
            f"{name} reads a tensor's value into Python ({e.func}: .item(), float(t), bool(t), "
            f"an if on a tensor) {_user_frame(e)}; the traced program must be the same for "
            "all tensor values: compute with tensor ops instead (torch.where)") from None
    except Exception as e:  # noqa: BLE001 -- any other refusal of fake tensors
        reason = f"{type(e).__name__}: {_first_line(e)} {_user_frame(e)}".rstrip()
    log.warning("shardx.trace: fake tensors refused %s (%s); tracing on the real tensors, "
                "which runs every op", name, reason)
    _regions.REGIONS.clear()
    last_lift_ids.clear()
    last_written_lifted.clear()
    from . import rng
    rng.restart_streams()  # numbered from 0 again, as the fake trace's
    gm = _trace_passes(fn, flat_args, treedef, fake=False)
    last_mode = "real"
    return gm


#: How the last ``_trace_graph`` ran: ``"fake"`` (shapes only) or ``"real"``
#: (the fallback on the real tensors).
last_mode: Optional[str] = None
#: The ids ``lift`` gave in the last trace on fake tensors, less those of
#: the region graphs' constants (empty after the real-tensor fallback).
last_lift_ids: set = set()
#: The tensors of ``last_lift_ids`` that the last trace writes in place:
#: inputs of its graph after the arguments, and their new values outputs
#: after the function's (``_lift_written``).
last_written_lifted: List[torch.Tensor] = []
#: The ids of the real tensors whose values the last trace on fake tensors
#: read into Python (``_python_reads``): never lifted.
last_python_reads: set = set()


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def _user_frame(e: BaseException) -> str:
    """``from FILE:LINE``, the user's frame the exception came from ("" if
    none is outside PyTorch and the importer)."""
    import traceback
    skip = ("/torch/", "/shardx/importer/", "/shardx/train.py", "<eval_with_key>", "/contextlib.py")
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        if not any(s in frame.filename for s in skip):
            return f"(from {frame.filename}:{frame.lineno})"
    return ""


class _LazyTraceback:
    """What FX's ``create_node`` takes for ``CapturedTraceback`` while a
    trace runs: the same frames (create_node's caller outwards) as a
    ``StackSummary`` whose source lines are read only when formatted.
    PyTorch's reads the line of every frame of every node's stack (about 35
    frames deep under make_fx's dispatch) and then keeps the few from the
    step's own code: at 32 layers of bench/compile_latency_bench.py's GPT,
    240,000 ``linecache`` reads, 1.5 s of a 17 s (profiled) trace. The
    stack traces recorded are the same text.

    Where the tracer keeps frames one by one (make_fx's, which keeps those
    of ``forward`` methods and registered anchors, outside PyTorch's own
    files: ``_record_forward_stack_traces_only``), the summary holds only
    the frames its filter keeps, asked once per code object: the filter
    then keeps them all, and the text is the same. Building a frame summary
    for each of the 35-60 frames of each node and filtering them was 8% of
    the trace."""

    __slots__ = ("frame", "keep")

    def __init__(self, frame, keep=None):
        self.frame = frame
        self.keep = keep

    @staticmethod
    def extract(*, script=False, cpp=False, skip=0):
        frame = sys._getframe(1 + skip)
        return _LazyTraceback(frame, _frame_filter(frame.f_locals.get("self")))

    def summary(self) -> traceback.StackSummary:
        frames = []
        f, self.frame = self.frame, None
        if self.keep is None:
            while f is not None:
                code = f.f_code
                frames.append(traceback.FrameSummary(code.co_filename, f.f_lineno, code.co_name,
                                                     lookup_line=False))
                f = f.f_back
        else:
            # The memo read inline and keyed by the code object's id (a code
            # object hashes its bytecode, constants and names on each
            # lookup): for some 50 frames a node, that was most of this
            # loop's time.
            kept, keep = self.keep
            while f is not None:
                code = f.f_code
                k = kept.get(id(code))
                if k is None:
                    k = keep(code)
                if k:
                    frames.append(traceback.FrameSummary(code.co_filename, f.f_lineno,
                                                         code.co_name, lookup_line=False))
                f = f.f_back
        frames.reverse()
        return traceback.StackSummary.from_list(frames)


def _frame_filter(tracer) -> Optional[Tuple[Dict[int, bool], Callable[[Any], bool]]]:
    """``(kept, keep)``: ``keep(code)`` says whether ``tracer``'s stack-trace
    filter keeps a frame of ``code``, and ``kept`` holds its answers so far
    by ``id(code)``; None where the filter does not take frames one by one.
    Kept on the tracer."""
    memo = getattr(tracer, "__dict__", {}).get("_shardx_frame_memo")
    anchors = getattr(torch.fx.proxy, "_STACK_TRACE_ANCHORS", None)
    if memo is not None and anchors is not None and memo[0] == len(anchors):
        return memo[1]
    if not getattr(tracer, "_record_forward_stack_traces_only", False):
        return None
    filt = getattr(tracer, "_filter_traceback_frames", None)
    if anchors is None or filt is None:
        return None
    # Made again where anchors were registered since (a region's trace):
    # they may keep more frames. Keyed by id; ``codes`` keeps each code
    # object alive, so that no other takes its id.
    kept: Dict[int, bool] = {}
    codes: List[Any] = []

    def keep(code) -> bool:
        k = kept.get(id(code))
        if k is None:
            one = traceback.StackSummary.from_list(
                [traceback.FrameSummary(code.co_filename, 1, code.co_name, lookup_line=False)])
            codes.append(code)
            k = kept[id(code)] = len(filt(one)) == 1
        return k
    tracer.__dict__["_shardx_frame_memo"] = (len(anchors), (kept, keep))
    return kept, keep


def autocast_devices() -> List[str]:
    """The devices ("cpu", "cuda") whose autocast is enabled here."""
    return [d for d in ("cpu", "cuda") if torch.is_autocast_enabled(d)]


def autocast_off(stack: contextlib.ExitStack) -> None:
    """Turns every enabled autocast off until `stack` closes."""
    for device in autocast_devices():
        stack.enter_context(torch.autocast(device, enabled=False))


def _trace_passes(fn: Callable, flat_args: List[Any], treedef, fake: bool,
                  lift: Optional[Callable[[], Any]] = None) -> torch.fx.GraphModule:
    """The two ``make_fx`` passes, on fake copies of the inputs (``fake``)
    or on the inputs themselves; ``lift`` as for ``_trace_graph``."""
    from torch.func import functionalize
    from torch.fx import traceback as fx_traceback
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch._subclasses.fake_tensor import FakeTensorMode

    def flat_fn(*xs):
        return pytree.tree_leaves(fn(*pytree.tree_unflatten(list(xs), treedef)))

    # Source lines: FX keeps frames of forward() and of registered anchors.
    register = getattr(torch.fx.proxy, "_register_stack_trace_anchor", None)
    if register is not None:
        for anchor in (fn, getattr(fn, "loss_fn", None)):
            if anchor is not None and hasattr(anchor, "__code__"):
                register(anchor)
    # Pass 1 records autograd (backward is traced into the graph); the math
    # attention backend keeps attention in differentiable aten ops; optimizers
    # take their capturable (tensor step) path as under torch.compile.
    with contextlib.ExitStack() as stack:
        _skip_fake_mode_stacks(stack)
        if hasattr(torch.fx.proxy, "CapturedTraceback"):
            stack.enter_context(unittest.mock.patch.object(torch.fx.proxy, "CapturedTraceback",
                                                           _LazyTraceback))
        stack.enter_context(sdpa_kernel(SDPBackend.MATH))
        # f32/f64 attention as shardx::attention (importer/attention.py).
        attention.composite_mode(stack)
        # Ops whose eager kernels raise on bad values, with their checks.
        from . import checked
        checked.checked_mode(stack)
        stack.enter_context(unittest.mock.patch("torch.compiler.is_compiling", return_value=True))
        # Recurrent layers as their aten cells, not oneDNN kernels.
        stack.enter_context(torch.backends.mkldnn.flags(enabled=False))
        if fake:
            # One fake tensor per input (the same tensor twice is one fake,
            # views keep their base), with its shape, dtype, strides and
            # requires_grad. Tensors the function closes over stay real
            # (allow_non_fake_inputs): make_fx keeps them as the graph's
            # constants, values and all, and the ops on them run on fake
            # copies. No shape environment: an op whose output shape
            # depends on values raises instead of making a symbolic size.
            mode = FakeTensorMode(allow_non_fake_inputs=True)
            flat_args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a
                         for a in flat_args]
            stack.enter_context(mode)
            written_real: set = set()
            _no_real_writes(mode, written_real)
            _python_reads(stack, getattr(fn, "__name__", "the function"), written_real)
            # Under the fake mode, numpy() of a real tensor the function
            # closes over read memory that is not its values (garbage baked
            # into the program): refused, so that the trace runs again on
            # the real tensors, where it reads the values.
            stack.enter_context(unittest.mock.patch.object(torch.Tensor, "numpy",
                                                           _numpy_refused))
        _mark_checkpoint_recomputation(stack)
        _lean_node_meta(stack)
        _lean_create_arg(stack)
        _lean_dead_code(stack)
        _lean_eager_input_check(stack)
        _lean_snake_case(stack)
        _lean_op_copy(stack)
        # The graph modules without their Python code: made (and compiled)
        # only where something calls one (a region's eager run does not:
        # it interprets the graph). Two modules of 5,000 nodes at 32
        # layers of bench/compile_latency_bench.py's GPT, 0.3 s.
        lazy = getattr(getattr(torch.fx, "_lazy_graph_module", None), "_use_lazy_graph_module",
                       None)
        if lazy is not None:
            stack.enter_context(lazy(True))
        with fx_traceback.preserve_node_meta():
            # An explicit table: make_fx's default one turns each
            # detach into an alias through a second dispatch (2 ms an op at
            # 32 layers); _drop_aliases removes them either way.
            # (An inference tensor has no counter, and cannot be written.)
            versions = [a._version if isinstance(a, torch.Tensor) and not a.is_inference()
                        else None for a in flat_args]
            # The random ops only (rng.py): their streams are numbered as
            # autograd and checkpoints run them.
            from . import rng
            g0 = make_fx(flat_fn, decomposition_table=rng.in_place_decompositions(),
                         record_stack_traces=True)(*flat_args)
        _backward_lines_from_forward(g0)
        moved = [v is not None and a._version != v for a, v in zip(flat_args, versions)]
        if lift is not None and fake:
            from . import regions as _regions
            last_lift_ids.update(set(lift()) - _regions.constant_ids() - last_python_reads)
            written = _lift_written(g0, last_lift_ids)
            last_written_lifted.extend(written)
            flat_args = list(flat_args) + [mode.from_tensor(t) for t in written]
            moved += [True] * len(written)
        _refuse_untracked_writes(g0, getattr(fn, "__name__", "the function"), moved)
        _refuse_grad_reads(g0, getattr(fn, "__name__", "the function"), flat_args)
        _drop_aliases(g0)
        # Pass 2 removes mutations and views and decomposes, keeping the
        # source locations of pass 1.
        detached = _pass2_inputs(flat_args)

        def run(*xs):
            return _Pass2(g0).run(*xs)
        # Pass 1 recorded the ops autocast chose; autocast must not choose
        # again in pass 2 (a region is traced inside the caller's autocast,
        # and would cast an f32 matmul it computes with autocast off).
        autocast_off(stack)
        with fx_traceback.preserve_node_meta():
            g = make_fx(functionalize(run, remove="mutations_and_views"),
                        decomposition_table=_decomposition_table(),
                        record_stack_traces=True)(*detached)
    return g


class _Pass2(torch.fx.Interpreter):
    """Pass 2's walk over pass 1's graph (under ``functionalize`` and
    make_fx), where the nodes that pass 2 would copy unchanged are recorded
    directly, without their dispatch.

    Pass 2 runs every node of pass 1 through functionalization (a wrapper
    per value, unwrapped and wrapped again around each op), make_fx's
    proxy mode (the decomposition table, ``proxy_call``) and the fake
    mode. Most of pass 1's nodes come out of that as they went in: at 32
    layers of bench/compile_latency_bench.py's GPT, of 5,200 nodes 452
    region calls and their getitems, and 780 pointwise ``mul``/``add`` of
    the global gradient norm; their dispatch (0.45-0.5 ms a node) was
    two thirds of the pass. Where pass 1's graph mutates nothing (no op
    with a mutable schema: then functionalization only unwraps and wraps
    again, and syncs no pending update), this makes such a node's FX node
    and output value as that dispatch would, with the same
    ``tracer.create_node`` under the same current node metadata, and
    leaves the output unwrapped (a plain fake tensor, tracked by the
    tracer) until a node that takes the usual way reads it (then it is
    wrapped, once, at the transform's level):

    - a region call whose operands all have proxies (``regions.record_call``:
      the nodes ``regions._proxy_mode_rule`` makes, the outputs the fake
      mode's rule makes);
    - a pointwise aten op (``torch.Tag.pointwise``; not mutating, not a
      view, one tensor result, no decomposition in pass 2's table nor a
      CompositeImplicit kernel, no Python kernel for the modes) whose
      tensor operands are fake, tracked without a constant value, and
      shaped as in pass 1 (shape, strides, offset, dtype, device): its
      output is made with pass 1's output's shape, strides and dtype, as
      the meta kernel gives it for such operands.

    Anything else (and every node of a trace on real tensors, or of a
    graph that mutates) takes the usual way. A region's own trace (inside
    the step's pass 1, on its fake tensors) records the same way. The nodes and their metadata
    are the ones the usual way makes (python/tests/test_trace_overheads.py
    compares both passes' graphs)."""

    def __init__(self, gm: torch.fx.GraphModule, direct: bool = True):
        super().__init__(gm)
        self._direct = direct and all(_functional(n) for n in gm.graph.nodes)
        #: id -> (plain fake value, its functional wrapper or None).
        self._plain: Dict[int, List[Any]] = {}
        self._level: Optional[int] = None
        from . import regions  # noqa: F401 -- defines shardx::region_call
        self._region_call = torch.ops.shardx.region_call.default

    @contextlib.contextmanager
    def _set_current_node(self, node: torch.fx.Node):
        # The pass name FX records in each new node's provenance
        # (``from_node``): the plain Interpreter's, as before.
        from torch.fx import traceback as fx_traceback
        with fx_traceback.set_current_meta(node, "Interpreter_Interpreter"):
            yield

    def run_node(self, n: torch.fx.Node) -> Any:
        if self._direct and n.op == "call_function":
            target = n.target
            if target is self._region_call or type(target) is torch._ops.OpOverload \
                    and _pointwise(target):
                # Without make_fx's torch-function mode, which each
                # tensor attribute read here would go through (it records
                # the last torch function called, for pre-dispatch traces).
                with self._set_current_node(n), torch._C.DisableTorchFunction():
                    out = self._record(n, target)
                if out is not None:
                    if isinstance(out, list):
                        for t in out:
                            self._plain[id(t)] = [t, None]
                    else:
                        self._plain[id(out)] = [out, None]
                    return out
        if n.op == "call_function" and n.args and isinstance(n.args[0], torch.fx.Node):
            self._wrap_written_constant(n)
        return super().run_node(n)

    def _wrap_written_constant(self, n: torch.fx.Node) -> None:
        """An in-place op on a value computed from the graph's constants
        alone (``cosine_similarity`` of a closed-over tensor clamps its
        norm in place), with a functional operand besides: functionalize
        leaves such a value unwrapped, and PyTorch refuses to write it
        with a functional tensor (an internal assert). The value is wrapped
        (at the operands' level) before the op, for its readers too."""
        schema = getattr(n.target, "_schema", None)
        if schema is None or not schema.arguments or schema.arguments[0].alias_info is None \
                or not schema.arguments[0].alias_info.is_write:
            return
        first = self.env.get(n.args[0])
        if not isinstance(first, torch.Tensor) or torch._is_functional_tensor(first):
            return
        others = [a for a in pytree.tree_leaves((n.args[1:], n.kwargs))
                  if isinstance(a, torch.fx.Node)]
        level = next((torch._C._functorch.maybe_get_level(self.env[a]) for a in others
                      if isinstance(self.env.get(a), torch.Tensor)
                      and torch._is_functional_tensor(self.env[a])), None)
        if level is None:
            return
        self.env[n.args[0]] = torch._C._functorch._wrap_functional_tensor(first, level)

    def fetch_args_kwargs_from_env(self, n: torch.fx.Node):
        args, kwargs = super().fetch_args_kwargs_from_env(n)
        # A getitem (of a region call's outputs) passes its value on as it
        # is; the output node's values are unwrapped again anyway.
        if self._plain and n.op != "output" and n.target is not operator.getitem:
            args, kwargs = pytree.tree_map_only(torch.Tensor, self._wrapped, (args, kwargs))
        return args, kwargs

    def _wrapped(self, t: torch.Tensor) -> torch.Tensor:
        """``t``, or the functional wrapper of a value recorded directly."""
        entry = self._plain.get(id(t))
        if entry is None or entry[0] is not t:
            return t
        if entry[1] is None:
            entry[1] = torch._C._functorch._wrap_functional_tensor(t, self._level)
        return entry[1]

    def _inner(self, t: Any) -> Any:
        """The fake tensor behind an operand: a recorded value itself, or
        the value a functional wrapper holds (None where there is none)."""
        entry = self._plain.get(id(t))
        if entry is not None and entry[0] is t:
            return t
        if not torch._is_functional_tensor(t):
            return None
        if self._level is None:
            self._level = torch._C._functorch.maybe_get_level(t)
        torch._sync(t)
        return torch._from_functional_tensor(t)

    def _record(self, n: torch.fx.Node, target) -> Any:
        from torch.fx.experimental import proxy_tensor as pt
        from torch._subclasses.fake_tensor import FakeTensor
        mode = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.PROXY)
        if mode is None:
            return None
        args, kwargs = super().fetch_args_kwargs_from_env(n)
        if target is self._region_call:
            bound = dict(zip(("graph", "operands"), args), **kwargs)
            operands = bound.get("operands")
            if not isinstance(operands, (list, tuple)):
                return None
            inner = [self._inner(t) for t in operands]
            if any(t is None for t in inner):
                return None
            from . import regions
            return regions.record_call(mode, bound.get("graph"), inner)
        fake = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)
        val = n.meta.get("val")
        if kwargs or fake is None or type(val) is not FakeTensor or val.storage_offset() != 0 \
                or getattr(mode, "decomp_layers", 1) \
                or getattr(mode, "emulate_precision_casts", False) \
                or getattr(mode, "pre_dispatch", True) or fake.shape_env is not None \
                or target in mode.decomposition_table:
            return None
        tracker = mode.tracer.tensor_tracker
        proxy_args = []
        if not any(isinstance(a, torch.Tensor) for a in args):
            return None
        for node_arg, a in zip(n.args, args):
            if not isinstance(a, torch.Tensor):
                if isinstance(node_arg, torch.fx.Node) or isinstance(a, (list, tuple, dict)):
                    return None
                proxy_args.append(a)
                continue
            t = self._inner(a) if isinstance(node_arg, torch.fx.Node) else None
            if type(t) is not FakeTensor or t.fake_mode is not fake or t.constant is not None:
                return None
            slot = tracker.get(t)
            was = node_arg.meta.get("val")
            if slot is None or slot.constant is not None or not isinstance(was, torch.Tensor) \
                    or t.shape != was.shape or t.stride() != was.stride() \
                    or t.storage_offset() != was.storage_offset() or t.dtype != was.dtype \
                    or t.device != was.device:
                return None
            proxy_args.append(slot.proxy)
        tracer = mode.tracer
        with pt.set_original_aten_op(target):
            proxy = tracer.create_proxy(
                "call_function", target, tuple(proxy_args), {},
                name=tracer.graph._target_to_str(target.overloadpacket.__name__))
            with _below_the_modes():
                out = FakeTensor(fake, torch.empty_strided(tuple(val.shape), tuple(val.stride()),
                                                           dtype=val.dtype, device="meta"),
                                 val.device)
            pt.set_proxy_slot(out, tracer, pt._ProxyTensor(proxy, None))
            pt.set_meta(proxy, out)
        return out


@contextlib.contextmanager
def _below_the_modes():
    """Where an op's fake kernel runs under pass 2's dispatch: no fake or
    proxy mode (nothing traced) and no functionalization (nothing wrapped)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
    with unset_fake_temporarily(), disable_proxy_modes_tracing(), torch._C._DisableFuncTorch():
        yield


def _functional(node: torch.fx.Node) -> bool:
    """Whether pass 2's functionalization leaves ``node`` of pass 1 as it
    is, but for the wrappers: not an op with a mutable schema, nor a call
    of anything other than an op overload or ``getitem`` (a higher-order
    operator may write its operands)."""
    if node.op != "call_function" or node.target is operator.getitem:
        return True
    return type(node.target) is torch._ops.OpOverload and not node.target._schema.is_mutable


_POINTWISE: Dict[Any, bool] = {}


def _pointwise(op) -> bool:
    """Whether pass 2 copies the aten op ``op`` as it is and ``_Pass2``
    may record it directly (see there); kept per op."""
    answer = _POINTWISE.get(op)
    if answer is None:
        from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode
        from torch._subclasses.fake_tensor import FakeTensorMode
        schema = op._schema
        answer = (op.namespace == "aten" and torch.Tag.pointwise in op.tags
                  and not schema.is_mutable and len(schema.returns) == 1
                  and schema.returns[0].alias_info is None
                  and str(schema.returns[0].type) == "Tensor"
                  and not any(a.alias_info is not None for a in schema.arguments)
                  and op not in _decomposition_table()
                  and not torch._C._dispatch_has_kernel_for_dispatch_key(
                      op.name(), "CompositeImplicitAutograd")
                  and not any(t in op.tags for t in (torch.Tag.nondeterministic_seeded,
                                                     torch.Tag.data_dependent_output,
                                                     torch.Tag.dynamic_output_shape))
                  and ProxyTorchDispatchMode not in op.python_key_table
                  and FakeTensorMode not in op.python_key_table)
        _POINTWISE[op] = answer
    return answer


def _pass2_inputs(flat_args: List[Any]) -> List[Any]:
    """Pass 2's inputs: pass 1's, detached where one requires grad (pass 2
    traces no autograd) or is a repeat of an earlier one (each placeholder
    of pass 2 its own tensor, as each input of pass 1's graph is its own
    placeholder). A detach of a fake tensor is one more dispatch through the
    fake mode: 1,166 of them at 32 layers of bench/compile_latency_bench.py's
    GPT, none needed."""
    seen = set()
    res = []
    for a in flat_args:
        if isinstance(a, torch.Tensor) and (a.requires_grad or id(a) in seen):
            a = a.detach()
        seen.add(id(a))
        res.append(a)
    return res


def _lean_node_meta(stack: contextlib.ExitStack) -> None:
    """While tracing, make_fx's ``set_meta`` (each node's ``meta["val"]``)
    without what ShardX never reads: ``meta["tensor_meta"]`` (strides,
    memory format and contiguity worked out again for every node), and the
    copy of each fake value. make_fx copies a node's value (a new
    FakeTensor) in case a later in-place op changes its shape or strides.
    Pass 2 traces a functionalized program, whose values no op changes in
    place; pass 1's values are read by nobody (pass 2 runs its ops again).
    So the nodes keep the values themselves, except placeholders (an input
    mutation is written back to its input). Together 15-25% of a 32-layer
    GPT's trace (bench/compile_latency_bench.py). Another PyTorch (no
    ``set_meta`` or ``extract_val``) traces as it does."""
    from torch.fx.experimental import proxy_tensor as pt
    from torch._subclasses.fake_tensor import FakeTensor
    extract = getattr(pt, "extract_val", None)
    if extract is None or not callable(getattr(pt, "set_meta", None)):
        return

    def value(v):
        if type(v) is FakeTensor:
            return v
        if isinstance(v, (list, tuple)) and all(type(x) is FakeTensor for x in v):
            return v.__class__(v)
        return extract(v)

    def set_meta(proxy, val):
        node = proxy.node
        if node.op == "placeholder":
            node.meta["val"] = extract(val, include_real=True)
        else:
            node.meta["val"] = value(val)
        return proxy
    stack.enter_context(unittest.mock.patch.object(pt, "set_meta", set_meta))


def _lean_create_arg(stack: contextlib.ExitStack) -> None:
    """While tracing, make_fx's ``create_arg`` (each argument of each node,
    recursively) answers the arguments that most nodes have (a Proxy, a
    number, a dtype, a list or tuple of them) at once, as its own chain of
    checks ends up answering them (a Proxy is its node, a plain value
    itself, a list or tuple its elements'): the chain asks each argument
    whether it is a Parameter, a symbolic number, a script object, a
    tensor, a module, a named tuple, a constant or an opaque type first,
    through metaclass ``__instancecheck__``s written in Python; 5-8% of a
    32-layer GPT's trace (bench/compile_latency_bench.py). Anything else
    (tensors, subclasses of these types) goes the usual way."""
    from torch.fx.experimental import proxy_tensor as pt
    tracer_cls = getattr(pt, "PythonKeyTracer", None)
    original = getattr(tracer_cls, "create_arg", None) if tracer_cls is not None else None
    if original is None:
        return
    proxy_cls = torch.fx.Proxy
    plain = frozenset({int, float, bool, str, type(None), torch.dtype, torch.device,
                       torch.memory_format, torch.layout})

    def create_arg(self, a):
        t = type(a)
        if t is proxy_cls:
            return a.node
        if t in plain:
            return a
        if t is list:
            return [self.create_arg(x) for x in a]
        if t is tuple:
            return tuple(self.create_arg(x) for x in a)
        return original(self, a)
    stack.enter_context(unittest.mock.patch.object(tracer_cls, "create_arg", create_arg))


def _lean_dead_code(stack: contextlib.ExitStack) -> None:
    """While tracing, make_fx's dead-code pass at the end of each pass
    (``Graph.eliminate_dead_code`` with make_fx's ``impure_pred``) asks
    its predicate only about nodes without users: the pass erases a node
    where the predicate says pure *and* nothing uses it, but asks the
    predicate first, for every node (6,000 at 32 layers of
    bench/compile_latency_bench.py's GPT, each through ``Node.is_impure``
    and a symbolic-shape check: 2-3% of the trace). A node with users is
    answered "impure" at once, which keeps it as its users did; the same
    nodes are erased. A call without a predicate (FX's own notion of
    impure) is left as it is."""
    original = getattr(torch.fx.Graph, "eliminate_dead_code", None)
    if original is None:
        return

    @functools.wraps(original)
    def eliminate_dead_code(self, is_impure_node=None, *args, **kwargs):
        if is_impure_node is not None:
            pred = is_impure_node

            def is_impure_node(node):
                return True if node.users else pred(node)
        return original(self, is_impure_node, *args, **kwargs)
    stack.enter_context(unittest.mock.patch.object(torch.fx.Graph, "eliminate_dead_code",
                                                   eliminate_dead_code))


def _lean_eager_input_check(stack: contextlib.ExitStack) -> None:
    """While tracing, make_fx's ``_should_save_eager_input_vals`` (asked
    for each node it makes: does the target need its inputs' exact
    strides kept, for inductor) answers a builtin function (``getitem``)
    and an operator whose layout constraint is fixed (a layout tag, or an
    aten/prim operator) from a memo per target: its answer for these
    depends on the target alone, and asking again (an import statement
    and a chain of ``isinstance`` checks through Python metaclasses, then
    the operator's tags) was 3-4% of a 32-layer GPT's trace
    (bench/compile_latency_bench.py). Anything else (higher-order
    operators, whose answer depends on their arguments, and custom
    operators without a layout tag, whose default is a setting) is asked
    as before."""
    from torch.fx.experimental import proxy_tensor as pt
    original = getattr(pt, "_should_save_eager_input_vals", None)
    tag_of = getattr(getattr(torch, "_library", None), "utils", None)
    tag_of = getattr(tag_of, "get_layout_constraint_tag", None)
    if original is None or tag_of is None:
        return
    op_overload, builtin = torch._ops.OpOverload, type(len)
    memo: Dict[int, Tuple[Any, bool]] = {}  # id -> (target, answer); keeps target alive

    def fixed(op) -> bool:
        try:
            return tag_of(op, with_default=False) is not None or \
                op.namespace in ("aten", "prim", "prims")
        except Exception:  # noqa: BLE001 -- another PyTorch: ask each time
            return False

    def should_save(target, args_kwargs=None):
        t = type(target)
        if t is builtin or t is op_overload:
            hit = memo.get(id(target))
            if hit is not None and hit[0] is target:
                return hit[1]
            answer = original(target, args_kwargs)
            if t is builtin or fixed(target):
                memo[id(target)] = (target, answer)
            return answer
        return original(target, args_kwargs)
    stack.enter_context(unittest.mock.patch.object(pt, "_should_save_eager_input_vals",
                                                   should_save))


def _lean_snake_case(stack: contextlib.ExitStack) -> None:
    """While tracing, FX's ``_snake_case`` (a node's name from its
    target's: a regular expression substitution for every node made)
    answers from a memo: it is a function of the string alone, and a
    trace names its thousands of nodes after a few dozen targets (1% of
    a 32-layer GPT's trace, bench/compile_latency_bench.py)."""
    from torch.fx import graph as fx_graph
    original = getattr(fx_graph, "_snake_case", None)
    if original is None:
        return
    memo: Dict[str, str] = {}

    def snake_case(s):
        r = memo.get(s) if type(s) is str else None
        if r is None:
            r = original(s)
            if type(s) is str and len(memo) < 65536:
                memo[s] = r
        return r
    stack.enter_context(unittest.mock.patch.object(fx_graph, "_snake_case", snake_case))


def _lean_op_copy(stack: contextlib.ExitStack) -> None:
    """While tracing, ``copy.copy`` of an op overload is the overload
    itself. FX gives each node it makes a copy of the current metadata's
    fields (``_COPY_META_FIELDS``), ``original_aten``, an OpOverload, among
    them; OpOverload has no ``__copy__``, so each copy was a new OpOverload
    (its ``__dict__`` copied through ``__reduce_ex__``, about 4 us) that
    ends as garbage in a reference cycle: 9,000 of them in a warm 32-layer
    GPT's trace (bench/compile_latency_bench.py), which the cyclic
    collector walks when the trace ends. An overload is an immutable handle
    to an operator, as a function is (which ``copy.copy`` returns as it
    is); nothing reads the copies but for the operator they name. Another
    PyTorch, whose OpOverload has a ``__copy__``, is left as it is."""
    overload = getattr(torch._ops, "OpOverload", None)
    if overload is None or hasattr(overload, "__copy__"):
        return
    stack.enter_context(unittest.mock.patch.object(overload, "__copy__", _same, create=True))


def _same(self):
    return self


def on_roomy_stack(fn: Callable, *args, **kwargs):
    """``fn(*args, **kwargs)`` with CPython's frame stack on a fresh chunk
    with about 1 MiB free above the call.

    CPython (3.11 here) keeps frames in 16 KiB chunks and unmaps a chunk as
    soon as the stack falls back below it (python/cpython#142183; later 3.13
    and 3.14 releases keep one chunk cached). A trace calls through the same
    deep dispatch path for every op; where a chunk boundary falls inside
    that path, each op maps and unmaps a chunk several times: at 32 layers
    of bench/compile_latency_bench.py's GPT, 600,000 mmap/munmap pairs and
    900,000 page faults, a third of the trace's time. Whether it happens
    depends on the frames below (the number of inputs moves the boundary:
    16 layers did not hit it). The call runs from a frame whose code
    reserves 1 MiB of evaluation stack (never touched), so its chunk is
    2 MiB and everything the call does fits in the rest."""
    if sys.implementation.name != "cpython":
        return fn(*args, **kwargs)
    return _ROOMY_CALL(fn, args, kwargs)


def _call(fn, args, kwargs):
    return fn(*args, **kwargs)


# 131,072 evaluation-stack slots of 8 bytes (1 MiB): with the 1,000 slots a
# new chunk must have beyond the frame, CPython rounds the chunk up to 2 MiB
# (a power of two, 16 KiB at least); the frame's stack is never written.
_ROOMY_CALL = type(_call)(_call.__code__.replace(co_stacksize=131072), {})


def _skip_fake_mode_stacks(stack: contextlib.ExitStack) -> None:
    """make_fx on real tensors (the fallback of ``_trace_graph``) makes a
    FakeTensorMode for every value's metadata, and each records its creation
    stack (``traceback.extract_stack``, for debugging messages only): a
    quarter of such a trace's time. While tracing, the fake-tensor module
    sees a ``traceback`` whose ``extract_stack`` is empty; everything else
    (the source locations of ``record_stack_traces``) is untouched."""
    import types
    import traceback
    from torch._subclasses import fake_tensor
    if getattr(fake_tensor, "traceback", None) is not traceback:
        return  # another PyTorch: leave it be
    shim = types.SimpleNamespace(**{k: getattr(traceback, k) for k in dir(traceback)
                                    if not k.startswith("__")})
    shim.extract_stack = lambda *args, **kwargs: traceback.StackSummary()
    stack.enter_context(unittest.mock.patch.object(fake_tensor, "traceback", shim))


def _mark_checkpoint_recomputation(stack: contextlib.ExitStack) -> None:
    """While tracing, the ops that ``torch.utils.checkpoint`` (non-reentrant)
    runs again in the backward pass carry ``node.meta["custom"]
    ["shardx.recompute"]``: the number of their checkpoint (a call of
    ``checkpoint``, numbered as the forward calls them). ``graph.Importer``
    maps each onto the forward op it repeats and marks that op as one to
    recompute (docs/Compiler.md, "Activation recomputation")."""
    from torch.fx import traceback as fx_traceback
    from torch.utils import checkpoint as ck
    hook = getattr(ck, "_recomputation_hook", None)
    frame_cls = getattr(ck, "_CheckpointFrame", None)
    if hook is None or frame_cls is None or not isinstance(hook, type):
        return  # another PyTorch: the recomputed ops are plain backward ops
    numbers: Dict[int, int] = {}
    frames: List[Any] = []  # keeps each frame alive, so its id stays its own
    original_save = frame_cls.save_inputs

    def save_inputs(self, *args):  # the checkpoint's forward call: number it
        numbers.setdefault(id(self), len(numbers))
        frames.append(self)
        return original_save(self, *args)

    class Marked(hook):
        def __init__(self, target_frame_ref, gid):
            super().__init__(target_frame_ref, gid)
            frame = target_frame_ref()
            self._shardx_mark = fx_traceback.annotate(
                {"shardx.recompute": numbers.get(id(frame), -1)})

        def __enter__(self):
            self._shardx_mark.__enter__()
            return super().__enter__()

        def __exit__(self, *exc):
            try:
                return super().__exit__(*exc)
            finally:
                self._shardx_mark.__exit__(None, None, None)

    stack.enter_context(unittest.mock.patch.object(ck, "_recomputation_hook", Marked))
    stack.enter_context(unittest.mock.patch.object(frame_cls, "save_inputs", save_inputs))


def _recompute_mark(node) -> Optional[int]:
    """The checkpoint whose recomputation traced the node, or None."""
    return (node.meta.get("custom") or {}).get("shardx.recompute")


def _python_reads(stack: contextlib.ExitStack, name: str, written: set) -> None:
    """Records in ``last_python_reads`` the ids of the real tensors (and
    their bases) whose values pass 1 on fake tensors reads into Python
    (``.item()``, ``float(t)`` of a tensor the function closes over: make_fx
    reads a real tensor's value, and the trace keeps it as a number), so
    that they are not lifted to inputs (``_trace_graph``): a lifted tensor
    is guarded by identity and metadata, and a later change of its values
    would have run the first value. Reading so the value of a tensor the
    trace wrote (``written``, by ``_no_real_writes``) is an ``ImportError_``:
    the real tensor does not hold the write (BatchNorm with
    ``momentum=None`` reads ``num_batches_tracked`` after counting)."""
    from torch.fx.experimental import proxy_tensor
    from torch._subclasses.fake_tensor import FakeTensor
    from .values import ImportError_
    proxy_call = proxy_tensor.proxy_call

    def reading(proxy_mode, func, pre_dispatch, args, kwargs):
        if isinstance(func, torch._ops.OpOverload) and \
                torch.Tag.data_dependent_output in func.tags:
            for t in pytree.tree_leaves((args, kwargs)):
                while isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor):
                    if id(t) in written:
                        raise ImportError_(
                            f"{name} reads into Python ({func.name()}: .item(), float(t)) "
                            "the value of a tensor it updates in place and does not take as "
                            "an argument (BatchNorm with momentum=None reads its "
                            "num_batches_tracked so); the traced program would keep one "
                            "value. Pass the tensor as an argument, or compute with tensor "
                            "ops")
                    last_python_reads.add(id(t))
                    t = t._base
        return proxy_call(proxy_mode, func, pre_dispatch, args, kwargs)
    stack.enter_context(unittest.mock.patch.object(proxy_tensor, "proxy_call", reading))


def _no_real_writes(mode, written: set) -> None:
    """Makes ``mode`` (pass 1's fake mode) write the fake copy of a real
    tensor an in-place op writes (a tensor the function closes over: a
    module's buffer), never the tensor itself. Where every tensor operand
    of an op that takes numbers as tensors is real (BatchNorm's
    ``num_batches_tracked.add_(1)``, ``self.count += 1``), the fake mode
    runs it on the real tensors (its constant propagation): the trace
    wrote the caller's tensor, so the first call counted twice once
    ``shardx.compile`` wrote the program's value back. The fake copy is the
    one the mode makes for any op on that tensor (memoized), so the trace's
    later reads see the write. ``written`` gets the ids of those tensors."""
    dispatch = mode.dispatch

    def no_real_writes(func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _written_operands(func, args, kwargs):
            args, kwargs = list(args), dict(kwargs)
            for where, key in _written_operands(func, args, kwargs):
                t = where[key]
                if isinstance(t, torch.Tensor) and not mode.is_our_fake(t):
                    written.add(id(t))
                    where[key] = mode.from_tensor(t)
            args = tuple(args)
        return dispatch(func, types, args, kwargs)
    mode.dispatch = no_real_writes


def _numpy_refused(self, *args, **kwargs):
    raise RuntimeError("numpy() reads a tensor's memory, which a trace on fake tensors has not")


def _refuse_grad_reads(g: torch.fx.GraphModule, name: str, inputs: List[Any]) -> None:
    """An ``ImportError_`` where pass 1 reads the values of an input's
    ``.grad``: make_fx keeps it as a constant of the graph (its values of
    the first call, for every call). An input's ``.grad`` is there for the
    function to test (``x.grad is None``, a guard of ``shardx.compile``),
    not to read."""
    from .values import ImportError_
    grads = {}
    for i, a in enumerate(inputs):
        if isinstance(a, torch.Tensor) and a.is_leaf and a.grad is not None:
            grads[id(a.grad)] = i
    if not grads:
        return
    for node in g.graph.find_nodes(op="get_attr"):
        i = grads.get(id(getattr(g, node.target, None)))
        if i is not None and node.users:
            line = _user_line(next(iter(node.users)))
            where = "" if line == "unknown location" else f" ({line})"
            raise ImportError_(
                f"{name} reads the values of input {i}'s .grad{where}; the compiled program "
                "would keep those of the first call. Pass the gradient as an argument "
                "(f(x, x.grad))")


def _written_operands(op, args, kwargs) -> List[Tuple[Any, Any]]:
    """(container, key) of each operand the op ``op`` called with ``args``
    and ``kwargs`` writes in place: the arguments its schema marks written
    (``Tensor(a!)``), and ``native_batch_norm``'s running statistics in
    training mode, which it updates although its schema does not say so
    (pass 1 records ``batch_norm`` as it; functionalization, in pass 2,
    writes them through its decomposition)."""
    if not isinstance(op, torch._ops.OpOverload):
        return []
    if op is torch.ops.aten.native_batch_norm.default:
        training = args[5] if len(args) > 5 else kwargs.get("training")
        return [(args, i) for i in (3, 4) if training and i < len(args)]
    if not op._schema.is_mutable:
        return []
    out = []
    for i, arg in enumerate(op._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            if i < len(args):
                out.append((args, i))
            elif arg.name in kwargs:
                out.append((kwargs, arg.name))
    return out


def _written_roots(g: torch.fx.GraphModule):
    """(node, root) for each tensor an op of ``g`` writes in place: the
    node of the op and the node the written operand is a view of (through
    any chain of views: a placeholder, a ``get_attr`` constant or an op's
    result)."""
    for node in g.graph.nodes:
        if node.op != "call_function":
            continue
        for where, key in _written_operands(node.target, node.args, node.kwargs):
            root = where[key]
            while isinstance(root, torch.fx.Node) and root.op == "call_function" and \
                    isinstance(root.target, torch._ops.OpOverload) and root.args:
                returns = root.target._schema.returns
                if not returns or returns[0].alias_info is None or \
                        returns[0].alias_info.is_write:
                    break
                root = root.args[0]  # a view: its base
            yield node, root


def _lift_written(g: torch.fx.GraphModule, ids) -> List[torch.Tensor]:
    """Makes each tensor constant of pass 1's graph ``g`` whose id is in
    ``ids`` and that an op writes in place (a module's buffer: BatchNorm's
    running statistics in training mode; ``self.count += 1``; a closed-over
    accumulator, through a view or ``out=``) an input after the others, and
    its value at the end one more output after the function's, as
    AOTAutograd's input mutations: functionalization (pass 2) turns the
    writes into that output's value, and ``shardx.compile`` copies it into
    the tensor after each call. Returns the tensors, in order."""
    written: List[torch.Tensor] = []
    seen = set()
    for _, root in _written_roots(g):
        if isinstance(root, torch.fx.Node) and root.op == "get_attr":
            value = getattr(g, root.target, None)
            if isinstance(value, torch.Tensor) and id(value) in ids and id(value) not in seen:
                seen.add(id(value))
                written.append(value)
    if not written:
        return written
    graph = g.graph
    placeholders = list(graph.find_nodes(op="placeholder"))
    inputs: Dict[int, torch.fx.Node] = {}
    for value in written:
        with graph.inserting_after(placeholders[-1] if placeholders else None):
            ph = graph.placeholder(f"lifted_written_{len(inputs)}")
        placeholders.append(ph)
        inputs[id(value)] = ph
    for node in list(graph.find_nodes(op="get_attr")):
        ph = inputs.get(id(getattr(g, node.target, None)))
        if ph is not None:
            ph.meta.update(node.meta)
            node.replace_all_uses_with(ph)
            graph.erase_node(node)
    output = next(iter(graph.find_nodes(op="output")))
    output.args = (list(output.args[0]) + [inputs[id(v)] for v in written],)
    g.recompile()
    return written


def _refuse_untracked_writes(g: torch.fx.GraphModule, name: str, moved: List[bool]) -> None:
    """An ``ImportError_`` where pass 1 writes in place a tensor that is not
    an input and not made by the function: a constant of the graph (a
    module's parameter or buffer, a tensor the function closes over or
    reads from a global), or a view of one. Functionalization keeps such
    a write only as a dead value, so the program dropped it (BatchNorm in
    training mode called directly: eager updates ``running_mean``, the
    compiled step did not) and a later read got the old value. Tensors
    the function makes (``torch.tensor``) are copies (``lift_fresh_copy``)
    and may be written. Likewise a write into input ``i`` whose version
    counter did not move (``moved[i]`` false: through ``x.data``, which
    has a counter of its own), which shardx.compile's write-back, found
    through the counters, would miss."""
    from .values import ImportError_
    inputs = [n for n in g.graph.nodes if n.op == "placeholder"]
    for node, root in _written_roots(g):
        op = node.target
        if isinstance(root, torch.fx.Node) and root.op == "placeholder" and \
                len(inputs) == len(moved) and not moved[inputs.index(root)]:
            raise ImportError_(
                f"{name} writes input {inputs.index(root)} in place through an alias whose "
                f"writes autograd does not count ({op.name()}, {_user_line(node)}: "
                "x.data); the write would not reach the caller's tensor. Write the input "
                "itself (x.add_(...), under torch.no_grad() if it requires grad)")
        if isinstance(root, torch.fx.Node) and root.op == "get_attr":
            raise ImportError_(
                f"{name} updates in place a tensor it does not take as an argument "
                f"({op.name()}, {_user_line(node)}): a module's parameter or buffer, or a "
                "tensor it closes over (BatchNorm in training mode updates its running "
                "statistics so), which this trace cannot write back (shardx.compile writes "
                "back those it reads at each call, but not one a traced region reads too; "
                "shardx.trace has no caller's tensor to write). Pass the tensor as an "
                "argument (its update is then written back; shardx.train.TrainStep passes "
                "normalization statistics as state) or put the module in eval mode")


def _drop_aliases(g: torch.fx.GraphModule) -> None:
    """Removes pass 1's ``aten.detach`` and ``aten.alias`` nodes (the step's
    ``p.detach().requires_grad_()``, an optimizer's ``p.detach()``) whose
    users read them without writing, calling their input instead. Pass 2
    has no autograd to cut and removes views anyway, but takes each alias
    through functionalization and the reference decomposition (at 32
    layers of bench/compile_latency_bench.py's GPT, 779 aliases, 1.6 s of a
    17 s profiled trace). An alias that is an output, or that an op
    mutates, stays."""
    graph = g.graph
    nodes = list(graph.find_nodes(op="call_function", target=aten.alias.default)) + \
        list(graph.find_nodes(op="call_function", target=aten.detach.default))
    for node in nodes:
        src = node.args[0] if node.args else None
        if not isinstance(src, torch.fx.Node) or node.kwargs:
            continue
        if any(u.op == "output" or not isinstance(u.target, (torch._ops.OpOverload, type(len)))
               or (isinstance(u.target, torch._ops.OpOverload) and u.target._schema.is_mutable)
               for u in node.users):
            continue
        node.replace_all_uses_with(src)
        graph.erase_node(node)


def _backward_lines_from_forward(g: torch.fx.GraphModule) -> None:
    """Gives each backward op without a stack trace the one of the forward op
    it differentiates (the same ``seq_nr``; ``train.link_backward_to_forward``
    sets it), as AOTAutograd's ``copy_fwd_metadata_to_bw_nodes`` does."""
    forward: Dict[int, str] = {}
    for node in g.graph.nodes:
        seq, trace = node.meta.get("seq_nr"), node.meta.get("stack_trace")
        if _phase(node) == "forward" and seq is not None and trace:
            forward.setdefault(seq, trace)
    for node in g.graph.nodes:
        seq = node.meta.get("seq_nr")
        if _phase(node) == "backward" and not node.meta.get("stack_trace") and seq in forward:
            node.meta["stack_trace"] = forward[seq]


def _phase(node) -> Optional[str]:
    """The train-step phase the node was traced in (``train.phase``)."""
    return (node.meta.get("custom") or {}).get("shardx.phase")


def _source_position(node) -> Optional[Tuple[str, int]]:
    """(file, line) of the node's user frame, the file as it is imported:
    relative to the longest ``sys.path`` entry it lies in (``torch/nn/...``,
    ``shardx_dev/models.py``, a script's own name), so that the same program
    traces to the same text from any working directory.

    Kept per stack trace text, working directory and ``sys.path``: a
    trace's nodes share a few hundred stack traces (every ``getitem`` of a
    region call has its call's), and working each out again (a regex and
    an ``abspath`` of every ``sys.path`` entry) was half of the import's
    time at 32 layers of bench/compile_latency_bench.py's GPT."""
    key = (node.meta.get("stack_trace") or "", os.getcwd(), tuple(sys.path))
    pos = _POSITIONS.get(key, _POSITIONS)
    if pos is _POSITIONS:
        if len(_POSITIONS) >= 8192:
            _POSITIONS.clear()
        pos = _POSITIONS[key] = _position_of(_user_line(node))
    return pos


_POSITIONS: Dict[Tuple[str, str, Tuple[str, ...]], Optional[Tuple[str, int]]] = {}


def _position_of(user_line: str) -> Optional[Tuple[str, int]]:
    m = re.match(r'\s*File "([^"]+)", line (\d+)', user_line)
    if not m:
        return None
    path = os.path.abspath(m.group(1))
    roots = [os.path.abspath(p or ".") for p in sys.path]
    inside = [r for r in roots if path.startswith(r.rstrip(os.sep) + os.sep)]
    if inside:
        path = os.path.relpath(path, max(inside, key=len))
    return path, int(m.group(2))


def _user_line(node) -> str:
    trace = node.meta.get("stack_trace") or ""
    lines = [l.strip() for l in trace.strip().splitlines() if l.strip().startswith("File ")]
    skip = ("/torch/", "/shardx/importer/", "/shardx/train.py", "<eval_with_key>", "/unittest/", "/contextlib.py")
    for line in reversed(lines):
        if not any(s in line for s in skip):
            return line
    return lines[-1] if lines else "unknown location"
