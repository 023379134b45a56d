"""Batched single-token decode through a stack of Mamba2 layers, at one tensor-parallel rank's
shapes, with random weights: the setting in which `ssmdecode e2e` weighs selective_state_update
against the rest of a decode step, and checks that a launch config leaves greedy outputs alone.

One layer, for a batch of rows each holding a state slot (B rows, d model width, H heads, P head
dim, N state dim, G groups, W conv width, S slots; E = H*P the inner width, X = E + 2*G*N):

    h           = RMSNorm(hidden)                                     [B, d]
    z, xBC, dt  = split(h @ W_in^T)                                   [B, E], [B, X], [B, H]
    window      = shift_left(conv_state[slot]) <- xBC                 conv_state [S, X, W]
    xBC         = silu(sum_w window * w_conv + b_conv)                [B, X]
    x, B, C     = split(xBC)                                          [B, H, P], [B, G, N] x 2
    y           = selective_state_update(ssm_state, x, dt, A, B, C, D, dt_bias,
                                         dt_softplus=True, slots)     ssm_state [S, H, P, N]
    y           = RMSNorm over groups of E/G channels (y * silu(z))   [B, E]
    hidden      = hidden + y @ W_out^T                                [B, d]

As in the engines, x, B and C are strided views of one tensor, dt is a strided slice of the
in-projection expanded over P with stride 0, and A, D, dt_bias are per-head vectors expanded
the same way (the kernel's tied-head-dim path). The gate is applied in the norm, not in the
kernel (z=None), as Mamba2 does.

A rank of a tensor-parallel engine would also all-reduce after the out-projection and, where
groups are replicated over ranks, reduce the gated norm's variance across ranks; a single GPU
runs neither, so the step here is the per-rank compute only.

CUDA graphs: `step` has static shapes and makes no host synchronization; its slot indices are
a device tensor, so replays can move the batch to other slots by copying into that tensor. The
state pools are allocated once, here; intermediates (the kernel's `out` among them) are plain
allocations, which under capture come from the graph's private pool at the same addresses on
every replay.

Replay decode (path="replay", or "replay-fast" for selective_state_replay's exact=False): the
SSM step of each layer is selective_state_replay with one token a request (T = 1): the pool
holds checkpoints, a ring of R = window + 1 rows a slot and layer the inputs of the tokens since
(x_cache [S, H, R, P], B_cache [S, G, R, N], dt_cache [S, H, R] float32), the state is written
once a window (when num_cached + 2 > R), and after the step's last layer one replay_advance
(every token accepted) keeps the cursors ring_start / num_cached [S], shared by the layers. From
zero state nothing is cached (prefill by decode steps starts there too).

Rows marked with NULL_SLOT (slot 0, vLLM's convention) are padding: the SSM state of slot 0 is
never read or written, and the conv state of slot 0 is scratch that padded rows write.
"""

from __future__ import annotations

import copy
import inspect
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ssmdecode.config import LaunchConfig
from ssmdecode.ops.selective_state_update import (
    replay_advance,
    replay_flush,
    selective_state_replay,
    selective_state_update,
    slot_order,
)
from ssmdecode.ops.selective_state_update.checks import DEFAULT_PHILOX_ROUNDS
from ssmdecode.shapes import ModelPreset, Shape, per_rank

__all__ = [
    "DECODE_PATHS",
    "NULL_SLOT",
    "Mamba2DecodeStack",
    "Mamba2Dims",
    "Mamba2LM",
    "conv_state_update",
    "gated_rms_norm",
    "greedy_generate",
    "lm_weights",
    "rms_norm",
]

NULL_SLOT = 0
"""The state slot of padded rows; real rows use slots 1..S-1."""

DECODE_PATHS = ("table", "replay", "replay-fast")
"""How a decode step keeps the SSM state: selective_state_update (the single-token table path)
or selective_state_replay (exact, or its fast route), see the module docstring."""
REPLAY_WINDOW = 16  # vLLM's ReplaySSM buffer length


def fast_replay_available() -> bool:
    """Whether this tree's selective_state_replay has the fast route (exact=False)."""
    return "exact" in inspect.signature(selective_state_replay).parameters


@dataclass(frozen=True)
class Mamba2Dims:
    """One rank's sizes of a Mamba2 layer: the kernel's shape, the model width, the conv width."""

    shape: Shape
    d_model: int
    d_conv: int = 4
    eps: float = 1e-5

    @classmethod
    def from_preset(cls, preset: ModelPreset, tp: int = 1) -> Mamba2Dims:
        """The per-rank sizes of a model preset under tensor parallelism tp."""
        return cls(shape=per_rank(preset, tp), d_model=preset.d_model)

    @property
    def d_inner(self) -> int:
        """E = H * P, the channels of x, z and y."""
        return self.shape.nheads * self.shape.headdim

    @property
    def conv_dim(self) -> int:
        """X = E + 2 * G * N, the channels of xBC that go through the conv."""
        return self.d_inner + 2 * self.shape.ngroups * self.shape.dstate

    @property
    def in_proj_dim(self) -> int:
        """Outputs of the in-projection: z (E), xBC (X), dt (H)."""
        return self.d_inner + self.conv_dim + self.shape.nheads

    @property
    def norm_group(self) -> int:
        """Channels per group of the gated RMSNorm: E / G (Mamba2's group_size)."""
        return self.d_inner // self.shape.ngroups


def _wide(t: torch.Tensor) -> torch.Tensor:
    """t in float32, or in float64 if it is (the float64 reference model runs these helpers)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim, in float32 (float64 for float64 x), rounded to x's dtype
    before the weight."""
    xf = _wide(x)
    xf = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def gated_rms_norm(
    y: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, group: int, eps: float
) -> torch.Tensor:
    """Mamba2's gated norm, gate before norm: RMSNorm(y * silu(z)) over groups of `group`
    channels. y, z [B, E]; weight [E]; returns [B, E] in y's dtype (computed in float32, or
    float64 for float64 tensors)."""
    rows = y.shape[0]
    g = (_wide(y) * F.silu(_wide(z))).view(rows, -1, group)
    g = g * torch.rsqrt(g.square().mean(-1, keepdim=True) + eps)
    return weight * g.view(rows, -1).to(y.dtype)


def conv_state_update(
    conv_state: torch.Tensor, xbc: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, slots: torch.Tensor
) -> torch.Tensor:
    """One step of the depthwise causal conv, then SiLU; updates conv_state in place.

    conv_state [S, X, W] holds each slot's last W inputs, oldest first; xbc [B, X] is the new
    input of each row; weight [X, W]; bias [X]; slots int64 [B]. Returns [B, X] in xbc's dtype
    (computed in float32, or float64 for float64 tensors).
    """
    window = torch.cat([conv_state.index_select(0, slots)[..., 1:], xbc.unsqueeze(-1)], dim=-1)
    conv_state.index_copy_(0, slots, window)
    return F.silu((_wide(window) * _wide(weight)).sum(-1) + _wide(bias)).to(xbc.dtype)


@dataclass
class _LayerWeights:
    """One layer's parameters (shapes as in the module docstring)."""

    norm: torch.Tensor  # [d]
    in_proj: torch.Tensor  # [E + X + H, d]
    conv_weight: torch.Tensor  # [X, W]
    conv_bias: torch.Tensor  # [X]
    A: torch.Tensor  # [H] float32, negative
    D: torch.Tensor  # [H] float32
    dt_bias: torch.Tensor  # [H] float32
    gate_norm: torch.Tensor  # [E]
    out_proj: torch.Tensor  # [d, E]


def _random_layer(dims: Mamba2Dims, gen: torch.Generator, device: torch.device) -> _LayerWeights:
    """Random weights at Mamba2's initial scales: activations stay O(1) through the layers."""
    s, dtype = dims.shape, dims.shape.dtype
    H, E, X, W, d = s.nheads, dims.d_inner, dims.conv_dim, dims.d_conv, dims.d_model

    def normal(*size: int, std: float) -> torch.Tensor:
        return (torch.randn(*size, generator=gen, device=device) * std).to(dtype)

    def uniform(*size: int, low: float, high: float) -> torch.Tensor:
        return torch.rand(*size, generator=gen, device=device) * (high - low) + low

    # Mamba2: A in -[1, 16]; dt in [1e-3, 1e-1] log-uniform with dt_bias its inverse softplus.
    dt = torch.exp(uniform(H, low=math.log(1e-3), high=math.log(1e-1)))
    conv_bound = 1 / math.sqrt(W)
    return _LayerWeights(
        norm=torch.ones(d, dtype=dtype, device=device),
        in_proj=normal(dims.in_proj_dim, d, std=1 / math.sqrt(d)),
        conv_weight=uniform(X, W, low=-conv_bound, high=conv_bound).to(dtype),
        conv_bias=uniform(X, low=-conv_bound, high=conv_bound).to(dtype),
        A=-uniform(H, low=1.0, high=16.0),
        D=torch.ones(H, device=device),
        dt_bias=dt + torch.log(-torch.expm1(-dt)),
        gate_norm=torch.ones(E, dtype=dtype, device=device),
        out_proj=normal(d, E, std=1 / math.sqrt(E)),
    )


class Mamba2DecodeStack:
    """`n_layers` Mamba2 layers (pre-norm, mixer, residual) with random weights and their state
    pools: per layer, ssm_state [slots, H, P, N] in the shape's state dtype and conv_state
    [slots, X, W] in its input dtype, both zero at the start. path: "table" (selective_state_
    update), "replay" or "replay-fast" (selective_state_replay, T = 1, rings of window + 1 rows
    and the cursors; see the module docstring). A step's `config` is the single-token kernel's;
    replay looks its own table up.
    """

    def __init__(
        self,
        dims: Mamba2Dims,
        n_layers: int,
        slots: int,
        device: torch.device | str,
        seed: int = 0,
        path: str = "table",
        window: int = REPLAY_WINDOW,
    ) -> None:
        if n_layers < 1 or slots < 2:
            raise ValueError(f"need n_layers >= 1 and slots >= 2, got {n_layers} and {slots}")
        if path not in DECODE_PATHS:
            raise ValueError(f"path must be one of {DECODE_PATHS}, got {path!r}")
        if path == "replay-fast" and not fast_replay_available():
            raise ValueError("path 'replay-fast': this tree's selective_state_replay has no exact=False")
        if path != "table" and window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.dims = dims
        self.path = path
        self.device = torch.device(device)
        gen = torch.Generator(device=self.device).manual_seed(seed)
        self.layers = [_random_layer(dims, gen, self.device) for _ in range(n_layers)]
        self.ring = window + 1
        self._allocate(slots, dims.shape.state_dtype)

    def _allocate(self, slots: int, state_dtype: torch.dtype) -> None:
        """Zero pools of `slots` slots (the SSM state in state_dtype) and, replaying, zero rings
        of self.ring rows and cursors."""
        s, n_layers, device = self.dims.shape, len(self.layers), self.device
        self.ssm_state = [
            torch.zeros(slots, s.nheads, s.headdim, s.dstate, dtype=state_dtype, device=device)
            for _ in range(n_layers)
        ]
        self.conv_state = [
            torch.zeros(slots, self.dims.conv_dim, self.dims.d_conv, dtype=s.dtype, device=device)
            for _ in range(n_layers)
        ]
        self.rings: list[dict[str, torch.Tensor]] = []
        if self.path != "table":
            H, P, N, G, R = s.nheads, s.headdim, s.dstate, s.ngroups, self.ring
            self.rings = [
                {
                    "x_cache": torch.zeros(slots, H, R, P, dtype=s.dtype, device=device),
                    "B_cache": torch.zeros(slots, G, R, N, dtype=s.dtype, device=device),
                    "dt_cache": torch.zeros(slots, H, R, dtype=torch.float32, device=device),
                }
                for _ in range(n_layers)
            ]
        self.ring_start = torch.zeros(slots, dtype=torch.int32, device=device)
        self.num_cached = torch.zeros(slots, dtype=torch.int32, device=device)
        self._accepted: dict[int, torch.Tensor] = {}  # every token accepted, by batch size

    def with_pools(self, slots: int, state_dtype: torch.dtype, path: str) -> Mamba2DecodeStack:
        """A copy sharing this stack's weights, with its own zero pools of `slots` slots (the
        SSM state in state_dtype), decoding by `path` (and, replaying, its own rings and
        cursors of this stack's window)."""
        if path not in DECODE_PATHS:
            raise ValueError(f"path must be one of {DECODE_PATHS}, got {path!r}")
        other = copy.copy(self)
        other.path = path
        other._allocate(slots, state_dtype)
        return other

    def state_of(self, i: int, slots: torch.Tensor) -> torch.Tensor:
        """Layer i's SSM state of `slots` (int64 [B]) as a decode would continue from it
        [B, H, P, N]: the pool's rows, and replaying, each checkpoint with its ring's cached
        tokens replayed (replay_flush on copies of the pool and the ring: nothing of the
        stack's is written)."""
        if self.path == "table":
            return self.ssm_state[i].index_select(0, slots)
        s = self.dims.shape
        state = self.ssm_state[i].clone()
        ring = {k: v.clone() for k, v in self.rings[i].items()}
        A = self.layers[i].A[:, None, None].expand(s.nheads, s.headdim, s.dstate)
        replay_flush(state, ring["x_cache"], ring["B_cache"], ring["dt_cache"], self.ring_start,
                     self.num_cached, A, slots, NULL_SLOT)  # fmt: skip
        return state.index_select(0, slots)

    @property
    def slots(self) -> int:
        """S, the slots of each pool, NULL_SLOT included."""
        return self.ssm_state[0].shape[0]

    def reset_state(self) -> None:
        """Zero every slot of every layer's pools (and, replaying, the rings and cursors)."""
        rings = [t for ring in self.rings for t in ring.values()]
        for t in (*self.ssm_state, *self.conv_state, *rings, self.ring_start, self.num_cached):
            t.zero_()

    def layer_step(
        self,
        i: int,
        hidden: torch.Tensor,
        slots: torch.Tensor,
        config: LaunchConfig | None = None,
        pdl: bool = False,
        order: torch.Tensor | None = None,
        rand_seed: torch.Tensor | None = None,
        philox_rounds: int = DEFAULT_PHILOX_ROUNDS,
    ) -> torch.Tensor:
        """Layer i on hidden [B, d] for rows in slots (int64 [B]); returns the new hidden.
        `order`: the SSU's batch_order; `rand_seed` (int64, one element): its seed of the
        stochastic rounding of a 16-bit state (None: round to nearest), with philox_rounds."""
        w, dims, s = self.layers[i], self.dims, self.dims.shape
        rows, E = hidden.shape[0], dims.d_inner
        H, P, N, G = s.nheads, s.headdim, s.dstate, s.ngroups
        zxbcdt = rms_norm(hidden, w.norm, dims.eps) @ w.in_proj.t()
        z, xbc, dt = zxbcdt.split([E, dims.conv_dim, H], dim=-1)
        xbc = conv_state_update(self.conv_state[i], xbc, w.conv_weight, w.conv_bias, slots)
        y = torch.empty(rows, H, P, dtype=hidden.dtype, device=hidden.device)
        x = xbc[:, :E].view(rows, H, P)
        dt_h = dt.unsqueeze(-1).expand(rows, H, P)
        A = w.A[:, None, None].expand(H, P, N)
        B = xbc[:, E : E + G * N].view(rows, G, N)
        C = xbc[:, E + G * N :].view(rows, G, N)
        if self.path != "table":
            if order is not None:
                raise ValueError("replay decode takes no batch_order (slot_ordered)")
            ring = self.rings[i]
            selective_state_replay(
                self.ssm_state[i],
                ring["x_cache"],
                ring["B_cache"],
                ring["dt_cache"],
                self.ring_start,
                self.num_cached,
                x.unsqueeze(1),
                dt_h.unsqueeze(1),
                A,
                B.unsqueeze(1),
                C.unsqueeze(1),
                D=w.D[:, None].expand(H, P),
                dt_bias=w.dt_bias[:, None].expand(H, P),
                dt_softplus=True,
                state_batch_indices=slots,
                pad_slot_id=NULL_SLOT,
                out=y.unsqueeze(1),
                pdl=pdl,
                rand_seed=rand_seed,
                philox_rounds=philox_rounds,
                **({"exact": False} if self.path == "replay-fast" else {}),
            )
        else:
            selective_state_update(
                self.ssm_state[i],
                x,
                dt_h,
                A,
                B,
                C,
                D=w.D[:, None].expand(H, P),
                dt_bias=w.dt_bias[:, None].expand(H, P),
                dt_softplus=True,
                state_batch_indices=slots,
                pad_slot_id=NULL_SLOT,
                out=y,
                config=config,
                pdl=pdl,  # the kernel before (the conv's) writes x, B, C, never the state or slots
                batch_order=order,
                rand_seed=rand_seed,
                philox_rounds=philox_rounds,
            )
        y = gated_rms_norm(y.view(rows, E), z, w.gate_norm, dims.norm_group, dims.eps)
        return hidden + y @ w.out_proj.t()

    def step(
        self,
        hidden: torch.Tensor,
        slots: torch.Tensor,
        config: LaunchConfig | None = None,
        pdl: bool = False,
        slot_ordered: bool = False,
        rand_seed: torch.Tensor | None = None,
        philox_rounds: int = DEFAULT_PHILOX_ROUNDS,
    ) -> torch.Tensor:
        """All layers on hidden [B, d] for rows in slots (int64 [B], NULL_SLOT for padding);
        returns the new hidden [B, d]. `config` and `pdl` go to every selective_state_update;
        slot_ordered: the step computes slot_order(slots) once and passes it to every layer's
        (as an engine would; its cost is part of the step). rand_seed: int64 [n_layers] on the
        device, layer i's stochastic-rounding seed rand_seed[i:i+1] (None: round to nearest);
        the caller refreshes it every step, or every step rounds an element with the same bits;
        philox_rounds: the rounding's Philox rounds."""
        order = slot_order(slots) if slot_ordered else None
        for i in range(len(self.layers)):
            seed = None if rand_seed is None else rand_seed[i : i + 1]
            hidden = self.layer_step(i, hidden, slots, config, pdl, order, seed, philox_rounds)
        if self.path != "table":  # the step's bookkeeping, once for every layer: each token kept
            rows = slots.shape[0]
            if rows not in self._accepted:
                self._accepted[rows] = torch.ones(rows, dtype=torch.int32, device=slots.device)
            replay_advance(
                self.ring_start, self.num_cached, self._accepted[rows], 1, self.ring, slots, NULL_SLOT
            )
        return hidden


def lm_weights(
    dims: Mamba2Dims, vocab_size: int, device: torch.device, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The random embedding [V, d], final RMSNorm weight [d] and LM head [V, d] of a small LM
    around a layer stack of the same seed (Mamba2LM's, and the verify-step LM's)."""
    dtype, d = dims.shape.dtype, dims.d_model
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    embedding = torch.randn(vocab_size, d, generator=gen, device=device).to(dtype)
    final_norm = torch.ones(d, dtype=dtype, device=device)
    lm_head = (torch.randn(vocab_size, d, generator=gen, device=device) / math.sqrt(d)).to(dtype)
    return embedding, final_norm, lm_head


class Mamba2LM:
    """A small language model around a Mamba2DecodeStack: embedding [V, d], the layers, a final
    RMSNorm and an LM head [V, d], all random. Real rows use slots 1..slots-1. path, window:
    the stack's (the same weights whatever the path)."""

    def __init__(
        self,
        dims: Mamba2Dims,
        n_layers: int,
        vocab_size: int,
        slots: int,
        device: torch.device | str,
        seed: int = 0,
        path: str = "table",
        window: int = REPLAY_WINDOW,
    ) -> None:
        self.stack = Mamba2DecodeStack(dims, n_layers, slots, device, seed, path, window)
        self.embedding, self.final_norm, self.lm_head = lm_weights(dims, vocab_size, self.stack.device, seed)

    def step(
        self,
        tokens: torch.Tensor,
        slots: torch.Tensor,
        config: LaunchConfig | None = None,
        rand_seed: torch.Tensor | None = None,
        philox_rounds: int = DEFAULT_PHILOX_ROUNDS,
    ) -> torch.Tensor:
        """Next-token logits [B, V] in float32 for tokens and slots (int64 [B]); rand_seed and
        philox_rounds as in Mamba2DecodeStack.step."""
        hidden = self.stack.step(
            self.embedding[tokens], slots, config, rand_seed=rand_seed, philox_rounds=philox_rounds
        )
        h = rms_norm(hidden, self.final_norm, self.stack.dims.eps)
        return (h @ self.lm_head.t()).float()


def greedy_generate(
    lm: Mamba2LM, prompts: list[list[int]], n_new: int, config: LaunchConfig | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding of n_new tokens for each prompt, from zero state, one token per step.

    Prompts of different lengths are right-aligned: row r (slot r + 1) joins at step
    max_len - len(r) and is a padded row (NULL_SLOT) before that, so all rows end their prompt
    on the same step and then generate together. Returns token ids (int64) and their log-probs
    (float32), both [R, n_new], on the model's device; no host synchronization until read.
    """
    if not prompts or min(map(len, prompts)) < 1 or n_new < 1:
        raise ValueError("need at least one prompt, every prompt non-empty, and n_new >= 1")
    if len(prompts) >= lm.stack.slots:
        raise ValueError(
            f"{len(prompts)} prompts need {len(prompts) + 1} slots; the model has {lm.stack.slots}"
        )
    device = lm.stack.device
    steps = max(map(len, prompts))
    tokens = torch.zeros(steps, len(prompts), dtype=torch.int64)
    slots = torch.full((steps, len(prompts)), NULL_SLOT, dtype=torch.int64)
    for r, prompt in enumerate(prompts):
        start = steps - len(prompt)
        tokens[start:, r] = torch.tensor(prompt, dtype=torch.int64)
        slots[start:, r] = r + 1
    tokens, slots = tokens.to(device), slots.to(device)

    lm.stack.reset_state()
    for t in range(steps):
        logits = lm.step(tokens[t], slots[t], config)
    out_ids, out_logprobs = [], []
    for t in range(n_new):
        next_ids = logits.argmax(-1)
        out_ids.append(next_ids)
        out_logprobs.append(torch.log_softmax(logits, -1).gather(1, next_ids[:, None]).squeeze(1))
        if t + 1 < n_new:
            logits = lm.step(next_ids, slots[-1], config)
    return torch.stack(out_ids, 1), torch.stack(out_logprobs, 1)
