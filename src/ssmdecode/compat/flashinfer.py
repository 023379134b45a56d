"""flashinfer's calling convention for checkpointing_ssu (ReplaySSM), run by ssmdecode's replay.

Mirrors `checkpointing_ssu` of flashinfer's flashinfer/mamba/checkpointing_ssu.py with the ring
cache of flashinfer PR #3975 (on flashinfer's main branch; docs/compat.md records the commits
read, and notes that the release branches v0.6.16 to v0.6.18 revert it to an older API):

- the state pool and the rings are flashinfer's: state [S, H, P, N]; x_cache [S, H, R, P] and
  B_cache [S, G, R, N] in the inputs' dtype; dt_cache [S, H, R] float32 holding
  dt' = softplus(dt + dt_bias) (softplus only with dt_softplus); ring_start and
  prev_num_accepted_tokens int32 [S]. R = max_window + T, T = x.shape[1] (max_seqlen with
  cu_seqlens), T <= max_window;
- one call, per request: replay the prev_num_accepted_tokens[slot] tokens at ring rows
  (ring_start + j) % R onto state[slot]; where prev + T > max_window (prev + 2 T > R) write
  that state back (a flush); compute every draft's out from there; append the drafts' x, B
  and dt' at rows (ring_start + prev + t) % R. The kernel only reads ring_start and
  prev_num_accepted_tokens: this is ssmdecode's selective_state_replay, argument for argument;
- the host owns the bookkeeping after the step (once for all layers): on a flush
  ring_start += prev (mod R) and prev = accepted, else prev += accepted. That is
  ssmdecode's replay_advance, called with flashinfer's tensors:
      replay_advance(ring_start, prev_num_accepted_tokens, num_accepted, T, R,
                     state_batch_indices, pad_slot_id)
  (flashinfer ships no function for it; its tests and its Triton reference's docstring state
  the rule, and tests/test_compat_flashinfer.py writes it out the same way);
- out is required, written in place and returned;
- cu_seqlens [B + 1] int32 (int64 too here): x, dt, B, C, z and out are (1, total_tokens,
  ...), viewed without a copy as ssmdecode's (total_tokens, ...); max_seqlen is the T of the
  ring. A packed request's flush is decided by its own draft count n (prev + n > max_window),
  as flashinfer decides it, and a request of no drafts is left alone; the host's bookkeeping
  then takes cu_seqlens too (replay_advance(..., cu_seqlens=cu_seqlens));
- a request whose slot is pad_slot_id reads and writes no slot and no ring; flashinfer leaves
  its out rows as they were, ssmdecode writes zeros there (engines discard both);
- stochastic rounding (rand_seed, with philox_rounds) and block-scaled int8 / fp8 states
  (state_scale, or an int8 / fp8 state) are not supported yet: NotImplementedError naming the
  argument;
- errors name flashinfer's arguments (prev_num_accepted_tokens, enable_pdl) where ssmdecode's
  checks know them as num_cached and pdl; the value checks (cu_seqlens, slots, the
  bookkeeping inside the window) run with SSMDECODE_VALIDATE_INDICES=1, flashinfer's
  signature having no validate_indices;
- flashinfer's algorithm choices have no meaning here and are accepted and ignored, after
  flashinfer's own checks of them: algorithm ("auto", "monolith", "two-kernel"), the
  two-kernel scratch trio cb_scaled / cumAdt_vec / cb_old (all or none; "two-kernel" needs
  them; never written here), precompute_heads_per_cta and d_split. philox_rounds is read by
  flashinfer only with rand_seed. enable_pdl is ssmdecode's pdl.

Route and bits: flashinfer computes the window in matmul form (C Bᵀ with cumulative decays,
tensor-core MMAs on bfloat16 operands), which is neither the per-token recurrence's rounding nor
fp32-accurate. exact=False runs ssmdecode's fast replay route (replay_fast.py): flashinfer's
semantics, ring and flush rule, out within 1 bf16 ulp of the float64 recurrence (floored at
float32's summation floor: numerics.out_resolution) and a flushed
state within 1e-5 max|state| of float64, but not flashinfer's bits (no adapter can promise
those).
exact=True runs the exact route instead: out and states the multi-token kernel's and T
single-token calls' bits (float32 state). The fast route is the default: on an H100 (run 248,
benchmarks/results/NVIDIA_H100_80GB_HBM3/bench-replay-*run248/) it is 1.6-2.9x faster than the
exact route at T = 4 from batch 1 to 1024 and at T = 2, 3 and 8 at every batch measured (8 to
512). On the H200 the last run that timed both (run 159, an older fast route) had it faster
everywhere but T = 4 at batch 1 (4.84 us against 4.48).
A pool filled by either kernel and read by another is the same layout, but dt' (softplus) and
states may differ in the last bits.

`exact` and `config` are ssmdecode's own keyword-only additions: the route, and a LaunchConfig
to force (None for the device's table). flashinfer's callers never pass them.
"""

from __future__ import annotations

import torch

from ssmdecode.compat import engine_names, require_supported_state, require_tensors, unsupported
from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update.replay import selective_state_replay

__all__ = ["ALGORITHMS", "checkpointing_ssu"]

ALGORITHMS = ("auto", "monolith", "two-kernel")
"""flashinfer's kernel choices; each runs ssmdecode's replay route (exact or fast) here."""

_ENGINE = "flashinfer"
_OPTIONAL = (
    "D",
    "z",
    "dt_bias",
    "state_batch_indices",
    "state_scale",
    "rand_seed",
    "cu_seqlens",
    "cb_scaled",
    "cumAdt_vec",
    "cb_old",
)
# ssmdecode's names of the arguments flashinfer calls otherwise, for the messages (engine_names)
_NAMES = {"num_cached": "prev_num_accepted_tokens", "pdl": "enable_pdl"}
_PACKED = ("x", "dt", "B", "C", "z", "out")  # (1, total_tokens, ...) with cu_seqlens


def _error(message: str) -> str:
    return f"ssmdecode.compat.{_ENGINE}: {message}"


def _check_knobs(
    philox_rounds: object,
    d_split: object,
    enable_pdl: object,
    precompute_heads_per_cta: object,
    algorithm: object,
    scratch: dict[str, torch.Tensor | None],
) -> None:
    """The arguments that choose flashinfer's kernel: checked as flashinfer checks them, then
    ignored."""
    if type(philox_rounds) is not int:
        raise TypeError(_error(f"philox_rounds must be an int, got {type(philox_rounds).__name__}"))
    if d_split is not None and type(d_split) is not int:
        raise TypeError(_error(f"d_split must be an int or None, got {type(d_split).__name__}"))
    if type(enable_pdl) is not bool:
        raise TypeError(_error(f"enable_pdl must be a bool, got {type(enable_pdl).__name__}"))
    if type(precompute_heads_per_cta) is not int or precompute_heads_per_cta < 0:
        raise ValueError(
            _error(f"precompute_heads_per_cta must be an int >= 0, got {precompute_heads_per_cta!r}")
        )
    if algorithm not in ALGORITHMS:
        raise ValueError(_error(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}"))
    given = [name for name, t in scratch.items() if t is not None]
    if given and len(given) != len(scratch):
        missing = [name for name in scratch if name not in given]
        raise ValueError(
            _error(
                f"cb_scaled, cumAdt_vec and cb_old go together (the two-kernel scratch); got "
                f"{', '.join(given)} without {', '.join(missing)}"
            )
        )
    if algorithm == "two-kernel" and not given:
        raise ValueError(_error("algorithm='two-kernel' needs the scratch cb_scaled, cumAdt_vec, cb_old"))


def _unpack(
    packed: dict[str, torch.Tensor | None],
    cu_seqlens: torch.Tensor,
    max_seqlen: object,
) -> dict[str, torch.Tensor | None]:
    """flashinfer's packed (1, total_tokens, ...) tensors as ssmdecode's (total_tokens, ...)
    views; refuses the packed calls whose flush decisions would differ (see the module
    docstring)."""
    views = {}
    for name, t in packed.items():
        if t is None:
            views[name] = None
            continue
        if t.dim() != 4 or t.shape[0] != 1:
            raise ValueError(
                _error(
                    f"with cu_seqlens, {name} must be (1, total_tokens, heads or groups, dim), got "
                    f"shape {tuple(t.shape)}"
                )
            )
        views[name] = t[0]
    if type(max_seqlen) is not int or max_seqlen < 1:
        raise ValueError(_error(f"cu_seqlens needs max_seqlen, an int >= 1, got {max_seqlen!r}"))
    if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 2:
        raise ValueError(
            _error(f"cu_seqlens must be (batch + 1,) with batch >= 1, got shape {tuple(cu_seqlens.shape)}")
        )
    return views


def checkpointing_ssu(
    state: torch.Tensor,
    x_cache: torch.Tensor,
    B_cache: torch.Tensor,
    dt_cache: torch.Tensor,
    ring_start: torch.Tensor,
    prev_num_accepted_tokens: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    out: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    state_batch_indices: torch.Tensor | None = None,
    pad_slot_id: int = -1,
    state_scale: torch.Tensor | None = None,
    rand_seed: torch.Tensor | None = None,
    philox_rounds: int = 10,
    d_split: int | None = None,
    cu_seqlens: torch.Tensor | None = None,
    max_seqlen: int | None = None,
    enable_pdl: bool = False,
    cb_scaled: torch.Tensor | None = None,
    cumAdt_vec: torch.Tensor | None = None,
    cb_old: torch.Tensor | None = None,
    precompute_heads_per_cta: int = 0,
    algorithm: str = "auto",
    *,
    exact: bool = False,
    config: LaunchConfig | None = None,
) -> torch.Tensor:
    """A verify step by replay with flashinfer's arguments; updates state (where a request
    flushes) and the rings, writes out in place and returns it.

    Shapes (B requests, T drafts a request, H heads, P head dim, N state dim, G groups,
    S pool slots, R = max_window + T ring rows):
        state [S, H, P, N]; x_cache [S, H, R, P]; B_cache [S, G, R, N]; dt_cache [S, H, R]
        float32; ring_start, prev_num_accepted_tokens int32 [S]; x, dt, z, out [B, T, H, P]
        (dt tied over P); B, C [B, T, G, N]; with cu_seqlens (int32 [B + 1]) x, dt, z, out
        (1, total_tokens, H, P) and B, C (1, total_tokens, G, N); A [H, P, N] tied over P and
        N; D, dt_bias [H, P] (dt_bias tied); state_batch_indices int32/int64 [B].

    The module docstring maps every argument; the ones with no meaning here are checked as
    flashinfer checks them and ignored. exact: False (the default) the fast replay route,
    True the exact one (the module docstring's "Route and bits").
    """
    require_tensors(
        _ENGINE,
        _OPTIONAL,
        state=state,
        x_cache=x_cache,
        B_cache=B_cache,
        dt_cache=dt_cache,
        ring_start=ring_start,
        prev_num_accepted_tokens=prev_num_accepted_tokens,
        x=x,
        dt=dt,
        A=A,
        B=B,
        C=C,
        out=out,
        D=D,
        z=z,
        dt_bias=dt_bias,
        state_batch_indices=state_batch_indices,
        state_scale=state_scale,
        rand_seed=rand_seed,
        cu_seqlens=cu_seqlens,
        cb_scaled=cb_scaled,
        cumAdt_vec=cumAdt_vec,
        cb_old=cb_old,
    )
    for name, t in (("ring_start", ring_start), ("prev_num_accepted_tokens", prev_num_accepted_tokens)):
        if t.dtype != torch.int32:  # ssmdecode's replay calls the second one num_cached
            raise TypeError(_error(f"{name} must be int32 (one a state slot), got {t.dtype}"))
        if tuple(t.shape) != (state.shape[0],):
            raise ValueError(
                _error(f"{name} has shape {tuple(t.shape)}; expected ({state.shape[0]},), one a state slot")
            )
    scratch = dict(cb_scaled=cb_scaled, cumAdt_vec=cumAdt_vec, cb_old=cb_old)
    _check_knobs(philox_rounds, d_split, enable_pdl, precompute_heads_per_cta, algorithm, scratch)
    if rand_seed is not None:
        raise unsupported(_ENGINE, "rand_seed", "stochastic rounding of the state with Philox")
    if state_scale is not None:
        raise unsupported(_ENGINE, "state_scale", "block-scaled int8 / fp8 states")
    require_supported_state(_ENGINE, state)
    kernel_out = out
    if cu_seqlens is not None:
        views = _unpack(dict(x=x, dt=dt, B=B, C=C, z=z, out=out), cu_seqlens, max_seqlen)
        x, dt, B, C, z, kernel_out = (views[name] for name in _PACKED)
    with engine_names(_ENGINE, _NAMES):
        selective_state_replay(
            state,
            x_cache,
            B_cache,
            dt_cache,
            ring_start,
            prev_num_accepted_tokens,
            x,
            dt,
            A,
            B,
            C,
            D=D,
            z=z,
            dt_bias=dt_bias,
            dt_softplus=dt_softplus,
            state_batch_indices=state_batch_indices,
            pad_slot_id=pad_slot_id,
            out=kernel_out,
            config=config,
            cu_seqlens=cu_seqlens,
            max_seqlen=max_seqlen,
            pdl=enable_pdl,
            exact=exact,
        )
    return out
