"""Training steps as pure functions that ``shardx.trace`` can import.

``TrainStep(module, loss_fn, optimizer, ...)`` makes
``step(params, state, inputs, target) -> (loss, new_params, new_state)``:
forward under ``torch.func.functional_call``'s reparametrization, backward with
``torch.autograd.grad`` and the optimizer update with PyTorch's own functional
optimizers (``torch.optim.sgd.sgd``, ``adam.adam``, ``adamw.adamw``) in their
for-loop or foreach form, so the traced program is exactly what PyTorch runs.
"""

from __future__ import annotations

import contextlib
import unittest.mock
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from . import pytree

OPTIMIZERS = ("sgd", "adam", "adamw")


PHASES = ("forward", "backward", "optimizer")


@contextlib.contextmanager
def phase(name: str):
    """Marks the aten ops traced inside as one phase of a train step
    (``node.meta["custom"]["shardx.phase"]``); the importer writes it into
    each op's location, where the sharding report reads it."""
    from torch.fx import traceback as fx_traceback
    if name not in PHASES:
        raise ValueError(f"phase must be one of {PHASES}, got {name!r}")
    with fx_traceback.annotate({"shardx.phase": name}):
        yield


def link_backward_to_forward(*outputs: torch.Tensor) -> None:
    """Makes the backward ops traced from ``outputs``' autograd graph carry the
    ``seq_nr`` of the forward op they differentiate, as AOTAutograd does, so
    the importer can give them that op's source line. Each autograd node gets
    a pre-hook that enters its sequence number and a hook that leaves it."""
    from torch.fx import traceback as fx_traceback
    todo = [t.grad_fn for t in outputs if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    seen = set()
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        if node.name().endswith("AccumulateGrad"):
            continue  # a leaf's gradient sink: not run by autograd.grad
        seq = node._sequence_nr()
        node.register_prehook(lambda grad_outputs, seq=seq: fx_traceback.set_grad_fn_seq_nr(seq))
        node.register_hook(lambda grad_inputs, grad_outputs: fx_traceback.reset_grad_fn_seq_nr())
        todo.extend(fn for fn, _ in node.next_functions if fn is not None)


class TrainStep:
    def __init__(self, module: torch.nn.Module, loss_fn: Callable, optimizer: str = "sgd",
                 foreach: bool = False, lr: float = 0.1, momentum: float = 0.0,
                 weight_decay: float = 0.0, betas=(0.9, 0.999), eps: float = 1e-8):
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
        self.module = module
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.foreach = foreach
        self.hp = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, betas=betas, eps=eps)
        self.param_names = [n for n, _ in module.named_parameters()]
        # The parameters the step trains: those requiring grad (a frozen
        # backbone's do not), as torch.optim updates only parameters with
        # a gradient.
        self.trainable = [p.requires_grad for p in module.parameters()]
        # Normalization layers' running statistics (batch norm in training
        # mode updates them): state in and out of the step, as in eager.
        self.buffer_names = [f"{m}.{b}" if m else b for m, mod in module.named_modules()
                             if isinstance(mod, torch.nn.modules.batchnorm._NormBase)
                             for b, t in mod.named_buffers(recurse=False) if t is not None]
        self.__name__ = f"train_step_{optimizer}{'_foreach' if foreach else ''}"

    def initial_state(self) -> Dict[str, List[torch.Tensor]]:
        """The optimizer's state per parameter, then (under ``buffers``, if
        the module has normalization layers with running statistics) those
        statistics in ``buffer_names`` order."""
        params = [p.detach() for p in self.module.parameters()]
        if self.optimizer == "sgd":
            state = {"momentum_buffer": [torch.zeros_like(p) for p in params]} if self.hp["momentum"] else {}
        else:
            state = {"exp_avg": [torch.zeros_like(p) for p in params],
                     "exp_avg_sq": [torch.zeros_like(p) for p in params],
                     "step": [torch.zeros((), dtype=torch.float32) for _ in params]}
        if self.buffer_names:
            own = dict(self.module.named_buffers())
            state["buffers"] = [own[n].detach().clone() for n in self.buffer_names]
        return state

    def example_args(self, inputs: Sequence[torch.Tensor], target: torch.Tensor):
        params = [p.detach().clone() for p in self.module.parameters()]
        return (params, self.initial_state(), tuple(inputs), target)

    def __call__(self, params, state, inputs, target):
        params = [(p if p.requires_grad else p.detach().requires_grad_(True)) if train
                  else p.detach() for p, train in zip(params, self.trainable)]
        # The forward updates the running statistics in place: on copies.
        buffers = [b.clone() for b in state.get("buffers", [])]
        # torch.func.functional_call's reparametrization, kept through the
        # backward pass: torch.utils.checkpoint recomputes the forward there,
        # which must read these parameters, not the module's own.
        from torch.nn.utils.stateless import _reparametrize_module
        with _reparametrize_module(self.module, {**dict(zip(self.param_names, params)),
                                                 **dict(zip(self.buffer_names, buffers))},
                                   tie_weights=True, strict=False):
            with phase("forward"):
                out = self.module(*tuple(inputs))
                if isinstance(out, tuple):
                    out = out[0]
                loss = self.loss_fn(out, target)
            with phase("backward"):
                link_backward_to_forward(loss)
                wrt = [p for p, train in zip(params, self.trainable) if train]
                found = iter(torch.autograd.grad(loss, wrt, allow_unused=True) if wrt else [])
                # None for a frozen parameter and for one the loss does not
                # read: torch.optim skips both (no step, decay or state).
                grads = [next(found) if train else None for train in self.trainable]
        with phase("optimizer"):
            return self._update(params, grads, state, loss, buffers)

    def _update(self, params, grads, state, loss, buffers=()):
        new_params = [p.detach().clone() for p in params]
        state = {k: [t.clone() for t in v] for k, v in state.items()}
        if buffers:
            state["buffers"] = [b.detach() for b in buffers]
        active = [i for i, g in enumerate(grads) if g is not None]
        if len(active) < len(params):
            # The optimizer steps the parameters with a gradient only; the
            # others and their state are returned as they were.
            sub = {k: [v[i] for i in active] for k, v in state.items() if k != "buffers"}
            _, stepped, sub = self._step([new_params[i] for i in active],
                                         [grads[i] for i in active], sub, loss)
            for j, i in enumerate(active):
                new_params[i] = stepped[j]
                for k in sub:
                    state[k][i] = sub[k][j]
            return loss.detach(), new_params, state
        return self._step(new_params, grads, state, loss)

    def _step(self, new_params, grads, state, loss):
        params = new_params
        if not params:
            return loss.detach(), new_params, state
        hp = self.hp
        common = dict(foreach=self.foreach, maximize=False, grad_scale=None, found_inf=None)
        if self.optimizer == "sgd":
            from torch.optim.sgd import sgd
            bufs = state.get("momentum_buffer", [None] * len(params))
            sgd(new_params, grads, bufs, lr=hp["lr"], momentum=hp["momentum"], dampening=0.0,
                weight_decay=hp["weight_decay"], nesterov=False, **common)
            if hp["momentum"]:
                state["momentum_buffer"] = bufs
        else:
            mod = __import__(f"torch.optim.{self.optimizer}", fromlist=[self.optimizer])
            getattr(mod, self.optimizer)(
                new_params, grads, state["exp_avg"], state["exp_avg_sq"], [], state["step"],
                capturable=True, differentiable=False, fused=None, has_complex=False, amsgrad=False,
                beta1=hp["betas"][0], beta2=hp["betas"][1], lr=hp["lr"],
                weight_decay=hp["weight_decay"], eps=hp["eps"], **common)
        return loss.detach(), new_params, state

    def arg_attrs(self, example_args) -> List[Optional[Dict[str, str]]]:
        """Per flattened argument of ``trace``, its extra attributes: each
        optimizer state tensor is ``torch.state = "<key>"`` with PyTorch's
        state name (``exp_avg``, ``exp_avg_sq``, ``step``, ``momentum_buffer``;
        running statistics by their buffer's name: ``running_mean``,
        ``running_var``, ``num_batches_tracked``), so that tools can tell a
        second moment (never negative) or a step counter from other tensors;
        the others have none."""
        leaves = pytree.leaves_with_paths(tuple(example_args))
        return [None if path[0] != 1 else {"torch.state": self.buffer_names[path[2]].rsplit(".", 1)[-1]
                if path[1] == "buffers" else path[1]} for path, _ in leaves]

    def placements(self, mesh, params: Dict[str, Sequence[Any]], inputs: Sequence[Any],
                   target: Any):
        """(in_placements, out_placements) for ``trace`` of this step, in the
        order of the flattened arguments and results: parameters (by name;
        Replicate where not given), optimizer state (as its parameter; step
        counters and running statistics Replicate), inputs and target;
        results are the loss (Replicate), the new parameters and the new
        state."""
        from .placements import Replicate
        rep = [Replicate()] * mesh.ndim
        unknown = set(params) - set(self.param_names)
        if unknown:
            raise ValueError(f"no parameters named {sorted(unknown)}; the module has {self.param_names}")
        per_param = [list(params.get(n, rep)) for n in self.param_names]
        state = []
        for key, tensors in self.initial_state().items():
            state += [rep if key in ("step", "buffers") else per_param[i] for i in range(len(tensors))]
        ins = per_param + state + [p if p is None else list(p) for p in inputs] + [target]
        outs = [rep] + per_param + state
        return ins, outs

    def run_eager(self, *args):
        """Runs the step in eager PyTorch (the numerical oracle)."""
        with eager_context():
            return self(*args)


@contextlib.contextmanager
def eager_context():
    """The context the traced program sees: math attention and the
    optimizers' capturable (tensor step) path on CPU."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.MATH), \
            unittest.mock.patch("torch.compiler.is_compiling", return_value=True):
        yield
