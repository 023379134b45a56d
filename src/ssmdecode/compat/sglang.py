"""sglang's calling convention for selective_state_update, run by ssmdecode's kernels.

Mirrors `selective_state_update` of sglang's python/sglang/srt/layers/attention/mamba/ops/
mamba_ssm.py (read at commit 05f4e1676f82; docs/compat.md maps each argument):

- D, z, dt_bias optional and in that order; pad rows are marked by pad_slot_id, -1 by default;
- out is required and written in place; the function returns None;
- x, dt, z, out may carry a token dim ([B, T, H, P]) and B, C one too ([B, T, G, N]): T draft
  tokens a request, speculative decoding's verify step (MTP, EAGLE);
- disable_state_update computes out without writing the final state (verify);
- intermediate_states_buffer with cache_steps: every token's state is written to the buffer,
  row intermediate_state_indices[b] (default: the request's slot), step t;
- retrieve_parent_token [B, T] (EAGLE trees): token t > 0 continues from its parent token's
  state as the buffer holds it where 0 <= parent < T, and from token t - 1's where the entry is
  outside [0, T), as sglang's kernel reads it (with SSMDECODE_VALIDATE_INDICES=1 an entry in
  [t, T), a buffer row not written yet, is refused);
- enable_stochastic_rounding, cache_philox_rounds (sglang's later signature; fp16 states
  only, ValueError otherwise, rounds >= 0 with 0 meaning 10): the state slots' stores round
  stochastically, with a seed drawn for the call; the intermediate-state buffer's stay
  round-to-nearest, as vLLM's per-token stores do (sglang's Triton path could not be read
  here). The random bits are ssmdecode's (software Philox), not sglang's.

Bits: sglang's kernel computes dA with exp, as ssmdecode's default path does: the same bits
(tests/test_compat_upstream.py holds the adapter against sglang's kernel on the GPU).

Errors name sglang's arguments (intermediate_states_buffer, retrieve_parent_token) where
ssmdecode's checks know them by other names; an int8 / fp8 state raises NotImplementedError.

`config` is ssmdecode's own keyword-only addition: a LaunchConfig to force, None for the
device's table. sglang never passes it.
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
from ssmdecode.ops.selective_state_update import decode
from ssmdecode.ops.selective_state_update import selective_state_update as _selective_state_update
from ssmdecode.ops.selective_state_update.arguments import UpdateArgs

__all__ = ["PAD_SLOT_ID", "selective_state_update"]

PAD_SLOT_ID = -1
"""sglang's sentinel in state_batch_indices for a row that reads and writes no state slot."""

_ENGINE = "sglang"
_OPTIONAL = (
    "D",
    "z",
    "dt_bias",
    "state_batch_indices",
    "intermediate_states_buffer",
    "retrieve_parent_token",
    "intermediate_state_indices",
)
# ssmdecode's names of the arguments sglang calls otherwise, for the messages (engine_names)
_NAMES = {
    "intermediate_states": "intermediate_states_buffer",
    "parent_token_indices": "retrieve_parent_token",
}


def _buffer(buffer: torch.Tensor, cache_steps: int | None, state: torch.Tensor) -> torch.Tensor:
    """sglang's intermediate-state buffer as [R, cache_steps, H, P, N]: its kernel addresses it
    as contiguous rows of cache_steps token states, whatever shape it was allocated with."""
    heads = state.shape[1] if state.dim() == 4 else 1
    token_state = (heads, *state.shape[-2:])
    if cache_steps is None:
        if buffer.dim() != 5:
            raise ValueError(
                f"ssmdecode.compat.sglang: intermediate_states_buffer has shape "
                f"{tuple(buffer.shape)} and cache_steps is None; pass cache_steps (the token "
                "states a row holds) or a buffer shaped [R, cache_steps, H, P, N]"
            )
        cache_steps = buffer.shape[1]
    if type(cache_steps) is not int or cache_steps < 1:
        raise TypeError(f"ssmdecode.compat.sglang: cache_steps must be a positive int, got {cache_steps!r}")
    row = cache_steps * token_state[0] * token_state[1] * token_state[2]
    if not buffer.is_contiguous() or buffer.numel() % row:
        raise ValueError(
            f"ssmdecode.compat.sglang: intermediate_states_buffer of shape {tuple(buffer.shape)} "
            f"(strides {buffer.stride()}) is not contiguous rows of cache_steps={cache_steps} "
            f"token states of shape {token_state}, as sglang's kernel addresses it"
        )
    return buffer.view(-1, cache_steps, *token_state)


def selective_state_update(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    state_batch_indices: torch.Tensor | None = None,
    pad_slot_id: int = PAD_SLOT_ID,
    out: torch.Tensor | None = None,
    disable_state_update: bool = False,
    intermediate_states_buffer: torch.Tensor | None = None,
    cache_steps: int | None = None,
    retrieve_parent_token: torch.Tensor | None = None,
    intermediate_state_indices: torch.Tensor | None = None,
    enable_stochastic_rounding: bool = False,
    cache_philox_rounds: int = 0,
    *,
    config: LaunchConfig | None = None,
) -> None:
    """One decode or verify step with sglang's arguments; updates `state` (and the buffer)
    and writes `out` in place.

    Shapes (B batch, T tokens, H heads, P head dim, N state dim, G groups, S pool slots, R
    buffer rows):
        state [S, H, P, N] or [S, P, N]; x, dt, z, out [B, H, P], [B, P] or [B, T, H, P];
        A [H, P, N] or [P, N]; B, C [B, G, N], [B, N] or [B, T, G, N]; D, dt_bias [H, P] or
        [P]; state_batch_indices int32/int64 [B];
        intermediate_states_buffer: contiguous, R * cache_steps * H * P * N elements (viewed
        as [R, cache_steps, H, P, N]), cache_steps >= T; intermediate_state_indices [B];
        retrieve_parent_token int32/int64 [B, T].

    As sglang's wrapper does, a tensor without a token dim (or head dim) gets one of size 1;
    a Mamba1 state [S, P, N] is run as one head.

    Pad rows (state_batch_indices[b] == pad_slot_id) read and write no slot and no buffer row;
    their out rows hold zeros (sglang's kernel writes the output of a zero state there; both
    are discarded by the engine). Without state_batch_indices sglang's kernel writes no
    buffer; ssmdecode writes row b of it.
    """
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
        z=z,
        dt_bias=dt_bias,
        state_batch_indices=state_batch_indices,
        intermediate_states_buffer=intermediate_states_buffer,
        retrieve_parent_token=retrieve_parent_token,
        intermediate_state_indices=intermediate_state_indices,
    )
    require_supported_state(_ENGINE, state)
    rand_seed, philox_rounds = stochastic_rounding(
        _ENGINE, state, enable_stochastic_rounding, cache_philox_rounds
    )
    # sglang's layout, as its wrapper makes it: every per-token tensor [B, T, H, P] or
    # [B, T, G, N] (a missing head or token dim becomes 1), the state [S, H, P, N]
    state = state.unsqueeze(1) if state.dim() == 3 else state
    x, dt, B, C, out, z = (None if t is None else _four_dims(t) for t in (x, dt, B, C, out, z))
    A = A.unsqueeze(0) if A.dim() == 2 else A
    D, dt_bias = (t.unsqueeze(0) if t is not None and t.dim() == 1 else t for t in (D, dt_bias))
    multi = {}
    if intermediate_states_buffer is not None:
        multi["intermediate_states"] = _buffer(intermediate_states_buffer, cache_steps, state)
        multi["intermediate_state_indices"] = intermediate_state_indices
        multi["parent_token_indices"] = retrieve_parent_token
    elif retrieve_parent_token is not None or intermediate_state_indices is not None:
        name = (
            "retrieve_parent_token" if retrieve_parent_token is not None else ("intermediate_state_indices")
        )
        raise ValueError(f"ssmdecode.compat.sglang: {name} needs intermediate_states_buffer")
    if not multi and x.shape[1] == 1:
        # one token a request: the single-token kernel and its table
        x, dt, B, C, out = x[:, 0], dt[:, 0], B[:, 0], C[:, 0], out[:, 0]
        z = None if z is None else z[:, 0]
    kwargs = dict(
        D=D,
        z=z,
        dt_bias=dt_bias,
        dt_softplus=dt_softplus,
        state_batch_indices=state_batch_indices,
        pad_slot_id=pad_slot_id,
        out=out,
        disable_state_update=disable_state_update,
        config=config,
        **multi,
    )
    with engine_names(_ENGINE, _NAMES):
        if rand_seed is None:
            _selective_state_update(state, x, dt, A, B, C, **kwargs)
            return
        # the slots' stores only: the buffer's stay round-to-nearest
        args = UpdateArgs(
            state=state, x=x, dt=dt, A=A, B=B, C=C, **kwargs, rand_seed=rand_seed, philox_rounds=philox_rounds
        )
        call, launch = decode.prepare(args, _round_buffer=False)
    decode.run(call, launch)


def _four_dims(t: torch.Tensor) -> torch.Tensor:
    """[B, P] -> [B, 1, 1, P]; [B, H, P] -> [B, 1, H, P]; [B, T, H, P] as is (sglang's wrapper)."""
    while t.dim() < 4:
        t = t.unsqueeze(1)
    return t
