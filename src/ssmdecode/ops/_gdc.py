"""Grid dependency control, for programmatic dependent launch (selective_state_update's pdl=
and the pdl ceiling): Triton's gdc_wait and gdc_launch_dependents (Triton >= 3.3, sm_90+), or
None where this Triton lacks them (pdl=True is then refused)."""

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:  # pragma: no cover - older Triton
    gdc_launch_dependents = gdc_wait = None

__all__ = ["gdc_launch_dependents", "gdc_wait"]
