"""Golden digests: the default path writes the bits the upstream kernel wrote.

tests/data/golden_h200.json holds SHA-256 digests of what the upstream Triton kernel of
selective_state_update (sglang's copy, at its default launch configs) wrote for 18 cases on an
NVIDIA H200 with torch 2.11.0+cu130 and Triton 3.6.0: out over the rows that are not padding,
and the whole state pool after one call. Two independently maintained upstream copies of the
kernel gave the same 18 digests. A case whose digest differs means ssmdecode's default path
does not compute what the upstream kernel computes, in the same order.

The digests hold for that GPU and that Triton version only (another chip or compiler may fuse
or order the float32 operations differently), so the GPU test skips on any other device, torch
or Triton minor version, and fails there instead when SSMDECODE_GOLDEN_REQUIRED=1 (a run meant
to check the bits must not pass by skipping).

The cases' inputs are drawn on the CPU from one generator a case, in a fixed order, and moved
to the GPU with their strides and storage offsets: the digests depend on every draw, dtype and
view below, so none of them may change. The CPU tests check that the builder is deterministic
and matches the digests' case names, and pin a fingerprint of its inputs (values, dtypes,
shapes, strides) so that a change to the builder shows on a machine without a GPU.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from conftest import DTYPES, to_device

GOLDEN_FILE = Path(__file__).parent / "data" / "golden_h200.json"
REQUIRED_ENV = "SSMDECODE_GOLDEN_REQUIRED"

# The stack the digests were made on (the file's "made_on"): device name, torch and Triton
# (major, minor).
GOLDEN_DEVICE = "NVIDIA H200"
GOLDEN_TORCH = (2, 11)
GOLDEN_TRITON = (3, 6)


@dataclass(frozen=True)
class GoldenCase:
    """One call of selective_state_update. Mamba2 state [pool, H, P, N]; Mamba1 (mamba1=True,
    nheads and ngroups unused) state [pool, P, N]. The pool has 3 * batch + 1 slots.

    tied: as a model passes them, x, B and C are slices of one [batch, H*P + 2*G*N] tensor and
    dt, A, D, dt_bias are stride-0 broadcasts of per-head values (Mamba2 only); otherwise each
    is a tensor of its own. pad_rows: rows whose slot index is -1 (not in out's digest)."""

    batch: int
    headdim: int
    dstate: int
    nheads: int = 0
    ngroups: int = 1
    state: str = "fp32"
    inputs: str = "bf16"
    mamba1: bool = False
    tied: bool = True
    z: bool = False
    softplus: bool = True
    indices: bool = True
    pad_rows: tuple[int, ...] = ()


_HEADLINE = dict(nheads=16, headdim=64, dstate=128)  # one Nemotron-3-Super rank under TP8
_SMALL = dict(batch=5, nheads=8, headdim=64)

GOLDEN_CASES: dict[str, GoldenCase] = {
    "headline-bs1": GoldenCase(batch=1, **_HEADLINE),
    "headline-bs7-pad": GoldenCase(batch=7, **_HEADLINE, pad_rows=(2, 5)),
    "headline-bs64": GoldenCase(batch=64, **_HEADLINE),
    "headline-z": GoldenCase(batch=9, **_HEADLINE, z=True),
    "untied": GoldenCase(**_SMALL, dstate=128, tied=False, z=True),
    "groups": GoldenCase(batch=6, nheads=8, headdim=64, dstate=128, ngroups=2),
    "untied-groups": GoldenCase(batch=6, nheads=8, headdim=64, dstate=128, ngroups=4, tied=False),
    "n16": GoldenCase(**_SMALL, dstate=16, tied=False),
    "n32": GoldenCase(**_SMALL, dstate=32),
    "n64": GoldenCase(**_SMALL, dstate=64, z=True),
    "n256": GoldenCase(**_SMALL, dstate=256),
    "p128": GoldenCase(batch=4, nheads=8, headdim=128, dstate=128),
    "state-bf16": GoldenCase(**_SMALL, dstate=128, state="bf16"),
    "state-fp16": GoldenCase(**_SMALL, dstate=128, state="fp16", inputs="fp16"),
    "inputs-fp32": GoldenCase(**_SMALL, dstate=128, inputs="fp32", tied=False),
    "no-softplus": GoldenCase(**_SMALL, dstate=128, softplus=False),
    "no-indices": GoldenCase(**_SMALL, dstate=128, indices=False),
    "mamba1": GoldenCase(batch=4, headdim=256, dstate=16, mamba1=True, z=True),
}

# SHA-256 over every case's inputs as build_case makes them (inputs_fingerprint). Measured the
# same with torch 2.13 (CPU build) and with torch 2.11 on the H200 host where these inputs
# reproduced all 18 digests (2026-12-01).
INPUTS_FINGERPRINT = "c7adea5c9d87dc7d39f03fe96bae05212e6bbb5291cb0c55345c7b7e17d1acd2"


def build_case(name: str) -> tuple[dict[str, object], list[int]]:
    """The keyword arguments of a golden case as CPU tensors, and the rows of out that are not
    padding. The generator is seeded with the sum of the name's code points; the draws run in
    the order written below, which differs by layout and must stay as it is."""
    case = GOLDEN_CASES[name]
    gen = torch.Generator().manual_seed(sum(ord(ch) for ch in name))
    sdt, idt = DTYPES[case.state], DTYPES[case.inputs]
    b, p, n = case.batch, case.headdim, case.dstate
    pool = 3 * b + 1

    def normal(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        # drawn in float32, then rounded to the tensor's dtype
        return torch.randn(*shape, generator=gen).to(dtype)

    def uniform(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=gen)

    if case.mamba1:
        state = normal(pool, p, n, dtype=sdt)
        x = normal(b, p, dtype=idt)
        dt = normal(b, p, dtype=idt)
        A = -uniform(p, n) - 0.5
        B = normal(b, n, dtype=idt)
        C = normal(b, n, dtype=idt)
        D = normal(p)
        dt_bias = uniform(p) - 4.0
        z = normal(b, p, dtype=idt) if case.z else None
    else:
        h, g = case.nheads, case.ngroups
        state = normal(pool, h, p, n, dtype=sdt)
        if case.tied:
            xbc = normal(b, h * p + 2 * g * n, dtype=idt)
            x = xbc[:, : h * p].view(b, h, p)
            B = xbc[:, h * p : h * p + g * n].view(b, g, n)
            C = xbc[:, h * p + g * n :].view(b, g, n)
            dt = normal(b, h, dtype=idt)[..., None].expand(b, h, p)
            A = (-uniform(h) - 0.5)[:, None, None].expand(h, p, n)
            D = normal(h)[:, None].expand(h, p)
            dt_bias = (uniform(h) - 4.0)[:, None].expand(h, p)
        else:
            x = normal(b, h, p, dtype=idt)
            dt = normal(b, h, p, dtype=idt)
            B = normal(b, g, n, dtype=idt)
            C = normal(b, g, n, dtype=idt)
            A = -uniform(h, p, n) - 0.5
            D = normal(h, p)
            dt_bias = uniform(h, p) - 4.0
        z = normal(b, h, p, dtype=idt) if case.z else None

    indices = None
    if case.indices:
        indices = torch.randperm(pool, generator=gen)[:b].to(torch.int32)
        indices[list(case.pad_rows)] = -1
    rows = [r for r in range(b) if not (case.indices and r in case.pad_rows)]
    kwargs = dict(
        state=state,
        x=x,
        dt=dt,
        A=A,
        B=B,
        C=C,
        D=D,
        z=z,
        dt_bias=dt_bias,
        dt_softplus=case.softplus,
        state_batch_indices=indices,
    )
    return kwargs, rows


def sha256_of(t: torch.Tensor) -> str:
    """SHA-256 of a tensor's elements in row-major order, as raw bytes."""
    return hashlib.sha256(t.detach().contiguous().cpu().view(torch.uint8).numpy()).hexdigest()


def inputs_fingerprint(names: list[str]) -> str:
    """One SHA-256 over the cases' inputs: each argument's name, dtype, shape, strides, storage
    offset and values, and the rows kept."""
    h = hashlib.sha256()
    for name in names:
        kwargs, rows = build_case(name)
        h.update(f"{name} rows={rows}".encode())
        for key, v in kwargs.items():
            if isinstance(v, torch.Tensor):
                h.update(f"{key} {v.dtype} {tuple(v.shape)} {v.stride()} {v.storage_offset()}".encode())
                h.update(sha256_of(v).encode())
            else:
                h.update(f"{key}={v!r}".encode())
    return h.hexdigest()


@functools.cache
def golden() -> dict:
    return json.loads(GOLDEN_FILE.read_text())


def _major_minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(re.match(r"\d+", minor).group())


def stack_mismatch() -> str | None:
    """Why this machine cannot check the digests (None when it can)."""
    import triton

    if not torch.cuda.is_available():
        return "no CUDA device"
    device = torch.cuda.get_device_name()
    if not device.startswith(GOLDEN_DEVICE):
        return f"the device is {device}, not an {GOLDEN_DEVICE}"
    if _major_minor(torch.__version__) != GOLDEN_TORCH:
        return f"torch is {torch.__version__}, not {'.'.join(map(str, GOLDEN_TORCH))}"
    if _major_minor(triton.__version__) != GOLDEN_TRITON:
        return f"Triton is {triton.__version__}, not {'.'.join(map(str, GOLDEN_TRITON))}"
    return None


def require_golden_stack() -> None:
    """Skip unless this is the digests' stack; fail instead when SSMDECODE_GOLDEN_REQUIRED=1."""
    why = stack_mismatch()
    if why is None:
        return
    message = f"golden digests hold only on {golden()['made_on']}; here {why}"
    if os.environ.get(REQUIRED_ENV) == "1":
        pytest.fail(f"{REQUIRED_ENV}=1: {message}")
    pytest.skip(message)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(GOLDEN_CASES))
def test_default_path_matches_upstream_digests(name: str) -> None:
    require_golden_stack()
    from ssmdecode import selective_state_update

    kwargs, rows = build_case(name)
    kwargs = {k: to_device(v, "cuda") for k, v in kwargs.items()}
    out = selective_state_update(**kwargs)
    got = {"out": sha256_of(out[rows]), "state": sha256_of(kwargs["state"])}
    want = golden()["cases"][name]
    differs = [part for part in ("out", "state") if got[part] != want[part]]
    assert not differs, f"{name}: {' and '.join(differs)} differ from the upstream kernel's bits"


def test_required_golden_stack_is_here() -> None:
    """SSMDECODE_GOLDEN_REQUIRED=1 on a machine without a GPU: conftest skips the GPU tests
    before they can fail, so this one fails in their place."""
    if os.environ.get(REQUIRED_ENV) != "1":
        pytest.skip(f"{REQUIRED_ENV} is not set")
    why = stack_mismatch()
    assert why is None, f"{REQUIRED_ENV}=1, but the golden digests cannot be checked here: {why}"


def test_cases_are_the_digests_cases() -> None:
    data = golden()
    assert list(GOLDEN_CASES) == list(data["cases"])
    for name, digests in data["cases"].items():
        assert set(digests) == {"out", "state"}, name
        assert all(re.fullmatch(r"[0-9a-f]{64}", d) for d in digests.values()), name
    # the skip rule reads the same stack as the file's provenance
    made_on = data["made_on"]
    assert made_on.startswith(GOLDEN_DEVICE + ",")
    assert f"torch {'.'.join(map(str, GOLDEN_TORCH))}." in made_on
    assert f"triton {'.'.join(map(str, GOLDEN_TRITON))}." in made_on


def test_builder_is_deterministic_and_unchanged() -> None:
    names = list(GOLDEN_CASES)
    first = inputs_fingerprint(names)
    assert inputs_fingerprint(names) == first, "two builds of the golden inputs differ"
    assert first == INPUTS_FINGERPRINT, (
        "the golden inputs changed (a draw, dtype, shape or view of build_case, or torch's CPU "
        "generator): the digests were made from the inputs of INPUTS_FINGERPRINT"
    )
