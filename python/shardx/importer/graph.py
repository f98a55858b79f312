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
from .tracing import _phase, _source_position, _user_line
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
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                outputs = pytree.tree_leaves(self._arg(node.args[0]))
                break
            if node.op == "get_attr":
                self.env[node] = self._constant(getattr(self.gm, node.target))
                continue
            if node.op != "call_function":
                raise UnsupportedOpError(f"FX node kind {node.op} ({node.target})")
            self.em.set_location(_source_position(node), _phase(node))
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
