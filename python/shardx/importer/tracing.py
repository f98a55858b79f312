"""Tracing: ``make_fx`` over the whole train step (forward, backward,
optimizer update), then functionalization and decomposition to the aten ops
that ``HANDLERS`` covers; each node's source line and train-step phase,
which the emitter turns into locations."""

from __future__ import annotations

import contextlib
import os
import re
import sys
import unittest.mock
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch._decomp import core_aten_decompositions, get_decompositions
from torch.fx.experimental.proxy_tensor import make_fx

aten = torch.ops.aten


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
        # The model zoo (shardx/zoo.py): batch norm, max pooling, unbind.
        aten.native_batch_norm, aten.native_batch_norm_backward, aten.max_pool2d_with_indices,
        aten.max_pool2d_with_indices_backward, aten.unbind_copy, aten.unbind,
    ]))
    return table


def _trace_graph(fn: Callable, flat_args: List[Any], treedef) -> torch.fx.GraphModule:
    """Traces ``fn`` to a functional aten graph over the flattened inputs."""
    from torch.func import functionalize
    from torch.fx import traceback as fx_traceback
    from torch.nn.attention import SDPBackend, sdpa_kernel

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
        stack.enter_context(sdpa_kernel(SDPBackend.MATH))
        stack.enter_context(unittest.mock.patch("torch.compiler.is_compiling", return_value=True))
        # Recurrent layers as their aten cells, not oneDNN kernels.
        stack.enter_context(torch.backends.mkldnn.flags(enabled=False))
        with fx_traceback.preserve_node_meta():
            g0 = make_fx(flat_fn, record_stack_traces=True)(*flat_args)
        _backward_lines_from_forward(g0)
        # Pass 2 removes mutations and views and decomposes, keeping the
        # source locations of pass 1.
        detached = [a.detach() if isinstance(a, torch.Tensor) else a for a in flat_args]

        def run(*xs):
            return torch.fx.Interpreter(g0).run(*xs)
        with fx_traceback.preserve_node_meta():
            g = make_fx(functionalize(run, remove="mutations_and_views"),
                        decomposition_table=decompositions(), record_stack_traces=True)(*detached)
    return g


def _skip_fake_mode_stacks(stack: contextlib.ExitStack) -> None:
    """make_fx on real tensors makes a FakeTensorMode for every value's
    metadata, and each records its creation stack (``traceback.extract_stack``,
    for debugging messages only): a quarter of the trace's time. While
    tracing, the fake-tensor module sees a ``traceback`` whose
    ``extract_stack`` is empty; everything else (the source locations of
    ``record_stack_traces``) is untouched."""
    import types
    import traceback
    from torch._subclasses import fake_tensor
    if getattr(fake_tensor, "traceback", None) is not traceback:
        return  # another PyTorch: leave it be
    shim = types.SimpleNamespace(**{k: getattr(traceback, k) for k in dir(traceback)
                                    if not k.startswith("__")})
    shim.extract_stack = lambda *args, **kwargs: traceback.StackSummary()
    stack.enter_context(unittest.mock.patch.object(fake_tensor, "traceback", shim))


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
    ``shardx/models.py``, a script's own name), so that the same program
    traces to the same text from any working directory."""
    m = re.match(r'\s*File "([^"]+)", line (\d+)', _user_line(node))
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
