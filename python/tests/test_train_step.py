"""shardx.TrainStep against torch.optim on the same module: parameters
frozen with requires_grad_(False) (fine-tuning a head on a frozen
backbone) and parameters the loss never reads are skipped as torch.optim
skips a parameter whose gradient is None (no step, no weight decay, no
state); the others take torch.optim's step. Before, every parameter was
differentiated (frozen ones were updated) and an unused one made the
step raise."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import shardx
from shardx import Mesh, Replicate as R, Shard as S


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(8, 8)
        self.head = nn.Linear(8, 4)
        self.unused = nn.Linear(3, 3)
        self.backbone.requires_grad_(False)

    def forward(self, x):
        return self.head(torch.tanh(self.backbone(x)))


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_frozen_and_unused_parameters_are_skipped_as_torch_optim_skips_them(optimizer):
    torch.manual_seed(0)
    model = Net()
    x, y = torch.randn(6, 8), torch.randn(6, 4)
    kw = dict(lr=1e-2, weight_decay=0.1) if optimizer == "adamw" else \
        dict(lr=0.1, momentum=0.9, weight_decay=0.1)
    step = shardx.TrainStep(model, F.mse_loss, optimizer, **kw)
    args = step.example_args([x], y)
    # torch.optim, twice, on a copy of the module.
    oracle = Net()
    oracle.load_state_dict(model.state_dict())
    opt = (torch.optim.AdamW if optimizer == "adamw" else torch.optim.SGD)(
        [p for p in oracle.parameters() if p.requires_grad], **kw)
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        F.mse_loss(oracle(x), y).backward()
        opt.step()
    want = [p.detach() for p in oracle.parameters()]
    mesh = Mesh((2,), ("dp",))
    ins, outs = step.placements(mesh, {}, [[S(0)]], [S(0)])
    for run in (step.run_eager, shardx.compile(step, None), shardx.compile(step, mesh, ins, outs)):
        params, state = args[0], args[1]
        for _ in range(2):
            _, params, state = run(params, state, (x,), y)
        for name, got, w, before in zip(step.param_names, params, want, args[0]):
            got = got.to_torch() if hasattr(got, "to_torch") else got.detach()
            torch.testing.assert_close(got, w, rtol=1e-5, atol=1e-6, msg=name)
            if not name.startswith("head"):
                assert torch.equal(got, before), name
        if optimizer == "adamw":
            steps = [s.to_torch() if hasattr(s, "to_torch") else s for s in state["step"]]
            assert [int(s) for s in steps] == [0, 0, 2, 2, 0, 0]
