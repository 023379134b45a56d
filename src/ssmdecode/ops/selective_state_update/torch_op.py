"""selective_state_update and slot_order as PyTorch custom ops (torch.library), for torch.compile.

Traced by Dynamo, a Triton launch from Python code would break the graph (the table lookup asks
CUDA for the device's name, the launcher reads strides and dtypes of real tensors). Registered
as `torch.ops.ssmdecode.selective_state_update` with the tensors it writes declared (state, out,
intermediate_states) and a fake implementation that writes nothing, the whole call is one node
of the graph: `torch.compile(fullgraph=True)` compiles a decode step around it, CUDA graphs
(mode="reduce-overhead") capture it, and it runs the same kernels, at the same configs, with
the same bits as an eager call. The public functions route here only while torch.compile
traces them (torch.compiler.is_compiling()); eager calls skip the dispatcher's overhead.

A custom op takes no LaunchConfig: its label crosses as a string ("(16,1,slot,evict,ordered)").
The op returns nothing (an output may not alias an input), so out is allocated before it.
"""

from __future__ import annotations

import torch

from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update.checks import DEFAULT_PHILOX_ROUNDS

__all__ = ["selective_state_update_op", "slot_order_op"]


@torch.library.custom_op(
    "ssmdecode::selective_state_update",
    mutates_args=("state", "out", "intermediate_states"),
)
def _selective_state_update_op(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    dt_softplus: bool,
    state_batch_indices: torch.Tensor | None,
    dst_state_batch_indices: torch.Tensor | None,
    pad_slot_id: int,
    out: torch.Tensor,
    disable_state_update: bool,
    config: str | None,
    cu_seqlens: torch.Tensor | None,
    num_accepted_tokens: torch.Tensor | None,
    intermediate_states: torch.Tensor | None,
    intermediate_state_indices: torch.Tensor | None,
    parent_token_indices: torch.Tensor | None,
    fast_exp: bool,
    pdl: bool,
    batch_order: torch.Tensor | None,
    rand_seed: torch.Tensor | None = None,
    philox_rounds: int = DEFAULT_PHILOX_ROUNDS,
) -> None:
    from ssmdecode.ops.selective_state_update import decode

    decode.run(
        *decode.prepare(
            state,
            x,
            dt,
            A,
            B,
            C,
            D,
            z,
            dt_bias,
            dt_softplus,
            state_batch_indices,
            dst_state_batch_indices,
            pad_slot_id,
            out,
            disable_state_update,
            None if config is None else LaunchConfig.parse(config),
            cu_seqlens=cu_seqlens,
            num_accepted_tokens=num_accepted_tokens,
            intermediate_states=intermediate_states,
            intermediate_state_indices=intermediate_state_indices,
            parent_token_indices=parent_token_indices,
            fast_exp=fast_exp,
            pdl=pdl,
            batch_order=batch_order,
            rand_seed=rand_seed,
            philox_rounds=philox_rounds,
        )
    )


@_selective_state_update_op.register_fake
def _(*args: object, **kwargs: object) -> None:
    # Writes state, out and intermediate_states in place; nothing else to describe.
    return None


def selective_state_update_op(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    dt_softplus: bool,
    state_batch_indices: torch.Tensor | None,
    dst_state_batch_indices: torch.Tensor | None,
    pad_slot_id: int,
    out: torch.Tensor | None,
    disable_state_update: bool,
    config: LaunchConfig | None,
    **multi: object,
) -> torch.Tensor:
    """selective_state_update through the custom op (what the public function does while
    torch.compile traces it): out allocated first when None, like x."""
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    torch.ops.ssmdecode.selective_state_update(
        state,
        x,
        dt,
        A,
        B,
        C,
        D,
        z,
        dt_bias,
        dt_softplus,
        state_batch_indices,
        dst_state_batch_indices,
        pad_slot_id,
        out,
        disable_state_update,
        None if config is None else config.label,
        multi.get("cu_seqlens"),
        multi.get("num_accepted_tokens"),
        multi.get("intermediate_states"),
        multi.get("intermediate_state_indices"),
        multi.get("parent_token_indices"),
        multi.get("fast_exp", False),
        multi.get("pdl", False),
        multi.get("batch_order"),
        multi.get("rand_seed"),
        multi.get("philox_rounds", DEFAULT_PHILOX_ROUNDS),
    )
    return out


@torch.library.custom_op("ssmdecode::slot_order", mutates_args=())
def slot_order_op(state_batch_indices: torch.Tensor) -> torch.Tensor:
    """slot_order as a custom op: a new int32 [B] tensor."""
    from ssmdecode.ops.selective_state_update.slot_order import slot_order

    return slot_order(state_batch_indices)


@slot_order_op.register_fake
def _(state_batch_indices: torch.Tensor) -> torch.Tensor:
    return torch.empty(state_batch_indices.shape, dtype=torch.int32, device=state_batch_indices.device)
