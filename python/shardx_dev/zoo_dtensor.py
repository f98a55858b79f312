"""The zoo's sharding plans in DTensor, for comparison: the collectives of one
train step (forward, loss, backward, AdamW) under ``parallelize_module``
(``ColwiseParallel`` / ``RowwiseParallel`` on the plan's modules), counted
by ``CommDebugMode`` in one process on a fake process group, with the bytes
each rank sends by the ring algorithms' volumes that ShardX's
``--shardx-print-plan`` uses (all-reduce 2(n-1)/n of the buffer, all-gather
(n-1) times the local shard, reduce-scatter and all-to-all (n-1)/n of the
input).

``python3 -m shardx_dev.zoo --plans`` adds these figures to the zoo table.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Dict, Tuple

import torch
import torch.distributed as dist

from . import zoo

_KINDS = {"all_reduce": "all_reduce", "all_gather_into_tensor": "all_gather",
          "reduce_scatter_tensor": "reduce_scatter", "all_to_all_single": "all_to_all",
          "broadcast": "broadcast"}


# c10d ops (FSDP's own collectives): kind, index of the input, of the group.
_C10D = {"_allgather_base_": ("all_gather", 1, 2), "_reduce_scatter_base_": ("reduce_scatter", 1, 2),
         "allreduce_": ("all_reduce", 0, 1)}


def _collective(func, args, kwargs):
    """(kind, input tensor, group size) of a collective op, else None."""
    from torch.distributed.distributed_c10d import _resolve_process_group
    name = func._overloadpacket.__name__
    if name in _KINDS:
        group = _resolve_process_group(kwargs.get("group_name", args[-1]))
        return _KINDS[name], args[0], group.size()
    if name in _C10D:
        kind, i, g = _C10D[name]
        t = args[i][0] if isinstance(args[i], (list, tuple)) else args[i]
        return kind, t, dist.ProcessGroup.unbox(args[g]).size()
    return None


def dtensor_collectives(model: str, plan_name: str) -> Tuple[Dict[str, int], int]:
    """(collectives by kind, bytes per rank) of one DTensor train step of
    ``model`` under the zoo plan ``plan_name`` (Megatron TP plans only)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    from torch.testing._internal.distributed.fake_pg import FakeStore

    plan = {p.name: p for p in zoo.plans(model)}[plan_name]
    fsdp = plan_name.startswith("fsdp")
    if not plan.col or (plan.mesh.axis_names != ("tp",) and not fsdp):
        raise NotImplementedError(f"{model} {plan_name}: only the TP and FSDP x TP plans have a DTensor "
                                  "counterpart here")
    kinds: Dict[str, int] = defaultdict(int)
    total = [0.0]

    class Counter(CommDebugMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = super().__torch_dispatch__(func, types, args, kwargs)
            c = _collective(func, args, kwargs or {}) if out is not NotImplemented else None
            if c is not None:
                kind, t, n = c
                b = t.numel() * t.element_size()
                kinds[kind] += 1
                total[0] += {"all_reduce": 2.0 * (n - 1) / n * b, "all_gather": (n - 1) * b}.get(
                    kind, (n - 1) / n * b)
            return out

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=plan.mesh.size)
    try:
        mesh = init_device_mesh("cpu", plan.mesh.shape, mesh_dim_names=plan.mesh.axis_names)
        m, loss_fn, inputs, target = zoo.build(model)
        tp = {}
        for name, _ in m.named_modules():
            if any(name.endswith(c) for c in plan.col):
                tp[name] = ColwiseParallel()
            elif any(name.endswith(r) for r in plan.row):
                tp[name] = RowwiseParallel()
        parallelize_module(m, mesh["tp"], tp)
        if fsdp:
            from torch.distributed.fsdp import fully_shard
            fully_shard(m, mesh=mesh["dp"], reshard_after_forward=True)
        opt = torch.optim.AdamW(m.parameters(), lr=zoo.LR, weight_decay=0.01, foreach=False)
        with Counter():
            loss = loss_fn(m(*inputs), target)
            loss.backward()
            opt.step()
    finally:
        dist.destroy_process_group()
    return dict(kinds), int(round(total[0]))
