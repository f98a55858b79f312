"""The JIT on a GPU: train steps through `shardx.compile(..., backend="cuda")`,
compiled where a compiler is and run where only the runtime is.

    # build half, any machine (no GPU): trace, compile for CUDA, export
    ~/.cache/shardx/venv/bin/python scripts/gpu_jit_check.py --build DIR
    # run half, the GPU machine: the binding for its Python in $SHARDX_BUILD/python
    SHARDX_BUILD=... python3 scripts/gpu_jit_check.py --run DIR

Workloads (each a `shardx.TrainStep`): the README's MLP (32-128-32, GELU, SGD
with momentum, batch 64) on a 2x2 dp x tp mesh (4 cuda-local ranks on the
one GPU) and on one rank; the zoo's GPT-2 and Llama (AdamW) with Megatron
tensor parallelism on 2 ranks (the zoo's `tp2` plan) and on one rank; GPT-2
with dropout 0.1 in training mode on 2 ranks (eager draws ShardX's random
numbers under `shardx.same_random()`).

The build half precompiles each step for `backend="cuda"` (the artifact has
the GPU code; nothing runs), exports it as an AOT package
(`CompiledFunction.export`), runs the same steps eagerly on the CPU and
saves the initial parameters and state, the batches and eager's loss and
final parameters per step (`DIR/<workload>/data.pt`).

The run half needs no compiler, MLIR or LLVM: it loads each package with
`shardx.load(..., backend="cuda")`, trains the saved steps with the
parameters and optimizer state donated from step to step (they stay on the
ranks), and compares every step's loss and the final parameters with
eager's: per tensor, |a - b| <= 1e-4 * max|b| + 1e-6 + 4 * max|b - b64|,
where b64 is eager in float64 (the build half runs the steps in both): a
value that f32 rounding alone moves far from the exact one, such as
GPT-2's key bias under AdamW (its exact gradient is zero, so Adam's update
divides rounding noise by itself), may differ as much in ShardX; every
other value must agree to f32 precision. It prints one line
per workload (the figures and the time per step) and `N passed, N failed`,
and exits 1 on any failure.
"""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
from torch.utils._pytree import tree_map  # noqa: E402

RTOL, ATOL = 1e-4, 1e-6


def _readme_mlp(sharded):
    import torch.nn as nn
    import torch.nn.functional as F
    from shardx import Mesh, Replicate as R, Shard as S, TrainStep
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32))
    teacher = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 32)).requires_grad_(False)
    step = TrainStep(model, F.mse_loss, "sgd", lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(20):
        x = torch.randn(64, 32, generator=gen)
        batches.append(((x,), teacher(x)))
    if not sharded:
        return step, None, None, None, batches
    mesh = Mesh((2, 2), ("dp", "tp"))
    ins, outs = step.placements(mesh, {
        "0.weight": [R(), S(0)], "0.bias": [R(), S(0)], "2.weight": [R(), S(1)],
    }, [[S(0), R()]], [S(0), R()])
    return step, mesh, ins, outs, batches


def _zoo(name, sharded):
    from shardx import TrainStep
    from shardx_dev import zoo
    model, loss, inputs, target = zoo.build(name)
    step = TrainStep(model, loss, "adamw", lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    batches = [(tuple(inputs), target)]
    for _ in range(2):
        batches.append(((torch.randint(0, zoo.VOCAB, inputs[0].shape, generator=gen),),
                        torch.randint(0, zoo.VOCAB, target.shape, generator=gen)))
    if not sharded:
        return step, None, None, None, batches
    plan = next(p for p in zoo.plans(name) if p.name == "tp2")
    ins, outs = step.placements(plan.mesh, plan.params(step.param_names),
                                [plan.batch] * len(inputs), plan.batch)
    return step, plan.mesh, ins, outs, batches


#: The seed of step k of a workload with random ops is SEED + k
#: (``torch.manual_seed`` before the step, on both halves).
SEED = 100
RANDOM = {"gpt2_dropout_tp2"}

WORKLOADS = {
    "readme_mlp_2x2": lambda: _readme_mlp(True),
    "readme_mlp_1": lambda: _readme_mlp(False),
    "gpt2_tp2": lambda: _zoo("gpt2", True),
    "gpt2_1": lambda: _zoo("gpt2", False),
    "llama_tp2": lambda: _zoo("llama", True),
    "llama_1": lambda: _zoo("llama", False),
    # Dropout 0.1 (zoo's gpt2_dropout): its random numbers come from
    # ShardX's generator, seeded by torch.manual_seed(SEED + step) before
    # each step on both halves; eager draws them under shardx.same_random.
    "gpt2_dropout_tp2": lambda: _zoo("gpt2_dropout", True),
}


def build(out_dir, only, backend="cuda"):
    import shardx
    os.makedirs(out_dir, exist_ok=True)
    for name, make in WORKLOADS.items():
        if only and name not in only:
            continue
        start = time.perf_counter()
        step, mesh, ins, outs, batches = make()
        donate = (0, 1)
        fn = shardx.compile(step, mesh, ins, outs, donate=donate, backend=backend,
                            name=name.split("_")[0])
        params, state, _, _ = step.example_args(*batches[0])
        fn.precompile(params, state, *batches[0])
        folder = os.path.join(out_dir, name)
        os.makedirs(folder, exist_ok=True)
        fn.export(os.path.join(folder, "step.shardx"))
        random = name in RANDOM
        losses, final = _eager(step, params, state, batches, random=random)
        losses64, final64 = _eager(step, params, state, batches, torch.float64, random)
        torch.save({"params": params, "state": state, "batches": batches,
                    "losses": losses, "final_params": final,
                    "losses64": losses64, "final_params64": final64},
                   os.path.join(folder, "data.pt"))
        print(f"{name}: compiled for CUDA and exported in {time.perf_counter() - start:.1f} s "
              f"({len(batches)} steps of eager reference)", flush=True)


def _eager(step, params, state, batches, dtype=None, random=False):
    """Eager's loss per step and final parameters; in ``dtype`` (the
    module, parameters, state and float inputs cast) when given; with
    ``random``, each step draws ShardX's random numbers (``SEED``)."""
    import contextlib
    import copy
    from shardx import eager_context, same_random

    def cast(t):
        return t.to(dtype) if dtype is not None and torch.is_floating_point(t) else t
    if dtype is not None:
        step = copy.copy(step)
        step.module = copy.deepcopy(step.module).to(dtype)
    losses, p, s = [], tree_map(cast, params), tree_map(cast, state)
    with eager_context():
        for k, (inputs, target) in enumerate(batches):
            torch.manual_seed(SEED + k)
            with same_random() if random else contextlib.nullcontext():
                loss, p, s = step(p, s, tree_map(cast, inputs), cast(target))
            losses.append(loss.detach().clone())
    return losses, [t.detach().clone() for t in p]


def _close(a, b, b64):
    """Whether ``a`` (ShardX) agrees with ``b`` (eager, f32) as well as
    f32 can, given ``b64`` (eager, f64); and the max abs difference."""
    a, b, b64 = a.detach().cpu().double(), b.double(), b64.double()
    if a.shape != b.shape:
        return False, float("inf")
    if not torch.isfinite(a).all():
        return False, float("nan")
    if not a.numel():
        return True, 0.0
    err = (a - b).abs().max().item()
    rounding = (b - b64).abs().max().item()
    return err <= RTOL * b.abs().max().item() + ATOL + 4 * rounding, err


def run(out_dir, only, backend="cuda"):
    import shardx
    passed = failed = 0
    for name in WORKLOADS:
        folder = os.path.join(out_dir, name)
        if (only and name not in only) or not os.path.isdir(folder):
            continue
        try:
            data = torch.load(os.path.join(folder, "data.pt"), weights_only=False)
            fn = shardx.load(os.path.join(folder, "step.shardx"), backend=backend)
            p, s = data["params"], data["state"]
            batches = data["batches"]
            # The sharded workloads take CUDA tensors (read in place through
            # DLPack), the one-rank ones host tensors (staged in).
            on_gpu = backend in ("cuda", "nccl") and not name.endswith("_1")
            if on_gpu:
                p, s, batches = tree_map(
                    lambda t: t.cuda() if isinstance(t, torch.Tensor) else t, (p, s, batches))
            times, worst, ok = [], 0.0, True
            for k, (inputs, target) in enumerate(batches):
                if name in RANDOM:
                    torch.manual_seed(SEED + k)
                start = time.perf_counter()
                loss, p, s = fn(p, s, inputs, target)
                value = loss.to_torch()
                times.append(time.perf_counter() - start)
                good, err = _close(value, data["losses"][k], data["losses64"][k])
                worst = max(worst, err)
                if not good:
                    ok = False
                    print(f"  step {k}: loss {value.item():.7g}, eager {data['losses'][k].item():.7g}")
            for i, (a, b, b64) in enumerate(zip(p, data["final_params"],
                                                data["final_params64"])):
                good, err = _close(a.to_torch(), b, b64)
                worst = max(worst, err)
                if not good:
                    ok = False
                    print(f"  parameter {i}: max abs difference {err:.3g} from eager")
            if backend in ("cuda", "nccl") and not all(t.on_device for t in p):
                # The state must stay on the GPU between calls.
                ok = False
                print("  parameters not resident on the GPU after the steps")
            steady = sorted(times[1:])[len(times[1:]) // 2] if len(times) > 1 else times[0]
            line = (f"{name}: {len(times)} steps on {fn.mesh.size} {backend} rank(s) from "
                    f"{'CUDA' if on_gpu else 'host'} tensors, max abs "
                    f"difference from eager {worst:.2e}, first call {times[0] * 1e3:.1f} ms, "
                    f"then {steady * 1e3:.2f} ms/step")
        except Exception as e:  # noqa: BLE001 - reported, counted
            ok, line = False, f"{name}: {type(e).__name__}: {e}"
        print(("PASS " if ok else "FAIL ") + line, flush=True)
        passed += ok
        failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--build", metavar="DIR")
    mode.add_argument("--run", metavar="DIR")
    ap.add_argument("--only", default="", help="comma-separated workload names")
    ap.add_argument("--backend", default="cuda",
                    help="cuda (default); threads checks this script on the CPU")
    args = ap.parse_args(argv)
    only = [w for w in args.only.split(",") if w]
    if args.build:
        build(args.build, only, args.backend)
        return 0
    return run(args.run, only, args.backend)


if __name__ == "__main__":
    sys.exit(main())
