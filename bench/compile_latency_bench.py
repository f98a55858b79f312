"""Time to first step against depth: ShardX's `shardx.compile` and
torch.compile (inductor) on the same GPT-style train step, in one run.

    ~/.cache/shardx/venv/bin/python bench/compile_latency_bench.py \
        [--layers 1 2 4 8 16 32] [--no-torch] [--no-warm] [--no-inline] [--no-make-fx]
        [--repeat N] [--dump DIR] [--no-regions]
        [--gpt2-zoo LAYERS] [--trace-only] [--cuda [--compiler BIN]]
        [--dim D --heads H --seq S --batch B --vocab V]

The step: a GPT with tied embedding and LM head, pre-norm causal blocks
(4 heads, width 64, MLP 4x), sequence 16, batch 4, cross-entropy loss,
`torch.autograd.grad`, gradient clipping by the global norm and a
hand-written AdamW (decoupled weight decay), all in one traced function.
ShardX runs it on a 2x2 dp x tp mesh of CPU threads (batch over dp,
Megatron placements over tp); torch.compile runs it on one process.

Each layer is one call of `block`, and each parameter's AdamW update one
call of `adamw`, both marked with `torch.compiler.nested_compile_region`:
ShardX traces the block once (forward and backward) and the update once
per parameter shape, and calls them (python/shardx/importer/regions.py). The `inline`
column is the same step traced without regions (`regions_enabled(False)`:
every layer traced, imported and compiled as before); torch.compile runs
the plain `block` and `adamw`.

For each depth, cold first call: a fresh cache directory for ShardX (no
artifact, no kernel, no traced region), and a fresh inductor cache
(`TORCHINDUCTOR_CACHE_DIR`) and `torch._dynamo.reset()` for torch.compile.
The last line for the deepest model is the warm case: the same model with
one layer's MLP width changed, compiled with the kernel cache and the region
cache (python/shardx/importer/region_cache.py) left by the cold run (a new
artifact, most kernels cached, the unchanged regions loaded, not traced).
Before each ShardX call the regions kept in memory are dropped, as in a new
process; each timing line ends with the regions loaded from disk and
traced. torch.compile's warm case is the same change run in a new process
on the inductor cache its cold call left (its FX graph cache is off in
both: the changed graph would miss it; the unchanged kernels hit the
code cache). Ratios (goals in issue 35):

- torch.compile / ShardX at each depth >= 2 (goal >= 1);
- ShardX deepest / ShardX 2 layers (goal <= 3 at 32 layers);
- warm one-layer change / cold (goal <= 0.2).

Under the warm line, the floor under that ratio, in the same run: the
warm call's own trace (it must trace the changed step again: make_fx keeps
no guards that would let it reuse the unchanged part of the step's Python)
as a fraction of the cold call, and the seconds of one plain `make_fx` pass
(fake tensors, PyTorch's default decompositions) over the same changed step:
the program a user of make_fx would hand over (`--no-make-fx` skips it).

The ShardX first step is checked against eager (the loss, f32 tolerance).

`--cuda` times `shardx-compile --target=cuda` of the traced step at each
depth instead (a fresh kernel cache each, the fastest of --repeat; ptxas
included where the artifact embeds a fat binary, docs/Compiler.md), and the
kernels the artifact embeds; `--compiler BIN` times
another shardx-compile (a build of an older commit) on the same programs in
the same run, for before/after figures.

`--trace-only` times `shardx.trace` of the step alone at each depth (no
compile, no run; then the warm case's trace, the other regions from the
region cache on disk); with the shape flags (default width 64, 4 heads, sequence
16, batch 4, vocabulary 128) it shows that the trace's time does not depend
on the tensors' sizes (e.g. `--dim 768 --heads 12 --seq 1024 --batch 8`).
"""

import argparse
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DIM, HEADS, SEQ, BATCH, VOCAB = 64, 4, 16, 4, 128


def set_shape(dim, heads, seq, batch, vocab):
    """Sets the model's width, heads, sequence, batch and vocabulary."""
    global DIM, HEADS, SEQ, BATCH, VOCAB
    DIM, HEADS, SEQ, BATCH, VOCAB = dim, heads, seq, batch, vocab


def init_params(layers, widths=None, seed=0):
    """Named parameters of the GPT: a list of (name, tensor)."""
    g = torch.Generator().manual_seed(seed)
    widths = widths or [4 * DIM] * layers

    def w(*shape, scale=0.02):
        return torch.randn(*shape, generator=g) * scale
    params = [("wte", w(VOCAB, DIM)), ("wpe", w(SEQ, DIM))]
    for i in range(layers):
        h = widths[i]
        params += [(f"h{i}.ln1.w", torch.ones(DIM)), (f"h{i}.ln1.b", torch.zeros(DIM)),
                   (f"h{i}.q.w", w(DIM, DIM)), (f"h{i}.k.w", w(DIM, DIM)),
                   (f"h{i}.v.w", w(DIM, DIM)), (f"h{i}.o.w", w(DIM, DIM)),
                   (f"h{i}.ln2.w", torch.ones(DIM)), (f"h{i}.ln2.b", torch.zeros(DIM)),
                   (f"h{i}.fc1.w", w(h, DIM)), (f"h{i}.fc1.b", torch.zeros(h)),
                   (f"h{i}.fc2.w", w(DIM, h)), (f"h{i}.fc2.b", torch.zeros(DIM))]
    params += [("lnf.w", torch.ones(DIM)), ("lnf.b", torch.zeros(DIM))]
    return params


def block(x, p):
    """One pre-norm causal block; ``p`` its 12 parameters in `init_params`'
    order."""
    ln1w, ln1b, qw, kw, vw, ow, ln2w, ln2b, fc1w, fc1b, fc2w, fc2b = p
    b, s, _ = x.shape
    mask = torch.ones(s, s, dtype=torch.bool).tril()
    h = F.layer_norm(x, (DIM,), ln1w, ln1b)

    def heads(t):
        return t.view(b, s, HEADS, DIM // HEADS).transpose(1, 2)
    q = heads(h @ qw.t())
    k = heads(h @ kw.t())
    v = heads(h @ vw.t())
    att = (q @ k.transpose(-2, -1)) / math.sqrt(DIM // HEADS)
    att = att.masked_fill(~mask, float("-inf")).softmax(-1)
    y = (att @ v).transpose(1, 2).reshape(b, s, DIM)
    x = x + y @ ow.t()
    h = F.layer_norm(x, (DIM,), ln2w, ln2b)
    h = F.gelu(h @ fc1w.t() + fc1b)
    return x + h @ fc2w.t() + fc2b


#: The block as the step calls it: marked as a nested compile region, so
#: that ShardX's trace takes each layer as a call of one traced region
#: (python/shardx/importer/regions.py; eager runs it as a plain call). The
#: torch.compile column runs the plain `block` and `adamw` (its time as before).
BLOCK = torch.compiler.nested_compile_region(block)


def forward(names, ps, tokens):
    p = dict(zip(names, ps))
    b, s = tokens.shape
    x = p["wte"][tokens] + p["wpe"][:s]
    layers = sum(1 for n in names if n.endswith(".q.w"))
    for i in range(layers):
        x = BLOCK(x, [p[f"h{i}.{k}"] for k in (
            "ln1.w", "ln1.b", "q.w", "k.w", "v.w", "o.w", "ln2.w", "ln2.b", "fc1.w", "fc1.b",
            "fc2.w", "fc2.b")])
    x = F.layer_norm(x, (DIM,), p["lnf.w"], p["lnf.b"])
    return x @ p["wte"].t()  # tied LM head


def adamw(p, g, m1, v1, scale, lr, betas, eps, wd):
    """One parameter's clipped AdamW update (bias correction of step 1)."""
    g = g * scale
    m1 = betas[0] * m1 + (1 - betas[0]) * g
    v1 = betas[1] * v1 + (1 - betas[1]) * g * g
    upd = (m1 / (1 - betas[0])) / (torch.sqrt(v1 / (1 - betas[1])) + eps)
    return p * (1 - lr * wd) - lr * upd, m1, v1


#: The update as the step calls it: a region too (one per parameter shape).
UPDATE = torch.compiler.nested_compile_region(adamw)


def make_step(names, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, wd=0.1, clip=1.0):
    def train_step(params, m, v, tokens, targets):
        params = [p.detach().requires_grad_(True) for p in params]
        logits = forward(names, params, tokens)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
        grads = torch.autograd.grad(loss, params)
        norm = torch.sqrt(sum((g * g).sum() for g in grads))
        scale = torch.clamp(clip / (norm + 1e-6), max=1.0)
        new_p, new_m, new_v = [], [], []
        with torch.no_grad():
            for p, g, m1, v1 in zip(params, grads, m, v):
                p1, m1, v1 = UPDATE(p.detach(), g, m1, v1, scale, lr, betas, eps, wd)
                new_p.append(p1)
                new_m.append(m1)
                new_v.append(v1)
        return loss.detach(), new_p, new_m, new_v
    train_step.__name__ = "gpt_step"
    return train_step


def placements(names, shardx):
    """Megatron over tp (axis 1): q/k/v/fc1 by output features, o/fc2 by
    input features; everything else replicated."""
    R, S = shardx.Replicate, shardx.Shard
    col = (".q.w", ".k.w", ".v.w", ".fc1.w", ".fc1.b")
    row = (".o.w", ".fc2.w")
    out = []
    for n in names:
        if n.endswith(col):
            out.append([R(), S(0)])
        elif n.endswith(row):
            out.append([R(), S(1)])
        else:
            out.append([R(), R()])
    return out


def example(layers, widths=None):
    named = init_params(layers, widths)
    names = [n for n, _ in named]
    params = [t for _, t in named]
    zeros = [torch.zeros_like(t) for t in params]
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    targets = torch.randint(0, VOCAB, (BATCH, SEQ), generator=g)
    return names, (params, zeros, [z.clone() for z in zeros], tokens, targets)


def shardx_first_call(layers, cache, widths=None, regional=True):
    """Seconds of the first call of shardx.compile(step) with the disk
    caches in `cache`, and the loss it returned against eager's; with
    `regional` false, every layer is traced inline (no regions)."""
    import shardx
    from shardx.importer import regions_enabled
    with regions_enabled(regional):
        return _shardx_first_call(shardx, layers, cache, widths)


def _shardx_first_call(shardx, layers, cache, widths):
    from shardx.importer import region_cache
    os.environ["SHARDX_CACHE_DIR"] = cache
    # As in a new process: the traced regions kept in memory are dropped
    # (the disk cache under `cache` stays).
    region_cache._MEMORY.clear()
    region_cache.stats.reset()
    names, args = example(layers, widths)
    step = make_step(names)
    mesh = shardx.Mesh((2, 2), ("dp", "tp"))
    pl = placements(names, shardx)
    R, S = shardx.Replicate, shardx.Shard
    ins = pl + pl + pl + [[S(0), R()], [S(0), R()]]
    outs = [[R(), R()]] + pl + pl + pl
    fn = shardx.compile(step, mesh, ins, outs)
    start = time.perf_counter()
    out = fn(*args)
    loss = out[0].to_torch() if hasattr(out[0], "to_torch") else out[0]
    elapsed = time.perf_counter() - start
    ref = step(*args)[0]
    err = abs(float(loss) - float(ref))
    if not err <= 1e-4 * max(1.0, abs(float(ref))):
        raise SystemExit(f"shardx loss {float(loss)} differs from eager {float(ref)}")
    timing = dict(fn.first_call_timing or {})
    st = region_cache.stats
    timing["regions from disk"] = st.disk
    timing["regions traced"] = st.traced
    return elapsed, timing


def cold_first_call(layers, repeat, regional, warm_widths=None):
    """The fastest of `repeat` cold first calls (each with fresh caches),
    its timing, and, with `warm_widths`, the first call of the model with
    those MLP widths on the kernel cache the last cold call left."""
    best = warm = warm_timing = None
    for r in range(repeat):
        cache = tempfile.mkdtemp(prefix="shardx-latency-")
        try:
            secs, timing = shardx_first_call(layers, cache, regional=regional)
            if warm_widths and r == repeat - 1:
                # The same kernel cache; the artifact is a new program.
                warm, warm_timing = shardx_first_call(layers, cache, warm_widths,
                                                      regional=regional)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        if best is None or secs < best[0]:
            best = (secs, timing)
    return best[0], best[1], (warm, warm_timing)


def torch_first_call(layers, warm_widths=None):
    """Seconds of torch.compile's first call (fresh inductor cache), and,
    with `warm_widths`, of the first call of the model with those MLP
    widths in a new process on the inductor cache the cold call left (its
    unchanged kernels compiled already), else None."""
    code = """
import os, sys, time, torch
sys.path.insert(0, {bench!r})
import compile_latency_bench as bench
from compile_latency_bench import example, make_step
bench.BLOCK, bench.UPDATE = bench.block, bench.adamw
names, args = example({layers}, {widths!r})
fn = torch.compile(make_step(names))
start = time.perf_counter()
fn(*args)
print(time.perf_counter() - start)
"""
    env = dict(os.environ)
    times = []
    with tempfile.TemporaryDirectory() as d:
        env["TORCHINDUCTOR_CACHE_DIR"] = d
        env["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
        for widths in [None] + ([warm_widths] if warm_widths else []):
            src = code.format(bench=os.path.join(ROOT, "bench"), layers=layers,
                              widths=widths)
            proc = subprocess.run([sys.executable, "-c", src], env=env,
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"torch.compile failed at {layers} layers:\n"
                                 f"{proc.stderr[-3000:]}")
            times.append(float(proc.stdout.strip().splitlines()[-1]))
    return times[0], (times[1] if warm_widths else None)


def make_fx_seconds(layers, widths=None):
    """Seconds of one plain make_fx pass (fake tensors, the default
    decompositions, no ShardX hook) over the step `layers` deep with the MLP
    widths `widths`: what producing the traced program a user would hand
    over costs. (make_fx inlines the step's nested compile regions.)"""
    import torch.utils._pytree as pytree
    from torch.fx.experimental.proxy_tensor import make_fx
    names, args = example(layers, widths)
    step = make_step(names)
    flat, spec = pytree.tree_flatten(args)

    def flat_step(*xs):
        return pytree.tree_leaves(step(*pytree.tree_unflatten(list(xs), spec)))
    start = time.perf_counter()
    make_fx(flat_step, tracing_mode="fake")(*flat)
    return time.perf_counter() - start


def trace_text(layers, widths=None):
    """The traced program of the step `layers` deep (shardx.trace), with
    the MLP widths `widths` (default 4d each)."""
    import shardx
    names, args = example(layers, widths)
    mesh = shardx.Mesh((2, 2), ("dp", "tp"))
    pl = placements(names, shardx)
    R, S = shardx.Replicate, shardx.Shard
    return shardx.trace(make_step(names), args, mesh,
                        pl + pl + pl + [[S(0), R()], [S(0), R()]],
                        [[R(), R()]] + pl + pl + pl, name="gpt_step")


def warm_widths(layers):
    """The warm case's MLP widths: layer `layers // 2` 3d, the others 4d."""
    widths = [4 * DIM] * layers
    widths[layers // 2] = 3 * DIM
    return widths


def dump(layers, folder, widths=None, suffix=""):
    text = trace_text(layers, widths)
    path = os.path.join(folder, f"gpt_{layers}{suffix}.mlir")
    with open(path, "w") as f:
        f.write(text)
    return path


def gpt2_zoo_compile(layers, opt, cache):
    """Seconds of `shardx-compile -O<opt>` of the zoo's Hugging Face GPT-2
    train step (AdamW) made `layers` deep, Megatron TP over 2 ranks (the
    zoo's tp2 plan), with a fresh kernel cache; and the trace's seconds."""
    import transformers as T
    import shardx_dev.zoo as zoo
    from shardx.artifact import find_tool

    def deep_gpt2():
        cfg = T.GPT2Config(vocab_size=zoo.VOCAB, n_positions=16, n_embd=32, n_layer=layers,
                           n_head=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                           bos_token_id=0, eos_token_id=0, attn_implementation="eager")
        return zoo.CausalLM(T.GPT2LMHeadModel(cfg).eval()), zoo.lm_loss, *zoo._tokens()
    zoo.MODELS["gpt2"] = deep_gpt2
    with tempfile.TemporaryDirectory() as d:
        run = zoo.ZooRun("gpt2", d, opt_level=opt)
        plan = next(p for p in zoo.plans("gpt2") if p.name == "tp2")
        start = time.perf_counter()
        text = run.trace(plan)
        traced = time.perf_counter() - start
        src = os.path.join(d, "gpt2.mlir")
        with open(src, "w") as f:
            f.write(text)
        env = dict(os.environ, SHARDX_KERNEL_CACHE=cache)
        start = time.perf_counter()
        subprocess.run([find_tool("shardx-compile"), src, f"-O{opt}", "-o",
                        os.path.join(d, "gpt2.so")], check=True, env=env)
        return time.perf_counter() - start, traced


def embedded_kernels(data):
    """The kernels a CUDA artifact embeds: the `.entry`s of its PTX, or
    the global functions of the first cubin in its fat binary (the PTX
    there is compressed)."""
    if b".entry " in data:
        return data.count(b".entry ")
    fat = data.find(struct.pack("<I", 0xBA55ED50))
    if fat < 0:
        return 0
    _, _, header, size = struct.unpack_from("<IHHQ", data, fat)
    offset = fat + header
    while offset < fat + header + size:
        kind, _, image_header, payload = struct.unpack_from("<HHIQ", data, offset)
        if kind == 2:  # an ELF: count its STT_FUNC symbols of global binding
            elf = data[offset + image_header:offset + image_header + payload]
            shoff, = struct.unpack_from("<Q", elf, 0x28)
            shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
            for i in range(shnum):
                sh = shoff + i * shentsize
                sh_type, = struct.unpack_from("<I", elf, sh + 4)
                if sh_type != 2:  # SHT_SYMTAB
                    continue
                off, sz, _, _, _, ent = struct.unpack_from("<QQIIQQ", elf, sh + 0x18)
                return sum(1 for j in range(off, off + sz, ent)
                           if elf[j + 4] == 0x12)  # GLOBAL << 4 | FUNC
            return 0
        offset += image_header + payload
    return 0


def cuda_compile(layers, compilers, repeat):
    """Per compiler: the fastest of `repeat` cold `shardx-compile
    --target=cuda` runs of the step `layers` deep (a fresh kernel cache
    each; None where it failed) and the kernels the artifact embeds."""
    out = []
    with tempfile.TemporaryDirectory() as d:
        src = dump(layers, d)
        for tool in compilers:
            best, kernels = None, None
            so = os.path.join(d, "step.so")
            for _ in range(repeat):
                with tempfile.TemporaryDirectory() as cache:
                    env = dict(os.environ, SHARDX_KERNEL_CACHE=cache)
                    start = time.perf_counter()
                    proc = subprocess.run([tool, src, "--target=cuda", "-o", so],
                                          env=env, capture_output=True, text=True)
                    secs = time.perf_counter() - start
                if proc.returncode != 0:
                    print(f"       {tool}: {proc.stderr.strip().splitlines()[-1][:160]}",
                          flush=True)
                    break
                best = secs if best is None else min(best, secs)
            if best is not None:
                with open(so, "rb") as f:
                    kernels = embedded_kernels(f.read())
            out.append((best, kernels))
    return out


def _timing_text(timing):
    return ", ".join(f"{k} {v}" if isinstance(v, int) else f"{k} {v:.2f}s"
                     for k, v in timing.items())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--no-torch", action="store_true", help="skip torch.compile")
    ap.add_argument("--no-warm", action="store_true", help="skip the warm one-layer change")
    ap.add_argument("--no-make-fx", action="store_true",
                    help="skip timing plain make_fx of the warm case's step")
    ap.add_argument("--no-inline", action="store_true",
                    help="skip the inline column (the step traced without regions)")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="ShardX: the fastest of N cold first calls (fresh caches each)")
    ap.add_argument("--no-regions", action="store_true",
                    help="--trace-only and --dump: trace every layer inline (no regions)")
    ap.add_argument("--gpt2-zoo", type=int, metavar="LAYERS",
                    help="only time shardx-compile of the zoo's HF GPT-2 TP step this deep")
    ap.add_argument("--dump", metavar="DIR",
                    help="write the traced programs (gpt_<layers>.mlir, and "
                         "gpt_<layers>_warm.mlir with the warm case's widths) and exit")
    ap.add_argument("--trace-only", action="store_true",
                    help="only time shardx.trace of the step at each depth")
    ap.add_argument("--cuda", action="store_true",
                    help="only time shardx-compile --target=cuda of the step at each depth")
    ap.add_argument("--compiler", metavar="BIN",
                    help="--cuda: also time this shardx-compile (e.g. an older build)")
    ap.add_argument("--dim", type=int, default=DIM, help="model width (default %(default)s)")
    ap.add_argument("--heads", type=int, default=HEADS,
                    help="attention heads (default %(default)s)")
    ap.add_argument("--seq", type=int, default=SEQ, help="sequence length (default %(default)s)")
    ap.add_argument("--batch", type=int, default=BATCH, help="batch size (default %(default)s)")
    ap.add_argument("--vocab", type=int, default=VOCAB, help="vocabulary (default %(default)s)")
    args = ap.parse_args(argv)
    shape = (args.dim, args.heads, args.seq, args.batch, args.vocab)
    if shape != (DIM, HEADS, SEQ, BATCH, VOCAB):
        if not args.no_torch and not (args.trace_only or args.dump or args.gpt2_zoo):
            ap.error("the shape flags time ShardX only: add --no-torch")
        set_shape(*shape)
    if args.no_regions:
        from shardx.importer import regions
        regions._state().enabled = False
    if args.trace_only:
        from shardx.importer import module as importer_module
        from shardx.importer import region_cache
        print(f"{'layers':>6} {'trace s':>8} {'import s':>9} {'warm call s':>12} "
              f"{'warm trace s':>13}  (width {DIM}, seq {SEQ}, batch {BATCH}, vocab {VOCAB})",
              flush=True)
        for n in args.layers:
            with tempfile.TemporaryDirectory(prefix="shardx-latency-") as cache:
                os.environ["SHARDX_CACHE_DIR"] = cache
                region_cache._MEMORY.clear()
                trace_text(n)
                t = dict(importer_module.last_timing)
                # The warm case's trace: one layer's MLP width changed, the
                # other regions from the disk cache (none kept in memory);
                # the call's seconds include what follows the trace's steps
                # (the garbage collection).
                region_cache._MEMORY.clear()
                start = time.perf_counter()
                trace_text(n, warm_widths(n))
                call = time.perf_counter() - start
                w = importer_module.last_timing
            print(f"{n:6d} {t['trace']:8.2f} {t['import']:9.2f} {call:12.2f} {w['trace']:13.2f}",
                  flush=True)
        return 0
    if args.cuda:
        from shardx.artifact import find_tool
        compilers = [find_tool("shardx-compile")] + ([args.compiler] if args.compiler else [])
        names = ["shardx s", "kernels"] + (["other s", "kernels", "other/this"]
                                           if args.compiler else [])
        print(f"{'layers':>6} " + " ".join(f"{n:>10}" for n in names), flush=True)
        first = {}
        for n in args.layers:
            row = cuda_compile(n, compilers, args.repeat)
            cells = []
            for i, (secs, kernels) in enumerate(row):
                cells += [f"{secs:10.2f}" if secs else f"{'failed':>10}",
                          f"{kernels:10d}" if kernels else f"{'-':>10}"]
                if secs and n == 2:
                    first[i] = secs
            if args.compiler:
                a, b = row[0][0], row[1][0]
                cells.append(f"{b / a:10.2f}" if a and b else f"{'-':>10}")
            print(f"{n:6d} " + " ".join(cells), flush=True)
            last = row
        for i, tool in enumerate(compilers):
            if i in first and last[i][0]:
                print(f"{tool}: {max(args.layers)} layers / 2 layers: "
                      f"{last[i][0] / first[i]:.2f}")
        return 0
    if args.gpt2_zoo:
        with tempfile.TemporaryDirectory() as cache:
            secs, traced = gpt2_zoo_compile(args.gpt2_zoo, 3, cache)
        print(f"HF GPT-2 {args.gpt2_zoo} layers, tp2: trace {traced:.1f} s, shardx-compile -O3 "
              f"{secs:.1f} s (cold kernel cache; goal <= 60 s)")
        return 0
    if args.dump:
        os.makedirs(args.dump, exist_ok=True)
        for n in args.layers:
            print(dump(n, args.dump))
            # The warm case's program (one layer's MLP width changed), for
            # `shardx-compile --timing` on the kernel cache gpt_<n>.mlir left.
            print(dump(n, args.dump, warm_widths(n), "_warm"))
        return 0
    torch.manual_seed(0)
    rows = []
    print(f"{'layers':>6} {'shardx s':>9} {'inline s':>9} {'torch s':>9} {'torch/shardx':>12}",
          flush=True)
    base = base_inline = None
    for n in args.layers:
        widths = None
        if n == max(args.layers) and not args.no_warm:
            widths = warm_widths(n)
        sx, timing, (warm, warm_timing) = cold_first_call(n, args.repeat, True, widths)
        inline = inline_timing = None
        if not args.no_inline:
            inline, inline_timing, _ = cold_first_call(n, args.repeat, False)
        tc = tc_warm = None
        if not args.no_torch:
            tc, tc_warm = torch_first_call(n, widths)
        if n == 2:
            base, base_inline = sx, inline
        rows.append((n, sx, tc, warm, inline))
        ratio = f"{tc / sx:12.2f}" if tc else f"{'-':>12}"
        print(f"{n:6d} {sx:9.1f} {inline if inline else float('nan'):9.1f} "
              f"{tc if tc else float('nan'):9.1f} {ratio}", flush=True)
        if timing:
            print("       " + _timing_text(timing), flush=True)
        if inline_timing:
            print("       inline: " + _timing_text(inline_timing), flush=True)
        if warm is not None:
            print(f"       warm kernel cache, layer {n // 2} MLP width 4d -> 3d: {warm:.1f} s "
                  f"= {warm / sx:.2f} of cold (goal <= 0.2)", flush=True)
            print("       warm: " + _timing_text(warm_timing), flush=True)
            floor = warm_timing.get("trace", 0.0) / sx
            line = (f"       floor: the warm call's trace alone is {floor:.2f} of cold")
            if not args.no_make_fx:
                make_fx_seconds(n, widths)  # the first pass pays make_fx's imports
                mf = make_fx_seconds(n, widths)
                line += (f"; one plain make_fx pass of the changed step takes {mf:.1f} s "
                         f"= {mf / sx:.2f} of ShardX's cold call, {mf / warm:.2f} of its warm one")
            print(line, flush=True)
        if tc_warm is not None:
            print(f"       torch.compile, the same change on the inductor cache its cold "
                  f"call left, new process: {tc_warm:.1f} s = {tc_warm / tc:.2f} of its "
                  f"cold", flush=True)
    if base:
        deepest = rows[-1]
        print(f"ShardX {deepest[0]} layers / 2 layers: {deepest[1] / base:.2f} "
              f"(goal <= 3 at 32)" + (f"; inline (no regions): {deepest[4] / base_inline:.2f}"
                                      if base_inline else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
