"""Model-like inputs of selective_state_update (../shared/MEASURING.md, "The method").

As a Mamba2 layer hands them to the kernel in decode: x, B and C are strided views of ONE
tensor [B, H*P + 2*G*N] (they come out of the in-projection and the conv together); dt is
[B, H] broadcast over P (stride 0); A is [H] broadcast to [H, P, N]; D and dt_bias are [H]
broadcast to [H, P]; z is None; dt_softplus is on; out is preallocated. The state pool holds
K slot sets of B slots each, a random permutation of the pool cut into rows of B, so K calls
read K disjoint slot sets (the timer's cold-L2 rotation).

Values are random, never zeros: x, B, C, dt, D and the state are standard normal; A is
-uniform(1, 16), the range of Mamba2's A_init_range; dt_bias is uniform(-4, -3), so that
softplus(dt_bias) is 0.02 to 0.05, inside the [0.001, 0.1] Mamba2 initialises dt to.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ssmdecode.bench.presets import Shape

__all__ = ["DecodeInputs", "make_inputs", "make_shape_inputs"]


@dataclass
class DecodeInputs:
    """The arguments of K calls of selective_state_update on one state pool.

    state: [S, H, P, N], S >= K*B. x: [B, H, P]; dt: [B, H, P] (stride 0 over P when tied);
    A: [H, P, N]; B, C: [B, G, N]; D, dt_bias: [H, P]; out: [B, H, P] in x's dtype.
    slot_sets: [K, B] int32 (rows 16-byte aligned); row i is the state_batch_indices of call
        i, the rows disjoint.
    """

    state: torch.Tensor
    x: torch.Tensor
    dt: torch.Tensor
    A: torch.Tensor
    B: torch.Tensor
    C: torch.Tensor
    D: torch.Tensor
    dt_bias: torch.Tensor
    out: torch.Tensor
    slot_sets: torch.Tensor

    @property
    def rotation(self) -> int:
        """K, the number of disjoint slot sets."""
        return self.slot_sets.shape[0]

    def kwargs(
        self, i: int = 0, state: torch.Tensor | None = None, out: torch.Tensor | None = None
    ) -> dict[str, object]:
        """Keyword arguments of selective_state_update for call i (slot set i mod K), on this
        state pool and out unless others are given."""
        return {
            "state": self.state if state is None else state,
            "x": self.x, "dt": self.dt, "A": self.A, "B": self.B, "C": self.C,
            "D": self.D, "z": None, "dt_bias": self.dt_bias, "dt_softplus": True,
            "state_batch_indices": self.slot_sets[i % self.rotation],
            "out": self.out if out is None else out,
        }


def make_inputs(
    batch: int,
    nheads: int,
    headdim: int,
    dstate: int,
    ngroups: int,
    state_dtype: torch.dtype,
    dtype: torch.dtype,
    pool: int,
    device: torch.device | str,
    seed: int,
    tie: bool = True,
) -> DecodeInputs:
    """Random model-like inputs for one decode step of batch requests on a pool of slots.

    pool // batch disjoint slot sets are made (at least one, so pool >= batch). tie=False
    makes every tensor dense and contiguous instead ([B, H, P] dt, [H, P, N] A, ...), the
    layout a generic caller may pass. The same seed on the same device and torch version
    gives the same values.
    """
    if batch < 1 or pool < batch:
        raise ValueError(f"need 1 <= batch <= pool, got batch {batch}, pool {pool}")
    if nheads % ngroups:
        raise ValueError(f"{ngroups} groups do not divide {nheads} heads")
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed)

    def normal(*shape: int, dt: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=device, dtype=dt)

    def uniform(low: float, high: float, *shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=gen, device=device) * (high - low) + low

    H, P, N, G = nheads, headdim, dstate, ngroups
    state = normal(pool, H, P, N, dt=state_dtype)
    if tie:
        xbc = normal(batch, H * P + 2 * G * N, dt=dtype)
        x = xbc[:, : H * P].view(batch, H, P)
        B = xbc[:, H * P : H * P + G * N].view(batch, G, N)
        C = xbc[:, H * P + G * N :].view(batch, G, N)
        dt = normal(batch, H, dt=dtype)[:, :, None].expand(batch, H, P)
        A = (-uniform(1.0, 16.0, H))[:, None, None].expand(H, P, N)
        D = normal(H)[:, None].expand(H, P)
        dt_bias = uniform(-4.0, -3.0, H)[:, None].expand(H, P)
    else:
        x = normal(batch, H, P, dt=dtype)
        B = normal(batch, G, N, dt=dtype)
        C = normal(batch, G, N, dt=dtype)
        dt = normal(batch, H, P, dt=dtype)
        A = -uniform(1.0, 16.0, H, P, N)
        D = normal(H, P)
        dt_bias = uniform(-4.0, -3.0, H, P)
    rotation = pool // batch
    perm = torch.randperm(pool, generator=gen, device=device)
    # Rows padded to 16 bytes: Triton specializes pointer arguments on 16-byte alignment, so
    # every call's index row gets the same compiled kernel.
    row = -(-batch // 4) * 4
    slot_sets = torch.zeros(rotation, row, dtype=torch.int32, device=device)[:, :batch]
    slot_sets.copy_(perm[: rotation * batch].view(rotation, batch))
    out = torch.empty(batch, H, P, dtype=dtype, device=device)
    return DecodeInputs(state, x, dt, A, B, C, D, dt_bias, out, slot_sets)


def make_shape_inputs(
    shape: Shape, batch: int, pool: int, device: torch.device | str, seed: int, tie: bool = True
) -> DecodeInputs:
    """make_inputs for a Shape."""
    return make_inputs(batch, shape.nheads, shape.headdim, shape.dstate, shape.ngroups,
                       shape.state_dtype, shape.dtype, pool, device, seed, tie)
