"""The inputs of selective_state_update, for the tests and the tools alike (one builder).

By default as a Mamba2 layer hands them to the kernel in decode (docs/measuring.md, "The
method"): x, B and C are strided views of ONE tensor [B, H*P + 2*G*N] (they come out of the
in-projection and the conv together); dt is [B, H] broadcast over P (stride 0); A is [H]
broadcast to [H, P, N]; D and dt_bias are [H] broadcast to [H, P]; z is None; dt_softplus is
on; out is preallocated. The state pool holds K slot sets of B slots each, a random
permutation of the pool cut into rows of B, so K calls read K disjoint slot sets (the timer's
cold-L2 rotation).

Options cover what the tests vary: dense untied tensors (tie=False), no D, z or dt_bias, no
softplus, int64 or no slot indices, pad rows, separate destination slots (dst), extra slots,
the Mamba1 layout (H = G = 1 squeezed away), a token dim T (x, dt, z, out [B, T, H, P]; B, C
[B, T, G, N]), any state and input dtypes, on the CPU or a GPU.

Values are random, never zeros: x, B, C, dt, D, z and the state are standard normal; A is
-uniform(1, 16), the range of Mamba2's A_init_range; dt_bias is uniform(-4, -3), so that
softplus(dt_bias) is 0.02 to 0.05, inside the [0.001, 0.1] Mamba2 initialises dt to; without
softplus, dt is uniform(0.001, 0.1) and dt_bias uniform(0, 0.01). The same seed on the same
device and torch version gives the same values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ssmdecode.shapes import Shape

__all__ = [
    "PAD_SLOT_ID",
    "SLOT_MODES",
    "DecodeInputs",
    "make_inputs",
    "make_shape_inputs",
    "slot_sets_by_mode",
]

PAD_SLOT_ID = -1  # selective_state_update's default pad_slot_id


@dataclass
class DecodeInputs:
    """The arguments of K calls of selective_state_update on one state pool.

    Mamba2 layout (T: the token dim, when there is one):
    state: [S, H, P, N], S >= K*B. x, dt, z, out: [B, (T,) H, P] (dt stride 0 over P when
        tied); A: [H, P, N]; B, C: [B, (T,) G, N]; D, dt_bias: [H, P]; out in x's dtype.
    Mamba1 layout: the same without the H (and G) dims.
    slot_sets: [K, B] (rows 16-byte aligned), row i the state_batch_indices of call i, the
        rows disjoint; None: no indices (request b reads slot b).
    dst_slot_sets: [K, B], row i the dst_state_batch_indices of call i, disjoint from every
        slot set; None: each call writes the slots it reads.
    """

    state: torch.Tensor
    x: torch.Tensor
    dt: torch.Tensor
    A: torch.Tensor
    B: torch.Tensor
    C: torch.Tensor
    D: torch.Tensor | None
    dt_bias: torch.Tensor | None
    out: torch.Tensor
    slot_sets: torch.Tensor | None
    z: torch.Tensor | None = None
    dt_softplus: bool = True
    dst_slot_sets: torch.Tensor | None = None

    @property
    def rotation(self) -> int:
        """K, the number of disjoint slot sets (1 without indices)."""
        return 1 if self.slot_sets is None else self.slot_sets.shape[0]

    def kwargs(
        self, i: int = 0, state: torch.Tensor | None = None, out: torch.Tensor | None = None
    ) -> dict[str, object]:
        """Keyword arguments of selective_state_update for call i (slot set i mod K), on this
        state pool and out unless others are given."""
        kwargs: dict[str, object] = {
            "state": self.state if state is None else state,
            "x": self.x,
            "dt": self.dt,
            "A": self.A,
            "B": self.B,
            "C": self.C,
            "D": self.D,
            "z": self.z,
            "dt_bias": self.dt_bias,
            "dt_softplus": self.dt_softplus,
        }
        if self.slot_sets is not None:
            kwargs["state_batch_indices"] = self.slot_sets[i % self.rotation]
        if self.dst_slot_sets is not None:
            kwargs["dst_state_batch_indices"] = self.dst_slot_sets[i % self.rotation]
        kwargs["out"] = self.out if out is None else out
        return kwargs


def make_inputs(
    batch: int,
    nheads: int,
    headdim: int,
    dstate: int,
    ngroups: int = 1,
    state_dtype: torch.dtype = torch.float32,
    dtype: torch.dtype = torch.bfloat16,
    pool: int | None = None,
    device: torch.device | str = "cpu",
    seed: int = 0,
    tie: bool = True,
    *,
    rotation: int | None = None,
    tokens: int | None = None,
    indices: torch.dtype | None = torch.int32,
    pad_rows: Sequence[int] = (),
    dst: bool = False,
    has_D: bool = True,
    has_z: bool = False,
    has_dt_bias: bool = True,
    softplus: bool = True,
    layout: str = "mamba2",
    params: str = "tied",
) -> DecodeInputs:
    """Random inputs for one decode step of batch requests on a pool of slots.

    pool: slots in the state pool (default: what the slot sets need). rotation: K disjoint
    slot sets (default: as many as the pool holds, at least one, so pool >= batch; twice the
    slots each with dst). tie=False makes every tensor dense and contiguous instead ([B, H, P]
    dt, [H, P, N] A, ...), the layout a generic caller may pass. tokens: T, a token dim after
    the batch dim. indices: the dtype of the slot indices, or None for none (request b reads
    slot b). pad_rows: rows whose slot is PAD_SLOT_ID in every set. dst: separate destination
    slots. has_D, has_z, has_dt_bias: whether D, z and dt_bias are given (z is not by
    default: Mamba2 gates in its norm). layout: "mamba2", or "mamba1" (nheads = ngroups = 1,
    whose dims are dropped). params: "tied", or "dense": with tie, A [H, P, N], D and dt_bias
    [H, P] as contiguous tensors of the same values (dt and the rest stay as with tie), the
    layout of an engine or a Mamba1-style caller that materializes A.
    """
    if params not in ("tied", "dense"):
        raise ValueError(f"params {params!r}: expected 'tied' or 'dense'")
    if batch < 1:
        raise ValueError(f"need batch >= 1, got {batch}")
    sets_per = 2 if dst else 1  # slot sets a call needs: read, and written where dst
    if rotation is None:
        rotation = max(1, (pool or 0) // (sets_per * batch))
    if pool is None:
        pool = sets_per * rotation * batch
    if rotation < 1 or pool < sets_per * rotation * batch:
        raise ValueError(
            f"need {sets_per} x rotation x batch <= pool, got batch {batch}, rotation {rotation}, pool {pool}"
        )
    if nheads % ngroups:
        raise ValueError(f"{ngroups} groups do not divide {nheads} heads")
    if layout not in ("mamba2", "mamba1") or (layout == "mamba1" and (nheads, ngroups) != (1, 1)):
        raise ValueError(f"layout {layout!r}: expected 'mamba2', or 'mamba1' with one head and group")
    if indices is None and (pad_rows or dst):
        raise ValueError("pad rows and dst slots need slot indices")
    if tokens is not None and tokens < 1:
        raise ValueError(f"tokens must be None or >= 1, got {tokens}")
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed)

    def normal(*shape: int, dt: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=device, dtype=dt)

    def uniform(low: float, high: float, *shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=gen, device=device) * (high - low) + low

    def draw_dt(*shape: int) -> torch.Tensor:
        # Without softplus the caller's dt is already a step size: positive, in Mamba2's range
        # (a negative dt' would make exp(A dt') grow the state without bound).
        return normal(*shape, dt=dtype) if softplus else uniform(1e-3, 1e-1, *shape).to(dtype)

    def draw_dt_bias(*shape: int) -> torch.Tensor:
        return uniform(-4.0, -3.0, *shape) if softplus else uniform(0.0, 1e-2, *shape)

    H, P, N, G = nheads, headdim, dstate, ngroups
    lead = (batch,) if tokens is None else (batch, tokens)
    state = normal(pool, H, P, N, dt=state_dtype)
    if tie:
        xbc = normal(*lead, H * P + 2 * G * N, dt=dtype)
        x = xbc[..., : H * P].view(*lead, H, P)
        B = xbc[..., H * P : H * P + G * N].view(*lead, G, N)
        C = xbc[..., H * P + G * N :].view(*lead, G, N)
        dt = draw_dt(*lead, H)[..., None].expand(*lead, H, P)
        A = (-uniform(1.0, 16.0, H))[:, None, None].expand(H, P, N)
        D = normal(H)[:, None].expand(H, P)
        dt_bias = draw_dt_bias(H)[:, None].expand(H, P)
        if params == "dense":
            A, D, dt_bias = A.contiguous(), D.contiguous(), dt_bias.contiguous()
    else:
        x = normal(*lead, H, P, dt=dtype)
        B = normal(*lead, G, N, dt=dtype)
        C = normal(*lead, G, N, dt=dtype)
        dt = draw_dt(*lead, H, P)
        A = -uniform(1.0, 16.0, H, P, N)
        D = normal(H, P)
        dt_bias = draw_dt_bias(H, P)
    slot_sets = dst_slot_sets = None
    if indices is not None:
        perm = torch.randperm(pool, generator=gen, device=device)
        # Rows padded to 16 bytes: Triton specializes pointer arguments on 16-byte alignment,
        # so every call's index row gets the same compiled kernel.
        per_row = 16 // torch.empty(0, dtype=indices).element_size()
        width = -(-batch // per_row) * per_row

        def sets(first: int) -> torch.Tensor:
            rows = torch.zeros(rotation, width, dtype=indices, device=device)[:, :batch]
            rows.copy_(perm[first : first + rotation * batch].view(rotation, batch))
            return rows

        slot_sets = sets(0)
        slot_sets[:, list(pad_rows)] = PAD_SLOT_ID
        dst_slot_sets = sets(rotation * batch) if dst else None
    z = normal(*lead, H, P, dt=dtype) if has_z else None  # drawn last: the rest as without z
    if layout == "mamba1":  # one head and one group, dropped
        state, A, D, dt_bias = state[:, 0], A[0], D[0], dt_bias[0]
        x, dt, B, C = (t.select(-2, 0) for t in (x, dt, B, C))
        z = z.select(-2, 0) if z is not None else None
    out = torch.empty(x.shape, dtype=dtype, device=device)
    return DecodeInputs(
        state=state,
        x=x,
        dt=dt,
        A=A,
        B=B,
        C=C,
        D=D if has_D else None,
        dt_bias=dt_bias if has_dt_bias else None,
        out=out,
        slot_sets=slot_sets,
        z=z,
        dt_softplus=softplus,
        dst_slot_sets=dst_slot_sets,
    )


def make_shape_inputs(
    shape: Shape, batch: int, device: torch.device | str, seed: int, **options: object
) -> DecodeInputs:
    """make_inputs for a Shape; options as make_inputs takes them (pool, rotation, tie, ...)."""
    return make_inputs(
        batch,
        shape.nheads,
        shape.headdim,
        shape.dstate,
        shape.ngroups,
        shape.state_dtype,
        shape.dtype,
        device=device,
        seed=seed,
        **options,
    )


SLOT_MODES = ("random", "sorted", "contiguous")  # with "padded": slot_sets_by_mode's keys


def slot_sets_by_mode(slot_sets: torch.Tensor) -> dict[str, torch.Tensor]:
    """The K disjoint slot sets [K, B] of a pool four ways: as drawn (random, the bench's),
    each set ascending (sorted), consecutive (call i: slots i*B .. i*B+B-1, so the state it
    touches is one flat block, as the ceiling's), or as drawn with the second half of each
    set's rows padding (padded: PAD_SLOT_ID, as an engine pads a batch to its graph's size)."""
    padded = slot_sets.clone()
    padded[:, (slot_sets.shape[1] + 1) // 2 :] = PAD_SLOT_ID
    return {
        "random": slot_sets.clone(),
        "sorted": slot_sets.sort(dim=1).values,
        "contiguous": torch.arange(slot_sets.numel(), device=slot_sets.device, dtype=slot_sets.dtype).view(
            slot_sets.shape
        ),
        "padded": padded,
    }
