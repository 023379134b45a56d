"""Test setup: Triton's interpreter when there is no GPU, the gpu marker, and the cases tests
build their inputs from (with the library's one builder, ssmdecode.bench.inputs).

TRITON_INTERPRET must be set before any kernel is defined, i.e. before ssmdecode's kernel
modules are imported; conftest.py is imported before the test modules, so it is set here (the
two ssmdecode modules imported above it define no kernel).
Under the interpreter a program costs about 7 ms: CPU cases keep B * H * (P / BLOCK_M) small.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest
import torch

from ssmdecode.bench import inputs as library_inputs
from ssmdecode.numerics import bits

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
    """One selective_state_update problem. Ids read like B3-H4-P12-N24-G2-bf16 (B3-T4-H4-... with
    a token dim)."""

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
    tokens: int | None = None  # T: x, dt, z [B, T, H, P] and B, C [B, T, G, N]

    @property
    def id(self) -> str:
        parts = [f"B{self.batch}"]
        if self.tokens is not None:
            parts.append(f"T{self.tokens}")
        if self.layout == "mamba2":
            parts.append(f"H{self.nheads}")
        parts += [f"P{self.headdim}", f"N{self.dstate}"]
        if self.layout == "mamba2" and self.ngroups != 1:
            parts.append(f"G{self.ngroups}")
        parts.append(self.state if self.state == self.inputs else f"{self.state}-in{self.inputs}")
        if self.layout == "mamba1":
            parts.append("mamba1")
        flags = [
            ("tie", self.tie),
            ("noD", not self.has_D),
            ("noz", not self.has_z),
            ("nobias", not self.has_dt_bias),
            ("nosoftplus", not self.softplus),
            ("pad", bool(self.pad_rows)),
            ("dst", self.dst),
            ("noidx", self.indices is None),
            ("i64", self.indices == "int64"),
        ]
        return "-".join(parts + [name for name, on in flags if on])


def make_inputs(case: Case, device: str = DEVICE, seed: int = 0) -> dict:
    """Keyword arguments of selective_state_update for a case (all but out): random data (never
    zeros) on `device`, the slot indices a random permutation of the pool, by the library's
    builder."""
    inputs = library_inputs.make_inputs(
        case.batch,
        case.nheads,
        case.headdim,
        case.dstate,
        case.ngroups,
        DTYPES[case.state],
        DTYPES[case.inputs],
        pool=case.batch * (2 if case.dst else 1) + case.extra_slots,
        device=device,
        seed=seed,
        tie=case.tie,
        rotation=1,
        tokens=case.tokens,
        indices=getattr(torch, case.indices) if case.indices else None,
        pad_rows=case.pad_rows,
        dst=case.dst,
        has_D=case.has_D,
        has_z=case.has_z,
        has_dt_bias=case.has_dt_bias,
        softplus=case.softplus,
        layout=case.layout,
    )
    kw = inputs.kwargs(0)
    del kw["out"]
    return kw


def to_device(v: object, device: str) -> object:
    """Move a tensor keeping its strides and storage offset (broadcasts and shared views stay
    what they were)."""
    if not isinstance(v, torch.Tensor) or v.device.type == torch.device(device).type:
        return v
    flat = torch.empty(0, dtype=v.dtype).set_(v.untyped_storage())
    return torch.as_strided(flat.to(device), v.shape, v.stride(), v.storage_offset())


def run_bits(
    kw: dict, state0: torch.Tensor, config: object, variant: object = None, **extra: object
) -> tuple[torch.Tensor, torch.Tensor]:
    """One call from state0 with config (and extra keyword arguments): the bits of out (stored
    as float32, so a changed row-sum order cannot round away) and of the state pool. variant:
    a kernel Variant of the same bits (decode.Variant), run through the private launch path."""
    from ssmdecode import selective_state_update  # after TRITON_INTERPRET is set above
    from ssmdecode.ops.selective_state_update import decode
    from ssmdecode.ops.selective_state_update.arguments import UpdateArgs

    kw["state"].copy_(state0)
    out = torch.full(kw["x"].shape, float("nan"), dtype=torch.float32, device=kw["x"].device)
    if variant is None:
        selective_state_update(**kw, out=out, config=config, **extra)
    else:
        args = UpdateArgs(**kw, out=out, config=config, **extra)
        decode.run(*decode.prepare(args, _variant=variant))
    return bits(out).clone(), bits(kw["state"]).clone()
