"""Random ops (dropout, ``rand``/``randn``/``randint``, ``bernoulli``,
``normal``, ``uniform_``, ``exponential_``) as a counter-based generator.

Each random op of a trace draws from ``shardx::random_bits(seed, stream,
size)``: element ``i`` (its row-major index in the whole tensor) of stream
``s`` is SplitMix64's output for the counter ``s * 2**40 + i`` under the key
``seed``, a 64-bit hash of the counter. The ops are written from those
bits here, as decompositions in PyTorch ops (``decompositions()``):
uniform floats from the top bits (24 for f32, 53 for f64, 8 for bf16, 11
for f16: exactly representable, in ``[0, 1)``), normals by Box-Muller from
two streams, integers by the remainder. The importer writes
``random_bits`` as one ``linalg.generic`` (``ops/random.py``) whose
indices are global after partitioning, so a rank draws its own part of the
same numbers: **a sharded run draws what the unsharded one does, on every
backend**.

The numbers are not eager PyTorch's (its CPU generator is a sequential
Mersenne Twister; torch.compile's are not eager's either, by default).
Each trace numbers its random ops from 0 (stream ids: a program draws the
same numbers for the same seed, whatever compiled it), and the **seed is
an input of the program**, its last: ``shardx.compile`` draws a new one
from PyTorch's default generator before each call (``torch.manual_seed``
makes a run repeatable, and successive steps draw new masks);
``last_seed`` says which tensor it is (``module.trace``). A region (a
repeated layer) that draws random numbers is traced inline: a region is
traced once and called per layer, and every layer would draw the same
mask.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from typing import Optional, Sequence

import torch

aten = torch.ops.aten

#: SplitMix64's constants (the golden-ratio increment and the finalizer's
#: multipliers), as signed int64s.
_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)
_MIX1 = 0xBF58476D1CE4E5B9 - (1 << 64)
_MIX2 = 0x94D049BB133111EB - (1 << 64)
#: A stream's counters: ``stream << STREAM_SHIFT`` plus the element index.
STREAM_SHIFT = 40

_state = threading.local()


@contextlib.contextmanager
def _streams(seed: torch.Tensor):
    """Random streams numbered from 0 under ``seed`` for the block. PyTorch's
    CPU generator state, as ``torch.utils.checkpoint`` saves it before a
    checkpointed block and restores it before computing the block again
    for the backward, carries the stream count too: the recomputation
    draws the forward's streams (the same masks), as eager's generator
    state gives eager the same numbers."""
    saved = (getattr(_state, "seed", None), getattr(_state, "streams", 0),
             getattr(_state, "used", False))
    _state.seed, _state.streams, _state.used = seed, 0, False
    states: list = []  # (state tensor, stream count when it was taken)
    real_get, real_set = torch.get_rng_state, torch.set_rng_state

    def get_rng_state():
        state = real_get()
        states.append((state, _state.streams))
        return state

    def set_rng_state(new_state):
        for state, streams in reversed(states):
            if state is new_state:
                _state.streams = streams
                break
        return real_set(new_state)
    torch.get_rng_state = torch.random.get_rng_state = get_rng_state
    torch.set_rng_state = torch.random.set_rng_state = set_rng_state
    try:
        yield
    finally:
        torch.get_rng_state = torch.random.get_rng_state = real_get
        torch.set_rng_state = torch.random.set_rng_state = real_set
        _state.seed, _state.streams, _state.used = saved


def restart_streams() -> None:
    """Numbers the streams from 0 again (a trace that starts over)."""
    _state.streams = 0


@contextlib.contextmanager
def trace_streams():
    """A trace's random streams: yields a list that holds, once the block
    ends, the seed tensor (a real 0-d int64 made before the trace's fake
    mode) if a random op read it, else nothing."""
    seed = torch.zeros((), dtype=torch.int64)
    used: list = []
    with _streams(seed):
        try:
            yield used
        finally:
            if _state.used:
                used.append(seed)


def _next_stream() -> int:
    from . import regions
    if regions._state().active and regions._state().inside:
        # A region is traced once and called per layer: each call would
        # draw the same numbers. Traced inline instead.
        raise regions._NotARegion()
    if getattr(_state, "seed", None) is None:
        raise RuntimeError("a random op outside a ShardX trace's random streams")
    s = _state.streams
    _state.streams += 1
    _state.used = True
    return s


def _logical_shift(x: torch.Tensor, k: int) -> torch.Tensor:
    return torch.bitwise_right_shift(x, k) & ((1 << (64 - k)) - 1)


@torch.library.custom_op("shardx::random_bits", mutates_args=())
def random_bits(seed: torch.Tensor, stream: int, size: Sequence[int]) -> torch.Tensor:
    """64 random bits (an int64) per element of a ``size`` tensor: SplitMix64
    of the counter ``stream * 2**40 + i`` (``i`` the row-major index) under
    the key ``seed``. Products wrap modulo 2**64, as the generated code's."""
    n = math.prod(size)
    counter = torch.arange(n, dtype=torch.int64) + (stream << STREAM_SHIFT) + 1
    z = seed.to(torch.int64) + counter * _GOLDEN
    z = (z ^ _logical_shift(z, 30)) * _MIX1
    z = (z ^ _logical_shift(z, 27)) * _MIX2
    z = z ^ _logical_shift(z, 31)
    return z.reshape(tuple(size))


@random_bits.register_fake
def _(seed, stream, size):
    return seed.new_empty(tuple(size), dtype=torch.int64)


#: The top bits a uniform float of each dtype takes (its significand's).
_BITS = {torch.float32: 24, torch.float64: 53, torch.bfloat16: 8, torch.float16: 11}


def _uniform(size, dtype: torch.dtype, open_low: bool = False) -> torch.Tensor:
    """Uniform floats of ``dtype`` in [0, 1) (``open_low``: (0, 1]),
    exactly representable."""
    dtype = dtype if dtype in _BITS else torch.float32
    m = _BITS[dtype]
    bits = _logical_shift(random_bits(_state.seed, _next_stream(), list(size)), 64 - m)
    if open_low:
        bits = bits + 1
    return bits.to(dtype) * (2.0 ** -m)


def _normal(size, dtype: torch.dtype) -> torch.Tensor:
    """Standard normals by Box-Muller: ``sqrt(-2 log u1) cos(2 pi u2)``, u1
    in (0, 1] (no log of 0), each uniform from its own stream, computed in
    f32 at least."""
    work = dtype if dtype == torch.float64 else torch.float32
    u1 = _uniform(size, work, open_low=True)
    u2 = _uniform(size, work)
    z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos((2.0 * math.pi) * u2)
    return z.to(dtype)


def _float_dtype(dtype) -> torch.dtype:
    return dtype if dtype is not None else torch.get_default_dtype()


def _rand(size, *, dtype=None, layout=None, device=None, pin_memory=None, generator=None,
          **_):
    return _uniform(size, _float_dtype(dtype))


def _rand_like(x, *, dtype=None, **_):
    return _uniform(x.shape, dtype or x.dtype)


def _randn(size, *, dtype=None, layout=None, device=None, pin_memory=None, generator=None,
           **_):
    return _normal(size, _float_dtype(dtype))


def _randn_like(x, *, dtype=None, **_):
    return _normal(x.shape, dtype or x.dtype)


def _integers(low: int, high: int, size, dtype) -> torch.Tensor:
    if high <= low:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} "
                           f">= to={high}")
    bits = _logical_shift(random_bits(_state.seed, _next_stream(), list(size)), 1)
    return (bits % (high - low) + low).to(dtype)


def _randint(*args, dtype=None, **_):
    # randint(high, size) or randint.low(low, high, size)
    if len(args) == 2:
        low, (high, size) = 0, args
    else:
        low, high, size = args[:3]
    return _integers(low, high, size, dtype or torch.int64)


def _randint_like(x, *args, dtype=None, **_):
    low, high = (0, args[0]) if len(args) == 1 else args[:2]
    return _integers(low, high, x.shape, dtype or x.dtype)


def _bernoulli_p(x, p=0.5, *, generator=None):
    # The draw in f64: P(u < p) is p to 53 bits.
    return (_uniform(x.shape, torch.float64) < p).to(x.dtype)


def _bernoulli_tensor(p, *, generator=None):
    return (_uniform(p.shape, p.dtype) < p).to(p.dtype)


def _bernoulli_tensor_p(x, p, *, generator=None):
    return (_uniform(x.shape, p.dtype) < p).to(x.dtype)


def _uniform_fill(x, low=0.0, high=1.0, *, generator=None):
    return (_uniform(x.shape, x.dtype) * (high - low) + low).to(x.dtype)


def _normal_fill(x, mean=0.0, std=1.0, *, generator=None):
    return (_normal(x.shape, x.dtype) * std + mean).to(x.dtype)


def _normal_tensors(mean, std=1.0, *, generator=None):
    shape = torch.broadcast_shapes(*[t.shape for t in (mean, std) if isinstance(t, torch.Tensor)])
    dtype = mean.dtype if isinstance(mean, torch.Tensor) else std.dtype
    return _normal(shape, dtype) * std + mean


def _exponential(x, lambd=1.0, *, generator=None):
    # -log(u) / lambda with u in (0, 1]: never inf.
    work = x.dtype if x.dtype == torch.float64 else torch.float32
    return (-torch.log(_uniform(x.shape, work, open_low=True)) / lambd).to(x.dtype)


def _native_dropout(x, p: float, train: Optional[bool]):
    """``native_dropout`` (a GPU's fused dropout) as the CPU's composite
    dropout computes it: ``x * (mask / (1 - p))``, and the mask."""
    if not train or p == 0:
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    if p == 1:
        return x * 0, torch.zeros_like(x, dtype=torch.bool)
    keep = _bernoulli_p(x, 1 - p)
    return x * (keep / (1 - p)), keep.to(torch.bool)


def in_place_decompositions() -> dict:
    """``decompositions()`` and the in-place random ops eager runs
    (dropout's ``bernoulli_``), for the trace's first pass: the streams are
    numbered while autograd (and ``torch.utils.checkpoint``'s
    recomputation) runs, in the order eager draws."""
    table = decompositions()
    for op, functional in _IN_PLACE.items():
        table[op] = functools.partial(_in_place, table[functional])
    return table


def _in_place(functional, self, *args, **kwargs):
    return self.copy_(functional(self, *args, **kwargs))


def decompositions() -> dict:
    """The random ops written from ``random_bits`` (tracing.decompositions
    adds them)."""
    table = {
        aten.rand.default: _rand, aten.rand_like.default: _rand_like,
        aten.randn.default: _randn, aten.randn_like.default: _randn_like,
        aten.randint.default: _randint, aten.randint.low: _randint,
        aten.randint_like.default: _randint_like, aten.randint_like.low_dtype: _randint_like,
        aten.bernoulli.default: _bernoulli_tensor, aten.bernoulli.p: _bernoulli_p,
        aten.bernoulli.Tensor: _bernoulli_tensor_p,
        aten.uniform.default: _uniform_fill, aten.normal_functional.default: _normal_fill,
        aten.normal.Tensor_float: _normal_tensors, aten.normal.float_Tensor: _normal_tensors,
        aten.normal.Tensor_Tensor: _normal_tensors, aten.exponential.default: _exponential,
        aten.native_dropout.default: _native_dropout,
    }
    return table


#: The in-place random ops eager runs (a functionalized trace has their
#: functional forms), and the functional op each computes.
_IN_PLACE = {
    aten.bernoulli_.float: aten.bernoulli.p, aten.bernoulli_.Tensor: aten.bernoulli.Tensor,
    aten.uniform_.default: aten.uniform.default, aten.normal_.default: aten.normal_functional.default,
    aten.exponential_.default: aten.exponential.default,
}


class _Replay(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self, table):
        super().__init__()
        self.table = table

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        functional = _IN_PLACE.get(func)
        fn = self.table.get(functional or func)
        if fn is None:
            if func in _REFUSED:
                raise RuntimeError(f"shardx.same_random: {func} has no ShardX generator form")
            return func(*args, **kwargs)
        out = fn(*args, **kwargs)
        if functional is not None:
            return args[0].copy_(out)
        return out


#: Random ops that ShardX does not compile (the trace refuses them too).
_REFUSED = {aten.randperm.default, aten.multinomial.default, aten.random_.default,
            getattr(aten.random_, "from"), aten.random_.to}


@contextlib.contextmanager
def same_random(seed: Optional[int] = None):
    """Eager PyTorch draws, inside the block, the random numbers a compiled
    call draws: its random ops (dropout's ``bernoulli_``, ``rand``,
    ``randn``, ...) come from ShardX's generator with the seed ``seed``, by
    default drawn from PyTorch's default generator as a compiled call draws
    its own, streams numbered from 0 in the order the ops run. After
    ``torch.manual_seed(s)``, a compiled call and the same function run
    eagerly under ``same_random()`` after ``torch.manual_seed(s)`` again
    draw the same numbers, so their results compare as a program without
    random ops does (for debugging, and the tests)."""
    from ..jit import draw_seed
    value = torch.tensor(draw_seed() if seed is None else seed, dtype=torch.int64)
    with _streams(value), _Replay(decompositions()):
        yield
