"""Import traced PyTorch programs into MLIR (func/linalg/tensor/arith/math).

``trace(fn, example_args, ...)`` runs ``make_fx`` over ``fn`` (forward,
``torch.autograd.grad`` backward and the optimizer update all trace into one
aten graph), functionalizes it, decomposes it to a small set of aten ops and
emits one ``func.func`` whose arguments are the flattened tensor inputs and
whose results are the flattened tensor outputs. Placements become
``shardx.layout`` argument/result attributes on a ``shardx.mesh``.

The package, in the order a trace runs through it:

- ``tracing``: ``make_fx``, functionalization, ``decompositions()``, each
  node's source line and train-step phase;
- ``graph``: ``Importer``, the walk over the FX graph that calls one handler
  per node;
- ``registry``: ``HANDLERS`` (aten op -> handler) and ``@handles``;
- ``ops``: the handlers, one module per op family;
- ``emitter``, ``body``, ``values``: the MLIR text builder (SSA names,
  locations, tensor ops), the scalar regions of ``linalg.generic``, types
  and constants;
- ``module``: ``trace`` and ``TraceSpec``, the module text;
- ``regions``, ``region_import``: regional tracing (a repeated block traced
  once, called as a function) and its import;
- ``dce``: dead-code removal by MLIR (``shardx-opt --remove-dead-values``);
- ``cli``: the command line.

Command line::

    python3 -m shardx.importer script.py:function -o out.mlir

where ``function`` takes no arguments and returns a ``TraceSpec`` (or the
keyword arguments of ``trace`` as a dict).
"""

from .body import Body
from .emitter import Emitter
from .graph import Importer
from .registry import HANDLERS, Handler, handles
from .tracing import decompositions
from .values import ImportError_, UnsupportedOpError, Value, const_literal, elem_type, tensor_type
from . import ops  # noqa: F401  (registers the handlers)
from . import region_import  # noqa: F401  (registers the region call's handler)
from .regions import region, regions_enabled
from .module import TraceSpec, trace
from .cli import main

__all__ = ["Body", "Emitter", "HANDLERS", "Handler", "ImportError_", "Importer", "TraceSpec",
           "UnsupportedOpError", "Value", "const_literal", "decompositions", "elem_type", "handles",
           "main", "region", "regions_enabled", "tensor_type", "trace"]
