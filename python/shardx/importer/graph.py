"""The walk over the traced FX graph: each node's handler from ``HANDLERS``
emits its ops at the node's location; graph constants become dense
``arith.constant``s."""

from __future__ import annotations

import operator
from typing import Any, Dict, List, Optional

import torch
import torch.fx
import torch.utils._pytree as pytree

from ..placements import Mesh
from .emitter import Emitter
from .registry import HANDLERS
from .tracing import _phase, _recompute_mark, _source_position, _user_line
from .values import UnsupportedOpError, Value, tensor_type


class Importer:
    def __init__(self, graph: torch.fx.GraphModule, mesh: Optional[Mesh] = None):
        self.gm = graph
        self.mesh = mesh
        self.em = Emitter()
        self.env: Dict[torch.fx.Node, Any] = {}
        #: The region functions called so far (``region_import``), by graph name.
        self.region_funcs: Dict[str, Any] = {}

    def run(self, inputs: List[Value]) -> List[Any]:
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        for node, val in zip(placeholders, inputs):
            self.env[node] = val
        outputs = None
        repeats, checkpointed = _checkpoint_repeats(self.gm.graph)
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                outputs = pytree.tree_leaves(self._arg(node.args[0]))
                break
            if node.op == "get_attr":
                self.env[node] = self._constant(getattr(self.gm, node.target))
                continue
            if node in repeats:
                self.env[node] = self.env[repeats[node]]
                continue
            if node.op != "call_function":
                raise UnsupportedOpError(f"FX node kind {node.op} ({node.target})")
            self.em.set_location(_source_position(node), _phase(node), checkpointed.get(node))
            self.env[node] = self._call(node)
        self.em.set_location(None, None)
        return outputs

    def _constant(self, t: torch.Tensor) -> Value:
        """A tensor constant of the traced program (closed-over tensors)."""
        t = t.detach().contiguous()
        shape = tuple(int(s) for s in t.shape)
        ty = tensor_type(shape, t.dtype)
        if t.dtype == torch.bool:
            vals = ", ".join("true" if b else "false" for b in t.flatten().tolist())
            lit = f"dense<[{vals}]>" if t.dim() else f"dense<{vals}>"
            if t.dim() > 1 or t.numel() == 0:
                return self.em.cast(self._constant(t.to(torch.int8)), torch.bool)
        else:
            raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
            lit = f'dense<"0x{raw.hex().upper()}">'
        name = self.em.emit(f"arith.constant {lit} : {ty}", "cst")
        return Value(name, shape, t.dtype)

    def _arg(self, a):
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self._arg(x) for x in a) if isinstance(a, tuple) else [self._arg(x) for x in a]
        if isinstance(a, dict):
            return {k: self._arg(v) for k, v in a.items()}
        return a

    def _call(self, node):
        if node.target is operator.getitem:
            seq, i = node.args
            return self.env[seq][i]
        handler = HANDLERS.get(node.target)
        if handler is None:
            raise UnsupportedOpError(
                f"unsupported aten op {node.target} (from {_user_line(node)})")
        args = self._arg(node.args)
        kwargs = self._arg(dict(node.kwargs))
        try:
            return handler(self, node, args, kwargs)
        except UnsupportedOpError as e:
            raise UnsupportedOpError(f"unsupported form of {node.target}: {e} (from {_user_line(node)})") from None


def _checkpoint_repeats(graph: torch.fx.Graph):
    """The ops torch.utils.checkpoint's backward recomputation traced again
    (``tracing._mark_checkpoint_recomputation``), each mapped onto the
    forward op it repeats: the same target on the same operands (after
    mapping) and arguments. Returns ``(repeats, checkpointed)``: a repeat ->
    its forward op, and each forward op repeated -> its checkpoint's number
    (0, 1, ... in forward order). The program reads the forward op's value
    in the backward pass, as without the checkpoint, and the op is marked
    for ``shardx-recompute-activations`` to compute again before its
    backward readers (lib/Compiler/Recompute.cpp); a CSE would merge a
    repeat kept in the program with its forward op anyway. A repeat that
    matches no forward op stays a backward op."""
    repeats: Dict[torch.fx.Node, torch.fx.Node] = {}
    marks: Dict[torch.fx.Node, int] = {}
    forward: Dict[Any, torch.fx.Node] = {}
    same: Dict[torch.fx.Node, torch.fx.Node] = {}
    if not any(_recompute_mark(n) is not None for n in graph.nodes):
        return repeats, {}

    copies = (torch.ops.aten.alias.default, torch.ops.aten.clone.default)

    def root(a):
        # Through repeats and copies (the checkpoint's hooks copy what they
        # save: alias and clone after functionalization): the same values.
        while True:
            a = repeats.get(a, same.get(a, a))
            if a.op != "call_function" or a.target not in copies:
                return a
            a = a.args[0]

    def key(node):
        def canon(a):
            return ("%node", root(a).name) if isinstance(a, torch.fx.Node) else a
        args = pytree.tree_map(canon, (list(node.args), dict(node.kwargs)))
        return (node.op, node.target, repr(args))

    for node in graph.nodes:
        if node.op not in ("call_function", "get_attr"):
            continue
        if torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()):
            continue  # two draws with the same arguments are not one value
        mark = _recompute_mark(node)
        if mark is not None and node.target in copies:
            repeats[node] = root(node.args[0])
            continue
        if mark is None:
            if _phase(node) in (None, "forward"):
                k = key(node)
                if k in forward:  # the forward computes it twice: one key
                    same[node] = forward[k]
                else:
                    forward[k] = node
            continue
        original = forward.get(key(node))
        if original is not None:
            repeats[node] = original
            marks.setdefault(original, mark)
    # Checkpoints numbered in the order of their first forward op.
    order: Dict[int, int] = {}
    for node in graph.nodes:
        if node in marks:
            order.setdefault(marks[node], len(order))
    return repeats, {n: order[m] for n, m in marks.items()}
