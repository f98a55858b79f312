"""shardx.dtypes, Python's one table of element types: it mirrors the
runtime's (rt::kDTypes, exported by the binding as ``_shardx_rt.dtypes()``),
every ShardX type goes to torch and numpy and back, the binding takes each
name, and unsupported dtypes are refused by name."""

import numpy as np
import pytest
import torch

from shardx import dtypes


def test_table_is_the_runtimes(build_dir):
    from shardx.sharded_tensor import runtime
    assert [(d.name, d.bytes, d.is_float) for d in dtypes.DTYPES] == \
        [tuple(x) for x in runtime().dtypes()]


@pytest.mark.parametrize("d", dtypes.DTYPES, ids=lambda d: d.name)
def test_torch_and_numpy_round_trip(d):
    t = torch.zeros(3, dtype=dtypes.torch_dtype(d.name))
    assert dtypes.from_torch(t.dtype) == dtypes.name_of(t) == d.name
    assert t.element_size() == d.bytes and t.is_floating_point() == d.is_float
    if d.numpy_name is None:  # bf16: numpy holds its bits
        assert d.name == "bf16"
        a = t.view(torch.int16).numpy().view(np.uint16)
    else:
        a = t.numpy()
        assert dtypes.from_numpy(a.dtype) == dtypes.name_of(a) == d.name
        assert a.itemsize == d.bytes
    back = dtypes.as_torch(a, d.name)
    assert back.dtype == t.dtype and torch.equal(back, t)


@pytest.mark.parametrize("d", dtypes.DTYPES, ids=lambda d: d.name)
def test_binding_takes_every_name(build_dir, d):
    """A scatter of each type over one rank gives its array back with the
    name the binding reads (its own DType table)."""
    from shardx.sharded_tensor import runtime
    t = torch.arange(4).to(dtypes.torch_dtype(d.name))
    shards = runtime().ShardSet.scatter(t, d.name, None, [1])
    assert shards.dtype == d.name
    assert torch.equal(dtypes.as_torch(np.array(shards.full()), d.name), t)


def test_unsupported_dtypes_are_named():
    with pytest.raises(TypeError, match="unsupported dtype torch.complex64"):
        dtypes.from_torch(torch.complex64)
    with pytest.raises(TypeError, match="unsupported dtype torch.uint8"):
        dtypes.name_of(torch.zeros(1, dtype=torch.uint8))
    with pytest.raises(TypeError, match="unsupported dtype uint16"):
        dtypes.name_of(np.zeros(1, np.uint16))
    with pytest.raises(TypeError, match="unsupported dtype 'index'"):
        dtypes.torch_dtype("index")
    # The importer's signless view: torch's uint8 is MLIR's i8.
    assert dtypes.from_torch(torch.uint8, signless=True) == "i8"
