"""Inputs, ceilings and timings of speculative-decoding verify calls, by the bench method
(docs/measuring.md): T draft tokens a request, K disjoint sets of slots (and buffer rows)
rotating so that every call finds its states in HBM.

Modes, as the engines call the kernel (MEASURING's baselines were measured the same way):

    buffer  sglang's verify: x [B, T, H, P], the state read, every token's state written to
            the intermediate-state buffer (rows of the call's set), disable_state_update
    dst     vLLM's MTP / EAGLE: the T tokens packed (cu_seqlens), state_batch_indices and
            dst_state_batch_indices [B, T] (the same slots, vLLM's default), the initial state
            at column num_accepted - 1 (accepted counts drawn in 1 .. T)
    replay  selective_state_replay: checkpoints, rings and bookkeeping; each timed call is one
            verify step plus its bookkeeping (replay_advance) with accepted counts drawn in
            1 .. T, so consecutive steps run in steady state, flushes and all

Bytes a call must move: buffer and dst read 1 state and write T a request; replay reads 1 and
writes the flushing fraction f of them, plus its rings. Ceilings, over the call's own slots and
rows, no math: the 1 -> T stream (bench.fanout) for buffer and dst; for replay the read-only
stream and the read-write stream of the same slots (the design's floor is read-only + f x the
write part + the rings at the read-write stream's bandwidth).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ssmdecode.bench.ceiling import measure_gather_ceiling, measure_read_ceiling
from ssmdecode.bench.fanout import fanout_calls
from ssmdecode.bench.inputs import DecodeInputs, make_shape_inputs
from ssmdecode.bench.timer import Timing, cold_rotation, time_cold
from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update import (
    replay_advance,
    selective_state_replay,
    selective_state_update,
)
from ssmdecode.shapes import Shape

__all__ = [
    "DEFAULT_WINDOW",
    "ENGINE_WINDOW",
    "SPEC_MODES",
    "SpecInputs",
    "make_spec_inputs",
    "measure_spec_ceiling",
    "spec_bytes",
    "time_spec_advance",
    "time_spec_config",
]

SPEC_MODES = ("buffer", "dst", "replay")
# The replay window (cached tokens a ring holds besides the drafts) when none is given.
DEFAULT_WINDOW = 8
# The engines' window: vLLM's replayssm_buffer_len and flashinfer's largest max_window. The fast
# route is benched (bench-replay) and tuned (tune --mode replay-fast) at it by default.
ENGINE_WINDOW = 16


@dataclass
class SpecInputs:
    """K verify calls on one pool: base holds the tensors (x, dt, B, C as [B, T, ...]);
    sets the per-call indices. For dst the per-token tensors are also packed ([B*T, ...])."""

    mode: str
    tokens: int
    base: DecodeInputs
    src: torch.Tensor  # [K, B] read slots (buffer, replay) or [K, B, T] the slots (dst)
    rows: torch.Tensor | None = None  # [K, B] buffer rows (buffer)
    accepted: torch.Tensor | None = None  # [K, B] accepted counts (dst: of the previous step)
    buffer: torch.Tensor | None = None
    cu_seqlens: torch.Tensor | None = None
    rings: dict[str, torch.Tensor] = field(default_factory=dict)
    window: int = 0

    @property
    def rotation(self) -> int:
        return self.src.shape[0]

    @property
    def ring(self) -> int:
        return self.window + self.tokens

    def kwargs(
        self, i: int, state: torch.Tensor | None = None, out: torch.Tensor | None = None
    ) -> dict[str, object]:
        """Keyword arguments of call i (set i mod K): of selective_state_update for buffer
        and dst, of selective_state_replay for replay."""
        i %= self.rotation
        b = self.base
        kw: dict[str, object] = dict(
            state=b.state if state is None else state,
            A=b.A,
            D=b.D,
            dt_bias=b.dt_bias,
            dt_softplus=b.dt_softplus,
            z=b.z,
        )
        if self.mode == "dst":
            batch = self.src.shape[1]
            flat = batch * self.tokens
            kw.update(
                x=b.x.reshape(flat, *b.x.shape[2:]),
                dt=b.dt.flatten(0, 1),
                B=b.B.reshape(flat, *b.B.shape[2:]),
                C=b.C.reshape(flat, *b.C.shape[2:]),
                state_batch_indices=self.src[i],
                dst_state_batch_indices=self.src[i],
                num_accepted_tokens=self.accepted[i],
                cu_seqlens=self.cu_seqlens,
                fast_exp=True,
            )
            if b.z is not None:
                kw["z"] = b.z.reshape(flat, *b.z.shape[2:])
            o = b.out.reshape(flat, *b.out.shape[2:])
        else:
            kw.update(x=b.x, dt=b.dt, B=b.B, C=b.C, state_batch_indices=self.src[i])
            o = b.out
        if self.mode == "buffer":
            kw.update(
                intermediate_states=self.buffer,
                intermediate_state_indices=self.rows[i],
                disable_state_update=True,
            )
        if self.mode == "replay":
            kw.update(self.rings)
        kw["out"] = o if out is None else out
        return kw

    def advance(self, i: int, start: torch.Tensor | None = None, cached: torch.Tensor | None = None) -> None:
        """Replay's bookkeeping after call i (set i mod K): its accepted counts applied by
        replay_advance to start and cached, by default the spec's own ring_start and
        num_cached."""
        i %= self.rotation
        start = self.rings["ring_start"] if start is None else start
        cached = self.rings["num_cached"] if cached is None else cached
        replay_advance(start, cached, self.accepted[i], self.tokens, self.ring, self.src[i])

    def fanout(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(read slots [B], destination tensor, places [B, T]) of call i's 1 -> T stream."""
        if self.mode == "buffer":
            t = torch.arange(self.tokens, device=self.rows.device)
            return self.src[i], self.buffer, self.rows[i].long()[:, None] * self.buffer.shape[1] + t
        if self.mode == "dst":
            col = (self.accepted[i].long() - 1).clamp(min=0)
            read = self.src[i].gather(1, col[:, None])[:, 0]
            return read, self.base.state, self.src[i]
        raise ValueError("replay calls have no 1 -> T stream: see measure_spec_ceiling")


def spec_bytes(
    shape: Shape, batch: int, tokens: int, mode: str, flush: float = 0.0, window: int = DEFAULT_WINDOW
) -> int:
    """Bytes a verify call must move: its states (1 read + T writes a request, or for replay
    1 read + the flushing fraction of a write, plus the rings' reads and appends)."""
    state = shape.state_bytes(batch)
    if mode in ("buffer", "dst"):
        return state * (1 + tokens)
    per_token = batch * (
        shape.nheads * shape.headdim * shape.dtype.itemsize
        + shape.ngroups * shape.dstate * shape.dtype.itemsize
        + shape.nheads * 4
    )
    cached = window / 2  # the mean cached count in steady state is about half the window
    return int(state * (1 + flush) + per_token * (cached + tokens))


def make_spec_inputs(
    shape: Shape,
    batch: int,
    tokens: int,
    mode: str,
    device: torch.device,
    seed: int,
    rotation: int | None = None,
    window: int = DEFAULT_WINDOW,
    params: str = "tied",
    has_z: bool = False,
) -> SpecInputs:
    """K sets (by cold_rotation of the bytes a call touches, unless given) of disjoint slots,
    buffer rows and rings for verify calls of T draft tokens a request; params: "tied" or
    "dense" A, D and dt_bias (make_inputs); has_z: the gate z given."""
    if mode not in SPEC_MODES:
        raise ValueError(f"mode must be one of {SPEC_MODES}, got {mode!r}")
    if tokens < 1:
        raise ValueError(f"tokens must be >= 1, got {tokens}")
    per_request = tokens if mode == "dst" else 1  # distinct slots a request of a set uses
    touched = shape.state_bytes(batch) * (1 + tokens)
    rotation = rotation or cold_rotation(touched, device)
    pool = rotation * batch * per_request
    base = make_shape_inputs(
        shape, batch, device, seed, tokens=tokens, pool=pool, rotation=rotation, params=params, has_z=has_z
    )
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    perm = torch.randperm(pool, generator=gen, device=device).to(torch.int32)
    src = perm.view(rotation, batch, per_request)
    spec = SpecInputs(mode, tokens, base, src[..., 0].contiguous() if per_request == 1 else src)
    if mode == "buffer":
        spec.buffer = torch.zeros(
            rotation * batch, tokens, *base.state.shape[1:], dtype=base.state.dtype, device=device
        )
        spec.rows = (
            torch.randperm(rotation * batch, generator=gen, device=device)
            .to(torch.int32)
            .view(rotation, batch)
        )
    if mode == "dst":
        spec.accepted = torch.randint(
            1, tokens + 1, (rotation, batch), generator=gen, device=device, dtype=torch.int32
        )
        spec.cu_seqlens = torch.arange(0, batch * tokens + 1, tokens, dtype=torch.int32, device=device)
    if mode == "replay":
        spec.window = window
        ring = window + tokens
        H, P, N, G = shape.nheads, shape.headdim, shape.dstate, shape.ngroups
        spec.rings = dict(
            x_cache=torch.randn(pool, H, ring, P, generator=gen, device=device).to(shape.dtype),
            B_cache=torch.randn(pool, G, ring, N, generator=gen, device=device).to(shape.dtype),
            dt_cache=torch.rand(pool, H, ring, generator=gen, device=device) * 0.05,
            ring_start=torch.randint(0, ring, (pool,), generator=gen, device=device, dtype=torch.int32),
            num_cached=torch.randint(0, window + 1, (pool,), generator=gen, device=device, dtype=torch.int32),
        )
        spec.accepted = torch.randint(
            1, tokens + 1, (rotation, batch), generator=gen, device=device, dtype=torch.int32
        )
    return spec


def call(
    spec: SpecInputs, i: int, config: LaunchConfig | None, fn: Callable[..., object] | None = None
) -> None:
    """Verify call i (replay: and its bookkeeping) with config."""
    if spec.mode == "replay":
        kw = spec.kwargs(i)
        selective_state_replay(**kw, config=config)
        spec.advance(i)
    else:
        (fn or selective_state_update)(**spec.kwargs(i), config=config)


def time_spec_config(
    spec: SpecInputs, config: LaunchConfig, device: torch.device, fn: Callable[..., object] | None = None
) -> Timing:
    """One verify call's time with config (replay: a step, its bookkeeping included), call i
    on set i mod K, by the cold-L2 CUDA-graph timer."""
    return time_cold(lambda i: call(spec, i, config, fn), device, rotation=spec.rotation)


def time_spec_advance(spec: SpecInputs, device: torch.device) -> Timing:
    """The replay step's bookkeeping alone (replay_advance: one small kernel a step, shared by
    every layer of a model step), call i on set i mod K, on copies of the spec's bookkeeping
    (which stays as it was)."""
    start = spec.rings["ring_start"].clone()
    cached = spec.rings["num_cached"].clone()
    return time_cold(lambda i: spec.advance(i, start, cached), device, rotation=spec.rotation)


def measure_spec_ceiling(spec: SpecInputs, device: torch.device) -> dict[str, Timing]:
    """The streams a verify call is held to, over its own slots and rows, rotating as the calls:
    buffer and dst: {"fanout": the 1 -> T stream}; replay: {"read": the read-only stream,
    "read_write": the gather (read + write back) stream}."""
    state = spec.base.state
    if spec.mode != "replay":
        places = [spec.fanout(i) for i in range(spec.rotation)]
        reads = torch.stack([p[0] for p in places])
        calls = fanout_calls(state, reads, places[0][1], [p[2] for p in places])
        return {"fanout": time_cold(calls, device)}
    read = measure_read_ceiling(state, spec.src)
    return {"read": read, "read_write": measure_gather_ceiling(state, spec.src)}


def flush_fraction(spec: SpecInputs, steps: int = 64) -> float:
    """The fraction of requests whose step flushes, in the steady state the timed steps run
    in: steps of the bookkeeping alone from the spec's, on copies (nothing changes)."""
    start = spec.rings["ring_start"].clone()
    cached = spec.rings["num_cached"].clone()
    flushed = total = 0
    for i in range(steps):
        slots = spec.src[i % spec.rotation].long()
        flushed += int(((cached[slots] + 2 * spec.tokens) > spec.ring).sum())
        total += slots.numel()
        spec.advance(i, start, cached)
    return flushed / total if total else 0.0


# ---------------------------------------------------------------------------------------------
# correctness before speed, and bits across configs


def _fresh_copies(spec: SpecInputs) -> dict[str, torch.Tensor]:
    """Copies of what a call writes (its state pool, buffer or rings), from spec's values."""
    copies = {"state": spec.base.state.clone()}
    if spec.buffer is not None:
        copies["intermediate_states"] = torch.full_like(spec.buffer, float("nan"))
    for name in ("x_cache", "B_cache", "dt_cache"):
        if name in spec.rings:
            copies[name] = spec.rings[name].clone()
    return copies


def run_spec_config(
    spec: SpecInputs, config: LaunchConfig, i: int = 0, out_dtype: torch.dtype | None = None
) -> dict[str, torch.Tensor]:
    """What call i with config writes, from fresh copies of the initial values (the spec stays
    reusable): {"out", "state", and "intermediate_states" or the rings}, out NaN-poisoned
    first and stored in out_dtype (default x's). The bookkeeping is not advanced."""
    copies = _fresh_copies(spec)
    kw = spec.kwargs(i)
    out = torch.full(
        kw["out"].shape, float("nan"), dtype=out_dtype or kw["out"].dtype, device=kw["out"].device
    )
    kw.update(copies, out=out)
    if spec.mode == "replay":
        selective_state_replay(**kw, config=config)
    else:
        selective_state_update(**kw, config=config)
    return {"out": out, **copies}


def spec_reference(spec: SpecInputs, i: int = 0) -> dict[str, torch.Tensor]:
    """The float64 reference of call i: {"out", "state", and "intermediate_states" or the
    rings}, as run_spec_config returns them."""
    from ssmdecode.ops.selective_state_update import (
        selective_state_replay_reference,
        selective_state_update_reference,
    )

    copies = _fresh_copies(spec)
    kw = {k: v for k, v in spec.kwargs(i).items() if k not in ("out", "fast_exp")}
    kw.update(copies)
    if spec.mode == "replay":
        out, state, xc, Bc, dtc = selective_state_replay_reference(**kw)
        return {"out": out, "state": state, "x_cache": xc, "B_cache": Bc, "dt_cache": dtc}
    got = selective_state_update_reference(**kw)
    result = {"out": got[0], "state": got[1]}
    if len(got) == 3:
        result["intermediate_states"] = got[2]
    return result


def check_spec_against_reference(spec: SpecInputs, config: LaunchConfig) -> tuple[bool, str]:
    """Call 0 with config against the float64 reference, by the one tolerance table (the
    rings' dt' to float32, their x and B copies bit for bit; the buffer's unwritten rows and
    out's rows of pad requests left out). (within, summary)."""
    from ssmdecode.numerics import tolerance_check

    got, want = run_spec_config(spec, config), spec_reference(spec)
    parts, ok = [], True
    for name, g in got.items():
        w = want[name]
        if name == "intermediate_states":
            live = ~w.isnan().flatten(2).all(2)
            g, w = g[live], w[live]
        if name in ("x_cache", "B_cache"):
            within = bool(torch.equal(g, w))
            parts.append(f"{name} {'identical' if within else 'DIFFERS'}")
        else:
            c = tolerance_check(g, w.to(torch.float64))
            within = c.within
            parts.append(f"{name} {c.max_abs:.2e} ({c.worst_excess:.2f}x tolerance)")
        ok &= within
    return ok, "; ".join(parts)


def compare_spec_configs(
    spec: SpecInputs, reference: LaunchConfig, configs: list[LaunchConfig]
) -> dict[LaunchConfig, bool]:
    """Each config against reference, bit for bit (out stored as float32, the strict check,
    and everything the call writes), from the same inputs and initial values."""
    from ssmdecode.numerics import bits

    want = run_spec_config(spec, reference, out_dtype=torch.float32)
    result = {}
    for config in configs:
        got = run_spec_config(spec, config, out_dtype=torch.float32)
        result[config] = all(torch.equal(bits(got[k]), bits(want[k])) for k in want)
    return result
