"""Speculative decoding's verify step through a stack of Mamba2 layers: T draft tokens a request
at once, the way engines run it, for `ssmdecode e2e --spec`.

Two ways to keep the SSM state across verify steps, the same model and bits (and a third, the
same model to float32's accuracy):

    buffer  the intermediate-state path (sglang's, and vLLM's with per-token slots): each layer's
            selective_state_update writes every draft token's state to an intermediate buffer
            [S, T, H, P, N] (disable_state_update), and once the engine knows how many drafts
            were accepted it copies each request's accepted state back into the pool: per layer
            1 state read + T written by the kernel, then 1 read + 1 written by the copy
    replay  selective_state_replay: the pool holds checkpoints, a ring beside it the inputs of
            the tokens since; the state is written only when a ring would overflow, and the
            bookkeeping (replay_advance) runs once a step for every layer
    replay-fast  replay by its fast route (selective_state_replay(..., exact=False)): the same
            rings and bookkeeping, out and the checkpoints to float32's accuracy, not the bits

The conv state is handled as engines handle it for multi-token verify: each slot keeps the
W - 1 inputs before the step and the step's T inputs ([S, X, W - 1 + T]); token t's window is
inputs t .. t + W - 1 of that row, and after the step the last W - 1 inputs of the accepted
tokens are where the next step starts (an offset a slot, the count accepted).

A layer (B requests, T tokens, d model width, E = H * P, X = E + 2 * G * N):

    h            = RMSNorm(hidden)                                  [B, T, d]
    z, xBC, dt   = split(h @ W_in^T)                                [B, T, E], [B, T, X], [B, T, H]
    xBC          = silu(causal conv over the slot's inputs and xBC) [B, T, X]
    y            = the SSM over the T tokens (buffer or replay)    [B, T, H, P]
    hidden      += RMSNorm_groups(y * silu(z)) @ W_out^T            [B, T, d]

Weights are models.mamba2's (the same seed gives the same weights as Mamba2DecodeStack and
Mamba2LM). Slot 0 is the null slot (padding), as there.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ssmdecode.config import LaunchConfig
from ssmdecode.models.mamba2 import NULL_SLOT, Mamba2Dims, _random_layer, gated_rms_norm, lm_weights, rms_norm
from ssmdecode.ops.selective_state_update import (
    replay_advance,
    selective_state_replay,
    selective_state_update,
)

__all__ = ["SPEC_PATHS", "Mamba2VerifyLM", "Mamba2VerifyStack", "conv_verify"]

SPEC_PATHS = ("buffer", "replay", "replay-fast")


def conv_verify(
    conv_state: torch.Tensor,
    offset: torch.Tensor,
    xbc: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    slots: torch.Tensor,
) -> torch.Tensor:
    """The causal conv of T tokens a request, then SiLU; updates conv_state in place.

    conv_state [S, X, W - 1 + T]: each slot's inputs of its last step, after the W - 1 before
    it; offset [S]: where in that row the inputs before this step start (the accepted count of
    the last step); xbc [B, T, X]; weight [X, W]; bias [X]; slots int64 [B]. Returns [B, T, X].
    """
    rows, _, channels = xbc.shape
    width = weight.shape[1]
    state = conv_state.index_select(0, slots)  # [B, X, W - 1 + T]
    cols = offset.index_select(0, slots)[:, None] + torch.arange(width - 1, device=xbc.device)
    before = state.gather(2, cols[:, None, :].expand(rows, channels, width - 1))
    seq = torch.cat([before, xbc.transpose(1, 2)], dim=2)  # [B, X, W - 1 + T]
    conv_state.index_copy_(0, slots, seq)
    windows = seq.unfold(2, width, 1)  # [B, X, T, W]
    out = (windows.float() * weight.float()[:, None, :]).sum(-1) + bias.float()[:, None]
    # Token-major, as engines' conv kernels write it ([B, T, X] rows of one token each, so that
    # x, B and C are views of one row a token): the transposed view itself (stride 1 over T, T
    # over X) compiled the verify kernel into 68 registers instead of 58, and ran it 24% slower
    # at bs 512 (docs/performance.md, "The verify step in the model").
    return F.silu(out).to(xbc.dtype).transpose(1, 2).contiguous()


class Mamba2VerifyStack:
    """`n_layers` Mamba2 layers for verify steps of T tokens a request, keeping the SSM state by
    `path` (buffer, replay or replay-fast; see the module docstring). Per layer: ssm_state [S, H, P, N],
    conv_state [S, X, W - 1 + T]; buffer path: intermediate [S, T, H, P, N]; replay path: rings
    x_cache [S, H, R, P], B_cache [S, G, R, N], dt_cache [S, H, R] (R = window + T) and the
    bookkeeping ring_start, num_cached [S] shared by the layers."""

    def __init__(
        self,
        dims: Mamba2Dims,
        n_layers: int,
        slots: int,
        tokens: int,
        path: str,
        device: torch.device | str,
        seed: int = 0,
        window: int = 8,
    ) -> None:
        if path not in SPEC_PATHS:
            raise ValueError(f"path must be one of {SPEC_PATHS}, got {path!r}")
        if n_layers < 1 or slots < 2 or tokens < 1 or window < tokens:
            raise ValueError(
                f"need n_layers >= 1, slots >= 2, tokens >= 1, window >= tokens; got "
                f"{n_layers}, {slots}, {tokens}, {window}"
            )
        self.dims, self.tokens, self.path, self.window = dims, tokens, path, window
        self.device = torch.device(device)
        gen = torch.Generator(device=self.device).manual_seed(seed)
        self.layers = [_random_layer(dims, gen, self.device) for _ in range(n_layers)]
        s, dev = dims.shape, self.device
        H, P, N, G = s.nheads, s.headdim, s.dstate, s.ngroups
        self.ssm_state = [
            torch.zeros(slots, H, P, N, dtype=s.state_dtype, device=dev) for _ in range(n_layers)
        ]
        self.conv_state = [
            torch.zeros(slots, dims.conv_dim, dims.d_conv - 1 + tokens, dtype=s.dtype, device=dev)
            for _ in range(n_layers)
        ]
        self.conv_offset = torch.full((slots,), tokens, dtype=torch.int64, device=dev)
        if path == "buffer":
            self.intermediate = [
                torch.zeros(slots, tokens, H, P, N, dtype=s.state_dtype, device=dev) for _ in range(n_layers)
            ]
        else:
            ring = window + tokens
            self.rings = [
                dict(
                    x_cache=torch.zeros(slots, H, ring, P, dtype=s.dtype, device=dev),
                    B_cache=torch.zeros(slots, G, ring, N, dtype=s.dtype, device=dev),
                    dt_cache=torch.zeros(slots, H, ring, dtype=torch.float32, device=dev),
                )
                for _ in range(n_layers)
            ]
            self.ring_start = torch.zeros(slots, dtype=torch.int32, device=dev)
            self.num_cached = torch.zeros(slots, dtype=torch.int32, device=dev)

    @property
    def slots(self) -> int:
        return self.ssm_state[0].shape[0]

    def reset_state(self) -> None:
        """Every slot empty: zero states, empty rings, conv rows of zeros."""
        for t in (*self.ssm_state, *self.conv_state):
            t.zero_()
        self.conv_offset.fill_(self.tokens)
        if self.path != "buffer":
            self.ring_start.zero_()
            self.num_cached.zero_()

    def layer_verify(
        self, i: int, hidden: torch.Tensor, slots: torch.Tensor, config: LaunchConfig | None = None
    ) -> torch.Tensor:
        """Layer i on hidden [B, T, d] for requests in slots (int64 [B]); the new hidden."""
        w, dims, s = self.layers[i], self.dims, self.dims.shape
        rows, tokens, E = hidden.shape[0], hidden.shape[1], dims.d_inner
        H, P, N, G = s.nheads, s.headdim, s.dstate, s.ngroups
        zxbcdt = rms_norm(hidden, w.norm, dims.eps) @ w.in_proj.t()
        z, xbc, dt = zxbcdt.split([E, dims.conv_dim, H], dim=-1)
        xbc = conv_verify(self.conv_state[i], self.conv_offset, xbc, w.conv_weight, w.conv_bias, slots)
        y = torch.empty(rows, tokens, H, P, dtype=hidden.dtype, device=hidden.device)
        ssm = dict(
            x=xbc[..., :E].unflatten(-1, (H, P)),
            dt=dt.unsqueeze(-1).expand(rows, tokens, H, P),
            A=w.A[:, None, None].expand(H, P, N),
            B=xbc[..., E : E + G * N].unflatten(-1, (G, N)),
            C=xbc[..., E + G * N :].unflatten(-1, (G, N)),
            D=w.D[:, None].expand(H, P),
            dt_bias=w.dt_bias[:, None].expand(H, P),
            dt_softplus=True,
            state_batch_indices=slots,
            pad_slot_id=NULL_SLOT,
            out=y,
            config=config,
        )
        if self.path == "buffer":
            selective_state_update(
                self.ssm_state[i], **ssm, disable_state_update=True, intermediate_states=self.intermediate[i]
            )
        else:
            selective_state_replay(
                self.ssm_state[i],
                **self.rings[i],
                ring_start=self.ring_start,
                num_cached=self.num_cached,
                **ssm,
                **({"exact": False} if self.path == "replay-fast" else {}),
            )
        y = gated_rms_norm(
            y.view(rows * tokens, E), z.reshape(rows * tokens, E), w.gate_norm, dims.norm_group, dims.eps
        ).view(rows, tokens, E)
        return hidden + y @ w.out_proj.t()

    def verify(
        self, hidden: torch.Tensor, slots: torch.Tensor, config: LaunchConfig | None = None
    ) -> torch.Tensor:
        """Every layer on the T tokens of each request: hidden [B, T, d] -> [B, T, d]."""
        for i in range(len(self.layers)):
            hidden = self.layer_verify(i, hidden, slots, config)
        return hidden

    def accept(self, slots: torch.Tensor, accepted: torch.Tensor) -> None:
        """After the verify step: request b accepted accepted[b] (1 .. T) of its tokens. The
        buffer path copies each layer's accepted state into the pool (what engines do after
        verification); replay only advances its bookkeeping. Either way the conv rows start at
        the accepted tokens next step. Device ops, no synchronization."""
        accepted = accepted.to(torch.int64)
        live = slots != NULL_SLOT
        if self.path == "buffer":
            # One gather and one scatter a layer, as an engine's copy: a padded row's slot is
            # the null slot, whose state no kernel reads, so it may take any value.
            step = (accepted - 1).clamp(0, self.tokens - 1)
            for state, buffer in zip(self.ssm_state, self.intermediate, strict=True):
                state.index_copy_(0, slots, buffer[slots, step])
        else:
            replay_advance(
                self.ring_start,
                self.num_cached,
                accepted,
                self.tokens,
                self.window + self.tokens,
                slots,
                NULL_SLOT,
            )
        self.conv_offset.index_copy_(
            0, slots, torch.where(live, accepted, self.conv_offset.index_select(0, slots))
        )


class Mamba2VerifyLM:
    """A small language model around a Mamba2VerifyStack, with models.mamba2.Mamba2LM's
    weights for the same seed: embedding [V, d], the layers, a final RMSNorm, an LM head."""

    def __init__(
        self,
        dims: Mamba2Dims,
        n_layers: int,
        vocab_size: int,
        slots: int,
        tokens: int,
        path: str,
        device: torch.device | str,
        seed: int = 0,
        window: int = 8,
    ) -> None:
        self.stack = Mamba2VerifyStack(dims, n_layers, slots, tokens, path, device, seed, window)
        self.embedding, self.final_norm, self.lm_head = lm_weights(dims, vocab_size, self.stack.device, seed)

    def logits(
        self, tokens: torch.Tensor, slots: torch.Tensor, config: LaunchConfig | None = None
    ) -> torch.Tensor:
        """Next-token logits [B, T, V] in float32 for tokens [B, T] in slots [B]."""
        hidden = self.stack.verify(self.embedding[tokens], slots, config)
        return (rms_norm(hidden, self.final_norm, self.stack.dims.eps) @ self.lm_head.t()).float()


def speculative_greedy(
    lm: Mamba2VerifyLM,
    prompts: torch.Tensor,
    drafts: torch.Tensor,
    n_new: int,
    config: LaunchConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Greedy speculative decoding against fixed drafts: prompts [R, L] (L a multiple of T,
    run as verify steps whose tokens are all accepted), then steps of T tokens a request, the
    last generated token and drafts[r, n .. n + T - 2] (n the tokens generated so far: draft
    k guesses generated token n + k - 1),
    each draft accepted while it equals the model's greedy token. Returns the first n_new
    generated ids [R, n_new] (int64), their log-probs [R, n_new] (float32) and the accepted
    count of every step [steps, R]. Requests in slots 1 .. R."""
    stack = lm.stack
    T = stack.tokens
    rows, length = prompts.shape
    if length % T or length < T:
        raise ValueError(f"the prompts' length {length} must be a positive multiple of T = {T}")
    device = stack.device
    slots = torch.arange(1, rows + 1, device=device)
    stack.reset_state()
    everyone = torch.full((rows,), T, device=device)
    for start in range(0, length, T):
        logits = lm.logits(prompts[:, start : start + T], slots, config)
        stack.accept(slots, everyone)
    last = logits[:, -1]
    ids = torch.zeros(rows, n_new + T, dtype=torch.int64, device=device)
    logprobs = torch.zeros(rows, n_new + T, dtype=torch.float32, device=device)
    made = torch.zeros(rows, dtype=torch.int64, device=device)  # tokens generated a request
    first = last.argmax(-1)
    ids[:, 0], logprobs[:, 0] = first, torch.log_softmax(last, -1).gather(1, first[:, None])[:, 0]
    made += 1
    counts = []
    positions = torch.arange(T, device=device)
    while int(made.min()) < n_new:  # a host read a step: a test harness, not a timed loop
        # the last generated token (a request ahead of the others keeps stepping until the last
        # has n_new; past the buffer its tokens land in the last column, never returned)
        cur = ids.gather(1, (made - 1).clamp(max=ids.shape[1] - 1)[:, None])
        # draft k (1 .. T - 1) guesses generated token made + k - 1, the model's greedy[k - 1]
        draft = drafts.gather(1, (made[:, None] + positions[None, :-1]).clamp(max=drafts.shape[1] - 1))
        tokens = torch.cat([cur, draft], dim=1)  # [R, T]
        logits = lm.logits(tokens, slots, config)
        greedy = logits.argmax(-1)  # [R, T]: the model's next token after each input token
        match = (draft == greedy[:, :-1]).long().cumprod(1).sum(1)  # drafts accepted in a row
        accepted = match + 1  # tokens of this step consumed: the current one and the drafts
        counts.append(accepted)
        lp = torch.log_softmax(logits, -1).gather(2, greedy[..., None])[..., 0]
        take = positions[None, :] < accepted[:, None]  # new tokens: greedy[0 .. match]
        where = (made[:, None] + positions[None, :]).clamp(max=ids.shape[1] - 1)
        ids.scatter_(1, where, torch.where(take, greedy, ids.gather(1, where)))
        logprobs.scatter_(1, where, torch.where(take, lp, logprobs.gather(1, where)))
        made += accepted
        stack.accept(slots, accepted)
    return ids[:, :n_new], logprobs[:, :n_new], torch.stack(counts)
