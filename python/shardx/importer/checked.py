"""Ops whose eager kernels check their values and raise, traced as ShardX
ops that carry the check (``ops/indexing.py``: the program's index checks,
docs/Importer.md "Index checks"): ``F.one_hot`` with a given number of
classes, as ``shardx::one_hot`` (PyTorch's own decomposition compares with
an ``arange`` and drops the check: a label out of range gave a row of
zeros where eager raises)."""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


@torch.library.custom_op("shardx::one_hot", mutates_args=())
def one_hot(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """``F.one_hot(labels, num_classes)``, eager's errors included."""
    return F.one_hot(labels, num_classes)


@one_hot.register_fake
def _(labels, num_classes):
    return labels.new_empty(tuple(labels.shape) + (num_classes,), dtype=torch.int64)


class _CheckedMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.one_hot:
            labels = args[0] if args else kwargs.get("tensor", kwargs.get("input"))
            n = args[1] if len(args) > 1 else kwargs.get("num_classes", -1)
            if isinstance(labels, torch.Tensor) and isinstance(n, int) and n > 0:
                return torch.ops.shardx.one_hot(labels, n)
        return func(*args, **kwargs)


def checked_mode(stack: contextlib.ExitStack) -> None:
    """Enters the tracing mode that records the checked ops on ``stack``."""
    stack.enter_context(_CheckedMode())
