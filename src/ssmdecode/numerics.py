"""How results of selective_state_update are compared: bit for bit (bits, bit_diff), or against
the float64 reference within the one tolerance table (TOLERANCES, tolerance_check) that every
test and tool uses.

Tolerances: |got - want| <= atol + rtol * |want| against float64, by the dtype the kernel
stored. The kernel computes in float32 and rounds once on store, so a 2-byte dtype is held to
about two of its ULPs (rtol 2^-8 x 4 for bf16, 2^-11 x 4 for fp16); float32 to a few 1e-6
relative of the row sums over N, with some slack for softplus's log(1 + exp(x)), the upstream
formula.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["TOLERANCES", "BitDiff", "ToleranceCheck", "bit_diff", "bits", "tolerance_check"]

TOLERANCES = {
    torch.float32: {"rtol": 1e-4, "atol": 1e-4},
    torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-2},
    torch.float16: {"rtol": 2e-3, "atol": 1e-3},
}

_INT_OF_SIZE = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a tensor as integers of its element size, the same shape and strides:
    equal exactly when the bits are (-0.0 differs from 0.0, a NaN equals the same NaN)."""
    return t.view(_INT_OF_SIZE[t.element_size()])


@dataclass(frozen=True)
class BitDiff:
    """How two tensors of one dtype and shape differ, bit for bit."""

    identical: bool
    mismatches: int
    max_abs: float  # over mismatching elements, in float64
    max_ulp: int  # over mismatching elements: distance in representable values


def _ordered(raw: torch.Tensor) -> torch.Tensor:
    """Sign-magnitude float bits (as signed ints) -> int64 ordered like the floats."""
    width = raw.element_size() * 8
    v = raw.to(torch.int64)
    magnitude = v & ((1 << (width - 1)) - 1)
    return torch.where(v < 0, -magnitude, magnitude)


def bit_diff(a: torch.Tensor, b: torch.Tensor) -> BitDiff:
    """Compare a and b (same dtype and shape) bit for bit."""
    if a.dtype != b.dtype or a.shape != b.shape:
        raise ValueError(f"cannot compare {a.dtype}{list(a.shape)} with {b.dtype}{list(b.shape)}")
    ia, ib = bits(a), bits(b)
    differ = ia != ib
    mismatches = int(differ.sum())
    if mismatches == 0:
        return BitDiff(True, 0, 0.0, 0)
    abs_diff = (a[differ].double() - b[differ].double()).abs().nan_to_num(nan=float("inf"))
    ulp = (_ordered(ia[differ]) - _ordered(ib[differ])).abs()
    return BitDiff(False, mismatches, float(abs_diff.max()), int(ulp.max()))


@dataclass(frozen=True)
class ToleranceCheck:
    """A result of the kernel against the float64 reference."""

    within: bool
    max_abs: float
    worst_excess: float  # max of |got - want| / (atol + rtol |want|); <= 1 passes
    rtol: float
    atol: float


def tolerance_check(got: torch.Tensor, want: torch.Tensor) -> ToleranceCheck:
    """got (the kernel's, in its storage dtype) against want (float64), by TOLERANCES."""
    tol = TOLERANCES[got.dtype]
    diff = (got.double() - want).abs().nan_to_num(nan=float("inf"))
    excess = diff / (tol["atol"] + tol["rtol"] * want.abs())
    worst = float(excess.max())
    return ToleranceCheck(worst <= 1.0, float(diff.max()), worst, tol["rtol"], tol["atol"])
