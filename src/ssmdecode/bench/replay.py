"""ReplaySSM cases, floors and routes for `ssmdecode bench-replay`: ssmdecode's replay beside
the engines' kernels on the same tensors, timed and checked against float64 in one process.

A case is one (T, batch, cursor law) on one state pool. Its tensors, as docs/measuring.md
("ReplaySSM") describes the anchors' runs:

- state pool [S, H, P, N] float32 standard normal, slot 0 never used (vLLM's null block), K
  disjoint random slot sets of B slots (K by cold_rotation of the state bytes: >= 3x L2);
- x, B, C [B, T, ...] bfloat16 strided views of one projection [B, T, H*P + 2*G*N]; dt [B, T, H]
  bfloat16 broadcast over P; A = -(U(0,1) + 0.5) a head, D and dt_bias a head (float32, tied
  over P); dt_bias U(-4, -3), softplus on;
- the tokens each slot has cached, drawn once a slot (x, B bfloat16 and the raw dt), placed into
  each route's own ring layout: ssmdecode's and flashinfer's rings (R = window + T rows from a
  ring_start uniform a slot, dt' = softplus(dt + dt_bias) float32), vLLM's T = 1 buffer (window
  rows from 0, dt' float32) and vLLM's spec cache (x|B rows of a power-of-two circular buffer
  from a uniform origin, raw dt float32);
- the cursors a slot, by the law (steady state as docs/measuring.md has the anchors'):
  T = 1: vLLM's write_pos w uniform in 0 .. W-1, a flush where w = W-1 (the host's rule,
  mamba_attn.py); ssmdecode's num_cached = w + 1 (its ring holds the token that flushed last
  as vLLM's checkpoint holds it), whose own rule (num_cached + 2 T > R) flushes the same slots;
  T >= 2: the cached count k uniform in 0 .. W, a flush where k > W - T, for all three routes
  (ssmdecode's num_cached, flashinfer's prev_num_accepted_tokens, vLLM's write_pos and is_flush:
  each one's own rule gives the same slots). "noflush" draws only non-flushing counts,
  "allflush" only flushing ones.

Cursors stay fixed across a timed graph's calls: a non-flush step writes no state, so each
replay is the same step (a flushing one rewrites its checkpoint with different values, the same
bytes). Only the SSM kernels are timed, never the cursors' bookkeeping.

Floor of a case (the issue's): the read-only stream of the states over the same slots, plus the
flushing share of (read + write stream - read-only stream), plus the rings' reads and appends,
the inputs' and the outputs' bytes at the read + write stream's (a copy's) bandwidth, all
measured in the same run.

Accuracy: each route's out and flushed states against a float64 recurrence of that route's own
inputs (its checkpoint, its cached tokens and their dt', the drafts), on call 0's slot set.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
import triton

from ssmdecode.bench.anchors import (
    Anchor,
    flashinfer_uri,
    load_flashinfer,
    load_vllm_output_only,
    load_vllm_spec,
)
from ssmdecode.bench.timer import Timing, cold_rotation, time_cold
from ssmdecode.numerics import bf16_ulp, out_resolution
from ssmdecode.ops.selective_state_update import selective_state_replay, selective_state_update
from ssmdecode.shapes import Shape

__all__ = [
    "LAWS",
    "ReplayCase",
    "Route",
    "accuracy_of",
    "case_floor_bytes",
    "make_case",
    "routes_for",
]

LAWS = ("steady", "noflush", "allflush")
_NULL_SLOT = 0  # vLLM's NULL_BLOCK_ID: no request ever gets this slot


@dataclass
class ReplayCase:
    """The tensors of one (T, batch, law); see the module docstring. Shapes: S slots, K sets,
    B requests, T tokens, W window, R = W + T."""

    shape: Shape
    tokens: int
    batch: int
    window: int
    law: str
    slot_sets: torch.Tensor  # [K, B] int32, rows contiguous
    state: torch.Tensor  # [S, H, P, N]
    xbc: torch.Tensor  # [B, T, H*P + 2*G*N]
    dt_raw: torch.Tensor  # [B, T, H] bfloat16
    A_head: torch.Tensor  # [H] float32
    D_head: torch.Tensor  # [H]
    dt_bias_head: torch.Tensor  # [H]
    tok_x: torch.Tensor  # [S, H, W, P] the cached tokens a slot, in order
    tok_B: torch.Tensor  # [S, G, W, N]
    tok_dt_raw: torch.Tensor  # [S, H, W] float32 (bfloat16 values)
    count: torch.Tensor  # [S] int32: T = 1 vLLM's write_pos, else the cached count
    start: torch.Tensor  # [S] int32: ssmdecode's / flashinfer's ring_start, in [0, R)
    origin: torch.Tensor  # [S] int32: vLLM's spec circular origin, in [0, buf)
    # [S, H, P, N] the pool as made, accuracy_of's starting point: the timed calls flush from
    # fixed cursors call after call, which drives a flushing slot's state to the flush's fixed
    # point, where a route that stored nothing would read as exact
    initial_state: torch.Tensor
    layouts: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)

    @property
    def rotation(self) -> int:
        return self.slot_sets.shape[0]

    @property
    def ring(self) -> int:
        return self.window + self.tokens

    @property
    def x(self) -> torch.Tensor:
        H, P = self.shape.nheads, self.shape.headdim
        return self.xbc[..., : H * P].view(self.batch, self.tokens, H, P)

    @property
    def B(self) -> torch.Tensor:
        H, P, G, N = self.shape.nheads, self.shape.headdim, self.shape.ngroups, self.shape.dstate
        return self.xbc[..., H * P : H * P + G * N].view(self.batch, self.tokens, G, N)

    @property
    def C(self) -> torch.Tensor:
        H, P, G, N = self.shape.nheads, self.shape.headdim, self.shape.ngroups, self.shape.dstate
        return self.xbc[..., H * P + G * N :].view(self.batch, self.tokens, G, N)

    @property
    def dt(self) -> torch.Tensor:
        return self.dt_raw[..., None].expand(*self.dt_raw.shape, self.shape.headdim)

    @property
    def A(self) -> torch.Tensor:
        return self.A_head[:, None, None].expand(self.shape.nheads, self.shape.headdim, self.shape.dstate)

    @property
    def D(self) -> torch.Tensor:
        return self.D_head[:, None].expand(self.shape.nheads, self.shape.headdim)

    @property
    def dt_bias(self) -> torch.Tensor:
        return self.dt_bias_head[:, None].expand(self.shape.nheads, self.shape.headdim)

    def num_cached(self) -> torch.Tensor:
        """ssmdecode's (and flashinfer's) cached count a slot: T = 1 one more than vLLM's
        write_pos (see the module docstring)."""
        return self.count + 1 if self.tokens == 1 else self.count

    def flushes(self, slots: torch.Tensor) -> torch.Tensor:
        """bool [len(slots)]: which of these slots flush this step (every route agrees)."""
        c = self.count[slots.long()]
        return c == self.window - 1 if self.tokens == 1 else c > self.window - self.tokens

    def flush_fraction(self) -> float:
        return float(self.flushes(self.slot_sets.flatten()).float().mean())

    def mean_cached(self) -> float:
        """The mean cached count over the calls' slots (ssmdecode's ring reads)."""
        return float(self.num_cached()[self.slot_sets.flatten().long()].float().mean())

    def dt_prime(self, raw: torch.Tensor, head_axis: int = 1) -> torch.Tensor:
        """softplus(raw + dt_bias) in float32, dt_bias broadcast along raw's head axis."""
        shape = [1] * raw.dim()
        shape[head_axis] = -1
        return F.softplus(raw.float() + self.dt_bias_head.view(shape))


def _law_counts(law: str, tokens: int, window: int, n: int, gen: torch.Generator, device) -> torch.Tensor:
    if tokens == 1:  # vLLM's write_pos in 0 .. W-1, flush at W-1
        lo, hi = {"steady": (0, window), "noflush": (0, window - 1), "allflush": (window - 1, window)}[law]
    else:  # cached count in 0 .. W, flush above W - T
        lo, hi = {
            "steady": (0, window + 1),
            "noflush": (0, window - tokens + 1),
            "allflush": (window - tokens + 1, window + 1),
        }[law]
    return torch.randint(lo, hi, (n,), generator=gen, device=device, dtype=torch.int32)


def make_case(
    shape: Shape,
    tokens: int,
    batch: int,
    window: int,
    law: str,
    device: torch.device,
    seed: int,
    rotation: int | None = None,
) -> ReplayCase:
    """The tensors of one case (see the module docstring)."""
    if law not in LAWS:
        raise ValueError(f"law must be one of {LAWS}, got {law!r}")
    if tokens < 1 or tokens > window:
        raise ValueError(f"need 1 <= tokens <= window, got tokens {tokens}, window {window}")
    if window < 2:
        raise ValueError(f"window must be >= 2, got {window}")
    H, P, N, G = shape.nheads, shape.headdim, shape.dstate, shape.ngroups
    rotation = rotation or cold_rotation(shape.state_bytes(batch), device)
    pool = rotation * batch + 1
    gen = torch.Generator(device=device).manual_seed(seed)

    def normal(*s: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*s, generator=gen, device=device, dtype=torch.float32).to(dtype)

    def uniform(lo: float, hi: float, *s: int) -> torch.Tensor:
        return torch.rand(*s, generator=gen, device=device) * (hi - lo) + lo

    state = normal(pool, H, P, N, dtype=shape.state_dtype)
    xbc = normal(batch, tokens, H * P + 2 * G * N, dtype=shape.dtype)
    dt_raw = normal(batch, tokens, H, dtype=shape.dtype)
    A_head = -(uniform(0.0, 1.0, H) + 0.5)
    D_head = normal(H)
    dt_bias_head = uniform(-4.0, -3.0, H)
    tok_x = normal(pool, H, window, P, dtype=shape.dtype)
    tok_B = normal(pool, G, window, N, dtype=shape.dtype)
    tok_dt_raw = normal(pool, H, window, dtype=shape.dtype).float()
    count = _law_counts(law, tokens, window, pool, gen, device)
    start = torch.randint(0, window + tokens, (pool,), generator=gen, device=device, dtype=torch.int32)
    buf = triton.next_power_of_2(window + tokens)
    origin = torch.randint(0, buf, (pool,), generator=gen, device=device, dtype=torch.int32)
    perm = torch.randperm(pool - 1, generator=gen, device=device).to(torch.int32) + 1
    slot_sets = perm[: rotation * batch].view(rotation, batch).contiguous()
    return ReplayCase(
        shape,
        tokens,
        batch,
        window,
        law,
        slot_sets,
        state,
        xbc,
        dt_raw,
        A_head,
        D_head,
        dt_bias_head,
        tok_x,
        tok_B,
        tok_dt_raw,
        count,
        start,
        origin,
        state.clone(),
    )


def case_floor_bytes(case: ReplayCase) -> dict[str, float]:
    """The bytes a call moves besides the state, a call (means over the slot sets): the rings'
    reads (the cached tokens) and appends (the drafts), the inputs and the outputs."""
    s = case.shape
    x_bytes = s.nheads * s.headdim * s.dtype.itemsize
    ring_token = x_bytes + s.ngroups * s.dstate * s.dtype.itemsize + s.nheads * 4
    input_token = x_bytes + 2 * s.ngroups * s.dstate * s.dtype.itemsize + s.nheads * s.dtype.itemsize
    b, t = case.batch, case.tokens
    return {
        "rings": b * (case.mean_cached() + t) * ring_token,
        "inputs": b * t * input_token,
        "outputs": b * t * x_bytes,
    }


# ---------------------------------------------------------------------------------------------
# layouts: each route's rings from the case's tokens


def _ring_positions(start: torch.Tensor, n: int, ring: int) -> torch.Tensor:
    """[S, n] long: (start + j) mod ring."""
    j = torch.arange(n, device=start.device)
    return (start.long()[:, None] + j) % ring


def ssmdecode_rings(case: ReplayCase) -> dict[str, torch.Tensor]:
    """ssmdecode's and flashinfer's rings [S, H, R, P], [S, G, R, N], [S, H, R] dt' float32,
    ring_start and num_cached int32 [S] (made once a case, shared by every route of that
    layout)."""
    if "ring" in case.layouts:
        return case.layouts["ring"]
    S, H, W, P = case.tok_x.shape
    G, N, R = case.tok_B.shape[1], case.tok_B.shape[3], case.ring
    pos = _ring_positions(case.start, W, R)  # the W tokens at their ring rows (R > W: distinct)
    x_cache = torch.zeros(S, H, R, P, dtype=case.tok_x.dtype, device=case.tok_x.device)
    B_cache = torch.zeros(S, G, R, N, dtype=case.tok_B.dtype, device=case.tok_B.device)
    dt_cache = torch.zeros(S, H, R, dtype=torch.float32, device=case.tok_x.device)
    x_cache.scatter_(2, pos[:, None, :, None].expand(S, H, W, P), case.tok_x)
    B_cache.scatter_(2, pos[:, None, :, None].expand(S, G, W, N), case.tok_B)
    dt_cache.scatter_(2, pos[:, None, :].expand(S, H, W), case.dt_prime(case.tok_dt_raw))
    case.layouts["ring"] = dict(
        x_cache=x_cache,
        B_cache=B_cache,
        dt_cache=dt_cache,
        ring_start=case.start.clone(),
        num_cached=case.num_cached().to(torch.int32).contiguous(),
    )
    return case.layouts["ring"]


def vllm_t1_buffers(case: ReplayCase) -> dict[str, torch.Tensor]:
    """vLLM's T = 1 buffers: x_cache [S, H, W, P], dt_cache [S, H, W] dt' float32, B_cache
    [S, G, W, N] (token j at row j), and per slot set i write_pos / is_flush rows [K, B] and the
    bc_pre scratch [B, G, W] float32."""
    if "vllm_t1" in case.layouts:
        return case.layouts["vllm_t1"]
    slots = case.slot_sets.long()
    case.layouts["vllm_t1"] = dict(
        x_cache=case.tok_x.clone(),
        dt_cache=case.dt_prime(case.tok_dt_raw).contiguous(),
        B_cache=case.tok_B.clone(),
        write_pos=case.count[slots].to(torch.int32).contiguous(),
        is_flush=case.flushes(case.slot_sets.flatten()).view(slots.shape).to(torch.int8).contiguous(),
        bc_pre=torch.zeros(
            case.batch, case.shape.ngroups, case.window, dtype=torch.float32, device=slots.device
        ),
    )
    return case.layouts["vllm_t1"]


def vllm_spec_buffers(case: ReplayCase) -> dict[str, torch.Tensor]:
    """vLLM's spec cache: post_conv_cache [S, buf, H*P + G*N] (x | B rows, circular from each
    slot's origin), dt_cache [S, H, buf] raw dt float32, write_pos / post_conv_state_pos int32
    and is_flush int8 [S] (slot-keyed), query_start_loc, bc_pre [B, G, buf, next_pow2(T)] in the
    inputs' dtype (its default)."""
    if "vllm_spec" in case.layouts:
        return case.layouts["vllm_spec"]
    S, H, W, P = case.tok_x.shape
    G, N = case.tok_B.shape[1], case.tok_B.shape[3]
    buf = triton.next_power_of_2(case.ring)
    pos = _ring_positions(case.origin, W, buf)
    rows = torch.cat(
        [
            case.tok_x.permute(0, 2, 1, 3).reshape(S, W, H * P),
            case.tok_B.permute(0, 2, 1, 3).reshape(S, W, G * N),
        ],
        dim=2,
    )
    post = torch.zeros(S, buf, H * P + G * N, dtype=case.tok_x.dtype, device=rows.device)
    post.scatter_(1, pos[:, :, None].expand(S, W, H * P + G * N), rows)
    dt_cache = torch.zeros(S, H, buf, dtype=torch.float32, device=rows.device)
    dt_cache.scatter_(2, pos[:, None, :].expand(S, H, W), case.tok_dt_raw)
    all_slots = torch.arange(S, device=rows.device)
    case.layouts["vllm_spec"] = dict(
        post_conv_cache=post,
        dt_cache=dt_cache,
        write_pos=case.count.clone(),
        post_conv_state_pos=case.origin.clone(),
        is_flush=case.flushes(all_slots).to(torch.int8).contiguous(),
        query_start_loc=torch.arange(
            0, case.batch * case.tokens + 1, case.tokens, dtype=torch.int32, device=rows.device
        ),
        bc_pre=torch.zeros(
            case.batch,
            G,
            buf,
            triton.next_power_of_2(case.tokens),
            dtype=case.tok_x.dtype,
            device=rows.device,
        ),
    )
    return case.layouts["vllm_spec"]


# ---------------------------------------------------------------------------------------------
# routes


@dataclass
class Route:
    """One way to run the case's step.

    name: the row's label; kind: "ssmdecode" or "anchor"; why_not: "" when it runs.
    call(i, tensors): the step on slot set i with these tensors (timed with the case's own; a
    route that only reads the pool reads tensors["state"] where given);
    writes: {name: the case's tensor it writes}, cloned fresh for the accuracy run (the state from
    the pool as made, case.initial_state);
    out(tensors): its out as [B, T, H, P]; state_semantics: "cached" (a flush writes the
    checkpoint plus the cached tokens) or "current" (plus the current token, vLLM's T = 1), or
    "table" / "buffer" for the single-token and intermediate-state paths.
    """

    name: str
    kind: str
    why_not: str = ""
    call: Callable[[int, dict[str, torch.Tensor]], object] | None = None
    writes: dict[str, torch.Tensor] = field(default_factory=dict)
    out: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None
    state_semantics: str = "cached"
    family: str = ""  # the anchors' family for "x vs": "vllm" or "flashinfer"

    @property
    def available(self) -> bool:
        return not self.why_not


def _has_fast_route() -> bool:
    return "exact" in inspect.signature(selective_state_replay).parameters


def _compat_vllm_output_only() -> Callable[..., object] | None:
    try:
        from ssmdecode.compat import vllm as compat_vllm
    except ImportError:
        return None
    return getattr(compat_vllm, "selective_state_update_replayssm_output_only", None)


def _replay_route(case: ReplayCase, exact: bool) -> Route:
    rings = ssmdecode_rings(case)
    out = torch.empty(
        case.batch,
        case.tokens,
        case.shape.nheads,
        case.shape.headdim,
        dtype=case.shape.dtype,
        device=case.state.device,
    )
    writes = {"state": case.state, **{k: rings[k] for k in ("x_cache", "B_cache", "dt_cache")}, "out": out}
    extra = {} if exact else {"exact": False}

    def call(i: int, t: dict[str, torch.Tensor]) -> None:
        selective_state_replay(
            t["state"],
            t["x_cache"],
            t["B_cache"],
            t["dt_cache"],
            rings["ring_start"],
            rings["num_cached"],
            case.x,
            case.dt,
            case.A,
            case.B,
            case.C,
            D=case.D,
            dt_bias=case.dt_bias,
            dt_softplus=True,
            state_batch_indices=case.slot_sets[i % case.rotation],
            out=t["out"],
            **extra,
        )

    return Route(
        f"ssmdecode replay {'exact' if exact else 'fast'}",
        "ssmdecode",
        call=call,
        writes=writes,
        out=lambda t: t["out"],
    )


def _table_route(case: ReplayCase) -> Route:
    out = torch.empty(
        case.batch, 1, case.shape.nheads, case.shape.headdim, dtype=case.shape.dtype, device=case.state.device
    )

    def call(i: int, t: dict[str, torch.Tensor]) -> None:
        selective_state_update(
            t["state"],
            case.x[:, 0],
            case.dt[:, 0],
            case.A,
            case.B[:, 0],
            case.C[:, 0],
            D=case.D,
            dt_bias=case.dt_bias,
            dt_softplus=True,
            state_batch_indices=case.slot_sets[i % case.rotation],
            out=t["out"][:, 0],
        )

    return Route(
        "ssmdecode single-token table",
        "ssmdecode",
        call=call,
        writes={"state": case.state, "out": out},
        out=lambda t: t["out"],
        state_semantics="table",
    )


def _buffer_route(case: ReplayCase) -> Route:
    s, K, b = case.shape, case.rotation, case.batch
    dev = case.state.device
    buffer = torch.zeros(K * b, case.tokens, s.nheads, s.headdim, s.dstate, dtype=s.state_dtype, device=dev)
    gen = torch.Generator(device=dev).manual_seed(7)
    rows = torch.randperm(K * b, generator=gen, device=dev).to(torch.int32).view(K, b).contiguous()
    out = torch.empty(b, case.tokens, s.nheads, s.headdim, dtype=s.dtype, device=dev)

    def call(i: int, t: dict[str, torch.Tensor]) -> None:
        selective_state_update(
            t.get("state", case.state),  # (accuracy_of's: the pool as made)
            case.x,
            case.dt,
            case.A,
            case.B,
            case.C,
            D=case.D,
            dt_bias=case.dt_bias,
            dt_softplus=True,
            state_batch_indices=case.slot_sets[i % K],
            out=t["out"],
            intermediate_states=t["buffer"],
            intermediate_state_indices=rows[i % K],
            disable_state_update=True,
        )

    route = Route(
        "ssmdecode intermediate-state (sglang buffer, table)",
        "ssmdecode",
        call=call,
        writes={"buffer": buffer, "out": out},
        out=lambda t: t["out"],
        state_semantics="buffer",
    )
    route.buffer_rows = rows  # type: ignore[attr-defined]  (the accuracy run reads call 0's)
    return route


def _vllm_t1_kwargs(case: ReplayCase, i: int, t: dict[str, torch.Tensor], v: dict[str, torch.Tensor]) -> dict:
    return dict(
        state=t["state"],
        x=case.x[:, 0],
        dt=case.dt[:, 0],
        A=case.A,
        B=case.B[:, 0],
        C=case.C[:, 0],
        D=case.D,
        dt_bias=case.dt_bias,
        dt_softplus=True,
        x_cache=t["x_cache"],
        dt_cache=t["dt_cache"],
        B_cache=t["B_cache"],
        bc_pre=v["bc_pre"],
        write_pos=v["write_pos"][i % case.rotation],
        is_flush=v["is_flush"][i % case.rotation],
        max_cache_len=case.window,
        state_batch_indices=case.slot_sets[i % case.rotation],
        null_block_id=_NULL_SLOT,
        out=t["out"][:, 0],
    )


def _vllm_t1_route(case: ReplayCase, name: str, fn: Callable[..., object], kind: str) -> Route:
    v = vllm_t1_buffers(case)
    out = torch.empty(
        case.batch, 1, case.shape.nheads, case.shape.headdim, dtype=case.shape.dtype, device=case.state.device
    )
    writes = {
        "state": case.state,
        "x_cache": v["x_cache"],
        "dt_cache": v["dt_cache"],
        "B_cache": v["B_cache"],
        "out": out,
    }
    return Route(
        name,
        kind,
        call=lambda i, t: fn(**_vllm_t1_kwargs(case, i, t, v)),
        writes=writes,
        out=lambda t: t["out"],
        state_semantics="current",
        family="vllm" if kind == "anchor" else "",
    )


def _vllm_spec_route(case: ReplayCase, anchor: Anchor) -> Route:
    v = vllm_spec_buffers(case)
    s = case.shape
    out = torch.empty(case.batch * case.tokens, s.nheads, s.headdim, dtype=s.dtype, device=case.state.device)
    conv_out = case.xbc.view(case.batch * case.tokens, -1)
    dt_spec = case.dt_raw.view(case.batch * case.tokens, s.nheads)

    def call(i: int, t: dict[str, torch.Tensor]) -> None:
        anchor.fn(
            t["state"],
            t["post_conv_cache"],
            t["dt_cache"],
            conv_out,
            dt_spec,
            case.A,
            v["write_pos"],
            v["post_conv_state_pos"],
            v["is_flush"],
            v["query_start_loc"],
            case.slot_sets[i % case.rotation],
            max_cache_len=case.ring,
            max_spec_len=case.tokens,
            d_inner=s.nheads * s.headdim,
            ngroups=s.ngroups,
            dstate=s.dstate,
            D=case.D,
            dt_bias=case.dt_bias,
            dt_softplus=True,
            out=t["out"],
            bc_pre=v["bc_pre"],
            null_block_id=_NULL_SLOT,
        )

    return Route(
        "vLLM Triton spec (15a31c8e)",
        "anchor",
        call=call,
        writes={
            "state": case.state,
            "post_conv_cache": v["post_conv_cache"],
            "dt_cache": v["dt_cache"],
            "out": out,
        },
        out=lambda t: t["out"].view(case.batch, case.tokens, s.nheads, s.headdim),
        family="vllm",
    )


def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def _flashinfer_routes(case: ReplayCase, anchor: Anchor) -> list[Route]:
    """flashinfer's two algorithms on ssmdecode's rings, each with its wrapper's d_split rule:
    the monolith with d_split 2 for a float32 state while batch x heads <= 8 x SMs, the
    two-kernel split (precompute + main, its scratch) with d_split 1."""
    rings = ssmdecode_rings(case)
    s, b, dev = case.shape, case.batch, case.state.device
    out = torch.empty(b, case.tokens, s.nheads, s.headdim, dtype=s.dtype, device=dev)
    dt = case.dt_raw[..., None].expand(b, case.tokens, s.nheads, s.headdim)  # strides (., H, 1, 0)
    t_pad, k_old = -(-case.tokens // 16) * 16, -(-case.window // 8) * 8
    scratch = (
        torch.empty(b, s.nheads, 32, 8, dtype=s.dtype, device=dev),
        torch.empty(b, s.nheads, t_pad, dtype=torch.float32, device=dev),
        torch.empty(b, s.nheads, 32, k_old // 2, dtype=s.dtype, device=dev),
    )
    monolith_split = 2 if (s.headdim // 2 >= 32 and b * s.nheads <= 8 * _sm_count(dev)) else 1
    routes = []
    for algorithm, d_split, extra in (
        ("monolith", monolith_split, (None, None, None)),
        ("two-kernel", 1, scratch),
    ):

        def call(i: int, t: dict[str, torch.Tensor], d_split=d_split, extra=extra) -> None:
            anchor.fn(
                t["state"],
                case.x,
                dt,
                case.A,
                case.B,
                case.C,
                t["out"],
                t["x_cache"],
                t["B_cache"],
                t["dt_cache"],
                rings["ring_start"],
                rings["num_cached"],
                case.D,
                None,
                case.dt_bias,
                True,
                case.slot_sets[i % case.rotation],
                -1,
                None,
                None,
                d_split,
                None,
                *extra,
                0,
            )

        routes.append(
            Route(
                f"flashinfer checkpointing_ssu {algorithm} (d_split {d_split})",
                "anchor",
                call=call,
                writes={
                    "state": case.state,
                    **{k: rings[k] for k in ("x_cache", "B_cache", "dt_cache")},
                    "out": out,
                },
                out=lambda t: t["out"],
                family="flashinfer",
            )
        )
    return routes


def routes_for(case: ReplayCase, anchors: dict[str, Anchor] | None = None) -> list[Route]:
    """Every route of the case, available or not (why_not says why not): ssmdecode's single-
    token table (T = 1), exact and fast replay, compat.vllm's output-only adapter (T = 1), the
    intermediate-state path (T >= 2); vLLM's output-only kernel (T = 1) or its spec kernel
    (T >= 2), flashinfer's two algorithms (a module built for this T and window)."""
    anchors = anchors if anchors is not None else load_anchors(case)
    s, t = case.shape, case.tokens
    routes: list[Route] = []
    if t == 1:
        routes.append(_table_route(case))
    routes.append(_replay_route(case, exact=True))
    if _has_fast_route():
        routes.append(_replay_route(case, exact=False))
    else:
        routes.append(
            Route("ssmdecode replay fast", "ssmdecode", "not available: no exact=False in this tree")
        )
    if t == 1:
        adapter = _compat_vllm_output_only()
        name = "ssmdecode compat.vllm output-only"
        if adapter is None:
            routes.append(Route(name, "ssmdecode", "not available: no such adapter in this tree"))
        else:
            routes.append(_vllm_t1_route(case, name, adapter, "ssmdecode"))
    else:
        routes.append(_buffer_route(case))
    key = "vllm_output_only" if t == 1 else "vllm_spec"
    vllm = anchors[key]
    vname = "vLLM output-only (055e47c2, its H200 config)" if t == 1 else "vLLM Triton spec (15a31c8e)"
    if not vllm.available:
        routes.append(Route(vname, "anchor", vllm.why_not, family="vllm"))
    elif t == 1:
        routes.append(_vllm_t1_route(case, vname, vllm.fn, "anchor"))
    else:
        routes.append(_vllm_spec_route(case, vllm))
    fi = anchors["flashinfer"]
    if not fi.available:
        routes.append(Route("flashinfer checkpointing_ssu", "anchor", fi.why_not, family="flashinfer"))
    elif case.state.device.type != "cuda" or s.state_dtype != torch.float32:
        routes.append(
            Route(
                "flashinfer checkpointing_ssu",
                "anchor",
                "not available: CUDA float32 states only",
                family="flashinfer",
            )
        )
    else:
        routes.extend(_flashinfer_routes(case, fi))
    return routes


def load_anchors(case: ReplayCase) -> dict[str, Anchor]:
    """The engines' kernels this case can run (see ssmdecode.bench.anchors)."""
    s = case.shape
    if case.tokens == 1:
        fi = Anchor(
            "flashinfer checkpointing_ssu", None, "not available: flashinfer's kernel needs T >= 2 here"
        )
    else:
        uri = flashinfer_uri(case.tokens, case.window, s.headdim, s.dstate, s.nheads // s.ngroups, s.ngroups)
        fi = load_flashinfer(uri)
    return {
        "vllm_output_only": load_vllm_output_only() if case.tokens == 1 else Anchor("", None, "T >= 2"),
        "vllm_spec": load_vllm_spec() if case.tokens > 1 else Anchor("", None, "T = 1"),
        "flashinfer": fi,
    }


def time_route(case: ReplayCase, route: Route, device: torch.device) -> Timing:
    """One call's time by the cold-L2 CUDA-graph timer, call i on slot set i mod K."""
    return time_cold(lambda i: route.call(i, route.writes), device, rotation=case.rotation)


# ---------------------------------------------------------------------------------------------
# accuracy against float64


def _per_head(t: torch.Tensor, heads: int) -> torch.Tensor:
    """[..., G, N] -> [..., H, N]: each head its group's row."""
    return t.repeat_interleave(heads // t.shape[-2], dim=-2)


def _step(
    h: torch.Tensor, A: torch.Tensor, x: torch.Tensor, Bh: torch.Tensor, dtp: torch.Tensor
) -> torch.Tensor:
    """One recurrence step in float64: h [b, H, P, N], x [b, H, P], Bh [b, H, N], dtp [b, H]."""
    return torch.exp(A * dtp)[..., None, None] * h + (dtp[..., None] * x)[..., None] * Bh[:, :, None, :]


def reference(case: ReplayCase, route: Route, i: int = 0) -> dict[str, torch.Tensor]:
    """The float64 recurrence of route's own inputs on slot set i: {"out" [B, T, H, P], "state"
    [B, H, P, N] what a flush (or the single-token path) writes, "buffer" [B, T, H, P, N] the
    intermediate states}."""
    H = case.shape.nheads
    slots = case.slot_sets[i].long()
    d = torch.float64
    A, D = case.A_head.to(d), case.D_head.to(d)
    h = case.initial_state[slots].to(d)
    x = case.x.to(d)  # [B, T, H, P]
    dtp = F.softplus(case.dt_raw.to(d) + case.dt_bias_head.to(d))  # [B, T, H], exact
    Bh, Ch = _per_head(case.B.to(d), H), _per_head(case.C.to(d), H)
    if route.state_semantics in ("cached", "current"):
        raw = case.tok_dt_raw[slots]  # [b, H, W]
        if route.family == "vllm" and case.tokens > 1:  # vLLM's spec ring holds the raw dt
            hist_dt = F.softplus(raw.to(d) + case.dt_bias_head.to(d)[:, None])
        else:  # the others hold dt' in float32: that is their input
            hist_dt = case.dt_prime(raw).to(d)
        cached = case.count[slots] if route.state_semantics == "current" else case.num_cached()[slots]
        hx = case.tok_x[slots].to(d)  # [b, H, W, P]
        hB = _per_head(case.tok_B[slots].transpose(1, 2).to(d), H)  # [b, W, H, N]
        for j in range(case.window):
            live = (j < cached.long())[:, None, None, None]
            h = torch.where(live, _step(h, A, hx[:, :, j], hB[:, j], hist_dt[:, :, j]), h)
    h_cached = h
    outs, states = [], []
    for t in range(case.tokens):
        h = _step(h, A, x[:, t], Bh[:, t], dtp[:, t])
        states.append(h)
        outs.append((h * Ch[:, t, :, None, :]).sum(-1) + D[:, None] * x[:, t])
    result = {"out": torch.stack(outs, 1)}
    if route.state_semantics == "cached":  # the checkpoint plus the cached tokens
        result["state"] = h_cached
    elif route.state_semantics in ("current", "table"):  # ... and the current token
        result["state"] = states[0]
    else:
        result["buffer"] = torch.stack(states, 1)
    return result


def accuracy_of(case: ReplayCase, route: Route, i: int = 0) -> dict[str, object]:
    """route's call i on fresh copies of what it writes (the state from the pool as made, whatever
    the timed calls wrote since), against the float64 reference: out's
    max and mean error in bfloat16 ulps at the float64 value, its max in units of
    numerics.out_resolution (the ulp floored at float32's summation floor, the fast route's
    bar), the mean of bf16(float64 out)'s own error beside it, and the written states' max abs
    error over max |state|."""
    fresh = {k: (case.initial_state if v is case.state else v).clone() for k, v in route.writes.items()}
    fresh.setdefault("state", case.initial_state.clone())  # a route that only reads the pool
    if "out" in fresh:
        fresh["out"].fill_(float("nan"))
    route.call(i, fresh)
    want = reference(case, route, i)
    got_out = route.out(fresh).double()
    ulp = bf16_ulp(want["out"])
    diff = (got_out - want["out"]).abs()
    err = diff / ulp
    own = (want["out"].to(torch.bfloat16).double() - want["out"]).abs() / ulp
    result: dict[str, object] = {
        "out_max_ulps": float(err.max()),
        "out_max_floored": float((diff / out_resolution(want["out"])).max()),
        "out_mean_ulps": float(err.mean()),
        "bf16_of_float64_mean_ulps": float(own.mean()),
        "out_nan": bool(got_out.isnan().any()),
    }
    slots = case.slot_sets[i].long()
    if "state" in want:
        if route.state_semantics == "table":
            rows = torch.ones_like(slots, dtype=torch.bool)
        else:
            rows = case.flushes(case.slot_sets[i])
        result["flushed_rows"] = int(rows.sum())
        got_state = fresh["state"][slots]
        if rows.any():
            ref = want["state"][rows]
            result["state_max_rel"] = float((got_state[rows].double() - ref).abs().max() / ref.abs().max())
            result["state_max_abs"] = float(ref.abs().max())
        else:
            result["state_max_rel"] = None
        if (~rows).any():  # the checkpoints of the rows that do not flush: untouched, bit for bit
            made = case.initial_state[slots]
            result["unflushed_untouched"] = bool(torch.equal(got_state[~rows], made[~rows]))
    if "buffer" in want:
        rows_i = route.buffer_rows[i].long()  # type: ignore[attr-defined]
        got = fresh["buffer"][rows_i].double()
        ref = want["buffer"]
        result["state_max_rel"] = float((got - ref).abs().max() / ref.abs().max())
    result["finite"] = not math.isnan(result["out_max_ulps"])
    return result
