"""The public doors of selective_state_update's decode and verify modes: selective_state_update
and slot_order. Each builds the call's one description (arguments.UpdateArgs) and hands it to the
mode's prepare and launch (decode.py, and verify.py through it), or, while torch.compile traces
it, to the custom op (torch_op.py), which carries the same description. Nothing imports this
module but the package's __init__: the modes and the op sit below it (no import circle).
Replay's door is replay.selective_state_replay, shaped alike.
"""

from __future__ import annotations

import torch

from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update import decode, torch_op
from ssmdecode.ops.selective_state_update.arguments import UpdateArgs
from ssmdecode.ops.selective_state_update.checks import DEFAULT_PHILOX_ROUNDS
from ssmdecode.ops.selective_state_update.slot_order import sort_slots

__all__ = ["selective_state_update", "slot_order"]


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
    dst_state_batch_indices: torch.Tensor | None = None,
    pad_slot_id: int = -1,
    out: torch.Tensor | None = None,
    disable_state_update: bool = False,
    config: LaunchConfig | None = None,
    *,
    cu_seqlens: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    intermediate_states: torch.Tensor | None = None,
    intermediate_state_indices: torch.Tensor | None = None,
    parent_token_indices: torch.Tensor | None = None,
    fast_exp: bool = False,
    validate_indices: bool | None = None,
    pdl: bool = False,
    batch_order: torch.Tensor | None = None,
    rand_seed: torch.Tensor | None = None,
    philox_rounds: int = DEFAULT_PHILOX_ROUNDS,
) -> torch.Tensor:
    """One decode step of a Mamba1 or Mamba2 SSM layer, one token or T tokens a request;
    updates ``state`` in place.

    Args:
        state: the state pool, [S, H, P, N] (Mamba2) or [S, P, N] (Mamba1); float32, bfloat16
            or float16. Updated in place.
        x: [B, H, P] or [B, P] (one token a request); [B, T, H, P] or [B, T, P] (T tokens a
            request, speculative decoding's verify step); or, with cu_seqlens, the tokens of
            every request packed, [total_tokens, H, P] or [total_tokens, P].
        dt, z: like x (z may be None: no gating). A: [H, P, N] or [P, N] (float32 as a rule).
        B, C: [B, G, N] with G dividing H, or [B, N]; with x's token dim or packing, the same
            leading dims as x.
        D, dt_bias: [H, P] or [P], or None.
        dt_softplus: apply softplus to dt + dt_bias.
        state_batch_indices: int32/int64 [B], the slot each request reads (default: request b
            reads slot b, which needs S >= B); or [>=B, K], a row of slots a request, whose
            column 0 is read, or column num_accepted_tokens[b] - 1 with num_accepted_tokens.
        dst_state_batch_indices: int32/int64 [B], the slot each request's final state is
            written to (default: the slot it reads); or [>=B, >=T]: token t's state goes to
            dst_state_batch_indices[b, t] (vLLM's speculative decoding), and no final state
            is written besides.
        pad_slot_id: a request whose read slot equals it reads and writes no slot and gets
            zeros in out; a destination (slot, intermediate_state_indices row) equal to it is
            not written.
        out: preallocated, shaped like x (any strides); default: new, x's dtype.
        disable_state_update: write no final state (the per-token writes still happen).
        config: force a LaunchConfig; default: this device's table, else the built-in default.
        cu_seqlens: int32/int64 [B + 1], the packed layout: request b's tokens are x[cu_seqlens
            [b] : cu_seqlens[b + 1]] (vLLM's). A request of no tokens is left alone.
        num_accepted_tokens: int32/int64 [B], the draft tokens the previous verify step
            accepted: the initial state is state_batch_indices[b, max(n - 1, 0)] (vLLM's).
        intermediate_states: [R, T_c, H, P, N] with T_c >= T, any float dtype: token t's state
            is also written to intermediate_states[row, t], row = intermediate_state_indices[b]
            (default: the request's read slot), as sglang's verify caches them.
        intermediate_state_indices: int32/int64 [B], each request's row of intermediate_states.
        parent_token_indices: int32/int64 [B, T] (EAGLE trees, sglang's retrieve_parent_token,
            read as sglang's kernel reads it): where 0 <= parent[b, t] < T, token t > 0
            continues from the state of token parent[b, t] as intermediate_states holds it
            (rounded to its dtype), not from token t - 1's; an entry outside [0, T) (-1, any
            negative, T or more) continues from token t - 1. Column 0 is never read. An entry
            in [t, T) would read a buffer row this call has not written yet (a state an
            earlier call left there): validate_indices refuses it.
        fast_exp: compute dA as exp2(log2(e) * A * dt'), as vLLM's kernel does (its
            fast_exp), instead of exp (mamba_ssm's and sglang's); different bits, same accuracy.
        validate_indices: check index values: every slot inside [0, S) or pad_slot_id, and for
            multi-token calls cu_seqlens (from 0, non-decreasing, ending at the token count,
            no request past the per-token writes), num_accepted_tokens, the rows of
            intermediate_states, and no parent in [t, T) (see parent_token_indices). Off by default because it synchronizes with the GPU; the environment
            variable SSMDECODE_VALIDATE_INDICES=1 turns it on. Unchecked slots out of range read
            and write out of bounds. Also checks that batch_order is a permutation.
        pdl: programmatic dependent launch (CUDA, compute capability 9.0 and newer): the kernel
            may start while the kernel before it in the stream is still running, and loads
            batch_order, the slot indices and the state slots before that kernel has
            finished; everything else (x, dt, A, B, C, D, z, dt_bias, and every store) waits
            for it. So the kernel launched just before must not write batch_order, the
            indices or the state slots this call reads (in a model it is another op's kernel,
            which holds; compute slot_order before the layers, not right before a call). Hides
            the launch and the index-then-state latency at small batch. Same bits either way.
            Ignored for CPU tensors (the interpreter runs one kernel at a time).
        batch_order: int32/int64 [B], a permutation of the batch rows (single-token calls):
            the kernel's programs take the rows in this order instead of 0, 1, 2, ... Same bits
            in any order (each row's arithmetic is its own); only which state slots are read
            side by side changes. `slot_order(state_batch_indices)`, computed once per decode
            step and passed to every layer, has slot-major configs walk the state pool in
            memory order, which pays when the batch fills much of the pool
            (docs/performance.md). Checked to be a permutation only with validate_indices: any
            other order leaves rows of out unwritten, updates a repeated row twice, and reads
            out of bounds for entries outside [0, B).
        rand_seed: int64 (or int32) [1] on the state's device, or None (round to nearest):
            every store of a state into a float16 or bfloat16 tensor (the state slots, the
            per-token slots, intermediate_states) rounds stochastically, up or down with the
            probabilities that make it exact on average, with random bits from Philox keyed
            by this seed and each element's offset in the tensor written (common.py has the
            bits). Deterministic for a given seed, so refresh it every step (and give each
            layer its own): with the same seed the same element gets the same bits every
            step. The kernel reads it on the device, so a CUDA graph that refreshes it (e.g.
            torch.randint(2**62, (1,), out=seed) inside the graph) replays with fresh bits.
        philox_rounds: Philox rounds of those bits, 1 to 64 (default 4: DEFAULT_PHILOX_ROUNDS).

    Returns:
        out.

    Raises:
        TypeError / ValueError naming the argument, what it got and what was expected, before
        anything is written.

    Under torch.compile the call is one node of the graph, the custom op
    torch.ops.ssmdecode.selective_state_update (torch_op.py): same kernels, same bits.
    """
    args = UpdateArgs(
        state=state,
        x=x,
        dt=dt,
        A=A,
        B=B,
        C=C,
        D=D,
        z=z,
        dt_bias=dt_bias,
        dt_softplus=dt_softplus,
        state_batch_indices=state_batch_indices,
        dst_state_batch_indices=dst_state_batch_indices,
        pad_slot_id=pad_slot_id,
        out=out,
        disable_state_update=disable_state_update,
        config=config,
        cu_seqlens=cu_seqlens,
        num_accepted_tokens=num_accepted_tokens,
        intermediate_states=intermediate_states,
        intermediate_state_indices=intermediate_state_indices,
        parent_token_indices=parent_token_indices,
        fast_exp=fast_exp,
        validate_indices=validate_indices,
        pdl=pdl,
        batch_order=batch_order,
        rand_seed=rand_seed,
        philox_rounds=philox_rounds,
    )
    if torch.compiler.is_compiling():  # one node of the graph: torch_op.py
        return torch_op.selective_state_update_op(args)
    call, launch = decode.prepare(args)
    decode.run(call, launch)
    return call.result


def slot_order(state_batch_indices: torch.Tensor) -> torch.Tensor:
    """The batch rows in ascending order of their state slots (int32 [B]), for
    selective_state_update(batch_order=...): a slot-major config then reads the state pool in
    memory order. The slots are the same for every layer of a decode step, so compute it once
    per step. Rows of equal slots (padding) keep their order; pad_slot_id -1 sorts first.
    Slots must lie within +-2^50 (the sort keys are int64). slot_order.sort_slots says how it
    sorts; under torch.compile the custom op torch.ops.ssmdecode.slot_order (torch_op.py)."""
    if torch.compiler.is_compiling():  # one node of the graph (torch_op.py)
        return torch_op.slot_order_op(state_batch_indices)
    return sort_slots(state_batch_indices)
