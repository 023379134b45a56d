"""vLLM's calling convention for selective_state_update, run by ssmdecode's kernels.

Mirrors `selective_state_update` of vLLM's vllm/model_executor/layers/mamba/ops/mamba_ssm.py as
it stands after vLLM PR #35431 (block 0 is the null block; docs/compat.md maps each argument and
records the versions read):

- D and dt_bias are required and come before z;
- rows whose state_batch_indices entry is null_block_id (0, vLLM's NULL_BLOCK_ID) read and
  write no slot; state_batch_indices and dst_state_batch_indices may be [B] or [B, K] and may
  have more rows than the batch;
- without num_accepted_tokens, each request reads the slot of column 0 and writes its final
  state to dst_state_batch_indices column 0 (default: the slot it reads);
- num_accepted_tokens [B] (speculative decoding): the initial state is read from
  state_batch_indices[b, max(num_accepted[b] - 1, 0)], and token t's state is written to
  dst_state_batch_indices[b, t] (default: state_batch_indices[b, t]), an entry equal to
  null_block_id skipped; no other state is written;
- cu_seqlens [B + 1]: x, dt, z, B, C, out pack the tokens of every request ([total, H, P]),
  request b's being cu_seqlens[b] .. cu_seqlens[b + 1] - 1; a request of none is left alone;
- out is required and written in place; the function returns None;
- enable_stochastic_rounding (fp16 states only, ValueError otherwise): the final state is
  stored with stochastic rounding, keyed by a seed drawn for the call, cache_philox_rounds
  Philox rounds (0: 10); with num_accepted_tokens (speculative decoding) vLLM's kernel rounds
  no store stochastically, and neither does the adapter. The random bits are ssmdecode's
  (software Philox; vLLM's fp16 path uses sm_100's cvt.rs), so they differ from vLLM's;
- is_blackwell only picks vLLM's fallback launch config; ssmdecode picks its own from
  `config` or the device's table, which is keyed by the device's name, so it is accepted and
  has no effect.

Bits: vLLM's kernel computes dA as exp2(log2(e) * A * dt) (its fast_exp), which rounds
differently from exp: the adapter runs ssmdecode's kernels with fast_exp=True, so that its
out and states are vLLM's kernel's bit for bit (tests/test_compat_upstream.py, on the GPU).

Errors name vLLM's null_block_id where ssmdecode's checks say pad_slot_id; an int8 / fp8
state raises NotImplementedError.

`config` is ssmdecode's own keyword-only addition: a LaunchConfig to force, None for the
device's table. vLLM never passes it.

ReplaySSM decode
----------------
`selective_state_update_replayssm_output_only` mirrors vLLM's function of that name in
vllm/model_executor/layers/mamba/ops/selective_state_update_replayssm_output_only.py (commit
055e47c2; its caller's cursor block in vllm/v1/attention/backends/mamba_attn.py, 009b0f3b), the
T = 1 decode step by replay, run by ssmdecode's fast replay route:

- state [S, H, P, N] is the checkpoint; x_cache [S, H, L, P] (x's dtype), dt_cache [S, H, L]
  float32 holding dt' = softplus(dt + dt_bias), B_cache [S, G, L, N] (B's dtype) hold the
  tokens since it, rows 0 .. write_pos - 1 (the ring starts at row 0); L = max_cache_len (16);
- write_pos int32 [>= B] and is_flush int8 / bool [>= B], one a request (not a slot), are the
  host's: request b has write_pos[b] cached tokens; where is_flush[b] is set (the host sets it
  at write_pos = L - 1) the state absorbs the write_pos cached tokens and the current one, is
  written back, and nothing is appended (the host restarts the ring: write_pos 0 next step);
  elsewhere out comes from the checkpoint and the ring, nothing but the ring row write_pos (the
  current token's x, dt', B) is written, and the host advances write_pos by one. The adapter
  follows the host's is_flush, not ssmdecode's ring rule;
- bc_pre [>= B, >= G, L] float32 is vLLM's scratch for its precompute kernel: checked and
  never read or written here (the fast route computes C . B_j in the kernel);
- state_batch_indices [B] or [B, K] (column 0 read); a request whose slot is null_block_id
  reads and writes nothing, and its out rows hold zeros (vLLM leaves them as they were);
- enable_stochastic_rounding (fp16 states only), cache_philox_rounds: the flush's store
  rounded stochastically, with ssmdecode's random bits (vLLM's use cvt.rs);
- dt, A and dt_bias tied over the head dim (A over N too), as vLLM requires; out required,
  written in place and returned.

Bits: vLLM's kernel is not exact (its flush is a tl.dot in tf32x3, its output a matmul form);
this adapter promises vLLM's semantics and ssmdecode's fast-route accuracy instead: out within
1 bf16 ulp of the float64 recurrence, a flushed state the exact route's float32 operations
(tests/test_compat_vllm_replay.py). It cannot write vLLM's bits.
"""

from __future__ import annotations

import torch

from ssmdecode.compat import (
    engine_names,
    require_out,
    require_supported_state,
    require_tensors,
    stochastic_rounding,
)
from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update import selective_state_update as _selective_state_update
from ssmdecode.ops.selective_state_update.launch import run_on
from ssmdecode.ops.selective_state_update.replay import prepare as _replay_prepare

__all__ = [
    "MAX_CACHE_LEN",
    "NULL_BLOCK_ID",
    "selective_state_update",
    "selective_state_update_replayssm_output_only",
]

MAX_CACHE_LEN = 16
"""vLLM's ReplaySSM ring: 16 tokens a slot, a flush once every 16 decode steps."""

NULL_BLOCK_ID = 0
"""vLLM's reserved null block: the state slot index that marks a padded row."""

_ENGINE = "vllm"
_OPTIONAL = ("z", "state_batch_indices", "dst_state_batch_indices", "num_accepted_tokens", "cu_seqlens")
# ssmdecode's names of the arguments vLLM calls otherwise, for the messages (engine_names)
_NAMES = {"pad_slot_id": "null_block_id"}
# The ReplaySSM adapter passes write_pos on as replay's num_cached.
_REPLAY_NAMES = {**_NAMES, "num_cached": "write_pos"}


def _rows(name: str, indices: torch.Tensor | None, batch: int) -> torch.Tensor | None:
    """vLLM's slot indices, [B'] or [B', K] with B' >= B, as [B, K] (a missing column dim is
    one column)."""
    if indices is None:
        return None
    if indices.dim() == 1:
        indices = indices.unsqueeze(1)
    elif indices.dim() != 2:
        raise ValueError(
            f"ssmdecode.compat.vllm: {name} has shape {tuple(indices.shape)}; expected [B] or [B, K]"
        )
    if indices.shape[0] < batch:
        raise ValueError(
            f"ssmdecode.compat.vllm: {name} has {indices.shape[0]} rows; expected "
            f"at least the {batch} requests"
        )
    return indices[:batch]


def selective_state_update(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    dt_bias: torch.Tensor,
    z: torch.Tensor | None = None,
    dt_softplus: bool = False,
    state_batch_indices: torch.Tensor | None = None,
    dst_state_batch_indices: torch.Tensor | None = None,
    null_block_id: int = NULL_BLOCK_ID,
    out: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    is_blackwell: bool = False,
    enable_stochastic_rounding: bool = False,
    cache_philox_rounds: int = 0,
    *,
    config: LaunchConfig | None = None,
) -> None:
    """One decode or verify step with vLLM's arguments; updates `state` and writes `out` in
    place.

    Shapes (B requests, H heads, P head dim, N state dim, G groups, S pool slots, K >= 1):
        state [S, H, P, N] or [S, P, N]; x, dt, z, out [B, H, P] or [B, P], or with
        cu_seqlens [total_tokens, H, P] or [total_tokens, P]; A [H, P, N] or [P, N];
        B, C [B, G, N] or [B, N] (with cu_seqlens [total_tokens, ...]); D, dt_bias [H, P] or
        [P]; state_batch_indices, dst_state_batch_indices int32/int64 [>=B] or [>=B, K];
        num_accepted_tokens int32/int64 [B]; cu_seqlens int32/int64 [B + 1].

    Null rows (state_batch_indices[b, ...] == null_block_id) read and write no slot, as in
    vLLM; their out rows hold zeros (vLLM's kernel writes the output of a zero state there;
    both are discarded by the engine). Without num_accepted_tokens, a row whose destination is
    null_block_id writes no slot here, where vLLM's kernel would write into the null block.
    """
    del is_blackwell  # a launch-config hint of vLLM's fallback table; see the module docstring
    out = require_out(_ENGINE, out)
    require_tensors(
        _ENGINE,
        _OPTIONAL,
        state=state,
        x=x,
        dt=dt,
        A=A,
        B=B,
        C=C,
        D=D,
        dt_bias=dt_bias,
        z=z,
        state_batch_indices=state_batch_indices,
        dst_state_batch_indices=dst_state_batch_indices,
        num_accepted_tokens=num_accepted_tokens,
        cu_seqlens=cu_seqlens,
    )
    if type(null_block_id) is not int:
        raise TypeError(
            f"ssmdecode.compat.vllm: null_block_id must be an int, got "
            f"{type(null_block_id).__name__} {null_block_id!r}"
        )
    require_supported_state(_ENGINE, state)
    rand_seed, philox_rounds = stochastic_rounding(
        _ENGINE, state, enable_stochastic_rounding, cache_philox_rounds
    )
    if num_accepted_tokens is not None:
        rand_seed = None  # vLLM's speculative path rounds every store to nearest
    batch = x.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1
    src = _rows("state_batch_indices", state_batch_indices, batch)
    dst = _rows("dst_state_batch_indices", dst_state_batch_indices, batch)
    if num_accepted_tokens is not None:
        if src is None:
            raise ValueError(
                "ssmdecode.compat.vllm: num_accepted_tokens needs "
                "state_batch_indices [B, K] (the slots of each request's tokens)"
            )
        dst = src if dst is None else dst  # token t's state to dst[b, t]
    else:  # column 0 is read, and the final state is written to dst column 0
        src = None if src is None else src[:, 0]
        dst = None if dst is None else dst[:, 0]
    with engine_names(_ENGINE, _NAMES):
        _selective_state_update(
            state,
            x,
            dt,
            A,
            B,
            C,
            D=D,
            z=z,
            dt_bias=dt_bias,
            dt_softplus=dt_softplus,
            state_batch_indices=src,
            dst_state_batch_indices=dst,
            pad_slot_id=null_block_id,
            out=out,
            config=config,
            cu_seqlens=cu_seqlens,
            num_accepted_tokens=num_accepted_tokens,
            fast_exp=True,
            rand_seed=rand_seed,
            philox_rounds=philox_rounds,
        )


def _heads(t: torch.Tensor | None, dim: int) -> torch.Tensor | None:
    """vLLM's layout without heads ([B, P], [P, N], [P]) as one head."""
    return t if t is None or t.dim() != dim else t.unsqueeze(-2 if dim > 1 else 0)


def selective_state_update_replayssm_output_only(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_softplus: bool = False,
    x_cache: torch.Tensor | None = None,
    dt_cache: torch.Tensor | None = None,
    B_cache: torch.Tensor | None = None,
    bc_pre: torch.Tensor | None = None,
    write_pos: torch.Tensor | None = None,
    is_flush: torch.Tensor | None = None,
    max_cache_len: int = MAX_CACHE_LEN,
    state_batch_indices: torch.Tensor | None = None,
    null_block_id: int = NULL_BLOCK_ID,
    out: torch.Tensor | None = None,
    enable_stochastic_rounding: bool = False,
    cache_philox_rounds: int = 0,
    *,
    config: LaunchConfig | None = None,
) -> torch.Tensor:
    """One ReplaySSM decode step (T = 1) with vLLM's arguments and cursor contract (the
    module docstring, "ReplaySSM decode"); writes the rings' row write_pos, or the state where
    the host flushes, and out in place; returns out.

    Shapes (B requests, H heads, P head dim, N state dim, G groups, S slots, L =
    max_cache_len): state [S, H, P, N] (or [S, P, N]); x, dt, z, out [B, H, P] (or [B, P]);
    A [H, P, N]; B, C [B, G, N] (or [B, N]); D, dt_bias [H, P]; x_cache [S, H, L, P];
    dt_cache [S, H, L] float32; B_cache [S, G, L, N]; bc_pre [>= B, >= G, L] float32;
    write_pos int32 [>= B]; is_flush int8 / bool [>= B]; state_batch_indices [>= B] or
    [>= B, K].
    """
    out = require_out(_ENGINE, out)
    require_tensors(
        _ENGINE,
        ("D", "dt_bias", "z", "state_batch_indices"),
        state=state,
        x=x,
        dt=dt,
        A=A,
        B=B,
        C=C,
        D=D,
        dt_bias=dt_bias,
        z=z,
        x_cache=x_cache,
        dt_cache=dt_cache,
        B_cache=B_cache,
        bc_pre=bc_pre,
        write_pos=write_pos,
        is_flush=is_flush,
        state_batch_indices=state_batch_indices,
        out=out,
    )
    where = f"ssmdecode.compat.{_ENGINE}"
    if type(null_block_id) is not int:
        raise TypeError(f"{where}: null_block_id must be an int, got {type(null_block_id).__name__}")
    if type(max_cache_len) is not int or max_cache_len < 2:
        raise ValueError(f"{where}: max_cache_len must be an int >= 2, got {max_cache_len!r}")
    rand_seed, philox_rounds = stochastic_rounding(
        _ENGINE, state, enable_stochastic_rounding, cache_philox_rounds
    )
    heads = state.dim() == 4
    if not heads:  # one head: vLLM's layout without the head dim
        state, A = state.unsqueeze(1), (A.unsqueeze(0) if A.dim() == 2 else A)
        x, dt, B, C, z, kernel_out = (_heads(t, 2) for t in (x, dt, B, C, z, out))
        D, dt_bias = _heads(D, 1), _heads(dt_bias, 1)
    else:
        kernel_out = out
    batch = x.shape[0]
    for name, t in (("x_cache", x_cache), ("dt_cache", dt_cache), ("B_cache", B_cache)):
        if t.dim() < 3 or t.shape[2] != max_cache_len:
            raise ValueError(
                f"{where}: {name} has shape {tuple(t.shape)}; its dim 2 must be "
                f"max_cache_len = {max_cache_len}"
            )
    if write_pos.dtype != torch.int32 or write_pos.dim() != 1 or write_pos.shape[0] < batch:
        raise ValueError(
            f"{where}: write_pos must be int32 [>= {batch}] (one a request), got "
            f"{write_pos.dtype} {tuple(write_pos.shape)}"
        )
    if is_flush.dtype not in (torch.int8, torch.bool) or is_flush.dim() != 1 or is_flush.shape[0] < batch:
        raise ValueError(
            f"{where}: is_flush must be int8 or bool [>= {batch}] (one a request), got "
            f"{is_flush.dtype} {tuple(is_flush.shape)}"
        )
    ngroups = B.shape[-2] if B.dim() == 3 else 0
    if (
        bc_pre.dtype != torch.float32
        or bc_pre.dim() != 3
        or bc_pre.shape[0] < batch
        or bc_pre.shape[1] < ngroups
        or bc_pre.shape[2] != max_cache_len
    ):
        raise ValueError(
            f"{where}: bc_pre must be float32 [>= {batch}, >= {ngroups}, {max_cache_len}], got "
            f"{bc_pre.dtype} {tuple(bc_pre.shape)} (vLLM's scratch; unused here)"
        )
    src = _rows("state_batch_indices", state_batch_indices, batch)
    src = None if src is None else src[:, 0]
    token = [t if t is None else t.unsqueeze(1) for t in (x, dt, B, C, z, kernel_out)]
    with engine_names(_ENGINE, _REPLAY_NAMES):
        _, launch = _replay_prepare(
            state,
            x_cache,
            B_cache,
            dt_cache,
            None,
            write_pos[:batch],
            token[0],
            token[1],
            A,
            token[2],
            token[3],
            D,
            token[4],
            dt_bias,
            dt_softplus,
            src,
            null_block_id,
            token[5],
            config,
            rand_seed=rand_seed,
            philox_rounds=philox_rounds,
            exact=False,
            _host_flush=is_flush[:batch],
            _flush_drafts=True,
            _cursors_by_request=True,
        )
    run_on(state.device, launch)
    return out
