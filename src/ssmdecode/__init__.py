"""ssmdecode: GPU kernels for decoding state-space models (Mamba1 / Mamba2), in Triton.

The public names are imported lazily, so that importing the package defines no Triton kernel:
the CLI (and tests) can still choose Triton's interpreter (TRITON_INTERPRET=1, which Triton
reads when a kernel is defined) on a machine without a GPU.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ssmdecode.config import LaunchConfig
    from ssmdecode.ops.selective_state_update import (
        replay_advance,
        replay_flush,
        selective_state_replay,
        selective_state_update,
        selective_state_update_reference,
        slot_order,
    )

__all__ = [
    "LaunchConfig",
    "replay_advance",
    "replay_flush",
    "selective_state_replay",
    "selective_state_update",
    "selective_state_update_reference",
    "slot_order",
]
__version__ = "0.1.0"

_HOMES = {
    "LaunchConfig": "ssmdecode.config",
    "replay_advance": "ssmdecode.ops.selective_state_update",
    "replay_flush": "ssmdecode.ops.selective_state_update",
    "selective_state_replay": "ssmdecode.ops.selective_state_update",
    "selective_state_update": "ssmdecode.ops.selective_state_update",
    "selective_state_update_reference": "ssmdecode.ops.selective_state_update",
    "slot_order": "ssmdecode.ops.selective_state_update",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'ssmdecode' has no attribute {name!r}")
