"""Test setup: Triton's interpreter when there is no GPU, the gpu marker, and input builders.

TRITON_INTERPRET must be set before any kernel is defined, i.e. before ssmdecode's kernel
modules are imported; conftest.py is imported before the test modules, so it is set here.
Under the interpreter a program costs about 7 ms: CPU cases keep B * H * (P / BLOCK_M) small.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
import torch

HAS_GPU = torch.cuda.is_available()
if not HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

DEVICE = "cuda" if HAS_GPU else "cpu"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `pytest -m gpu` on one)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Case:
    """One selective_state_update problem. Ids read like B3-H4-P12-N24-G2-bf16."""

    batch: int = 3
    nheads: int = 4
    headdim: int = 12
    dstate: int = 24
    ngroups: int = 2
    state: str = "fp32"
    inputs: str = "bf16"
    layout: str = "mamba2"
    tie: bool = False  # dt, A, D, dt_bias as stride-0 broadcasts; x, B, C views of one tensor
    has_D: bool = True
    has_z: bool = True
    has_dt_bias: bool = True
    softplus: bool = True
    indices: str | None = "int32"  # None, "int32" or "int64"
    pad_rows: tuple[int, ...] = ()
    dst: bool = False  # separate dst_state_batch_indices
    extra_slots: int = 3  # pool = batch + extra_slots (+ batch more when dst)

    @property
    def id(self) -> str:
        parts = [f"B{self.batch}"]
        if self.layout == "mamba2":
            parts.append(f"H{self.nheads}")
        parts += [f"P{self.headdim}", f"N{self.dstate}"]
        if self.layout == "mamba2" and self.ngroups != 1:
            parts.append(f"G{self.ngroups}")
        parts.append(self.state if self.state == self.inputs else f"{self.state}-in{self.inputs}")
        if self.layout == "mamba1":
            parts.append("mamba1")
        flags = [("tie", self.tie), ("noD", not self.has_D), ("noz", not self.has_z),
                 ("nobias", not self.has_dt_bias), ("nosoftplus", not self.softplus),
                 ("pad", bool(self.pad_rows)), ("dst", self.dst),
                 ("noidx", self.indices is None), ("i64", self.indices == "int64")]
        return "-".join(parts + [name for name, on in flags if on])


def make_inputs(case: Case, device: str = DEVICE, seed: int = 0) -> dict:
    """Keyword arguments of selective_state_update for a case: random data (never zeros), the
    state pool on `device`, indices a random permutation of the pool."""
    g = torch.Generator().manual_seed(seed)
    sdt, idt = DTYPES[case.state], DTYPES[case.inputs]
    b, h, p, n, grp = case.batch, case.nheads, case.headdim, case.dstate, case.ngroups
    pool = b + case.extra_slots + (b if case.dst else 0)

    def rn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype)

    if case.tie:
        xbc = rn(b, h * p + 2 * grp * n, dtype=idt)
        x = xbc[:, : h * p].view(b, h, p)
        B = xbc[:, h * p : h * p + grp * n].view(b, grp, n)
        C = xbc[:, h * p + grp * n :].view(b, grp, n)
        dt = rn(b, h, dtype=idt)[..., None].expand(b, h, p)
        A = (-torch.rand(h, generator=g) - 0.5)[:, None, None].expand(h, p, n)
        D = rn(h)[:, None].expand(h, p)
        dt_bias = (torch.rand(h, generator=g) - 4.0)[:, None].expand(h, p)
    else:
        x, dt = rn(b, h, p, dtype=idt), rn(b, h, p, dtype=idt)
        B, C = rn(b, grp, n, dtype=idt), rn(b, grp, n, dtype=idt)
        A = -torch.rand(h, p, n, generator=g) - 0.5
        D, dt_bias = rn(h, p), torch.rand(h, p, generator=g) - 4.0
    z = rn(b, h, p, dtype=idt)
    state = rn(pool, h, p, n, dtype=sdt)
    if case.layout == "mamba1":
        if h != 1 or grp != 1:
            raise ValueError("a Mamba1 case has one head and one group")
        state, x, dt, z, A = state[:, 0], x[:, 0], dt[:, 0], z[:, 0], A[0]
        B, C, D, dt_bias = B[:, 0], C[:, 0], D[0], dt_bias[0]
    kw = dict(state=state, x=x, dt=dt, A=A, B=B, C=C,
              D=D if case.has_D else None, z=z if case.has_z else None,
              dt_bias=dt_bias if case.has_dt_bias else None, dt_softplus=case.softplus)
    if case.indices is not None:
        perm = torch.randperm(pool, generator=g).to(getattr(torch, case.indices))
        src = perm[:b].clone()
        for r in case.pad_rows:
            src[r] = -1
        kw["state_batch_indices"] = src
        if case.dst:
            kw["dst_state_batch_indices"] = perm[b : 2 * b].clone()
    return {k: to_device(v, device) for k, v in kw.items()}


def to_device(v: object, device: str) -> object:
    """Move a tensor keeping its strides and storage offset (broadcasts and shared views stay
    what they were)."""
    if not isinstance(v, torch.Tensor) or v.device.type == torch.device(device).type:
        return v
    flat = torch.empty(0, dtype=v.dtype).set_(v.untyped_storage())
    return torch.as_strided(flat.to(device), v.shape, v.stride(), v.storage_offset())


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a float tensor as integers, for exact comparison (NaN == NaN there)."""
    return t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])


def run_bits(kw: dict, state0: torch.Tensor, config: object, variant: object = None, **extra: object
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """One call from state0 with config (and extra keyword arguments): the bits of out (stored
    as float32, so a changed row-sum order cannot round away) and of the state pool. variant:
    a kernel Variant of the same bits (decode.Variant), run through the private launch path."""
    from ssmdecode import selective_state_update  # after TRITON_INTERPRET is set above
    from ssmdecode.ops.selective_state_update import decode

    kw["state"].copy_(state0)
    out = torch.full(kw["x"].shape, float("nan"), dtype=torch.float32, device=kw["x"].device)
    if variant is None:
        selective_state_update(**kw, out=out, config=config, **extra)
    else:
        decode.run(*decode.prepare(**kw, out=out, config=config, _variant=variant, **extra))
    return bits(out).clone(), bits(kw["state"]).clone()
