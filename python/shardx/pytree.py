"""The one pytree of ShardX: how ``shardx.compile``, ``shardx.export`` /
``shardx.load`` and ``shardx.train`` take nested arguments and results apart
and put them back together.

Nodes are exact tuples, lists and dicts (torch's order: a dict's values in
insertion order, as ``torch.utils._pytree``), and named tuples: a
``collections.namedtuple`` class or a ``torch.return_types`` one
(``torch.max(x, dim=0)``'s ``values, indices``), each a node of its own
type, as ``torch.compile`` returns them; ``None``, bools, ints, floats
and strings are *constants*, part of the structure (an argument's value is a
guard, as under ``torch.compile``; an output's value is returned as traced);
anything else is a leaf (a tensor). Unlike ``torch.utils._pytree``, where a
Python number is a leaf, a constant here is compared by value, so that a
compiled function is recompiled when it changes.

A *spec* is the structure without the leaves. It is hashable (a compile
cache's guard key) and it is the public contract between this module and
the binding's compiled calls (``_shardx_rt.CallPlan`` parses a spec once and
then checks each call's arguments against it in C++):

- ``None``: a leaf;
- ``(tuple, children)`` / ``(list, children)``; ``(cls, children)`` for
  a named tuple class ``cls`` (``is_named_tuple``);
- ``(dict, keys, children)``;
- ``(None, value, tag)``: a constant; ``tag`` is the value's type, or for a
  float its ``float.hex()``, so that ``True`` and ``1``, ``-0.0`` and
  ``0.0`` differ; every NaN is the one ``NAN`` (a NaN constant equals
  itself).

``to_json`` / ``from_json`` give a spec's JSON form (ShardX packages):
``null`` for a leaf, ``{"node": "tuple"|"list", "children": [...]}``,
``{"node": "namedtuple", "type": "module:qualname", "children": [...]}``
(the class imported again where the package is loaded),
``{"node": "dict", "keys": [...], "children": [...]}`` and constants
``{"const": "none"|"bool"|"int"|"str", "value": ...}`` / ``{"const":
"float", "hex": "-0x0.0p+0"}``. Dict keys are constants too.
"""

from __future__ import annotations

from typing import Any, Iterable, List, Optional, Tuple

#: The Python values a tree holds as constants.
CONSTANTS = (type(None), bool, int, float, str)
#: The one NaN the specs hold.
NAN = float("nan")


def is_named_tuple(t) -> bool:
    """Whether class ``t`` is a named tuple this pytree takes apart: a
    ``collections.namedtuple`` class (``_fields`` and ``_make``) or a
    struct sequence (``torch.return_types``: ``n_sequence_fields``), whose
    fields are all in its tuple."""
    if not isinstance(t, type) or not issubclass(t, tuple) or t is tuple:
        return False
    if isinstance(getattr(t, "_fields", None), tuple) and callable(getattr(t, "_make", None)):
        return True
    n = getattr(t, "n_sequence_fields", None)
    return isinstance(n, int) and n == getattr(t, "n_fields", None)


def _make(t, values: List[Any]):
    """A ``t`` (tuple, list or named tuple class) of ``values``."""
    if t is tuple or t is list:
        return t(values)
    make = getattr(t, "_make", None)
    return make(values) if make is not None else t(values)


def flatten_into(x, leaves: List[Any]):
    """The spec of ``x``; its leaves are appended to ``leaves``."""
    t = type(x)
    if t is tuple or t is list or is_named_tuple(t):
        return (t, tuple([flatten_into(v, leaves) for v in x]))
    if t is dict:
        return (dict, tuple(x), tuple([flatten_into(v, leaves) for v in x.values()]))
    if t in CONSTANTS:
        if t is float:
            if x != x:
                x = NAN
            return (None, x, x.hex())
        return (None, x, t)
    leaves.append(x)
    return None


def flatten(x) -> Tuple[Any, List[Any]]:
    """``(spec, leaves)`` of ``x``."""
    leaves: List[Any] = []
    return flatten_into(x, leaves), leaves


def unflatten(spec, leaves: Iterable[Any]):
    """The tree of ``spec`` over ``leaves`` (in flatten's order)."""
    return _build(spec, iter(leaves))


def _build(spec, it):
    if spec is None:
        return next(it)
    if spec[0] is None:
        return spec[1]
    if spec[0] is dict:
        return {k: _build(c, it) for k, c in zip(spec[1], spec[2])}
    return _make(spec[0], [_build(c, it) for c in spec[1]])


def count_leaves(spec) -> int:
    """How many leaves a tree of ``spec`` holds."""
    if spec is None:
        return 1
    if spec[0] is None:
        return 0
    return sum(count_leaves(c) for c in spec[-1])


def children(spec) -> Optional[Tuple[Any, ...]]:
    """The children of a tuple, list or dict node; None for a leaf or a
    constant."""
    if spec is None or spec[0] is None:
        return None
    return spec[-1]


def leaves_with_paths(x) -> List[Tuple[Tuple[Any, ...], Any]]:
    """``(path, leaf)`` per leaf of ``x``, in flatten's order; a path is the
    index or key taken at each node from the root."""
    out: List[Tuple[Tuple[Any, ...], Any]] = []

    def walk(spec, value, path):
        if spec is None:
            out.append((path, value))
        elif spec[0] is dict:
            for k, c in zip(spec[1], spec[2]):
                walk(c, value[k], path + (k,))
        elif spec[0] is not None:
            for i, c in enumerate(spec[1]):
                walk(c, value[i], path + (i,))

    walk(flatten(x)[0], x, ())
    return out


def difference(old, new, where: Optional[str] = None) -> Optional[str]:
    """Where two argument specs first differ, in words ("argument 1: 2.0 ->
    3.0", "argument 0['w']: a tensor -> None"); None where they are equal."""
    if old == new:
        return None
    here = where or "the arguments"
    if old is None or new is None or old[0] is None or new[0] is None:
        def what(s):
            return "a tensor" if s is None else (repr(s[1]) if s[0] is None else s[0].__name__)
        return f"{here}: {what(old)} -> {what(new)}"
    if old[0] is not new[0]:
        return f"{here}: {old[0].__name__} -> {new[0].__name__}"
    if old[0] is dict and old[1] != new[1]:
        return f"{here}: dict keys {list(old[1])} -> {list(new[1])}"
    if len(old[-1]) != len(new[-1]):
        return f"{here}: {len(old[-1])} -> {len(new[-1])} entries"
    keys = old[1] if old[0] is dict else range(len(old[-1]))
    for k, a, b in zip(keys, old[-1], new[-1]):
        d = difference(a, b, f"argument {k}" if where is None else f"{where}[{k!r}]")
        if d:
            return d
    return None


# -- JSON -----------------------------------------------------------------

def _constant_to_json(value, where: str):
    t = type(value)
    if value is None:
        return {"const": "none"}
    if t is bool:
        return {"const": "bool", "value": value}
    if t is int:
        return {"const": "int", "value": value}
    if t is float:
        return {"const": "float", "hex": value.hex()}
    if t is str:
        return {"const": "str", "value": value}
    raise TypeError(f"{where}: a {t.__name__} cannot be stored in a ShardX package")


def _constant_from_json(d):
    kind = d["const"]
    if kind == "none":
        return None
    if kind == "float":
        return float.fromhex(d["hex"])
    value = d["value"]
    want = {"bool": bool, "int": int, "str": str}.get(kind)
    if want is None:
        raise ValueError(f"unknown constant kind {kind!r}")
    if type(value) is not want:
        raise ValueError(f"a {kind} constant holds {value!r}")
    return value


def _named_tuple_class(name: str):
    """The named tuple class ``module:qualname`` (importing the module),
    or None."""
    import importlib
    module, _, qualname = name.partition(":")
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError):
        return None
    return obj if is_named_tuple(obj) else None


def to_json(spec, where: str = "the structure"):
    """The JSON form of a spec; TypeError (naming ``where``) for a dict key
    that is not a constant."""
    if spec is None:
        return None
    kind = spec[0]
    if kind is None:
        return _constant_to_json(spec[1], where)
    if kind is tuple or kind is list:
        return {"node": kind.__name__, "children": [to_json(c, where) for c in spec[1]]}
    if is_named_tuple(kind):
        name = f"{kind.__module__}:{kind.__qualname__}"
        if _named_tuple_class(name) is not kind:
            raise TypeError(f"{where}: the named tuple class {kind.__qualname__} (module "
                            f"{kind.__module__}) cannot be found again by its name, so a "
                            "ShardX package cannot hold it: define it at a module's top level")
        return {"node": "namedtuple", "type": name,
                "children": [to_json(c, where) for c in spec[1]]}
    if kind is dict:
        return {"node": "dict", "keys": [_constant_to_json(k, f"{where}: a dict key")
                                         for k in spec[1]],
                "children": [to_json(c, where) for c in spec[2]]}
    raise TypeError(f"{where}: unknown spec node {kind!r}")


def from_json(d):
    """The spec of its JSON form (equal to the one ``flatten`` makes of the
    same tree: NaN as ``NAN``); ValueError for a malformed one."""
    try:
        return _from_json(d)
    except (KeyError, TypeError, AttributeError, IndexError) as e:
        raise ValueError(f"malformed pytree spec {d!r}: {type(e).__name__} {e}") from None


def _from_json(d):
    if d is None:
        return None
    if "const" in d:
        return flatten_into(_constant_from_json(d), [])
    node = d["node"]
    kids = tuple(_from_json(c) for c in d["children"])
    if node == "tuple":
        return (tuple, kids)
    if node == "list":
        return (list, kids)
    if node == "namedtuple":
        cls = _named_tuple_class(d["type"])
        if cls is None:
            raise ValueError(f"the named tuple class {d['type']!r} cannot be imported here")
        return (cls, kids)
    if node == "dict":
        keys = tuple(_constant_from_json(k) for k in d["keys"])
        if len(keys) != len(kids) or len(set(keys)) != len(keys):
            raise ValueError("a dict node's keys do not match its children")
        return (dict, keys, kids)
    raise ValueError(f"unknown node {node!r}")
