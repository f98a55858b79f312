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
        if _writes_first_operand(node.target):
            # An in-place op the functionalized graph still holds (one a
            # decomposition of the second pass wrote: `1 - target` in
            # binary_cross_entropy_with_logits): its value is the
            # functional op's, valid while nothing reads the tensor it
            # wrote as it was before.
            _refuse_reads_of_overwritten(node)
            if handler is None:
                handler = HANDLERS.get(_functional_of(node.target))
        if handler is None:
            raise UnsupportedOpError(
                f"unsupported aten op {node.target} (from {_user_line(node)})")
        args = self._arg(node.args)
        kwargs = self._arg(dict(node.kwargs))
        try:
            return handler(self, node, args, kwargs)
        except UnsupportedOpError as e:
            raise UnsupportedOpError(f"unsupported form of {node.target}: {e} (from {_user_line(node)})") from None


def _writes_first_operand(target) -> bool:
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.arguments:
        return False
    info = schema.arguments[0].alias_info
    return info is not None and info.is_write


def _functional_of(target):
    """The functional overload of an in-place aten op (``sub_.Tensor`` ->
    ``sub.Tensor``), or None."""
    packet = getattr(torch.ops.aten, target._schema.name.split("::")[-1].rstrip("_"), None)
    return getattr(packet, target._overloadname, None) if packet is not None else None


#: Ops whose result shares its operand's memory (as functionalization
#: leaves them: views and aliases).
_VIEW_OPS = {torch.ops.aten.alias.default, torch.ops.aten.view.default,
             torch.ops.aten._unsafe_view.default, torch.ops.aten.expand.default,
             torch.ops.aten.slice.Tensor, torch.ops.aten.select.int,
             torch.ops.aten.permute.default, torch.ops.aten.transpose.int,
             torch.ops.aten.t.default, torch.ops.aten.unsqueeze.default,
             torch.ops.aten.squeeze.dim, torch.ops.aten.squeeze.dims,
             torch.ops.aten.as_strided.default, torch.ops.aten.diagonal.default,
             torch.ops.aten.detach.default}


def _shares_memory(user: torch.fx.Node, of: torch.fx.Node) -> bool:
    return user.op == "call_function" and bool(user.args) and user.args[0] is of and \
        (user.target in _VIEW_OPS or _writes_first_operand(user.target))


def _memory_group(start: torch.fx.Node) -> set:
    """The nodes that share ``start``'s memory: through views and in-place
    results, back to the tensor that owns it and forward from it."""
    root = start
    while root.op == "call_function" and root.args and isinstance(root.args[0], torch.fx.Node) \
            and _shares_memory(root, root.args[0]):
        root = root.args[0]
    return _descendants(root)


def _descendants(node: torch.fx.Node) -> set:
    group, todo = {node}, [node]
    while todo:
        n = todo.pop()
        for user in n.users:
            if user not in group and _shares_memory(user, n):
                group.add(user)
                todo.append(user)
    return group


def _refuse_reads_of_overwritten(node: torch.fx.Node) -> None:
    """UnsupportedOpError where a node after the in-place ``node`` reads the
    memory it wrote through an older node (the importer, taking the
    in-place op's value as a new one, would give that reader the old
    values)."""
    target = node.args[0] if node.args else None
    if not isinstance(target, torch.fx.Node):
        return
    older = _memory_group(target) - _descendants(node)
    for n in older:
        for user in n.users:
            if user is not node and user not in older and _after(user, node):
                raise UnsupportedOpError(
                    f"{node.target} writes a tensor that {user.target} reads afterwards as it "
                    f"was before ({_user_line(node)})")


def _after(a: torch.fx.Node, b: torch.fx.Node) -> bool:
    """Whether node ``a`` comes after node ``b`` in their graph."""
    n = b.next
    while n.op != "root":
        if n is a:
            return True
        n = n.next
    return False


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
