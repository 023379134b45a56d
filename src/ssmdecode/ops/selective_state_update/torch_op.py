"""selective_state_update and slot_order as PyTorch custom ops (torch.library), for torch.compile.

Traced by Dynamo, a Triton launch from Python code would break the graph (the table lookup asks
CUDA for the device's name, the launcher reads strides and dtypes of real tensors). Registered
as `torch.ops.ssmdecode.selective_state_update` with the tensors it writes declared (state, out,
intermediate_states) and a fake implementation that writes nothing, the whole call is one node
of the graph: `torch.compile(fullgraph=True)` compiles a decode step around it, CUDA graphs
(mode="reduce-overhead") capture it, and it runs the same kernels, at the same configs, with
the same bits as an eager call. The public functions route here only while torch.compile
traces them (torch.compiler.is_compiling()); eager calls skip the dispatcher's overhead.

A custom op takes no LaunchConfig: its label crosses as a string ("(16,1,slot,evict,ordered)"),
as arguments.UpdateArgs.flat() lays the call out and from_flat() rebuilds it.
The op returns nothing (an output may not alias an input), so out is allocated before it.
"""

from __future__ import annotations

import torch

from ssmdecode.ops.selective_state_update import decode
from ssmdecode.ops.selective_state_update.arguments import UpdateArgs
from ssmdecode.ops.selective_state_update.slot_order import sort_slots

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
    validate_indices: bool | None,
    pdl: bool,
    batch_order: torch.Tensor | None,
    rand_seed: torch.Tensor | None,
    philox_rounds: int,
) -> None:
    # The schema is arguments.UpdateArgs flattened (its fields, in their order: a test holds
    # the two equal); the parameters, in order, are the flat values it is rebuilt from.
    decode.run(*decode.prepare(UpdateArgs.from_flat(*locals().values())))


@_selective_state_update_op.register_fake
def _(*args: object, **kwargs: object) -> None:
    # Writes state, out and intermediate_states in place; nothing else to describe.
    return None


def selective_state_update_op(args: UpdateArgs) -> torch.Tensor:
    """The call through the custom op (what the public door does while torch.compile traces
    it): out allocated first when None, like x; returns out."""
    out = args.out
    if out is None:
        out = torch.empty(args.x.shape, dtype=args.x.dtype, device=args.x.device)
        args = args.with_out(out)
    torch.ops.ssmdecode.selective_state_update(*args.flat())
    return out


@torch.library.custom_op("ssmdecode::slot_order", mutates_args=())
def slot_order_op(state_batch_indices: torch.Tensor) -> torch.Tensor:
    """slot_order as a custom op: a new int32 [B] tensor."""
    return sort_slots(state_batch_indices)


@slot_order_op.register_fake
def _(state_batch_indices: torch.Tensor) -> torch.Tensor:
    return torch.empty(state_batch_indices.shape, dtype=torch.int32, device=state_batch_indices.device)
