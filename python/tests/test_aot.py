"""shardx.export / shardx.load: compiled ahead, run where no compiler is.

A train step, an in-place update (with an alias variant) and pytree
outputs with Python constants are exported and loaded again, the first
two in a fresh process that has only the runtime binding (no
shardx-compile, no torch), where their numbers must be the JIT's to the
bit and eager's to f32 tolerance. Guard misses and a JIT without a
compiler raise MissingEntryError; damaged packages raise PackageError.
"""

import collections
import json
import math
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils._pytree as pytree

import shardx
from shardx import Mesh, MissingEntryError, PackageError, Replicate, Shard, ShardedTensor
from shardx import aot
from shardx.artifact import ArtifactError, find_tool
from shardx.jit import _flatten
from shardx.train import TrainStep

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch, build_dir):
    monkeypatch.setenv("SHARDX_CACHE_DIR", str(tmp_path / "cache"))
    shardx.cache_stats.reset()
    return tmp_path / "cache"


def full(x):
    return x.full() if isinstance(x, ShardedTensor) else np.asarray(x)


def numpy(x):
    return x.full() if isinstance(x, ShardedTensor) else x.detach().numpy()


# -- a host with the runtime only -----------------------------------------

#: Run first in the runtime-only process: torch cannot be imported, and
#: shardx-compile cannot be found.
PROLOGUE = """
import os, pickle, sys
sys.modules["torch"] = None  # import torch raises ImportError
import numpy as np
import shardx
from shardx import Mesh, MissingEntryError, ShardedTensor
from shardx.artifact import ArtifactError, find_tool
try:
    find_tool("shardx-compile")
    raise SystemExit("shardx-compile is reachable from the runtime-only host")
except ArtifactError:
    pass
with open(sys.argv[1], "rb") as f:
    data = pickle.load(f)
result = {}
"""
EPILOGUE = """
assert "torch" not in sys.modules or sys.modules["torch"] is None
with open(sys.argv[2], "wb") as f:
    pickle.dump(result, f)
"""


def run_runtime_only(tmp_path, script, data):
    """Runs ``script`` (after PROLOGUE; it reads ``data`` and fills
    ``result``) in a fresh process whose $SHARDX_BUILD holds only the
    runtime binding and whose PATH has no ShardX tools."""
    host = tmp_path / "host"
    (host / "build" / "python").mkdir(parents=True, exist_ok=True)
    build = os.environ.get("SHARDX_BUILD", os.path.join(ROOT, "build"))
    [binding] = [f for f in os.listdir(os.path.join(build, "python"))
                 if f.startswith("_shardx_rt.") and f.endswith(".so")]
    shutil.copy(os.path.join(build, "python", binding), host / "build" / "python" / binding)
    with open(host / "in.pkl", "wb") as f:
        pickle.dump(data, f)
    (host / "script.py").write_text(PROLOGUE + textwrap.dedent(script) + EPILOGUE)
    env = dict(os.environ, SHARDX_BUILD=str(host / "build"), PATH="/usr/bin:/bin",
               PYTHONPATH=os.path.join(ROOT, "python"), SHARDX_CACHE_DIR=str(host / "cache"))
    proc = subprocess.run([sys.executable, str(host / "script.py"), str(host / "in.pkl"),
                           str(host / "out.pkl")], env=env, capture_output=True, text=True,
                          cwd=str(host), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(host / "out.pkl", "rb") as f:
        return pickle.load(f), host


def to_numpy(tree):
    return pytree.tree_map(lambda t: t.detach().numpy().copy() if isinstance(t, torch.Tensor)
                           else t, tree)


# -- a train step ---------------------------------------------------------

def _mlp_step():
    torch.manual_seed(0)
    mesh = Mesh((2, 2), ("dp", "tp"))
    step = TrainStep(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)), F.mse_loss,
                     "sgd", lr=0.1, momentum=0.9)
    ins, outs = step.placements(mesh, {"0.weight": [Replicate(), Shard(0)],
                                       "0.bias": [Replicate(), Shard(0)],
                                       "2.weight": [Replicate(), Shard(1)]},
                                [[Shard(0), Replicate()]], [Shard(0), Replicate()])
    args = step.example_args([torch.randn(4, 8)], torch.randn(4, 8))
    return step, mesh, ins, outs, args


STEPS = 3


def test_train_step_runs_from_a_package_on_a_runtime_only_host(tmp_path):
    step, mesh, ins, outs, (params, state, inputs, target) = _mlp_step()
    f = shardx.compile(step, mesh, ins, outs, donate=(0, 1), name="mlp")
    jit, eager = [], []
    p, s, ep, es = params, state, params, state
    for _ in range(STEPS):
        loss, p, s = f(p, s, inputs, target)
        jit.append([full(t) for t in pytree.tree_leaves((loss, p, s))])
        el, ep, es = step.run_eager(ep, es, inputs, target)
        eager.append([t.detach().numpy() for t in pytree.tree_leaves((el, ep, es))])
    assert f.compiles == 1
    package = tmp_path / "mlp.shardx"
    assert f.export(package) == str(package)
    assert sorted(os.listdir(tmp_path)) == sorted(["cache", "mlp.shardx"])  # no temporaries

    def dummy(*args):
        raise AssertionError("never traced")

    data = {"package": str(package), "args": to_numpy((params, state, inputs, target)),
            "small": to_numpy(torch.randn(2, 8)), "ins": ins, "outs": outs, "steps": STEPS}
    result, host = run_runtime_only(tmp_path, """
        from shardx.sharded_tensor import DonatedError
        h = shardx.load(data["package"])
        assert h.fn is None and h.compiles == 0
        p, s, inputs, target = data["args"]
        result["steps"] = []
        for i in range(data["steps"]):
            old = [t for t in list(p) + [x for v in s.values() for x in v]]
            loss, p, s = h(p, s, inputs, target)
            leaves = [loss] + list(p) + [x for v in s.values() for x in v]
            result["steps"].append([t.full() for t in leaves])
            if i:  # the previous step's outputs were donated
                for t in old:
                    try:
                        t.full()
                        raise SystemExit("a donated handle still works")
                    except DonatedError:
                        pass
        assert h.compiles == 0
        # A batch of another size: no entry, and nothing compiles here.
        try:
            h(p, s, (data["small"],), data["small"])
            raise SystemExit("a guard miss ran")
        except MissingEntryError as e:
            result["miss"] = str(e)
        # The JIT without shardx-compile: first call, and a recompile of a
        # function seeded from the package.
        def jitfn(w, x):
            raise AssertionError("never traced")
        try:
            shardx.compile(jitfn, Mesh((2,), ("dp",)))(np.ones((4, 4), np.float32), 2.0)
            raise SystemExit("compiled without a compiler")
        except MissingEntryError as e:
            result["first"] = str(e)
        mesh = Mesh((2, 2), ("dp", "tp"))
        g = shardx.compile(jitfn, mesh, data["ins"], data["outs"], donate=(0, 1), name="mlp")
        assert g.load_package(data["package"]) == 1
        p, s, inputs, target = data["args"]
        loss, p, s = g(p, s, inputs, target)
        result["seeded"] = loss.full()
        try:
            g(p, s, (data["small"],), data["small"])
            raise SystemExit("compiled without a compiler")
        except MissingEntryError as e:
            result["recompile"] = str(e)
        result["cache"] = sorted(os.listdir(os.environ["SHARDX_CACHE_DIR"]))
    """, data)
    assert len(result["steps"]) == STEPS
    for i in range(STEPS):
        assert len(result["steps"][i]) == len(jit[i]) == len(eager[i])
        for j, (got, want, oracle) in enumerate(zip(result["steps"][i], jit[i], eager[i])):
            assert got.dtype == want.dtype and got.shape == want.shape
            # The JIT's numbers to the bit, eager's to f32 tolerance.
            assert np.array_equal(got, want), f"step {i}, tensor {j}: not the JIT's bits"
            np.testing.assert_allclose(got, oracle, rtol=RTOL, atol=ATOL,
                                       err_msg=f"step {i}, tensor {j}")
    assert result["miss"].startswith("shardx.load: 'mlp' has no compiled entry for these "
                                     "arguments (input 8: shape [4, 8] -> [2, 8]); the package ")
    assert "holds 1 entry: compile it where shardx-compile is and export again" in result["miss"]
    assert result["first"].startswith(
        "shardx.compile: 'jitfn' needs shardx-compile for its first call (input 0: [4, 4] f32 "
        "R), and this host has none (shardx-compile not found")
    assert "export it (CompiledFunction.export) and shardx.load the package" in result["first"]
    assert np.array_equal(result["seeded"], jit[0][0])
    assert result["recompile"].startswith(
        "shardx.compile: 'mlp' needs shardx-compile for a new entry (input 8: shape [4, 8] -> "
        "[2, 8])")
    # The artifact went into the host's compile cache, under its checksum.
    [so] = [n for n in result["cache"] if n.endswith(".so")]
    digest = json.loads(zipfile.ZipFile(package).read("manifest.json"))[
        "entries"][0]["executable"]["sha256"]
    assert so == f"aot-{digest}.so" and f"aot-{digest}.json" in result["cache"]


# -- in-place updates -----------------------------------------------------

def _update(a, b):
    a.mul_(2).add_(b)
    return a.sum(0), b * 3


def test_in_place_update_and_its_alias_variant_round_trip(tmp_path):
    mesh = Mesh((2,), ("dp",))
    f = shardx.compile(_update, mesh, [[Shard(0)], [Shard(0)]], name="update")
    torch.manual_seed(1)
    x, y = torch.randn(8, 4), torch.randn(8, 4)
    # Eager and the JIT, apart and aliased (a variant of the entry).
    ex, a = x.clone(), x.clone()
    eager_apart = _update(ex, y.clone()) + (ex,)
    jit_apart = f(a, y.clone()) + (a,)
    apart_only = f.export(tmp_path / "apart.shardx")
    # Two objects of one memory (the same object is another guard key,
    # ``same_as``, not a variant).
    ez, c = x.clone(), x.clone()
    eager_alias = _update(ez, ez.view(8, 4)) + (ez,)
    jit_alias = f(c, c.view(8, 4)) + (c,)
    assert f.compiles == 2
    assert f.recompile_reasons == ["the inputs written in place alias others differently: "
                                   "none -> inputs 0=1"]
    for got, want in zip(jit_apart + jit_alias, eager_apart + eager_alias):
        np.testing.assert_allclose(numpy(got), want.numpy(), rtol=RTOL, atol=ATOL)
    package = f.export(tmp_path / "update.shardx")
    manifest = json.loads(zipfile.ZipFile(package).read("manifest.json"))
    [entry] = manifest["entries"]
    assert entry["executable"]["mutated"] == [0] and len(entry["executable"]["variants"]) == 1

    data = {"package": str(package), "x": x.numpy(), "y": y.numpy()}
    result, _ = run_runtime_only(tmp_path, """
        h = shardx.load(data["package"])
        x, y = data["x"], data["y"]
        a = x.copy()
        s, b3 = h(a, y.copy())
        result["apart"] = [s.full(), b3.full(), a]
        c = x.copy()
        s, b3 = h(c, c.view())
        result["alias"] = [s.full(), b3.full(), c]
        # A ShardedTensor written in place points at the new shards.
        t = ShardedTensor.from_numpy(x.copy(), h.mesh, h.in_placements[0])
        h(t, y.copy())
        result["sharded"] = t.full()
        assert h.compiles == 0
    """, data)
    for got, want, oracle in zip(result["apart"] + result["alias"],
                                 jit_apart + jit_alias, eager_apart + eager_alias):
        assert np.array_equal(got, numpy(want))
        np.testing.assert_allclose(got, oracle.numpy(), rtol=RTOL, atol=ATOL)
    assert np.array_equal(result["sharded"], result["apart"][2])
    assert not np.array_equal(result["apart"][2], x.numpy())  # written at all
    # Exported before the aliased call: that variant is missing, and the
    # call neither compiles nor writes anything.
    h = shardx.load(apart_only)
    c = x.clone()
    with pytest.raises(MissingEntryError, match=r"'update' has no compiled entry for these "
                       r"arguments \(the inputs written in place alias others differently: "
                       r"none -> inputs 0=1\)"):
        h(c, c.view(8, 4))
    with pytest.raises(MissingEntryError, match=r"'update' has no compiled entry for these "
                       r"arguments \(input 1: a plain contiguous tensor -> the same tensor as "
                       r"input 0\)"):
        h(c, c)
    assert torch.equal(c, x) and h.compiles == 0


def _grad_of_first(a, b):
    return torch.autograd.grad((a * b).sum(), (a,))


def test_an_argument_passed_twice_round_trips(tmp_path):
    """The entry traced for one tensor passed twice (guard ``same_as``)
    is its own in the package, and a loaded package takes that call."""
    f = shardx.compile(_grad_of_first, Mesh((1,)), name="twice")
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    y = torch.randn(4, dtype=torch.float64, requires_grad=True)
    want_twice, want_apart = _grad_of_first(x, x)[0], _grad_of_first(x, y)[0]
    assert torch.equal(want_twice, 2 * x.detach())
    f(x, x), f(x, y)
    h = shardx.load(f.export(tmp_path / "twice.shardx"))
    for _ in range(2):
        np.testing.assert_array_equal(h(x, x)[0].full(), want_twice.numpy())
        np.testing.assert_array_equal(h(x, y)[0].full(), want_apart.numpy())
    assert h.compiles == 0


Moments = collections.namedtuple("Moments", "mean var")


def _moments(x):
    return Moments(x.mean(0), x.var(0)), torch.max(x, dim=1)


def test_named_tuples_round_trip(tmp_path):
    """A function returning a collections.namedtuple of a module's top
    level and a torch.return_types one: a loaded package returns them as
    their classes. A class the package cannot name again (defined in a
    function) is a PackageError at export."""
    f = shardx.compile(_moments, Mesh((2,), ("dp",)), [[Shard(0)]], name="moments")
    x = torch.randn(8, 4, dtype=torch.float64)
    want = _moments(x)
    f(x)
    h = shardx.load(f.export(tmp_path / "moments.shardx"))
    got = h(x)
    assert type(got[0]) is Moments and type(got[1]) is type(want[1])
    for g, w in zip(pytree.tree_leaves(got), pytree.tree_leaves(want)):
        torch.testing.assert_close(torch.from_numpy(g.full()), w)
    Local = collections.namedtuple("Local", "y")
    k = shardx.compile(lambda t: Local(t + 1), Mesh((1,)), name="local")
    k(x)
    with pytest.raises(PackageError, match="named tuple class Local .* define it at a "
                                           "module's top level"):
        k.export(tmp_path / "local.shardx")


# -- pytrees and Python constants -----------------------------------------
# -- pytrees and Python constants -----------------------------------------

def _tree_fn(x, cfg):
    y = x * cfg["scale"] if cfg["flag"] else x
    return {"y": y, "consts": [None, True, -0.0, float("nan"), "s", 3, 1.5e300],
            "pair": (x + 1, cfg[0])}


def _cfg(**over):
    cfg = {"scale": 2.0, "flag": True, "zero": -0.0, "nan": float("nan"), "name": "s",
           "none": None, 0: 7}
    cfg.update(over)
    return cfg


def test_pytree_outputs_and_constants_round_trip(tmp_path):
    mesh = Mesh((2,), ("dp",))
    f = shardx.compile(_tree_fn, mesh, [[Shard(0)]], name="tree")
    x = torch.randn(4, 6)
    want = f(x, _cfg())
    package = f.export(tmp_path / "tree.shardx")
    h = shardx.load(package)
    got = h(x.numpy(), _cfg(nan=float("nan")))  # another NaN object passes the guard
    assert h.compiles == 0 and set(got) == {"y", "consts", "pair"}
    assert np.array_equal(got["y"].full(), want["y"].full())
    np.testing.assert_allclose(got["y"].full(), (x * 2).numpy(), rtol=RTOL)
    assert np.array_equal(got["pair"][0].full(), (x + 1).numpy())
    assert type(got["pair"]) is tuple and got["pair"][1] == 7 and type(got["pair"][1]) is int
    none, true, zero, nan, text, three, big = got["consts"]
    assert type(got["consts"]) is list
    assert none is None and true is True and text == "s" and big == 1.5e300
    assert type(three) is int and three == 3
    assert zero == 0.0 and math.copysign(1.0, zero) == -1.0 and math.isnan(nan)
    # Constants are guards, as under the JIT: -0.0 is not 0.0, True is not 1.
    with pytest.raises(MissingEntryError, match=r"\(argument 1\['zero'\]: -0\.0 -> 0\.0\)"):
        h(x.numpy(), _cfg(zero=0.0))
    with pytest.raises(MissingEntryError, match=r"argument 1\['flag'\]: True -> 1\b"):
        h(x.numpy(), _cfg(flag=1))
    with pytest.raises(MissingEntryError, match=r"dict keys"):
        h(x.numpy(), {**_cfg(), "extra": 1})
    # A loaded function exports again.
    again = shardx.load(h.export(tmp_path / "again.shardx"))
    assert np.array_equal(again(x, _cfg())["y"].full(), want["y"].full())


def test_spec_json_round_trip():
    values = [(None, True, False, 0, -1, 2 ** 70, 0.0, -0.0, float("nan"), float("inf"),
               -float("inf"), 5e-324, "", "ü"),
              [{"a": 1, 2: [None], None: "x", True: 1.0, 3.5: ()}], {}, []]
    for v in values:
        spec = _flatten(v, [])
        back = aot.decode_spec(json.loads(json.dumps(aot.encode_spec(spec))))
        assert back == spec and hash(back) == hash(spec)
        assert {back: 1}.get(spec) == 1
    assert aot.decode_spec(aot.encode_spec(_flatten(1, []))) != _flatten(True, [])
    assert aot.decode_spec(aot.encode_spec(_flatten(-0.0, []))) != _flatten(0.0, [])
    # What export refuses: a dict key that is not a Python constant.
    with pytest.raises(PackageError, match="a dict key: a tuple cannot be stored"):
        aot.encode_spec(_flatten({(1, 2): torch.ones(1)}, []))


# -- errors ---------------------------------------------------------------

def _dp_fn(w, x):
    return torch.tanh(x @ w).sum(0), w * 0.5


def _dp_package(tmp_path):
    mesh = Mesh((2,), ("dp",))
    f = shardx.compile(_dp_fn, mesh, [[Replicate()], [Shard(0)]], name="dp_fn")
    w, x = torch.randn(16, 8), torch.randn(8, 16)
    f(w, x)
    assert f.export(tmp_path / "dp.shardx") == str(tmp_path / "dp.shardx")
    return f, tmp_path / "dp.shardx", (w, x)


def _rewrite(src, dst, change):
    """A copy of the package ``src`` at ``dst`` with ``change(members)``
    applied to its {name: bytes}."""
    with zipfile.ZipFile(src) as z:
        members = {n: z.read(n) for n in z.namelist()}
    change(members)
    with zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for n, data in members.items():
            z.writestr(n, data)
    return dst


def _edit_manifest(edit):
    def change(members):
        m = json.loads(members["manifest.json"])
        edit(m)
        members["manifest.json"] = json.dumps(m).encode()
    return change


def test_damaged_packages_raise_package_error(tmp_path, monkeypatch):
    f, package, (w, x) = _dp_package(tmp_path)
    with zipfile.ZipFile(package) as z:
        [so] = [n for n in z.namelist() if n.endswith(".so")]
        info = z.getinfo(so)
    raw = bytearray(package.read_bytes())
    # A flipped byte in the middle of the .so's stored data.
    flipped = tmp_path / "flipped.shardx"
    at = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra) \
        + info.compress_size // 2
    raw[at] ^= 0x40
    flipped.write_bytes(bytes(raw))

    def flip_so(members):
        data = bytearray(members[so])
        data[len(data) // 2] ^= 1
        members[so] = bytes(data)

    def lie_about_outputs(m):
        m["entries"][0]["executable"]["out_keys"][0]["shape"] = [9]

    def drop(m):
        del m["entries"][0]["executable"]["out_spec"]

    cases = {
        flipped: r"damaged|checksum",
        _rewrite(package, tmp_path / "edited.shardx", flip_so): r"fails its checksum",
        _rewrite(package, tmp_path / "missing.shardx", lambda m: m.pop(so)):
            r"is incomplete: it has no artifacts/[0-9a-f]{64}\.so",
        _rewrite(package, tmp_path / "nomanifest.shardx", lambda m: m.pop("manifest.json")):
            r"is not a ShardX package \(no manifest\.json\)",
        _rewrite(package, tmp_path / "notjson.shardx",
                 lambda m: m.update({"manifest.json": b"{not json"})): r"is not JSON",
        _rewrite(package, tmp_path / "format.shardx",
                 _edit_manifest(lambda m: m.update(format_version=99))):
            r"package format version 99; this ShardX reads version 1",
        _rewrite(package, tmp_path / "version.shardx",
                 _edit_manifest(lambda m: m.update(shardx_version="9.9"))):
            r"made by ShardX '9\.9'",
        _rewrite(package, tmp_path / "malformed.shardx", _edit_manifest(drop)):
            r"manifest\.json is malformed \(KeyError: 'out_spec'\)",
        _rewrite(package, tmp_path / "lies.shardx", _edit_manifest(lie_about_outputs)):
            r"the manifest does not describe artifacts/",
        _rewrite(package, tmp_path / "arch.shardx", _edit_manifest(
            lambda m: m["entries"][0]["executable"].update(target="cpu-sparc-threads"))):
            r"holds code for cpu-sparc-threads",
        tmp_path / "absent.shardx": r"no package",
    }
    truncated = tmp_path / "truncated.shardx"
    truncated.write_bytes(package.read_bytes()[:len(raw) // 2])
    cases[truncated] = r"not a ShardX package \(not a readable zip"
    text = tmp_path / "text.shardx"
    text.write_text("hello")
    cases[text] = r"not a ShardX package"
    for i, (path, message) in enumerate(cases.items()):
        # A fresh cache each time: a good copy of the artifact cached by an
        # earlier load must not hide a damaged package.
        monkeypatch.setenv("SHARDX_CACHE_DIR", str(tmp_path / f"cache{i}"))
        with pytest.raises(PackageError, match=message) as err:
            shardx.load(path)
        assert str(path) in str(err.value), err.value
    # The good package still loads, and a backend that cannot run it is refused.
    h = shardx.load(package)
    assert np.array_equal(h(w, x)[0].full(), f(w, x)[0].full())
    with pytest.raises(PackageError, match="backend 'threads'.*cannot run on backend 'nccl'"):
        shardx.load(package, backend="nccl")


def test_export_is_whole_or_nothing(tmp_path, cache):
    f, package, _ = _dp_package(tmp_path)
    before = package.read_bytes()
    # The entry's artifact gone from the cache: a clear error, and the old
    # package stays as it was, with no temporary file beside it.
    [so] = [p for p in cache.iterdir() if p.suffix == ".so"]
    so.unlink()
    with pytest.raises(PackageError, match="no longer in the compile cache"):
        f.export(package)
    assert package.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "dp.shardx"]
    g = shardx.compile(_dp_fn, Mesh((2,), ("dp",)), name="dp_fn")
    with pytest.raises(PackageError, match="'dp_fn' has no compiled entry yet"):
        g.export(tmp_path / "empty.shardx")
    assert not (tmp_path / "empty.shardx").exists()


def test_jit_without_compiler_raises_missing_entry(tmp_path, monkeypatch):
    mesh = Mesh((2,), ("dp",))
    w, x = torch.randn(16, 8), torch.randn(8, 16)
    f = shardx.compile(_dp_fn, mesh, [[Replicate()], [Shard(0)]], name="dp_fn")
    f(w, x)
    package = f.export(tmp_path / "dp.shardx")
    # No compiler from here on.
    monkeypatch.setenv("SHARDX_BUILD", str(tmp_path / "nothing"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    with pytest.raises(ArtifactError):
        find_tool("shardx-compile")
    misses = shardx.cache_stats.misses
    with pytest.raises(MissingEntryError, match=r"'dp_fn' needs shardx-compile for a new entry "
                                                r"\(input 1: shape \[8, 16\] -> \[4, 16\]\)"):
        f(w, torch.randn(4, 16))
    g = shardx.compile(_dp_fn, mesh, [[Replicate()], [Shard(0)]], name="dp_fn")
    with pytest.raises(MissingEntryError, match=r"'dp_fn' needs shardx-compile for its first call "
                                                r"\(input 0: \[16, 8\] f32 R, input 1: "
                                                r"\[8, 16\] f32 \[S\(0\)\]\)"):
        g(w, x)
    assert g.compiles == 0 and shardx.cache_stats.misses == misses
    # Seeded from the package, the same function runs without compiling.
    assert g.load_package(package) == 1 and g.load_package(package) == 0
    assert np.array_equal(g(w, x)[0].full(), f(w, x)[0].full())
    assert g.compiles == 0
    other = shardx.compile(_dp_fn, mesh, [[Shard(0)], [Shard(0)]], name="dp_fn")
    with pytest.raises(PackageError, match="was not compiled like 'dp_fn': input placements"):
        other.load_package(package)


def test_function_without_a_mesh_round_trips(tmp_path):
    def sine(x):
        return x.sin() * 2

    f = shardx.compile(sine, None)
    x = torch.randn(5, 3)
    want = f(x).full()
    h = shardx.load(f.export(tmp_path / "sine.shardx"))
    assert h._trace_mesh is None and h.mesh.shape == (1,)
    assert np.array_equal(h(x.numpy()).full(), want)
    np.testing.assert_allclose(want, sine(x).numpy(), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("mesh", [None, Mesh((2,), ("x",))], ids=["1-rank", "2-ranks"])
def test_lifted_parameters_and_traits_round_trip(tmp_path, mesh):
    """An entry whose module parameters the JIT lifted to inputs keeps their
    values at export (``lifted/<sha256>.npy`` members, as torch.export keeps
    a module's state), and an entry traced with a non-plain argument (a
    transposed tensor) keeps its traits in its guard: the loaded function
    gives the JIT's numbers for both, and each argument goes to its own
    entry."""
    torch.manual_seed(0)
    m = nn.Linear(4, 4)

    def fn(x):
        return m(x) * 2 if x.is_contiguous() else m(x) * 3

    f = shardx.compile(fn, mesh)
    x = torch.randn(4, 4)
    plain, transposed = f(x).full(), f(x.t()).full()
    assert f.compiles == 2 and all(e.lifted for e in f._executables.values())
    h = shardx.load(f.export(tmp_path / "lin.shardx"))
    with torch.no_grad():
        m.weight.mul_(2)  # after export: the package keeps the values it had
    assert np.array_equal(full(h(x)), plain)
    assert np.array_equal(full(h(x.t())), transposed)
    assert np.array_equal(full(h(x)), plain)  # the C++ call path's entry
    assert not np.array_equal(plain, transposed)


def test_random_ops_draw_new_seeds_from_a_package_without_pytorch(tmp_path):
    """A package of a function with dropout draws a new seed before each
    call on a host without PyTorch (numpy's generator there: repeatable
    under np.random.seed), as the compiled function does from PyTorch's."""
    mesh = Mesh((2,), ("dp",))

    def drop(x):
        return F.dropout(x, 0.5, training=True)

    f = shardx.compile(drop, mesh, [[Shard(0)]], [[Shard(0)]])
    x = torch.ones(8, 6)
    a, b = f(x).full(), f(x).full()
    assert not np.array_equal(a, b) and set(np.unique(a)) == {0.0, 2.0}
    data = {"package": f.export(tmp_path / "drop.shardx"), "x": x.numpy()}
    result, _ = run_runtime_only(tmp_path, """
        h = shardx.load(data["package"])
        np.random.seed(3)
        first, second = h(data["x"]).full(), h(data["x"]).full()
        np.random.seed(3)
        result["calls"] = [first, second, h(data["x"]).full()]
    """, data)
    first, second, again = result["calls"]
    assert not np.array_equal(first, second) and np.array_equal(first, again)
    for out in (first, second):
        assert set(np.unique(out)) == {0.0, 2.0} and 0.3 < (out != 0).mean() < 0.7
