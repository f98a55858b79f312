"""The scalar region of a ``linalg.generic``: ``arith``/``math`` ops on
element values, with torch's dtype conversions and operator spellings."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

import torch

from .values import UnsupportedOpError, const_literal, elem_type, is_float

if TYPE_CHECKING:
    from .emitter import Emitter


class Body:
    """Emits the scalar region of a linalg.generic."""

    def __init__(self, em: "Emitter"):
        self.em = em
        self.lines: List[str] = []

    def v(self, text: str) -> str:
        name = self.em.fresh("s")
        self.lines.append(f"{name} = {text}")
        return name

    def const(self, value, dtype: torch.dtype) -> str:
        if dtype == torch.bool:
            return self.v(f"arith.constant {const_literal(value, dtype)}")
        return self.v(f"arith.constant {const_literal(value, dtype)} : {elem_type(dtype)}")

    def cast(self, x: str, src: torch.dtype, dst: torch.dtype) -> str:
        if src == dst:
            return x
        s, d = elem_type(src), elem_type(dst)
        if dst == torch.bool:
            if is_float(src):
                zero = self.const(0.0, src)
                return self.v(f"arith.cmpf une, {x}, {zero} : {s}")
            zero = self.const(0, src)
            return self.v(f"arith.cmpi ne, {x}, {zero} : {s}")
        if is_float(src) and is_float(dst):
            bs, bd = torch.finfo(src).bits, torch.finfo(dst).bits
            if bs == bd:  # f16 <-> bf16
                x = self.v(f"arith.extf {x} : {s} to f32")
                return self.v(f"arith.truncf {x} : f32 to {d}")
            op = "arith.extf" if bd > bs else "arith.truncf"
            return self.v(f"{op} {x} : {s} to {d}")
        if is_float(dst):
            op = "arith.uitofp" if src in (torch.bool, torch.uint8) else "arith.sitofp"
            return self.v(f"{op} {x} : {s} to {d}")
        if is_float(src):
            return self.v(f"arith.fptosi {x} : {s} to {d}")
        bs = 1 if src == torch.bool else torch.iinfo(src).bits
        bd = torch.iinfo(dst).bits
        if bs == bd:
            return x
        if bd > bs:
            op = "arith.extui" if src in (torch.bool, torch.uint8) else "arith.extsi"
            return self.v(f"{op} {x} : {s} to {d}")
        return self.v(f"arith.trunci {x} : {s} to {d}")

    # Arithmetic on values of one dtype ``t``.
    def binary(self, op: str, a: str, b: str, t: torch.dtype) -> str:
        e = elem_type(t)
        f = is_float(t)
        if t == torch.bool and op in ("add", "mul"):
            # As eager: a bool sum is an or, a product an and (an i1 add
            # wraps: True + True was False).
            op = "or" if op == "add" else "and"
        if op == "pow" and not f:
            return self.int_pow(a, b, t)
        table = {
            "add": "arith.addf" if f else "arith.addi",
            "sub": "arith.subf" if f else "arith.subi",
            "mul": "arith.mulf" if f else "arith.muli",
            "div": "arith.divf" if f else "arith.divsi",
            # A bool (i1) compares unsigned: max is or, min is and.
            "max": "arith.maximumf" if f else "arith.maxui" if t == torch.bool else "arith.maxsi",
            "min": "arith.minimumf" if f else "arith.minui" if t == torch.bool else "arith.minsi",
            # NaN-ignoring (fmax/fmin).
            "fmax": "arith.maxnumf", "fmin": "arith.minnumf",
            "and": "arith.andi", "or": "arith.ori", "xor": "arith.xori",
            "pow": "math.powf",
        }
        return self.v(f"{table[op]} {a}, {b} : {e}")

    def unary(self, op: str, a: str, t: torch.dtype) -> str:
        e = elem_type(t)
        if op == "neg":
            if is_float(t):
                return self.v(f"arith.negf {a} : {e}")
            return self.binary("sub", self.const(0, t), a, t)
        if op == "reciprocal":
            return self.binary("div", self.const(1.0, t), a, t)
        if op == "sigmoid":
            one = self.const(1.0, t)
            ex = self.v(f"math.exp {self.unary('neg', a, t)} : {e}")
            return self.binary("div", one, self.binary("add", one, ex, t), t)
        if op == "relu":
            return self.clamp_low(a, self.const(0, t), t)
        if op == "abs":
            if is_float(t):
                return self.v(f"math.absf {a} : {e}")
            # max(a, -a): the code generation lowers no math.absi (the
            # least integer stays itself, as in eager).
            return self.binary("max", a, self.unary("neg", a, t), t)
        if op == "not":
            return self.binary("xor", a, self.const(True, torch.bool), torch.bool)
        if op == "sign":
            if t == torch.bool:
                return a
            zero = self.const(0, t)
            pos = self.compare("gt", a, zero, t)
            neg = self.compare("lt", a, zero, t)
            r = self.select(neg, self.const(-1, t), zero, t)
            return self.select(pos, self.const(1, t), r, t)
        if op in ("floor", "ceil", "trunc", "roundeven") and not is_float(t):
            return a  # an integer is whole already (eager returns it)
        if not is_float(t):
            raise UnsupportedOpError(f"{op} on {t}")
        if op == "erf":
            # erf(+-0) is that zero, as eager's (the polynomial the code
            # generation writes gives +0.0 for -0.0).
            r = self.v(f"math.erf {a} : {e}")
            zero = self.v(f"arith.cmpf oeq, {a}, {self.const(0.0, t)} : {e}")
            return self.select(zero, a, r, t)
        return self.v(f"math.{op} {a} : {e}")

    def int_pow(self, a: str, n: str, t: torch.dtype) -> str:
        """``a ** n`` of integers as ATen's ``powi``: square and multiply
        over the exponent's bits (products wrap as eager's do); a negative
        exponent gives 1 for a base of 1, +-1 for -1 by the exponent's
        parity, else 0. (The code generation lowers no math.ipowi.)"""
        bits = torch.iinfo(t).bits if t != torch.bool else 1
        zero, one = self.const(0, t), self.const(1, t)
        result, base = one, a
        for i in range(bits - 1):
            bit = self.binary("and", self.v(f"arith.shrsi {n}, {self.const(i, t)} : {elem_type(t)}"),
                              one, t)
            take = self.compare("ne", bit, zero, t)
            result = self.select(take, self.binary("mul", result, base, t), result, t)
            if i < bits - 2:
                base = self.binary("mul", base, base, t)
        negative = self.compare("lt", n, zero, t)
        odd = self.compare("ne", self.binary("and", n, one, t), zero, t)
        minus_one = self.const(-1, t)
        for_minus_one = self.select(odd, minus_one, one, t)
        small = self.select(self.compare("eq", a, one, t), one,
                            self.select(self.compare("eq", a, minus_one, t), for_minus_one,
                                        zero, t), t)
        return self.select(negative, small, result, t)

    def clamp_low(self, a: str, lo: str, t: torch.dtype) -> str:
        """``a`` raised to ``lo`` as eager's clamp kernels (a vector max
        that keeps ``a`` where it equals the bound: relu(-0.0) is -0.0; a
        NaN ``a`` or bound gives NaN). Integers: max."""
        if not is_float(t):
            return self.binary("max", a, lo, t)
        e = elem_type(t)
        r = self.select(self.v(f"arith.cmpf olt, {a}, {lo} : {e}"), lo, a, t)
        return self.select(self.v(f"arith.cmpf uno, {lo}, {lo} : {e}"), lo, r, t)

    def clamp_high(self, a: str, hi: str, t: torch.dtype) -> str:
        """``a`` lowered to ``hi``, as ``clamp_low``."""
        if not is_float(t):
            return self.binary("min", a, hi, t)
        e = elem_type(t)
        r = self.select(self.v(f"arith.cmpf ogt, {a}, {hi} : {e}"), hi, a, t)
        return self.select(self.v(f"arith.cmpf uno, {hi}, {hi} : {e}"), hi, r, t)

    def compare(self, pred: str, a: str, b: str, t: torch.dtype) -> str:
        e = elem_type(t)
        if is_float(t):
            fp = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}[pred]
            return self.v(f"arith.cmpf {fp}, {a}, {b} : {e}")
        # A bool is an i1, whose signed order puts True (-1) below False.
        sign = "u" if t == torch.bool else "s"
        ip = {"eq": "eq", "ne": "ne", "lt": f"{sign}lt", "le": f"{sign}le", "gt": f"{sign}gt",
              "ge": f"{sign}ge"}[pred]
        return self.v(f"arith.cmpi {ip}, {a}, {b} : {e}")

    def is_nan(self, a: str, t: torch.dtype) -> Optional[str]:
        """Whether ``a`` is NaN (an i1), or None for a type without NaN."""
        if not is_float(t):
            return None
        return self.v(f"arith.cmpf uno, {a}, {a} : {elem_type(t)}")

    def before_in_order(self, a: str, b: str, t: torch.dtype, descending: bool) -> str:
        """Whether ``a`` comes strictly before ``b`` in PyTorch's sort
        order: NaN above every number (last ascending, first descending),
        NaNs tied with each other."""
        before = self.compare("gt" if descending else "lt", a, b, t)
        na, nb = self.is_nan(a, t), self.is_nan(b, t)
        if na is None:
            return before
        # Descending, a NaN comes before a number; ascending, a number
        # before a NaN.
        nan, num = (na, nb) if descending else (nb, na)
        not_nan = self.unary("not", num, torch.bool)
        return self.v(f"arith.ori {before}, {self.v(f'arith.andi {nan}, {not_nan} : i1')} : i1")

    def same_in_order(self, a: str, b: str, t: torch.dtype) -> str:
        """Whether ``a`` and ``b`` tie in PyTorch's sort order (NaNs tie)."""
        eq = self.compare("eq", a, b, t)
        na, nb = self.is_nan(a, t), self.is_nan(b, t)
        if na is None:
            return eq
        return self.v(f"arith.ori {eq}, {self.v(f'arith.andi {na}, {nb} : i1')} : i1")

    def select(self, c: str, a: str, b: str, t: torch.dtype) -> str:
        return self.v(f"arith.select {c}, {a}, {b} : {elem_type(t)}")
