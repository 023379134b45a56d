"""selective_state_update, the decode step of Mamba1 / Mamba2 layers, as a family of modes.

    module          what it holds
    api.py          the public doors selective_state_update (one token or T tokens a request)
                    and slot_order: the call described once (arguments.py), handed to the
                    mode's prepare or, under torch.compile, to the custom op
    arguments.py    UpdateArgs: one call's arguments, keyword-only, flattened for the op and
                    rebuilt from it in one place each
    decode.py       the checks and launch of a call (prepare) and the single-token kernel; the
                    recurrence, shapes, dtypes and bits
    verify.py       the multi-token kernel: speculative decoding's verify step, with sglang's
                    intermediate-state buffer and EAGLE trees and vLLM's accepted-token slots
    replay.py       selective_state_replay: the verify step by replay (a ring of the inputs of
                    the tokens since each slot's checkpoint; the state written once a window),
                    with replay_advance (the bookkeeping) and replay_flush; its exact route
    replay_fast.py  replay's fast route (exact=False): out from the checkpoint and the ring in
                    the dual form, the state written only by the flushes (decode and verify)
    naive.py        the float64 reference of every mode, for tests and tools
    common.py       the @triton.jit helpers every kernel shares (the ordered row sum above all:
                    each mode must compute with them to keep the bits)
    checks.py       every argument check, with a cheap path for valid calls
    launch.py       what the launchers share (a prepared launch, kernel variants)
    torch_op.py     the custom ops torch.compile sees
    slot_order.py   sort_slots, the batch rows by state slot (slot_order's sort, for batch_order)

One public function a mode; the engines' calling conventions live in ssmdecode.compat.
"""

from ssmdecode.ops.selective_state_update.api import selective_state_update, slot_order
from ssmdecode.ops.selective_state_update.checks import ties_head_dim
from ssmdecode.ops.selective_state_update.naive import (
    selective_state_replay_reference,
    selective_state_update_reference,
)
from ssmdecode.ops.selective_state_update.replay import (
    replay_advance,
    replay_flush,
    selective_state_replay,
)

__all__ = [
    "replay_advance",
    "replay_flush",
    "selective_state_replay",
    "selective_state_replay_reference",
    "selective_state_update",
    "selective_state_update_reference",
    "slot_order",
    "ties_head_dim",
]
