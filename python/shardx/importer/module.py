"""``trace``: a PyTorch function to the text of one MLIR module (the
``shardx.mesh``, one ``func.func`` with layouts and argument attributes, the
location aliases)."""

from __future__ import annotations

import contextlib
import gc
import threading
import time

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.utils._pytree as pytree

from ..placements import Mesh, Placement, PlacementError, Replicate, check_placements, layout_text
from . import region_import, rng
from .dce import start_removing_dead_ops
from .graph import Importer
from .tracing import _trace_graph, on_roomy_stack
from .values import ImportError_, Value, string_literal


@dataclass
class TraceSpec:
    """What the command line traces: the arguments of ``trace``."""

    fn: Callable
    example_args: Sequence[Any]
    mesh: Optional[Mesh] = None
    in_placements: Optional[Sequence[Optional[Sequence[Placement]]]] = None
    out_placements: Optional[Sequence[Optional[Sequence[Placement]]]] = None
    name: Optional[str] = None
    arg_attrs: Optional[Sequence[Optional[Dict[str, str]]]] = None
    regions: Optional[bool] = None
    #: The position of each row of a causal attention's sequence
    #: (``shardx.context_parallel.sequence_order``), or None: the rows' order.
    sequence_order: Optional[Sequence[int]] = None


def trace_spec(spec: TraceSpec) -> str:
    """``trace`` of ``spec``'s arguments, under its sequence order."""
    from .attention import sequence_order
    with sequence_order(spec.sequence_order):
        return trace(spec.fn, spec.example_args, spec.mesh, spec.in_placements,
                     spec.out_placements, spec.name, spec.arg_attrs, spec.regions)


def trace(fn: Callable, example_args: Sequence[Any], mesh: Optional[Mesh] = None,
          in_placements=None, out_placements=None, name: Optional[str] = None,
          arg_attrs=None, regions: Optional[bool] = None, index_checks: bool = True,
          lift: Optional[Callable[[], Any]] = None) -> str:
    """Traces ``fn(*example_args)`` and returns the MLIR module text.

    ``in_placements`` / ``out_placements`` give one entry per flattened tensor
    input / output (pytree order): ``None`` for no layout, else one placement
    per mesh axis. ``arg_attrs`` gives one entry per flattened input: ``None``
    or a dict of further argument attributes, dialect-prefixed names (not
    ``shardx.``) to string values, e.g. ``{"torch.state": "exp_avg_sq"}``;
    by default ``fn.arg_attrs(example_args)`` where ``fn`` has that method
    (``TrainStep`` names its optimizer state). The result has one
    ``func.func`` named ``name`` (default: the function's name) plus the
    ``shardx.mesh`` when a mesh is given, and one private ``func.func`` per
    traced region (``regions``: repeated blocks traced once and called;
    ``regions=False`` traces them inline; default: on unless
    ``SHARDX_REGIONS=0`` or ``regions_enabled(False)``).

    ``index_checks`` (default on): where the program checks its index
    values (indexing ops, bincount: docs/Importer.md, "Index checks"), one
    more output, last, an i64 scalar (replicated): 0 when every check
    passed, else ``k + 1`` for the first check ``k`` that failed;
    ``last_checks`` lists the checks (exception name, message), and so does
    the output's result attribute ``shardx.index_checks`` (``[{exception =
    "IndexError", message = "..."}, ...]``, in code order), which marks it
    for the compiler, the command line executors (which fail on a non-zero
    code) and ``Artifact`` (which raises eager's error, and returns the
    other outputs). A program without indexing ops gets no such output.
    ``index_checks=False`` leaves it out: an out-of-range index then reads
    index 0's value, silently (nothing out of bounds is ever read).

    A program with random ops (dropout, ``rand``, ...: ``rng.py``) takes
    their seed, a 0-d int64, as its last input (after the lifted tensors;
    ``last_seed`` is the tensor, also last in ``last_lifted``): the caller
    sets it before each run.

    ``lift``: called once the graph is traced, returns the ids of the
    tensors ``fn`` may read besides its arguments that are to be inputs of
    the program rather than constants (``shardx.compile``: the parameters,
    buffers and tensors it reaches, ``env_guard``). Each such tensor the
    graph reads becomes one more input, after the arguments, without a
    layout (``last_lifted`` lists them in order). A tensor the function
    writes in place (BatchNorm's running statistics in training mode) is
    lifted with its new value one more output, after the function's,
    replicated (``last_lifted_written``: the first of ``last_lifted``), for
    the caller to copy into it. Not lifted (constants): a tensor a traced
    region reads besides its operands (as in the region's graph) and one
    whose value the trace read into Python (``.item()``). ``lift`` is
    called after the first make_fx pass (``tracing._trace_graph``). Only a
    trace on fake
    tensors lifts: there no value of a tensor reaches Python, so the graph
    is the same for any values; the real-tensor fallback may have read one
    into a shape or a branch, and keeps them as constants (``last_lifted``
    empty).
    """
    with _gc_paused():
        return on_roomy_stack(_trace, fn, example_args, mesh, in_placements, out_placements,
                              name, arg_attrs, regions, index_checks, lift)


@contextlib.contextmanager
def _gc_paused():
    """Python's cyclic garbage collector off for the call (as it was after).
    A trace allocates millions of objects that live until it ends (the FX
    nodes, fake tensors and their metadata): each full collection walks them
    all again, 20-25% of a 32-layer GPT's trace
    (bench/compile_latency_bench.py; its peak memory 827 MB against 813 MB
    with the collector on). The trace's garbage is collected while
    ``shardx-opt`` removes its dead ops (``_collect_garbage``)."""
    was = gc.isenabled()
    gc.disable()
    collect, _GC.collect = getattr(_GC, "collect", False), was
    later = getattr(_GC, "later", None)
    try:
        yield
    except BaseException:
        if was:
            gc.enable()
        raise
    else:
        if was and later is not None:
            later.pending = True  # paused, with the garbage, until later.collect()
        elif was:
            gc.enable()
    finally:
        _GC.collect = collect


#: ``collect``: the trace on this thread paused an enabled collector;
#: ``later``: the innermost ``garbage_left_for_later`` on this thread.
_GC = threading.local()


class _Later:
    """What ``garbage_left_for_later`` yields: ``collect()`` collects the
    garbage a trace left (once) and turns the collector on again."""

    def __init__(self):
        self.pending = False

    def collect(self) -> None:
        if self.pending:
            self.pending = False
            try:
                gc.collect(0)
            finally:
                gc.enable()


@contextlib.contextmanager
def garbage_left_for_later():
    """Within the block, a trace that paused an enabled collector leaves it
    paused, and its garbage uncollected, for ``collect()`` of the object
    yielded or else the block's end: the JIT (``shardx.compile``) calls
    it once ``shardx-compile`` runs, so that the collection (0.3-0.45 s
    at 32 layers of bench/compile_latency_bench.py's GPT, most of the
    trace's "dead code" step) overlaps the compile instead of preceding
    it. The same objects are freed; only the moment differs."""
    later = _Later()
    outer, _GC.later = getattr(_GC, "later", None), later
    try:
        yield later
    finally:
        _GC.later = outer
        later.collect()


def _collect_garbage() -> None:
    """The trace's garbage collected while ``shardx-opt`` removes the dead
    ops (the trace's graphs dropped first): the collection that would
    otherwise follow the trace (the collector on again, with hundreds of
    thousands of new objects counted: at 32 layers of
    bench/compile_latency_bench.py's GPT, 230,000 unreachable objects in
    reference cycles, 0.25-0.4 s) runs while the tool does. The same
    objects are freed as the collector would free them; only the moment
    differs."""
    gc.collect(0)


def _lift_constants(gm: torch.fx.GraphModule, ids) -> List[torch.Tensor]:
    """Makes each tensor constant of ``gm`` whose id is in ``ids`` an input
    (a placeholder after the others; one per tensor); returns them in
    order."""
    graph = gm.graph
    placeholders = list(graph.find_nodes(op="placeholder"))
    lifted: List[torch.Tensor] = []
    inputs: Dict[int, torch.fx.Node] = {}
    for node in list(graph.find_nodes(op="get_attr")):
        value = getattr(gm, node.target, None)
        if not isinstance(value, torch.Tensor) or id(value) not in ids or not node.users:
            continue
        ph = inputs.get(id(value))
        if ph is None:
            with graph.inserting_after(placeholders[-1] if placeholders else None):
                ph = graph.placeholder(f"lifted_{len(lifted)}")
            ph.meta.update(node.meta)
            placeholders.append(ph)
            inputs[id(value)] = ph
            lifted.append(value)
        node.replace_all_uses_with(ph)
        graph.erase_node(node)
    return lifted


def _trace(fn, example_args, mesh, in_placements, out_placements, name, arg_attrs,
           regions=None, index_checks=True, lift=None) -> str:
    flat_args, treedef = pytree.tree_flatten(tuple(example_args))
    for i, a in enumerate(flat_args):
        if not isinstance(a, torch.Tensor):
            raise ImportError_(f"input {i} is a {type(a).__name__}, not a tensor; "
                               "close over non-tensor values instead of passing them")
    if (in_placements or out_placements) and mesh is None:
        raise PlacementError("placements given without a mesh")
    in_layouts = _layouts(mesh, in_placements, [tuple(a.shape) for a in flat_args], "input")
    if arg_attrs is None and callable(getattr(fn, "arg_attrs", None)):
        arg_attrs = fn.arg_attrs(example_args)
    extra_attrs = _arg_attrs(arg_attrs, len(flat_args))
    start = time.perf_counter()
    with rng.trace_streams() as used:
        gm = _trace_graph(fn, flat_args, treedef, regions, lift)
    seed = used[0] if used else None
    last_lifted.clear()
    last_lifted_written.clear()
    global last_seed
    last_seed = None
    from . import tracing as _tracing
    written = 0
    if lift is not None and _tracing.last_mode == "fake":
        # The tensors the function writes are inputs of the graph already
        # (after the arguments), their new values outputs after the
        # function's; the others the graph reads become inputs after them.
        written = len(_tracing.last_written_lifted)
        lifted = list(_tracing.last_written_lifted) + _lift_constants(gm, _tracing.last_lift_ids)
        if lifted:
            last_lifted.extend(lifted)
            last_lifted_written.extend(range(written))
            flat_args = list(flat_args) + lifted
            in_layouts = list(in_layouts) + [None] * len(lifted)
            extra_attrs = list(extra_attrs) + [[] for _ in lifted]
    if seed is not None:
        # The random ops' seed (rng.py): the last input, whatever traced;
        # ``shardx.compile`` draws it anew for each call.
        if not _lift_constants(gm, {id(seed)}):
            raise ImportError_("the random ops' seed is not read by the traced graph (a ShardX bug)")
        last_seed = seed
        last_lifted.append(seed)
        flat_args = list(flat_args) + [seed]
        in_layouts = list(in_layouts) + [None]
        extra_attrs = list(extra_attrs) + [[]]
    traced = time.perf_counter()
    imp = Importer(gm, mesh)
    # (count of failures, exception name, message), by ops/indexing.py and
    # the region calls (region_import.py); none kept without index_checks.
    imp.checks = [] if index_checks else None
    last_checks.clear()
    inputs = []
    for i, a in enumerate(flat_args):
        inputs.append(Value(f"%arg{i}", tuple(int(s) for s in a.shape), a.dtype))
    outputs = imp.run(inputs)
    for i, o in enumerate(outputs):
        if not isinstance(o, Value):
            raise ImportError_(f"output {i} is not a tensor ({o!r})")
    if written and mesh is not None and out_placements is not None:
        # A written lifted tensor's new value is replicated, as its input.
        out_placements = list(out_placements) + [[Replicate()] * len(mesh.shape)] * written
    if index_checks and imp.checks:
        outputs = list(outputs) + [_check_code(imp)]
        last_checks.extend((exc, message) for _, exc, message in imp.checks)
        if mesh is not None:  # the same code on every rank
            out_placements = list(out_placements or [None] * (len(outputs) - 1)) + [
                [Replicate()] * len(mesh.shape)]
    out_layouts = _layouts(mesh, out_placements, [o.shape for o in outputs], "output")
    fname = name or getattr(fn, "__name__", "main")
    if not fname.isidentifier() or fname == "<lambda>":
        fname = "main"
    out_attrs = [[] for _ in outputs]
    if index_checks and imp.checks:
        out_attrs[-1].append(_checks_attr(last_checks))
    header = _header(mesh, fname, inputs, in_layouts, extra_attrs, outputs, out_layouts,
                     out_attrs)
    ret = (f"  return {', '.join(o.name for o in outputs)} : {', '.join(o.type for o in outputs)}"
           if outputs else "  return")

    def module_text(op_texts: List[str], funcs: Optional[List[str]] = None) -> str:
        body = ["\n".join("  " + x for x in t.split("\n")) for t in op_texts]
        return "\n".join(header + body + [ret, "}"] + (region_funcs if funcs is None else funcs)) \
            + "\n"

    def probe_text(op_texts: List[str]) -> str:
        # The calls are opaque ops in the probe (region_import.CallOp), so
        # that remove-dead-values keeps their operands as the printed calls
        # do; the region functions are not needed there.
        return module_text(op_texts, [])

    imported = time.perf_counter()
    # The region functions' dead ops and the step's are removed by two
    # processes at once; the trace's garbage is collected meanwhile.
    region_dce = region_import.finish_started(imp)
    region_funcs: List[str] = []
    imp.gm, imp.env, gm = None, {}, None  # imported: the collection may free them
    try:
        step_dce = start_removing_dead_ops(imp.em.ops,
                                           probe_text if region_dce else module_text)
        if getattr(_GC, "collect", False) and getattr(_GC, "later", None) is None:
            _collect_garbage()
        ops = step_dce()
    finally:
        region_funcs = region_dce() if region_dce else []  # its error first, as before
    aliases = imp.em.location_aliases()
    text = module_text([op.render() for op in ops]) + "".join(a + "\n" for a in aliases)
    done = time.perf_counter()
    last_timing.clear()
    last_timing.update({"trace": traced - start, "import": imported - traced,
                        "dead code": done - imported})
    return text


def _check_code(imp) -> Value:
    """The i64 scalar ``k + 1`` of the first check ``k`` with a failure,
    else 0.

    The counts are first placed in one ``[K]`` vector by ops linear in
    them (each count at its slot, the rest zeros, summed), so that counts
    left Partial by an index split over ranks are reduced by one
    all-reduce of the vector, not one per check; the code is then read
    off the vector."""
    t = torch.int64
    n = len(imp.checks)
    vec = None
    for k, (count, _, _) in enumerate(imp.checks):
        def slot(b, args, _out, k=k):
            j = b.v(f"arith.index_cast {b.v('linalg.index 0 : index')} : index to i64")
            here = b.compare("eq", j, b.const(k, t), t)
            return b.select(here, args[0], b.const(0, t), t)
        placed = imp.em.generic((n,), t, [(count, [])], ["parallel"], ["d0"], slot)
        vec = placed if vec is None else imp.em.elementwise(
            (n,), t, [vec, placed], lambda b, v: b.binary("add", v[0], v[1], t))
    # The code: the smallest k + 1 whose count is positive (n + 1: none),
    # then 0 for none.
    def first(b, args, out):
        j = b.v(f"arith.index_cast {b.v('linalg.index 0 : index')} : index to i64")
        k1 = b.binary("add", j, b.const(1, t), t)
        mine = b.select(b.compare("gt", args[0], b.const(0, t), t), k1, b.const(n + 1, t), t)
        return b.binary("min", mine, out, t)
    init = imp.em.full((), n + 1, t)
    least = imp.em.generic((), t, [(vec, ["d0"])], ["reduction"], [], first, init=init)
    return imp.em.elementwise((), t, [least], lambda b, v: b.select(
        b.compare("gt", v[0], b.const(n, t), t), b.const(0, t), v[0], t))


#: The checks of the last ``trace(..., index_checks=True)`` (exception
#: name, message), in the order of the codes of its last output.
last_checks: List[Tuple[str, str]] = []
#: The tensors the last ``trace(..., lift=...)`` made inputs, in order.
last_lifted: List[torch.Tensor] = []
#: Those of ``last_lifted`` the function writes in place (their positions,
#: the first ones): the program's outputs after the function's (and before
#: the index checks' code) are their new values, in this order.
last_lifted_written: List[int] = []
#: The random ops' seed of the last ``trace`` (importer/rng.py), a 0-d
#: int64 tensor, or None where the program draws no random numbers: the
#: program's last input (also last in ``last_lifted``), which a caller sets
#: anew before each run.
last_seed: Optional[torch.Tensor] = None


#: Seconds of the last ``trace``'s steps: ``trace`` (make_fx), ``import``
#: (aten to MLIR) and ``dead code`` (dead-op removal and printing).
last_timing: Dict[str, float] = {}


def _checks_attr(checks: Sequence[Tuple[str, str]]) -> str:
    """The ``shardx.index_checks`` result attribute that marks the check
    code output: per check, in code order, its exception name and message
    (the compiler copies it into the program description, and the command
    line executors fail with it: docs/Importer.md, "Index checks")."""
    entries = ", ".join(f"{{exception = {string_literal(exc)}, "
                        f"message = {string_literal(message)}}}"
                        for exc, message in checks)
    return f"shardx.index_checks = [{entries}]"


def _header(mesh, fname: str, inputs: List[Value], in_layouts, extra_attrs, outputs: List[Value],
            out_layouts, out_attrs) -> List[str]:
    """The mesh and the function's signature, up to its body."""
    lines = []
    if mesh is not None:
        lines.append(mesh.op_text())
        lines.append("")
    args_text = []
    for i, v in enumerate(inputs):
        attrs = ([f"shardx.layout = {in_layouts[i]}"] if in_layouts[i] else []) + extra_attrs[i]
        attr = f" {{{', '.join(attrs)}}}" if attrs else ""
        args_text.append(f"    {v.name}: {v.type}{attr}")
    res_text = []
    for i, o in enumerate(outputs):
        attrs = out_attrs[i] + ([f"shardx.layout = {out_layouts[i]}"] if out_layouts[i] else [])
        attr = f" {{{', '.join(attrs)}}}" if attrs else ""
        res_text.append(f"{o.type}{attr}")
    lines.append(f"func.func @{fname}(\n" + ",\n".join(args_text) + f")\n    -> ({', '.join(res_text)}) {{")
    return lines


def _arg_attrs(arg_attrs, count: int) -> List[List[str]]:
    """Per input, the ``name = "value"`` texts of its extra attributes."""
    if arg_attrs is None:
        return [[] for _ in range(count)]
    arg_attrs = list(arg_attrs)
    if len(arg_attrs) != count:
        raise ImportError_(f"{len(arg_attrs)} argument attribute entries for {count} input tensors")
    res = []
    for i, attrs in enumerate(arg_attrs):
        texts = []
        for key, value in sorted((attrs or {}).items()):
            if "." not in key or key.startswith("shardx.") or not all(
                    part.isidentifier() for part in key.split(".")):
                raise ImportError_(f"input {i}: attribute name {key!r} must be dialect-prefixed "
                                   "(like torch.state) and not in the shardx dialect")
            if not isinstance(value, str):
                raise ImportError_(f"input {i}: attribute {key} must be a string, "
                                   f"not a {type(value).__name__}")
            texts.append(f"{key} = {string_literal(value)}")
        res.append(texts)
    return res


def _layouts(mesh, placements, shapes, what) -> List[Optional[str]]:
    if placements is None:
        return [None] * len(shapes)
    placements = list(placements)
    if len(placements) != len(shapes):
        raise PlacementError(f"{len(placements)} {what} placements for {len(shapes)} {what} tensors")
    res = []
    for i, (p, shape) in enumerate(zip(placements, shapes)):
        if p is None:
            res.append(None)
            continue
        if isinstance(p, Placement):
            raise PlacementError(f"{what} {i}: give a sequence of placements (one per mesh axis), not {p!r}")
        res.append(layout_text(mesh, check_placements(mesh, p, len(shape), f"{what} {i}")))
    return res
