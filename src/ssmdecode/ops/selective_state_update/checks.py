"""Every argument check of the family in one place: `check_call` turns the public function's
arguments into a `Call` (the tensors in the kernels' Mamba2 layout, with a token dim for
multi-token calls, and the sizes), or raises TypeError / ValueError naming the argument, what
it got and what was expected, before anything is written.

The cheap path: a valid call costs one compound comparison per tensor (`expect`); the messages
are built only for an argument that fails. Checks of index *values* (slots inside the pool,
cu_seqlens monotonic, EAGLE parents not after their token) read the tensors on the host, which
synchronizes with the GPU: they run only with validate_indices=True (or the environment
variable SSMDECODE_VALIDATE_INDICES=1; `validation_on`), never on the hot path. Each value check
is a small function of its own (validate_slots, validate_cu_seqlens, validate_parents, ...),
shared by every door that takes the argument (replay.py's too). Unchecked values cannot make
the kernels read or write outside x, out or the index tensors (the kernels clamp the token
ranges of cu_seqlens and the accepted-token column), but slots outside the pool are used as
given, as every engine's kernel uses them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton

from ssmdecode.config import LaunchConfig

__all__ = [
    "DEFAULT_PHILOX_ROUNDS",
    "FLOAT_DTYPES",
    "INDEX_DTYPES",
    "MAX_BATCH",
    "PHILOX_ROUNDS_RANGE",
    "QUANTIZED_DTYPES",
    "VALIDATE_INDICES_ENV",
    "Call",
    "check_call",
    "check_rounding",
    "check_state_dtype",
    "expect",
    "expect_type",
    "interpreted",
    "ties_head_dim",
    "validate_cu_seqlens",
    "validate_parents",
    "validate_permutation",
    "validate_slots",
    "validation_on",
]

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
INDEX_DTYPES = (torch.int32, torch.int64)
# Quantized states (int8 or fp8 with a block scale, flashinfer's state_scale) are a feature
# ssmdecode may take later: NotImplementedError, where any other dtype is a TypeError.
QUANTIZED_DTYPES = tuple(
    getattr(torch, name) for name in ("int8", "uint8", "float8_e4m3fn", "float8_e5m2") if hasattr(torch, name)
)
VALIDATE_INDICES_ENV = "SSMDECODE_VALIDATE_INDICES"

# The batch is a grid dimension (y or z), which CUDA caps at 65535.
MAX_BATCH = 65535


@triton.jit
def _probe():
    pass


def interpreted() -> bool:
    """Whether this family's kernels run under Triton's interpreter (TRITON_INTERPRET=1 when
    they were defined, at import): only then can they take CPU tensors."""
    return not isinstance(_probe, triton.runtime.jit.JITFunction)


def expect(
    name: str,
    t: object,
    shape: tuple[int, ...],
    dtypes: tuple[torch.dtype, ...],
    device: torch.device,
    what: str,
) -> None:
    """t must be a tensor of this shape, one of these dtypes, on this device."""
    if isinstance(t, torch.Tensor) and t.shape == shape and t.dtype in dtypes and t.device == device:
        return
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise TypeError(f"{name} has dtype {t.dtype}; expected one of {names}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected {shape} {what}")
    raise ValueError(f"{name} is on {t.device}; expected {device}, the device of state")


def expect_type(name: str, value: object, kind: type, what: str) -> None:
    """A plain int or bool argument (a bool is not an int here, nor a tensor a number)."""
    if type(value) is not kind:
        raise TypeError(f"{name} must be {what}, got {type(value).__name__} {value!r}")


def check_state_dtype(name: str, t: torch.Tensor) -> None:
    """A state (or the rings' state) dtype the kernels store: float32, bfloat16 or float16. A
    quantized one raises NotImplementedError (not supported yet), anything else TypeError."""
    if t.dtype in FLOAT_DTYPES:
        return
    if t.dtype in QUANTIZED_DTYPES:
        raise NotImplementedError(
            f"{name} has dtype {t.dtype}: quantized states (int8 / fp8 with a scale) are not "
            "supported by ssmdecode yet; expected float32, bfloat16 or float16"
        )
    raise TypeError(f"{name} has dtype {t.dtype}; expected float32, bfloat16 or float16")


def validation_on(validate_indices: object) -> bool:
    """Whether a call checks index values (validate_indices; None: the environment variable
    SSMDECODE_VALIDATE_INDICES, on unless unset, empty or 0)."""
    if validate_indices is None:
        return os.environ.get(VALIDATE_INDICES_ENV, "0") not in ("", "0")
    expect_type("validate_indices", validate_indices, bool, "a bool or None")
    return validate_indices


def _expect_rank(name: str, t: object, ranks: tuple[int, ...], expected: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() not in ranks:
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected {expected}")


def ties_head_dim(dt: torch.Tensor, A: torch.Tensor, dt_bias: torch.Tensor | None) -> bool:
    """Whether dt, A (and dt_bias) are stride-0 broadcasts over the head dim (and A over N), as
    real models pass them: then dt' and dA are one scalar per (request, head), the kernels'
    TIE_HDIM fast path (upstream's too). Tensors in the Mamba2 layout."""
    return (
        dt.stride(-1) == 0
        and A.stride(-1) == 0
        and A.stride(-2) == 0
        and (dt_bias is None or dt_bias.stride(-1) == 0)
    )


# Philox rounds of stochastic rounding's random bits unless a call says otherwise: 4, where the
# accuracy over 4096 decode steps on the H200 is 10 rounds' (docs/numerics.md) and, with the
# store of run 65, the bf16 rounding cost at most 3.8% over round-to-nearest at bs >= 64 (10
# rounds: 13.7%). 10 is Random123's recommendation and what the engines' adapters pass for
# their 0 (compat.ENGINE_PHILOX_ROUNDS).
DEFAULT_PHILOX_ROUNDS = 4


@dataclass(frozen=True)
class Call:
    """A checked call, every tensor in the Mamba2 layout (a Mamba1 call gets H = G = 1).

    Single-token (tokens == 0): x, dt, z, out [B, H, P]; B, C [B, G, N]; indices [B].
    Multi-token: x, dt, z, out [B', T', H, P] and B, C [B', T', G, N], where B' = B, T' = T
    for the dense layout and B' = 1, T' = total tokens with cu_seqlens [B + 1] (the packed
    layout: request b's tokens are cu_seqlens[b] .. cu_seqlens[b + 1] - 1); src_idx [B] or
    [>=B, K]; dst_idx [B] (the final state's slot) or [>=B, >=T] (each token's state's slot);
    buffer [R, T_c, H, P, N] with buffer_idx [B]; parents [B, >=T].
    tokens: T, the most tokens of one request (the dense T, or what the per-token writes
    allow with cu_seqlens); 0 for single-token calls. unrolled: whether the kernel may unroll
    the tokens (it knows their number at compile time) or loops over each request's count.
    """

    state: torch.Tensor
    x: torch.Tensor
    dt: torch.Tensor
    A: torch.Tensor
    B: torch.Tensor
    C: torch.Tensor
    D: torch.Tensor | None
    z: torch.Tensor | None
    dt_bias: torch.Tensor | None
    out: torch.Tensor
    result: torch.Tensor  # what the public function returns: out in the caller's layout
    src_idx: torch.Tensor | None
    dst_idx: torch.Tensor | None
    batch: int
    tokens: int
    cu_seqlens: torch.Tensor | None = None
    num_accepted: torch.Tensor | None = None
    buffer: torch.Tensor | None = None
    buffer_idx: torch.Tensor | None = None
    parents: torch.Tensor | None = None
    unrolled: bool = True
    rand_seed: torch.Tensor | None = None  # stochastic rounding of 16-bit state stores
    philox_rounds: int = DEFAULT_PHILOX_ROUNDS
    round_buffer: bool = True  # the intermediate-state buffer's stores too (else the pool's)

    @property
    def multi_token(self) -> bool:
        return self.tokens > 0

    @property
    def mode(self) -> str:
        """What a multi-token call writes besides out: "buffer" (every token's state into the
        intermediate-state buffer), "dst" (every token's state into its own slot) or "final"
        (the last token's state only); "single" for single-token calls. Table keys carry it."""
        if not self.multi_token:
            return "single"
        if self.buffer is not None:
            return "buffer"
        return "dst" if self.dst_idx is not None and self.dst_idx.dim() == 2 else "final"


# Multi-token calls unroll up to this many tokens a request (each token's loads are then issued
# together); longer requests take a loop over their tokens.
MAX_UNROLLED_TOKENS = 16


@dataclass(frozen=True)
class _Layout:
    """What the state and x say about a call: the pool's dims, whether it is Mamba1's layout
    (no head and group dims), whether x has a token dim, and the request count and the tokens
    x holds (a request's T, or the packed total with cu_seqlens; 1 for single-token x)."""

    slots: int
    nheads: int
    headdim: int
    dstate: int
    mamba1: bool
    token_dim: bool
    varlen: bool
    batch: int
    steps: int

    @property
    def name(self) -> str:
        return "Mamba1" if self.mamba1 else "Mamba2"


def check_call(
    state: object,
    x: object,
    dt: object,
    A: object,
    B: object,
    C: object,
    D: object,
    z: object,
    dt_bias: object,
    dt_softplus: object,
    state_batch_indices: object,
    dst_state_batch_indices: object,
    pad_slot_id: object,
    out: object,
    disable_state_update: object,
    config: object,
    cu_seqlens: object = None,
    num_accepted_tokens: object = None,
    intermediate_states: object = None,
    intermediate_state_indices: object = None,
    parent_token_indices: object = None,
    fast_exp: object = False,
    validate_indices: object = None,
    batch_order: object = None,
    pdl: object = False,
    rand_seed: object = None,
    philox_rounds: object = DEFAULT_PHILOX_ROUNDS,
    round_buffer: bool = True,
) -> Call:
    """The arguments of selective_state_update, checked; see its docstring for their meaning.
    Allocates out when it is None (nothing else is written). One function a concern: the
    flags, the rounding, the layout of the state and x, the tensors' shapes, the slots, and for
    multi-token calls the reads, the writes and the token count; value checks under validation."""
    if not isinstance(state, torch.Tensor):
        raise TypeError(f"state must be a torch.Tensor, got {type(state).__name__}")
    check_state_dtype("state", state)
    check_flags(dt_softplus, disable_state_update, fast_exp, pdl, pad_slot_id, config)
    check_rounding(
        rand_seed, philox_rounds, state.device, (state, intermediate_states) if round_buffer else (state,)
    )
    lay = _check_layout(state, x, cu_seqlens)
    src, dst = state_batch_indices, dst_state_batch_indices
    multi_only = (num_accepted_tokens, intermediate_states, intermediate_state_indices, parent_token_indices)
    multi = _multi_token(lay, src, dst, multi_only)
    xs = _check_tensors(lay, multi, x, dt, A, B, C, D, z, dt_bias, out, state.device)
    _check_slots(lay, multi, src, dst, batch_order, state.device)
    if out is None:
        out = torch.empty(xs, dtype=x.dtype, device=state.device)
    result = out
    if lay.mamba1:  # run as Mamba2 with one head and one group
        state, x, dt, A, B, C, D, z, dt_bias, out = _as_mamba2(lay, state, x, dt, A, B, C, D, z, dt_bias, out)
    if not multi:
        if validation_on(validate_indices):
            _validate_single_token(lay.slots, pad_slot_id, src, dst, batch_order)
        tensors = (state, x, dt, A, B, C, D, z, dt_bias, out, result)
        return Call(*tensors, src, dst, lay.batch, tokens=0, rand_seed=rand_seed, philox_rounds=philox_rounds)

    x, dt, B, C, out, z = _with_token_dim(lay, x, dt, B, C, out, z)
    dense_tokens = None if lay.varlen else lay.steps
    src = _check_reads(lay, src, num_accepted_tokens, state.device)
    buffer, buffer_idx, parents = intermediate_states, intermediate_state_indices, parent_token_indices
    per_token = _check_writes(lay, dense_tokens, dst, buffer, buffer_idx, parents, state.device)
    tokens, unrolled = _token_count(dense_tokens, per_token, lay.steps)
    tensors = (state, x, dt, A, B, C, D, z, dt_bias, out, result)
    call = Call(
        *tensors,
        src,
        dst,
        lay.batch,
        tokens,
        cu_seqlens=cu_seqlens,
        num_accepted=num_accepted_tokens,
        buffer=buffer,
        buffer_idx=buffer_idx,
        parents=parents,
        unrolled=unrolled,
        rand_seed=rand_seed,
        philox_rounds=philox_rounds,
        round_buffer=round_buffer,
    )
    if validation_on(validate_indices):  # of the Call's tensors (building it checks nothing)
        _validate_multi_token(call, lay, pad_slot_id, state_batch_indices, per_token)
    return call


def _multi_token(lay: _Layout, src: object, dst: object, multi_only: tuple[object, ...]) -> bool:
    """Whether a call is multi-token: x has a token dim or packs the tokens (cu_seqlens), an
    argument only multi-token calls take is given (multi_only: num_accepted_tokens and the
    intermediate-state buffer's), or the slots read or written are 2-D ([>=B, K], [>=B, >=T])."""
    return (
        lay.token_dim
        or lay.varlen
        or any(t is not None for t in multi_only)
        or any(isinstance(t, torch.Tensor) and t.dim() == 2 for t in (src, dst))
    )


def _as_mamba2(
    lay: _Layout,
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None,
    z: torch.Tensor | None,
    dt_bias: torch.Tensor | None,
    out: torch.Tensor,
) -> tuple[torch.Tensor | None, ...]:
    """A checked Mamba1 call's tensors as views in the Mamba2 layout, one head and one group:
    state [S, 1, P, N], x, dt, z, out [..., 1, P], A [1, P, N], B, C [..., 1, N], D, dt_bias
    [1, P]; returned in the order taken."""
    head = -2 if lay.token_dim or lay.varlen else 1
    state, x, dt, A = state.unsqueeze(1), x.unsqueeze(head), dt.unsqueeze(head), A.unsqueeze(0)
    B, C, out = B.unsqueeze(head), C.unsqueeze(head), out.unsqueeze(head)
    D, z, dt_bias = _unsq(D, 0), _unsq(z, head), _unsq(dt_bias, 0)
    return state, x, dt, A, B, C, D, z, dt_bias, out


def _with_token_dim(
    lay: _Layout,
    x: torch.Tensor,
    dt: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    out: torch.Tensor,
    z: torch.Tensor | None,
) -> tuple[torch.Tensor | None, ...]:
    """A multi-token call's per-token tensors (Mamba2 layout) in the dense layout [B', T', ...]
    the kernel takes: packed tokens as one row [1, total, ...], single-token arguments (with
    multi-token indices) as T = 1 [B, 1, ...], a token dim as given; in the order taken."""
    if lay.varlen:  # the packed tokens as one row of the dense layout: [1, total, H, P]
        x, dt, B, C, out = (t.unsqueeze(0) for t in (x, dt, B, C, out))
        z = _unsq(z, 0)
    elif not lay.token_dim:  # single-token arguments with multi-token indices: T = 1
        x, dt, B, C, out = (t.unsqueeze(1) for t in (x, dt, B, C, out))
        z = _unsq(z, 1)
    return x, dt, B, C, out, z


def check_flags(
    dt_softplus: object,
    disable_state_update: object,
    fast_exp: object,
    pdl: object,
    pad_slot_id: object,
    config: object,
) -> None:
    """The scalar arguments of every door (selective_state_update's, replay's): bools, the pad
    slot id an int, config a LaunchConfig or None."""
    for name, value, what in (
        ("dt_softplus", dt_softplus, "a bool"),
        ("disable_state_update", disable_state_update, "a bool"),
        ("fast_exp", fast_exp, "a bool"),
        ("pdl", pdl, "a bool"),
        ("pad_slot_id", pad_slot_id, "an int (the slot index that marks a padded row)"),
    ):
        expect_type(name, value, bool if what == "a bool" else int, what)
    if config is not None and not isinstance(config, LaunchConfig):
        raise TypeError(f"config must be a LaunchConfig or None, got {type(config).__name__}")


def _check_layout(state: torch.Tensor, x: object, cu_seqlens: object) -> _Layout:
    """The state's layout (Mamba2 [S, H, P, N] or Mamba1 [S, P, N]) and how x holds the
    requests' tokens: one a row, a token dim (Mamba2 only), or packed with cu_seqlens."""
    if state.dim() not in (3, 4):
        raise ValueError(
            f"state has shape {tuple(state.shape)}; expected [S, H, P, N] (Mamba2) or [S, P, N] (Mamba1)"
        )
    mamba1 = state.dim() == 3
    if mamba1:
        slots, headdim, dstate = state.shape
        nheads = 1
    else:
        slots, nheads, headdim, dstate = state.shape
    layout = "Mamba1" if mamba1 else "Mamba2"
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    varlen = cu_seqlens is not None
    # A token dim only in the Mamba2 layout ([B, T, H, P], sglang's): a 3-dim x beside a Mamba1
    # state would read as heads there. Mamba1 takes T tokens a request packed (cu_seqlens).
    token_dim = not mamba1 and x.dim() == 4
    if not token_dim and x.dim() != state.dim() - 1:
        raise ValueError(
            f"x has shape {tuple(x.shape)}; expected {'[B, P]' if mamba1 else '[B, H, P] or [B, T, H, P]'}"
            f" for the {layout} state of shape {tuple(state.shape)}"
        )
    if varlen and token_dim:
        raise ValueError(
            f"x has shape {tuple(x.shape)}: with cu_seqlens, x packs the tokens of every request "
            f"along its first dim ({'[total_tokens, P]' if mamba1 else '[total_tokens, H, P]'})"
        )
    if varlen:
        _expect_rank("cu_seqlens", cu_seqlens, (1,), "[B + 1], the token offsets of the requests")
        batch = cu_seqlens.shape[0] - 1
        if batch < 0:
            raise ValueError("cu_seqlens is empty; expected [B + 1] token offsets, starting at 0")
        expect("cu_seqlens", cu_seqlens, (batch + 1,), INDEX_DTYPES, state.device, "")
        steps = x.shape[0]  # the kernels see x as [1, total tokens, ...]
    elif token_dim:
        batch, steps = x.shape[0], x.shape[1]
    else:
        batch, steps = x.shape[0], 1
    if batch > MAX_BATCH:
        what = "requests" if varlen else "rows"
        raise ValueError(
            f"x has {batch} {what}; one call takes at most {MAX_BATCH} (a grid "
            "dimension of the kernel): split the batch"
        )
    return _Layout(slots, nheads, headdim, dstate, mamba1, token_dim, varlen, batch, steps)


def _check_tensors(
    lay: _Layout,
    multi: bool,
    x: torch.Tensor,
    dt: object,
    A: object,
    B: object,
    C: object,
    D: object,
    z: object,
    dt_bias: object,
    out: object,
    device: torch.device,
) -> tuple[int, ...]:
    """The shapes, dtypes and device of the tensors against the layout; returns x's shape."""
    _expect_rank(
        "B",
        B,
        (2 + lay.token_dim,) if lay.mamba1 else (3 + lay.token_dim,),
        ("[B, T, N]" if lay.token_dim else "[B, N]")
        if lay.mamba1
        else ("[B, T, G, N]" if lay.token_dim else "[B, G, N]") + f" for the {lay.name} layout",
    )
    ngroups = 1 if lay.mamba1 else B.shape[-2]
    if ngroups < 1 or lay.nheads % ngroups:
        raise ValueError(f"B has {ngroups} groups, which does not divide the {lay.nheads} heads of state")
    lead = (lay.batch, lay.steps) if lay.token_dim else (x.shape[0],)
    if lay.mamba1:  # the caller's layout: no head and group dims
        xs, bs = (*lead, lay.headdim), (*lead, lay.dstate)
        a_shape, d_shape = (lay.headdim, lay.dstate), (lay.headdim,)
    else:
        xs, bs = (*lead, lay.nheads, lay.headdim), (*lead, ngroups, lay.dstate)
        a_shape, d_shape = (lay.nheads, lay.headdim, lay.dstate), (lay.nheads, lay.headdim)
    xs_what = (
        "(tokens, heads, head dim of state)"
        if lay.varlen
        else (
            "(batch, tokens, heads, head dim of state)"
            if lay.token_dim
            else "(batch, heads, head dim of state)"
        )
    )
    expect("x", x, xs, FLOAT_DTYPES, device, xs_what)
    for name, t in (("dt", dt), ("z", z), ("out", out)):
        if t is not None or name == "dt":
            expect(name, t, xs, FLOAT_DTYPES, device, "(the shape of x)")
    expect("A", A, a_shape, FLOAT_DTYPES, device, "(heads, head dim, state dim)")
    expect(
        "B",
        B,
        bs,
        FLOAT_DTYPES,
        device,
        "(batch, groups, state dim)" if not multi else "(the leading dims of x, groups, state dim)",
    )
    expect("C", C, bs, FLOAT_DTYPES, device, "(the shape of B)")
    for name, t in (("D", D), ("dt_bias", dt_bias)):
        if t is not None:
            expect(name, t, d_shape, FLOAT_DTYPES, device, "(heads, head dim)")
    return xs


def _check_slots(
    lay: _Layout, multi: bool, src: object, dst: object, batch_order: object, device: torch.device
) -> None:
    """A single-token call's slots (one a row), the pool's size without them, batch_order."""
    if not multi:
        for name, idx in (("state_batch_indices", src), ("dst_state_batch_indices", dst)):
            if idx is not None:
                expect(name, idx, (lay.batch,), INDEX_DTYPES, device, "(one slot per batch row)")
    if src is None:
        if dst is not None:
            raise ValueError("dst_state_batch_indices needs state_batch_indices")
        if lay.slots < lay.batch:
            raise ValueError(
                f"state has {lay.slots} slots but x has batch {lay.batch}; without state_batch_indices "
                "row b uses slot b, so the pool needs at least batch slots"
            )
    if batch_order is not None:
        if multi:
            raise ValueError("batch_order is taken by single-token calls only")
        expect(
            "batch_order",
            batch_order,
            (lay.batch,),
            INDEX_DTYPES,
            device,
            "(a permutation of the batch rows)",
        )


def _check_reads(
    lay: _Layout, src: torch.Tensor | None, num_accepted: object, device: torch.device
) -> torch.Tensor | None:
    """A multi-token call's slots read: [B], or [>=B, K] with the column of each request's
    initial state (num_accepted - 1, vLLM's); returns the slots as the kernel takes them."""
    batch = lay.batch
    if src is not None:
        _expect_rank("state_batch_indices", src, (1, 2), "[B] or [>=B, K] (K slots a request)")
        if src.dim() == 1:
            expect("state_batch_indices", src, (batch,), INDEX_DTYPES, device, "(one slot per request)")
        else:
            _expect_rows("state_batch_indices", src, batch, 1, device, "(a row of slots per request)")
    if num_accepted is not None:
        if src is None or src.dim() != 2:
            raise ValueError(
                "num_accepted_tokens needs state_batch_indices of shape [>=B, K]: the "
                "initial state is read from state_batch_indices[b, num_accepted - 1]"
            )
        expect("num_accepted_tokens", num_accepted, (batch,), INDEX_DTYPES, device, "(one count per request)")
    elif src is not None and src.dim() == 2:
        src = src[:, 0] if src.shape[0] == batch else src[:batch, 0]  # the initial state: column 0
    return src


def _check_writes(
    lay: _Layout,
    dense_tokens: int | None,
    dst: object,
    buffer: object,
    buffer_idx: object,
    parents: object,
    device: torch.device,
) -> list[int]:
    """A multi-token call's writes: dst [B] (the final state) or [>=B, >=T] (each token's
    state), the intermediate-state buffer and its rows, the EAGLE parents; returns how many
    tokens each per-token write allows a request."""
    per_token = []
    if dst is not None and _check_dst(lay, dense_tokens, dst, device):
        per_token.append(dst.shape[1])
    if buffer is not None:
        per_token.append(_check_buffer(lay, dense_tokens, buffer, buffer_idx, device))
    elif buffer_idx is not None:
        raise ValueError("intermediate_state_indices needs intermediate_states")
    if parents is not None:
        _check_parents(lay, dense_tokens, parents, buffer, device)
    return per_token


def _check_dst(lay: _Layout, dense_tokens: int | None, dst: object, device: torch.device) -> bool:
    """dst_state_batch_indices of a multi-token call: [B], the slot of each request's final
    state, or [>=B, >=T], a slot for each token's state; returns whether it is per token."""
    _expect_rank(
        "dst_state_batch_indices",
        dst,
        (1, 2),
        "[B] (the slot of the final state) or [>=B, >=T] (a slot for each token's state)",
    )
    if dst.dim() == 1:
        expect("dst_state_batch_indices", dst, (lay.batch,), INDEX_DTYPES, device, "(one slot per request)")
        return False
    _expect_rows(
        "dst_state_batch_indices",
        dst,
        lay.batch,
        dense_tokens or 1,
        device,
        "(a slot for each token of each request)",
    )
    return True


def _check_buffer(
    lay: _Layout, dense_tokens: int | None, buffer: object, buffer_idx: object, device: torch.device
) -> int:
    """The intermediate-state buffer [R, T_c, H, P, N] (a row of T_c token states a request)
    and its rows intermediate_state_indices [B]; returns T_c, the tokens it allows a request."""
    nheads, headdim, dstate = lay.nheads, lay.headdim, lay.dstate
    _expect_rank(
        "intermediate_states",
        buffer,
        (5,),
        f"[R, T_c, H, P, N] = [R, T_c, {nheads}, {headdim}, {dstate}] (a row of T_c token states a request)",
    )
    r, steps_c = buffer.shape[:2]
    expect(
        "intermediate_states",
        buffer,
        (r, steps_c, nheads, headdim, dstate),
        FLOAT_DTYPES,
        device,
        "(rows, steps, heads, head dim, state dim)",
    )
    if dense_tokens is not None and steps_c < dense_tokens:
        raise ValueError(
            f"intermediate_states holds {steps_c} token states a row; the call "
            f"has {dense_tokens} tokens a request"
        )
    if buffer_idx is not None:
        expect(
            "intermediate_state_indices",
            buffer_idx,
            (lay.batch,),
            INDEX_DTYPES,
            device,
            "(a row of intermediate_states per request)",
        )
    return steps_c


def _check_parents(
    lay: _Layout, dense_tokens: int | None, parents: object, buffer: object, device: torch.device
) -> None:
    """EAGLE's parent_token_indices [B, >=T], a parent token for each token: only with the
    intermediate-state buffer, which holds the parents' states."""
    if buffer is None:
        raise ValueError(
            "parent_token_indices needs intermediate_states: a token continues "
            "from its parent's state as the buffer holds it"
        )
    _expect_rank("parent_token_indices", parents, (2,), "[B, T]")
    _expect_rows(
        "parent_token_indices",
        parents,
        lay.batch,
        dense_tokens or 1,
        device,
        "(a parent token for each token of each request)",
        exact_rows=True,
    )


def _token_count(dense_tokens: int | None, per_token: list[int], steps: int) -> tuple[int, bool]:
    """T, the most tokens of one request, and whether the kernel may unroll them: the dense
    T, else what the per-token writes allow, else (packed, no per-token writes) a loop over
    each request's count."""
    if dense_tokens is not None:
        return dense_tokens, dense_tokens <= MAX_UNROLLED_TOKENS
    if per_token:
        tokens = min(per_token)
        return tokens, tokens <= MAX_UNROLLED_TOKENS
    return steps, False


# The Philox rounds a caller may ask for: 10 is Triton's default (and Random123's); engines
# expose fewer (cache_philox_rounds) to save time.
PHILOX_ROUNDS_RANGE = (1, 64)


def check_rounding(
    rand_seed: object, philox_rounds: object, device: torch.device, targets: tuple[object, ...]
) -> None:
    """rand_seed: None, or an integer tensor of one element on the state's device, with at
    least one 16-bit tensor among the targets (the state, the intermediate-state buffer) for
    it to round; philox_rounds an int in PHILOX_ROUNDS_RANGE."""
    expect_type("philox_rounds", philox_rounds, int, "an int (Philox rounds of the random bits)")
    lo, hi = PHILOX_ROUNDS_RANGE
    if not lo <= philox_rounds <= hi:
        raise ValueError(f"philox_rounds is {philox_rounds}; expected {lo} to {hi}")
    if rand_seed is None:
        return
    if not isinstance(rand_seed, torch.Tensor):
        raise TypeError(
            f"rand_seed must be a torch.Tensor (int64, one element) or None, got {type(rand_seed).__name__}"
        )
    if rand_seed.dtype not in INDEX_DTYPES:
        raise TypeError(f"rand_seed has dtype {rand_seed.dtype}; expected int64 or int32")
    if rand_seed.numel() != 1:
        raise ValueError(f"rand_seed has shape {tuple(rand_seed.shape)}; expected one element ([1] or [])")
    if rand_seed.device != device:
        raise ValueError(f"rand_seed is on {rand_seed.device}; expected {device}, the device of state")
    dtypes = [t.dtype for t in targets if isinstance(t, torch.Tensor)]
    if all(d == torch.float32 for d in dtypes):
        raise ValueError(
            "rand_seed is given but every state store is float32 (state"
            + (", intermediate_states" if len(dtypes) > 1 else "")
            + "): stochastic rounding applies to float16 and bfloat16 stores only"
        )


def _expect_rows(
    name: str,
    t: torch.Tensor,
    batch: int,
    columns: int,
    device: torch.device,
    what: str,
    exact_rows: bool = False,
) -> None:
    """A 2-D index tensor with at least (or exactly) batch rows and at least columns columns."""
    if t.dtype not in INDEX_DTYPES:
        expect(name, t, tuple(t.shape), INDEX_DTYPES, device, what)
    rows_ok = t.shape[0] == batch if exact_rows else t.shape[0] >= batch
    if not rows_ok or t.shape[1] < columns:
        rows = f"{batch}" if exact_rows else f">={batch}"
        raise ValueError(f"{name} has shape {tuple(t.shape)}; expected [{rows}, >={columns}] {what}")
    expect(name, t, tuple(t.shape), INDEX_DTYPES, device, what)


def _unsq(t: torch.Tensor | None, dim: int) -> torch.Tensor | None:
    """Insert a dim into an optional tensor."""
    return None if t is None else t.unsqueeze(dim)


def validate_slots(name: str, idx: torch.Tensor, slots: int, pad_slot_id: int) -> None:
    """Every entry of idx inside the state pool [0, slots) or pad_slot_id (synchronizes)."""
    values = idx.cpu()  # synchronizes: only on request
    bad = ((values < 0) | (values >= slots)) & (values != pad_slot_id)
    if bool(bad.any()):
        where = tuple(int(i) for i in bad.nonzero()[0])
        at = ", ".join(map(str, where))
        raise ValueError(
            f"{name}[{at}] = {int(values[where])} is outside the state pool [0, {slots}) "
            f"and is not pad_slot_id ({pad_slot_id})"
        )


def validate_permutation(order: torch.Tensor) -> None:
    """order must hold each of 0 .. n - 1 once (synchronizes)."""
    values = order.cpu()  # synchronizes: only on request
    n = len(values)
    if not torch.equal(values.sort().values, torch.arange(n, dtype=values.dtype)):
        in_range = (values >= 0) & (values < n)
        seen = torch.bincount(values.where(in_range, n), minlength=n + 1)
        missing = int((seen[:n] == 0).nonzero()[0, 0])
        raise ValueError(f"batch_order is not a permutation of the {n} batch rows: row {missing} is missing")


def validate_cu_seqlens(
    cu_seqlens: torch.Tensor, total: int | None, most: int | None, bound: str = ""
) -> torch.Tensor:
    """The packed layout's offsets (synchronizes): from 0, non-decreasing, ending at total (the
    token count of x; None where the call has no x, as replay_advance), and no request longer
    than most (bound: what sets it, for the message). Returns each request's token count,
    int64 [B]."""
    cu = cu_seqlens.cpu().long()  # synchronizes: only on request
    if int(cu[0]) != 0:
        raise ValueError(f"cu_seqlens[0] = {int(cu[0])}; expected 0")
    lengths = cu[1:] - cu[:-1]
    if bool((lengths < 0).any()):
        b = int((lengths < 0).nonzero()[0, 0])
        raise ValueError(
            f"cu_seqlens is not monotonic: cu_seqlens[{b + 1}] = {int(cu[b + 1])} "
            f"< cu_seqlens[{b}] = {int(cu[b])}"
        )
    if total is not None and int(cu[-1]) != total:
        raise ValueError(f"cu_seqlens ends at {int(cu[-1])}; expected the token count of x, {total}")
    if most is not None and len(lengths) and int(lengths.max()) > most:
        b = int(lengths.argmax())
        raise ValueError(f"cu_seqlens gives request {b} {int(lengths[b])} tokens; {bound}")
    return lengths


def validate_parents(parents: torch.Tensor, lengths: torch.Tensor, tokens: int) -> None:
    """EAGLE parents as sglang's kernel reads them (synchronizes): token t > 0 of a request
    continues from the buffer's state of token parent when 0 <= parent < T (T = tokens, the
    kernel's), else (parent < 0 or >= T) from token t - 1's. So every entry is accepted but one
    in [t, T): that would read a buffer row this call has not written yet (a state left by an
    earlier call). lengths: each request's token count; token 0's entry is never read."""
    values = parents.cpu().long()  # synchronizes: only on request
    width = values.shape[1]
    t = torch.arange(width)[None, :]
    if len(lengths) and int(lengths.max()) > width:
        b = int(lengths.argmax())
        raise ValueError(
            f"parent_token_indices has {width} columns; request {b} has {int(lengths[b])} tokens"
        )
    live = (t < lengths[:, None]) & (t > 0)
    bad = live & (values >= t) & (values < tokens)
    if bool(bad.any()):
        b, k = (int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"parent_token_indices[{b}, {k}] = {int(values[b, k])}; expected a token before {k} "
            f"(0 to {k - 1}), or an entry outside [0, {tokens}) to continue from token {k - 1}: "
            f"token {int(values[b, k])}'s state is not written yet when token {k} reads it"
        )


def _validate_single_token(
    slots: int,
    pad_slot_id: int,
    src: torch.Tensor | None,
    dst: torch.Tensor | None,
    batch_order: torch.Tensor | None,
) -> None:
    """The value checks of a single-token call (synchronizes; only on request)."""
    for name, idx in (("state_batch_indices", src), ("dst_state_batch_indices", dst)):
        if idx is not None:
            validate_slots(name, idx, slots, pad_slot_id)
    if batch_order is not None:
        validate_permutation(batch_order)


def _validate_multi_token(
    call: Call, lay: _Layout, pad_slot_id: int, src_given: torch.Tensor | None, per_token: list[int]
) -> None:
    """The value checks of a checked multi-token call (synchronizes; only on request). src_given:
    state_batch_indices as the caller gave it ([B] or [>=B, K]; call.src_idx is the column
    read); per_token: what each per-token write allows a request (_check_writes)."""
    batch, slots = call.batch, lay.slots
    if src_given is not None:
        validate_slots("state_batch_indices", src_given[:batch], slots, pad_slot_id)
    if call.dst_idx is not None:
        validate_slots("dst_state_batch_indices", call.dst_idx[:batch], slots, pad_slot_id)
    lengths = None
    if call.cu_seqlens is not None:
        lengths = validate_cu_seqlens(
            call.cu_seqlens,
            lay.steps,  # the packed total of x
            min(per_token) if per_token else None,
            "the per-token state writes (dst_state_batch_indices columns, intermediate_states "
            f"steps) hold {min(per_token) if per_token else 0}",
        )
    if call.num_accepted is not None:
        columns = src_given.shape[1]
        na = call.num_accepted.cpu()
        bad = (na < 0) | (na > columns)
        if bool(bad.any()):
            b = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"num_accepted_tokens[{b}] = {int(na[b])} is outside [0, {columns}], the "
                "columns of state_batch_indices"
            )
    if call.buffer is not None:
        _validate_buffer_rows(call.buffer, call.buffer_idx, call.src_idx, pad_slot_id, batch)
    if call.parents is not None:
        if lengths is None:  # dense: every request has T tokens
            lengths = torch.full((batch,), lay.steps)
        validate_parents(call.parents, lengths, call.tokens)


def _validate_buffer_rows(
    buffer: torch.Tensor,
    buffer_idx: torch.Tensor | None,
    src: torch.Tensor | None,
    pad_slot_id: int,
    batch: int,
) -> None:
    """Each request's row of intermediate_states inside it, or pad_slot_id (synchronizes)."""
    rows = buffer.shape[0]
    where = buffer_idx if buffer_idx is not None else src
    name = "intermediate_state_indices" if buffer_idx is not None else "state_batch_indices"
    if where is not None:
        values = where[:batch].cpu()
        bad = ((values < 0) | (values >= rows)) & (values != pad_slot_id)
        if bool(bad.any()):
            b = int(bad.nonzero()[0, 0])
            raise ValueError(
                f"{name}[{b}] = {int(values[b])} is outside the {rows} rows of "
                f"intermediate_states and is not pad_slot_id ({pad_slot_id})"
            )
    elif batch > rows:
        raise ValueError(
            f"intermediate_states has {rows} rows; without indices request b "
            f"uses row b, so it needs at least {batch}"
        )
