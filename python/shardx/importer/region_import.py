"""Importing regions (``regions``): each traced region graph becomes one
private ``func.func`` of the module, emitted the first time a
``shardx::region_call`` node calls it, and each call a ``func.call``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

import torch

from .dce import PROBE
from .emitter import Op
from .registry import handles
from .values import ImportError_, Value
from . import regions


@dataclass
class RegionFunc:
    """One emitted region function: its symbol, arguments, results and ops
    (``text`` once ``finish`` has removed its dead ops)."""

    symbol: str
    inputs: List[Value]
    results: List[Value]
    ops: List[Op]
    text: str = ""
    #: The region's index checks (exception name, message): its last
    #: ``len(checks)`` results are their counts of failures, which each
    #: call adds to its importer's checks.
    checks: List[Tuple[str, str]] = field(default_factory=list)


class CallOp(Op):
    """A region call. At the dead-code probe's locations (``dce``) it prints
    as an opaque op with side effects, so that ``remove-dead-values`` keeps
    it and its operands whole: on a ``func.call`` it would drop the operands
    of arguments the callee does not read, which the printed call keeps."""

    def render(self, loc=None) -> str:
        if loc and loc.startswith(f'"{PROBE}'):
            head, _, types = self.text.partition(") : ")
            operands = head.split("(", 1)[1]
            return f'{self.result} = "shardx_importer.call"({operands}) : {types} loc({loc})'
        return super().render(loc)


def _function_text(symbol: str, inputs: List[Value], outputs: List[Value], op_texts: List[str],
                   private: bool) -> str:
    args = ", ".join(f"{v.name}: {v.type}" for v in inputs)
    res = ", ".join(o.type for o in outputs)
    body = ["\n".join("  " + x for x in t.split("\n")) for t in op_texts]
    ret = f"  return {', '.join(o.name for o in outputs)} : {res}"
    vis = "private " if private else ""
    return "\n".join([f"func.func {vis}@{symbol}({args}) -> ({res}) {{"] + body + [ret, "}"])


def import_region(imp, graph_name: str, operands: List[Value]) -> RegionFunc:
    """The function of region graph ``graph_name`` (imported once per module)."""
    from .graph import Importer
    funcs = imp.region_funcs
    if graph_name in funcs:
        return funcs[graph_name]
    gm = regions._graph(graph_name)
    key, part = graph_name.rsplit(".", 1)
    symbol = f"{regions.REGIONS[key].name}_{part}"
    sub = Importer(gm, imp.mesh)
    sub.in_region = True  # pooling.py: a region may return max pooling indices to its backward
    sub.em.locations = imp.em.locations  # one set of location aliases per module
    sub.region_funcs = funcs
    # The region's index checks (ops/indexing.py), kept where the module
    # keeps them: their counts become results of the function.
    sub.checks = [] if getattr(imp, "checks", None) is not None else None
    inputs = [Value(f"%arg{i}", v.shape, v.dtype) for i, v in enumerate(operands)]
    outputs = sub.run(inputs)
    for i, o in enumerate(outputs):
        if not isinstance(o, Value):
            raise ImportError_(f"region {symbol}: output {i} is not a tensor ({o!r})")
    checks = sub.checks or []
    outputs = list(outputs) + [count for count, _, _ in checks]
    funcs[graph_name] = RegionFunc(symbol, inputs, outputs, sub.em.ops,
                                   checks=[(exc, message) for _, exc, message in checks])
    return funcs[graph_name]


def finish_started(imp) -> Optional[Callable[[], List[str]]]:
    """Removes the dead ops of the region functions ``imp`` called: one
    ``remove-dead-values`` run over all of them (public there, so that their
    signatures stay), started; None where ``imp`` called no region. The
    returned function waits for the tool and returns the text of each
    function. The caller removes the step's own dead ops
    meanwhile, in another process (``module._trace``)."""
    from .dce import start_removing_dead_ops
    funcs = list(imp.region_funcs.values())
    if not funcs:
        return None
    header = [imp.mesh.op_text(), ""] if imp.mesh is not None else []
    ops = [op for f in funcs for op in f.ops]
    owner = {id(op): i for i, f in enumerate(funcs) for op in f.ops}

    def probe_module(op_texts):
        at, texts = 0, []
        for f in funcs:
            texts.append(_function_text(f.symbol, f.inputs, f.results,
                                        op_texts[at:at + len(f.ops)], False))
            at += len(f.ops)
        return "\n".join(header + texts) + "\n"
    live_ops = start_removing_dead_ops(ops, probe_module)

    def done() -> List[str]:
        kept: List[List[Op]] = [[] for _ in funcs]
        for op in live_ops():
            kept[owner[id(op)]].append(op)
        for f, f_ops in zip(funcs, kept):
            f.text = _function_text(f.symbol, f.inputs, f.results,
                                    [op.render() for op in f_ops], True)
        return [f.text for f in funcs]
    return done


@handles(torch.ops.shardx.region_call.default)
def _region_call(imp, node, args, kwargs):
    graph_name, operands = args
    operands = list(operands)
    for i, v in enumerate(operands):
        if not isinstance(v, Value):
            raise ImportError_(f"region call {graph_name}: operand {i} is not a tensor ({v!r})")
    fn = import_region(imp, graph_name, operands)
    # The call's phase is its graph's: the trace gives a forward call's node
    # the backward phase (its autograd.Function's), which would make the
    # memory model count the block's activations as gradients.
    from .tracing import _phase, _source_position
    if _phase(node) in ("forward", "backward"):
        imp.em.set_location(_source_position(node),
                            "forward" if graph_name.endswith(".fwd") else "backward")
    n = len(fn.results)
    name = imp.em.fresh("r")
    in_types = ", ".join(v.type for v in operands)
    out_types = ", ".join(o.type for o in fn.results)
    imp.em.ops.append(CallOp(f"{name}:{n}" if n > 1 else name,
                         f"func.call @{fn.symbol}({', '.join(v.name for v in operands)}) : "
                         f"({in_types}) -> ({out_types})", imp.em.loc))
    if n == 1:
        results = [Value(name, fn.results[0].shape, fn.results[0].dtype)]
    else:
        results = [Value(f"{name}#{i}", o.shape, o.dtype) for i, o in enumerate(fn.results)]
    if fn.checks:
        # This call's counts of the region's index check failures.
        counts = results[n - len(fn.checks):]
        results = results[:n - len(fn.checks)]
        imp.checks.extend((c, exc, message) for c, (exc, message) in zip(counts, fn.checks))
    return results
