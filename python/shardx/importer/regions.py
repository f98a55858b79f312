"""Regional tracing: a repeated block (a transformer layer) is traced once
and called N times, as ``torch.compiler.nested_compile_region`` does under
``torch.compile``.

A *region* is a call of a marked function on tensors. Its first call with a
given signature (the function, its non-tensor arguments, and every tensor
operand's shape, dtype, strides and ``requires_grad``, grad mode and the
autocast modes in force) traces the region
alone: forward and, where an operand requires grad, the backward as a joint
graph ``(primals, tangents) -> (outputs, grads)``, through the same two
``make_fx`` passes as the whole step (autograd, then functionalization and
decomposition). The joint graph is cut in two: the forward part (nodes that
do not depend on a tangent), which returns the outputs and the values the
backward needs, and the backward part. In the step's trace each call is one
``shardx::region_call`` node (an opaque custom op whose fake kernel gives the
traced output shapes) inside an ``autograd.Function``, so the step's own
``make_fx`` records one forward call where the block runs and one backward
call where autograd differentiates it, and does not trace the block again.

The importer (``graph.Importer``) emits each traced region once, as a private
``func.func``, and each call as ``func.call``; ``shardx-inline-calls``
inlines them before propagation. The inlined program computes the same
values, op for op, as the program traced without regions. Code generation
turns the calls whose local bodies are the same back into calls of one
function (``shardx-outline-calls``, docs/Compiler.md), so it lowers a layer
once.

Marking regions:

- ``torch.compiler.nested_compile_region(fn)``: while ShardX traces, a call
  of ``fn`` is a region (in eager PyTorch it is a plain call);
- ``shardx.importer.region(fn)``: the same, for ShardX only;
- automatically: every ``torch.nn.ModuleList`` reachable from the traced
  function (its attributes, closure, bound ``self`` and the globals its
  code names, a few levels deep)
  whose children have one class and the same parameter and buffer shapes has
  each child's ``forward`` traced as a region, with the child's parameters
  and buffers as operands.

Regions are on by default; ``trace(..., regions=False)``, the context
``regions_enabled(False)`` or ``SHARDX_REGIONS=0`` trace every call inline,
as before. A marked function must compute from its tensor arguments and its
module's parameters and buffers alone: like torch.compile's regions, other
state it reads (a global, a tensor it closes over) is taken from the first
call with that signature. Module attributes other than parameters, buffers
and plain values (numbers, strings, dtypes, tuples of them) make a child's
signature its own, so such children are each traced inline; so do hooks on
the child or a submodule (and global module hooks), an instance
``forward``, and a differing ``training`` flag. A region call is pure: a
call that updates an operand in place (a BatchNorm's running statistics)
or assigns a module's parameter or buffer anew is traced inline.
"""

from __future__ import annotations

import contextlib
import hashlib
import operator
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
import torch.utils._pytree as pytree

from . import attention
from .values import ImportError_

__all__ = ["region", "regions_enabled", "Region"]


@dataclass
class Region:
    """One traced region signature: its forward graph (operands ->
    outputs + saved values) and, where it is differentiated, its backward
    graph (operands needing none of it, saved values, tangents -> grads)."""

    key: str
    name: str
    forward: torch.fx.GraphModule
    num_outputs: int
    out_spec: Any
    backward: Optional[torch.fx.GraphModule] = None
    #: Per primal operand: does the backward give it a gradient.
    grad_mask: List[bool] = field(default_factory=list)
    #: Per flat output: does it get a tangent (a float output that requires grad).
    tangent_mask: List[bool] = field(default_factory=list)
    #: Seconds spent tracing it.
    seconds: float = 0.0


#: Traced regions by key ("<name>.fwd" / "<name>.bwd" name the graphs).
REGIONS: Dict[str, Region] = {}
_local = threading.local()


def _state():
    if not hasattr(_local, "active"):
        _local.active = False      # inside a trace that takes regions
        _local.inside = False      # tracing a region's own body (no nesting)
        _local.enabled = None      # regions_enabled() override
    return _local


@contextlib.contextmanager
def regions_enabled(on: bool):
    """Within the context, ``trace`` takes regions (``True``) or traces every
    call inline (``False``), whatever ``SHARDX_REGIONS`` says."""
    st = _state()
    old, st.enabled = st.enabled, bool(on)
    try:
        yield
    finally:
        st.enabled = old


def default_enabled() -> bool:
    st = _state()
    if st.enabled is not None:
        return st.enabled
    return os.environ.get("SHARDX_REGIONS", "1") not in ("0", "false", "no", "off")


# -- the custom op ---------------------------------------------------------

# flexible_layout: without a layout tag a custom op counts as one that
# needs exact strides, and make_fx then snapshots every operand of every
# call into ``node.meta["eager_input_vals"]`` (for inductor; ShardX reads
# no such metadata).
@torch.library.custom_op("shardx::region_call", mutates_args=(),
                         tags=(torch.Tag.flexible_layout,))
def region_call(graph: str, operands: List[torch.Tensor]) -> List[torch.Tensor]:
    """Runs the traced graph ``graph`` ("<region>.fwd" or "<region>.bwd")."""
    gm = _graph(graph)
    out = torch.fx.Interpreter(gm).run(*operands)
    return [t.clone() for t in out]


@region_call.register_fake
def _(graph: str, operands: List[torch.Tensor]) -> List[torch.Tensor]:
    from torch._subclasses.fake_tensor import FakeTensor
    mode = getattr(operands[0], "fake_mode", None) if operands else None
    if isinstance(operands[0] if operands else None, FakeTensor) and mode is not None:
        return _fake_outputs(mode, graph, operands)
    specs = _out_specs(_graph(graph))
    device = operands[0].device if operands else None
    return [torch.empty_strided(shape, stride, dtype=dtype,
                                device=device if device is not None else dev)
            for shape, stride, dtype, dev in specs]


def _fake_outputs(mode, graph: str, operands: List[torch.Tensor]) -> List[torch.Tensor]:
    """The outputs of a call as fake tensors of ``mode`` made directly: a
    meta tensor each, wrapped, without a dispatch of empty_strided through
    the fake mode (about 100 us an output against 20; a trace makes
    thousands)."""
    from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily
    specs = _out_specs(_graph(graph))
    with unset_fake_temporarily():
        metas = [torch.empty_strided(shape, stride, dtype=dtype, device="meta")
                 for shape, stride, dtype, _ in specs]
    device = operands[0].device if operands else None
    return [FakeTensor(mode, m, device if device is not None else dev)
            for m, (_, _, _, dev) in zip(metas, specs)]


def _fake_mode_rule(mode, func, types, args, kwargs) -> List[torch.Tensor]:
    """``region_call`` under a FakeTensorMode (the step's trace), ahead of
    the mode's own dispatch: that hashes every operand for its cache (which
    a custom op then bypasses), checks and converts them, and calls the fake
    kernel above; at 32 layers of bench/compile_latency_bench.py's GPT, 904
    calls of up to 40 operands, about 10% of the trace."""
    bound = dict(zip(("graph", "operands"), args), **kwargs)
    return _fake_outputs(mode, bound["graph"], bound["operands"])


#: What ``_proxy_mode_rule`` uses of make_fx's module (another PyTorch
#: without one of them traces through make_fx's own dispatch).
_PROXY_TENSOR_NAMES = ("HANDLED_TYPES", "set_original_aten_op", "set_meta", "set_proxy_slot",
                       "track_tensor", "_ProxyTensor")


def _proxy_mode_rule(mode, func, types, args, kwargs) -> List[torch.Tensor]:
    """``region_call`` under make_fx's ProxyTorchDispatchMode (both passes
    of the step's trace): the node and a ``getitem`` node per output made
    directly, as ``proxy_call`` makes them (the same names, arguments,
    metadata and stack traces, in the same order), without its generic
    work per argument and output: flattening and checking up to 40
    operands, ``create_arg`` on each, and each output's ``getitem`` made
    through a Proxy's ``__getitem__`` and ``create_proxy``. At 32 layers of
    bench/compile_latency_bench.py's GPT, 904 calls with 5,000 outputs,
    about a quarter of the trace. A call this does not cover (an operand
    without a proxy or with a constant value, symbolic shapes, another
    PyTorch) goes through the mode's own dispatch."""
    bound = dict(zip(("graph", "operands"), args), **(kwargs or {}))
    graph, operands = bound.get("graph"), bound.get("operands")
    proxies = _operand_nodes(mode, func, graph, operands)
    if proxies is None:
        return mode.__torch_dispatch__(func, types, args, kwargs)
    return _record_call(mode.tracer, func, graph, proxies,
                        lambda: func(*args, **(kwargs or {})))


def record_call(mode, graph: Any, operands: Any) -> Optional[List[torch.Tensor]]:
    """A ``region_call(graph, operands)`` recorded by make_fx's ``mode``
    (its ProxyTorchDispatchMode) as ``_proxy_mode_rule`` records it, the
    outputs made as the fake mode's rule makes them (``_fake_outputs``),
    for a caller that holds the operands' own fake tensors (pass 2 of the
    step's trace, ``tracing._Pass2``): the nodes and values that the
    call's dispatch through functionalization, autograd, the proxy mode
    and the fake mode gives, without that dispatch. None where the rule
    would not cover the call (it then takes the dispatch)."""
    from torch._subclasses.fake_tensor import FakeTensor
    func = torch.ops.shardx.region_call.default
    proxies = _operand_nodes(mode, func, graph, operands)
    if proxies is None or not operands or type(operands[0]) is not FakeTensor:
        return None
    fake = operands[0].fake_mode
    if torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not fake:
        return None

    def outputs():
        # Made below the functionalization the caller runs under, as the
        # fake mode's rule makes them (not wrapped as functional tensors).
        from .tracing import _below_the_modes
        with _below_the_modes():
            return _fake_outputs(fake, graph, operands)
    return _record_call(mode.tracer, func, graph, proxies, outputs)


def _operand_nodes(mode, func, graph, operands) -> Optional[List[torch.fx.Node]]:
    """The node of each operand of a region call under make_fx's proxy
    ``mode``, or None where ``_proxy_mode_rule`` leaves the call to the
    mode's dispatch."""
    from torch.fx.experimental import proxy_tensor as pt
    tracer = getattr(mode, "tracer", None)
    tracker = getattr(tracer, "tensor_tracker", None)
    fake = torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)
    if tracker is None or not isinstance(graph, str) or not isinstance(operands, (list, tuple)) \
            or not all(hasattr(pt, n) for n in _PROXY_TENSOR_NAMES) \
            or getattr(mode, "pre_dispatch", True) \
            or getattr(mode, "emulate_precision_casts", False) \
            or (fake is not None and getattr(fake, "shape_env", None) is not None) \
            or func in getattr(mode, "decomposition_table", {func: None}):
        return None
    proxies = []
    for t in operands:
        slot = tracker.get(t) if type(t) in pt.HANDLED_TYPES else None
        if slot is None or slot.constant is not None:
            return None
        proxies.append(slot.proxy.node)
    return proxies


def _record_call(tracer, func, graph: str, proxies: List[torch.fx.Node],
                 outputs: Callable[[], List[torch.Tensor]]) -> List[torch.Tensor]:
    """The ``region_call`` node over ``proxies``, its outputs (``outputs()``)
    and a ``getitem`` node per output, as ``proxy_call`` makes them."""
    from torch.fx.experimental import proxy_tensor as pt
    with pt.set_original_aten_op(func):
        node = tracer.create_node("call_function", func, (graph, proxies), {},
                                  name=tracer.graph._target_to_str(func.overloadpacket.__name__))
        out = outputs()
        pt.set_meta(tracer.proxy(node), out)
        # Each getitem's stack trace is the call's: the frames FX keeps
        # (the user's, outside this rule) are the same frames at the same
        # lines; so it is copied instead of walking the stack again.
        record = tracer.record_stack_traces
        try:
            tracer.record_stack_traces = False
            items = _getitem_nodes(tracer, node, len(out))
        finally:
            tracer.record_stack_traces = record
        for item in items:
            if record and node.stack_trace and not item.stack_trace:
                item.stack_trace = node.stack_trace
        for item, t in zip(items, out):
            item = tracer.proxy(item)
            if all(type(s) is int for s in t.shape):
                # What track_tensor does for a tensor of static shape.
                pt.set_proxy_slot(t, tracer, pt._ProxyTensor(item, None))
            else:
                pt.track_tensor(t, item, constant=None, tracer=tracer)
            pt.set_meta(item, t)
    return out


def _getitem_nodes(tracer, node: torch.fx.Node, n: int) -> List[torch.fx.Node]:
    """``tracer.create_node("call_function", operator.getitem, (node, i),
    {})`` for each ``i < n``: the first made by the tracer, the others by
    the graph with the first's metadata (each field shallow-copied, as the
    tracer copies it from the current node metadata) and the tracer's
    scope entry. Nothing the tracer reads changes between the ``n`` calls
    (the current metadata, autograd's sequence number), so each node gets
    what the tracer would give it, name included (``getitem``, numbered
    by the graph); the tracer's own work per node (the metadata fields
    looked up and copied one by one, the sequence number, the checks for
    stride-sensitive and mutating targets) was 3% of the 32-layer GPT's
    trace (bench/compile_latency_bench.py), for 5,000 getitems. Where the
    tracer is not make_fx's own, mutating operations are checked, or a
    view is being replayed (its node's metadata would be shared, not
    copied), every node is made by the tracer."""
    import copy
    from torch.fx import proxy as fx_proxy
    from torch.fx import traceback as fx_traceback
    from torch.fx.experimental import proxy_tensor as pt
    make = tracer.create_node
    items = [make("call_function", operator.getitem, (node, i), {}) for i in range(min(n, 1))]
    replay = getattr(fx_traceback, "get_current_replay_node", None)
    fields = getattr(fx_proxy, "_COPY_META_FIELDS", None)
    scope = getattr(tracer, "scope", None)
    names = getattr(tracer, "node_name_to_scope", None)
    if n <= 1 or type(tracer).create_node is not pt.PythonKeyTracer.create_node \
            or getattr(tracer, "check_mutable_operations", True) or replay is None \
            or replay() is not None or fields is None or scope is None \
            or not isinstance(names, dict) or not hasattr(tracer.graph, "_target_to_str"):
        return items + [make("call_function", operator.getitem, (node, i), {})
                        for i in range(1, n)]
    first = items[0]
    meta = [(k, v, k in fields) for k, v in first.meta.items()]
    where = (scope.module_path, scope.module_type)
    graph = tracer.graph
    create, name = graph.create_node, graph._target_to_str(operator.getitem)
    for i in range(1, n):
        item = create("call_function", operator.getitem, (node, i), {}, name)
        names[item.name] = where
        m = item.meta
        for k, v, copied in meta:
            m[k] = copy.copy(v) if copied else v
        items.append(item)
    return items

if hasattr(region_call, "register_torch_dispatch"):
    from torch._subclasses.fake_tensor import FakeTensorMode as _FakeTensorMode
    region_call.register_torch_dispatch(_FakeTensorMode, _fake_mode_rule)
    try:
        from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode as _ProxyMode
    except ImportError:  # another PyTorch: proxy_call makes the nodes
        _ProxyMode = None
    if _ProxyMode is not None and hasattr(_ProxyMode, "__torch_dispatch__"):
        region_call.register_torch_dispatch(_ProxyMode, _proxy_mode_rule)


def _out_specs(gm: torch.fx.GraphModule) -> List[Tuple[tuple, tuple, torch.dtype, Any]]:
    """(shape, strides, dtype, device) of each output of a region graph,
    kept on the graph module after the first call."""
    specs = gm.__dict__.get("_shardx_out_specs")
    if specs is None:
        specs = []
        for node in gm.graph.find_nodes(op="output"):
            for a in node.args[0]:
                v = a.meta["val"]
                specs.append((tuple(v.shape), tuple(v.stride()), v.dtype, v.device))
        gm.__dict__["_shardx_out_specs"] = specs
    return specs


def constant_ids() -> set:
    """The ids of the tensor constants of the region graphs traced so far
    (``REGIONS``): tensors a region reads besides its operands (one it
    closes over, a global). ``shardx.compile`` does not lift them to inputs
    of the step (``tracing._trace_graph``'s ``lift``): each region graph
    keeps them as constants, so the step reads them as constants too and
    its guard is on their values (their version counters), not only their
    identity and metadata; a change in place then compiles again."""
    ids = set()
    for r in REGIONS.values():
        for gm in (r.forward, r.backward):
            if gm is None:
                continue
            for node in gm.graph.find_nodes(op="get_attr"):
                value = getattr(gm, node.target, None)
                if isinstance(value, torch.Tensor):
                    ids.add(id(value))
    return ids


def _graph(graph: str) -> torch.fx.GraphModule:
    key, part = graph.rsplit(".", 1)
    r = REGIONS.get(key)
    gm = None if r is None else (r.forward if part == "fwd" else r.backward)
    if gm is None:
        raise ImportError_(f"no traced region graph {graph!r}")
    return gm


# -- marking ---------------------------------------------------------------

def region(fn: Callable) -> Callable:
    """Marks ``fn`` as a region for ShardX's trace (a plain call otherwise)."""
    def wrapper(*args, **kwargs):
        return call_region(fn, getattr(fn, "__qualname__", repr(fn)), args, kwargs, {})
    wrapper.__wrapped__ = fn
    wrapper.__name__ = getattr(fn, "__name__", "region")
    wrapper.__shardx_region__ = True
    return wrapper


def _simple(v) -> bool:
    if v is None or isinstance(v, (bool, int, float, str, torch.dtype, torch.device, torch.Size)):
        return True
    if isinstance(v, (tuple, list)):
        return all(_simple(x) for x in v)
    return False


def _autocast_state() -> str:
    """The autocast modes a call runs under: part of a region's signature,
    since the same code traced under autocast computes in other dtypes."""
    from .tracing import autocast_devices
    return "autocast=" + ",".join(f"{d}:{torch.get_autocast_dtype(d)}"
                                  for d in autocast_devices())


def _tensor_sig(t: torch.Tensor) -> str:
    return f"T{tuple(t.shape)}:{tuple(t.stride())}:{t.dtype}:{int(t.requires_grad)}"


def call_region(fn: Callable, ident: str, args, kwargs, params: Dict[str, torch.Tensor],
                code: Any = None):
    """Calls ``fn(*args, **kwargs)`` (``fn`` reading ``params`` by name, see
    ``_module_body``) as a region where a trace takes regions; a plain call
    elsewhere, and where the call has a non-tensor argument that is not a
    plain value. ``code`` (default ``fn``) is what the region cache
    (``region_cache``) keys as the region's code."""
    st = _state()
    if not st.active or st.inside:
        return fn(*args, **kwargs)
    if torch._C._autograd._top_saved_tensors_default_hooks(False) is not None:
        # Under saved-tensor hooks (torch.utils.checkpoint's, whose backward
        # recomputes the call): inline, so the recomputation traces the same
        # ops and saves the same tensors as the forward.
        return fn(*args, **kwargs)
    flat, spec = pytree.tree_flatten((args, kwargs))
    operands: List[torch.Tensor] = []
    sig: List[str] = []
    for a in flat:
        if isinstance(a, torch.Tensor):
            operands.append(a)
            sig.append(_tensor_sig(a))
        elif _simple(a):
            sig.append(repr(a))
        else:
            return fn(*args, **kwargs)
    names = sorted(params)
    operands += [params[n] for n in names]
    sig += [f"{n}={_tensor_sig(params[n])}" for n in names]
    if len({id(t) for t in operands}) != len(operands):
        return fn(*args, **kwargs)  # one tensor twice: aliasing the trace would not see
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in operands)
    key_text = (f"{ident}|{spec}|{';'.join(sig)}|grad={grad}|{_autocast_state()}|"
                f"{attention.mode_key()}")
    key = "r" + hashlib.sha256(key_text.encode()).hexdigest()[:16]
    n_args = len(operands) - len(names)

    def body(*xs):
        a_flat = list(xs[:n_args])
        it = iter(a_flat)
        full = [next(it) if isinstance(a, torch.Tensor) else a for a in flat]
        a2, k2 = pytree.tree_unflatten(full, spec)
        return fn(*a2, **k2, **({"__params": dict(zip(names, xs[n_args:]))} if names else {}))

    r = REGIONS.get(key)
    if r is None:
        r = _cached_or_traced(key, key_text, ident, fn if code is None else code, body,
                              operands, grad)
        if r is None:
            return fn(*args, **kwargs)
        REGIONS[key] = r
    st.calls = getattr(st, "calls", 0) + 1
    if grad:
        outs = _RegionFunction.apply(r, *operands)
    else:
        outs = region_call(f"{key}.fwd", list(operands))[:r.num_outputs]
    return pytree.tree_unflatten(list(outs), r.out_spec)


class _RegionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, r: Region, *operands):
        res = region_call(f"{r.key}.fwd", list(operands))
        outs, saved = res[:r.num_outputs], res[r.num_outputs:]
        ctx.region = r
        ctx.save_for_backward(*operands, *saved)
        ctx.mark_non_differentiable(*[o for o, m in zip(outs, r.tangent_mask) if not m])
        return tuple(outs)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads):
        r = ctx.region
        tangents = [g.contiguous() for g, m in zip(grads, r.tangent_mask) if m]
        res = region_call(f"{r.key}.bwd", list(ctx.saved_tensors) + tangents)
        it = iter(res)
        return (None, *[next(it) if m else None for m in r.grad_mask])


# -- tracing a region ------------------------------------------------------

def _outer_phase() -> Optional[str]:
    """The train-step phase (``train.phase``) the trace is in, if any."""
    from torch.fx import traceback as fx_traceback
    return ((getattr(fx_traceback, "current_meta", None) or {}).get("custom") or {}) \
        .get("shardx.phase")


def _region_name(ident: str, key: str) -> str:
    name = "shardx_region_" + ident.replace(".", "_").replace("<", "").replace(">", "") \
        .split("|")[0][-40:] + "_" + key[1:9]
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def _cached_or_traced(key: str, key_text: str, ident: str, code: Any, body: Callable,
                      operands: Sequence[torch.Tensor], grad: bool) -> Optional[Region]:
    """The region of ``key`` from the region cache, or traced (and kept
    there); None where the call is no region (traced inline)."""
    from . import region_cache
    cache_key = None
    if region_cache.enabled():
        try:
            cache_key = region_cache.key(code, key_text, operands, f"phase={_outer_phase()}")
        except region_cache.Uncacheable as e:
            region_cache.stats.uncacheable += 1
            import logging
            logging.getLogger("shardx.importer").info(
                "region cache: %s not cached (%s)", ident.split("|")[0], e)
        if cache_key is not None:
            r = region_cache.lookup(cache_key, key, _region_name(ident, key))
            if r is not None:
                return r
    region_cache.stats.traced += 1
    try:
        r = _trace_region(key, ident, body, operands, grad)
    except _NotARegion:
        return None
    if cache_key is not None:
        region_cache.store(cache_key, r)
    return r


def _trace_region(key: str, ident: str, body: Callable, operands: Sequence[torch.Tensor],
                  grad: bool) -> Region:
    import time
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
    from .tracing import _trace_passes, autocast_off
    st = _state()
    start = time.perf_counter()
    with disable_proxy_modes_tracing():
        # Fresh tensors of the operands' metadata (fake where the step's
        # trace is fake: the fake mode stays on the mode stack).
        examples = [torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype,
                                        device=t.device) for t in operands]
        # The forward alone: the outputs' structure, and which of them
        # autograd sees depending on a differentiable operand.
        needs = [grad and t.requires_grad and (t.is_floating_point() or t.is_complex())
                 for t in operands]
        for e, n in zip(examples, needs):
            e.requires_grad_(n)
        versions = [e._version for e in examples]
        st.inside = True
        try:
            with torch.set_grad_enabled(grad):
                probe = body(*examples)
        except _NotARegion:
            raise
        except Exception:  # noqa: BLE001 -- the inline call raises it again if eager would
            # An in-place op on an operand that is a leaf here (the
            # step's trace passes it a tensor with a history) and the
            # like: the inline call traces what eager does.
            raise _NotARegion() from None
        finally:
            st.inside = False
    # An in-place update of an operand (a BatchNorm's running statistics, an
    # argument's ``add_``) bumps its version counter. The region call is
    # pure: it would drop the update, so the call is traced inline.
    if any(e._version != v for e, v in zip(examples, versions)):
        raise _NotARegion()
    out_flat, out_spec = pytree.tree_flatten(probe)
    if not out_flat or not all(isinstance(o, torch.Tensor) for o in out_flat):
        raise _NotARegion()
    n_out = len(out_flat)
    tangent_mask = [grad and o.requires_grad for o in out_flat]
    grads_present: List[bool] = []
    # Inside a train step's phases (``train.phase``): the region's backward
    # ops are the backward phase, with their forward ops' source lines, as
    # where the step's own autograd traces them.
    outer_phase = _outer_phase()

    def joint(*xs):
        prim = list(xs[:len(operands)])
        tans = list(xs[len(operands):])
        if grad:
            prim = [p.detach().requires_grad_(True) if n else p.detach()
                    for p, n in zip(prim, needs)]
        outs = pytree.tree_leaves(body(*prim))
        if not grad:
            return outs
        diff = [o for o, m in zip(outs, tangent_mask) if m]
        wrt = [p for p, n in zip(prim, needs) if n]
        with contextlib.ExitStack() as stack:
            # The backward outside the caller's autocast, as eager's
            # loss.backward() runs it: its ops take the forward's dtypes.
            autocast_off(stack)
            if outer_phase is not None and diff:
                from ..train import link_backward_to_forward, phase
                stack.enter_context(phase("backward"))
                link_backward_to_forward(*diff)
            gs = torch.autograd.grad(diff, wrt, tans, allow_unused=True) if diff and wrt else \
                [None] * len(wrt)
        grads_present.clear()
        grads_present.extend(g is not None for g in gs)
        return [o.detach() for o in outs] + [g for g in gs if g is not None]

    with disable_proxy_modes_tracing():
        # The backward's tangents are contiguous (``_RegionFunction.backward``).
        tangents = [torch.empty(tuple(o.shape), dtype=o.dtype, device=o.device)
                    for o, m in zip(out_flat, tangent_mask) if m]
        args = [torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype,
                                    device=t.device) for t in operands] + tangents
        st.inside = True
        try:
            gm = _trace_passes(joint, args, pytree.tree_flatten(tuple(args))[1], fake=False)
        finally:
            st.inside = False
    if _mutates_placeholder(gm):
        raise _NotARegion()  # an update the probe's version counters did not see
    name = _region_name(ident, key)
    if not grad:
        fwd = gm
        r = Region(key, name, fwd, n_out, out_spec, tangent_mask=[False] * n_out)
    else:
        grad_mask, it = [], iter(grads_present)
        for n in needs:
            grad_mask.append(next(it) if n else False)
        fwd, bwd = _split_joint(gm, len(operands), n_out)
        r = Region(key, name, fwd, n_out, out_spec, bwd, grad_mask, tangent_mask)
    r.seconds = time.perf_counter() - start
    return r


class _NotARegion(Exception):
    pass


def _mutates_placeholder(gm: torch.fx.GraphModule) -> bool:
    """Does the functionalized graph write an input (the ``copy_`` back into
    a placeholder that functionalization leaves for an input mutation, or
    any other in-place op on one)."""
    for n in gm.graph.nodes:
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
            continue
        schema = n.target._schema
        for arg, a in zip(schema.arguments, n.args):
            if arg.alias_info is not None and arg.alias_info.is_write and \
                    isinstance(a, torch.fx.Node) and a.op == "placeholder":
                return True
    return False


_WIDENINGS = {torch.ops.aten._to_copy.default, torch.ops.prims.convert_element_type.default}
_VIEWS = {torch.ops.aten.transpose.int, torch.ops.aten.permute.default, torch.ops.aten.t.default,
          torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default,
          torch.ops.aten.expand.default, torch.ops.aten.clone.default,
          torch.ops.aten.alias.default}


def _widening_chain(n: torch.fx.Node):
    """``n`` as views of a widening of a narrower float value: the nodes from
    the widening up to ``n``, or None."""
    def val(m):
        return m.meta.get("val") if isinstance(m, torch.fx.Node) else None

    chain = []
    while n.op == "call_function" and n.target in _VIEWS and n.args and \
            isinstance(n.args[0], torch.fx.Node):
        chain.append(n)
        n = n.args[0]
    if n.op != "call_function" or n.target not in _WIDENINGS or not n.args or \
            set(n.kwargs) - {"dtype"}:
        return None
    src, out = val(n.args[0]), val(n)
    if not isinstance(src, torch.Tensor) or not isinstance(out, torch.Tensor) or \
            not (src.dtype.is_floating_point and out.dtype.is_floating_point) or \
            out.element_size() <= src.element_size():
        return None
    chain.append(n)
    return chain[::-1]


def _recompute_widenings(gm: torch.fx.GraphModule, nodes, backward) -> None:
    """A forward value the backward reads that only widens another forward
    value (``x.float()`` of a bf16 ``x``, or a view of that) is computed again
    in the backward from the narrow value, which the backward then reads
    instead: half the bytes kept for it, and the backward's products read
    the narrow values as the forward's do (a GPU GEMM of bf16 operands,
    docs/Compiler.md). As AOTAutograd's partitioner recomputes such casts."""
    order = {n: i for i, n in enumerate(nodes)}
    for n in nodes:
        if n in backward or n.op != "call_function":
            continue
        users = [u for u in n.users if u in backward]
        chain = _widening_chain(n) if users else None
        if chain is None:
            continue
        env = {}
        with gm.graph.inserting_before(min(users, key=order.__getitem__)):
            for c in chain:
                env[c] = gm.graph.node_copy(c, lambda a: env.get(a, a))
                backward.add(env[c])
        for u in users:
            u.replace_input_with(n, env[n])


def _split_joint(gm: torch.fx.GraphModule, n_primals: int, n_out: int):
    """The forward and backward graphs of a joint graph
    ``(primals, tangents) -> (outputs, grads)``: the backward holds every node
    that depends on a tangent; the forward returns the outputs and then the
    forward values the backward reads; the backward takes the primals, those
    values and the tangents, and returns the grads."""
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    primals, tangents = placeholders[:n_primals], placeholders[n_primals:]
    output = next(n for n in nodes if n.op == "output")
    results = list(output.args[0])
    outs, grads = results[:n_out], results[n_out:]
    backward = set(tangents)
    for n in nodes:
        if n.op in ("call_function", "call_method") and any(
                a in backward for a in n.all_input_nodes):
            backward.add(n)
    for o in outs:
        if isinstance(o, torch.fx.Node) and o in backward:
            raise _NotARegion()  # an output that depends on a tangent: not a joint graph
    _recompute_widenings(gm, nodes, backward)
    nodes = list(gm.graph.nodes)
    # Forward values the backward reads (placeholders are passed as they are;
    # constants are copied).
    saved: List[torch.fx.Node] = []
    seen = set()
    for n in nodes:
        if n in backward and n.op != "placeholder":
            for a in n.all_input_nodes:
                if a not in backward and a.op not in ("placeholder", "get_attr") and a not in seen:
                    seen.add(a)
                    saved.append(a)
    for g in grads:
        if isinstance(g, torch.fx.Node) and g not in backward and g.op != "placeholder" \
                and g.op != "get_attr" and g not in seen:
            seen.add(g)
            saved.append(g)

    def build(keep, inputs, results):
        g = torch.fx.Graph()
        env: Dict[torch.fx.Node, torch.fx.Node] = {}
        for p in inputs:
            q = g.placeholder(p.name)
            q.meta = dict(p.meta)
            env[p] = q
        for n in nodes:
            if n in env or n.op in ("placeholder", "output") or n not in keep:
                continue
            env[n] = g.node_copy(n, lambda a: env[a])
        g.output(tuple(env[r] if isinstance(r, torch.fx.Node) else r for r in results))
        return torch.fx.GraphModule(gm, g)

    fwd_keep = {n for n in nodes if n not in backward}
    fwd = build(fwd_keep, primals, outs + saved)
    bwd_keep = backward | {n for n in nodes if n.op == "get_attr"}
    bwd = build(bwd_keep, primals + saved + tangents, grads)
    fwd.graph.eliminate_dead_code()
    bwd.graph.eliminate_dead_code()
    return fwd, bwd


# -- automatic regions over nn.ModuleList ------------------------------------

#: A module's hook dicts that act when it is called (forward, or the
#: backward of what it computes). State-dict hooks do not act on a call.
_CALL_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs",
               "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called",
               "_backward_hooks", "_backward_pre_hooks")


def _global_hooks() -> bool:
    """Is a global module hook registered (``register_module_forward_hook``
    and the like): it acts on every module call, each child's its own."""
    mod = torch.nn.modules.module
    return any(getattr(mod, "_global" + k, None) for k in _CALL_HOOKS)


def _module_fingerprint(m: torch.nn.Module) -> Optional[str]:
    """The parts of a module (and its submodules) that shape its trace apart
    from parameter and buffer values: class, plain attributes, ``training``,
    parameter and buffer names, shapes and dtypes; None (the child is traced
    inline) where an attribute is not a plain value, where the module or a
    submodule has a forward or backward hook or its own ``forward`` (an
    instance attribute), and where a global module hook is registered: the
    region traced from one child would not run another's."""
    if _global_hooks():
        return None
    parts = []
    for name, sub in m.named_modules():
        if any(getattr(sub, k, None) for k in _CALL_HOOKS):
            return None
        own = vars(sub).get("forward")
        if own is not None and not getattr(own, "__shardx_region_forward__", False):
            return None
        parts.append(f"{name}:{type(sub).__module__}.{type(sub).__qualname__}")
        for k, v in sorted(vars(sub).items()):
            if k in ("_parameters", "_buffers", "_modules") or k.startswith("_forward") \
                    or k.startswith("_backward") or k.startswith("_state_dict") \
                    or k.startswith("_load_state_dict") or k == "forward":
                continue
            if k in ("training", "_is_full_backward_hook", "_non_persistent_buffers_set"):
                parts.append(f"{k}={v!r}" if not isinstance(v, set) else f"{k}={sorted(v)!r}")
                continue
            if isinstance(v, dict) and not v:
                continue
            if not _simple(v):
                return None
            parts.append(f"{k}={v!r}")
    for n, t in list(m.named_parameters()) + list(m.named_buffers()):
        parts.append(f"{n}:{tuple(t.shape)}:{t.dtype}")
    return "\n".join(parts)


def _find_modules(obj, depth=3, seen=None) -> List[torch.nn.Module]:
    seen = set() if seen is None else seen
    if id(obj) in seen or depth < 0:
        return []
    seen.add(id(obj))
    if isinstance(obj, torch.nn.Module):
        return [obj]
    found = []
    children = []
    for attr in ("__self__", "__wrapped__", "__func__"):
        if hasattr(obj, attr):
            children.append(getattr(obj, attr))
    for cell in getattr(obj, "__closure__", None) or ():
        try:
            children.append(cell.cell_contents)
        except ValueError:
            pass
    code, globs = getattr(obj, "__code__", None), getattr(obj, "__globals__", None)
    if code is not None and isinstance(globs, dict):
        # The globals the function's own code names (a model at module level).
        children.extend(globs[n] for n in code.co_names if n in globs)
    d = getattr(obj, "__dict__", None)
    if isinstance(d, dict) and not isinstance(obj, type):
        children.extend(d.values())
    if isinstance(obj, (list, tuple)):
        children.extend(obj)
    for c in children:
        if isinstance(c, (int, float, str, bytes, torch.Tensor, type)) or c is None or \
                type(c).__name__ == "module":
            continue
        found.extend(_find_modules(c, depth - 1, seen))
    return found


@contextlib.contextmanager
def module_regions(fn):
    """Within the context, each child of a ``ModuleList`` reachable from
    ``fn`` whose siblings share its fingerprint runs its ``forward`` as a
    region."""
    patched = []
    roots = _find_modules(fn)
    try:
        seen = set()
        for root in roots:
            for mod in root.modules():
                if not isinstance(mod, torch.nn.ModuleList) or id(mod) in seen or len(mod) < 2:
                    continue
                seen.add(id(mod))
                prints = [_module_fingerprint(c) for c in mod]
                if prints[0] is None or any(p != prints[0] for p in prints):
                    continue
                ident = f"{type(mod[0]).__module__}.{type(mod[0]).__qualname__}.forward"
                for child in mod:
                    if "forward" in vars(child):
                        continue
                    child.forward = _module_forward(child, ident + "|" + prints[0])
                    child.forward.__shardx_region_forward__ = True
                    patched.append(child)
        yield
    finally:
        for child in patched:
            vars(child).pop("forward", None)


def _module_forward(child: torch.nn.Module, ident: str):
    original = type(child).forward

    def body(*args, __params=None, **kwargs):
        if __params is None:
            return original(child, *args, **kwargs)
        from torch.nn.utils.stateless import _reparametrize_module
        given = dict(__params)
        with _reparametrize_module(child, __params):
            out = original(child, *args, **kwargs)
        # The context writes a parameter or buffer the forward assigned anew
        # (``self.buf = ...``) back into ``__params``: state the region call
        # would drop, so the call is traced inline.
        if any(__params[k] is not t for k, t in given.items()):
            raise _NotARegion()
        return out

    def forward(*args, **kwargs):
        params = dict(child.named_parameters(remove_duplicate=False))
        params.update(dict(child.named_buffers(remove_duplicate=False)))
        return call_region(body, ident, args, kwargs, params, code=child)
    return forward


@contextlib.contextmanager
def tracing_regions(fn, on: bool):
    """The step's trace: regions on (``nested_compile_region``, ``region``,
    ModuleLists) or off."""
    st = _state()
    if not on:
        yield
        return
    import unittest.mock
    import importlib
    isg = importlib.import_module("torch._higher_order_ops.invoke_subgraph")

    def placeholder(func, *args, **kwargs):
        return call_region(func, getattr(func, "__module__", "") + "." +
                           getattr(func, "__qualname__", repr(func)), args, kwargs, {})
    old = st.active
    st.active = True
    st.calls = 0
    try:
        with unittest.mock.patch.object(isg, "invoke_subgraph_placeholder", placeholder), \
                module_regions(fn):
            yield
    finally:
        st.active = old
