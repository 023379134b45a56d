"""The shapes selective_state_update is run at: one rank's Mamba2 layer (Shape), and the Mamba2
mixers of public models (PRESETS), for the models, the benchmarks and the tuner.

A preset holds the whole model's Mamba2 mixer (all heads, all groups), read off its public
config; `per_rank(preset, tp)` cuts it the way tensor parallelism does in serving engines:
heads and groups split over the ranks, and groups replicated when there are fewer than ranks
(each rank then holds one group).

Every value below cites where it was read. Where the config itself could not be read, the
comment says so and names what was read instead.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

__all__ = [
    "CPU_SHAPE",
    "HEADLINE",
    "PRESETS",
    "ModelPreset",
    "Shape",
    "dtype_name",
    "parse_dtype",
    "per_rank",
    "with_overrides",
]

_DTYPE_NAMES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def parse_dtype(name: str) -> torch.dtype:
    """'float32' / 'fp32', 'bfloat16' / 'bf16', 'float16' / 'fp16' -> the torch dtype."""
    try:
        return _DTYPE_NAMES[name.lower()]
    except KeyError:
        raise ValueError(f"dtype {name!r}: expected one of {sorted(_DTYPE_NAMES)}") from None


def dtype_name(dtype: torch.dtype) -> str:
    """torch.float32 -> 'float32'."""
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class Shape:
    """One rank's Mamba2 layer as selective_state_update sees it: state [S, H, P, N] in
    state_dtype, x [B, H, P] and B/C [B, G, N] in dtype."""

    nheads: int
    headdim: int
    dstate: int
    ngroups: int
    state_dtype: torch.dtype = torch.float32
    dtype: torch.dtype = torch.bfloat16
    name: str = ""

    def __post_init__(self) -> None:
        for field in ("nheads", "headdim", "dstate", "ngroups"):
            if getattr(self, field) < 1:
                raise ValueError(f"Shape.{field} must be >= 1, got {getattr(self, field)}")
        if self.nheads % self.ngroups:
            raise ValueError(f"{self.ngroups} groups do not divide {self.nheads} heads")

    def state_bytes(self, batch: int) -> int:
        """Bytes of state one call reads (and writes again): batch x H x P x N x elem size."""
        return batch * self.nheads * self.headdim * self.dstate * self.state_dtype.itemsize

    @property
    def label(self) -> str:
        """'H16-P64-N128-G1-float32/bfloat16', prefixed by the preset name when there is one."""
        dims = (
            f"H{self.nheads}-P{self.headdim}-N{self.dstate}-G{self.ngroups}-"
            f"{dtype_name(self.state_dtype)}/{dtype_name(self.dtype)}"
        )
        return f"{self.name} {dims}" if self.name else dims

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "nheads": self.nheads,
            "headdim": self.headdim,
            "dstate": self.dstate,
            "ngroups": self.ngroups,
            "state_dtype": dtype_name(self.state_dtype),
            "dtype": dtype_name(self.dtype),
        }


@dataclass(frozen=True)
class ModelPreset:
    """A whole model's Mamba2 mixer: total heads and groups before tensor parallelism."""

    name: str
    hf_id: str
    nheads: int
    headdim: int
    dstate: int
    ngroups: int
    d_model: int
    mamba_layers: int
    state_dtype: torch.dtype
    dtype: torch.dtype
    source: str


PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in (
        ModelPreset(
            # The seed's model: 16 heads and 1 group per rank at TP8.
            name="nemotron3-super",
            hf_id="nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16",
            nheads=128,
            headdim=64,
            dstate=128,
            ngroups=8,
            d_model=4096,
            mamba_layers=40,
            state_dtype=torch.float32,
            dtype=torch.bfloat16,
            source=(
                "https://huggingface.co/nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-Base-BF16/blob/"
                "main/config.json (the page was found, its body not read). Values from public "
                "code quoting that config: mamba_num_heads 128, mamba_head_dim 64, "
                "ssm_state_size 128, n_groups 8, hidden_size 4096, num_hidden_layers 88, "
                "hybrid_override_pattern with 40 'M' (Mamba2) of 88. State float32: "
                "mamba_ssm_cache_dtype per the seed PR, and NVIDIA's Nemotron 3 Super "
                "deployment guide (docs.nvidia.com/nemotron) says to use float32 for the SSM "
                "cache at every checkpoint precision."
            ),
        ),
        ModelPreset(
            name="mamba2-2.7b",
            hf_id="state-spaces/mamba2-2.7b",
            nheads=80,
            headdim=64,
            dstate=128,
            ngroups=1,
            d_model=2560,
            mamba_layers=64,
            state_dtype=torch.float32,
            dtype=torch.bfloat16,
            source=(
                "d_model 2560 and n_layer 64 (all Mamba2): NOT read off "
                "https://huggingface.co/state-spaces/mamba2-2.7b/blob/main/config.json itself; "
                "they match the sibling state-spaces config of mamba2attn-2.7b (d_model 2560, "
                "n_layer 64, ssm_cfg layer Mamba2). The config sets no other ssm_cfg field, so "
                "the Mamba2 module defaults apply (state-spaces/mamba, "
                "mamba_ssm/modules/mamba2.py): d_state 128, expand 2, headdim 64, ngroups 1, "
                "hence 2 x 2560 / 64 = 80 heads. No SSM cache dtype in the config; float32 "
                "here (mamba_ssm itself allocates the model dtype): pass --state-dtype to "
                "change it."
            ),
        ),
        ModelPreset(
            name="nemotron-h-8b",
            hf_id="nvidia/Nemotron-H-8B-Base-8K",
            nheads=128,
            headdim=64,
            dstate=128,
            ngroups=8,
            d_model=4096,
            mamba_layers=24,
            state_dtype=torch.float32,
            dtype=torch.bfloat16,
            source=(
                "https://docs.nvidia.com/nemo/megatron-bridge/latest/models/llm/nemotronh.html "
                "(Nemotron H 8B: 52 layers, hidden 4096, Mamba heads 128, head dim 64, state "
                "dim 128, pattern M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M- with 24 "
                "'M'); n_groups 8 from a public trimmed copy of "
                "https://huggingface.co/nvidia/Nemotron-H-8B-Base-8K/blob/main/config.json (not "
                "read directly). SSM cache dtype not confirmed: float32 here."
            ),
        ),
        ModelPreset(
            name="codestral-mamba-7b",
            hf_id="mistralai/Mamba-Codestral-7B-v0.1",
            nheads=128,
            headdim=64,
            dstate=128,
            ngroups=8,
            d_model=4096,
            mamba_layers=64,
            state_dtype=torch.float32,
            dtype=torch.bfloat16,
            source=(
                "The model page https://huggingface.co/mistralai/Mamba-Codestral-7B-v0.1 flags "
                "its config.json as invalid JSON, so values are from a transformers conversion "
                "of it (https://huggingface.co/Molbap/code2/blob/main/config.json: num_heads "
                "128, head_dim 64, state_size 128, n_groups 8, hidden_size 4096, "
                "num_hidden_layers 64, all Mamba2) and agree with the params.json of a "
                "fine-tune (dim 4096, n_layers 64, n_groups 8). SSM cache dtype not confirmed: "
                "float32 here."
            ),
        ),
    )
}


def per_rank(preset: ModelPreset, tp: int = 1) -> Shape:
    """One tensor-parallel rank's shape: heads / tp, and groups / tp, at least 1 (groups are
    replicated when tp exceeds them). Raises ValueError when tp divides neither evenly."""
    if tp < 1:
        raise ValueError(f"tp must be >= 1, got {tp}")
    if preset.nheads % tp:
        raise ValueError(f"{preset.name}: tp {tp} does not divide its {preset.nheads} heads")
    if preset.ngroups >= tp and preset.ngroups % tp:
        raise ValueError(f"{preset.name}: tp {tp} does not divide its {preset.ngroups} groups")
    if preset.ngroups < tp and tp % preset.ngroups:
        raise ValueError(
            f"{preset.name}: its {preset.ngroups} groups cannot be replicated evenly over {tp} ranks"
        )
    return Shape(
        nheads=preset.nheads // tp,
        headdim=preset.headdim,
        dstate=preset.dstate,
        ngroups=max(1, preset.ngroups // tp),
        state_dtype=preset.state_dtype,
        dtype=preset.dtype,
        name=f"{preset.name}/tp{tp}",
    )


def with_overrides(shape: Shape, **fields: object) -> Shape:
    """The shape with the given fields replaced; fields given as None are left alone."""
    return replace(shape, **{k: v for k, v in fields.items() if v is not None})


# The shape of the seed's headline case (Nemotron-3-Super, TP8) is the tools' default on a GPU;
# under the interpreter a tiny shape with P and N not equal, so a transposed index shows.
HEADLINE = ("nemotron3-super", 8)
CPU_SHAPE = Shape(nheads=2, headdim=8, dstate=16, ngroups=1, name="cpu-tiny")
