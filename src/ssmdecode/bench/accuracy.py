"""How far a 16-bit SSM state drifts over a long decode: a Mamba2 stack whose state is stored in
float32, or in bfloat16 / float16 rounded to nearest (RTN) or stochastically (SR), against the
same stack in float64, step after step. `ssmdecode accuracy` runs it and reports;
docs/numerics.md ("Accuracy over long decodes") is the method and why.

The stack is ssmdecode.models.mamba2's Mamba2LM with random weights. Every variant runs those
weights (activations in the shape's input dtype, as an engine does) with its own state pools;
the reference, Float64LM, runs the same weights cast to float64 (exact), with every activation
and both pools (SSM and conv state) in float64. All start from zero state and the same tokens.

Each step, rows 0..R-1 of every variant are teacher-forced on the reference's greedy tokens,
so all see the same inputs and only their states differ; they give the SSM state's relative
error ||s - s64|| / ||s64|| (over all layers and those rows' slots), the logits' relative
error, and whether each row's argmax differs from the float64 reference's and from the fp32
variant's. Rows R..2R-1 of every variant run free, each on its own greedy tokens from the same
first token: they give the first step at which a variant's greedy sequence departs from fp32's
and from float64's. Everything stays on the device until the end (no host synchronization a
step).

Stochastic rounding: each SR variant draws a fresh int64 seed per layer every step from its
own generator (seeded by `sr_seed`), so no element gets the same random bits twice and a run
is reproducible for a given seed.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ssmdecode.models.mamba2 import Mamba2Dims, Mamba2LM, conv_state_update, gated_rms_norm, rms_norm
from ssmdecode.ops.selective_state_update.checks import DEFAULT_PHILOX_ROUNDS

__all__ = [
    "DECAYS",
    "DEFAULT_VARIANTS",
    "VARIANTS",
    "Float64LM",
    "StateVariant",
    "decay_summary",
    "logged_steps",
    "plot_accuracy",
    "run_accuracy",
    "set_decay",
    "ssu_step_float64",
]


@dataclass(frozen=True)
class StateVariant:
    """How a variant stores the SSM state: its dtype, whether stores round stochastically, and
    its decode path (Mamba2DecodeStack's: "table", the single-token kernel; "replay" or
    "replay-fast", replay decode by the exact or the fast route, its state the checkpoint
    with the ring's cached tokens replayed)."""

    name: str
    state_dtype: torch.dtype
    stochastic: bool = False
    path: str = "table"


VARIANTS: dict[str, StateVariant] = {
    v.name: v
    for v in (
        StateVariant("fp32", torch.float32),
        StateVariant("bf16-RTN", torch.bfloat16),
        StateVariant("bf16-SR", torch.bfloat16, stochastic=True),
        StateVariant("fp16-RTN", torch.float16),
        StateVariant("fp16-SR", torch.float16, stochastic=True),
        StateVariant("fp32-replay", torch.float32, path="replay"),
        StateVariant("fp32-replay-fast", torch.float32, path="replay-fast"),
    )
}
DEFAULT_VARIANTS = ("fp32", "bf16-RTN", "bf16-SR", "fp16-RTN", "fp16-SR")
"""What `ssmdecode accuracy` runs unless told: the state dtypes and roundings of the
single-token path (the replay variants are asked for by name)."""
BASELINE = "fp32"
"""The variant the token comparisons are made against besides float64: what engines default to."""


# The range of -A per regime. "init": Mamba2's initialization (uniform in [1, 16], what
# ssmdecode.models.mamba2 draws); with dt in [1e-3, 0.1], A*dt spans 1e-3 to 1.6, so no head
# remembers more than about a thousand steps. "slow": log-uniform in [0.01, 1], so A*dt spans
# 1e-5 to 0.1 (memories of ten to 1e5 steps), as trained models have heads with A*dt near 0.
DECAYS: dict[str, tuple[float, float]] = {"slow": (1e-2, 1.0), "init": (1.0, 16.0)}


def set_decay(lm: Mamba2LM, decay: str, seed: int) -> None:
    """Redraw every layer's A for the regime (DECAYS; "init" keeps the model's own draw). In
    place, before any variant shares the weights."""
    if decay not in DECAYS:
        raise ValueError(f"decay {decay!r}: expected one of {sorted(DECAYS)}")
    if decay == "init":
        return
    low, high = DECAYS[decay]
    device = lm.stack.device
    gen = torch.Generator(device=device).manual_seed(seed + 2)  # seed, seed + 1: the weights
    for w in lm.stack.layers:
        u = torch.rand(w.A.shape, generator=gen, device=device)
        w.A = -torch.exp(u * (math.log(high) - math.log(low)) + math.log(low))


def decay_summary(lm: Mamba2LM, steps: int) -> dict[str, object]:
    """The nominal decay A * softplus(dt_bias) of every head of every layer (dt's in-projection
    part left out: it moves dt by a factor of about e either way): quantiles, and the share of
    heads whose memory 1 / |A dt| outlasts the decode."""
    rate = torch.cat([-(w.A.double() * F.softplus(w.dt_bias.double())) for w in lm.stack.layers]).cpu()
    q = torch.quantile(rate, torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0], dtype=torch.float64))
    return {
        "what": "|A| * softplus(dt_bias) per head, all layers (nominal: dt's input term left out)",
        "quantiles": dict(zip(("min", "p10", "median", "p90", "max"), map(float, q), strict=True)),
        "share_of_heads_remembering_past_the_decode": float((1 / rate > steps).double().mean()),
    }


def logged_steps(steps: int, points: int) -> list[int]:
    """The steps (1-based) whose values the curves keep: about `points` of them, spaced evenly
    on a log axis, always 1 and `steps` (every step when points >= steps)."""
    if steps < 1 or points < 1:
        raise ValueError(f"need steps >= 1 and points >= 1, got {steps} and {points}")
    if points >= steps:
        return list(range(1, steps + 1))
    if points == 1:
        return [steps]
    ratio = steps ** (1 / (points - 1))
    return sorted({min(steps, round(ratio**k)) for k in range(points)} | {1, steps})


def ssu_step_float64(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    dt_bias: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One selective_state_update step of the model's layer (dt_softplus, no z, dt and A tied
    over the head dim), vectorized over the batch, in float64: the operations of
    ssmdecode.reference.selective_state_update_reference, which loops over requests in Python
    and copies the whole pool a call (too slow for thousands of steps). state [B, H, P, N]; x
    [B, H, P]; dt [B, H]; A, D, dt_bias [H]; B, C [B, G, N]. Returns (out [B, H, P], new state),
    both float64; state is not modified."""
    f = torch.float64
    heads_per_group = x.shape[1] // B.shape[1]
    dt = dt.to(f) + dt_bias.to(f)
    dt = torch.where(dt <= 20.0, F.softplus(dt), dt)  # [B, H]
    Bh = B.to(f).repeat_interleave(heads_per_group, dim=1)  # [B, H, N]
    Ch = C.to(f).repeat_interleave(heads_per_group, dim=1)
    xf = x.to(f)
    dA = torch.exp(A.to(f) * dt)
    s = state.to(f) * dA[..., None, None] + (dt[..., None] * Bh)[:, :, None, :] * xf[..., None]
    out = (s * Ch[:, :, None, :]).sum(-1) + D.to(f)[:, None] * xf
    return out, s


class Float64LM:
    """A Mamba2LM's weights cast to float64, with float64 pools (SSM state [slots, H, P, N], conv
    state [slots, X, W], zero at the start): the same layer as Mamba2DecodeStack.layer_step,
    every operation in float64. No padded rows (every row has a real slot)."""

    def __init__(self, lm: Mamba2LM, slots: int) -> None:
        f = torch.float64
        self.dims: Mamba2Dims = lm.stack.dims
        self.layers = [
            dataclasses.replace(w, **{k.name: getattr(w, k.name).to(f) for k in dataclasses.fields(w)})
            for w in lm.stack.layers
        ]
        self.embedding, self.final_norm, self.lm_head = (
            t.to(f) for t in (lm.embedding, lm.final_norm, lm.lm_head)
        )
        s, device = self.dims.shape, lm.stack.device
        self.ssm_state = [
            torch.zeros(slots, s.nheads, s.headdim, s.dstate, dtype=f, device=device) for _ in self.layers
        ]
        self.conv_state = [
            torch.zeros(slots, self.dims.conv_dim, self.dims.d_conv, dtype=f, device=device)
            for _ in self.layers
        ]

    def layer_step(self, i: int, hidden: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Layer i on hidden [B, d] (float64) for rows in slots (int64 [B])."""
        w, dims, s = self.layers[i], self.dims, self.dims.shape
        rows, E = hidden.shape[0], dims.d_inner
        H, P, N, G = s.nheads, s.headdim, s.dstate, s.ngroups
        zxbcdt = rms_norm(hidden, w.norm, dims.eps) @ w.in_proj.t()
        z, xbc, dt = zxbcdt.split([E, dims.conv_dim, H], dim=-1)
        xbc = conv_state_update(self.conv_state[i], xbc, w.conv_weight, w.conv_bias, slots)
        y, state = ssu_step_float64(
            self.ssm_state[i].index_select(0, slots),
            xbc[:, :E].view(rows, H, P),
            dt,
            w.A,
            xbc[:, E : E + G * N].view(rows, G, N),
            xbc[:, E + G * N :].view(rows, G, N),
            w.D,
            w.dt_bias,
        )
        self.ssm_state[i].index_copy_(0, slots, state)
        y = gated_rms_norm(y.reshape(rows, E), z, w.gate_norm, dims.norm_group, dims.eps)
        return hidden + y @ w.out_proj.t()

    def step(self, tokens: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Next-token logits [B, V] in float64 for tokens and slots (int64 [B])."""
        hidden = self.embedding[tokens]
        for i in range(len(self.layers)):
            hidden = self.layer_step(i, hidden, slots)
        return rms_norm(hidden, self.final_norm, self.dims.eps) @ self.lm_head.t()


@dataclass
class _Arm:
    """One variant's run: a shallow copy of the LM (the weight tensors shared) holding its own
    pools, its stochastic-rounding seeds, and what it measured each step (on the device)."""

    variant: StateVariant
    lm: Mamba2LM
    seed: torch.Tensor | None  # int64 [layers]: this step's seed of each layer
    gen: torch.Generator | None
    philox_rounds: int
    free_tokens: torch.Tensor  # [R]: the free-running rows' next input
    free_ids: torch.Tensor  # [steps, R]
    state_error: torch.Tensor  # [steps] float64
    logits_error: torch.Tensor  # [steps] float64
    differs_baseline: torch.Tensor  # [steps] int64: teacher-forced rows whose argmax differs
    differs_float64: torch.Tensor  # [steps] int64

    @classmethod
    def build(
        cls,
        lm: Mamba2LM,
        variant: StateVariant,
        slots: int,
        steps: int,
        first: torch.Tensor,
        sr_seed: int,
        philox_rounds: int = DEFAULT_PHILOX_ROUNDS,
    ) -> _Arm:
        stack, device = lm.stack, lm.stack.device
        arm_lm = copy.copy(lm)
        arm_lm.stack = stack.with_pools(slots, variant.state_dtype, variant.path)
        seed = gen = None
        if variant.stochastic:
            seed = torch.zeros(len(stack.layers), dtype=torch.int64, device=device)
            gen = torch.Generator(device=device).manual_seed(sr_seed)

        def zeros(dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros(steps, dtype=dtype, device=device)

        rows = first.shape[0]
        return cls(
            variant,
            arm_lm,
            seed,
            gen,
            philox_rounds,
            first.clone(),
            torch.zeros(steps, rows, dtype=torch.int64, device=device),
            zeros(torch.float64),
            zeros(torch.float64),
            zeros(torch.int64),
            zeros(torch.int64),
        )

    def step(self, tokens: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Logits [2R, V] for the teacher-forced tokens [R] and the free rows' own; a fresh
        seed for every layer first."""
        if self.seed is not None:
            self.seed.random_(0, 2**62, generator=self.gen)
        return self.lm.step(
            torch.cat([tokens, self.free_tokens]),
            slots,
            rand_seed=self.seed,
            philox_rounds=self.philox_rounds,
        )


def _relative(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    return (num / den).sqrt()


def _first_departures(ids: torch.Tensor, want: torch.Tensor) -> list[int | None]:
    """Per row, the first step (1-based) whose token differs from want's; None if none."""
    differ = (ids != want).cpu()
    out: list[int | None] = []
    for r in range(differ.shape[1]):
        where = differ[:, r].nonzero()
        out.append(int(where[0, 0]) + 1 if len(where) else None)
    return out


def _finite(v: float) -> float | None:
    """A float for JSON: None where it is not finite (a state that overflowed)."""
    return v if math.isfinite(v) else None


def _stats(curve: torch.Tensor) -> dict[str, float | None]:
    c = curve.cpu()
    return {"mean": _finite(float(c.mean())), "max": _finite(float(c.max())), "last": _finite(float(c[-1]))}


def run_accuracy(
    lm: Mamba2LM,
    variants: Sequence[StateVariant],
    steps: int,
    rows: int,
    seed: int,
    points: int,
    sr_seed: int,
    progress: Callable[[int], object] | None = None,
    philox_rounds: int = DEFAULT_PHILOX_ROUNDS,
) -> dict[str, object]:
    """Decode `steps` steps with each variant (the first must be BASELINE) and the float64
    reference, R = rows teacher-forced and R free-running rows each (module docstring); the
    first token of each row is random (seed). Returns a JSON-ready dict: the logged steps, the
    float64 state's norm there, and per variant its curves at those steps and its summary
    over all steps. progress(1) is called after each step; philox_rounds: the stochastic
    variants' Philox rounds."""
    if not variants or variants[0].name != BASELINE:
        raise ValueError(f"the first variant must be {BASELINE!r}, the baseline of the token comparisons")
    if steps < 1 or rows < 1:
        raise ValueError(f"need steps >= 1 and rows >= 1, got {steps} and {rows}")
    device, vocab = lm.stack.device, lm.embedding.shape[0]
    logged = logged_steps(steps, points)
    first = torch.randint(vocab, (rows,), generator=torch.Generator().manual_seed(seed)).to(device)
    taught = torch.arange(1, rows + 1, device=device)  # the teacher-forced rows' slots
    slots = torch.arange(1, 2 * rows + 1, device=device)  # then the free-running rows'
    reference = Float64LM(lm, rows + 1)
    arms = [_Arm.build(lm, v, 2 * rows + 1, steps, first, sr_seed, philox_rounds) for v in variants]
    ref_ids = torch.zeros(steps, rows, dtype=torch.int64, device=device)
    ref_norm = torch.zeros(steps, dtype=torch.float64, device=device)

    tokens = first
    for t in range(steps):
        ref_logits = reference.step(tokens, taught)
        ref_ids[t] = ref_logits.argmax(-1)
        den = sum(p[1:].square().sum() for p in reference.ssm_state)
        ref_norm[t] = den.sqrt()
        logits_den = ref_logits.square().sum()
        baseline_ids = None
        for arm in arms:
            logits = arm.step(tokens, slots)
            taught_logits, free_logits = logits[:rows], logits[rows:]
            num = sum(
                (arm.lm.stack.state_of(i, taught).double() - r[1:]).square().sum()
                for i, r in enumerate(reference.ssm_state)
            )
            arm.state_error[t] = _relative(num, den)
            arm.logits_error[t] = _relative((taught_logits.double() - ref_logits).square().sum(), logits_den)
            ids = taught_logits.argmax(-1)
            baseline_ids = ids if baseline_ids is None else baseline_ids
            arm.differs_baseline[t] = (ids != baseline_ids).sum()
            arm.differs_float64[t] = (ids != ref_ids[t]).sum()
            arm.free_tokens = free_logits.argmax(-1)
            arm.free_ids[t] = arm.free_tokens
        tokens = ref_ids[t]
        if progress is not None:
            progress(1)

    index = torch.tensor([k - 1 for k in logged])
    baseline = arms[0]
    results: dict[str, object] = {}
    for arm in arms:
        seen = rows * torch.arange(1, steps + 1, dtype=torch.float64)
        by_layer = []
        for i, r in enumerate(reference.ssm_state):
            p = arm.lm.stack.state_of(i, taught).double()
            err = _relative((p - r[1:]).square().sum(), r[1:].square().sum())
            by_layer.append(_finite(float(err)))
        curves = {
            "state_rel_error": arm.state_error.cpu()[index],
            "logits_rel_error": arm.logits_error.cpu()[index],
            f"argmax_differs_from_{BASELINE}": (arm.differs_baseline.cpu().cumsum(0) / seen)[index],
            "argmax_differs_from_float64": (arm.differs_float64.cpu().cumsum(0) / seen)[index],
        }
        results[arm.variant.name] = {
            "state_dtype": str(arm.variant.state_dtype).removeprefix("torch."),
            "rounding": "stochastic" if arm.variant.stochastic else "nearest",
            "curves": {k: [_finite(float(v)) for v in c] for k, c in curves.items()},
            "summary": {
                "state_rel_error": _stats(arm.state_error),
                "logits_rel_error": _stats(arm.logits_error),
                "state_rel_error_by_layer_at_last_step": by_layer,
                f"argmax_differs_from_{BASELINE}": float(arm.differs_baseline.sum()) / (rows * steps),
                "argmax_differs_from_float64": float(arm.differs_float64.sum()) / (rows * steps),
                f"free_run_first_departure_from_{BASELINE}": _first_departures(
                    arm.free_ids, baseline.free_ids
                ),
                "free_run_first_departure_from_float64": _first_departures(arm.free_ids, ref_ids),
            },
        }
    return {
        "steps_logged": logged,
        "float64": {"state_norm": [float(v) for v in ref_norm.cpu()[index]]},
        "variants": results,
    }


def plot_accuracy(path: Path, title: str, data: Mapping[str, object]) -> Path:
    """A PNG of three panels against the step on a log axis, one line per variant: the state's
    relative error and the logits' (log axes), and the share of teacher-forced tokens so far
    whose argmax differs from float64's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = data["steps_logged"]
    panels = (
        ("state_rel_error", "SSM state: ||s - s64|| / ||s64||", "log"),
        ("logits_rel_error", "logits: ||l - l64|| / ||l64||", "log"),
        ("argmax_differs_from_float64", "argmax differs from float64's (share so far)", "linear"),
    )
    # One colour a state dtype; stochastic rounding dashed beside round-to-nearest solid; fp32
    # wider, so that it still shows where a 16-bit state's line lies on it.
    colours = {"float32": "black", "bfloat16": "tab:orange", "float16": "tab:blue"}
    fig, axes = plt.subplots(1, len(panels), figsize=(16, 4.8))
    for ax, (key, label, yscale) in zip(axes, panels, strict=True):
        for name, v in data["variants"].items():
            values = [float("nan") if y is None else y for y in v["curves"][key]]
            style = "--" if v["rounding"] == "stochastic" else "-"
            width = 3.0 if v["state_dtype"] == "float32" else 1.5
            ax.plot(steps, values, style, color=colours.get(v["state_dtype"]), linewidth=width, label=name)
        ax.set_xscale("log")
        ax.set_yscale(yscale)
        if yscale == "linear":
            ax.set_ylim(bottom=0)
        ax.set_xlabel("decode step")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
