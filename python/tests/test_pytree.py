"""shardx.pytree, the one pytree of shardx.compile, export/load and
TrainStep: leaves in torch's order, Python values as constants of the
structure, specs hashable and comparable, paths in flatten's order."""

import math

import numpy as np
import pytest
import torch
import torch.utils._pytree as torch_pytree

from shardx import pytree


def _tree():
    a, b, c, d = (torch.full((2,), float(i)) for i in range(4))
    return {"w": [a, (b, None)], "cfg": {"lr": 0.1, "on": True, "name": "x"}, 3: c, "z": d}, [a, b, c, d]


def test_leaves_in_torch_order_and_round_trip():
    tree, leaves = _tree()
    spec, got = pytree.flatten(tree)
    assert [id(x) for x in got] == [id(x) for x in leaves]
    # The tensors are torch pytree's leaves, in its order (dict insertion order).
    tensors = [x for x in torch_pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]
    assert [id(x) for x in tensors] == [id(x) for x in got]
    back = pytree.unflatten(spec, got)
    assert back == tree  # the same leaf objects, the same constants
    assert back["w"][1][1] is None and type(back["w"][1]) is tuple
    assert pytree.count_leaves(spec) == 4


def test_constants_are_guards():
    def spec(x):
        return pytree.flatten(x)[0]
    assert spec(1) != spec(True)
    assert spec(0.0) != spec(-0.0)
    assert spec(float("nan")) == spec(float("nan")) and hash(spec(math.nan)) == hash(spec(float("nan")))
    assert spec((1, [2.5])) == spec((1, [2.5])) and {spec((1, [2.5])): 1}[spec((1, [2.5]))] == 1
    assert spec([np.ones(1)]) == spec([np.zeros(3)])  # leaves are not part of the spec
    assert pytree.difference(spec((np.ones(1), 2.0)), spec((np.ones(1), 3.0))) == "argument 1: 2.0 -> 3.0"
    assert pytree.difference(spec(({"w": np.ones(1)},)), spec(({"w": None},))) == \
        "argument 0['w']: a tensor -> None"


def test_paths_follow_flatten_order():
    tree, leaves = _tree()
    paths = pytree.leaves_with_paths(tree)
    assert [id(x) for _, x in paths] == [id(x) for x in leaves]
    assert [p for p, _ in paths] == [("w", 0), ("w", 1, 0), (3,), ("z",)]


def test_json_refuses_what_a_package_cannot_hold():
    spec = pytree.flatten({(1, 2): np.ones(1)})[0]
    with pytest.raises(TypeError, match="a dict key: a tuple cannot be stored"):
        pytree.to_json(spec, "the arguments")
    with pytest.raises(ValueError, match="keys do not match"):
        pytree.from_json({"node": "dict", "keys": [], "children": [None]})


@pytest.mark.parametrize("bad", [{"foo": 1}, {"const": "complex", "value": 1},
                                 {"const": "int"}, {"node": "tuple"}, [1], 3])
def test_malformed_json_is_a_value_error(bad):
    with pytest.raises(ValueError):
        pytree.from_json(bad)
