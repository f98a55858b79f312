"""Compiled ahead, run where no compiler is: ShardX packages.

``shardx.export(compiled_fn, "step.shardx")`` (or ``compiled_fn.export``)
writes every entry a ``shardx.compile`` function has compiled so far (each
guard, the alias variants of entries that write inputs in place included)
into one zip file, in the spirit of torch.export + AOTInductor's ``.pt2``
package; ``shardx.load("step.shardx")`` gives back a ``CompiledFunction``
that calls them with the same guards, donation, write-back and outputs,
on a host that has the runtime and its binding (``_shardx_rt``) but no
MLIR/LLVM, no ``shardx-compile`` and no need of torch. A call that passes
no entry's guard raises ``MissingEntryError``; nothing is compiled there.

The package (``FORMAT_VERSION`` 1):

- ``manifest.json``: ``format`` ("shardx-package"), ``format_version``,
  ``shardx_version``, ``function``, ``mesh`` (shape, axis names and name;
  null for a function compiled without a mesh), ``backend``, ``target``
  (what the entries were compiled for, e.g. "cpu-x86_64-threads"),
  ``in_placements`` / ``out_placements`` (per flattened tensor, null or
  ``[kind, dim, split_factor, op]`` per mesh axis), ``donate`` (``[argument,
  output or null]`` pairs) and ``entries``: per entry its ``guard``
  (argument structure and per input shape, dtype and layout key) and what
  rebuilds its ``_Executable`` and ``CallPlan``: artifact member and
  SHA-256, target, entry point, input layouts (the runtime's layout JSON,
  ``Layout.to_json``), output structure and keys, donated pairs, the
  inputs it writes in place, their aliasing, and its variants.
- ``artifacts/<sha256>.so``: each artifact once.

Structures (the specs of ``shardx.pytree``) are in ``pytree.to_json``'s
JSON form: ``null`` for a tensor, ``{"node": "tuple"|"list", "children":
[...]}``, ``{"node": "dict", "keys": [...], "children": [...]}`` and
constants ``{"const": "none"|"bool"|"int"|"str", "value": ...}`` /
``{"const": "float", "hex": "-0x0.0p+0"}`` (floats bit for bit, "nan" and
"inf" included). Dict keys are constants too.

A package is code (shared objects run in this process), as a ``.pt2`` or a
pickle is: load only packages you trust. The checksums catch damage and
edits of an artifact, not a package rewritten as a whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import tempfile
import zipfile
import zlib
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import pytree

FORMAT = "shardx-package"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


class PackageError(ValueError):
    """A ShardX package that cannot be written or used: not a package, a
    damaged or edited member, a manifest this version cannot read, or
    entries for another host."""


# -- pytree specs (their JSON form is pytree.to_json's) -------------------

def encode_spec(spec, where: str = "the structure"):
    """The JSON form of a ``shardx.pytree`` spec (PackageError for what a
    package cannot hold: a dict key that is not a constant)."""
    try:
        return pytree.to_json(spec, where)
    except TypeError as e:
        raise PackageError(str(e)) from None


def decode_spec(d):
    """The ``shardx.pytree`` spec of its JSON form (equal to the one
    ``pytree.flatten`` makes of the same arguments)."""
    return pytree.from_json(d)


def _encode_key(key):
    spec, inputs = key[0], key[1]
    d = {"spec": encode_spec(spec, "the arguments"),
         "inputs": [{"shape": list(shape), "dtype": dtype, "layout": layout}
                    for shape, dtype, layout in inputs]}
    if len(key) > 2:
        # The inputs' traits (jit._traits: strides, requires_grad, ...),
        # null for a plain tensor.
        d["traits"] = [None if t is None else [list(v) if isinstance(v, tuple) else v
                                               for v in t] for t in key[2]]
    return d


def _tensor_key(d) -> Tuple:
    shape = tuple(d["shape"])
    if not all(type(s) is int and s >= 0 for s in shape) or type(d["dtype"]) is not str \
            or type(d["layout"]) is not str:
        raise ValueError(f"bad tensor key {d!r}")
    return shape, d["dtype"], d["layout"]


def _decode_key(d):
    key = decode_spec(d["spec"]), tuple(_tensor_key(t) for t in d["inputs"])
    traits = d.get("traits")
    if traits is None:
        return key
    from .jit import TRAIT_FIELDS
    if not isinstance(traits, list) or len(traits) != len(key[1]) or not all(
            t is None or (isinstance(t, list) and len(t) in (len(TRAIT_FIELDS) - 1,
                                                             len(TRAIT_FIELDS)))
            for t in traits):
        raise ValueError(f"bad input traits {traits!r}")
    # A package of 0.1.0 before ``same_as``: no argument was another's.
    traits = [t if t is None or len(t) == len(TRAIT_FIELDS) else t + [None] for t in traits]
    return key + (tuple(None if t is None else tuple(tuple(v) if isinstance(v, list) else v
                                                     for v in t) for t in traits),)


def _encode_placements(pls):
    from .sharded_tensor import placement_tuples
    if pls is None:
        return None
    return [None if p is None else [list(t) for t in placement_tuples(p)] for p in pls]


def _decode_placements(d):
    from .sharded_tensor import _placements_of
    if d is None:
        return None
    return [None if p is None else list(_placements_of([tuple(t) for t in p])) for p in d]


def donate_pairs(donate) -> List[List[Optional[int]]]:
    """``compile``'s ``donate`` (an argument number, numbers, or a dict
    argument -> output) as ``[argument, output or None]`` pairs."""
    if not donate:
        return []
    if isinstance(donate, int):
        return [[donate, None]]
    if isinstance(donate, dict):
        return [[int(a), None if o is None else int(o)] for a, o in donate.items()]
    return [[int(a), None] for a in donate]


def _partners_json(partners):
    return [[i, list(same)] for i, same in partners]


def _partners_of(d):
    return tuple((int(i), tuple(int(j) for j in same)) for i, same in d)


# -- export ---------------------------------------------------------------

def _cached_target(exe, name: str) -> Tuple[str, str, str]:
    """(sha256, target, compiler identity) of an entry's artifact in the
    compile cache; a PackageError where it is no longer there."""
    from .jit import _sha256
    meta = exe.path[:-len(".so")] + ".json" if exe.path.endswith(".so") else None
    try:
        with open(meta) as f:
            info = json.load(f)
        digest = _sha256(exe.path)
    except (OSError, TypeError, ValueError):
        raise PackageError(
            f"shardx.export: {name!r}: the artifact of an entry ({exe.path}) is no longer in the "
            "compile cache (evicted or removed): call the function with those arguments again "
            "and export then") from None
    if not isinstance(info, dict) or info.get("sha256") != digest:
        raise PackageError(f"shardx.export: {name!r}: the cached artifact {exe.path} fails its "
                           "checksum: call the function with those arguments again and export "
                           "then")
    return digest, str(info.get("target", "")), str(info.get("version", ""))


def _encode_executable(exe, name: str, artifacts: Dict[str, str]):
    if any(i >= len(exe.in_layouts) - len(exe.lifted) for i in exe.mutated):
        # Its program writes tensors the function reads besides its
        # arguments (jit._Executable.mutated past the arguments): the
        # loaded function would have no module to write them into.
        raise PackageError(
            f"shardx.export: {name!r}: an entry updates in place tensors the function reads "
            "besides its arguments (a module's buffers: BatchNorm's running statistics in "
            "training mode), which a package has nowhere to write back; call the function "
            "in eval mode (model.eval()) before exporting, or pass those tensors as "
            "arguments")
    digest, target, compiler = _cached_target(exe, name)
    member = f"artifacts/{digest}.so"
    artifacts[member] = exe.path
    return {"artifact": member, "sha256": digest, "target": target, "compiler": compiler,
            "cache_key": exe.key, "entry": exe.entry,
            "in_layouts": [None if l is None else l.to_json() for l in exe.in_layouts],
            "out_spec": encode_spec(exe.out_spec, "the outputs"),
            "out_keys": [{"shape": list(s), "dtype": d, "layout": l} for s, d, l in exe.out_keys],
            "donated": [[i, o] for i, o in exe.donated],
            "mutated": list(exe.mutated), "writes": list(exe.writes),
            "checks": [list(c) for c in exe.checks],
            "partners": _partners_json(exe.partners),
            "variants": [{"partners": _partners_json(p),
                          "executable": _encode_executable(v, name, artifacts)}
                         for p, v in exe.variants.items()],
            **_encode_lifted(exe, artifacts)}


def _encode_lifted(exe, artifacts: Dict[str, Any]) -> dict:
    """The tensors an entry lifted to inputs (module parameters, buffers,
    tensors it closes over: ``jit._Executable.lifted``), as their values at
    export (as ``torch.export`` keeps a module's state): one ``.npy`` member
    each, ``lifted/<sha256>.npy`` (``artifacts`` maps it to its bytes)."""
    if not exe.lifted:
        return {}
    import io
    members = []
    for t in exe.lifted:
        array = t.detach().cpu().contiguous().numpy() if hasattr(t, "detach") \
            else np.ascontiguousarray(t)
        buf = io.BytesIO()
        np.save(buf, array, allow_pickle=False)
        data = buf.getvalue()
        member = f"lifted/{hashlib.sha256(data).hexdigest()}.npy"
        artifacts[member] = data
        members.append(member)
    # The random ops' seed, the last of them, is drawn before each call.
    return {"lifted": members, **({"seed": True} if exe.seed is not None else {})}


def manifest_of(fn) -> Tuple[dict, Dict[str, str]]:
    """The manifest of a CompiledFunction's entries and the artifacts it
    names (member -> file)."""
    from .jit import VERSION
    if not fn._executables:
        raise PackageError(f"shardx.export: {fn.name!r} has no compiled entry yet: call it "
                           "with the arguments it will run on first")
    artifacts: Dict[str, str] = {}
    entries = [{"guard": _encode_key(key),
                "executable": _encode_executable(exe, fn.name, artifacts)}
               for key, exe in fn._executables.items()]
    mesh = fn._trace_mesh
    targets = sorted({e["executable"]["target"] for e in entries})
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "shardx_version": VERSION,
        "function": fn.name,
        "mesh": None if mesh is None else {"shape": list(mesh.shape),
                                           "axis_names": list(mesh.axis_names),
                                           "name": mesh.name},
        "backend": fn.backend, "target": targets[0] if len(targets) == 1 else targets,
        "in_placements": _encode_placements(fn.in_placements),
        "out_placements": _encode_placements(fn.out_placements),
        "donate": donate_pairs(fn.donate),
        "entries": entries,
    }
    return manifest, artifacts


def export(fn, path) -> str:
    """Writes ``fn``'s compiled entries (a ``shardx.compile`` function, or
    one ``shardx.load`` made) into the package ``path``: whole or not at
    all (a temporary name in the same folder, then a rename). Returns the
    path."""
    from .jit import CompiledFunction
    if not isinstance(fn, CompiledFunction):
        raise TypeError(f"shardx.export takes what shardx.compile returns, not "
                        f"{type(fn).__name__}")
    path = os.fspath(path)
    manifest, artifacts = manifest_of(fn)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED) as z:
                for member, file in sorted(artifacts.items()):
                    if isinstance(file, bytes):  # a lifted tensor's values
                        z.writestr(member, file)
                        continue
                    with open(file, "rb") as src:
                        data = src.read()
                    if hashlib.sha256(data).hexdigest() != member[len("artifacts/"):-len(".so")]:
                        raise PackageError(f"shardx.export: {file} changed while it was "
                                           "exported; export again")
                    z.writestr(member, data)
                z.writestr(MANIFEST, json.dumps(manifest, indent=1, allow_nan=False))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


# -- load -----------------------------------------------------------------

def read_manifest(path) -> Tuple[dict, zipfile.ZipFile]:
    """The package's manifest (checked for format and version) and the
    open zip file; PackageError for anything else."""
    from .jit import VERSION
    path = os.fspath(path)
    try:
        z = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise PackageError(f"shardx.load: no package {path!r}") from None
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise PackageError(f"shardx.load: {path!r} is not a ShardX package (not a readable zip "
                           f"file: {e})") from None
    try:
        try:
            raw = z.read(MANIFEST)
        except KeyError:
            raise PackageError(f"shardx.load: {path!r} is not a ShardX package (no "
                               f"{MANIFEST})") from None
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as e:
            raise PackageError(f"shardx.load: {path!r}: its {MANIFEST} is damaged ({e})") from None
        try:
            manifest = json.loads(raw.decode())
        except (UnicodeDecodeError, ValueError) as e:
            raise PackageError(f"shardx.load: {path!r}: its {MANIFEST} is not JSON ({e})") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise PackageError(f"shardx.load: {path!r}: its {MANIFEST} is not a ShardX package "
                               "manifest")
        if manifest.get("format_version") != FORMAT_VERSION:
            raise PackageError(f"shardx.load: {path!r} has package format version "
                               f"{manifest.get('format_version')!r}; this ShardX reads version "
                               f"{FORMAT_VERSION}: export it again with this version")
        if manifest.get("shardx_version") != VERSION:
            raise PackageError(f"shardx.load: {path!r} was made by ShardX "
                               f"{manifest.get('shardx_version')!r}; this is ShardX {VERSION}: "
                               "compile and export it again with this version")
    except BaseException:
        z.close()
        raise
    return manifest, z


def _check_backend(manifest, backend: Optional[str], path: str) -> str:
    """The backend a loaded package runs on: its own, or another that runs
    the same artifacts (threads / mpi for CPU targets, cuda / nccl for
    cuda targets)."""
    own = manifest["backend"]
    if backend == "cuda-local":
        backend = "cuda"
    if backend is None or backend == own:
        return own
    targets = manifest["target"] if isinstance(manifest["target"], list) else [manifest["target"]]
    # Backends that run the same artifact: the CPU ones, the GPU ones.
    for family, prefix in ((("threads", "mpi"), "cpu-"), (("cuda", "nccl"), "cuda-")):
        if own in family and backend in family and all(str(t).startswith(prefix)
                                                       for t in targets):
            return backend
    raise PackageError(f"shardx.load: {path!r} was compiled for backend {own!r} (target "
                       f"{', '.join(map(str, targets))}); it cannot run on backend {backend!r}")


def _check_target(target: str, path: str) -> None:
    if target.startswith("cpu-"):
        arch = target.split("-")[1] if target.count("-") >= 1 else ""
        if arch != platform.machine():
            raise PackageError(f"shardx.load: {path!r} holds code for {target}; this host is "
                               f"{platform.machine()}")


def _extract(z: zipfile.ZipFile, member: str, digest: str, target: str, path: str) -> str:
    """The artifact ``member`` as a file of the compile cache
    (``aot-<sha256>.so``, with a ``.json`` like the JIT's entries, so the
    cache's size cap counts and evicts it). The member is checked against
    ``digest`` every time, even where the cache has it already: a damaged
    package never loads."""
    from .jit import VERSION, _sha256, _usable_cache_dir
    try:
        data = z.read(member)
    except KeyError:
        raise PackageError(f"shardx.load: {path!r} is incomplete: it has no {member}") from None
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as e:
        raise PackageError(f"shardx.load: {path!r}: {member} is damaged ({e})") from None
    got = hashlib.sha256(data).hexdigest()
    if got != digest:
        raise PackageError(f"shardx.load: {path!r}: {member} fails its checksum (sha256 {got}, "
                           f"the manifest says {digest}): the package is damaged or was "
                           "modified")
    folder = _usable_cache_dir()
    key = f"aot-{digest}"
    so, meta = os.path.join(folder, key + ".so"), os.path.join(folder, key + ".json")
    try:
        if os.path.exists(meta) and _sha256(so) == digest:
            os.utime(meta)  # last use, for the LRU eviction
            return so
    except OSError:
        pass
    for final, suffix, content in ((so, ".so", data), (meta, ".json", json.dumps(
            {"key": key, "sha256": digest, "target": target, "version": VERSION,
             "package": os.path.abspath(path)}).encode())):
        fd, tmp = tempfile.mkstemp(prefix=key + ".", suffix=suffix, dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(content)
            if suffix == ".so":
                os.chmod(tmp, 0o755)
            os.replace(tmp, final)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return so


def _rebuild(fn, d, key, z, path: str, loaded: Dict[str, Any]):
    """The ``_Executable`` of an entry's JSON (``key``: its guard key), its
    artifact loaded from the compile cache and its call plan made as
    ``_compile`` makes it."""
    from .jit import _Executable, _plan_traits
    from .sharded_tensor import dtype_name, layout_key, runtime
    rt = runtime()
    digest, target = d["sha256"], d["target"]
    if not (isinstance(digest, str) and len(digest) == 64) or d["artifact"] != \
            f"artifacts/{digest}.so":
        raise ValueError(f"bad artifact {d['artifact']!r}")
    _check_target(target, path)
    artifact = loaded.get(digest)
    if artifact is None:
        so = _extract(z, d["artifact"], digest, target, path)
        try:
            artifact = rt.Artifact(so)
        except RuntimeError as e:
            raise PackageError(f"shardx.load: {path!r}: {d['artifact']} does not load ({e})") \
                from None
        loaded[digest] = artifact
    if list(artifact.mesh_shape) != list(fn.mesh.shape):
        raise PackageError(f"shardx.load: {path!r}: {d['artifact']} runs on mesh "
                           f"{list(artifact.mesh_shape)}, the manifest says {list(fn.mesh.shape)}")
    entry = d["entry"]
    if entry not in artifact.entry_points:
        raise PackageError(f"shardx.load: {path!r}: {d['artifact']} has no entry point {entry!r}")
    in_layouts = [None if l is None else rt.Layout.from_json(l) for l in d["in_layouts"]]
    out_spec = decode_spec(d["out_spec"])
    out_keys = [_tensor_key(k) for k in d["out_keys"]]
    # The manifest against the artifact's own description.
    ins, outs = artifact.inputs(entry), artifact.outputs(entry)
    want_ins = [(tuple(o["global_shape"]), o["dtype"], layout_key(o["layout"])) for o in ins]
    want_outs = [(tuple(o["global_shape"]), o["dtype"], layout_key(o["layout"])) for o in outs]
    lifted = [_lifted_array(z, m, path) for m in d.get("lifted", [])]
    if out_keys != want_outs or len(in_layouts) != len(ins) or \
            [layout_key(l) for l in in_layouts] != [k[2] for k in want_ins] or \
            list(key[1]) + [(tuple(a.shape), dtype_name(a)) for a in lifted] != \
            list(want_ins[:len(key[1])]) + [k[:2] for k in want_ins[len(key[1]):]]:
        raise PackageError(f"shardx.load: {path!r}: the manifest does not describe "
                           f"{d['artifact']} (its inputs and outputs differ)")
    donated = [(int(i), int(o)) for i, o in d["donated"]]
    if any(not 0 <= int(i) < len(key[1]) for i in d["mutated"]):
        raise ValueError(f"an input written back is not an argument: {d['mutated']}")
    if d.get("seed") and lifted:
        lifted[-1] = lifted[-1].copy()  # the random ops' seed: drawn into before each call
    plan_spec = key[0] if not lifted else (tuple, (key[0], (tuple, (None,) * len(lifted))))
    traits = key[2] if len(key) > 2 else None
    plan = fn._make_plan(artifact, entry, plan_spec, out_spec, out_keys, donated, traits)
    variants = {}
    for v in d["variants"]:
        variants[_partners_of(v["partners"])] = _rebuild(fn, v["executable"], key, z, path,
                                                         loaded)
    return _Executable(artifact, entry, in_layouts, out_spec, out_keys, donated, d["cache_key"],
                       artifact.path, plan, [int(i) for i in d["mutated"]],
                       [int(i) for i in d["writes"]], _partners_of(d["partners"]), variants,
                       [(str(e), str(m)) for e, m in d.get("checks", [])],
                       lifted=lifted, extra=tuple(lifted),
                       seed=lifted[-1] if d.get("seed") and lifted else None,
                       fast=traits is None or _plan_traits(traits) is not None)


def _lifted_array(z, member, path: str):
    """A lifted tensor's values (``_encode_lifted``), checked against the
    digest in its name; read-only."""
    import io
    if not (isinstance(member, str) and re.fullmatch(r"lifted/[0-9a-f]{64}\.npy", member)):
        raise ValueError(f"bad lifted tensor member {member!r}")
    try:
        data = z.read(member)
    except KeyError:
        raise PackageError(f"shardx.load: {path!r}: {member} is missing") from None
    if hashlib.sha256(data).hexdigest() != member[len("lifted/"):-len(".npy")]:
        raise PackageError(f"shardx.load: {path!r}: {member} fails its checksum")
    array = np.load(io.BytesIO(data), allow_pickle=False)
    array.flags.writeable = False
    return array


def entries_of(fn, manifest, z, path: str) -> Dict[Any, Any]:
    """The ``_executables`` of a package's entries, for ``fn`` (whose mesh,
    session and name the call plans take)."""
    from .jit import evict
    loaded: Dict[str, Any] = {}
    out = {}
    try:
        for e in manifest["entries"]:
            key = _decode_key(e["guard"])
            out[key] = _rebuild(fn, e["executable"], key, z, path, loaded)
    except PackageError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise PackageError(f"shardx.load: {path!r}: its {MANIFEST} is malformed "
                           f"({type(e).__name__}: {e})") from None
    if not out:
        raise PackageError(f"shardx.load: {path!r} holds no entries")
    if loaded:
        from .jit import _usable_cache_dir
        evict(_usable_cache_dir(), keep=f"aot-{next(reversed(loaded))}")
    return out


def load(path, backend: Optional[str] = None):
    """The function a package holds, as a ``CompiledFunction`` that runs its
    entries and compiles nothing: a call that passes no entry's guard
    raises ``jit.MissingEntryError``. ``backend``: the package's (None), or
    another that runs the same artifacts ("threads" / "mpi" for CPU
    targets, "cuda" / "nccl" for cuda targets)."""
    from .jit import CompiledFunction
    from .placements import Mesh
    path = os.fspath(path)
    manifest, z = read_manifest(path)
    with z:
        try:
            m = manifest["mesh"]
            mesh = None if m is None else Mesh(tuple(m["shape"]), tuple(m["axis_names"]),
                                                m.get("name", "mesh"))
            backend = _check_backend(manifest, backend, path)
            name = manifest["function"]
            in_pl = _decode_placements(manifest["in_placements"])
            out_pl = _decode_placements(manifest["out_placements"])
            donate = {int(a): o for a, o in manifest["donate"]}
            if not isinstance(name, str) or not isinstance(manifest["entries"], list):
                raise ValueError("bad function name or entries")
        except PackageError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            raise PackageError(f"shardx.load: {path!r}: its {MANIFEST} is malformed "
                               f"({type(e).__name__}: {e})") from None
        fn = CompiledFunction(None, mesh, in_pl, out_pl, backend, donate, name)
        fn._package = path
        fn._executables.update(entries_of(fn, manifest, z, path))
    return fn


def seed(fn, path) -> int:
    """Adds a package's entries to a ``shardx.compile`` function (one of the
    same mesh, backend, input placements and donation); the function
    compiles only what the package lacks. Returns the entries added."""
    path = os.fspath(path)
    manifest, z = read_manifest(path)
    with z:
        mesh = fn._trace_mesh
        theirs = manifest.get("mesh")
        ours = None if mesh is None else {"shape": list(mesh.shape),
                                          "axis_names": list(mesh.axis_names), "name": mesh.name}
        problems = []
        if theirs != ours:
            problems.append(f"mesh {theirs} != {ours}")
        try:
            _check_backend(manifest, fn.backend, path)
        except (KeyError, TypeError) as e:
            raise PackageError(f"load_package: {path!r}: its {MANIFEST} is malformed "
                               f"({type(e).__name__}: {e})") from None
        if manifest.get("in_placements") != _encode_placements(fn.in_placements):
            problems.append("input placements differ")
        if manifest.get("donate") != donate_pairs(fn.donate):
            problems.append(f"donate {manifest.get('donate')} != {donate_pairs(fn.donate)}")
        if problems:
            raise PackageError(f"load_package: {path!r} was not compiled like {fn.name!r}: "
                               + "; ".join(problems))
        entries = entries_of(fn, manifest, z, path)
    added = 0
    for key, exe in entries.items():
        if key not in fn._executables:
            fn._executables[key] = exe
            added += 1
    return added
