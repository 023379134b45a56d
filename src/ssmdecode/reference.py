"""The float64 reference of selective_state_update (every mode): an alias of
ssmdecode.ops.selective_state_update.naive, where it lives beside the kernels."""

from ssmdecode.ops.selective_state_update.naive import selective_state_update_reference

__all__ = ["selective_state_update_reference"]
