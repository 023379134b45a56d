"""One selective_state_update call described once: UpdateArgs, keyword-only.

The public door (api.py) builds it from the caller's arguments; decode.prepare checks it and
prepares the launch; under torch.compile the custom op (torch_op.py) carries it as its flat
schema of tensors and scalars. The two conversions live here and nowhere else: flat() lays it
out in the op's parameter order (the LaunchConfig as its label), from_flat() rebuilds it. Every
field is named as the public function names its argument, and check_call takes them by those
names, so an argument keeps its name from the door to the kernel's launch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import torch

from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update.checks import DEFAULT_PHILOX_ROUNDS

__all__ = ["OP_FIELDS", "UpdateArgs"]


@dataclass(frozen=True, kw_only=True)
class UpdateArgs:
    """selective_state_update's arguments, unchecked (decode.prepare checks them); the
    meaning of each is the public function's docstring's (api.py). The field order is the
    custom op's parameter order (OP_FIELDS)."""

    state: torch.Tensor
    x: torch.Tensor
    dt: torch.Tensor
    A: torch.Tensor
    B: torch.Tensor
    C: torch.Tensor
    D: torch.Tensor | None = None
    z: torch.Tensor | None = None
    dt_bias: torch.Tensor | None = None
    dt_softplus: bool = False
    state_batch_indices: torch.Tensor | None = None
    dst_state_batch_indices: torch.Tensor | None = None
    pad_slot_id: int = -1
    out: torch.Tensor | None = None
    disable_state_update: bool = False
    config: LaunchConfig | None = None
    cu_seqlens: torch.Tensor | None = None
    num_accepted_tokens: torch.Tensor | None = None
    intermediate_states: torch.Tensor | None = None
    intermediate_state_indices: torch.Tensor | None = None
    parent_token_indices: torch.Tensor | None = None
    fast_exp: bool = False
    validate_indices: bool | None = None
    pdl: bool = False
    batch_order: torch.Tensor | None = None
    rand_seed: torch.Tensor | None = None
    philox_rounds: int = DEFAULT_PHILOX_ROUNDS

    def as_kwargs(self) -> dict[str, Any]:
        """The fields by name (the tensors themselves, not copies), for check_call."""
        return {name: getattr(self, name) for name in OP_FIELDS}

    def with_out(self, out: torch.Tensor) -> UpdateArgs:
        return replace(self, out=out)

    def flat(self) -> tuple[Any, ...]:
        """The custom op's arguments, in its order: config as its label (a string)."""
        return tuple(
            (None if v is None else v.label) if name == "config" else v
            for name, v in self.as_kwargs().items()
        )

    @classmethod
    def from_flat(cls, *values: Any) -> UpdateArgs:
        """The call flat() laid out, rebuilt (the label parsed back into a LaunchConfig)."""
        if len(values) != len(OP_FIELDS):
            raise TypeError(f"UpdateArgs.from_flat takes {len(OP_FIELDS)} values, got {len(values)}")
        kwargs = dict(zip(OP_FIELDS, values, strict=True))
        if kwargs["config"] is not None:
            kwargs["config"] = LaunchConfig.parse(kwargs["config"])
        return cls(**kwargs)


OP_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(UpdateArgs))
